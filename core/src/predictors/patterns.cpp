// entgraph: fixed-pattern, hashing and clustering predictors (being written).
#include "predictors/registry.hpp"

namespace entgraph::detail {

const std::vector<PredictorFactory>& pattern_factories() {
  static const std::vector<PredictorFactory> factories;
  return factories;
}

}  // namespace entgraph::detail
