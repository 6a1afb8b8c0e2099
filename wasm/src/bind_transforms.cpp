// entgraph wasm: row-wise transforms and their backward, dense attention
// (forward and backward) and attention on a graph, on Float32Arrays.
#include <emscripten/bind.h>

#include <string>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/transforms.hpp"
#include "js_interop.hpp"

namespace entgraph::js {
namespace {

// The transforms that need nothing but scores (transform_named's) as the
// package names them: [{name: "topk", kind: "topk_softmax", parameter: "k"},
// ...] in the list's order (transform_list.hpp).
val transforms_js() {
  val rows = val::array();
  for (const TransformInfo& row : kTransformInfos) {
    if (row.extra_inputs()) continue;
    val r = val::object();
    r.set("name", std::string(row.shown_name()));
    r.set("kind", std::string(row.name));
    r.set("parameter", std::string(row.parameter == TransformParameter::alpha ? "alpha"
                                   : row.parameter == TransformParameter::k   ? "k"
                                                                              : "none"));
    rows.call<void>("push", r);
  }
  return rows;
}

val transform(const std::string& name, const val& scores, double rows_d, double cols_d, double alpha, double k,
              const val& mask) {
  const Transform t = transform_named(name, alpha, k);
  const std::size_t rows = to_size(rows_d, "rows"), cols = to_size(cols_d, "cols");
  const std::size_t size = checked_product(rows, cols, "scores");
  const std::vector<float> z = to_floats(scores, size, "scores");
  std::vector<std::uint8_t> allowed;
  MaskView mask_view;
  if (!mask.isUndefined() && !mask.isNull()) {
    allowed = to_bytes(mask, "mask");
    if (allowed.size() != size)
      throw Error("mask: expected " + std::to_string(size) + " values, got " + std::to_string(allowed.size()));
    mask_view = {allowed.data(), rows, cols};
  }
  std::vector<float> p(size);
  transform_forward<float>(t, {z.data(), rows, cols}, {p.data(), rows, cols}, mask_view);
  return float_array(p.data(), p.size());
}

val transform_backward_js(const std::string& name, const val& probs, const val& grad, double rows_d, double cols_d,
                          double alpha, double k) {
  // Top-k's backward needs only the kept support (probs > 0), not k.
  const bool topk = transform_info(parse_transform_kind(name)).parameter == TransformParameter::k;
  const Transform t = transform_named(name, alpha, topk && k == 0 ? 1 : k);
  const std::size_t rows = to_size(rows_d, "rows"), cols = to_size(cols_d, "cols");
  const std::size_t size = checked_product(rows, cols, "probs");
  const std::vector<float> p = to_floats(probs, size, "probs");
  const std::vector<float> g = to_floats(grad, size, "gradProbs");
  std::vector<float> dz(size);
  transform_backward<float>(t, {p.data(), rows, cols}, {g.data(), rows, cols}, {dz.data(), rows, cols});
  return float_array(dz.data(), dz.size());
}

// q: n x d, k: m x d, v: m x dv.
struct Heads {
  std::size_t n, m, d, dv;
  std::vector<float> q, k, v;
  Heads(const val& qa, const val& ka, const val& va, double n_d, double m_d, double d_d, double dv_d)
      : n(to_size(n_d, "queries")), m(to_size(m_d, "keys")), d(to_size(d_d, "dim")), dv(to_size(dv_d, "valueDim")) {
    q = to_floats(qa, checked_product(n, d, "q"), "q");
    k = to_floats(ka, checked_product(m, d, "k"), "k");
    v = to_floats(va, checked_product(m, dv, "v"), "v");
  }
};

AttentionOptions<float> attention_options(const std::string& name, double alpha, double topk, bool causal,
                                          double scale) {
  AttentionOptions<float> o;
  o.transform = transform_named(name, alpha, topk);
  o.causal = causal;
  o.scale = scale;
  return o;
}

val attention(const val& q, const val& k, const val& v, double n, double m, double d, double dv,
              const std::string& name, double alpha, double topk, bool causal, double scale, bool want_probs) {
  const Heads x(q, k, v, n, m, d, dv);
  std::vector<float> out(checked_product(x.n, x.dv, "out"));
  std::vector<float> probs(want_probs ? checked_product(x.n, x.m, "probs") : 0);
  attention_forward<float>({x.q.data(), x.n, x.d}, {x.k.data(), x.m, x.d}, {x.v.data(), x.m, x.dv},
                           {out.data(), x.n, x.dv}, attention_options(name, alpha, topk, causal, scale),
                           want_probs ? MatrixView<float>{probs.data(), x.n, x.m} : MatrixView<float>{});
  val result = val::object();
  result.set("out", float_array(out.data(), out.size()));
  if (want_probs) result.set("probs", float_array(probs.data(), probs.size()));
  return result;
}

// dL/dq, dL/dk, dL/dv given dL/dout (n x dv), as attention_backward<float>.
val attention_backward_js(const val& q, const val& k, const val& v, const val& grad_out, double n, double m, double d,
                          double dv, const std::string& name, double alpha, double topk, bool causal, double scale) {
  const Heads x(q, k, v, n, m, d, dv);
  const std::vector<float> go = to_floats(grad_out, checked_product(x.n, x.dv, "gradOut"), "gradOut");
  std::vector<float> gq(checked_product(x.n, x.d, "gradQ")), gk(checked_product(x.m, x.d, "gradK")),
      gv(checked_product(x.m, x.dv, "gradV"));
  attention_backward<float>({x.q.data(), x.n, x.d}, {x.k.data(), x.m, x.d}, {x.v.data(), x.m, x.dv},
                            {go.data(), x.n, x.dv}, {gq.data(), x.n, x.d}, {gk.data(), x.m, x.d},
                            {gv.data(), x.m, x.dv}, attention_options(name, alpha, topk, causal, scale));
  val result = val::object();
  result.set("gradQ", float_array(gq.data(), gq.size()));
  result.set("gradK", float_array(gk.data(), gk.size()));
  result.set("gradV", float_array(gv.data(), gv.size()));
  return result;
}

val graph_attention(const val& q, const val& k, const val& v, double n, double m, double d, double dv,
                    const val& graph, const std::string& name, double alpha, double topk, bool causal, double scale,
                    const std::string& mode) {
  const Heads x(q, k, v, n, m, d, dv);
  const Graph g = graph_from_js(graph, "graph");
  GraphAttentionOptions<float> o;
  o.attention = attention_options(name, alpha, topk, causal, scale);
  if (mode == "fast")
    o.mode = GraphAttentionMode::fast;
  else if (mode == "certify")
    o.mode = GraphAttentionMode::certify;
  else if (mode == "exact")
    o.mode = GraphAttentionMode::exact;
  else
    throw Error(at_op("graphAttention") + "mode must be \"fast\", \"certify\" or \"exact\" (got \"" + mode + "\")");
  std::vector<float> out(checked_product(x.n, x.dv, "out"));
  GraphAttentionReport report;
  graph_attention_forward<float>({x.q.data(), x.n, x.d}, {x.k.data(), x.m, x.d}, {x.v.data(), x.m, x.dv}, g,
                                 {out.data(), x.n, x.dv}, o, &report);
  val result = val::object();
  result.set("out", float_array(out.data(), out.size()));
  // Per row: 0 unsettled, 1 settled by the graph, 2 repaired, 3 dense.
  result.set("settled", byte_array(reinterpret_cast<const std::uint8_t*>(report.settled.data()),
                                   report.settled.size()));
  result.set("graphRows", static_cast<double>(report.graph_rows));
  result.set("repairedRows", static_cast<double>(report.repaired_rows));
  result.set("denseRows", static_cast<double>(report.dense_rows));
  result.set("graphPairs", static_cast<double>(report.graph_pairs));
  result.set("repairPairs", static_cast<double>(report.repair_pairs));
  result.set("boundPairs", static_cast<double>(report.bound_pairs));
  // Fast mode's error: per row a bound on the weight it misses (NaN: unknown).
  result.set("missedMass", double_array(report.missed_mass.data(), report.missed_mass.size()));
  result.set("boundedRows", static_cast<double>(report.bounded_rows));
  result.set("maxMissedMass", report.max_missed_mass);
  result.set("meanMissedMass", report.mean_missed_mass);
  result.set("outputErrorBound", report.output_error_bound);
  return result;
}

}  // namespace

EMSCRIPTEN_BINDINGS(entgraph_transforms) {
  emscripten::function("transforms", guarded<&transforms_js>);
  emscripten::function("transform", guarded<&transform>);
  emscripten::function("transformBackward", guarded<&transform_backward_js>);
  emscripten::function("attention", guarded<&attention>);
  emscripten::function("attentionBackward", guarded<&attention_backward_js>);
  emscripten::function("graphAttention", guarded<&graph_attention>);
}

}  // namespace entgraph::js
