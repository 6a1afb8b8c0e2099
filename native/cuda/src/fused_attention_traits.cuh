// The fused attention kernel's configuration (FlashAttention's "traits"):
// shared-memory layout and the parameters of one launch (the block shape and
// the per-query state are the row phase's, attention_rows.cuh). The algorithm is described in fused_attention_kernel.cuh;
// fused_attention.cu launches it, and fused_attention_hdim<d>.cu compile its
// instances, one file per query/key head dimension.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "attention_common.cuh"
#include "attention_rows.cuh"

namespace entgraph::cuda::detail::fused {

constexpr std::size_t kDefaultCapacity = 1024;

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
  static constexpr int kNarrowing = kNarrowingFloats;
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

// Launches the kernel of one head-dimension pair and transform family on
// `stream` (instantiated in fused_attention_hdim<D>.cu).
template <int D, int DV, bool kSoftmax>
void launch_fused(const FusedParams& p, cudaStream_t stream);

}  // namespace entgraph::cuda::detail::fused
