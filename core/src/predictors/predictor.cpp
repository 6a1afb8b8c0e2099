// entgraph: the predictor interface, the union with window / global edges,
// parameter files and the method registry (see predictors/predictor.hpp).
#include "entgraph/predictors/predictor.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "entgraph/error.hpp"
#include "entgraph/view_checks.hpp"
#include "io/binary.hpp"
#include "io/json_strict.hpp"
#include "predictors/registry.hpp"
#include "runtime/backends.hpp"
#include "runtime/numbers.hpp"

namespace entgraph {
namespace detail {

namespace {

// A setting's value in a message: printable, at most 60 bytes (a parameter
// file may hold a setting of any length).
std::string excerpt(const std::string& v) { return printable(v.data(), v.size(), 60) + (v.size() > 60 ? "..." : ""); }

}  // namespace

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
  // Digits with an optional sign only: strtol alone would take " 5" or "+5".
  const std::size_t first = !v->empty() && ((*v)[0] == '-' || (*v)[0] == '+') ? 1 : 0;
  const bool digits = v->size() > first && v->find_first_not_of("0123456789", first) == std::string::npos;
  errno = 0;
  char* end = nullptr;
  const long x = digits ? std::strtol(v->c_str(), &end, 10) : 0;
  if (!digits || errno != 0 || x < min || x > max)
    throw Error(method_ + ": setting '" + key + "': expected an integer in [" + std::to_string(min) + ", " +
                std::to_string(max) + "], got '" + excerpt(*v) + "'");
  return x;
}

double SettingsReader::number(const std::string& key, double fallback, double min, double max) {
  const std::string* v = find(key);
  if (v == nullptr) return fallback;
  double x = 0;  // a plain decimal: no "0x2", "inf", "nan" or trailing text
  if (!parse_decimal(*v, x) || x < min || x > max)
    throw Error(method_ + ": setting '" + key + "': expected a number in [" + number_text(min) + ", " +
                number_text(max) + "], got '" + excerpt(*v) + "'");
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
  throw Error(method_ + ": setting '" + key + "': expected one of " + list + ", got '" + excerpt(*v) + "'");
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

const PredictorFactory& factory_of(const std::string& method, const Message& where) {
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

void Predictor::fit(const Capture& capture, const FitOptions& options) {
  check_fit_size(capture);
  fit_parameters(capture, options);
}

void Predictor::fit_parameters(const Capture&, const FitOptions&) {}

Predictor::FitSize Predictor::fit_size(const Capture&) const { return {}; }

double attention_operations(const Capture& capture) {
  double pairs = 0.0;
  for (std::size_t n : capture.lengths) pairs += static_cast<double>(n) * static_cast<double>(n);
  return static_cast<double>(capture.layers) * static_cast<double>(capture.heads) * pairs *
         static_cast<double>(capture.head_dim);
}

double fit_operations_limit(const Capture& capture) {
  return std::max(kMaxFitOperations, kFitOperationsPerAttention * attention_operations(capture));
}

void Predictor::check_fit_size(const Capture& capture) const {
  check_fit_settings(capture);
  const FitSize size = fit_size(capture);
  const double max_operations = fit_operations_limit(capture);
  // Estimates: three digits.
  const auto estimate = [](double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", x);
    return std::string(text);
  };
  std::string what;
  if (size.parameters > kMaxFitParameters) {
    what = "would learn " + std::to_string(size.parameters) + " values";
  } else if (size.operations > max_operations) {
    what = "would take about " + estimate(size.operations) + " multiply-adds";
  } else {
    return;  // the usual case: no message built
  }
  const std::string limit = size.parameters > kMaxFitParameters ? std::to_string(kMaxFitParameters)
                                                                 : estimate(max_operations);
  std::string settings;
  for (const auto& [key, value] : settings_) settings += (settings.empty() ? "" : ", ") + key + "=" + value;
  throw Error(method() + ": fit: " + what + " on this capture (" + std::to_string(capture.layers) + " layers x " +
              std::to_string(capture.heads) + " heads, " + std::to_string(capture.tokens()) + " tokens, head_dim " +
              std::to_string(capture.head_dim) + ") with settings {" + settings + "}, more than the limit of " + limit +
              "; use smaller settings");
}

void Predictor::set_union_patterns(long extra_window, std::size_t extra_global) {
  if (extra_window < -1) throw Error(method() + ": " + cpp_name("extra_window") + " must be >= -1 (-1: none)");
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
  return predict(Device::cpu, q, k, layer, head, causal);
}

Graph Predictor::predict(Device device, MatrixView<const float> q, MatrixView<const float> k, std::size_t layer,
                         std::size_t head, bool causal) const {
  return predict(device, Memory::host, q, k, layer, head, causal);
}

Graph Predictor::predict(Device device, Memory memory, MatrixView<const float> q, MatrixView<const float> k,
                         std::size_t layer, std::size_t head, bool causal) const {
  if (q.cols != k.cols)
    throw Error(method() + ": predict: q has " + std::to_string(q.cols) + " columns, k has " + std::to_string(k.cols));
  Graph g;
  if (device == Device::cpu) {
    g = predict_pattern(q, k, layer, head, causal);
  } else {
    // The views as every Device op checks them, so that the device never does.
    check_view("predict", "q", q);
    check_view("predict", "k", k);
    SparsefinderHead sh;
    LowRankThresholdHead lh;
    if (sparsefinder_head(q, k, layer, head, sh)) {
      g = detail::backend_kernel(device, "predict", memory, &BackendKernels::sparsefinder_pattern,
                                 &BackendKernels::sparsefinder_pattern_on_device)(sh, q, k, causal);
    } else if (lowrank_threshold_head(q, k, layer, head, lh)) {
      // alpha = 1 (softmax) has no threshold: every allowed key, on any device.
      g = lh.alpha == 1.0 ? Graph::full(q.rows, k.rows, causal)
                          : detail::backend_kernel(device, "predict", memory, &BackendKernels::lowrank_threshold_pattern,
                                                   &BackendKernels::lowrank_threshold_pattern_on_device)(lh, q, k,
                                                                                                          causal);
    } else {
      throw Error(method() + ": predict: device " + device_name(device) + " has no kernel for this method; run it on cpu",
                  ErrorCode::unsupported);
    }
  }
  if (extra_window_ < 0 && extra_global_ == 0) return g;
  return graph_union(g, window_global_graph(q.rows, k.rows, extra_window_, extra_global_, causal));
}

bool Predictor::sparsefinder_head(MatrixView<const float>, MatrixView<const float>, std::size_t, std::size_t,
                                  SparsefinderHead&) const {
  return false;
}
bool Predictor::lowrank_threshold_head(MatrixView<const float>, MatrixView<const float>, std::size_t, std::size_t,
                                       LowRankThresholdHead&) const {
  return false;
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
  const detail::PredictorFactory& factory = detail::factory_of(method(), at_op("with_settings"));
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
  const detail::PredictorFactory& factory = detail::factory_of(method(), at_op("refit"));
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
  return detail::factory_of(method, at_op("predict_time_settings")).predict_settings;
}

bool predictor_has_setting(const std::string& method, const std::string& key) {
  const detail::PredictorFactory& factory = detail::factory_of(method, at_op("predictor_has_setting"));
  try {
    factory.create({{key, ""}});  // no reader accepts an empty value, so a known key throws a value error
  } catch (const detail::UnknownSettingError&) {
    return false;
  } catch (const Error&) {
  }
  return true;
}

std::unique_ptr<Predictor> make_predictor(const std::string& method, const PredictorSettings& settings) {
  return detail::factory_of(method, at_op("make_predictor")).create(settings);
}

std::unique_ptr<Predictor> read_predictor(const std::string& path, const char* op) {
  // What it finds wrong is the file's fault: ErrorCode::bad_file.
  return reading_file([&] {
    const std::vector<unsigned char> bytes = detail::read_file_bytes(op, path, kMaxParameterFileBytes);
    return load_predictor(std::string(bytes.begin(), bytes.end()), path);
  });
}

std::unique_ptr<Predictor> load_predictor(const std::string& json_text, const std::string& name) {
  const Message where = at_op("load_predictor") + name + ": ";
  // Invalid JSON, too deep, or a key repeated in any object: "<where>the file ...".
  const nlohmann::json j = detail::parse_json_strict<nlohmann::json>(json_text, where, "the file");
  if (!j.is_object() || j.value("format", std::string()) != "entgraph-predictor")
    throw Error(where + "not a predictor file ('format' must be \"entgraph-predictor\")");
  if (!j.contains("version") || j["version"] != 1) throw Error(where + "unsupported 'version' (expected 1)");
  if (!j.contains("method") || !j["method"].is_string()) throw Error(where + "'method' must be a string");
  for (const auto& item : j.items())  // a typo ("parameter") must not drop what it holds
    if (item.key() != "format" && item.key() != "version" && item.key() != "method" && item.key() != "settings" &&
        item.key() != "parameters")
      throw Error(where + "unknown key " + detail::quoted_key(item.key()) +
                  " (expected format, version, method, settings, parameters)");
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
    if (e.message().starts_with(where)) throw;  // already names the file
    throw Error(where + e.message(), e.code());
  }
}

}  // namespace entgraph
