// The avx2 instance of the row-transform kernels (built with its own flags).
#include "kernels/simd/transforms_simd.hpp"

namespace entgraph::detail {
const TransformKernels kAvx2Kernels = simd::Kernels<xsimd::avx2>::table(CpuIsa::avx2);
}  // namespace entgraph::detail
