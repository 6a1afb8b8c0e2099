// entgraph internal: xsimd matrix-product kernels, templated on the
// instruction set. Included ONLY by kernels/simd/matmul_<isa>.cpp, each
// compiled with that ISA's flags: every function here is a member of
// Matmul<Arch>, so no body compiled with one ISA's flags can be picked by the
// linker for another.
//
// Micro-tiles are kMr rows x kNb batches of C held in registers; each step
// broadcasts kMr entries of A and multiplies them by kNb batches of one row of
// B (B row-major). Columns past the last full batch are done in scalar code.
//
// Dense A: depth chunks sized for L1, and for each group of columns every row
// panel in turn, so that the chunk of B (a caller keeps a transposed B at a
// stride that is not a multiple of 4 KiB) stays in L1 across the panels.
// Sparse A (skip_zero_a): for each row panel the columns where any of its kMr
// rows is nonzero are packed with their values, and only those rows of B are
// visited.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <xsimd/xsimd.hpp>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/matmul_kernels.hpp"
#include "kernels/simd/lane_tables.hpp"

namespace entgraph::detail::simd {

template <class A>
struct Matmul {
  using B = xsimd::batch<float, A>;
  static constexpr std::size_t W = B::size;
  // kMr x kNb accumulators plus kNb rows of B and one broadcast must fit the
  // register file: 8x2 of 32 zmm, 6x2 of 16 ymm, 4x2 of 16 xmm (SSE2 has no
  // FMA and needs a temporary).
  static constexpr std::size_t kMr = W >= 16 ? 8 : (W == 8 ? 6 : 4);
  static constexpr std::size_t kNb = 2;
  // Bytes of B that one depth chunk of the dense path keeps in L1.
  static constexpr std::size_t kL1Bytes = 24 * 1024;
  static constexpr std::size_t kKcSparse = 512;

  static std::size_t lesser(std::size_t a, std::size_t b) { return a < b ? a : b; }

  template <std::size_t NB>
  static void zero(B (&acc)[kMr][NB]) {
#pragma GCC unroll 8
    for (std::size_t r = 0; r < kMr; ++r)
#pragma GCC unroll 4
      for (std::size_t t = 0; t < NB; ++t) acc[r][t] = B(0.0f);
  }

  // C[r] = alpha * acc[r] (+ C[r]) for the first `rows` rows.
  template <std::size_t NB>
  static void store(const B (&acc)[kMr][NB], std::size_t rows, float alpha, float* c, std::size_t ldc,
                    bool accumulate) {
    const B av(alpha);
    for (std::size_t r = 0; r < rows; ++r) {
      float* cr = c + r * ldc;
#pragma GCC unroll 4
      for (std::size_t t = 0; t < NB; ++t) {
        const B v = accumulate ? xsimd::fma(acc[r][t], av, B::load_unaligned(cr + t * W)) : acc[r][t] * av;
        v.store_unaligned(cr + t * W);
      }
    }
  }

  // acc += A[panel rows, 0:kc] B[0:kc, 0:NB*W], A read in place through its
  // row pointers (rows past the end point at a valid row and are not stored).
  template <std::size_t NB>
  static void tile_dense(const float* const (&arow)[kMr], std::size_t a_col, std::size_t kc, const float* b,
                         std::size_t ldb, B (&acc)[kMr][NB]) {
    std::size_t off = 0;
    for (std::size_t p = 0; p < kc; ++p, off += a_col, b += ldb) {
      B bv[NB];
#pragma GCC unroll 4
      for (std::size_t t = 0; t < NB; ++t) bv[t] = B::load_unaligned(b + t * W);
#pragma GCC unroll 8
      for (std::size_t r = 0; r < kMr; ++r) {
        const B x(arow[r][off]);
#pragma GCC unroll 4
        for (std::size_t t = 0; t < NB; ++t) acc[r][t] = xsimd::fma(x, bv[t], acc[r][t]);
      }
    }
  }

