// Predicted rows built per block of queries on the thread pool (each
// block's edges in one list, in row order) joined into one graph: the
// graph then does not depend on how the blocks were shared out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "entgraph/graph.hpp"

namespace entgraph::detail {

// degree[i]: row i's edge count; block_edges: the blocks' edges in order.
inline Graph join_row_blocks(std::size_t n, std::size_t m, const std::vector<std::size_t>& degree,
                             const std::vector<std::vector<std::uint32_t>>& block_edges) {
  Graph g = Graph::empty(n, m);
  for (std::size_t i = 0; i < n; ++i) g.offsets[i + 1] = g.offsets[i] + degree[i];
  g.indices.reserve(g.offsets[n]);
  for (const auto& edges : block_edges) g.indices.insert(g.indices.end(), edges.begin(), edges.end());
  return g;
}

}  // namespace entgraph::detail
