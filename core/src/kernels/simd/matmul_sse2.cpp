// The sse2 instance of the matrix-product kernels (built with its own flags).
#include "kernels/simd/matmul_simd.hpp"

namespace entgraph::detail {
const MatmulKernels<float> kSse2Matmul = simd::Matmul<xsimd::sse2>::table(CpuIsa::sse2);
}  // namespace entgraph::detail
