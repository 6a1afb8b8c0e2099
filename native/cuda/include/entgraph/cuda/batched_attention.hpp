// entgraph CUDA backend: batched attention on device memory, bfloat16 and
// float16 on tensor cores (mma.sync m16n8k16, float32 accumulation), all
// (sequence, head, query tile) triples in one launch.
//
// The contract is entgraph/batched_attention.hpp's (shapes, strides,
// grouped-query heads, per-sequence lengths, causal rule, transforms), on
// device pointers, asynchronous on `stream`. Differences:
// - options.query_lengths / key_lengths are device pointers (batch int32
//   values each, or null); values outside [0, n] / [0, m] are clamped there,
//   since they cannot be checked on the host without a synchronisation;
// - Q, K and V are not scanned for NaN or inf (a NaN gives NaN rows);
// - d = dv in {64, 128}; columns 16-byte aligned (data and every stride a
//   multiple of 8 elements); dtype bfloat16 or float16 on tensor cores, or
//   float32 through the float32 fused kernel of attention.hpp one head at a
//   time (contiguous heads only: row_stride == cols);
// - transforms: softmax, sparsemax, entmax15, entmax(alpha); top-k is refused.
//
// Exactness (docs/CUDA.md, "Error model"): the scores are the float32 sums
// of the exact products of the 16-bit inputs, as the float64 reference on
// the same rounded inputs computes them up to float32 summation; the
// threshold tau of each row is solved exactly for those scores (no fixed
// iteration count); P V uses P split into two 16-bit parts (hi + lo), so P's
// rounding costs ~2^-16 relative, not 2^-8. Key tiles whose largest score
// cannot clear tau are skipped in the P V sweep.
#pragma once

#include <cstddef>

#include "entgraph/batched_attention.hpp"
#include "entgraph/cuda/device.hpp"

namespace entgraph::cuda {

// Bytes of device scratch batched_attention_forward needs for these shapes
// (per-row thresholds and statistics; 0 for softmax).
std::size_t batched_attention_workspace_bytes(ConstBatchedTensor q, ConstBatchedTensor k,
                                              const BatchedAttentionOptions& options);

// out = attention(q, k, v). workspace: device scratch of at least
// batched_attention_workspace_bytes(...) bytes, or null to allocate it on
// the stream for this call.
void batched_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                               const BatchedAttentionOptions& options, void* workspace = nullptr,
                               std::size_t workspace_bytes = 0, cudaStream_t stream = nullptr);

}  // namespace entgraph::cuda
