// The C API's predictors: make, load, fit, predict, save.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "c_api/c_api_dlpack.hpp"
#include "c_api/c_api_types.hpp"
#include "entgraph/predictors/predictor.hpp"

struct eg_predictor {
  std::unique_ptr<entgraph::Predictor> predictor;
  std::string method;  // what eg_predictor_method lends out
};

namespace {

using namespace entgraph;
using namespace entgraph::c_api;

// "key=value" strings as PredictorSettings (the CLI's --set key=value).
PredictorSettings parse_settings(const char* fn, const char* const* settings, std::size_t count) {
  PredictorSettings parsed;
  if (count > 0) require(fn, settings, "settings");
  for (std::size_t i = 0; i < count; ++i) {
    const std::string name = "settings[" + std::to_string(i) + "]";
    require(fn, settings[i], name.c_str());
    const std::string pair = settings[i];
    const std::size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error(at_op(fn) + cpp_name(name) + " is not key=value (got '" + pair + "')");
    const std::string key = pair.substr(0, eq);
    if (!parsed.emplace(key, pair.substr(eq + 1)).second)
      throw Error(at_op(fn) + cpp_name(name) + " repeats the setting '" + key + "'");
  }
  return parsed;
}

void emit_predictor(eg_predictor** out, std::unique_ptr<Predictor> p) {
  std::string method = p->method();
  *out = new eg_predictor{std::move(p), std::move(method)};
}

const Predictor& predictor_of(const char* fn, const eg_predictor* predictor) {
  require(fn, predictor, "predictor");
  return *predictor->predictor;
}

}  // namespace

extern "C" {

eg_status eg_predictor_make(const char* method, const char* const* settings, size_t settings_count,
                            eg_predictor** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, method, "method");
    require(fn, out, "out");
    emit_predictor(out, make_predictor(method, parse_settings(fn, settings, settings_count)));
  });
}

eg_status eg_predictor_load_json(const char* json, eg_predictor** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, json, "json");
    require(fn, out, "out");
    emit_predictor(out, load_predictor(json));
  });
}

eg_status eg_predictor_load_file(const char* path, eg_predictor** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, path, "path");
    require(fn, out, "out");
    emit_predictor(out, read_predictor(path, fn));
  });
}

void eg_predictor_free(eg_predictor* predictor) { delete predictor; }

eg_status eg_predictor_method(const eg_predictor* predictor, const char** out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, predictor, "predictor");
    require(fn, out, "out");
    *out = predictor->method.c_str();
  });
}

eg_status eg_predictor_fit(eg_device device, eg_predictor* predictor, const eg_capture* capture, uint64_t seed) {
  return guard(__func__, [&](const char* fn) {
    require_cpu(fn, device);
    require(fn, predictor, "predictor");
    require(fn, capture, "capture");
    FitOptions options;
    options.seed = seed;
    // A fresh predictor of the same settings learns, and replaces this one
    // only once it has: a failed fit leaves the handle as it was.
    const Predictor& old = *predictor->predictor;
    std::unique_ptr<Predictor> fitted = make_predictor(old.method(), old.settings());
    fitted->fit(capture->capture, options);
    predictor->predictor = std::move(fitted);
  });
}

eg_status eg_predictor_predict(eg_device device, const eg_predictor* predictor, eg_const_matrix q,
                               eg_const_matrix k, size_t layer, size_t head, int causal, eg_graph** out) {
  return guard(__func__, [&](const char* fn) {
    const Predictor& p = predictor_of(fn, predictor);
    require(fn, out, "out");
    emit(out, p.predict(to_device(fn, device), to_view(fn, "q", q), to_view(fn, "k", k), layer, head, causal != 0));
  });
}

eg_status eg_predictor_predict_dlpack(const eg_predictor* predictor, const eg_dl_tensor* q, const eg_dl_tensor* k,
                                      size_t layer, size_t head, int causal, eg_graph** out) {
  return guard(__func__, [&](const char* fn) {
    const Predictor& p = predictor_of(fn, predictor);
    require(fn, out, "out");
    const Place place = common_place(fn, "q", q, {{"k", k}});
    emit(out, p.predict(place.device, place.memory, view_of<const float>(fn, "q", q, kDLFloat),
                        view_of<const float>(fn, "k", k, kDLFloat), layer, head, causal != 0));
  });
}

eg_status eg_predictor_to_json(const eg_predictor* predictor, char** out) {
  return guard(__func__, [&](const char* fn) {
    const Predictor& p = predictor_of(fn, predictor);
    require(fn, out, "out");
    const std::string json = p.to_json();
    // malloc, so that eg_string_free (std::free) releases it.
    char* text = static_cast<char*>(std::malloc(json.size() + 1));
    if (text == nullptr) throw std::bad_alloc();
    std::memcpy(text, json.c_str(), json.size() + 1);
    *out = text;
  });
}

}  // extern "C"
