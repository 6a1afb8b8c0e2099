// entgraph wasm: predictors (the native parameter files, both ways),
// evaluation, sweeps and Pareto frontiers. Structured values cross as JSON
// text, in the same formats as the CLI's files.
#include <emscripten/bind.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "entgraph/predictors/sweep.hpp"
#include "js_interop.hpp"

namespace entgraph::js {
namespace {

using nlohmann::json;

// {"key": "value", ...}: the JavaScript wrapper has turned numbers into strings.
PredictorSettings settings_from_json(const std::string& text, const char* what) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) throw Error(std::string(what) + ": expected an object of settings");
  PredictorSettings settings;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) throw Error(std::string(what) + "." + key + ": expected a number or a string");
    settings[key] = value.get<std::string>();
  }
  return settings;
}

std::unique_ptr<Predictor> predictor_create(const std::string& method, const std::string& settings_json) {
  return make_predictor(method, settings_from_json(settings_json, "settings"));
}

// A parameter file's contents: what the core finds wrong is ErrorCode::bad_file.
std::unique_ptr<Predictor> predictor_load(const std::string& text) {
  return reading_file([&] { return load_predictor(text, "parameter file"); });
}

std::string predictor_method(const Predictor& p) { return p.method(); }
bool predictor_learned(const Predictor& p) { return p.learned(); }
std::string predictor_settings(const Predictor& p) { return json(p.settings()).dump(); }
std::string predictor_serialize(const Predictor& p) { return p.to_json(); }

void predictor_fit(Predictor& p, const Capture& capture, double seed) {
  FitOptions options;
  options.seed = to_size(seed, "seed");
  p.fit(capture, options);
}

val predictor_predict(const Predictor& p, const val& q, const val& k, double n_d, double m_d, double d_d, double layer,
                      double head, bool causal) {
  const std::size_t n = to_size(n_d, "queries"), m = to_size(m_d, "keys"), d = to_size(d_d, "dim");
  const std::vector<float> qs = to_floats(q, checked_product(n, d, "q"), "q");
  const std::vector<float> ks = to_floats(k, checked_product(m, d, "k"), "k");
  return graph_to_js(p.predict({qs.data(), n, d}, {ks.data(), m, d}, to_size(layer, "layer"), to_size(head, "head"), causal));
}

void predictor_set_union(Predictor& p, double window, double global) {
  if (!std::isfinite(window) || window != std::floor(window) || std::abs(window) > 1e9)
    throw Error("extraWindow: expected a whole number (-1: none)");
  p.set_union_patterns(static_cast<long>(window), to_size(global, "extraGlobal"));
}

std::string evaluate_js(const Predictor& p, const Capture& capture) { return eval_report_json(evaluate(p, capture), p); }

// predictors: an array of Predictor handles; windows: an array of whole
// numbers >= -1. Returns a Float64Array of (recall, sparsity, gold sparsity)
// per report, predictor-major: the doubles exactly as evaluate_many has them.
val evaluate_many_js(const val& predictors, const Capture& capture, const val& windows) {
  const std::size_t count = predictors["length"].as<std::size_t>();
  std::vector<const Predictor*> list(count);
  for (std::size_t i = 0; i < count; ++i)
    list[i] = predictors[i].as<Predictor*>(emscripten::allow_raw_pointers());
  const std::size_t window_count = windows["length"].as<std::size_t>();
  std::vector<long> window_list(window_count);
  for (std::size_t i = 0; i < window_count; ++i) {
    const double w = windows[i].as<double>();
    if (!std::isfinite(w) || w != std::floor(w) || w < -1 || w > 1e9)
      throw Error("windows[" + std::to_string(i) + "]: expected a whole number >= -1 (-1: none)");
    window_list[i] = static_cast<long>(w);
  }
  const std::vector<EvalReport> reports = evaluate_many(list, capture, window_list);
  std::vector<double> numbers;
  numbers.reserve(reports.size() * 3);
  for (const EvalReport& r : reports) numbers.insert(numbers.end(), {r.recall, r.sparsity, r.gold_sparsity});
  return val::global("Float64Array").new_(emscripten::typed_memory_view(numbers.size(), numbers.data()));
}

std::string grid_json(const SweepGrid& g) {
  return json{{"method", g.method}, {"parameter", g.parameter}, {"values", g.values}, {"settings", g.settings}}.dump();
}

std::string default_grid_js(const std::string& method) { return grid_json(default_grid(method)); }

val methods_js() {
  val names = val::array();
  for (const std::string& m : predictor_methods()) names.call<void>("push", m);
  return names;
}

