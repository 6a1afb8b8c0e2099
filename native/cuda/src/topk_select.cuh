// Top-k softmax's threshold in the fused attention kernels: the k-th
// largest score of a row, exactly, found by the entmax sweeps
// (attention_rows.cuh) with two changes:
// - sweep 1's floor (every score at or above it is collected) is the k-th
//   largest of the candidates collected so far, once there are k: more scores
//   can only raise a row's k-th largest, so the floor never passes it;
// - a row whose candidates overflow narrows a bracket of the threshold's
//   order key (below) by counting the scores at or above 16 trial keys a
//   sweep, until the keys at or above its low end fit the list (then they
//   are collected and the k-th largest taken) or the bracket holds one key.
// Keys and counts are integers: the threshold is the k-th largest score as
// computed, ties at it included, with no rounding anywhere.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "reduce.cuh"

namespace entgraph::cuda::detail::topk {

using detail::kFullWarp;
using detail::kWarpSize;

// A float's place in the order of floats as an unsigned integer (larger
// float, larger key; -0 just below +0, which compare equal as floats and so
// are both kept when either is the threshold).
__device__ inline unsigned order_key(float x) {
  const unsigned b = __float_as_uint(x);
  return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}
__device__ inline float key_value(unsigned key) {
  return __uint_as_float((key & 0x80000000u) != 0u ? key & 0x7fffffffu : ~key);
}

// Candidates are scores at or above this (masked keys, -inf, never are).
__device__ inline float lowest_candidate(float floor) { return fmaxf(floor, -FLT_MAX); }

// The k-th largest of list[0, count) (1 <= k <= count), whole warp: the
// largest key with at least k entries at or above it, one bit at a time
// from the top. 32 reads of the list: for the rare steps (a floor raised, an
// overflowed row's list), not per tile.
__device__ inline float warp_kth_largest(const float* list, int count, int k) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  unsigned t = 0u;
  for (int bit = 31; bit >= 0; --bit) {
    const unsigned trial = t | (1u << bit);
    int at_least = 0;
    for (int base = 0; base < count; base += kWarpSize) {
      const int i = base + lane;
      at_least += __popc(__ballot_sync(kFullWarp, i < count && order_key(list[i]) >= trial));
    }
    if (at_least >= k) t = trial;
  }
  return key_value(t);
}

// The threshold from values that hold every one at or above it: the k-th
// largest, or the smallest when there are fewer than k (then they are all
// there). count >= 1.
__device__ inline float threshold(const float* values, int count, int k) {
  return warp_kth_largest(values, count, min(k, count));
}

// Trial key g of `trials` in the bracket [lo, hi) of keys (held as doubles, which
// hold them exactly): lo + floor((hi - lo) g / 16); g = 0 is lo.
__device__ inline unsigned trial_key(double lo, double hi, int g, int trials) {
  const auto l = static_cast<unsigned long long>(lo), w = static_cast<unsigned long long>(hi) - l;
  return static_cast<unsigned>(l + w * static_cast<unsigned long long>(g) / static_cast<unsigned long long>(trials));
}

}  // namespace entgraph::cuda::detail::topk
