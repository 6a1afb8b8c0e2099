// Block-sparse attention on the CPU (entgraph/block_sparse_attention.hpp):
// batched attention's checks and driver (attention/batched_heads.hpp) with,
// per head, GEMMs per kept block (block_head_forward, block_head_backward).
#include "entgraph/block_sparse_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attention/batched_heads.hpp"
#include "entgraph/backend.hpp"
#include "runtime/backends.hpp"
#include "entgraph/error.hpp"
#include "kernels/matmul_kernels.hpp"
#include "kernels/transform_kernels.hpp"
#include "runtime/parallel.hpp"
#include "transforms/row_driver.hpp"  // num
#include "transforms/row_kernel.hpp"

namespace entgraph {
namespace {

constexpr const char* kForward = "block_sparse_attention_forward";
constexpr const char* kBackward = "block_sparse_attention_backward";
// The score headroom of graph attention (graph_attention.cpp), whose
// key-level graphs these blocks stand for: the same inputs pass both.
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

// The block kernels of one head's valid rows (q: n_b x d, k and v: m_b
// keys). A query block's kept key blocks, clipped to m_b and to the causal
// reach of its last query, are contiguous rows of K and V, so every product
// is a GEMM per kept block with nothing gathered; each query's transform
// runs on the prefix of the block's keys it may see (keys ascend, so the
// causal rule cuts a suffix). The keys are those of BlockGraph::expand: this
// is graph attention on the expanded graph up to the float32 rounding of the
// products.
struct KeyRange {
  std::size_t begin, end;
};

class HeadBlocks {
 public:
  // Query head h of sequence b (a graph that every sequence or head shares
  // has batch or heads 1).
  HeadBlocks(const BlockGraph& g, std::size_t b, std::size_t h, ConstMatrix<float> q, ConstMatrix<float> k,
             const BatchedAttentionOptions& o)
      : g_(g), gb_(g.batch == 1 ? 0 : b), gh_(g.heads == 1 ? 0 : h), o_(o), n_(q.rows), m_(k.rows) {
    const double s = o.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(q.cols)) : o.scale;
    scale_ = static_cast<float>(s);
  }
  std::size_t blocks() const { return BlockGraph::blocks_of(n_, g_.query_block); }
  std::size_t first_row(std::size_t blk) const { return blk * g_.query_block; }
  std::size_t rows(std::size_t blk) const { return std::min(n_, first_row(blk) + g_.query_block) - first_row(blk); }
  float scale() const { return scale_; }

