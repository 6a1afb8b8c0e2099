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
// Causal blocks only visit the key tiles some of their queries can see.#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "attention_common.cuh"
#include "fused_attention_traits.cuh"
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

// ---------------------------------------------------------------------------
// Row phases. The common work is per thread: thread t owns half t % 2 of
// row t / 2 of the tile (so warp w still owns rows [16 w, 16 w + 16)), and a
// pair combines its halves with one shuffle. With one warp per row, the 16
// rows of a warp were 16 dependent chains of warp reductions; the profile of
// the first GPU run put half of the entmax kernel there (and waiting at the
// next barrier). The rare steps that need a whole warp (the candidate list's
// floor, compaction, narrowing) keep one row at a time: warp w handles rows
// [16 w, 16 w + 16), lane 0 writes the state.

__device__ inline int warp_row(int rr) { return static_cast<int>(threadIdx.x / kWarpSize) * kRowsPerWarp + rr; }
__device__ inline unsigned lanes_below() { return (1u << (threadIdx.x % kWarpSize)) - 1u; }

// This thread's half of its row: the row, the half's first column, and the
// column of step c. The steps are rotated per thread so that the warp's 32
// reads of each step fall in 32 distinct banks (row strides are 8 mod 32).
template <int BN>
struct HalfRow {
  static constexpr int kHalf = BN / 2;
  static_assert((kHalf & (kHalf - 1)) == 0, "half rows are a power of two wide");
  int r, h, first, shift;
  __device__ HalfRow()
      : r(static_cast<int>(threadIdx.x) / 2),
        h(static_cast<int>(threadIdx.x) % 2),
        first(h * kHalf),
        shift(2 * ((r % kRowsPerWarp) / 4) + h) {}
  __device__ int column(int c) const { return first + ((c + shift) & (kHalf - 1)); }
  // The max of the row (both halves; the pair's other thread calls it too).
  __device__ float row_max(const float* row) const;
};

__device__ inline float pair_max(float v) { return fmaxf(v, __shfl_xor_sync(kFullWarp, v, 1)); }
__device__ inline float pair_sum(float v) { return v + __shfl_xor_sync(kFullWarp, v, 1); }

template <int BN>
__device__ float HalfRow<BN>::row_max(const float* row) const {
  float m = -INFINITY;
#pragma unroll
  for (int c = 0; c < kHalf; ++c) m = fmaxf(m, row[column(c)]);
  return pair_max(m);
}

// Softmax: online max and sum; the tile's scores become exp2(x - max).
template <int BN, int kLdS>
__device__ void softmax_rows(float* Ss, RowState rs) {
  const HalfRow<BN> hr;
  float* row = Ss + hr.r * kLdS;
  const float tile_max = hr.row_max(row);
  const float old_max = rs.max[hr.r];
  const float new_max = fmaxf(old_max, tile_max);
  float part = 0.0f, rescale = 1.0f;
  if (new_max != -INFINITY) {
    rescale = exp2f(old_max - new_max);  // 0 when old_max = -inf
#pragma unroll
    for (int c = 0; c < HalfRow<BN>::kHalf; ++c) {
      const int j = hr.column(c);
      const float e = exp2f(row[j] - new_max);
      row[j] = e;
      part += e;
    }
  } else {
#pragma unroll
    for (int c = 0; c < HalfRow<BN>::kHalf; ++c) row[hr.column(c)] = 0.0f;
  }
  part = pair_sum(part);
  if (hr.h == 0) {
    rs.max[hr.r] = new_max;
    rs.sum[hr.r] = rs.sum[hr.r] * rescale + part;
    rs.rescale[hr.r] = rescale;
  }
}

// Keeps the entries of list[0, count) that are >= thr, in order; returns how
// many. Each chunk is read before any write reaches it (writes go to indices
// at or below the reads already done).
__device__ inline int compact_candidates(float* list, int count, float thr) {
  const int lane = threadIdx.x % kWarpSize;
  int kept = 0;
  for (int base = 0; base < count; base += kWarpSize) {
    const int t = base + lane;
    const float x = t < count ? list[t] : -INFINITY;
    const bool keep = t < count && x >= thr;
    const unsigned bal = __ballot_sync(kFullWarp, keep);
    __syncwarp();
    if (keep) list[kept + __popc(bal & lanes_below())] = x;
    kept += __popc(bal);
    __syncwarp();
  }
  return kept;
}

