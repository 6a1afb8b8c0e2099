// entgraph: counting a capture's gold attention graph (see gold_stats.hpp).
#include "entgraph/gold_stats.hpp"

#include "entgraph/graph.hpp"

namespace entgraph {

GoldStats gold_stats(const Capture& capture, std::size_t layer, std::size_t head) {
  const bool causal = capture.head(layer, head).causal;  // checks the range
  GoldStats stats;
  for (std::size_t s = 0; s < capture.sequences(); ++s) {
    const Graph g = gold_graph(capture, layer, head, s);
    stats.edges += g.edges();
    stats.allowed += allowed_pair_count(g.queries, g.keys, causal);
    stats.queries += g.queries;
  }
  return stats;
}

}  // namespace entgraph
