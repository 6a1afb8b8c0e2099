// The fused attention kernel's configuration (FlashAttention's "traits"):
// block shape, shared-memory layout, the per-query state and the parameters
// of one launch. The algorithm is described in fused_attention_kernel.cuh;
// fused_attention.cu launches it, and fused_attention_hdim<d>.cu compile its
// instances, one file per query/key head dimension.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "attention_common.cuh"

namespace entgraph::cuda::detail::fused {

constexpr int kBlockM = 64;    // queries per block
constexpr int kThreads = 128;  // 4 warps; the register tiles assume 16 x 8 threads
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = kBlockM / kWarps;
constexpr int kTrials = 16;          // trial thresholds per narrowing sweep (half a warp)
constexpr int kMaxNarrowing = 8;        // sweeps; then the bracket is 16^-8 ~ 2e-10 wide
constexpr int kMaxNarrowingSteep = 12;  // alpha > 2: 16^-12 ~ 4e-15, as the weights are steep near 0
constexpr double kNarrowedWidth = 1e-12;  // a narrower bracket is tau itself
constexpr std::size_t kDefaultCapacity = 1024;
constexpr int kFirstTighten = 128;  // candidates kept before the floor is first solved
constexpr int kTightenSteps = 3;    // Newton steps per floor: every step from below is a lower bound
constexpr int kRowSlots = 2 * 2 + 6 + 3;  // float-sized slots of RowState per row

// Per-query status of the entmax solve.
enum RowStatus : int {
  kCollecting = 0,  // sweep 1: gathering candidates
  kOverflowed,      // sweep 1: candidates did not fit
  kNarrowing,       // extra sweeps: evaluating trial thresholds in [lo, hi]
  kCollectAbove,    // extra sweep: gathering the scores above lo (they fit)
  kSolved,          // tau known
  kEmpty,           // no visible key, or a padding row of the last block
};

// Shared-memory layout, in floats (ints are stored in float-sized slots).
template <int D, int DV, bool kSoftmax>
struct Layout {
  static constexpr int kBlockN = (D > 64 || DV > 64) ? 32 : 64;
  static constexpr int kLdQK = D + 4;       // keeps rows 16-byte aligned and spreads them over banks
  static constexpr int kLdV = DV + 4;
  static constexpr int kLdS = kBlockN + 8;  // 8 ty + tx: distinct banks for the score writes
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kBlockM * kLdQK;
  static constexpr int kV = kK + kBlockN * kLdQK;
  static constexpr int kS = kV + kBlockN * kLdV;
  static constexpr int kKeyOk = kS + kBlockM * kLdS;  // kBlockN ints
  static constexpr int kRows = kKeyOk + kBlockN;      // RowState: kRowSlots floats per row
  static constexpr int kEnd = kRows + kRowSlots * kBlockM;
  // Entmax narrowing: kBlockM x kTrials doubles (mass), then as many ints
  // (counts). They live in the V tile when it is large enough: V is only
  // loaded by the last sweep, after narrowing is over.
  static constexpr int kNarrowing = 3 * kBlockM * kTrials;
  static constexpr bool kInV = kBlockN * kLdV >= kNarrowing;
  static constexpr int kMass = kSoftmax ? kEnd : (kInV ? kV : kEnd);
  static constexpr int kCount = kMass + 2 * kBlockM * kTrials;
  static constexpr int kTotal = kSoftmax || kInV ? kEnd : kEnd + kNarrowing;
  static constexpr std::size_t kBytes = static_cast<std::size_t>(kTotal) * sizeof(float);
  static_assert(kBlockN % 32 == 0 && kQ % 4 == 0 && kK % 4 == 0 && kV % 4 == 0 && kS % 4 == 0 && kRows % 4 == 0 &&
                    kEnd % 2 == 0,
                "float4 rows must stay 16-byte aligned, doubles 8-byte aligned");
};

struct FusedParams {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  const std::uint8_t* key_padding;  // may be null
  float* cand;                      // entmax: n x cap
  int n, m, cap;
  bool causal;
  Weighting w;
};

// Per-query state in shared memory (kBlockM entries each).
struct RowState {
  double* lo;      // entmax narrowing: the bracket of tau (relative to the max)
  double* hi;
  float* max;      // running max of x
  float* sum;      // sum of weights
  float* rescale;  // softmax: this tile's factor for the accumulator
  float* tau_hi;   // tau = tau_hi + tau_lo (see detail::Tau)
  float* tau_lo;
  float* floor;    // entmax sweep 1: a lower bound on the row's final threshold x - max - tau = 0
  int* count;      // candidates stored
  int* tighten_at; // entmax sweep 1: solve the floor again when the list would exceed this
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

// Launches the kernel of one head-dimension pair and transform family on
// `stream` (instantiated in fused_attention_hdim<D>.cu).
template <int D, int DV, bool kSoftmax>
void launch_fused(const FusedParams& p, cudaStream_t stream);

}  // namespace entgraph::cuda::detail::fused
