// The fused dense attention kernel (see attention.hpp for the contract,
// fused_attention_traits.cuh for its configuration).
//
// Design. A block of 128 threads (4 warps) owns 64 queries; its Q tile stays
// in shared memory while tiles of kBlockN keys (64, or 32 when d or dv is
// 128, to bound shared memory) stream through it. Per tile:
//   S = Q K^T           each thread a 4 x (kBlockN / 8) register tile, rows
//                       ty + 16 i, columns tx + 8 j: float4 reads of Q and K
//                       rows (row stride d + 4 floats, conflict-free);
//   row phase           warp w owns rows [16 w, 16 w + 16) in every phase
//                       (max by butterfly, ballots), so per-row state and the
//                       row's candidate list are only ever touched by one warp;
//   O += P V            each thread 4 rows x dv / 8 columns (tx * 4 + 32 g).
// S is written to shared memory already scaled and masked (-inf), at row
// stride kBlockN + 8 so that the 4 x 8 threads of a warp hit 32 distinct banks.
//
// Softmax: one sweep, online max and sum (FlashAttention), in base 2.
//
// alpha-entmax, in the scale x = (alpha - 1) scale q.k where the threshold tau
// (relative to the row max M) lies in [-1, 0) (attention_common.cuh):
// 1. Sweep over K: running max, and a candidate list per query in global
//    scratch (n x capacity floats) of the scores that can still be in the
//    support: x >= running max - 1, and x >= a floor below the final
//    threshold. The floor is the threshold of the candidates kept so far
//    (adding scores only raises the threshold of a row, so a subset's is a
//    lower bound), solved again (three Newton steps from below, each a lower
//    bound) whenever the list doubles past 128. On N(0, 1) scores it cuts
//    the scores written from about 430 to 220 per row at n = 4096, and the
//    list the final solve reads from about 430 to 60. When a tile's
//    new candidates exceed the capacity even after that, the query is marked
//    overflowed.
// 2. tau from the candidates: safeguarded Newton (bisection for alpha > 2),
//    one warp per query.
// 3. Overflowed queries only (correctness first): more sweeps over K, each
//    evaluating the mass at 16 points of the query's bracket [lo, hi] (so the
//    bracket shrinks 16x) and counting the scores above each point; as soon
//    as the scores above the new lo fit in the list, one more sweep collects
//    exactly those and tau is solved from them as in 2. The bracket is in
//    double; after 8 narrowing sweeps (12 for alpha > 2) it is below 2e-10
//    (4e-15) wide and tau = lo.
// 4. Sweep over K and V: p = [x - M - tau]_+^(1/(alpha-1)), O += P V, and the
//    row sums of p, by which O is divided at the end (renormalising away the
//    rounding of tau).
// So entmax costs two Q K^T sweeps and one P V where softmax costs one and one,
// when no query overflows.
//
// Causal blocks only visit the key tiles some of their queries can see.
// The row phases (everything between S and P V) are attention_rows.cuh's.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "attention_common.cuh"
#include "attention_rows.cuh"
#include "fused_attention_traits.cuh"
#include "kernel_launch.cuh"
#include "reduce.cuh"