// The candidates' threshold as an absolute score, rounded down with a margin
// far above the solve's rounding (tau to ~1e-7, x - max to an ulp of max): a
// floor that is never above the exact threshold of the candidates, so never
// above the row's final one.
__device__ inline float threshold_floor(float max, detail::Tau tau) {
  const double t = static_cast<double>(max) + static_cast<double>(tau.hi) + static_cast<double>(tau.lo);
  return __double2float_rd(t - (1e-4 + 1e-6 * fabs(static_cast<double>(max))));
}

// How many of this lane's kPer scores the warp holds at or above thr, with
// the ballots for placing them.
template <int kPer>
__device__ inline int count_at_least(const float (&x)[kPer], float thr, unsigned (&bal)[kPer]) {
  int n = 0;
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    bal[c] = __ballot_sync(kFullWarp, x[c] >= thr);
    n += __popc(bal[c]);
  }
  return n;
}

// Entmax sweep 1 for row r, the whole warp: running max, candidates x >=
// max(running max - 1, floor), the floor solved again first when the list
// would exceed tighten_at, compaction when it would exceed the capacity.
template <int BN, int kLdS>
__device__ void collect_row_warp(const float* Ss, RowState rs, const FusedParams& p, int q0, int r) {
  constexpr int kPer = BN / 32;
  const int lane = threadIdx.x % kWarpSize;
  const float* row = Ss + r * kLdS;
  float x[kPer];
  float tile_max = -INFINITY;
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    x[c] = row[lane + 32 * c];
    tile_max = fmaxf(tile_max, x[c]);
  }
  tile_max = detail::warp_max(tile_max);
  const float old_max = rs.max[r];
  const float new_max = fmaxf(old_max, tile_max);
  int status = rs.status[r];
  int count = rs.count[r];
  float floor = rs.floor[r];
  int tighten_at = rs.tighten_at[r];
  if (new_max != -INFINITY && status == kCollecting) {
    float thr = fmaxf(new_max - 1.0f, floor);
    unsigned bal[kPer];
    int fresh = count_at_least(x, thr, bal);
    float* list = p.cand + static_cast<std::size_t>(q0 + r) * static_cast<std::size_t>(p.cap);
    if (count + fresh > tighten_at && count > 0) {
      // The list holds old_max and every seen score above max(floor, old_max - 1), so its mass there is
      // >= 1 and the solve may start there.
      const double lo = fmax(-1.0, static_cast<double>(floor) - static_cast<double>(old_max));
      floor = fmaxf(floor, threshold_floor(old_max, detail::warp_entmax_tau(list, static_cast<std::size_t>(count),
                                                                            old_max, p.w, lo, 0.0, kTightenSteps)));
      thr = fmaxf(new_max - 1.0f, floor);
      count = compact_candidates(list, count, thr);
      fresh = count_at_least(x, thr, bal);
      tighten_at = max(kFirstTighten, 2 * (count + fresh));
    }
    if (count + fresh > p.cap) count = compact_candidates(list, count, thr);
    if (count + fresh > p.cap) {
      status = kOverflowed;
    } else {
#pragma unroll
      for (int c = 0; c < kPer; ++c) {
        if (x[c] >= thr) list[count + __popc(bal[c] & lanes_below())] = x[c];
        count += __popc(bal[c]);
      }
    }
  }
  __syncwarp();
  if (lane == 0) {
    rs.max[r] = new_max;
    rs.count[r] = count;
    rs.floor[r] = floor;
    rs.tighten_at[r] = tighten_at;
    rs.status[r] = status;
  }
}

