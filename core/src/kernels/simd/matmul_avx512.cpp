// The avx512 instance of the matrix-product kernels (built with its own flags).
#include "kernels/simd/matmul_simd.hpp"

namespace entgraph::detail {
const MatmulKernels<float> kAvx512Matmul = simd::Matmul<xsimd::avx512bw>::table(CpuIsa::avx512);
}  // namespace entgraph::detail
