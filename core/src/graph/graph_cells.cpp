// entgraph: a head's graphs as cells (see graph_cells.hpp).
#include "entgraph/graph_cells.hpp"

#include <algorithm>
#include <string>

#include "entgraph/error.hpp"
#include "entgraph/heads.hpp"

namespace entgraph {
namespace {

void check_graph(const Graph& g, std::size_t n, std::size_t m, const char* what) {
  if (g.queries != n || g.keys != m)
    throw Error(at_op("mark_graph_cells") + what + " is " + std::to_string(g.queries) + " x " +
                std::to_string(g.keys) + ", the cells " + std::to_string(n) + " x " + std::to_string(m));
  g.validate((std::string("mark_graph_cells: ") + what).c_str());
}

// The edges of row i of g that the mask allows: a prefix, the indices being sorted.
const std::uint32_t* allowed_end(const Graph& g, std::size_t i, std::size_t limit) {
  return std::lower_bound(g.row_begin(i), g.row_end(i), limit);
}

// Both forms: mark_gold(i, row, limit) writes the allowed cells [0, limit) of
// row i with their gold bit and returns the row's gold edges.
template <class MarkGold>
GraphCells mark(std::size_t n, std::size_t m, const Graph* predicted, bool causal, std::uint8_t* cells,
                MarkGold mark_gold) {
  if (predicted != nullptr) check_graph(*predicted, n, m, "predicted");
  if (cells == nullptr && n * m > 0) throw Error(at_op("mark_graph_cells") + "cells is null");
  GraphCells out;
  GraphMetrics& r = out.metrics;
  r.queries = n;
  r.allowed = allowed_pair_count(n, m, causal);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint8_t* row = cells + i * m;
    const std::size_t limit = causal ? causal_key_limit(i, n, m) : m;
    const std::size_t gold = mark_gold(i, row, limit);
    std::fill(row + limit, row + m, std::uint8_t(0));
    r.gold += gold;
    std::size_t hits = 0;
    if (predicted != nullptr) {
      const std::uint32_t* end = allowed_end(*predicted, i, limit);
      for (const std::uint32_t* e = predicted->row_begin(i); e != end; ++e) {
        row[*e] |= kCellPredicted;
        hits += (row[*e] & kCellGold) != 0;
      }
      r.predicted += static_cast<std::size_t>(end - predicted->row_begin(i));
      r.hits += hits;
    }
    out.covered_rows += hits == gold;
  }
  return out;
}

}  // namespace

GraphCells mark_graph_cells(MatrixView<const float> weights, const Graph* predicted, bool causal, std::uint8_t* cells) {
  return mark(weights.rows, weights.cols, predicted, causal, cells, [&](std::size_t i, std::uint8_t* row, std::size_t limit) {
    const float* w = weights.row(i);
    std::size_t gold = 0;
    for (std::size_t j = 0; j < limit; ++j) {
      const bool edge = w[j] > 0.0f;
      row[j] = static_cast<std::uint8_t>(kCellAllowed | (edge ? kCellGold : 0));
      gold += edge;
    }
    return gold;
  });
}

GraphCells mark_graph_cells(const Graph& gold, const Graph* predicted, bool causal, std::uint8_t* cells) {
  check_graph(gold, gold.queries, gold.keys, "gold");
  return mark(gold.queries, gold.keys, predicted, causal, cells, [&](std::size_t i, std::uint8_t* row, std::size_t limit) {
    std::fill(row, row + limit, kCellAllowed);
    const std::uint32_t* end = allowed_end(gold, i, limit);
    for (const std::uint32_t* e = gold.row_begin(i); e != end; ++e) row[*e] |= kCellGold;
    return static_cast<std::size_t>(end - gold.row_begin(i));
  });
}

}  // namespace entgraph