  // acc += sum over packed entries q of pa[q][r] * B[idx[q], 0:NB*W].
  template <std::size_t NB>
  static void tile_packed(const float* pa, const std::uint32_t* idx, std::size_t count, const float* b, std::size_t ldb,
                          B (&acc)[kMr][NB]) {
    for (std::size_t q = 0; q < count; ++q, pa += kMr) {
      const float* bq = b + static_cast<std::size_t>(idx[q]) * ldb;
      B bv[NB];
#pragma GCC unroll 4
      for (std::size_t t = 0; t < NB; ++t) bv[t] = B::load_unaligned(bq + t * W);
#pragma GCC unroll 8
      for (std::size_t r = 0; r < kMr; ++r) {
        const B x(pa[r]);
#pragma GCC unroll 4
        for (std::size_t t = 0; t < NB; ++t) acc[r][t] = xsimd::fma(x, bv[t], acc[r][t]);
      }
    }
  }

  template <std::size_t NB>
  static void panels_dense(std::size_t m, std::size_t kc, float alpha, const float* a, std::size_t a_row,
                           std::size_t a_col, const float* b, std::size_t ldb, float* c, std::size_t ldc,
                           bool accumulate) {
    for (std::size_t i0 = 0; i0 < m; i0 += kMr) {
      const std::size_t rows = lesser(kMr, m - i0);
      const float* arow[kMr];
      for (std::size_t r = 0; r < kMr; ++r) arow[r] = a + (i0 + (r < rows ? r : 0)) * a_row;
      B acc[kMr][NB];
      zero(acc);
      tile_dense<NB>(arow, a_col, kc, b, ldb, acc);
      store<NB>(acc, rows, alpha, c + i0 * ldc, ldc, accumulate);
    }
  }

  static void gemm_dense(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t a_row,
                         std::size_t a_col, const float* b, std::size_t ldb, float* c, std::size_t ldc,
                         bool accumulate) {
    // Depth chunks sized so that a kc x (kNb W) tile of B stays in L1 while
    // every row panel passes over it.
    const std::size_t kc_max = kL1Bytes / (kNb * W * sizeof(float));
    for (std::size_t k0 = 0; k0 < k; k0 += kc_max) {
      const std::size_t kc = lesser(kc_max, k - k0);
      const bool acc_c = accumulate || k0 > 0;
      const float* ak = a + k0 * a_col;
      const float* bk = b + k0 * ldb;
      std::size_t j = 0;
      for (; j + kNb * W <= n; j += kNb * W)
        panels_dense<kNb>(m, kc, alpha, ak, a_row, a_col, bk + j, ldb, c + j, ldc, acc_c);
      for (; j + W <= n; j += W) panels_dense<1>(m, kc, alpha, ak, a_row, a_col, bk + j, ldb, c + j, ldc, acc_c);
      for (; j < n; ++j) {
        for (std::size_t i = 0; i < m; ++i) {
          float s = 0.0f;
          for (std::size_t p = 0; p < kc; ++p) s += ak[i * a_row + p * a_col] * bk[p * ldb + j];
          float& out = c[i * ldc + j];
          out = acc_c ? out + alpha * s : alpha * s;
        }
      }
    }
  }

  // Packs the entries of A's rows [0, rows) x [k0, k0 + kc) at which some row
  // is nonzero (kMr values each, zero past `rows`); returns how many.
  static std::size_t pack_nonzero(const float* a, std::size_t a_row, std::size_t a_col, std::size_t rows,
                                  std::size_t k0, std::size_t kc, float* pa, std::uint32_t* idx) {
    std::size_t count = 0;
    std::size_t p = 0;
    if (a_col == 1 && rows == kMr) {
      // A batch of W columns that is zero in every row is skipped with a few
      // vector compares; otherwise one flag per column says which to pack.
      const B zero(0.0f), one(1.0f);
      alignas(64) float flag[W];
      for (; p + W <= kc; p += W) {
        const float* ap = a + k0 + p;
        auto nz = B::load_unaligned(ap) != zero;
#pragma GCC unroll 8
        for (std::size_t r = 1; r < kMr; ++r) nz = nz | (B::load_unaligned(ap + r * a_row) != zero);
        if (!xsimd::any(nz)) continue;
        xsimd::select(nz, one, zero).store_aligned(flag);
        for (std::size_t l = 0; l < W; ++l) {
          if (flag[l] == 0.0f) continue;
          float* dst = pa + count * kMr;
#pragma GCC unroll 8
          for (std::size_t r = 0; r < kMr; ++r) dst[r] = ap[r * a_row + l];
          idx[count++] = static_cast<std::uint32_t>(k0 + p + l);
        }
      }
    }
    for (; p < kc; ++p) {
      const float* ap = a + (k0 + p) * a_col;
      float v[kMr];
      bool any = false;
      for (std::size_t r = 0; r < kMr; ++r) {
        v[r] = r < rows ? ap[r * a_row] : 0.0f;
        any = any || v[r] != 0.0f;
      }
      if (!any) continue;
      float* dst = pa + count * kMr;
      for (std::size_t r = 0; r < kMr; ++r) dst[r] = v[r];
      idx[count++] = static_cast<std::uint32_t>(k0 + p);
    }
    return count;
  }

