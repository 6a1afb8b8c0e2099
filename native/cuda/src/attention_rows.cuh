// The row phase of the fused attention kernels (float32: fused_attention_
// kernel.cuh; bfloat16/float16 on tensor cores: batched_attention_kernel.cuh).
// Both keep a 64 x kBlockN tile of scores S in shared memory, already scaled
// and masked (-inf), at a row stride of 8 mod 32 floats, with 128 threads in
// which warp w owns rows [16 w, 16 w + 16). What a kernel does between its
// tiles (how S is computed, how P V is accumulated) is its own; the per-row
// state and algorithm are shared:
// - softmax: online max and sum (softmax_rows);
// - alpha-entmax: sweep 1 gathers candidates (collect_running), tau is solved
//   from them (solve_after_collect), overflowed rows narrow tau with more
//   sweeps (narrow_rows, after_narrowing), and the last sweep turns scores
//   into weights (entmax_weight_rows). fused_attention_kernel.cuh describes
//   the algorithm and why it is exact;
// - top-k softmax: entmax's sweeps, its threshold the row's k-th largest
//   score (topk_select.cuh says what differs).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "attention_common.cuh"
#include "reduce.cuh"
#include "topk_select.cuh"

namespace entgraph::cuda::detail::fused {

using detail::kFullWarp;
using detail::kWarpSize;
using detail::Weighting;

constexpr int kBlockM = 64;    // queries per block
constexpr int kThreads = 128;  // 4 warps; thread t owns half of row t / 2 in the row phase
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = kBlockM / kWarps;
constexpr int kTrials = 16;               // trial thresholds per narrowing sweep (half a warp)
constexpr int kMaxNarrowing = 8;          // sweeps; then the bracket is 16^-8 ~ 2e-10 wide
constexpr int kMaxNarrowingSteep = 12;    // alpha > 2: 16^-12 ~ 4e-15, as the weights are steep near 0
constexpr double kNarrowedWidth = 1e-12;  // a narrower bracket is tau itself
constexpr int kFirstTighten = 128;        // candidates kept before the floor is first solved
constexpr int kTightenSteps = 3;          // Newton steps per floor: every step from below is a lower bound
constexpr int kRowSlots = 2 * 2 + 6 + 3;  // float-sized slots of RowState per row
// Entmax narrowing's scratch in shared memory: kBlockM x kTrials doubles
// (mass), then as many ints (counts), in floats.
constexpr int kNarrowingFloats = 3 * kBlockM * kTrials;

// Per-query status of the entmax solve.
enum RowStatus : int {
  kCollecting = 0,  // sweep 1: gathering candidates
  kOverflowed,      // sweep 1: candidates did not fit
  kNarrowing,       // extra sweeps: evaluating trial thresholds in [lo, hi]
  kCollectAbove,    // extra sweep: gathering the scores above lo (they fit)
  kSolved,          // tau known
  kEmpty,           // no visible key, or a padding row of the last block
};

// Per-query state in shared memory (kBlockM entries each).
struct RowState {
  double* lo;  // entmax narrowing: the bracket of tau (relative to the max)
  double* hi;
  float* max;      // running max of x
  float* sum;      // sum of weights
  float* rescale;  // softmax: this tile's factor for the accumulator
  float* tau_hi;   // tau = tau_hi + tau_lo (see detail::Tau)
  float* tau_lo;
  float* floor;     // entmax sweep 1: a lower bound on the row's final threshold x - max - tau = 0
  int* count;       // candidates stored
  int* tighten_at;  // entmax sweep 1: solve the floor again when the list would exceed this
  int* status;
};

__device__ inline RowState row_state(float* base) {  // base is 16-byte aligned
  RowState s;
  s.lo = reinterpret_cast<double*>(base);
  s.hi = reinterpret_cast<double*>(base + 2 * kBlockM);
  s.max = base + 4 * kBlockM;
  s.sum = base + 5 * kBlockM;
  s.rescale = base + 6 * kBlockM;
  s.tau_hi = base + 7 * kBlockM;
  s.tau_lo = base + 8 * kBlockM;
  s.floor = base + 9 * kBlockM;
  s.count = reinterpret_cast<int*>(base + 10 * kBlockM);
  s.tighten_at = reinterpret_cast<int*>(base + 11 * kBlockM);
  s.status = reinterpret_cast<int*>(base + 12 * kBlockM);
  return s;
}

// Every row's state before the first tile (thread r < kBlockM sets row r).
__device__ inline void init_rows(RowState rs) {
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
}

// A block's rows as the row phase sees them: the candidate lists in global
// scratch (row r's at cand + r * cap; null for softmax), how many rows exist
// (rows >= `rows` are padding: kEmpty), and the transform.
struct RowBlock {
  float* cand;
  int cap;
  int rows;
  Weighting w;
  __device__ float* list(int r) const { return cand + static_cast<std::size_t>(r) * static_cast<std::size_t>(cap); }
};

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

// Sweep 1 collects the scores at or above this: entmax's running max - 1 (no
// support key lies below it) or its floor, whichever is higher; top-k's floor.
__device__ inline float collect_threshold(float max, float floor, const Weighting& w) {
  return w.topk > 0 ? topk::lowest_candidate(floor) : fmaxf(max - 1.0f, floor);
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
// collect_threshold, the floor solved again first when the list would
// exceed tighten_at (top-k: the list's k-th largest, once it holds k),
// compaction when it would exceed the capacity.
template <int BN, int kLdS>
__device__ void collect_row_warp(const float* Ss, RowState rs, const RowBlock& p, int r) {
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
    float thr = collect_threshold(new_max, floor, p.w);
    unsigned bal[kPer];
    int fresh = count_at_least(x, thr, bal);
    float* list = p.list(r);
    if (count + fresh > tighten_at && count > 0) {
      if (p.w.topk > 0) {
        if (count >= p.w.topk) floor = fmaxf(floor, topk::warp_kth_largest(list, count, p.w.topk));
      } else {
        // The list holds old_max and every seen score above max(floor, old_max - 1), so its mass there is
        // >= 1 and the solve may start there.
        const double lo = fmax(-1.0, static_cast<double>(floor) - static_cast<double>(old_max));
        floor = fmaxf(floor, threshold_floor(old_max, detail::warp_entmax_tau(list, static_cast<std::size_t>(count),
                                                                              old_max, p.w, lo, 0.0, kTightenSteps)));
      }
      thr = collect_threshold(new_max, floor, p.w);
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

// Entmax sweep 1: running max, and candidates x >= collect_threshold.
// Each thread appends its half row's candidates; a row whose list
// needs its floor solved again or compacting goes to collect_row_warp.
// Returns whether this tile can hold a key of the row's support: a
// candidate (tested against the floor before any tightening here, so a
// superset), or any visible key once the row has overflowed. Every support
// key is a candidate when its tile is seen (the running max - 1 and the floor
// are at or below the final threshold; top-k's floor is at or below its k-th
// largest score), so a tile for which no row of a block
// returns true has only zero weights there.
template <int BN, int kLdS>
__device__ bool collect_running(const float* Ss, RowState rs, const RowBlock& p) {
  const HalfRow<BN> hr;
  const float* row = Ss + hr.r * kLdS;
  const float tile_max = hr.row_max(row);
  const float old_max = rs.max[hr.r];
  const float new_max = fmaxf(old_max, tile_max);
  const bool collecting = new_max != -INFINITY && rs.status[hr.r] == kCollecting;
  const int count = rs.count[hr.r];
  const float thr = collect_threshold(new_max, rs.floor[hr.r], p.w);
  int mine = 0;
  if (collecting) {
#pragma unroll
    for (int c = 0; c < HalfRow<BN>::kHalf; ++c) mine += row[hr.column(c)] >= thr ? 1 : 0;
  }
  const int other = __shfl_xor_sync(kFullWarp, mine, 1);
  const int fresh = mine + other;
  const bool slow = collecting && ((count + fresh > rs.tighten_at[hr.r] && count > 0) || count + fresh > p.cap);
  if (collecting && !slow) {
    float* out = p.list(hr.r) + count + (hr.h == 1 ? other : 0);
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
    collect_row_warp<BN, kLdS>(Ss, rs, p, warp_row(lane / 2));
  }
  return new_max != -INFINITY && (!collecting || fresh > 0);
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
// narrowing on [-1, 0) (top-k: on the keys from the floor's to the max's).
__device__ inline void solve_after_collect(RowState rs, double* mass, int* count_above, const RowBlock& p) {
  const int lane = threadIdx.x % kWarpSize;
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp_row(rr);
    const float mx = rs.max[r];
    int status = rs.status[r];
    detail::Tau tau;
    double lo = -1.0, hi = 0.0;
    if (r >= p.rows || mx == -INFINITY) {
      status = kEmpty;
    } else if (status == kCollecting) {
      const float* list = p.list(r);
      if (p.w.topk > 0) {
        tau = {topk::threshold(list, rs.count[r], p.w.topk), 0.0f};  // the row's max is listed: count >= 1
      } else {
        // The floor is at or below the threshold, so the mass there is >= 1: a valid, closer start.
        const double from = fmax(-1.0, static_cast<double>(rs.floor[r]) - static_cast<double>(mx));
        tau = detail::warp_entmax_tau(list, static_cast<std::size_t>(rs.count[r]), mx, p.w, from, 0.0);
      }
      status = kSolved;
    } else {
      if (p.w.topk > 0) {
        lo = topk::order_key(topk::lowest_candidate(rs.floor[r]));
        hi = static_cast<double>(topk::order_key(mx)) + 1.0;
      }
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
      rs.lo[r] = lo;
      rs.hi[r] = hi;
    }
  }
}

// A narrowing or collecting sweep's row phase.
template <int BN, int kLdS>
__device__ void narrow_rows(const float* Ss, RowState rs, double* mass, int* count_above, const RowBlock& p) {
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
      double f = 0.0;
      int above = 0;
      if (p.w.topk > 0) {  // the scores at or above trial key g
        const unsigned t = topk::trial_key(rs.lo[r], rs.hi[r], g, kTrials);
        for (int c = half; c < BN; c += 2) above += topk::order_key(row[c]) >= t ? 1 : 0;
      } else {
        const double t = trial_point(rs.lo[r], rs.hi[r], g);
        for (int c = half; c < BN; c += 2) {
          const double w = above_trial(row[c], mx, t);
          if (w > 0.0) {
            f += detail::entmax_pow(w, p.w);
            ++above;
          }
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
      float* list = p.list(r);
      int count = rs.count[r];
#pragma unroll
      for (int c = 0; c < kPer; ++c) {
        const float x = row[lane + 32 * c];
        // The narrowing sweep's test at t = lo.
        const bool keep = p.w.topk > 0 ? topk::order_key(x) >= static_cast<unsigned>(lo) : above_trial(x, mx, lo) > 0.0;
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
__device__ inline void after_narrowing(RowState rs, double* mass, int* count_above, const RowBlock& p, int sweep) {
  const int lane = threadIdx.x % kWarpSize;
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp_row(rr);
    const int status = rs.status[r];
    if (status == kCollectAbove) {
      const int count = rs.count[r];
      // count > cap cannot happen (the narrowing sweep counted them); lo would still be a valid tau.
      detail::Tau tau = p.w.topk > 0 ? detail::Tau{topk::key_value(static_cast<unsigned>(rs.lo[r])), 0.0f}
                                     : detail::split_tau(rs.lo[r]);
      if (count <= p.cap) {
        const float* list = p.list(r);
        tau = p.w.topk > 0
                  ? detail::Tau{topk::threshold(list, count, p.w.topk), 0.0f}
                  : detail::warp_entmax_tau(list, static_cast<std::size_t>(count), rs.max[r], p.w, rs.lo[r], rs.hi[r]);
      }
      __syncwarp();
      if (lane == 0) {
        rs.tau_hi[r] = tau.hi;
        rs.tau_lo[r] = tau.lo;
        rs.status[r] = kSolved;
      }
    } else if (status == kNarrowing && p.w.topk > 0) {
      // The largest trial key with at least min(k, the row's scores) scores at or above it (lo's
      // has: count_above[0] counts them all when the row has fewer than k).
      const double lo = rs.lo[r], hi = rs.hi[r];
      const int need = min(p.w.topk, count_above[r * kTrials]);
      int best = 0;
      for (int g = 1; g < kTrials; ++g)
        if (count_above[r * kTrials + g] >= need) best = g;
      const double new_lo = topk::trial_key(lo, hi, best, kTrials);
      const double new_hi = best + 1 < kTrials ? topk::trial_key(lo, hi, best + 1, kTrials) : hi;
      // One key left: it is the threshold's (no sweep limit: each sweep divides the bracket by up to 16).
      const int next =
          new_hi - new_lo <= 1.0 ? kSolved : (count_above[r * kTrials + best] <= p.cap ? kCollectAbove : kNarrowing);
      __syncwarp();
      if (next == kNarrowing && lane < kTrials) count_above[r * kTrials + lane] = 0;
      if (lane == 0) {
        rs.lo[r] = new_lo;
        rs.hi[r] = new_hi;
        rs.tau_hi[r] = topk::key_value(static_cast<unsigned>(new_lo));
        rs.tau_lo[r] = 0.0f;
        rs.count[r] = 0;
        rs.status[r] = next;
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

// Entmax output sweep: the tile's scores become weights; row sums
// accumulate. Returns the row's sum over this tile (both threads of a pair).
template <int BN, int kLdS>
__device__ float entmax_weight_rows(float* Ss, RowState rs, const RowBlock& p) {
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
  return part;
}

}  // namespace entgraph::cuda::detail::fused