// Entmax sweep 1: running max, and candidates x >= max(running max - 1,
// floor). Each thread appends its half row's candidates; a row whose list
// needs its floor solved again or compacting goes to collect_row_warp.
template <int BN, int kLdS>
__device__ void collect_running(const float* Ss, RowState rs, const FusedParams& p, int q0) {
  const HalfRow<BN> hr;
  const float* row = Ss + hr.r * kLdS;
  const float tile_max = hr.row_max(row);
  const float old_max = rs.max[hr.r];
  const float new_max = fmaxf(old_max, tile_max);
  const bool collecting = new_max != -INFINITY && rs.status[hr.r] == kCollecting;
  const int count = rs.count[hr.r];
  const float thr = fmaxf(new_max - 1.0f, rs.floor[hr.r]);
  int mine = 0;
  if (collecting) {
#pragma unroll
    for (int c = 0; c < HalfRow<BN>::kHalf; ++c) mine += row[hr.column(c)] >= thr ? 1 : 0;
  }
  const int other = __shfl_xor_sync(kFullWarp, mine, 1);
  const int fresh = mine + other;
  const bool slow = collecting && ((count + fresh > rs.tighten_at[hr.r] && count > 0) || count + fresh > p.cap);
  if (collecting && !slow) {
    float* out = p.cand + static_cast<std::size_t>(q0 + hr.r) * static_cast<std::size_t>(p.cap) + count +
                 (hr.h == 1 ? other : 0);
    int pos = 0;
#pragma unroll
    for (int c = 0; c < HalfRow<BN>::kHalf; ++c) {
      const float x = row[hr.column(c)];
      if (x >= thr) out[pos++] = x;
    }
  }
  if (!slow && hr.h == 0) {
    rs.max[hr.r] = new_max;
    if (collecting) rs.count[hr.r] = count + fresh;
  }
  unsigned pending = __ballot_sync(kFullWarp, slow && hr.h == 0);
  while (pending != 0) {
    const int lane = __ffs(pending) - 1;
    pending &= pending - 1;
    collect_row_warp<BN, kLdS>(Ss, rs, p, q0, warp_row(lane / 2));
  }
}

// The g-th of the kTrials points of [lo, hi) (g = 0 is lo itself), in double
// so that narrowing can go below float resolution (which alpha > 2 needs, see
// detail::Tau). Rounded intrinsics, so that the narrowing sweep and the
// decision after it compute the same value whatever the compiler contracts.
__device__ inline double trial_point(double lo, double hi, int g) {
  if (g == 0) return lo;
  return __fma_rn(__dsub_rn(hi, lo), static_cast<double>(g) * (1.0 / kTrials), lo);
}

// x - max - t > 0, in double (exact differences of floats): the one test by
// which narrowing counts the scores above a trial point and the collecting
// sweep gathers them, so the two always agree.
__device__ inline double above_trial(float x, float max, double t) {
  return __dsub_rn(__dsub_rn(static_cast<double>(x), static_cast<double>(max)), t);
}

// After sweep 1: tau for the queries whose candidates fit; the others start
// narrowing on [-1, 0).
__device__ inline void solve_after_collect(RowState rs, double* mass, int* count_above, const FusedParams& p, int q0) {
  const int lane = threadIdx.x % kWarpSize;
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp_row(rr);
    const float mx = rs.max[r];
    int status = rs.status[r];
    detail::Tau tau;
    if (q0 + r >= p.n || mx == -INFINITY) {
      status = kEmpty;
    } else if (status == kCollecting) {
      const float* list = p.cand + static_cast<std::size_t>(q0 + r) * static_cast<std::size_t>(p.cap);
      // The floor is at or below the threshold, so the mass there is >= 1: a valid, closer start.
      const double lo = fmax(-1.0, static_cast<double>(rs.floor[r]) - static_cast<double>(mx));
      tau = detail::warp_entmax_tau(list, static_cast<std::size_t>(rs.count[r]), mx, p.w, lo, 0.0);
      status = kSolved;
    } else {
      status = kNarrowing;
      if (lane < kTrials) {
        mass[r * kTrials + lane] = 0.0;
        count_above[r * kTrials + lane] = 0;
      }
    }
    __syncwarp();
    if (lane == 0) {
      rs.status[r] = status;
      rs.tau_hi[r] = tau.hi;
      rs.tau_lo[r] = tau.lo;
      rs.lo[r] = -1.0;
      rs.hi[r] = 0.0;
    }
  }
}

