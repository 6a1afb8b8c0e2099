// Block-sparse attention on the CPU (entgraph/block_sparse_attention.hpp):
// batched attention's checks and driver (attention/batched_heads.hpp) with
// graph attention's fast mode on each head's blocks, expanded to keys.
#include "entgraph/block_sparse_attention.hpp"

#include <cstdint>
#include <limits>
#include <string>

#include "attention/batched_heads.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph_attention.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {
namespace {

constexpr const char* kForward = "block_sparse_attention_forward";
constexpr const char* kBackward = "block_sparse_attention_backward";
// graph_attention_forward's score headroom (graph_attention.cpp), so that no
// head's call can refuse what the batch check let through.
constexpr double kGraphHeadroom = 16.0;

using detail::num;

void check_graph_fits(const char* op, const BlockGraph& graph, const ConstBatchedTensor& q,
                      const ConstBatchedTensor& k) {
  auto fits = [&](const char* field, std::size_t got, const char* tensor_field, std::size_t expected, bool shared) {
    if (got == expected || (shared && got == 1)) return;
    throw Error(at_op(op) + cpp_name(std::string("graph.") + field) + " does not match " + cpp_name(tensor_field) +
                " (got " + num(got) + ", expected " + num(expected) + (shared ? " or 1" : "") + ")");
  };
  fits("batch", graph.batch, "q.batch", q.batch, true);
  fits("heads", graph.heads, "q.heads", q.heads, true);
  fits("queries", graph.queries, "q.rows", q.rows, false);
  fits("keys", graph.keys, "k.rows", k.rows, false);
  if (k.rows > std::numeric_limits<std::uint32_t>::max())
    throw Error(at_op(op) + cpp_name("k.rows") + " is too large for a graph (got " + num(k.rows) + ", expected < 2^32)",
                ErrorCode::limit);
  graph.validate((std::string(op) + ": graph").c_str());
}

GraphAttentionOptions<float> graph_options(const BatchedAttentionOptions& o) {
  GraphAttentionOptions<float> g;
  g.attention.transform = o.transform;
  g.attention.scale = o.scale;
  g.attention.causal = o.causal;
  g.mode = GraphAttentionMode::fast;
  return g;
}

// The key-level graph of query head h of sequence b over its valid rows.
Graph head_graph(const BlockGraph& graph, std::size_t b, std::size_t h, std::size_t n_b, std::size_t m_b) {
  return graph.expand(graph.batch == 1 ? 0 : b, graph.heads == 1 ? 0 : h, n_b, m_b);
}

}  // namespace

void block_sparse_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                    const BlockGraph& graph, BatchedTensor out,
                                    const BatchedAttentionOptions& options) {
  detail::check_batched_forward(q, k, v, out, options, kForward, kGraphHeadroom);
  check_graph_fits(kForward, graph, q, k);
  const GraphAttentionOptions<float> go = graph_options(options);
  detail::run_heads_forward(q, k, v, out, options,
                            [&](std::size_t b, std::size_t h, ConstMatrix<float> qm, ConstMatrix<float> km,
                                ConstMatrix<float> vm, MatrixView<float> om) {
                              graph_attention_forward<float>(qm, km, vm, head_graph(graph, b, h, qm.rows, km.rows), om,
                                                             go);
                            });
}

void block_sparse_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                     const BlockGraph& graph, ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                     BatchedTensor grad_k, BatchedTensor grad_v,
                                     const BatchedAttentionOptions& options) {
  const detail::GradTensors t{q, k, v, grad_out, grad_q, grad_k, grad_v};
  detail::check_batched_backward(t, options, kBackward, kGraphHeadroom);
  check_graph_fits(kBackward, graph, q, k);
  const GraphAttentionOptions<float> go = graph_options(options);
  detail::run_heads_backward(t, options,
                             [&](std::size_t b, std::size_t h, ConstMatrix<float> qm, ConstMatrix<float> km,
                                 ConstMatrix<float> vm, ConstMatrix<float> gom, MatrixView<float> gq,
                                 MatrixView<float> gk, MatrixView<float> gv) {
                               graph_attention_backward<float>(qm, km, vm, head_graph(graph, b, h, qm.rows, km.rows),
                                                               gom, gq, gk, gv, go);
                             });
}

}  // namespace entgraph