  static void gemm_sparse(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t a_row,
                          std::size_t a_col, const float* b, std::size_t ldb, float* c, std::size_t ldc,
                          bool accumulate) {
    alignas(64) float pa[kKcSparse * kMr];
    std::uint32_t idx[kKcSparse];
    for (std::size_t i0 = 0; i0 < m; i0 += kMr) {
      const std::size_t rows = lesser(kMr, m - i0);
      const float* ai = a + i0 * a_row;
      float* ci = c + i0 * ldc;
      for (std::size_t k0 = 0; k0 < k; k0 += kKcSparse) {
        const std::size_t kc = lesser(kKcSparse, k - k0);
        const std::size_t count = pack_nonzero(ai, a_row, a_col, rows, k0, kc, pa, idx);
        const bool acc_c = accumulate || k0 > 0;
        if (count == 0 && acc_c) continue;
        std::size_t j = 0;
        for (; j + kNb * W <= n; j += kNb * W) {
          B acc[kMr][kNb];
          zero(acc);
          tile_packed<kNb>(pa, idx, count, b + j, ldb, acc);
          store<kNb>(acc, rows, alpha, ci + j, ldc, acc_c);
        }
        for (; j + W <= n; j += W) {
          B acc[kMr][1];
          zero(acc);
          tile_packed<1>(pa, idx, count, b + j, ldb, acc);
          store<1>(acc, rows, alpha, ci + j, ldc, acc_c);
        }
        for (; j < n; ++j) {
          float s[kMr] = {};
          for (std::size_t q = 0; q < count; ++q) {
            const float bv = b[static_cast<std::size_t>(idx[q]) * ldb + j];
            for (std::size_t r = 0; r < kMr; ++r) s[r] += pa[q * kMr + r] * bv;
          }
          for (std::size_t r = 0; r < rows; ++r) {
            float& out = ci[r * ldc + j];
            out = acc_c ? out + alpha * s[r] : alpha * s[r];
          }
        }
      }
    }
  }

