// A head's graphs as cells: every bit against the definitions pair by pair,
// the metrics against compare_graphs on the gold graph built independently
// (the support of the weights within the mask), covered rows by brute force;
// the true graph given as weights and as a graph gives the same cells.
#include <doctest/doctest.h>

#include <random>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/graph_cells.hpp"
#include "entgraph/heads.hpp"

namespace entgraph {
namespace {

struct Head {
  std::size_t n, m;
  std::vector<float> weights;  // n x m, about half zeros, some weight outside the mask
  Graph predicted;             // random pairs, some outside the mask
};

Head random_head(std::size_t n, std::size_t m, double predict_share, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Head h{n, m, std::vector<float>(n * m), {}};
  for (float& w : h.weights) w = u(rng) < 0.5f ? 0.0f : u(rng);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j)
      if (u(rng) < predict_share) pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
  h.predicted = Graph::from_pairs(n, m, std::move(pairs));
  return h;
}

bool allowed(std::size_t i, std::size_t j, std::size_t n, std::size_t m, bool causal) {
  return !causal || j < causal_key_limit(i, n, m);
}

// The support of the weights; masked: only the allowed pairs.
Graph gold_of(const Head& h, bool causal, bool masked = true) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
  for (std::size_t i = 0; i < h.n; ++i)
    for (std::size_t j = 0; j < h.m; ++j)
      if (h.weights[i * h.m + j] > 0.0f && (!masked || allowed(i, j, h.n, h.m, causal)))
        pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
  return Graph::from_pairs(h.n, h.m, std::move(pairs));
}

TEST_SUITE("graph") {
  TEST_CASE("mark_graph_cells: bits, metrics and covered rows against the definitions") {
    for (const bool causal : {false, true})
      for (const auto& shape : {std::pair<std::size_t, std::size_t>{1, 1}, {7, 7}, {5, 9}, {9, 5}, {33, 33}})
        for (const double share : {0.0, 0.3, 0.9})
          for (const bool with_prediction : {false, true}) {
            const std::size_t n = shape.first, m = shape.second;  // (clang 14 cannot capture structured bindings)
            CAPTURE(causal);
            CAPTURE(n);
            CAPTURE(m);
            CAPTURE(share);
            CAPTURE(with_prediction);
            const Head h = random_head(n, m, share, static_cast<unsigned>(n * 31 + m + causal));
            const Graph gold = gold_of(h, causal);
            const Graph none = Graph::empty(n, m);
            const Graph& predicted = with_prediction ? h.predicted : none;
            std::vector<std::uint8_t> cells(n * m, 0xff);
            const GraphCells got = mark_graph_cells({h.weights.data(), n, m}, with_prediction ? &h.predicted : nullptr,
                                                    causal, cells.data());

            std::size_t covered = 0;
            for (std::size_t i = 0; i < n; ++i) {
              bool row_covered = true;
              for (std::size_t j = 0; j < m; ++j) {
                const bool a = allowed(i, j, n, m, causal);
                const bool g = gold.contains(i, j);
                const bool p = a && predicted.contains(i, j);
                const std::uint8_t want = (a ? kCellAllowed : 0) | (g ? kCellGold : 0) | (p ? kCellPredicted : 0);
                if (cells[i * m + j] != want) FAIL_CHECK("cell (" << i << ", " << j << ") is " << int(cells[i * m + j]));
                if (g && !p) row_covered = false;
              }
              covered += row_covered;
            }
            const GraphMetrics want = compare_graphs(predicted, gold, causal);
            CHECK(got.metrics.gold == want.gold);
            CHECK(got.metrics.predicted == want.predicted);
            CHECK(got.metrics.hits == want.hits);
            CHECK(got.metrics.allowed == want.allowed);
            CHECK(got.metrics.queries == want.queries);
            CHECK(got.metrics.recall() == want.recall());
            CHECK(got.metrics.sparsity() == want.sparsity());
            CHECK(got.covered_rows == covered);

            // The true graph given as a graph (with edges outside the mask, ignored): the same.
            std::vector<std::uint8_t> again(n * m, 0xff);
            const GraphCells from_graph = mark_graph_cells(gold_of(h, causal, /*masked=*/false),
                                                           with_prediction ? &h.predicted : nullptr, causal, again.data());
            CHECK(again == cells);
            CHECK(from_graph.metrics.gold == want.gold);
            CHECK(from_graph.metrics.hits == want.hits);
            CHECK(from_graph.metrics.predicted == want.predicted);
            CHECK(from_graph.covered_rows == covered);
          }
  }

  TEST_CASE("mark_graph_cells: a zero row of weights and a fully masked row have no gold edge and are covered") {
    // n > m under causal: queries 0 and 1 of 3 see no key of 1.
    const std::vector<float> weights = {0.5f, 0.25f, 0.0f};
    std::vector<std::uint8_t> cells(3);
    const GraphCells got = mark_graph_cells({weights.data(), 3, 1}, nullptr, true, cells.data());
    CHECK(cells == std::vector<std::uint8_t>{0, 0, kCellAllowed});
    CHECK(got.metrics.gold == 0);
    CHECK(got.metrics.allowed == 1);
    CHECK(got.covered_rows == 3);
  }

  TEST_CASE("mark_graph_cells: bad arguments throw naming them") {
    const Head h = random_head(4, 4, 0.5, 1);
    std::vector<std::uint8_t> cells(16);
    const Graph wrong = Graph::empty(4, 5);
    CHECK_THROWS_WITH_AS(mark_graph_cells({h.weights.data(), 4, 4}, &wrong, false, cells.data()),
                         doctest::Contains("predicted is 4 x 5"), Error);
    Graph unsorted = h.predicted;
    if (unsorted.degree(0) >= 2) std::swap(unsorted.indices[0], unsorted.indices[1]);
    else unsorted.indices.assign(unsorted.indices.size(), 7);  // out of range
    CHECK_THROWS_WITH_AS(mark_graph_cells({h.weights.data(), 4, 4}, &unsorted, false, cells.data()),
                         doctest::Contains("mark_graph_cells: predicted"), Error);
    CHECK_THROWS_WITH_AS(mark_graph_cells({h.weights.data(), 4, 4}, nullptr, false, nullptr),
                         doctest::Contains("cells is null"), Error);
    CHECK_THROWS_WITH_AS(mark_graph_cells(unsorted, nullptr, false, cells.data()), doctest::Contains("mark_graph_cells: gold"),
                         Error);
  }
}

}  // namespace
}  // namespace entgraph
