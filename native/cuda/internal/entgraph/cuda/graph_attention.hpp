// entgraph CUDA backend: attention computed only on the edges of a graph.
//
// The semantics of entgraph/graph_attention.hpp without certificates: for
// query i the candidate keys are the keys of graph row i that the masks allow
// (causal: j < causal_key_limit(i, n, m); key_padding: flag j non-zero); only
// their scores s_j = scale q_i . k_j are computed, the transform runs on that
// gathered row, and out_i = sum_j p_j v_j. Edges the masks forbid are ignored.
// A query with no candidate key gets a zero output row. With the full graph
// this is dense attention; with a graph holding the support of every
// alpha-entmax row (alpha > 1) it equals dense attention too (sparse
// consistency, Peters et al. 2019; Treviso et al. 2022 "Sparsefinder").
//
// One warp per query: lanes compute the row's scores (one key per lane) into a
// scratch of one float per edge, the warp solves the row's threshold on them
// (softmax: max and sum; entmax: the same safeguarded Newton as the fused
// kernel), then accumulates the weighted V rows, skipping zero weights (so an
// entmax row reads only the V rows of its support). Any d and dv >= 1 (d a
// multiple of 4 with 16-byte aligned q and k takes vector loads).
//
// Transforms: softmax, sparsemax, entmax15, entmax(alpha). top-k and the
// others are rejected with entgraph::Error (the CPU's graph attention
// supports top-k; this backend does not yet).
// Precision: float32; matches the CPU's graph_attention_forward (mode fast)
// within about 1e-5 of the largest |v|.
#pragma once

#include <cstddef>
#include <cstdint>

#include "entgraph/attention.hpp"
#include "entgraph/cuda/attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/cuda/device_graph.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/matrix_view.hpp"

namespace entgraph::cuda {

// Bytes of scratch graph_attention_forward needs: one float per edge.
std::size_t graph_attention_workspace_bytes(std::size_t edges);

// out (n x dv) = attention of q (n x d) on the keys k (m x d) and values v
// (m x dv) of each query's graph row, device pointers, row-major, contiguous.
// The graph is CSR on the device: offsets (n + 1 values, offsets[0] = 0,
// offsets[n] = edges) and indices (edges key indices, each < m; sorted rows
// are not required). The kernel trusts the offsets to be non-decreasing and
// reads nothing outside [0, edges) or outside [0, m) even when they are not.
// options: transform, scale, causal, key_padding (device, m flags),
// workspace / workspace_bytes (graph_attention_workspace_bytes(edges); null:
// allocated on the stream). candidate_capacity is unused. Asynchronous.
void graph_attention_forward(const float* q, const float* k, const float* v, const std::size_t* offsets,
                             const std::uint32_t* indices, std::size_t edges, float* out, std::size_t n,
                             std::size_t m, std::size_t d, std::size_t dv, const FusedAttentionOptions& options,
                             cudaStream_t stream = nullptr);

// The same on an uploaded graph (n = graph.queries, m = graph.keys).
void graph_attention_forward(const float* q, const float* k, const float* v, const DeviceGraph& graph, float* out,
                             std::size_t d, std::size_t dv, const FusedAttentionOptions& options,
                             cudaStream_t stream = nullptr);

// Host memory: entgraph::graph_attention_forward(Device::cuda, ...) (entgraph/graph_attention.hpp).

}  // namespace entgraph::cuda
