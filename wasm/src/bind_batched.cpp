// entgraph wasm: batched attention (sequences x heads in one call,
// grouped-query heads, per-sequence lengths) and block-sparse attention on
// block graphs, forward and backward, on contiguous float32 [batch, heads,
// rows, cols] Float32Arrays; block graphs as plain objects, and their
// helpers (cover, full, expand).
#include <emscripten/bind.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "entgraph/batched_attention.hpp"
#include "entgraph/block_graph.hpp"
#include "entgraph/block_sparse_attention.hpp"
#include "entgraph/error.hpp"
#include "js_interop.hpp"

namespace entgraph::js {
namespace {

// a x b x c x d, or an error naming the array if it overflows.
std::size_t size4(std::size_t a, std::size_t b, std::size_t c, std::size_t d, const char* name) {
  return checked_product(checked_product(checked_product(a, b, name), c, name), d, name);
}

// A buffer is never without memory, so that a zero size reaches the core's
// own check of it ("q.batch is 0") rather than its check of a null pointer.
void keep_data(std::vector<float>& x) { x.reserve(1); }

ConstBatchedTensor tensor_of(const std::vector<float>& x, std::size_t batch, std::size_t heads, std::size_t rows,
                             std::size_t cols) {
  return ConstBatchedTensor::bhnd(x.data(), DType::float32, batch, heads, rows, cols);
}

// The inputs: q (B, Hq, n, d), k (B, Hkv, m, d), v (B, Hkv, m, dv), contiguous.
struct Batch {
  std::size_t batch, heads, kv_heads, n, m, d, dv;
  std::vector<float> q, k, v;
  Batch(const val& qa, const val& ka, const val& va, double b_d, double hq_d, double hkv_d, double n_d, double m_d,
        double d_d, double dv_d)
      : batch(to_size(b_d, "batch")),
        heads(to_size(hq_d, "heads")),
        kv_heads(to_size(hkv_d, "kvHeads")),
        n(to_size(n_d, "queries")),
        m(to_size(m_d, "keys")),
        d(to_size(d_d, "dim")),
        dv(to_size(dv_d, "valueDim")) {
    q = to_floats(qa, size4(batch, heads, n, d, "q"), "q");
    k = to_floats(ka, size4(batch, kv_heads, m, d, "k"), "k");
    v = to_floats(va, size4(batch, kv_heads, m, dv, "v"), "v");
    keep_data(q);
    keep_data(k);
    keep_data(v);
  }
  ConstBatchedTensor q_tensor() const { return tensor_of(q, batch, heads, n, d); }
  ConstBatchedTensor k_tensor() const { return tensor_of(k, batch, kv_heads, m, d); }
  ConstBatchedTensor v_tensor() const { return tensor_of(v, batch, kv_heads, m, dv); }
};

// A result the core writes: a zeroed contiguous tensor.
struct Output {
  std::vector<float> data;
  BatchedTensor tensor;
  Output(std::size_t batch, std::size_t heads, std::size_t rows, std::size_t cols, const char* name)
      : data(size4(batch, heads, rows, cols, name)) {
    keep_data(data);
    tensor = BatchedTensor::bhnd(data.data(), DType::float32, batch, heads, rows, cols);
  }
  val array() const { return float_array(data.data(), data.size()); }
};

bool given(const val& x) { return !x.isUndefined() && !x.isNull(); }

// Per-sequence lengths: an Int32Array or an array of whole numbers, one per
// sequence. The core checks their range (0 <= length <= n or m).
std::vector<std::int32_t> lengths_from_js(const val& array, std::size_t batch, const char* name) {
  const std::size_t count = length_of(array, name);
  if (count != batch)
    throw Error(std::string(name) + ": expected " + std::to_string(batch) + " values (one per sequence), got " +
                std::to_string(count));
  const std::vector<double> numbers = emscripten::convertJSArrayToNumberVector<double>(array);
  std::vector<std::int32_t> out;
  out.reserve(count);
  for (std::size_t b = 0; b < count; ++b) {
    const double x = numbers[b];
    if (x != std::floor(x) || x < -2147483648.0 || x > 2147483647.0)
      throw Error(std::string(name) + "[" + std::to_string(b) + "]: expected a whole number of 32 bits (got " +
                  js_number_text(x) + ")");
    out.push_back(static_cast<std::int32_t>(x));
  }
  return out;
}

// The options of batched attention; the core's points into the lengths held here.
struct BatchOptions {
  std::vector<std::int32_t> query_lengths, key_lengths;
  BatchedAttentionOptions core;
  BatchOptions(const Batch& x, const std::string& name, double alpha, double topk, bool causal, double scale,
               const val& ql, const val& kl) {
    core.transform = transform_named(name, alpha, topk);
    core.causal = causal;
    core.scale = scale;
    if (given(ql)) {
      query_lengths = lengths_from_js(ql, x.batch, "queryLengths");
      core.query_lengths = query_lengths.data();
    }
    if (given(kl)) {
      key_lengths = lengths_from_js(kl, x.batch, "keyLengths");
      core.key_lengths = key_lengths.data();
    }
  }
  BatchOptions(const BatchOptions&) = delete;
  BatchOptions& operator=(const BatchOptions&) = delete;
};

// {out}: run(out) writes x's output, (B, Hq, n, dv).
template <class Run>
val forward_result(const Batch& x, Run&& run) {
  Output out(x.batch, x.heads, x.n, x.dv, "out");
  run(out.tensor);
  val result = val::object();
  result.set("out", out.array());
  return result;
}

// {gradQ, gradK, gradV}: run(grad_out, grad_q, grad_k, grad_v) writes x's
// gradients for dL/dout = grad_out, (B, Hq, n, dv).
template <class Run>
val backward_result(const Batch& x, const val& grad_out, Run&& run) {
  std::vector<float> go = to_floats(grad_out, size4(x.batch, x.heads, x.n, x.dv, "gradOut"), "gradOut");
  keep_data(go);
  Output gq(x.batch, x.heads, x.n, x.d, "gradQ"), gk(x.batch, x.kv_heads, x.m, x.d, "gradK"),
      gv(x.batch, x.kv_heads, x.m, x.dv, "gradV");
  run(tensor_of(go, x.batch, x.heads, x.n, x.dv), gq.tensor, gk.tensor, gv.tensor);
  val result = val::object();
  result.set("gradQ", gq.array());
  result.set("gradK", gk.array());
  result.set("gradV", gv.array());
  return result;
}

// ---- block graphs ------------------------------------------------------------

// A BlockGraph as the plain object {batch, heads, queries, keys, queryBlock,
// keyBlock, offsets: Uint32Array, blocks: Uint32Array}.
val block_graph_to_js(const BlockGraph& g) {
  const std::vector<std::uint32_t> offsets(g.offsets.begin(), g.offsets.end());
  val object = val::object();
  object.set("batch", static_cast<double>(g.batch));
  object.set("heads", static_cast<double>(g.heads));
  object.set("queries", static_cast<double>(g.queries));
  object.set("keys", static_cast<double>(g.keys));
  object.set("queryBlock", static_cast<double>(g.query_block));
  object.set("keyBlock", static_cast<double>(g.key_block));
  object.set("offsets", uint32_array(offsets.data(), offsets.size()));
  object.set("blocks", uint32_array(g.blocks.data(), g.blocks.size()));
  return object;
}

std::size_t block_size_field(const val& object, const std::string& name, const char* field) {
  const std::size_t size = size_field(object, name, field);
  if (size == 0) throw Error(name + "." + field + ": expected a whole number >= 1 (got 0)");
  return size;
}

// The object back, checked by BlockGraph::validate (messages name it `name`).
BlockGraph block_graph_from_js(const val& object, const char* name) {
  if (!given(object) || object.typeOf().as<std::string>() != "object")
    throw Error(std::string(name) +
                ": not a block graph (expected {batch, heads, queries, keys, queryBlock, keyBlock, offsets, blocks})");
  const std::string field = name;
  BlockGraph g;
  g.batch = size_field(object, field, "batch");
  g.heads = size_field(object, field, "heads");
  g.queries = size_field(object, field, "queries");
  g.keys = size_field(object, field, "keys");
  g.query_block = block_size_field(object, field, "queryBlock");
  g.key_block = block_size_field(object, field, "keyBlock");
  const std::vector<std::uint32_t> offsets = to_uint32s(object["offsets"], field + ".offsets", "an offset");
  g.offsets.assign(offsets.begin(), offsets.end());
  g.blocks = to_uint32s(object["blocks"], field + ".blocks", "a key block index");
  g.validate(name);
  return g;
}

// The blocks holding an edge of graphs[b * heads + h] (one Graph when single).
val block_graph_cover(const val& graphs, bool single, double b, double h, double qb, double kb) {
  std::vector<Graph> list;
  if (single) {
    list.push_back(graph_from_js(graphs, "graph"));
  } else {
    const std::size_t count = length_of(graphs, "graphs");
    list.reserve(count);
    for (std::size_t i = 0; i < count; ++i)
      list.push_back(graph_from_js(graphs[i], ("graphs[" + std::to_string(i) + "]").c_str()));
  }
  return block_graph_to_js(BlockGraph::cover(list, to_size(b, "batch"), to_size(h, "heads"), to_size(qb, "queryBlock"),
                                             to_size(kb, "keyBlock")));
}

val block_graph_full(double b, double h, double n, double m, double qb, double kb, bool causal) {
  return block_graph_to_js(BlockGraph::full(to_size(b, "batch"), to_size(h, "heads"), to_size(n, "queries"),
                                            to_size(m, "keys"), to_size(qb, "queryBlock"), to_size(kb, "keyBlock"),
                                            causal));
}

val block_graph_expand(const val& graph, double b, double h, double n, double m) {
  return graph_to_js(block_graph_from_js(graph, "graph")
                         .expand(to_size(b, "sequence"), to_size(h, "head"), to_size(n, "queries"), to_size(m, "keys")));
}

// ---- the ops ----------------------------------------------------------------

val batched_attention(const val& q, const val& k, const val& v, double b, double hq, double hkv, double n, double m,
                      double d, double dv, const std::string& name, double alpha, double topk, bool causal,
                      double scale, const val& ql, const val& kl) {
  const Batch x(q, k, v, b, hq, hkv, n, m, d, dv);
  const BatchOptions o(x, name, alpha, topk, causal, scale, ql, kl);
  return forward_result(x, [&](const BatchedTensor& out) {
    batched_attention_forward(x.q_tensor(), x.k_tensor(), x.v_tensor(), out, o.core);
  });
}

val batched_attention_backward(const val& q, const val& k, const val& v, const val& grad_out, double b, double hq,
                               double hkv, double n, double m, double d, double dv, const std::string& name,
                               double alpha, double topk, bool causal, double scale, const val& ql, const val& kl) {
  const Batch x(q, k, v, b, hq, hkv, n, m, d, dv);
  const BatchOptions o(x, name, alpha, topk, causal, scale, ql, kl);
  return backward_result(x, grad_out, [&](const ConstBatchedTensor& go, const BatchedTensor& gq,
                                          const BatchedTensor& gk, const BatchedTensor& gv) {
    batched_attention_backward(x.q_tensor(), x.k_tensor(), x.v_tensor(), go, gq, gk, gv, o.core);
  });
}

val block_sparse_attention(const val& q, const val& k, const val& v, double b, double hq, double hkv, double n,
                           double m, double d, double dv, const val& graph, const std::string& name, double alpha,
                           double topk, bool causal, double scale, const val& ql, const val& kl) {
  const Batch x(q, k, v, b, hq, hkv, n, m, d, dv);
  const BlockGraph g = block_graph_from_js(graph, "graph");
  const BatchOptions o(x, name, alpha, topk, causal, scale, ql, kl);
  return forward_result(x, [&](const BatchedTensor& out) {
    block_sparse_attention_forward(x.q_tensor(), x.k_tensor(), x.v_tensor(), g, out, o.core);
  });
}

val block_sparse_attention_backward(const val& q, const val& k, const val& v, const val& grad_out, double b,
                                    double hq, double hkv, double n, double m, double d, double dv, const val& graph,
                                    const std::string& name, double alpha, double topk, bool causal, double scale,
                                    const val& ql, const val& kl) {
  const Batch x(q, k, v, b, hq, hkv, n, m, d, dv);
  const BlockGraph g = block_graph_from_js(graph, "graph");
  const BatchOptions o(x, name, alpha, topk, causal, scale, ql, kl);
  return backward_result(x, grad_out, [&](const ConstBatchedTensor& go, const BatchedTensor& gq,
                                          const BatchedTensor& gk, const BatchedTensor& gv) {
    block_sparse_attention_backward(x.q_tensor(), x.k_tensor(), x.v_tensor(), g, go, gq, gk, gv, o.core);
  });
}

}  // namespace

EMSCRIPTEN_BINDINGS(entgraph_batched) {
  emscripten::function("batchedAttention", guarded<&batched_attention>);
  emscripten::function("batchedAttentionBackward", guarded<&batched_attention_backward>);
  emscripten::function("blockSparseAttention", guarded<&block_sparse_attention>);
  emscripten::function("blockSparseAttentionBackward", guarded<&block_sparse_attention_backward>);
  emscripten::function("blockGraphCover", guarded<&block_graph_cover>);
  emscripten::function("blockGraphFull", guarded<&block_graph_full>);
  emscripten::function("blockGraphExpand", guarded<&block_graph_expand>);
}

}  // namespace entgraph::js
