// Fuzz target: a teacher's config.json (entgraph::parse_teacher_config,
// core/include/entgraph/model.hpp).
//
// The library has no writer for TeacherConfig, so the target serialises every
// field itself (docs/FORMATS.md, "Teacher model"; rotary_base only with
// rotary positions, where it is allowed). Invariants for an input that parses
// as config c:
// - c satisfies what the parser promises: kind causal or masked, sizes >= 1,
//   mask_token < vocab, d_model a multiple of heads, alpha in [1, 1000],
//   layer_norm_eps in (0, 1), an even head dimension and a finite base > 1
//   with rotary positions, a weights name that is not empty, absolute or
//   holding "..";
// - its serialisation parses back to the same fields;
// - serialising is a fixed point (the second text equals the first).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "entgraph/model.hpp"
#include "fuzz_check.hpp"

namespace {

std::string serialise(const entgraph::TeacherConfig& c) {
  nlohmann::ordered_json j;
  j["format"] = "entgraph-teacher";
  j["version"] = 1;
  j["name"] = c.name;
  j["kind"] = c.kind;
  j["causal"] = c.causal;
  j["vocab"] = c.vocab;
  j["outputs"] = c.outputs;
  j["mask_token"] = c.mask_token;
  j["context"] = c.context;
  j["d_model"] = c.d_model;
  j["layers"] = c.layers;
  j["heads"] = c.heads;
  j["d_mlp"] = c.d_mlp;
  j["alpha"] = c.alpha;
  j["layer_norm_eps"] = c.layer_norm_eps;
  j["positions"] = entgraph::position_scheme_name(c.positions);
  if (c.positions == entgraph::PositionScheme::rotary) j["rotary_base"] = c.rotary_base;
  j["weights"] = c.weights;
  return j.dump(1);
}

bool same_double(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

bool same(const entgraph::TeacherConfig& a, const entgraph::TeacherConfig& b) {
  return a.name == b.name && a.kind == b.kind && a.causal == b.causal && a.vocab == b.vocab &&
         a.outputs == b.outputs && a.mask_token == b.mask_token && a.context == b.context && a.d_model == b.d_model &&
         a.layers == b.layers && a.heads == b.heads && a.d_mlp == b.d_mlp && same_double(a.alpha, b.alpha) &&
         same_double(a.layer_norm_eps, b.layer_norm_eps) && a.positions == b.positions &&
         (a.positions != entgraph::PositionScheme::rotary || same_double(a.rotary_base, b.rotary_base)) &&
         a.weights == b.weights;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  entgraph::TeacherConfig c;
  try {
    c = entgraph::parse_teacher_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const std::exception& e) {
    FUZZ_REJECTED(e);
    return 0;  // rejected: fine, as long as nothing crashed
  }
  FUZZ_CHECK(c.kind == "causal" || c.kind == "masked");
  FUZZ_CHECK(c.vocab >= 1 && c.outputs >= 1 && c.context >= 1 && c.d_model >= 1 && c.layers >= 1 && c.heads >= 1 &&
             c.d_mlp >= 1);
  FUZZ_CHECK(c.mask_token < c.vocab);
  FUZZ_CHECK(c.d_model % c.heads == 0);
  FUZZ_CHECK(c.alpha >= 1.0 && c.alpha <= 1000.0);
  FUZZ_CHECK(c.layer_norm_eps > 0.0 && c.layer_norm_eps < 1.0);
  if (c.positions == entgraph::PositionScheme::rotary) {
    FUZZ_CHECK(std::isfinite(c.rotary_base) && c.rotary_base > 1.0);
    FUZZ_CHECK(c.head_dim() % 2 == 0);
  }
  FUZZ_CHECK(!c.weights.empty() && c.weights.front() != '/' && c.weights.find("..") == std::string::npos);

  const std::string text = FUZZ_MUST("serialising a parsed config", serialise(c));
  const entgraph::TeacherConfig d =
      FUZZ_MUST("parsing the serialised config", entgraph::parse_teacher_config(text, "serialised"));
  FUZZ_CHECK(same(c, d));
  FUZZ_CHECK(FUZZ_MUST("serialising the re-parsed config", serialise(d)) == text);
  return 0;
}