  // Keys query i may see: all m, or causal j <= i + (m - n).
  std::size_t visible(std::size_t i) const {
    if (!o_.causal) return m_;
    return i + m_ + 1 > n_ ? std::min(m_, i + m_ + 1 - n_) : 0;
  }
  // Block blk's key ranges; returns the number of keys they hold.
  std::size_t ranges(std::size_t blk, std::vector<KeyRange>& out) const {
    out.clear();
    const std::size_t reach = visible(first_row(blk) + rows(blk) - 1);
    std::size_t u = 0;
    const std::size_t r = g_.row(gb_, gh_, blk);
    for (const std::uint32_t* p = g_.row_begin(r); p != g_.row_end(r); ++p) {
      const std::size_t j0 = std::size_t{*p} * g_.key_block;
      if (j0 >= reach) break;
      const std::size_t j1 = std::min(reach, j0 + g_.key_block);
      out.push_back({j0, j1});
      u += j1 - j0;
    }
    return u;
  }
  // Of the u keys of `ranges`, those query i may see: a prefix.
  std::size_t seen(const std::vector<KeyRange>& ranges, std::size_t i) const {
    const std::size_t limit = visible(i);
    std::size_t count = 0;
    for (const KeyRange& kr : ranges) {
      if (kr.begin >= limit) break;
      count += std::min(limit, kr.end) - kr.begin;
    }
    return count;
  }
  // xt (cols x rows) = rows [i0, i0 + rows) of x, transposed.
  static void transpose_rows(ConstMatrix<float> x, std::size_t i0, std::size_t rows, std::vector<float>& xt) {
    xt.resize(x.cols * rows);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < x.cols; ++c) xt[c * rows + r] = x(i0 + r, c);
  }
  // yt (u x rows) = alpha * X_ranges xt, X_ranges the ranges' rows of x, xt
  // (x.cols x rows).
  static void ranges_times(const std::vector<KeyRange>& ranges, float alpha, ConstMatrix<float> x,
                           const std::vector<float>& xt, std::size_t rows, std::vector<float>& yt, std::size_t u) {
    const detail::MatmulKernels<float>& mk = detail::matmul_kernels_for<float>();
    yt.resize(u * rows);
    std::size_t at = 0;
    for (const KeyRange& kr : ranges) {
      mk.gemm_nn(kr.end - kr.begin, rows, x.cols, alpha, x.row(kr.begin), x.stride, xt.data(), rows,
                 yt.data() + at * rows, rows, false, false);
      at += kr.end - kr.begin;
    }
  }
  // out rows [i0, i0 + rows) = alpha * W X_ranges (W: rows x u, ld u).
  static void weights_times(const std::vector<KeyRange>& ranges, float alpha, const float* w, std::size_t u,
                            ConstMatrix<float> x, std::size_t rows, float* out, std::size_t ldo) {
    const detail::MatmulKernels<float>& mk = detail::matmul_kernels_for<float>();
    std::size_t at = 0;
    for (std::size_t z = 0; z < ranges.size(); ++z) {
      const KeyRange& kr = ranges[z];
      mk.gemm_nn(rows, x.cols, kr.end - kr.begin, alpha, w + at, u, x.row(kr.begin), x.stride, out, ldo, z > 0,
                 true);
      at += kr.end - kr.begin;
    }
  }

 private:
  const BlockGraph& g_;
  std::size_t gb_, gh_;
  const BatchedAttentionOptions& o_;
  std::size_t n_, m_;
  float scale_ = 1.0f;
};

// Per task: a query block's ranges and buffers.
struct BlockScratch {
  std::vector<KeyRange> ranges;
  std::vector<float> qt, st, got, dpt, row, dprow, probs, scratch;
};

// P of query block blk over its key ranges (rows x u, zeros past each
// query's keys), from S^T = scale K_ranges Q_block^T (s.st, u x rows).
void block_probs(const HeadBlocks& h, std::size_t blk, const std::vector<KeyRange>& ranges, std::size_t u,
                 ConstMatrix<float> q, ConstMatrix<float> k, const detail::ForwardRow kernel,
                 const detail::RowParams& params, BlockScratch& s, std::vector<float>& probs_out) {
  const std::size_t rows = h.rows(blk), i0 = h.first_row(blk);
  HeadBlocks::transpose_rows(q, i0, rows, s.qt);
  HeadBlocks::ranges_times(ranges, h.scale(), k, s.qt, rows, s.st, u);
  probs_out.assign(rows * u, 0.0f);
  float* probs = probs_out.data();
  s.row.resize(u);
  s.scratch.resize(detail::scratch_floats(u));
  for (std::size_t x = 0; x < rows; ++x) {
    const std::size_t count = h.seen(ranges, i0 + x);
    if (count == 0) continue;  // a zero row of P
    for (std::size_t y = 0; y < count; ++y) s.row[y] = s.st[y * rows + x];
    kernel(s.row.data(), probs + x * u, count, params, s.scratch.data());
  }
}

void block_head_forward(const BlockGraph& g, std::size_t b, std::size_t hq, ConstMatrix<float> q,
                        ConstMatrix<float> k, ConstMatrix<float> v, MatrixView<float> out,
                        const BatchedAttentionOptions& o) {
  const HeadBlocks h(g, b, hq, q, k, o);
  detail::RowParams params;
  const auto kernel = detail::row_kernel<float>(o.transform, params, kForward);
  detail::parallel_for(h.blocks(), 1, [&](std::size_t b0, std::size_t b1) {
    BlockScratch s;
    for (std::size_t blk = b0; blk < b1; ++blk) {
      const std::size_t i0 = h.first_row(blk), rows = h.rows(blk), u = h.ranges(blk, s.ranges);
      if (u == 0) {
        for (std::size_t x = 0; x < rows; ++x) std::fill_n(out.row(i0 + x), v.cols, 0.0f);
        continue;
      }
      block_probs(h, blk, s.ranges, u, q, k, kernel, params, s, s.probs);
      HeadBlocks::weights_times(s.ranges, 1.0f, s.probs.data(), u, v, rows, out.row(i0), out.stride);
    }
  });
}

