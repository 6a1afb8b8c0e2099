// The avx512 instance of the row-transform kernels (built with its own flags).
#include "kernels/simd/transforms_simd.hpp"

namespace entgraph::detail {
const TransformKernels kAvx512Kernels = simd::Kernels<xsimd::avx512bw>::table(CpuIsa::avx512);
}  // namespace entgraph::detail