val default_windows_js() {
  val windows = val::array();
  for (long w : default_windows()) windows.call<void>("push", static_cast<double>(w));
  return windows;
}

// grids: [{method, parameter, values, settings}] (missing fields: the method's default grid).
std::string sweep_js(const std::string& grids_json, const Capture& train, const Capture& test,
                     const std::string& windows_json, double global) {
  const json grids = json::parse(grids_json, nullptr, false);
  if (!grids.is_array() || grids.empty()) throw Error("grids: expected a non-empty array of grids or method names");
  std::vector<SweepGrid> list;
  for (const json& g : grids) {
    if (g.is_string()) {
      list.push_back(default_grid(g.get<std::string>()));
      continue;
    }
    if (!g.is_object() || !g.contains("method") || !g["method"].is_string())
      throw Error("grids: each grid needs a method");
    SweepGrid grid = default_grid(g["method"].get<std::string>());
    if (g.contains("parameter")) grid.parameter = g["parameter"].get<std::string>();
    if (g.contains("values")) grid.values = g["values"].get<std::vector<std::string>>();
    if (g.contains("settings")) grid.settings = settings_from_json(g["settings"].dump(), "grids[].settings");
    list.push_back(std::move(grid));
  }
  SweepOptions options;
  const json windows = json::parse(windows_json, nullptr, false);
  if (!windows.is_null()) {
    if (!windows.is_array() || windows.empty()) throw Error("windows: expected a non-empty array of window sizes");
    options.windows.clear();
    for (const json& w : windows) {
      if (!w.is_number_integer() || w.get<long>() < -1) throw Error("windows: expected whole numbers >= -1");
      options.windows.push_back(w.get<long>());
    }
  }
  options.global = to_size(global, "global");
  const SweepResult result = run_sweep(list, train, test, options);
  return sweep_json(result.points, result.gold_sparsity);
}

std::vector<SweepPoint> points_from_json(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_array()) throw Error("points: expected an array of sweep points");
  std::vector<SweepPoint> points;
  for (const json& p : j) {
    if (!p.is_object() || !p.contains("sparsity") || !p.contains("recall") || !p["sparsity"].is_number() ||
        !p["recall"].is_number())
      throw Error("points: each point needs numbers sparsity and recall");
    SweepPoint s;
    s.method = p.value("method", "");
    s.parameter = p.value("parameter", "");
    s.value = p.value("value", "");
    s.window = p.value("window", -1L);
    s.sparsity = p["sparsity"].get<double>();
    s.recall = p["recall"].get<double>();
    s.pareto = p.value("pareto", false);
    points.push_back(s);
  }
  return points;
}

val pareto_front_js(const std::string& points) {
  val indices = val::array();
  for (std::size_t i : pareto_front(points_from_json(points))) indices.call<void>("push", static_cast<double>(i));
  return indices;
}

double recall_at_sparsity_js(const std::string& points, double sparsity) {
  return recall_at_sparsity(points_from_json(points), sparsity);
}

std::string pareto_svg_js(const std::string& points, double gold_sparsity, const std::string& title) {
  return pareto_svg(points_from_json(points), gold_sparsity, title);
}

}  // namespace

EMSCRIPTEN_BINDINGS(entgraph_predictors) {
  emscripten::class_<Predictor>("Predictor")
      .class_function("create", guarded<&predictor_create>)
      .class_function("load", guarded<&predictor_load>)
      .function("method", guarded<&predictor_method>)
      .function("learned", guarded<&predictor_learned>)
      .function("settings", guarded<&predictor_settings>)
      .function("serialize", guarded<&predictor_serialize>)
      .function("fit", guarded<&predictor_fit>)
      .function("predict", guarded<&predictor_predict>)
      .function("setUnionPatterns", guarded<&predictor_set_union>);
  emscripten::function("evaluate", guarded<&evaluate_js>);
  emscripten::function("evaluateMany", guarded<&evaluate_many_js>);
  emscripten::function("defaultGrid", guarded<&default_grid_js>);
  emscripten::function("predictorMethods", guarded<&methods_js>);
  emscripten::function("defaultWindows", guarded<&default_windows_js>);
  emscripten::function("sweep", guarded<&sweep_js>);
  emscripten::function("paretoFront", guarded<&pareto_front_js>);
  emscripten::function("recallAtSparsity", guarded<&recall_at_sparsity_js>);
  emscripten::function("paretoSvg", guarded<&pareto_svg_js>);
}

}  // namespace entgraph::js
