// entgraph: block-sparse attention — batched attention (batched_attention.hpp)
// restricted to the blocks of a BlockGraph (block_graph.hpp), forward and
// backward, on the CPU.
//
// q, k, v, out and the options are batched attention's: (B, Hq, n, d)
// queries, (B, Hkv, m, d) keys, (B, Hkv, m, dv) values, grouped-query heads,
// per-sequence lengths, causal, float32 / bfloat16 / float16. Query i of
// head h of sequence b attends to key j iff
//   - j's key block is in the block row of i's query block in graph (b, h)
//     (graph.batch and graph.heads are B and Hq, or 1 for a graph that all
//     sequences or all heads share), and
//   - batched attention lets it (j < key_lengths[b], i < query_lengths[b],
//     causal: j <= i + (m_b - n_b)).
// The transform runs over those keys only, as graph attention's fast mode
// does on the key-level graph (graph_attention.hpp); a query that attends to
// no key gets a zero row. With every block kept this is batched attention.
//
// The CPU runs each (sequence, head) pair's valid rows in float32, a GEMM
// per kept key block for every product (the products' rounding is graph
// attention's on the expanded graph, BlockGraph::expand, up to their order);
// the backward keeps P and dS of at most 2^22 pairs at a time (32 MiB) and
// adds the key gradients up over query blocks in a fixed order. Gradients as
// batched_attention_backward's (key/value ones summed over the query heads
// sharing them, in float32, in head order, rounded once). Query and key
// blocks of one head run on the thread pool; results do not depend on the
// thread count. The CUDA backend runs both on tensor cores for 64 x 64
// blocks (docs/CUDA.md); this is their reference.
//
// Errors: batched attention's (with graph attention's score headroom, 16),
// the graph's invariants (BlockGraph::validate), and a graph whose batch,
// heads, queries or keys do not fit the tensors; nothing is written then.
#pragma once

#include "entgraph/batched_attention.hpp"
#include "entgraph/block_graph.hpp"
#include "entgraph/device.hpp"

namespace entgraph {

void block_sparse_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                    const BlockGraph& graph, BatchedTensor out, const BatchedAttentionOptions& options);

// The gradients of block_sparse_attention_forward for dL/dout = grad_out, as
// batched_attention_backward's (dtypes, zeros past the lengths, errors).
void block_sparse_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                     const BlockGraph& graph, ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                     BatchedTensor grad_k, BatchedTensor grad_v, const BatchedAttentionOptions& options);

// The same on `device` (host memory, the graph included): checked in the
// core as above, then run by the device's kernel
// (BackendKernels::block_sparse_attention_forward / _backward; a device
// without one refuses the call). Device::cpu runs the functions above.
void block_sparse_attention_forward(Device device, ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                    const BlockGraph& graph, BatchedTensor out, const BatchedAttentionOptions& options);
void block_sparse_attention_backward(Device device, ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                     const BlockGraph& graph, ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                     BatchedTensor grad_k, BatchedTensor grad_v, const BatchedAttentionOptions& options);
// The ops' check of the graph's shape alone (batch, heads, queries, keys
// against q and k; its block sizes), naming `op`, without reading offsets or
// blocks: for bindings that must know the graph's size before they copy it.
void check_block_graph_shape(const BlockGraph& graph, ConstBatchedTensor q, ConstBatchedTensor k, const char* op);

}  // namespace entgraph