// A narrowing or collecting sweep's row phase.
template <int BN, int kLdS>
__device__ void narrow_rows(const float* Ss, RowState rs, double* mass, int* count_above, const FusedParams& p,
                            int q0) {
  constexpr int kPer = BN / 32;
  const int lane = threadIdx.x % kWarpSize;
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp_row(rr);
    const int status = rs.status[r];
    const float* row = Ss + r * kLdS;
    if (status == kNarrowing) {
      // Lane g (and g + 16, on the other half of the columns) evaluates trial point g.
      const float mx = rs.max[r];
      const int g = lane % kTrials, half = lane / kTrials;
      const double t = trial_point(rs.lo[r], rs.hi[r], g);
      double f = 0.0;
      int above = 0;
      for (int c = half; c < BN; c += 2) {
        const double w = above_trial(row[c], mx, t);
        if (w > 0.0) {
          f += detail::entmax_pow(w, p.w);
          ++above;
        }
      }
      f += __shfl_xor_sync(kFullWarp, f, kTrials);
      above += __shfl_xor_sync(kFullWarp, above, kTrials);
      if (lane < kTrials) {
        mass[r * kTrials + g] += f;
        count_above[r * kTrials + g] += above;
      }
    } else if (status == kCollectAbove) {
      const float mx = rs.max[r];
      const double lo = rs.lo[r];
      float* list = p.cand + static_cast<std::size_t>(q0 + r) * static_cast<std::size_t>(p.cap);
      int count = rs.count[r];
#pragma unroll
      for (int c = 0; c < kPer; ++c) {
        const float x = row[lane + 32 * c];
        const bool keep = above_trial(x, mx, lo) > 0.0;  // the narrowing sweep's test at t = lo
        const unsigned bal = __ballot_sync(kFullWarp, keep);
        const int pos = count + __popc(bal & lanes_below());
        if (keep && pos < p.cap) list[pos] = x;
        count += __popc(bal);
      }
      __syncwarp();
      if (lane == 0) rs.count[r] = count;
    }
  }
}

// After a narrowing or collecting sweep: solve the collected rows, shrink the
// brackets of the others.
__device__ inline void after_narrowing(RowState rs, double* mass, int* count_above, const FusedParams& p, int q0,
                                int sweep) {
  const int lane = threadIdx.x % kWarpSize;
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp_row(rr);
    const int status = rs.status[r];
    if (status == kCollectAbove) {
      const int count = rs.count[r];
      // count > cap cannot happen (the narrowing sweep counted them); lo would still be a valid tau.
      detail::Tau tau = detail::split_tau(rs.lo[r]);
      if (count <= p.cap) {
        const float* list = p.cand + static_cast<std::size_t>(q0 + r) * static_cast<std::size_t>(p.cap);
        tau = detail::warp_entmax_tau(list, static_cast<std::size_t>(count), rs.max[r], p.w, rs.lo[r], rs.hi[r]);
      }
      __syncwarp();
      if (lane == 0) {
        rs.tau_hi[r] = tau.hi;
        rs.tau_lo[r] = tau.lo;
        rs.status[r] = kSolved;
      }
    } else if (status == kNarrowing) {
      const double lo = rs.lo[r], hi = rs.hi[r];
      int best = 0;  // the largest trial point whose mass is still >= 1 (lo's is)
      for (int g = 1; g < kTrials; ++g)
        if (mass[r * kTrials + g] >= 1.0) best = g;
      const double new_lo = trial_point(lo, hi, best);
      const double new_hi = best + 1 < kTrials ? trial_point(lo, hi, best + 1) : hi;
      const int above = count_above[r * kTrials + best];
      int next;
      if (above <= p.cap)
        next = kCollectAbove;
      else if (sweep + 1 >= (p.w.newton ? kMaxNarrowing : kMaxNarrowingSteep) || !(new_hi - new_lo > kNarrowedWidth))
        next = kSolved;  // tau = new_lo, within the bracket's width of the root
      else
        next = kNarrowing;
      __syncwarp();
      if (next == kNarrowing && lane < kTrials) {
        mass[r * kTrials + lane] = 0.0;
        count_above[r * kTrials + lane] = 0;
      }
      if (lane == 0) {
        const detail::Tau tau = detail::split_tau(new_lo);
        rs.lo[r] = new_lo;
        rs.hi[r] = new_hi;
        rs.tau_hi[r] = tau.hi;
        rs.tau_lo[r] = tau.lo;
        rs.count[r] = 0;
        rs.status[r] = next;
      }
    }
  }
}