  static void gemm(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t a_row,
                   std::size_t a_col, const float* b, std::size_t ldb, float* c, std::size_t ldc, bool accumulate,
                   bool skip_zero_a) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
      if (!accumulate)
        for (std::size_t i = 0; i < m; ++i)
          for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = 0.0f;
      return;
    }
    if (skip_zero_a)
      gemm_sparse(m, n, k, alpha, a, a_row, a_col, b, ldb, c, ldc, accumulate);
    else
      gemm_dense(m, n, k, alpha, a, a_row, a_col, b, ldb, c, ldc, accumulate);
  }

  static void gemm_nn(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t lda,
                      const float* b, std::size_t ldb, float* c, std::size_t ldc, bool accumulate, bool skip_zero_a) {
    gemm(m, n, k, alpha, a, lda, 1, b, ldb, c, ldc, accumulate, skip_zero_a);
  }

  static void gemm_tn(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t lda,
                      const float* b, std::size_t ldb, float* c, std::size_t ldc, bool accumulate, bool skip_zero_a) {
    if (skip_zero_a && m > 0 && n > 0)
      gemm_tn_scatter(m, n, k, alpha, a, lda, b, ldb, c, ldc, accumulate);
    else
      gemm(m, n, k, alpha, a, 1, lda, b, ldb, c, ldc, accumulate, skip_zero_a);
  }

  // The nonzeros of x[0, len), times alpha, with their positions; returns how many.
  static std::size_t gather_nonzero(const float* x, std::size_t len, float alpha, float* vals, std::uint32_t* idx) {
    std::size_t count = 0, l = 0;
    const B zero(0.0f);
    alignas(64) float buf[W];
    for (; l + W <= len; l += W) {
      const B v = B::load_unaligned(x + l);
      if (!xsimd::any(v != zero)) continue;
      v.store_aligned(buf);
      for (std::size_t t = 0; t < W; ++t) {
        if (buf[t] == 0.0f) continue;
        vals[count] = alpha * buf[t];
        idx[count++] = static_cast<std::uint32_t>(l + t);
      }
    }
    for (; l < len; ++l) {
      if (x[l] == 0.0f) continue;
      vals[count] = alpha * x[l];
      idx[count++] = static_cast<std::uint32_t>(l);
    }
    return count;
  }

  // C = alpha A^T B (+ C) for sparse A (k x m stored): for each row p of A,
  // every nonzero A(p, i) adds A(p, i) B(p, :) to row i of C, with B(p, :)
  // held in registers. The cost follows nnz(A), and each entry of C receives
  // its terms in the order of p.
  static void gemm_tn_scatter(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t lda,
                              const float* b, std::size_t ldb, float* c, std::size_t ldc, bool accumulate) {
    if (!accumulate)
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = 0.0f;
    constexpr std::size_t kNr = 4;  // batches of a row of B held at once
    alignas(64) float vals[kKcSparse];
    std::uint32_t idx[kKcSparse];
    for (std::size_t p = 0; p < k; ++p) {
      const float* ap = a + p * lda;
      const float* bp = b + p * ldb;
      for (std::size_t i0 = 0; i0 < m; i0 += kKcSparse) {
        const std::size_t count = gather_nonzero(ap + i0, lesser(kKcSparse, m - i0), alpha, vals, idx);
        if (count == 0) continue;
        float* ci = c + i0 * ldc;
        std::size_t j = 0;
        for (; j + kNr * W <= n; j += kNr * W) {
          B bv[kNr];
#pragma GCC unroll 4
          for (std::size_t t = 0; t < kNr; ++t) bv[t] = B::load_unaligned(bp + j + t * W);
          for (std::size_t q = 0; q < count; ++q) {
            const B x(vals[q]);
            float* cr = ci + static_cast<std::size_t>(idx[q]) * ldc + j;
#pragma GCC unroll 4
            for (std::size_t t = 0; t < kNr; ++t)
              xsimd::fma(x, bv[t], B::load_unaligned(cr + t * W)).store_unaligned(cr + t * W);
          }
        }
        for (; j + W <= n; j += W) {
          const B bv = B::load_unaligned(bp + j);
          for (std::size_t q = 0; q < count; ++q) {
            float* cr = ci + static_cast<std::size_t>(idx[q]) * ldc + j;
            xsimd::fma(B(vals[q]), bv, B::load_unaligned(cr)).store_unaligned(cr);
          }
        }
        for (; j < n; ++j)
          for (std::size_t q = 0; q < count; ++q) ci[static_cast<std::size_t>(idx[q]) * ldc + j] += vals[q] * bp[j];
      }
    }
  }

  // Two dot products of x with y0 and y1 at once (x is loaded once).
  static void dot2(const float* x, const float* y0, const float* y1, std::size_t k, float& s0, float& s1) {
    B acc0(0.0f), acc1(0.0f);
    std::size_t p = 0;
    for (; p + W <= k; p += W) {
      const B xv = B::load_unaligned(x + p);
      acc0 = xsimd::fma(xv, B::load_unaligned(y0 + p), acc0);
      acc1 = xsimd::fma(xv, B::load_unaligned(y1 + p), acc1);
    }
    s0 = xsimd::hadd(acc0);
    s1 = xsimd::hadd(acc1);
    for (; p < k; ++p) {
      s0 += x[p] * y0[p];
      s1 += x[p] * y1[p];
    }
  }

  static void gemm_nt_sampled(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t lda,
                              const float* b, std::size_t ldb, const float* sample, std::size_t lds, float* c,
                              std::size_t ldc) {
    for (std::size_t i = 0; i < m; ++i) {
      const float* ai = a + i * lda;
      const float* si = sample + i * lds;
      float* ci = c + i * ldc;
      // Pairs of sampled columns share the loads of A's row.
      std::size_t pending = n;
      for (std::size_t j = 0; j < n; ++j) {
        if (si[j] == 0.0f) {
          ci[j] = 0.0f;
          continue;
        }
        if (pending == n) {
          pending = j;
          continue;
        }
        float s0, s1;
        dot2(ai, b + pending * ldb, b + j * ldb, k, s0, s1);
        ci[pending] = alpha * s0;
        ci[j] = alpha * s1;
        pending = n;
      }
      if (pending != n) {
        float s0, s1;
        dot2(ai, b + pending * ldb, b + pending * ldb, k, s0, s1);
        ci[pending] = alpha * s0;
      }
    }
  }

  static void gather_dot(const float* x, const float* b, std::size_t ldb, const std::uint32_t* idx, std::size_t count,
                         std::size_t k, float alpha, float* out) {
    std::size_t c = 0;
    for (; c + 2 <= count; c += 2) {  // pairs share the loads of x
      float s0, s1;
      dot2(x, b + static_cast<std::size_t>(idx[c]) * ldb, b + static_cast<std::size_t>(idx[c + 1]) * ldb, k, s0, s1);
      out[c] = alpha * s0;
      out[c + 1] = alpha * s1;
    }
    if (c < count) {
      float s0, s1;
      const float* row = b + static_cast<std::size_t>(idx[c]) * ldb;
      dot2(x, row, row, k, s0, s1);
      out[c] = alpha * s0;
    }
  }

  // out = sum_c w[c] b[idx[c]]. The rows of weight 0 (often half of a
  // repaired row's keys, in no predictable order) are dropped first without
  // a branch, a chunk at a time; then up to four vectors of the output stay
  // in registers while the rows stream by. Each output is the same fma chain
  // over the rows of non-zero weight, in order, whatever n.
  static void gather_axpy(const float* w, const float* b, std::size_t ldb, const std::uint32_t* idx, std::size_t count,
                          std::size_t n, float* out) {
    constexpr std::size_t kChunk = 256;
    alignas(64) float cw[kChunk];
    std::uint32_t ci[kChunk];
    std::size_t c0 = 0;
    do {
      const std::size_t c1 = std::min(count, c0 + kChunk);
      std::size_t live = 0;
      for (std::size_t c = c0; c < c1; ++c) {
        cw[live] = w[c];
        ci[live] = idx[c];
        live += w[c] != 0.0f ? 1 : 0;
      }
      const bool first = c0 == 0;
      std::size_t j = 0;
      while (j + W <= n) {
        const std::size_t nv = std::min<std::size_t>(4, (n - j) / W);
        B acc[4];
#pragma GCC unroll 4
        for (std::size_t t = 0; t < 4; ++t) acc[t] = first || t >= nv ? B(0.0f) : B::load_unaligned(out + j + t * W);
        for (std::size_t c = 0; c < live; ++c) {
          const B x(cw[c]);
          const float* row = b + static_cast<std::size_t>(ci[c]) * ldb + j;
#pragma GCC unroll 4
          for (std::size_t t = 0; t < 4; ++t)
            if (t < nv) acc[t] = xsimd::fma(x, B::load_unaligned(row + t * W), acc[t]);
        }
        for (std::size_t t = 0; t < nv; ++t) acc[t].store_unaligned(out + j + t * W);
        j += nv * W;
      }
      for (; j < n; ++j) {
        float acc = first ? 0.0f : out[j];
        for (std::size_t c = 0; c < live; ++c) acc += cw[c] * b[static_cast<std::size_t>(ci[c]) * ldb + j];
        out[j] = acc;
      }
      c0 = c1;
    } while (c0 < count);
  }

  // The entries of x[0, n) in (threshold, ceiling], as base + j.
  static std::size_t select_run(const float* x, std::size_t n, float threshold, float ceiling, std::uint32_t base,
                                std::uint32_t* idx) {
    std::size_t count = 0, j = 0;
    const B t(threshold), c(ceiling);
#if defined(__AVX2__)
    // AVX2: each vector moves its selected indices to the front by the table
    // of lane masks and stores them whole (count <= the entries read, so
    // they stay within the room), hit or not: no branch per lane or per
    // vector. A skip of vectors without a hit mispredicted where hits are
    // dense (an estimated row's candidates, 1 in 7 entries: 0.65x -> 0.55x
    // dense attention for lowrank-threshold's predict) and gained nothing in
    // exact mode's sparse bound scans (1.16x -> 1.07x dense with a window).
    if constexpr (std::is_same_v<A, xsimd::avx2>) {
      for (; j + W <= n; j += W) {
        const __m256 v = _mm256_loadu_ps(x + j);
        const int bits = _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(v, static_cast<__m256>(t), _CMP_GT_OQ),
                                                          _mm256_cmp_ps(v, static_cast<__m256>(c), _CMP_LE_OQ)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + count),
                            _mm256_add_epi32(compress8_lanes(bits), _mm256_set1_epi32(static_cast<int>(base + j))));
        count += static_cast<std::size_t>(__builtin_popcount(static_cast<unsigned>(bits)));
      }
    }