// The backward keeps P and dS of the kept pairs of a group of query blocks
// between its two passes: groups of at most this many pairs (32 MiB).
constexpr std::size_t kGroupPairs = std::size_t{1} << 22;

// The gradients of one head, group of query blocks after group: pass 1, per
// query block, P, dS = the transform's backward of dP = dO V^T, and dQ =
// scale dS K; pass 2, per key block, dV += sum P^T dO and dK += scale sum
// dS^T Q over the group's query blocks that keep it, in increasing order
// (the result does not depend on the threads).
void block_head_backward(const BlockGraph& g, std::size_t b, std::size_t hq, ConstMatrix<float> q,
                         ConstMatrix<float> k, ConstMatrix<float> v, ConstMatrix<float> grad_out,
                         MatrixView<float> grad_q, MatrixView<float> grad_k, MatrixView<float> grad_v,
                         const BatchedAttentionOptions& o) {
  const HeadBlocks h(g, b, hq, q, k, o);
  struct QueryBlock {
    std::vector<KeyRange> ranges;
    std::size_t u = 0;
    std::vector<float> p, ds;
  };
  std::vector<QueryBlock> qbs(h.blocks());
  for (std::size_t blk = 0; blk < qbs.size(); ++blk) qbs[blk].u = h.ranges(blk, qbs[blk].ranges);
  for (std::size_t j = 0; j < k.rows; ++j) {
    std::fill_n(grad_k.row(j), k.cols, 0.0f);
    std::fill_n(grad_v.row(j), v.cols, 0.0f);
  }
  detail::RowParams params, back_params;
  const auto kernel = detail::row_kernel<float>(o.transform, params, kBackward);
  const auto back = detail::row_backward_kernel<float>(o.transform, back_params, kBackward);
  const detail::MatmulKernels<float>& mk = detail::matmul_kernels_for<float>();
  const std::size_t key_blocks = BlockGraph::blocks_of(k.rows, g.key_block);
  // The group's query blocks keeping each key block, in increasing order:
  // (block, offset of its keys in the block's union, their count).
  struct Use {
    std::size_t blk, at, len;
  };
  std::vector<std::vector<Use>> uses(key_blocks);
  for (std::size_t g0 = 0; g0 < qbs.size();) {
    std::size_t g1 = g0 + 1, pairs = h.rows(g0) * qbs[g0].u;
    while (g1 < qbs.size() && pairs + h.rows(g1) * qbs[g1].u <= kGroupPairs) {
      pairs += h.rows(g1) * qbs[g1].u;
      ++g1;
    }
    detail::parallel_for(g1 - g0, 1, [&](std::size_t b0, std::size_t b1) {
      BlockScratch s;
      for (std::size_t blk = g0 + b0; blk < g0 + b1; ++blk) {
        QueryBlock& B = qbs[blk];
        const std::size_t i0 = h.first_row(blk), rows = h.rows(blk), u = B.u;
        if (u == 0) {
          for (std::size_t x = 0; x < rows; ++x) std::fill_n(grad_q.row(i0 + x), q.cols, 0.0f);
          continue;
        }
        block_probs(h, blk, B.ranges, u, q, k, kernel, params, s, B.p);
        HeadBlocks::transpose_rows(grad_out, i0, rows, s.got);
        HeadBlocks::ranges_times(B.ranges, 1.0f, v, s.got, rows, s.dpt, u);
        B.ds.assign(rows * u, 0.0f);
        s.dprow.resize(u);
        for (std::size_t x = 0; x < rows; ++x) {
          const std::size_t count = h.seen(B.ranges, i0 + x);
          if (count == 0) continue;
          for (std::size_t y = 0; y < count; ++y) s.dprow[y] = s.dpt[y * rows + x];
          back(B.p.data() + x * u, s.dprow.data(), B.ds.data() + x * u, count, back_params);
        }
        HeadBlocks::weights_times(B.ranges, h.scale(), B.ds.data(), u, k, rows, grad_q.row(i0), grad_q.stride);
      }
    });
    for (auto& list : uses) list.clear();
    for (std::size_t blk = g0; blk < g1; ++blk) {
      std::size_t at = 0;
      for (const KeyRange& kr : qbs[blk].ranges) {
        uses[kr.begin / g.key_block].push_back({blk, at, kr.end - kr.begin});
        at += kr.end - kr.begin;
      }
    }
    detail::parallel_for(key_blocks, 1, [&](std::size_t j0, std::size_t j1) {
      for (std::size_t J = j0; J < j1; ++J) {
        const std::size_t first = J * g.key_block;
        for (const Use& use : uses[J]) {
          const QueryBlock& B = qbs[use.blk];
          const std::size_t i0 = h.first_row(use.blk), rows = h.rows(use.blk);
          mk.gemm_tn(use.len, v.cols, rows, 1.0f, B.p.data() + use.at, B.u, grad_out.row(i0), grad_out.stride,
                     grad_v.row(first), grad_v.stride, true, true);
          mk.gemm_tn(use.len, k.cols, rows, h.scale(), B.ds.data() + use.at, B.u, q.row(i0), q.stride,
                     grad_k.row(first), grad_k.stride, true, true);
        }
      }
    });
    for (std::size_t blk = g0; blk < g1; ++blk) {
      std::vector<float>().swap(qbs[blk].p);
      std::vector<float>().swap(qbs[blk].ds);
    }
    g0 = g1;
  }
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
                              block_head_forward(graph, b, h, qm, km, vm, om, options);
                            });
}