namespace entgraph::cuda::detail::fused {

using detail::kFullWarp;
using detail::kWarpSize;
using detail::Weighting;

// Rows [row0, row0 + ROWS) of a row-major matrix with COLS columns and
// `rows_total` rows into shared memory at stride ld; rows past the end are 0.
template <int COLS, int ROWS>
__device__ void load_rows(float* dst, int ld, const float* src, int row0, int rows_total) {
  constexpr int kVecs = COLS / 4;
  for (int idx = threadIdx.x; idx < ROWS * kVecs; idx += kThreads) {
    const int r = idx / kVecs;
    const int c = (idx % kVecs) * 4;
    const int g = row0 + r;
    float4 val = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (g < rows_total)
      val = __ldg(reinterpret_cast<const float4*>(src + static_cast<std::size_t>(g) * COLS + c));
    *reinterpret_cast<float4*>(dst + r * ld + c) = val;
  }
}

// Whether each key of the tile exists and is not padding.
template <int BN>
__device__ void load_key_flags(int* ok, int j0, const FusedParams& p) {
  for (int c = threadIdx.x; c < BN; c += kThreads) {
    const int j = j0 + c;
    ok[c] = j < p.m && (p.key_padding == nullptr || p.key_padding[j] != 0);
  }
}

// Keys [0, limit) are visible to query qi (0 for the padding rows past n).
__device__ inline int key_limit(int qi, const FusedParams& p) {
  if (qi >= p.n) return 0;
  return p.causal ? static_cast<int>(causal_key_limit(static_cast<std::size_t>(qi), static_cast<std::size_t>(p.n),
                                                      static_cast<std::size_t>(p.m)))
                  : p.m;
}

// S = factor * Q K^T for the tile of keys starting at j0, masked entries -inf.
// Explicit fmaf chains: every sweep computes bit-identical scores, which the
// narrowing sweeps' counts rely on.
template <int D, int BN, int kLdQK, int kLdS>
__device__ void tile_scores(const float* Qs, const float* Ks, const int* key_ok, float* Ss, int q0, int j0,
                            const FusedParams& p) {
  constexpr int kCols = BN / 8;
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;
  float acc[4][kCols];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc[i][j] = 0.0f;
#pragma unroll 4
  for (int kk = 0; kk < D; kk += 4) {
    float4 a[4], b[kCols];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = *reinterpret_cast<const float4*>(Qs + (ty + 16 * i) * kLdQK + kk);
#pragma unroll
    for (int j = 0; j < kCols; ++j) b[j] = *reinterpret_cast<const float4*>(Ks + (tx + 8 * j) * kLdQK + kk);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        acc[i][j] = fmaf(a[i].x, b[j].x, acc[i][j]);
        acc[i][j] = fmaf(a[i].y, b[j].y, acc[i][j]);
        acc[i][j] = fmaf(a[i].z, b[j].z, acc[i][j]);
        acc[i][j] = fmaf(a[i].w, b[j].w, acc[i][j]);
      }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty + 16 * i;
    const int limit = key_limit(q0 + r, p);
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int c = tx + 8 * j;
      const bool ok = j0 + c < limit && key_ok[c] != 0;
      Ss[r * kLdS + c] = ok ? __fmul_rn(acc[i][j], p.w.factor) : -INFINITY;
    }
  }
}

// acc (this thread's 4 rows x dv/8 columns of O) = acc * rescale + P V_tile.
template <int DV, int BN, int kLdS, int kLdV, bool kRescale>
__device__ void tile_pv(const float* Ss, const float* Vs, const float* rescale, float (&acc)[4][DV / 8]) {
  constexpr int kGroups = DV / 32;
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;
  if constexpr (kRescale) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float s = rescale[ty + 16 * i];
#pragma unroll
      for (int c = 0; c < DV / 8; ++c) acc[i][c] *= s;
    }
  }
#pragma unroll 4
  for (int j = 0; j < BN; ++j) {
    float pr[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) pr[i] = Ss[(ty + 16 * i) * kLdS + j];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const float4 vv = *reinterpret_cast<const float4*>(Vs + j * kLdV + g * 32 + tx * 4);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc[i][4 * g + 0] = fmaf(pr[i], vv.x, acc[i][4 * g + 0]);
        acc[i][4 * g + 1] = fmaf(pr[i], vv.y, acc[i][4 * g + 1]);
        acc[i][4 * g + 2] = fmaf(pr[i], vv.z, acc[i][4 * g + 2]);
        acc[i][4 * g + 3] = fmaf(pr[i], vv.w, acc[i][4 * g + 3]);
      }
    }
  }
}

// out rows of this block = acc / row sum (a zero row when nothing was seen).
template <int DV>
__device__ void store_out(float* out, int q0, int n, const float* row_sum, const float (&acc)[4][DV / 8]) {
  const int ty = threadIdx.x / 8, tx = threadIdx.x % 8;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty + 16 * i;
    const int qi = q0 + r;
    if (qi >= n) continue;
    const float l = row_sum[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int g = 0; g < DV / 32; ++g) {
      const float4 o = make_float4(acc[i][4 * g] * inv, acc[i][4 * g + 1] * inv, acc[i][4 * g + 2] * inv,
                                   acc[i][4 * g + 3] * inv);
      *reinterpret_cast<float4*>(out + static_cast<std::size_t>(qi) * DV + g * 32 + tx * 4) = o;
    }
  }
}

// Tile t of a sweep over the block's keys: its K rows (and V rows, kWithV)
// and key flags into shared memory, then its scaled, masked scores S, which
// every thread may read when this returns.
template <int D, int DV, bool kSoftmax, bool kWithV>
__device__ void score_tile(int t, const float* Qs, float* Ks, float* Vs, int* key_ok, float* Ss, int q0,
                           const FusedParams& p) {
  using L = Layout<D, DV, kSoftmax>;
  constexpr int BN = L::kBlockN;
  const int j0 = t * BN;
  __syncthreads();  // the previous tile's row phase and P V are done with Ks, Vs, Ss
  load_rows<D, BN>(Ks, L::kLdQK, p.k, j0, p.m);
  if constexpr (kWithV) load_rows<DV, BN>(Vs, L::kLdV, p.v, j0, p.m);
  load_key_flags<BN>(key_ok, j0, p);
  __syncthreads();
  tile_scores<D, BN, L::kLdQK, L::kLdS>(Qs, Ks, key_ok, Ss, q0, j0, p);
  __syncthreads();
}

