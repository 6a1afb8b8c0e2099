// entgraph: one head's graphs as a picture — a byte per (query, key) pair
// whose bits say whether the mask allows the pair, whether it is an edge of
// the true graph (the support of the head's weights) and whether a predictor
// proposed it — with the counts compare_graphs gives for the same graphs.
//
// What a viewer draws (the demo page's three graphs and its grid of heads)
// comes from the weights of a forward pass that are already in memory: one
// pass over the n x m weights and the predicted edges, with no gold graph
// built and no array copied.
#pragma once

#include <cstddef>
#include <cstdint>

#include "entgraph/graph.hpp"
#include "entgraph/matrix_view.hpp"

namespace entgraph {

// The bits of a cell.
inline constexpr std::uint8_t kCellAllowed = 1;    // the mask allows the pair (j <= i + m - n under causal)
inline constexpr std::uint8_t kCellGold = 2;       // an edge of the true graph: allowed and weight > 0
inline constexpr std::uint8_t kCellPredicted = 4;  // an allowed pair the prediction proposes

struct GraphCells {
  // compare_graphs(predicted, support of the weights, causal): the same counts,
  // so the same ratios, bit for bit. With no prediction, predicted = hits = 0.
  GraphMetrics metrics;
  // Queries whose every true edge is predicted: the rows that attention over
  // the predicted graph computes exactly (rows without a true edge count).
  std::size_t covered_rows = 0;
};

// Writes the n x m cells (row-major, `cells` holds n * m bytes) of the head
// whose weights are `weights` (n x m; entries outside the mask are ignored)
// and of `predicted` (nullptr: none; else an n x m graph, validated). Throws
// entgraph::Error naming the argument on a shape mismatch or an invalid graph.
GraphCells mark_graph_cells(MatrixView<const float> weights, const Graph* predicted, bool causal, std::uint8_t* cells);
// The same with the true graph given as a graph (gold_graph's, recomputed from
// Q and K; its edges outside the mask are ignored): cells of gold.queries x
// gold.keys.
GraphCells mark_graph_cells(const Graph& gold, const Graph* predicted, bool causal, std::uint8_t* cells);

}  // namespace entgraph
