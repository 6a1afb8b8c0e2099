// entgraph wasm: gold graphs, unions and the comparison of graphs.
#include <emscripten/bind.h>

#include <vector>

#include "entgraph/graph.hpp"
#include "entgraph/io/capture.hpp"
#include "js_interop.hpp"

namespace entgraph::js {
namespace {

val gold_graph_js(const val& q, const val& k, double n_d, double m_d, double d_d, double alpha, bool causal,
                  double scale) {
  const std::size_t n = to_size(n_d, "queries"), m = to_size(m_d, "keys"), d = to_size(d_d, "dim");
  const std::vector<float> qs = to_floats(q, checked_product(n, d, "q"), "q"),
                           ks = to_floats(k, checked_product(m, d, "k"), "k");
  HeadSettings settings;
  settings.alpha = alpha;
  settings.causal = causal;
  settings.scale = scale;
  return graph_to_js(gold_graph({qs.data(), n, d}, {ks.data(), m, d}, settings));
}

val compare_graphs_js(const val& predicted, const val& gold, bool causal) {
  return metrics_to_js(compare_graphs(graph_from_js(predicted, "predicted"), graph_from_js(gold, "gold"), causal));
}

val graph_union_js(const val& a, const val& b) { return graph_to_js(graph_union(graph_from_js(a, "a"), graph_from_js(b, "b"))); }

}  // namespace

EMSCRIPTEN_BINDINGS(entgraph_graphs) {
  emscripten::function("goldGraph", guarded<&gold_graph_js>);
  emscripten::function("compareGraphs", guarded<&compare_graphs_js>);
  emscripten::function("graphUnion", guarded<&graph_union_js>);
}

}  // namespace entgraph::js
