// BlockGraph (entgraph/block_graph.hpp) against brute force: cover keeps
// exactly the blocks that hold an edge, expand links each query to every key
// of its row's blocks, full keeps the blocks that hold an allowed pair; and
// every invariant validate checks, with its message.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/block_graph.hpp"
#include "entgraph/error.hpp"
#include "support.hpp"

using namespace entgraph;

namespace {

Graph random_graph(std::size_t n, std::size_t m, double density, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution edge(density);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j)
      if (edge(rng)) pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
  return Graph::from_pairs(n, m, pairs);
}

// Block row (b, h, I) as a set.
std::set<std::uint32_t> row_set(const BlockGraph& g, std::size_t b, std::size_t h, std::size_t block) {
  const std::size_t r = g.row(b, h, block);
  return {g.row_begin(r), g.row_end(r)};
}

std::string validate_message(const BlockGraph& g) {
  try {
    g.validate("bg");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("graph") {
  TEST_CASE("BlockGraph::cover keeps exactly the blocks that hold an edge, for every block size") {
    const std::size_t n = 37, m = 50;
    std::vector<Graph> graphs;
    for (std::uint64_t seed = 1; seed <= 6; ++seed) graphs.push_back(random_graph(n, m, 0.02 * double(seed), seed));
    for (const auto& sizes : {std::pair<std::size_t, std::size_t>{8, 16}, {1, 1}, {64, 64}, {5, 7}, {37, 50}}) {
      const std::size_t qb = sizes.first, kb = sizes.second;  // not bindings: CAPTURE's lambdas take them (clang 14)
      CAPTURE(qb);
      CAPTURE(kb);
      const BlockGraph bg = BlockGraph::cover(graphs, 2, 3, qb, kb);
      bg.validate();
      CHECK(bg.batch == 2);
      CHECK(bg.heads == 3);
      CHECK(bg.query_blocks() == (n + qb - 1) / qb);
      CHECK(bg.key_blocks() == (m + kb - 1) / kb);
      std::size_t wrong = 0;
      for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t h = 0; h < 3; ++h) {
          const Graph& g = graphs[b * 3 + h];
          for (std::size_t block = 0; block < bg.query_blocks(); ++block) {
            std::set<std::uint32_t> want;
            for (std::size_t i = block * qb; i < std::min(n, (block + 1) * qb); ++i)
              for (const std::uint32_t* p = g.row_begin(i); p != g.row_end(i); ++p)
                want.insert(static_cast<std::uint32_t>(*p / kb));
            wrong += row_set(bg, b, h, block) != want;
          }
          // expand covers the graph: every edge is in it.
          const Graph e = bg.expand(b, h, n, m);
          e.validate();
          for (std::size_t i = 0; i < n; ++i)
            for (const std::uint32_t* p = g.row_begin(i); p != g.row_end(i); ++p) wrong += !e.contains(i, *p);
        }
      CHECK(wrong == 0);
    }
    const BlockGraph one = BlockGraph::cover(graphs[0], 8, 8);
    CHECK(one.batch == 1);
    CHECK(one.heads == 1);
    CHECK(one.kept() == BlockGraph::cover({graphs[0]}, 1, 1, 8, 8).kept());
  }

  TEST_CASE("BlockGraph::expand links each query to every key of its row's blocks, over the first n x m") {
    const BlockGraph bg = BlockGraph::cover(random_graph(30, 41, 0.03, 9), 4, 6);
    for (const auto& size : {std::pair<std::size_t, std::size_t>{30, 41}, {17, 41}, {30, 20}, {1, 1}}) {
      const std::size_t n = size.first, m = size.second;
      CAPTURE(n);
      CAPTURE(m);
      const Graph e = bg.expand(0, 0, n, m);
      e.validate();
      CHECK(e.queries == n);
      CHECK(e.keys == m);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::set<std::uint32_t> blocks = row_set(bg, 0, 0, i / 4);
        for (std::size_t j = 0; j < m; ++j) wrong += e.contains(i, j) != (blocks.count(static_cast<std::uint32_t>(j / 6)) > 0);
      }
      CHECK(wrong == 0);
    }
    CHECK_THROWS_WITH_AS(bg.expand(0, 1, 30, 41), doctest::Contains("BlockGraph::expand: graph (0, 1)"), Error);
    CHECK_THROWS_WITH_AS(bg.expand(0, 0, 31, 41), doctest::Contains("is outside 1 x 1 graphs of 30 x 41"), Error);
  }

  TEST_CASE("BlockGraph::full keeps the blocks that hold an allowed pair, causal with n != m too") {
    for (const auto& size : {std::pair<std::size_t, std::size_t>{40, 40}, {13, 40}, {40, 13}, {1, 9}})
      for (bool causal : {false, true}) {
        const std::size_t n = size.first, m = size.second;
        CAPTURE(n);
        CAPTURE(m);
        CAPTURE(causal);
        const std::size_t qb = 6, kb = 4;
        const BlockGraph bg = BlockGraph::full(2, 1, n, m, qb, kb, causal);
        bg.validate();
        std::size_t wrong = 0;
        for (std::size_t b = 0; b < 2; ++b)
          for (std::size_t block = 0; block < bg.query_blocks(); ++block) {
            std::set<std::uint32_t> want;
            for (std::size_t i = block * qb; i < std::min(n, (block + 1) * qb); ++i)
              for (std::size_t j = 0; j < m; ++j)
                if (!causal || j + n <= i + m) want.insert(static_cast<std::uint32_t>(j / kb));
            wrong += row_set(bg, b, 0, block) != want;
          }
        CHECK(wrong == 0);
      }
  }

  TEST_CASE("BlockGraph::validate names what is wrong") {
    const BlockGraph good = BlockGraph::full(1, 2, 10, 12, 4, 5, false);  // 3 query blocks, 3 key blocks
    CHECK(validate_message(good).empty());
    BlockGraph g = good;
    g.key_block = 0;
    CHECK(validate_message(g) == "bg: query_block and key_block must be >= 1 (got 4 and 0)");
    g = good;
    g.offsets.pop_back();
    CHECK(validate_message(g) == "bg: offsets has 6 entries, expected batch x heads x query blocks + 1 = 7");
    g = good;
    g.offsets[0] = 1;
    CHECK(validate_message(g) == "bg: offsets[0] must be 0");
    g = good;
    g.blocks.push_back(0);
    CHECK(validate_message(g) == "bg: offsets[6] = 18 but there are 19 blocks");
    g = good;
    std::swap(g.blocks[0], g.blocks[1]);
    CHECK(validate_message(g) == "bg: the key blocks of block row 0 are not sorted and unique");
    g = good;
    g.blocks[2] = 3;
    CHECK(validate_message(g) == "bg: block row 0 has key block 3, not below 3 = ceil(keys / key_block)");
    g = good;
    g.offsets[1] = 2;  // row 1 is then blocks 2..5: {2, 0, 1, 2}
    CHECK(validate_message(g) == "bg: the key blocks of block row 1 are not sorted and unique");
    g = good;
    g.offsets[2] = 1;
    CHECK(validate_message(g) == "bg: offsets decrease at block row 1");
    g = good;
    g.batch = std::numeric_limits<std::size_t>::max() / 2;  // times 8 heads overflows on 32 and 64 bits
    g.heads = 8;
    CHECK(validate_message(g).find("bg: batch x heads x query blocks overflows") == 0);
    CHECK_THROWS_WITH_AS(BlockGraph::cover(std::vector<Graph>{}, 1, 1, 4, 4),
                         "BlockGraph::cover: graphs has 0 entries, expected batch x heads = 1 >= 1", Error);
    CHECK_THROWS_WITH_AS(BlockGraph::cover({Graph::empty(3, 4), Graph::empty(3, 5)}, 1, 2, 4, 4),
                         "BlockGraph::cover: graphs[1] is 3 x 5, expected the size of graphs[0], 3 x 4", Error);
    CHECK_THROWS_WITH_AS(BlockGraph::full(1, 1, 3, 3, 0, 4, false),
                         "BlockGraph: query_block and key_block must be >= 1 (got 0 and 4)", Error);
    const BlockGraph none = BlockGraph::empty(2, 3, 10, 7, 4, 4);
    none.validate();
    CHECK(none.kept() == 0);
    CHECK(none.offsets.size() == 2 * 3 * 3 + 1);
  }
}
