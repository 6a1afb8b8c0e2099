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
// - Q, K and V are not scanned for NaN or inf (a NaN gives NaN rows), nor
//   for scores or outputs that may overflow float32;
// - bfloat16 and float16: d = dv in {64, 128}; data 16-byte aligned and
//   the strides of q, k and v multiples of 8 elements (rows are copied 16
//   bytes at a time), out's multiples of 2; out may also be float32 (the
//   float32 accumulators rounded once, without the 16-bit rounding: what the
//   error model below is stated for);
// - float32 runs the float32 fused kernel of attention.hpp one head at a
//   time: d, dv in {32, 64, 128}, contiguous rows (row_stride == cols),
//   data 16-byte aligned and batch and head strides multiples of 4; with
//   per-sequence lengths it waits for `stream` once to read them;
// - batch and heads at most 65535 (grid dimensions), n and m below 2^31 - 64;
// - transforms: softmax, sparsemax, entmax15, entmax(alpha), topk_softmax(k)
//   (its threshold, the k-th largest score, found exactly as entmax's tau is;
//   k at or above m runs as softmax).
// Every check happens before anything is launched; errors name the argument.
//
// Exactness (docs/CUDA.md, "The batched tensor-core path"): the scores are
// the float32 sums of the exact products of the 16-bit inputs; the
// threshold tau of each row is solved exactly for those scores (no fixed
// iteration count); P V uses P split into two 16-bit parts (hi + lo), so P's
// rounding costs at most 2^-16 of each weight, not 2^-8. Key tiles that
// cannot hold a support key are skipped in the P V sweep (they would add
// exact zeros).
#pragma once

#include <cstddef>

#include "entgraph/batched_attention.hpp"
#include "entgraph/cuda/device_block_graph.hpp"
#include "entgraph/cuda/device.hpp"

namespace entgraph::cuda {

// Settings that change the work, not the result (beyond rounding).
struct BatchedAttentionTuning {
  // Entmax: scores kept per query in sweep 1; 0 picks min(m, 1024). A query
  // with more live candidates is still exact but costs extra sweeps over K
  // (small values are for tests of that path).
  std::size_t candidate_capacity = 0;
};

// Bytes of device scratch batched_attention_forward needs for these shapes
// on the current device (entmax candidate lists; 0 for softmax). Only the
// shapes, dtype and transform are read, not the data pointers.
std::size_t batched_attention_workspace_bytes(ConstBatchedTensor q, ConstBatchedTensor k,
                                              const BatchedAttentionOptions& options);
std::size_t batched_attention_workspace_bytes(ConstBatchedTensor q, ConstBatchedTensor k,
                                              const BatchedAttentionOptions& options,
                                              const BatchedAttentionTuning& tuning);

// out = attention(q, k, v). workspace: device scratch of at least
// batched_attention_workspace_bytes(...) bytes, or null to allocate it on
// the stream for this call. Call it qualified (entgraph::cuda::...): with
// five arguments, argument-dependent lookup also finds the core's
// host-memory entgraph::batched_attention_forward, and the call is ambiguous.
void batched_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                               const BatchedAttentionOptions& options, void* workspace = nullptr,
                               std::size_t workspace_bytes = 0, cudaStream_t stream = nullptr);
void batched_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                               const BatchedAttentionOptions& options, const BatchedAttentionTuning& tuning,
                               void* workspace = nullptr, std::size_t workspace_bytes = 0,
                               cudaStream_t stream = nullptr);

// The gradients of out = attention(q, k, v) (the core's
// batched_attention_backward contract, on device pointers, asynchronous on
// `stream`; the forward is recomputed). The differences above hold, and:
// - bfloat16 and float16 only (float32 is refused: run it on cpu), d = dv in
//   {64, 128}; grad_out in q's dtype, its strides multiples of 8 elements;
//   each gradient q's dtype or float32, strides multiples of 2;
// - grad_out is not scanned for NaN or inf;
// - device scratch of 20 bytes per query row (B x Hq x n) plus the
//   forward's entmax candidate slots, allocated on the stream.
// Method and error model: docs/CUDA.md, "The batched backward". Call it
// qualified, as the forward (with eight arguments the core's host-memory
// overload is found too).
void batched_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                BatchedTensor grad_v, const BatchedAttentionOptions& options,
                                cudaStream_t stream = nullptr);

// Block-sparse attention (entgraph/block_sparse_attention.hpp) on device
// tensors and a block graph in device memory (device_block_graph.hpp, for
// example block_cover of a predictor's device graph), forward and
// gradients: the batched entry points' contract above, 16-bit q, k and v,
// and blocks of 64 x 64; graph.batch and graph.heads are B and Hq or 1
// (shared). The graph's layout for the kernels (its transpose, for the key
// gradients) is built on `stream`, which these wait for once. Call them
// qualified, as above.
void block_sparse_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                    const DeviceBlockGraph& graph, BatchedTensor out,
                                    const BatchedAttentionOptions& options, cudaStream_t stream = nullptr);
void block_sparse_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                     const DeviceBlockGraph& graph, ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                     BatchedTensor grad_k, BatchedTensor grad_v,
                                     const BatchedAttentionOptions& options, cudaStream_t stream = nullptr);

}  // namespace entgraph::cuda