void block_sparse_attention_forward(Device device, ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                    const BlockGraph& graph, BatchedTensor out,
                                    const BatchedAttentionOptions& options) {
  if (device == Device::cpu) return block_sparse_attention_forward(q, k, v, graph, out, options);
  const auto kernel = detail::backend_kernel(device, kForward, &BackendKernels::block_sparse_attention_forward);
  detail::check_batched_forward(q, k, v, out, options, kForward, kGraphHeadroom);
  check_graph_fits(kForward, graph, q, k);
  kernel(q, k, v, graph, out, options);
}

void block_sparse_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                     const BlockGraph& graph, ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                     BatchedTensor grad_k, BatchedTensor grad_v,
                                     const BatchedAttentionOptions& options) {
  const detail::GradTensors t{q, k, v, grad_out, grad_q, grad_k, grad_v};
  detail::check_batched_backward(t, options, kBackward, kGraphHeadroom);
  check_graph_fits(kBackward, graph, q, k);
  detail::run_heads_backward(t, options,
                             [&](std::size_t b, std::size_t h, ConstMatrix<float> qm, ConstMatrix<float> km,
                                 ConstMatrix<float> vm, ConstMatrix<float> gom, MatrixView<float> gq,
                                 MatrixView<float> gk, MatrixView<float> gv) {
                               block_head_backward(graph, b, h, qm, km, vm, gom, gq, gk, gv, options);
                             });
}

void block_sparse_attention_backward(Device device, ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                     const BlockGraph& graph, ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                     BatchedTensor grad_k, BatchedTensor grad_v,
                                     const BatchedAttentionOptions& options) {
  if (device == Device::cpu)
    return block_sparse_attention_backward(q, k, v, graph, grad_out, grad_q, grad_k, grad_v, options);
  const auto kernel = detail::backend_kernel(device, kBackward, &BackendKernels::block_sparse_attention_backward);
  detail::check_batched_backward({q, k, v, grad_out, grad_q, grad_k, grad_v}, options, kBackward, kGraphHeadroom);
  check_graph_fits(kBackward, graph, q, k);
  kernel(q, k, v, graph, grad_out, grad_q, grad_k, grad_v, options);
}

}  // namespace entgraph
