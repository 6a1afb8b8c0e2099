// The simd128 instance of the row-transform kernels (built with its own flags).
#include "kernels/simd/transforms_simd.hpp"

namespace entgraph::detail {
const TransformKernels kSimd128Kernels = simd::Kernels<xsimd::sse4_1>::table(CpuIsa::simd128);
}  // namespace entgraph::detail
