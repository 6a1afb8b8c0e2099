// Block-sparse attention on the CPU (entgraph/block_sparse_attention.hpp):
// batched attention's checks and driver (attention/batched_heads.hpp) with,
// per head, a GEMM per kept block for the forward (block_head_forward) and
// graph attention's backward on the head's blocks expanded to keys.
#include "entgraph/block_sparse_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>
#include <limits>
#include <string>

#include "attention/batched_heads.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph_attention.hpp"
#include "kernels/matmul_kernels.hpp"
#include "kernels/transform_kernels.hpp"
#include "runtime/parallel.hpp"
#include "transforms/row_kernel.hpp"
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
  check_block_graph_shape(graph, q, k, op);
  graph.validate((std::string(op) + ": graph").c_str());
}

}  // namespace

void check_block_graph_shape(const BlockGraph& graph, ConstBatchedTensor q, ConstBatchedTensor k, const char* op) {
  auto fits = [&](const char* field, std::size_t got, const char* tensor_field, std::size_t expected, bool shared) {
    if (got == expected || (shared && got == 1)) return;
    throw Error(at_op(op) + cpp_name(std::string("graph.") + field) + " does not match " + cpp_name(tensor_field) +
                " (got " + num(got) + ", expected " + num(expected) + (shared && expected != 1 ? " or 1" : "") + ")");
  };
  fits("batch", graph.batch, "q.batch", q.batch, true);
  fits("heads", graph.heads, "q.heads", q.heads, true);
  fits("queries", graph.queries, "q.rows", q.rows, false);
  fits("keys", graph.keys, "k.rows", k.rows, false);
  if (k.rows > std::numeric_limits<std::uint32_t>::max())
    throw Error(at_op(op) + cpp_name("k.rows") + " is too large for a graph (got " + num(k.rows) + ", expected < 2^32)",
                ErrorCode::limit);
  if (graph.query_block == 0 || graph.key_block == 0)
    throw Error(at_op(op) + "graph: query_block and key_block must be >= 1 (got " + num(graph.query_block) + " and " +
                num(graph.key_block) + ")");
}

namespace {

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

// A head's kept key blocks as ranges of keys, and the buffers of one query
// block, per task.
struct KeyRange {
  std::size_t begin, end;
};
struct BlockScratch {
  std::vector<KeyRange> ranges;
  std::vector<float> qt, st, row, probs, scratch;
};

// The forward's own kernel for one head's valid rows (q: n_b x d, k and v:
// m_b keys, out: n_b x dv), query block by query block: the block's kept key
// blocks, clipped to m_b and to the causal reach of its last query, are
// contiguous rows of K and V, so S^T = K_J Q_I^T and O = sum_J P_J V_J are a
// GEMM per kept block, with nothing gathered; each query's transform runs on
// the prefix of the block's keys it may see (keys ascend, so the causal rule
// cuts a suffix). The keys are those of BlockGraph::expand, so this is graph
// attention's fast mode on the expanded graph up to the float32 rounding of
// the products.
void block_head_forward(const BlockGraph& g, std::size_t gb, std::size_t gh, ConstMatrix<float> q,
                        ConstMatrix<float> k, ConstMatrix<float> v, MatrixView<float> out,
                        const BatchedAttentionOptions& o) {
  const std::size_t n = q.rows, m = k.rows, d = q.cols, dv = v.cols, qb = g.query_block, kb = g.key_block;
  const float scale = static_cast<float>(o.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(d)) : o.scale);
  const detail::MatmulKernels<float>& mk = detail::matmul_kernels_for<float>();
  detail::RowParams params;
  const auto kernel = detail::row_kernel<float>(o.transform, params, kForward);
  // Keys query i may see: all m, or causal j <= i + (m - n).
  auto visible = [&](std::size_t i) -> std::size_t {
    if (!o.causal) return m;
    return i + m + 1 > n ? std::min(m, i + m + 1 - n) : 0;
  };
  const std::size_t blocks = (n + qb - 1) / qb;
  detail::parallel_for(blocks, 1, [&](std::size_t b0, std::size_t b1) {
    BlockScratch s;
    for (std::size_t blk = b0; blk < b1; ++blk) {
      const std::size_t i0 = blk * qb, rows = std::min(n, i0 + qb) - i0, reach = visible(i0 + rows - 1);
      s.ranges.clear();
      std::size_t u = 0;
      const std::size_t r = g.row(gb, gh, blk);
      for (const std::uint32_t* p = g.row_begin(r); p != g.row_end(r); ++p) {
        const std::size_t j0 = std::size_t{*p} * kb;
        if (j0 >= reach) break;
        const std::size_t j1 = std::min(reach, j0 + kb);
        s.ranges.push_back({j0, j1});
        u += j1 - j0;
      }
      if (u == 0) {
        for (std::size_t x = 0; x < rows; ++x) std::fill_n(out.row(i0 + x), dv, 0.0f);
        continue;
      }
      s.qt.resize(d * rows);
      for (std::size_t x = 0; x < rows; ++x)
        for (std::size_t c = 0; c < d; ++c) s.qt[c * rows + x] = q(i0 + x, c);
      s.st.resize(u * rows);
      std::size_t at = 0;
      for (const KeyRange& kr : s.ranges) {
        mk.gemm_nn(kr.end - kr.begin, rows, d, scale, k.row(kr.begin), k.stride, s.qt.data(), rows,
                   s.st.data() + at * rows, rows, false, false);
        at += kr.end - kr.begin;
      }
      s.probs.assign(rows * u, 0.0f);
      s.row.resize(u);
      s.scratch.resize(detail::scratch_floats(u));
      for (std::size_t x = 0; x < rows; ++x) {
        // The union's keys this query sees: a prefix, whole ranges up to its reach.
        const std::size_t limit = visible(i0 + x);
        std::size_t count = 0;
        for (const KeyRange& kr : s.ranges) {
          if (kr.begin >= limit) break;
          count += std::min(limit, kr.end) - kr.begin;
        }
        if (count == 0) continue;  // a zero row of P: a zero output row
        for (std::size_t y = 0; y < count; ++y) s.row[y] = s.st[y * rows + x];
        kernel(s.row.data(), s.probs.data() + x * u, count, params, s.scratch.data());
      }
      at = 0;
      for (std::size_t z = 0; z < s.ranges.size(); ++z) {
        const KeyRange& kr = s.ranges[z];
        mk.gemm_nn(rows, dv, kr.end - kr.begin, 1.0f, s.probs.data() + at, u, v.row(kr.begin), v.stride,
                   out.row(i0), out.stride, z > 0, true);
        at += kr.end - kr.begin;
      }
    }
  });
}

}  // namespace

void block_sparse_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                    const BlockGraph& graph, BatchedTensor out,
                                    const BatchedAttentionOptions& options) {
  detail::check_batched_forward(q, k, v, out, options, kForward, kGraphHeadroom);
  check_graph_fits(kForward, graph, q, k);
  detail::run_heads_forward(q, k, v, out, options,
                            [&](std::size_t b, std::size_t h, ConstMatrix<float> qm, ConstMatrix<float> km,
                                ConstMatrix<float> vm, MatrixView<float> om) {
                              block_head_forward(graph, graph.batch == 1 ? 0 : b, graph.heads == 1 ? 0 : h, qm, km,
                                                 vm, om, options);
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
