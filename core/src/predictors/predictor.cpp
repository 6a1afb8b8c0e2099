// entgraph: the predictor interface, the union with window / global edges,
// parameter files and the method registry (see predictors/predictor.hpp).
#include "entgraph/predictors/predictor.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "entgraph/error.hpp"
#include "predictors/registry.hpp"

namespace entgraph {
namespace detail {

// The union settings belong to the base class (Predictor's constructor).
SettingsReader::SettingsReader(std::string method, const PredictorSettings& settings)
    : method_(std::move(method)), settings_(settings), used_{"extra_window", "extra_global"} {}

const std::string* SettingsReader::find(const std::string& key) {
  used_.insert(key);
  const auto it = settings_.find(key);
  return it == settings_.end() ? nullptr : &it->second;
}

long SettingsReader::integer(const std::string& key, long fallback, long min, long max) {
  const std::string* v = find(key);
  if (v == nullptr) return fallback;
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno != 0 || x < min || x > max)
    throw Error(method_ + ": setting '" + key + "': expected an integer in [" + std::to_string(min) + ", " +
                std::to_string(max) + "], got '" + *v + "'");
  return x;
}

double SettingsReader::number(const std::string& key, double fallback, double min, double max) {
  const std::string* v = find(key);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || !std::isfinite(x) || x < min || x > max)
    throw Error(method_ + ": setting '" + key + "': expected a number in [" + std::to_string(min) + ", " +
                std::to_string(max) + "], got '" + *v + "'");
  return x;
}

std::string SettingsReader::text(const std::string& key, const std::string& fallback,
                                 const std::vector<std::string>& allowed) {
  const std::string* v = find(key);
  if (v == nullptr) return fallback;
  for (const std::string& a : allowed)
    if (*v == a) return *v;
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
  throw Error(method_ + ": setting '" + key + "': expected one of " + list + ", got '" + *v + "'");
}

void SettingsReader::finish() const {
  for (const auto& [key, value] : settings_)
    if (used_.count(key) == 0) throw UnknownSettingError(method_ + ": unknown setting '" + key + "'");
}

namespace {

std::vector<PredictorFactory> all_factories() {
  std::vector<PredictorFactory> all;
  for (const auto* list : {&pattern_factories(), &learned_factories(), &score_factories()})
    all.insert(all.end(), list->begin(), list->end());
  return all;
}

const PredictorFactory& factory_of(const std::string& method, const std::string& where) {
  static const std::vector<PredictorFactory> factories = all_factories();
  for (const PredictorFactory& f : factories)
    if (method == f.method) return f;
  std::string list;
  for (const PredictorFactory& f : factories) list += (list.empty() ? "" : ", ") + std::string(f.method);
  throw Error(where + "unknown predictor method '" + method + "' (known: " + list + ")");
}

}  // namespace
}  // namespace detail

Predictor::Predictor(PredictorSettings settings) : settings_(std::move(settings)) {
  detail::SettingsReader reader("predictor", settings_);
  extra_window_ = reader.integer("extra_window", -1, -1, 1 << 20);
  extra_global_ = static_cast<std::size_t>(reader.integer("extra_global", 0, 0, 1 << 20));
}

void Predictor::fit(const Capture&, const FitOptions&) {}

void Predictor::set_union_patterns(long extra_window, std::size_t extra_global) {
  if (extra_window < -1) throw Error(method() + ": extra_window must be >= -1 (-1: none)");
  extra_window_ = extra_window;
  extra_global_ = extra_global;
  if (extra_window >= 0)
    settings_["extra_window"] = std::to_string(extra_window);
  else
    settings_.erase("extra_window");
  if (extra_global > 0)
    settings_["extra_global"] = std::to_string(extra_global);
  else
    settings_.erase("extra_global");
}

Graph Predictor::predict(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer, std::size_t head,
                         bool causal) const {
  if (q.cols != k.cols)
    throw Error(method() + ": predict: q has " + std::to_string(q.cols) + " columns, k has " + std::to_string(k.cols));
  Graph g = predict_pattern(q, k, layer, head, causal);
  if (extra_window_ < 0 && extra_global_ == 0) return g;
  return graph_union(g, window_global_graph(q.rows, k.rows, extra_window_, extra_global_, causal));
}

