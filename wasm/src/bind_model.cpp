// entgraph wasm: the teacher models' forward pass on a string.
#include <emscripten/bind.h>

#include <cmath>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/graph_cells.hpp"
#include "entgraph/heads.hpp"
#include "entgraph/model.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "js_interop.hpp"

namespace entgraph::js {
namespace {

// One forward pass, with what a page needs to interpret it: the heads'
// settings (every head of a teacher has the same) and the text.
struct Forward {
  TeacherOutput out;
  HeadSettings head;
  std::string text, model;
};

// The two files' contents: what the core finds wrong in them is ErrorCode::bad_file.
std::unique_ptr<Teacher> teacher_from_files(const std::string& config_json, const val& weights) {
  const TeacherConfig config = reading_file([&] { return parse_teacher_config(config_json, "config.json"); });
  const std::vector<std::uint8_t> bytes = to_bytes(weights, "weights");
  return reading_file([&] {
    return std::make_unique<Teacher>(Teacher::from_memory(config, bytes.data(), bytes.size(), config.weights));
  });
}

std::string teacher_config(const Teacher& t) {
  const TeacherConfig& c = t.config();
  return nlohmann::json{{"name", c.name},       {"kind", c.kind},         {"causal", c.causal},
                        {"vocab", c.vocab},     {"outputs", c.outputs},   {"maskToken", c.mask_token},
                        {"context", c.context}, {"dModel", c.d_model},    {"layers", c.layers},
                        {"heads", c.heads},     {"headDim", c.head_dim()}, {"dMlp", c.d_mlp},
                        {"alpha", c.alpha},     {"layerNormEps", c.layer_norm_eps}}
      .dump();
}

std::unique_ptr<Forward> teacher_forward(const Teacher& t, const std::string& text, bool probs, bool logits,
                                         double layers) {
  ForwardOptions options;
  options.attention_probs = probs;
  options.logits = logits;
  options.layers = to_size(layers, "layers");
  auto f = std::make_unique<Forward>();
  f->out = t.forward(text, options);
  f->head.alpha = t.config().alpha;
  f->head.causal = t.config().causal;
  f->head.scale = 1.0 / std::sqrt(static_cast<double>(t.config().head_dim()));
  f->text = text;
  f->model = t.config().name;
  return f;
}

std::unique_ptr<Capture> teacher_capture(const Teacher& t, const val& texts) {
  if (!texts.isArray()) throw Error("texts: expected an array of strings");
  return std::make_unique<Capture>(t.capture(emscripten::vecFromJSArray<std::string>(texts)));
}

val split_text_js(const std::string& text, double max_bytes) {
  val pieces = val::array();
  for (const std::string& piece : split_text(text, to_size(max_bytes, "maxBytes"))) pieces.call<void>("push", piece);
  return pieces;
}

double forward_layers(const Forward& f) { return static_cast<double>(f.out.layers); }
double forward_heads(const Forward& f) { return static_cast<double>(f.out.heads); }
double forward_tokens(const Forward& f) { return static_cast<double>(f.out.tokens); }
double forward_head_dim(const Forward& f) { return static_cast<double>(f.out.head_dim); }
double forward_alpha(const Forward& f) { return f.head.alpha; }
bool forward_causal(const Forward& f) { return f.head.causal; }
double forward_scale(const Forward& f) { return f.head.scale; }
std::string forward_text(const Forward& f) { return f.text; }

val forward_queries(const Forward& f, double l, double h) { return matrix_array(f.out.queries_of(to_size(l, "layer"), to_size(h, "head"))); }
val forward_keys(const Forward& f, double l, double h) { return matrix_array(f.out.keys_of(to_size(l, "layer"), to_size(h, "head"))); }
val forward_values(const Forward& f, double l, double h) { return matrix_array(f.out.values_of(to_size(l, "layer"), to_size(h, "head"))); }
val forward_attention(const Forward& f, double l, double h) {
  return matrix_array(f.out.attention_of(to_size(l, "layer"), to_size(h, "head")));
}
val forward_probs(const Forward& f, double l, double h) { return matrix_array(f.out.probs_of(to_size(l, "layer"), to_size(h, "head"))); }
val forward_logits(const Forward& f) { return matrix_array(f.out.logits_view()); }

// scale * q.k for every pair; -Infinity where the causal mask forbids it.
val forward_scores(const Forward& f, double l, double h) {
  const MatrixView<const float> q = f.out.queries_of(to_size(l, "layer"), to_size(h, "head"));
  const MatrixView<const float> k = f.out.keys_of(to_size(l, "layer"), to_size(h, "head"));
  const std::size_t n = q.rows;
  std::vector<float> scores(n * n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t limit = f.head.causal ? causal_key_limit(i, n, n) : n;
    for (std::size_t j = 0; j < n; ++j) {
      double dot = 0.0;
      for (std::size_t c = 0; c < q.cols; ++c) dot += double(q(i, c)) * double(k(j, c));
      scores[i * n + j] = j < limit ? static_cast<float>(f.head.scale * dot) : -std::numeric_limits<float>::infinity();
    }
  }
  return float_array(scores.data(), scores.size());
}

val forward_gold_graph(const Forward& f, double l, double h) {
  const std::size_t layer = to_size(l, "layer"), head = to_size(h, "head");
  return graph_to_js(gold_graph(f.out.queries_of(layer, head), f.out.keys_of(layer, head), f.head));
}

// Heads (flat indices layer * heads + head; null: every head) as cells
// (graph_cells.hpp) of the true graph and of the predictor's graph (null:
// none), the predictor reading Q and K where the forward pass left them. The
// true graph is the support of the recorded weights, or with gold_from_graph
// gold_graph's, recomputed from Q and K. -> {cells: Uint8Array of heads x n x
// n, heads: [{layer, head, metrics, coveredRows}]}.
val forward_graph_cells(const Forward& f, const val& predictor, const val& heads, bool gold_from_graph) {
  const TeacherOutput& o = f.out;
  if (!gold_from_graph && o.probs.empty())
    throw Error(at_op("TeacherOutput.graphCells") + "the weights were not recorded (run forward(text, { probs: true }), "
                "or pass gold: \"graph\")");
  const Predictor* p = predictor.isNull() || predictor.isUndefined() ? nullptr
                                                                      : predictor.as<const Predictor*>(emscripten::allow_raw_pointers());
  std::vector<std::size_t> list;
  const std::size_t total = o.layers * o.heads;
  if (heads.isNull() || heads.isUndefined()) {
    for (std::size_t i = 0; i < total; ++i) list.push_back(i);
  } else {
    const std::size_t count = length_of(heads, "heads");
    for (std::size_t i = 0; i < count; ++i) {
      const std::string name = "heads[" + std::to_string(i) + "]";
      const std::size_t index = to_size(heads[i].as<double>(), name.c_str());
      if (index >= total)
        throw Error(name + ": head " + std::to_string(index) + " of " + std::to_string(total) +
                    " (layer * heads + head)");
      list.push_back(index);
    }
  }
  const std::size_t n = o.tokens;
  // One byte per pair and head: refused before allocating when it would not fit the heap.
  constexpr std::size_t kMaxCellBytes = std::size_t(1) << 29;
  const std::size_t bytes = checked_product(list.size(), checked_product(n, n, "cells"), "cells");
  if (bytes > kMaxCellBytes)
    throw Error(at_op("TeacherOutput.graphCells") + std::to_string(list.size()) + " heads of " + std::to_string(n) + " x " +
                std::to_string(n) + " cells are " + std::to_string(bytes) + " bytes, more than 512 MiB; ask for fewer heads");
  std::vector<std::uint8_t> cells(bytes);
  val out_heads = val::array();
  for (std::size_t at = 0; at < list.size(); ++at) {
    const std::size_t layer = list[at] / o.heads, head = list[at] % o.heads;
    Graph predicted;
    if (p != nullptr) predicted = p->predict(o.queries_of(layer, head), o.keys_of(layer, head), layer, head, f.head.causal);
    std::uint8_t* out = cells.data() + at * n * n;
    const Graph* pg = p != nullptr ? &predicted : nullptr;
    const GraphCells c =
        gold_from_graph
            ? mark_graph_cells(gold_graph(o.queries_of(layer, head), o.keys_of(layer, head), f.head), pg, f.head.causal, out)
            : mark_graph_cells(o.probs_of(layer, head), pg, f.head.causal, out);
    val h = val::object();
    h.set("layer", static_cast<double>(layer));
    h.set("head", static_cast<double>(head));
    h.set("metrics", metrics_to_js(c.metrics));
    h.set("coveredRows", static_cast<double>(c.covered_rows));
    out_heads.call<void>("push", h);
  }
  val result = val::object();
  result.set("cells", byte_array(cells.data(), cells.size()));
  result.set("heads", out_heads);
  return result;
}

// The forward pass as a one-sequence capture, without running the model again.
std::unique_ptr<Capture> forward_to_capture(const Forward& f) {
  const TeacherOutput& o = f.out;
  auto c = std::make_unique<Capture>(Capture::make(o.layers, o.heads, o.head_dim, {o.tokens}, true));
  c->queries = o.queries;  // both [layers, heads, tokens, head_dim]
  c->keys = o.keys;
  c->values = o.values;
  for (HeadSettings& s : c->settings) s = f.head;
  c->texts = {f.text};
  c->provenance = nlohmann::json{{"model", f.model}, {"source", "entgraph JavaScript package"}}.dump();
  validate_capture(*c);
  return c;
}

}  // namespace

EMSCRIPTEN_BINDINGS(entgraph_model) {
  emscripten::class_<Teacher>("Teacher")
      .class_function("fromFiles", guarded<&teacher_from_files>)
      .function("config", guarded<&teacher_config>)
      .function("forward", guarded<&teacher_forward>)
      .function("capture", guarded<&teacher_capture>);
  emscripten::class_<Forward>("TeacherOutput")
      .function("layers", guarded<&forward_layers>)
      .function("heads", guarded<&forward_heads>)
      .function("tokens", guarded<&forward_tokens>)
      .function("headDim", guarded<&forward_head_dim>)
      .function("alpha", guarded<&forward_alpha>)
      .function("causal", guarded<&forward_causal>)
      .function("scale", guarded<&forward_scale>)
      .function("text", guarded<&forward_text>)
      .function("queries", guarded<&forward_queries>)
      .function("keys", guarded<&forward_keys>)
      .function("values", guarded<&forward_values>)
      .function("attention", guarded<&forward_attention>)
      .function("probs", guarded<&forward_probs>)
      .function("logits", guarded<&forward_logits>)
      .function("scores", guarded<&forward_scores>)
      .function("goldGraph", guarded<&forward_gold_graph>)
      .function("graphCells", guarded<&forward_graph_cells>)
      .function("toCapture", guarded<&forward_to_capture>);
  emscripten::function("splitText", guarded<&split_text_js>);
}

}  // namespace entgraph::js
