// The simd128 instance of the matrix-product kernels (built with its own flags).
#include "kernels/simd/matmul_simd.hpp"

namespace entgraph::detail {
const MatmulKernels<float> kSimd128Matmul = simd::Matmul<xsimd::sse4_1>::table(CpuIsa::simd128);
}  // namespace entgraph::detail