template <int D, int DV, bool kSoftmax>
__global__ void __launch_bounds__(kThreads) fused_attention_kernel(const FusedParams p) {
  using L = Layout<D, DV, kSoftmax>;
  constexpr int BN = L::kBlockN;
  float4* smem_vec = dynamic_shared<float4>();
  float* smem = reinterpret_cast<float*>(smem_vec);
  float* Qs = smem + L::kQ;
  float* Ks = smem + L::kK;
  float* Vs = smem + L::kV;
  float* Ss = smem + L::kS;
  int* key_ok = reinterpret_cast<int*>(smem + L::kKeyOk);
  const RowState rs = row_state(smem + L::kRows);
  double* mass = reinterpret_cast<double*>(smem + L::kMass);
  int* count_above = reinterpret_cast<int*>(smem + L::kCount);

  const int q0 = static_cast<int>(blockIdx.x) * kBlockM;
  const int last = min(q0 + kBlockM, p.n) - 1;
  const int key_end = key_limit(last, p);  // causal: later queries see more keys
  const int tiles = (key_end + BN - 1) / BN;

  load_rows<D, kBlockM>(Qs, L::kLdQK, p.q, q0, p.n);
  init_rows(rs);
  // The block's candidate lists start at row q0's (softmax has none).
  const RowBlock rb{p.cand ? p.cand + static_cast<std::size_t>(q0) * static_cast<std::size_t>(p.cap) : nullptr, p.cap,
                    p.n - q0, p.w};
  float acc[4][DV / 8];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < DV / 8; ++c) acc[i][c] = 0.0f;

  if constexpr (kSoftmax) {
    for (int t = 0; t < tiles; ++t) {
      score_tile<D, DV, kSoftmax, true>(t, Qs, Ks, Vs, key_ok, Ss, q0, p);
      softmax_rows<BN, L::kLdS>(Ss, rs);
      __syncthreads();
      tile_pv<DV, BN, L::kLdS, L::kLdV, true>(Ss, Vs, rs.rescale, acc);
    }
  } else {
    // 1. Max and candidates.
    for (int t = 0; t < tiles; ++t) {
      score_tile<D, DV, kSoftmax, false>(t, Qs, Ks, Vs, key_ok, Ss, q0, p);
      collect_running<BN, L::kLdS>(Ss, rs, rb);
    }
    __syncthreads();
    // 2. tau from the candidates.
    solve_after_collect(rs, mass, count_above, rb);
    // 3. Overflowed queries: narrowing sweeps, then one collecting sweep each.
    for (int sweep = 0;; ++sweep) {
      __syncthreads();
      const int st = threadIdx.x < kBlockM ? rs.status[threadIdx.x] : kSolved;
      if (!__syncthreads_or(st == kNarrowing || st == kCollectAbove)) break;
      for (int t = 0; t < tiles; ++t) {
        score_tile<D, DV, kSoftmax, false>(t, Qs, Ks, Vs, key_ok, Ss, q0, p);
        narrow_rows<BN, L::kLdS>(Ss, rs, mass, count_above, rb);
      }
      __syncthreads();
      after_narrowing(rs, mass, count_above, rb, sweep);
    }
    // 4. Weights and P V.
    for (int t = 0; t < tiles; ++t) {
      score_tile<D, DV, kSoftmax, true>(t, Qs, Ks, Vs, key_ok, Ss, q0, p);
      entmax_weight_rows<BN, L::kLdS>(Ss, rs, rb);
      __syncthreads();
      tile_pv<DV, BN, L::kLdS, L::kLdV, false>(Ss, Vs, nullptr, acc);
    }
  }
  __syncthreads();  // the last row sums are written
  store_out<DV>(p.out, q0, p.n, rs.sum, acc);
}

template <int D, int DV, bool kSoftmax>
void launch_fused(const FusedParams& p, cudaStream_t stream) {
  constexpr std::size_t bytes = Layout<D, DV, kSoftmax>::kBytes;
  const auto kernel = fused_attention_kernel<D, DV, kSoftmax>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "cuda::attention_forward (shared memory size)");
  const unsigned blocks = static_cast<unsigned>((p.n + kBlockM - 1) / kBlockM);
  launch(kernel, blocks, kThreads, bytes, stream, p);
  check(cudaGetLastError(), "cuda::attention_forward (launch)");
}

}  // namespace entgraph::cuda::detail::fused