#endif
    // Hits are rare in a bound scan: a vector compare per W values, and a
    // look at the lanes only when one of them is selected.
    for (; j + W <= n; j += W) {
      const B v = B::load_unaligned(x + j);
      if (!xsimd::any((v > t) && (v <= c))) continue;
      for (std::size_t l = j; l < j + W; ++l) {  // branch-free: hits come in runs
        idx[count] = base + static_cast<std::uint32_t>(l);
        count += x[l] > threshold && x[l] <= ceiling ? 1 : 0;
      }
    }
    for (; j < n; ++j)
      if (x[j] > threshold && x[j] <= ceiling) idx[count++] = base + static_cast<std::uint32_t>(j);
    return count;
  }

#if defined(__AVX512F__)
  // AVX-512: the maxima of 16 groups in one compare, then the passing groups
  // by their bit; a group's 64 entries in four compares whose selected lanes'
  // indices are compressed in a register and stored whole (count <= the
  // entries already read, so they stay within the room), at the range's
  // ragged ends only their first popcount lanes. Zen 4's compress straight to
  // memory is microcoded.
  static std::size_t select_above_avx512(const float* x, const float* group_max, std::size_t from, std::size_t to,
                                         float threshold, float ceiling, std::uint32_t* idx) {
    constexpr std::size_t G = kSelectGroup;
    const __m512 t = _mm512_set1_ps(threshold), c = _mm512_set1_ps(ceiling);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    std::size_t count = 0;
    auto whole = [&](std::size_t j) {
      const __m512 v = _mm512_loadu_ps(x + j);
      const __mmask16 in = _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(v, t, _CMP_GT_OQ), v, c, _CMP_LE_OQ);
      _mm512_storeu_si512(idx + count,
                          _mm512_maskz_compress_epi32(in, _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(j)), iota)));
      count += static_cast<std::size_t>(__builtin_popcount(in));
    };
    auto ragged = [&](std::size_t j, std::size_t lo, std::size_t hi) {  // lanes [lo, hi) of the vector at j
      const __mmask16 range = static_cast<__mmask16>(((1u << (hi - j)) - 1u) & ~((1u << (lo - j)) - 1u));
      const __m512 v = _mm512_maskz_loadu_ps(range, x + j);
      const __mmask16 in = _mm512_mask_cmp_ps_mask(_mm512_mask_cmp_ps_mask(range, v, t, _CMP_GT_OQ), v, c, _CMP_LE_OQ);
      const int hits = __builtin_popcount(in);
      _mm512_mask_storeu_epi32(idx + count, static_cast<__mmask16>((1u << hits) - 1u),
                               _mm512_maskz_compress_epi32(in, _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(j)), iota)));
      count += static_cast<std::size_t>(hits);
    };
    const std::size_t g1 = (to + G - 1) / G;
    for (std::size_t gb = from / G; gb < g1; gb += 16) {
      std::uint32_t pass = g1 - gb >= 16 ? 0xFFFFu : (1u << (g1 - gb)) - 1u;
      if (group_max != nullptr)
        pass = _mm512_mask_cmp_ps_mask(static_cast<__mmask16>(pass),
                                       _mm512_maskz_loadu_ps(static_cast<__mmask16>(pass), group_max + gb), t,
                                       _CMP_GT_OQ);
      for (; pass != 0; pass &= pass - 1) {
        const std::size_t g = gb + static_cast<std::size_t>(__builtin_ctz(pass));
        const std::size_t lo = std::max(from, g * G), hi = std::min(to, g * G + G);
        if (lo == g * G && hi == g * G + G) {
          for (std::size_t j = lo; j < hi; j += 16) whole(j);
        } else {
          for (std::size_t j = lo / 16 * 16; j < hi; j += 16) ragged(j, std::max(lo, j), std::min(hi, j + 16));
        }
      }
    }
    return count;
  }