// Entmax output sweep: the tile's scores become weights; row sums accumulate.
template <int BN, int kLdS>
__device__ void entmax_weight_rows(float* Ss, RowState rs, const FusedParams& p) {
  const HalfRow<BN> hr;
  float* row = Ss + hr.r * kLdS;
  const bool solved = rs.status[hr.r] == kSolved;
  const float mx = rs.max[hr.r];
  const detail::Tau tau{rs.tau_hi[hr.r], rs.tau_lo[hr.r]};
  float part = 0.0f;
  // Not fully unrolled: attention_weight inlines powf, and 32 copies of it
  // spilled registers and missed the instruction cache.
#pragma unroll 4
  for (int c = 0; c < HalfRow<BN>::kHalf; ++c) {
    const int j = hr.column(c);
    const float w = solved ? detail::attention_weight(row[j], mx, tau, p.w) : 0.0f;
    row[j] = w;
    part += w;
  }
  part = pair_sum(part);
  if (hr.h == 0) rs.sum[hr.r] += part;
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
  extern __shared__ float4 smem_vec[];
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
  if (threadIdx.x < kBlockM) {
    rs.max[threadIdx.x] = -INFINITY;
    rs.sum[threadIdx.x] = 0.0f;
    rs.rescale[threadIdx.x] = 1.0f;
    rs.tau_hi[threadIdx.x] = 0.0f;
    rs.tau_lo[threadIdx.x] = 0.0f;
    rs.lo[threadIdx.x] = -1.0;
    rs.hi[threadIdx.x] = 0.0;
    rs.floor[threadIdx.x] = -INFINITY;
    rs.count[threadIdx.x] = 0;
    rs.tighten_at[threadIdx.x] = kFirstTighten;
    rs.status[threadIdx.x] = kCollecting;
  }
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
      collect_running<BN, L::kLdS>(Ss, rs, p, q0);
    }
    __syncthreads();
    // 2. tau from the candidates.
    solve_after_collect(rs, mass, count_above, p, q0);
    // 3. Overflowed queries: narrowing sweeps, then one collecting sweep each.
    for (int sweep = 0;; ++sweep) {
      __syncthreads();
      const int st = threadIdx.x < kBlockM ? rs.status[threadIdx.x] : kSolved;
      if (!__syncthreads_or(st == kNarrowing || st == kCollectAbove)) break;
      for (int t = 0; t < tiles; ++t) {
        score_tile<D, DV, kSoftmax, false>(t, Qs, Ks, Vs, key_ok, Ss, q0, p);
        narrow_rows<BN, L::kLdS>(Ss, rs, mass, count_above, p, q0);
      }
      __syncthreads();
      after_narrowing(rs, mass, count_above, p, q0, sweep);
    }
    // 4. Weights and P V.
    for (int t = 0; t < tiles; ++t) {
      score_tile<D, DV, kSoftmax, true>(t, Qs, Ks, Vs, key_ok, Ss, q0, p);
      entmax_weight_rows<BN, L::kLdS>(Ss, rs, p);
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
  kernel<<<blocks, kThreads, bytes, stream>>>(p);
  check(cudaGetLastError(), "cuda::attention_forward (launch)");
}

}  // namespace entgraph::cuda::detail::fused
