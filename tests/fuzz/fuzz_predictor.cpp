// Fuzz target: predictor parameter files (entgraph::load_predictor,
// core/include/entgraph/predictors/predictor.hpp), every method.
//
// Invariants for an input that loads as predictor p:
// - p->to_json() succeeds (what the loader accepts, the writer can write);
// - its text loads again, as the same method with the same settings;
// - load -> to_json is a fixed point: to_json(load(to_json(p))) is
//   byte-identical to to_json(p).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "entgraph/predictors/predictor.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::unique_ptr<entgraph::Predictor> p;
  try {
    p = entgraph::load_predictor(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const std::exception& e) {
    FUZZ_REJECTED(e);
    return 0;  // rejected: fine, as long as nothing crashed
  }
  FUZZ_CHECK(p != nullptr);
  const std::string text = FUZZ_MUST("to_json of a loaded predictor", p->to_json());
  const std::unique_ptr<entgraph::Predictor> q =
      FUZZ_MUST("loading to_json's output", entgraph::load_predictor(text, "to_json"));
  FUZZ_CHECK(q != nullptr);
  FUZZ_CHECK(q->method() == p->method());
  FUZZ_CHECK(q->settings() == p->settings());
  FUZZ_CHECK(q->learned() == p->learned());
  FUZZ_CHECK(FUZZ_MUST("to_json of the reloaded predictor", q->to_json()) == text);
  return 0;
}