std::string Predictor::to_json() const {
  nlohmann::ordered_json j;
  j["format"] = "entgraph-predictor";
  j["version"] = 1;
  j["method"] = method();
  j["settings"] = nlohmann::json(settings_);
  j["parameters"] = nlohmann::json::object();
  // The parameters are long arrays of numbers: written on one line, a file
  // is less than half the size of a pretty-printed one.
  std::string text = j.dump(1);
  const std::size_t empty = text.rfind("{}");
  return text.replace(empty, 2, nlohmann::json::parse(parameters_json()).dump());
}

namespace {

// Whether a fitted predictor of this factory's method can take a new value
// of the setting without refitting: the union patterns and the method's own
// predict-time settings.
bool predict_time(const detail::PredictorFactory& factory, const std::string& key) {
  return key == "extra_window" || key == "extra_global" ||
         std::find(factory.predict_settings.begin(), factory.predict_settings.end(), key) !=
             factory.predict_settings.end();
}

}  // namespace

std::unique_ptr<Predictor> Predictor::with_settings(const PredictorSettings& changes) const {
  const detail::PredictorFactory& factory = detail::factory_of(method(), "with_settings: ");
  PredictorSettings merged = settings_;
  for (const auto& [key, value] : changes) {
    if (!predict_time(factory, key)) {
      factory.create({{key, value}});  // an unknown key or a bad value is reported as such
      throw Error(method() + ": setting '" + key + "' changes the fit; fit a new predictor instead");
    }
    merged[key] = value;
  }
  return factory.load(merged, nlohmann::json::parse(parameters_json()));
}

std::unique_ptr<Predictor> Predictor::refit(const Capture& capture, const PredictorSettings& changes,
                                            const FitOptions& options) const {
  const detail::PredictorFactory& factory = detail::factory_of(method(), "refit: ");
  const bool cheap = std::all_of(changes.begin(), changes.end(),
                                 [&](const auto& change) { return predict_time(factory, change.first); });
  return cheap ? with_settings(changes) : refit_changed(capture, changes, options);
}

std::unique_ptr<Predictor> Predictor::refit_changed(const Capture& capture, const PredictorSettings& changes,
                                                    const FitOptions& options) const {
  PredictorSettings merged = settings_;
  for (const auto& [key, value] : changes) merged[key] = value;
  std::unique_ptr<Predictor> p = make_predictor(method(), merged);
  p->fit(capture, options);
  return p;
}

std::vector<std::string> predictor_methods() {
  std::vector<std::string> names;
  for (const auto* list : {&detail::pattern_factories(), &detail::learned_factories(), &detail::score_factories()})
    for (const detail::PredictorFactory& f : *list) names.emplace_back(f.method);
  return names;
}

std::vector<std::string> predict_time_settings(const std::string& method) {
  return detail::factory_of(method, "predict_time_settings: ").predict_settings;
}

bool predictor_has_setting(const std::string& method, const std::string& key) {
  const detail::PredictorFactory& factory = detail::factory_of(method, "predictor_has_setting: ");
  try {
    factory.create({{key, ""}});  // no reader accepts an empty value, so a known key throws a value error
  } catch (const detail::UnknownSettingError&) {
    return false;
  } catch (const Error&) {
  }
  return true;
}

std::unique_ptr<Predictor> make_predictor(const std::string& method, const PredictorSettings& settings) {
  return detail::factory_of(method, "make_predictor: ").create(settings);
}

std::unique_ptr<Predictor> load_predictor(const std::string& json_text, const std::string& name) {
  const std::string where = "load_predictor: " + name + ": ";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + "not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || j.value("format", std::string()) != "entgraph-predictor")
    throw Error(where + "not a predictor file ('format' must be \"entgraph-predictor\")");
  if (!j.contains("version") || j["version"] != 1) throw Error(where + "unsupported 'version' (expected 1)");
  if (!j.contains("method") || !j["method"].is_string()) throw Error(where + "'method' must be a string");
  PredictorSettings settings;
  if (j.contains("settings")) {
    if (!j["settings"].is_object()) throw Error(where + "'settings' must be an object of strings");
    for (const auto& [key, value] : j["settings"].items()) {
      if (!value.is_string()) throw Error(where + "setting '" + key + "' must be a string");
      settings[key] = value.get<std::string>();
    }
  }
  const nlohmann::json parameters = j.contains("parameters") ? j["parameters"] : nlohmann::json::object();
  if (!parameters.is_object()) throw Error(where + "'parameters' must be an object");
  try {
    return detail::factory_of(j["method"].get<std::string>(), where).load(settings, parameters);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + "malformed parameters (" + e.what() + ")");
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind(where, 0) == 0) throw;  // already names the file
    throw Error(where + what);
  }
}

}  // namespace entgraph
