// Shared by the predictor tests: a predictor's graphs against the gold graphs.
#pragma once

#include "entgraph/graph.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/predictors/predictor.hpp"

namespace entgraph::test {

// Every layer, head and sequence of the capture predicted (each graph
// checked for the CSR invariants) and compared with its gold graph; the
// counts summed.
inline GraphMetrics evaluate_all(const Predictor& p, const Capture& c) {
  GraphMetrics total;
  for (std::size_t l = 0; l < c.layers; ++l)
    for (std::size_t h = 0; h < c.heads; ++h)
      for (std::size_t s = 0; s < c.sequences(); ++s) {
        const Graph g = p.predict(c.queries_of(l, h, s), c.keys_of(l, h, s), l, h, c.head(l, h).causal);
        g.validate("prediction");
        total += compare_graphs(g, gold_graph(c, l, h, s), c.head(l, h).causal);
      }
  return total;
}

}  // namespace entgraph::test
