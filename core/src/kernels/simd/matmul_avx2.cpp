// The avx2 instance of the matrix-product kernels (built with its own flags).
#include "kernels/simd/matmul_simd.hpp"

namespace entgraph::detail {
const MatmulKernels<float> kAvx2Matmul = simd::Matmul<xsimd::avx2>::table(CpuIsa::avx2);
}  // namespace entgraph::detail