#endif

  static std::size_t select_above(const float* x, const float* group_max, std::size_t from, std::size_t to,
                                  float threshold, float ceiling, std::uint32_t* idx) {
    if (from >= to) return 0;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<A, xsimd::avx512bw>)
      return select_above_avx512(x, group_max, from, to, threshold, ceiling, idx);
#endif
    constexpr std::size_t G = kSelectGroup;
    std::size_t count = 0;
#if defined(__AVX2__)
    // AVX2: the maxima of 8 groups in one compare, then the passing groups
    // by their bit, as on AVX-512: a branch per group mispredicted wherever
    // about half the groups pass (exact mode's scans above a guess).
    if constexpr (std::is_same_v<A, xsimd::avx2>) {
      if (group_max != nullptr) {
        const __m256 t = _mm256_set1_ps(threshold);
        const std::size_t g1 = (to + G - 1) / G;
        for (std::size_t gb = from / G; gb < g1; gb += 8) {
          unsigned pass = 0;
          if (g1 - gb >= 8) {
            pass = static_cast<unsigned>(
                _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(group_max + gb), t, _CMP_GT_OQ)));
          } else {
            for (std::size_t g = gb; g < g1; ++g) pass |= (group_max[g] > threshold ? 1u : 0u) << (g - gb);
          }
          for (; pass != 0; pass &= pass - 1) {
            const std::size_t g = gb + static_cast<std::size_t>(__builtin_ctz(pass));
            const std::size_t lo = std::max(from, g * G), hi = std::min(to, g * G + G);
            count += select_run(x + lo, hi - lo, threshold, ceiling, static_cast<std::uint32_t>(lo), idx + count);
          }
        }
        return count;
      }
    }
