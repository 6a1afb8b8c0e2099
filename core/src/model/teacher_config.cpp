// entgraph: parsing and checking a teacher's config.json (see model.hpp and
// docs/FORMATS.md).
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "entgraph/error.hpp"
#include "entgraph/model.hpp"
#include "io/json_strict.hpp"

namespace entgraph {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw Error("teacher config: " + name + ": " + what);
}

// A positive integer field within [1, max], or the default if absent.
std::size_t size_field(const json& j, const char* key, std::size_t fallback, std::size_t max,
                       const std::string& name) {
  if (!j.contains(key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_number_integer() || v.get<long long>() < 1 || static_cast<unsigned long long>(v.get<long long>()) > max)
    fail(name, std::string("'") + key + "' must be an integer in [1, " + std::to_string(max) + "], got " +
                   detail::json_excerpt(v));
  return static_cast<std::size_t>(v.get<long long>());
}

}  // namespace

const char* position_scheme_name(PositionScheme scheme) {
  return scheme == PositionScheme::rotary ? "rotary" : "learned";
}

TeacherConfig parse_teacher_config(const std::string& json_text, const std::string& name) {
  // Invalid JSON, too deep, or a key repeated in any object.
  const json j = detail::parse_json_strict<json>(json_text, "teacher config: " + name + ": ", "the file");
  if (!j.is_object()) fail(name, "expected a JSON object");
  if (j.value("format", std::string()) != "entgraph-teacher")
    fail(name, "'format' must be \"entgraph-teacher\"");
  if (!j.contains("version") || j.at("version") != 1) fail(name, "unsupported 'version' (expected 1)");

  TeacherConfig c;
  std::string positions = "learned";  // absent: the first teachers, which predate the field
  // Each optional field, named if it has the wrong JSON type.
  auto field = [&](const char* key, auto fallback, bool (json::*is_type)() const, const char* type) {
    if (!j.contains(key)) return fallback;
    const json& v = j.at(key);
    if (!(v.*is_type)()) fail(name, std::string("'") + key + "' must be " + type + ", got " + detail::json_excerpt(v));
    return v.get<decltype(fallback)>();
  };
  c.name = field("name", std::string("teacher"), &json::is_string, "a string");
  c.kind = field("kind", std::string("causal"), &json::is_string, "a string");
  c.causal = field("causal", c.kind == "causal", &json::is_boolean, "true or false");
  c.weights = field("weights", c.weights, &json::is_string, "a string");
  c.alpha = field("alpha", c.alpha, &json::is_number, "a number");
  c.layer_norm_eps = field("layer_norm_eps", c.layer_norm_eps, &json::is_number, "a number");
  if (c.kind != "causal" && c.kind != "masked")
    fail(name, "'kind' must be \"causal\" or \"masked\", got " + detail::quoted_key(c.kind));
  // Generous caps: enough for any model this runtime is meant for, small
  // enough that a hostile config cannot ask for absurd allocations.
  c.vocab = size_field(j, "vocab", c.vocab, 1u << 20, name);
  c.outputs = size_field(j, "outputs", c.outputs, 1u << 20, name);
  c.context = size_field(j, "context", c.context, 1u << 16, name);
  c.d_model = size_field(j, "d_model", c.d_model, 1u << 14, name);
  c.layers = size_field(j, "layers", c.layers, 256, name);
  c.heads = size_field(j, "heads", c.heads, 256, name);
  c.d_mlp = size_field(j, "d_mlp", c.d_mlp, 1u << 16, name);
  if (j.contains("mask_token")) {
    const json& m = j.at("mask_token");
    if (!m.is_number_integer() || m.get<long long>() < 0 || static_cast<unsigned long long>(m.get<long long>()) >= c.vocab)
      fail(name, "'mask_token' must be an integer in [0, vocab), got " + detail::json_excerpt(m));
    c.mask_token = static_cast<std::size_t>(m.get<long long>());
  } else if (c.mask_token >= c.vocab) {
    fail(name, "'mask_token' is absent and its default " + std::to_string(c.mask_token) +
                   " is not below 'vocab' (" + std::to_string(c.vocab) + "); give 'mask_token' in [0, vocab)");
  }
  if (c.d_model % c.heads != 0)
    fail(name, "'d_model' (" + std::to_string(c.d_model) + ") must be a multiple of 'heads' (" +
                   std::to_string(c.heads) + ")");
  if (!(c.alpha >= 1.0 && c.alpha <= 1000.0)) fail(name, "'alpha' must be in [1, 1000]");
  if (!(c.layer_norm_eps > 0.0 && c.layer_norm_eps < 1.0)) fail(name, "'layer_norm_eps' must be in (0, 1)");
  if (j.contains("positions")) {
    if (!j.at("positions").is_string())
      fail(name, "'positions' must be \"learned\" or \"rotary\", got " + detail::json_excerpt(j.at("positions")));
    positions = j.at("positions").get<std::string>();
  }
  if (positions == "rotary")
    c.positions = PositionScheme::rotary;
  else if (positions != "learned")
    fail(name, "'positions' must be \"learned\" or \"rotary\", got " + detail::quoted_key(positions));
  if (c.positions == PositionScheme::rotary) {
    // PyTorch's model reads a missing base as "no rotation": require it
    // rather than guess a default the weights were not trained with.
    if (!j.contains("rotary_base")) fail(name, "'rotary_base' is required with \"positions\": \"rotary\"");
    const json& base = j.at("rotary_base");
    if (base.is_number()) c.rotary_base = base.get<double>();
    // A base <= 1 gives every pair of dimensions a frequency of 1 radian per
    // token or more (all the same at 1): no usable position code. A
    // non-finite one gives NaN angles.
    if (!base.is_number() || !(std::isfinite(c.rotary_base) && c.rotary_base > 1.0))
      fail(name, "'rotary_base' must be a finite number > 1, got " + detail::json_excerpt(j.at("rotary_base")));
    if (c.head_dim() % 2 != 0)
      fail(name, "rotary positions need an even head dimension ('d_model' / 'heads' = " +
                     std::to_string(c.head_dim()) + ")");
  } else if (j.contains("rotary_base")) {
    fail(name, "'rotary_base' applies only to \"positions\": \"rotary\" (positions are \"learned\")");
  }
  if (c.weights.empty() || c.weights.find("..") != std::string::npos || c.weights.front() == '/')
    fail(name, "'weights' must be a file name inside the teacher's folder, got " + detail::quoted_key(c.weights));
  return c;
}

}  // namespace entgraph
