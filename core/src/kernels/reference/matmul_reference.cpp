// The scalar reference of the matrix-product kernels: plain loops that
// accumulate in double, for any T. It is the oracle of the SIMD tables and the
// only path of the double API.
#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>

#include "entgraph/error.hpp"
#include "kernels/matmul_kernels.hpp"

namespace entgraph::detail {
namespace {

// Columns of C handled per pass, so that each row of B is read contiguously
// into a small double accumulator on the stack.
constexpr std::size_t kColumns = 256;

// op(A)(i, p) = a[i * a_row + p * a_col].
template <class T>
void gemm(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t a_row, std::size_t a_col,
          const T* b, std::size_t ldb, T* c, std::size_t ldc, bool accumulate, bool skip_zero_a) {
  double acc[kColumns];
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j0 = 0; j0 < n; j0 += kColumns) {
      const std::size_t nj = std::min(kColumns, n - j0);
      std::fill(acc, acc + nj, 0.0);
      for (std::size_t p = 0; p < k; ++p) {
        const double x = static_cast<double>(a[i * a_row + p * a_col]);
        if (skip_zero_a && x == 0.0) continue;
        const T* brow = b + p * ldb + j0;
        for (std::size_t j = 0; j < nj; ++j) acc[j] += x * static_cast<double>(brow[j]);
      }
      T* crow = c + i * ldc + j0;
      for (std::size_t j = 0; j < nj; ++j) {
        const double v = static_cast<double>(alpha) * acc[j];
        crow[j] = static_cast<T>(accumulate ? static_cast<double>(crow[j]) + v : v);
      }
    }
  }
}

template <class T>
void gemm_nn(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda, const T* b,
             std::size_t ldb, T* c, std::size_t ldc, bool accumulate, bool skip_zero_a) {
  gemm(m, n, k, alpha, a, lda, 1, b, ldb, c, ldc, accumulate, skip_zero_a);
}

template <class T>
void gemm_tn(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda, const T* b,
             std::size_t ldb, T* c, std::size_t ldc, bool accumulate, bool skip_zero_a) {
  gemm(m, n, k, alpha, a, 1, lda, b, ldb, c, ldc, accumulate, skip_zero_a);
}

template <class T>
void gemm_nt_sampled(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda, const T* b,
                     std::size_t ldb, const T* sample, std::size_t lds, T* c, std::size_t ldc) {
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (sample[i * lds + j] == T(0)) {
        c[i * ldc + j] = T(0);
        continue;
      }
      double s = 0.0;
      for (std::size_t p = 0; p < k; ++p)
        s += static_cast<double>(a[i * lda + p]) * static_cast<double>(b[j * ldb + p]);
      c[i * ldc + j] = static_cast<T>(static_cast<double>(alpha) * s);
    }
  }
}

template <class T>
void gather_dot(const T* x, const T* b, std::size_t ldb, const std::uint32_t* idx, std::size_t count, std::size_t k,
                T alpha, T* out) {
  for (std::size_t c = 0; c < count; ++c) {
    const T* row = b + static_cast<std::size_t>(idx[c]) * ldb;
    double s = 0.0;
    for (std::size_t p = 0; p < k; ++p) s += static_cast<double>(x[p]) * static_cast<double>(row[p]);
    out[c] = static_cast<T>(static_cast<double>(alpha) * s);
  }
}

template <class T>
void gather_axpy(const T* w, const T* b, std::size_t ldb, const std::uint32_t* idx, std::size_t count, std::size_t n,
                 T* out) {
  for (std::size_t j = 0; j < n; ++j) {
    double s = 0.0;
    for (std::size_t c = 0; c < count; ++c)
      if (w[c] != T(0)) s += static_cast<double>(w[c]) * static_cast<double>(b[static_cast<std::size_t>(idx[c]) * ldb + j]);
    out[j] = static_cast<T>(s);
  }
}

// Reads every entry: the group bounds are only a licence to skip.
template <class T>
std::size_t select_above(const T* x, const T*, std::size_t from, std::size_t to, T threshold, T ceiling,
                         std::uint32_t* idx) {
  std::size_t count = 0;
  for (std::size_t j = from; j < to; ++j)
    if (x[j] > threshold && x[j] <= ceiling) idx[count++] = static_cast<std::uint32_t>(j);
  return count;
}

template <class T>
T max_value(const T* x, std::size_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (std::size_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

template <class T>
const MatmulKernels<T> kReferenceMatmul = {CpuIsa::reference, &gemm_nn<T>,       &gemm_tn<T>,
                                           &gemm_nt_sampled<T>, &gather_dot<T>,   &gather_axpy<T>,
                                           &select_above<T>,    &max_value<T>};

}  // namespace

template <class T>
const MatmulKernels<T>& reference_matmul_kernels() {
  return kReferenceMatmul<T>;
}
template const MatmulKernels<float>& reference_matmul_kernels<float>();
template const MatmulKernels<double>& reference_matmul_kernels<double>();

// The selector lives beside the reference, the one table that always exists.
const MatmulKernels<float>& matmul_kernels(CpuIsa isa) {
  switch (isa) {
#if defined(ENTGRAPH_HAVE_X86)
    case CpuIsa::sse2:
      return kSse2Matmul;
    case CpuIsa::avx2:
      return kAvx2Matmul;
    case CpuIsa::avx512:
      return kAvx512Matmul;
#endif
#if defined(ENTGRAPH_HAVE_SIMD128)
    case CpuIsa::simd128:
      return kSimd128Matmul;
#endif
    case CpuIsa::reference:
      return kReferenceMatmul<float>;
    default:
      throw Error(at_op("matmul_kernels") + "isa '" + cpu_isa_name(isa) + "' is not compiled in");
  }
}

}  // namespace entgraph::detail