#endif
    for (std::size_t g = from / G; g * G < to; ++g) {
      if (group_max != nullptr && !(group_max[g] > threshold)) continue;
      const std::size_t lo = std::max(from, g * G), hi = std::min(to, g * G + G);
      count += select_run(x + lo, hi - lo, threshold, ceiling, static_cast<std::uint32_t>(lo), idx + count);
    }
    return count;
  }

  static float max_value(const float* x, std::size_t n) {
    const float inf = std::numeric_limits<float>::infinity();
    B m0(-inf), m1(-inf);
    std::size_t j = 0;
    for (; j + 2 * W <= n; j += 2 * W) {  // two chains hide the latency of max
      m0 = xsimd::max(m0, B::load_unaligned(x + j));
      m1 = xsimd::max(m1, B::load_unaligned(x + j + W));
    }
    alignas(64) float lanes[W];
    xsimd::max(m0, m1).store_aligned(lanes);
    float m = -inf;
    for (std::size_t l = 0; l < W; ++l) m = lanes[l] > m ? lanes[l] : m;
    for (; j < n; ++j) m = x[j] > m ? x[j] : m;
    return m;
  }

  static MatmulKernels<float> table(CpuIsa isa) {
    return {isa, &gemm_nn, &gemm_tn, &gemm_nt_sampled, &gather_dot, &gather_axpy, &select_above, &max_value};
  }
};

}  // namespace entgraph::detail::simd
