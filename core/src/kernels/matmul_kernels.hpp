// entgraph internal: the kernel table of the small dense matrix products that
// attention is made of (S = Q K^T, O = P V and their backward).
//
// One table per backend, filled once: the scalar reference (any T; the only
// path of the double API and the float path of CpuIsa::reference) and one xsimd
// table per instruction set for float. Callers pick a table with
// matmul_kernels(cpu_isa()). Kernels never throw and never allocate.
//
// All matrices are row-major with a leading stride (elements between rows).
// With accumulate = false, C is overwritten (its old content, even NaN, is
// ignored); with accumulate = true the product is added to C.
//
// skip_zero_a: entries of A that are exactly 0 contribute nothing and are not
// visited. Attention weights of sparse transforms (sparsemax, entmax, top-k,
// masks) are mostly zero, so O = P V then costs O(nnz(P) dv), not O(n m dv).
// The result is the same as without skipping (up to the sign of zero).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "entgraph/runtime.hpp"

namespace entgraph::detail {

// C (m x n) = alpha * A B [+ C], A m x k (lda), B k x n (ldb).
template <class T>
using GemmNN = void (*)(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda, const T* b,
                        std::size_t ldb, T* c, std::size_t ldc, bool accumulate, bool skip_zero_a);

// C (m x n) = alpha * A^T B [+ C], A stored k x m (lda), B k x n (ldb).
template <class T>
using GemmTN = GemmNN<T>;

// Sampled C = A B^T: C(i, j) = alpha * <A_i, B_j> where sample(i, j) != 0, and
// exactly 0 elsewhere. A m x k (lda), B n x k (ldb), sample m x n (lds).
// The backward needs dP = dO V^T only where P > 0.
template <class T>
using GemmNTSampled = void (*)(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
                               const T* b, std::size_t ldb, const T* sample, std::size_t lds, T* c, std::size_t ldc);

// Gathered dot products, for attention on a graph: out[c] = alpha * <x, B_idx[c]>
// for c < count, x and the rows of B of length k (B's rows ldb apart).
template <class T>
using GatherDot = void (*)(const T* x, const T* b, std::size_t ldb, const std::uint32_t* idx, std::size_t count,
                           std::size_t k, T alpha, T* out);

// Gathered weighted row sum: out[0..n) = sum over c < count of w[c] * B_idx[c]
// (overwrites out; entries with w[c] == 0 are skipped).
template <class T>
using GatherAxpy = void (*)(const T* w, const T* b, std::size_t ldb, const std::uint32_t* idx, std::size_t count,
                            std::size_t n, T* out);

// Threshold selection over one row of bounds, for attention's scans: writes
// every j in [from, to) with threshold < x[j] <= ceiling (NaN never is), in
// increasing order, into idx (room for to - from: entries from the count on
// may be overwritten), and returns their count. group_max, when not null,
// holds for each group g of kSelectGroup keys [64 g, 64 g + 64) an upper
// bound of its x (its maximum): a group whose bound is not above the
// threshold may be skipped unread. The whole range in one call keeps the
// scan free of a call and a branch per group.
inline constexpr std::size_t kSelectGroup = 64;
template <class T>
using SelectAbove = std::size_t (*)(const T* x, const T* group_max, std::size_t from, std::size_t to, T threshold,
                                    T ceiling, std::uint32_t* idx);

// The largest of x[0, n) (NaN never is), -inf when n == 0.
template <class T>
using MaxValue = T (*)(const T* x, std::size_t n);

template <class T>
struct MatmulKernels {
  CpuIsa isa;
  GemmNN<T> gemm_nn;
  GemmTN<T> gemm_tn;
  GemmNTSampled<T> gemm_nt_sampled;
  GatherDot<T> gather_dot;
  GatherAxpy<T> gather_axpy;
  SelectAbove<T> select_above;
  MaxValue<T> max_value;
};

// The scalar reference (accumulates in double), for float and double.
template <class T>
const MatmulKernels<T>& reference_matmul_kernels();

// The float table of an available instruction set (reference gives the
// reference table); throws entgraph::Error if it is not compiled in.
const MatmulKernels<float>& matmul_kernels(CpuIsa isa);

// The table that the T API runs on: the current ISA's SIMD table for float,
// the reference for double.
template <class T>
const MatmulKernels<T>& matmul_kernels_for() {
  if constexpr (std::is_same_v<T, float>)
    return matmul_kernels(cpu_isa());
  else
    return reference_matmul_kernels<T>();
}

// Per-ISA tables, defined in kernels/simd/matmul_<isa>.cpp.
extern const MatmulKernels<float> kSse2Matmul;
extern const MatmulKernels<float> kAvx2Matmul;
extern const MatmulKernels<float> kAvx512Matmul;
extern const MatmulKernels<float> kSimd128Matmul;

}  // namespace entgraph::detail
