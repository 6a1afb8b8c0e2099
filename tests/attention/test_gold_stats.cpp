// gold_stats on captures whose entmax support is known in closed form.
#include <doctest/doctest.h>

#include "entgraph/error.hpp"
#include "entgraph/gold_stats.hpp"
#include "entgraph/io/capture.hpp"
#include "support.hpp"

namespace entgraph {
namespace {

// Keys k_j = e_(j mod d), queries q_i = 10 e_(i mod d), scale 1: query i
// scores 10 on the keys of its residue class and 0 elsewhere. For 1.5-entmax
// with c >= 1 winners at z = 10 (z/2 = 5), the winners share p = 1/c, i.e.
// 5 - tau = 1/sqrt(c) with tau > 0, so every other key gets exactly 0: the
// support of query i is its residue class (among the keys it may see).
Capture residue_capture(std::size_t d, std::vector<std::size_t> lengths, bool causal) {
  Capture c = Capture::make(1, 1, d, lengths, false);
  for (std::size_t s = 0; s < c.sequences(); ++s) {
    const MatrixView<float> q = c.queries_of(0, 0, s), k = c.keys_of(0, 0, s);
    for (std::size_t i = 0; i < q.rows; ++i) {
      q(i, i % d) = 10.0f;
      k(i, i % d) = 1.0f;
    }
  }
  c.settings[0].scale = 1.0;
  c.settings[0].causal = causal;
  return c;
}

TEST_SUITE("attention") {
  TEST_CASE("gold_stats counts the entmax support and the allowed pairs") {
    for (CpuIsa isa : available_cpu_isas()) {
      test::IsaScope scope(isa);
      CAPTURE(scope.name());
      // Bidirectional, n = 8, d = 4: each query attends to 2 keys.
      GoldStats g = gold_stats(residue_capture(4, {8}, false), 0, 0);
      CHECK(g.edges == 16);
      CHECK(g.allowed == 64);
      CHECK(g.queries == 8);
      CHECK(g.sparsity() == doctest::Approx(0.75));
      CHECK(g.mean_support() == doctest::Approx(2.0));
      // Causal: query i sees the keys j <= i of its class, floor(i/4) + 1 of
      // them: 4 * 1 + 4 * 2 = 12 edges among 8 * 9 / 2 = 36 allowed pairs.
      g = gold_stats(residue_capture(4, {8}, true), 0, 0);
      CHECK(g.edges == 12);
      CHECK(g.allowed == 36);
      // Two sequences are separate graphs; a 130-token sequence spans three row blocks.
      g = gold_stats(residue_capture(4, {8, 130}, false), 0, 0);
      CHECK(g.edges == 16 + 2 * 33 * 33 + 2 * 32 * 32);  // residues 0 and 1 have 33 members, 2 and 3 have 32
      CHECK(g.allowed == 64 + 130 * 130);
    }
  }

  TEST_CASE("gold_stats: softmax attends everywhere, sparsemax of a clear winner only there") {
    Capture c = residue_capture(4, {12}, true);
    c.settings[0].alpha = 1.0;
    c.settings[0].scale = 0.1;  // scores 0 or 1: no underflow
    GoldStats g = gold_stats(c, 0, 0);
    CHECK(g.edges == g.allowed);
    CHECK(g.sparsity() == 0.0);
    c.settings[0].alpha = 2.0;
    c.settings[0].scale = 1.0;
    g = gold_stats(c, 0, 0);
    CHECK(g.edges == 4 * 1 + 4 * 2 + 4 * 3);
  }

  TEST_CASE("gold_stats rejects layers and heads out of range") {
    const Capture c = residue_capture(4, {8}, false);
    CHECK_THROWS_AS(gold_stats(c, 1, 0), Error);
    CHECK_THROWS_AS(gold_stats(c, 0, 1), Error);
  }
}

}  // namespace
}  // namespace entgraph
