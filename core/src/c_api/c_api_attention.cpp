// The C API's attention: dense forward and backward, and attention on a graph.
#include <algorithm>
#include <cstdint>

#include "c_api/c_api_types.hpp"
#include "entgraph/graph_attention.hpp"

namespace entgraph::c_api {

AttentionOptions<float> to_attention_options(const char* function, const eg_attention_options* options) {
  AttentionOptions<float> a;
  if (options == nullptr) return a;
  a.transform = to_transform(function, &options->transform, "options->transform");
  a.scale = options->scale;
  a.causal = options->causal != 0;
  a.key_padding = options->key_padding;
  return a;
}

GraphAttentionOptions<float> to_graph_attention_options(const char* function,
                                                        const eg_graph_attention_options* options) {
  GraphAttentionOptions<float> g;
  if (options == nullptr) return g;
  g.attention = to_attention_options(function, &options->attention);
  switch (const int mode = enum_value(options->mode)) {
    case EG_GRAPH_ATTENTION_FAST: g.mode = GraphAttentionMode::fast; break;
    case EG_GRAPH_ATTENTION_CERTIFY: g.mode = GraphAttentionMode::certify; break;
    case EG_GRAPH_ATTENTION_EXACT: g.mode = GraphAttentionMode::exact; break;
    default:
      throw_bad_enum(function, "options->mode", mode,
                     "EG_GRAPH_ATTENTION_FAST, EG_GRAPH_ATTENTION_CERTIFY or EG_GRAPH_ATTENTION_EXACT");
  }
  g.bound_rank = options->bound_rank;
  return g;
}

}  // namespace entgraph::c_api

using namespace entgraph;
using namespace entgraph::c_api;

static_assert(EG_BOUND_RANK_AUTO == kAutoBoundRank, "EG_BOUND_RANK_AUTO is the C++ API's kAutoBoundRank");
// report->settled holds RowSettlement's values as they are.
static_assert(static_cast<int>(RowSettlement::unsettled) == EG_ROW_UNSETTLED &&
                  static_cast<int>(RowSettlement::graph) == EG_ROW_GRAPH &&
                  static_cast<int>(RowSettlement::repaired) == EG_ROW_REPAIRED &&
                  static_cast<int>(RowSettlement::dense) == EG_ROW_DENSE,
              "eg_row_settlement mirrors RowSettlement");

extern "C" {

eg_attention_options eg_attention_options_default(void) {
  // The C++ defaults, so that both APIs agree (to_c throws for no
  // TransformKind value, so nothing escapes).
  const AttentionOptions<float> d;
  return {to_c(d.transform), d.scale, d.causal ? 1 : 0, d.key_padding};
}

eg_graph_attention_options eg_graph_attention_options_default(void) {
  const GraphAttentionOptions<float> d;
  return {eg_attention_options_default(), EG_GRAPH_ATTENTION_FAST, d.bound_rank};
}

eg_status eg_attention_forward(eg_device device, eg_const_matrix q, eg_const_matrix k, eg_const_matrix v,
                               eg_matrix out, const eg_attention_options* options) {
  return guard(__func__, [&](const char* fn) {
    attention_forward(to_device(fn, device), to_view(fn, "q", q), to_view(fn, "k", k), to_view(fn, "v", v),
                      to_view(fn, "out", out), to_attention_options(fn, options));
  });
}

eg_status eg_attention_backward(eg_device device, eg_const_matrix q, eg_const_matrix k, eg_const_matrix v,
                                eg_const_matrix grad_out, eg_matrix grad_q, eg_matrix grad_k, eg_matrix grad_v,
                                const eg_attention_options* options) {
  return guard(__func__, [&](const char* fn) {
    attention_backward(to_device(fn, device), to_view(fn, "q", q), to_view(fn, "k", k), to_view(fn, "v", v),
                       to_view(fn, "grad_out", grad_out), to_view(fn, "grad_q", grad_q), to_view(fn, "grad_k", grad_k),
                       to_view(fn, "grad_v", grad_v), to_attention_options(fn, options));
  });
}

eg_status eg_graph_attention_forward(eg_device device, eg_const_matrix q, eg_const_matrix k, eg_const_matrix v,
                                     const eg_graph* graph, eg_matrix out,
                                     const eg_graph_attention_options* options, eg_graph_attention_report* report) {
  return guard(__func__, [&](const char* fn) {
    const Device d = to_device(fn, device);
    const GraphAttentionOptions<float> o = to_graph_attention_options(fn, options);
    const Graph& g = graph_of(fn, graph, "graph");
    const MatrixView<const float> qv = to_view(fn, "q", q), kv = to_view(fn, "k", k), vv = to_view(fn, "v", v);
    const MatrixView<float> ov = to_view(fn, "out", out);
    if (report == nullptr) return graph_attention_forward(d, qv, kv, vv, g, ov, o);
    // Reports come from the CPU, and from other devices in exact mode.
    if (o.mode != GraphAttentionMode::exact) require_cpu(fn, device);
    GraphAttentionReport r;
    graph_attention_forward(d, qv, kv, vv, g, ov, o, &r);
    report->graph_rows = r.graph_rows;
    report->repaired_rows = r.repaired_rows;
    report->dense_rows = r.dense_rows;
    report->graph_pairs = r.graph_pairs;
    report->repair_pairs = r.repair_pairs;
    report->bound_pairs = r.bound_pairs;
    if (report->settled != nullptr)
      std::transform(r.settled.begin(), r.settled.end(), report->settled,
                     [](RowSettlement s) { return static_cast<std::uint8_t>(s); });
    if (report->missed_mass != nullptr) std::copy(r.missed_mass.begin(), r.missed_mass.end(), report->missed_mass);
    report->bounded_rows = r.bounded_rows;
    report->max_missed_mass = r.max_missed_mass;
    report->mean_missed_mass = r.mean_missed_mass;
    report->output_error_bound = r.output_error_bound;
  });
}

}  // extern "C"
