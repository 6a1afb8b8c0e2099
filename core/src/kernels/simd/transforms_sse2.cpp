// The sse2 instance of the row-transform kernels (built with its own flags).
#include "kernels/simd/transforms_simd.hpp"

namespace entgraph::detail {
const TransformKernels kSse2Kernels = simd::Kernels<xsimd::sse2>::table(CpuIsa::sse2);
}  // namespace entgraph::detail
