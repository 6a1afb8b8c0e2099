// The C API's attention graphs: CSR handles, gold graphs, metrics.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "c_api/c_api_types.hpp"

using namespace entgraph;
using namespace entgraph::c_api;

extern "C" {

eg_status eg_graph_create(size_t queries, size_t keys, const size_t* offsets, const uint32_t* indices,
                          eg_graph** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, offsets, "offsets");
    require(fn, out, "out");
    if (queries == static_cast<size_t>(-1))
      throw Error(at_op(fn) + "queries is too large (got SIZE_MAX, offsets needs queries + 1 entries)");
    Graph g;
    g.queries = queries;
    g.keys = keys;
    g.offsets.assign(offsets, offsets + queries + 1);
    const std::size_t edges = g.offsets.back();
    if (edges > 0) {
      require(fn, indices, "indices");
      g.indices.assign(indices, indices + edges);
    }
    g.validate(fn);
    emit(out, std::move(g));
  });
}

void eg_graph_free(eg_graph* graph) { delete graph; }

eg_status eg_graph_get_csr(const eg_graph* graph, eg_graph_csr* out) {
  return guard(__func__, [&](const char* fn) {
    const Graph& g = graph_of(fn, graph, "graph");
    require(fn, out, "out");
    *out = {g.queries, g.keys, g.edges(), g.offsets.data(), g.indices.empty() ? nullptr : g.indices.data()};
  });
}

eg_status eg_gold_graph(eg_device device, const eg_head_view* head, eg_graph** out) {
  return guard(__func__, [&](const char* fn) {
    require_cpu(fn, device);
    require(fn, head, "head");
    require(fn, out, "out");
    const MatrixView<const float> q = to_view(fn, "head->queries", head->queries);
    const MatrixView<const float> k = to_view(fn, "head->keys", head->keys);
    HeadSettings settings;
    settings.alpha = head->alpha;
    settings.causal = head->causal != 0;
    settings.scale = head->scale != 0.0 ? head->scale : 1.0 / std::sqrt(static_cast<double>(q.cols));
    emit(out, gold_graph(q, k, settings));
  });
}

eg_status eg_compare_graphs(eg_device device, const eg_graph* predicted, const eg_graph* gold, int causal,
                            eg_graph_metrics* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, out, "out");
    const GraphMetrics m = compare_graphs(to_device(fn, device), graph_of(fn, predicted, "predicted"),
                                          graph_of(fn, gold, "gold"), causal != 0);
    *out = {m.gold,       m.predicted,       m.hits,     m.allowed,       m.queries,
            m.sparsity(), m.gold_sparsity(), m.recall(), m.precision()};
  });
}

}  // extern "C"
