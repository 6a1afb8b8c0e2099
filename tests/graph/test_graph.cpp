// Graphs: CSR construction from masks, buckets and pairs against brute-force
// sets; set operations and metrics with the causal denominator; the gold
// graph against the dense transform's support.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <set>
#include <utility>

#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/transforms.hpp"
#include "support.hpp"

namespace entgraph {
namespace {

using Pairs = std::set<std::pair<std::size_t, std::size_t>>;

Pairs pairs_of(const Graph& g) {
  g.validate();
  Pairs p;
  for (std::size_t i = 0; i < g.queries; ++i)
    for (const std::uint32_t* j = g.row_begin(i); j != g.row_end(i); ++j) p.emplace(i, *j);
  return p;
}

TEST_SUITE("graph") {
  TEST_CASE("window_global_graph is the set of window and global pairs") {
    for (const bool causal : {false, true})
      for (const std::size_t n : {1, 5, 12})
        for (const std::size_t m : {n, n + 3})
          for (const long w : {-1L, 0L, 1L, 4L, 30L})
            for (const std::size_t g : {0, 1, 3, 40}) {
              CAPTURE(causal);
              CAPTURE(n);
              CAPTURE(m);
              CAPTURE(w);
              CAPTURE(g);
              Pairs want;
              for (std::size_t i = 0; i < n; ++i)
                for (std::size_t j = 0; j < m; ++j) {
                  const long d = static_cast<long>(j) - static_cast<long>(i);
                  const bool in_window = w >= 0 && d >= -w && d <= (causal ? 0 : w);
                  if (in_window || j < g || i < g) want.insert({i, j});
                }
              const Graph got = window_global_graph(n, m, w, g, causal);
              got.validate("window_global_graph");
              CHECK(pairs_of(got) == want);
            }
  }

  TEST_CASE("from_mask, full, empty and from_pairs agree with brute-force sets") {
    const auto mask = test::random_mask(9, 13, 0.3, 7);
    const Graph g = Graph::from_mask(mask.view());
    Pairs want;
    for (std::size_t i = 0; i < 9; ++i)
      for (std::size_t j = 0; j < 13; ++j)
        if (mask(i, j)) want.emplace(i, j);
    CHECK(pairs_of(g) == want);
    for (const auto& [i, j] : want) CHECK(g.contains(i, j));
    CHECK_FALSE(g.contains(9, 0));

    std::vector<std::pair<std::uint32_t, std::uint32_t>> shuffled;
    for (const auto& [i, j] : want) {
      shuffled.emplace_back(std::uint32_t(i), std::uint32_t(j));
      shuffled.emplace_back(std::uint32_t(i), std::uint32_t(j));  // repeats are merged
    }
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(3));
    CHECK(pairs_of(Graph::from_pairs(9, 13, shuffled)) == want);
    CHECK_THROWS_WITH_AS(Graph::from_pairs(2, 2, {{0, 2}}), doctest::Contains("outside 2 x 2"), Error);

    CHECK(Graph::full(5, 5, false).edges() == 25);
    CHECK(Graph::full(5, 5, true).edges() == 15);
    CHECK(Graph::full(3, 5, true).edges() == 3 + 4 + 5);  // queries are the last 3 of 5 positions
    CHECK(Graph::empty(4, 6).edges() == 0);
    CHECK(allowed_pair_count(5, 5, true) == 15);
    CHECK(allowed_pair_count(3, 5, true) == 12);
    CHECK(allowed_pair_count(3, 5, false) == 15);
  }

  TEST_CASE("from_buckets links exactly the pairs that share a bucket") {
    // One bucket a query (its members' list), coarse buckets (bitmaps), fine
    // ones (merged lists), and keys that list a bucket twice.
    struct Case {
      std::size_t n, m, rq, rk, buckets;
    };
    for (const Case c : {Case{40, 35, 2, 3, 7}, Case{30, 70, 1, 2, 5}, Case{40, 35, 3, 2, 300}, Case{60, 500, 3, 2, 20},
                         Case{50, 300, 2, 2, 40}}) {
      CAPTURE(c.m);
      CAPTURE(c.buckets);
      std::mt19937_64 rng(11 + c.buckets);
      test::Matrix<std::uint32_t> qb(c.n, c.rq), kb(c.m, c.rk);
      for (auto& b : qb.data) b = std::uint32_t(rng() % c.buckets);
      for (auto& b : kb.data) b = std::uint32_t(rng() % c.buckets);
      for (std::size_t j = 0; j < c.m; j += 3) kb(j, c.rk - 1) = kb(j, 0);
      Pairs want;
      for (std::size_t i = 0; i < c.n; ++i)
        for (std::size_t j = 0; j < c.m; ++j) {
          bool shared = false;
          for (std::size_t a = 0; a < c.rq; ++a)
            for (std::size_t b = 0; b < c.rk; ++b) shared = shared || qb(i, a) == kb(j, b);
          if (shared) want.emplace(i, j);
        }
      CHECK(!want.empty());
      CHECK(pairs_of(Graph::from_buckets(qb.view(), kb.view(), c.buckets)) == want);  // sorted, no repeats
      kb(3, 1) = std::uint32_t(c.buckets);
      CHECK_THROWS_WITH_AS(Graph::from_buckets(qb.view(), kb.view(), c.buckets), doctest::Contains("key_buckets(3, 1)"),
                           Error);
      kb(3, 1) = 0;
      qb(c.n - 1, 0) = std::uint32_t(c.buckets + 4);
      const std::string culprit = "query_buckets(" + std::to_string(c.n - 1) + ", 0)";
      CHECK_THROWS_WITH_AS(Graph::from_buckets(qb.view(), kb.view(), c.buckets), doctest::Contains(culprit.c_str()),
                           Error);
    }
  }

  TEST_CASE("union, intersection and metrics count only allowed pairs") {
    const Graph a = Graph::from_mask(test::random_mask(20, 20, 0.4, 1).view());
    const Graph b = Graph::from_mask(test::random_mask(20, 20, 0.3, 2).view());
    const Pairs pa = pairs_of(a), pb = pairs_of(b);
    Pairs both, either = pa;
    either.insert(pb.begin(), pb.end());
    for (const auto& p : pa)
      if (pb.count(p)) both.insert(p);
    CHECK(pairs_of(graph_union(a, b)) == either);
    CHECK(intersection_count(a, b) == both.size());
    std::size_t causal_both = 0, causal_a = 0, causal_b = 0;
    for (const auto& p : both) causal_both += p.second <= p.first;
    for (const auto& p : pa) causal_a += p.second <= p.first;
    for (const auto& p : pb) causal_b += p.second <= p.first;
    CHECK(intersection_count(a, b, true) == causal_both);
    CHECK(allowed_edge_count(a, true) == causal_a);

    const GraphMetrics m = compare_graphs(a, b, true);  // a predicts b
    CHECK(m.allowed == 210);
    CHECK(m.gold == causal_b);
    CHECK(m.predicted == causal_a);
    CHECK(m.hits == causal_both);
    CHECK(m.recall() == doctest::Approx(double(causal_both) / double(causal_b)));
    CHECK(m.precision() == doctest::Approx(double(causal_both) / double(causal_a)));
    CHECK(m.sparsity() == doctest::Approx(1.0 - double(causal_a) / 210.0));
    GraphMetrics sum = m;
    sum += m;
    CHECK(sum.recall() == doctest::Approx(m.recall()));
    CHECK(sum.allowed == 420);
    CHECK(GraphMetrics{}.recall() == 1.0);  // nothing to find: nothing missed
    CHECK_THROWS_WITH_AS(graph_union(a, Graph::empty(20, 21)), doctest::Contains("different shapes"), Error);
  }

  TEST_CASE("validate names what is wrong") {
    Graph g = Graph::full(3, 3, true);
    CHECK_NOTHROW(g.validate("g"));
    Graph bad = g;
    bad.indices[1] = 5;
    CHECK_THROWS_WITH_AS(bad.validate("pred"), doctest::Contains("pred: query 1 has key 5"), Error);
    bad = g;
    std::swap(bad.indices[1], bad.indices[2]);
    CHECK_THROWS_WITH_AS(bad.validate("pred"), doctest::Contains("not sorted and unique"), Error);
    bad = g;
    bad.offsets.pop_back();
    CHECK_THROWS_WITH_AS(bad.validate("pred"), doctest::Contains("offsets has 3 entries"), Error);
  }

  TEST_CASE("the gold graph is the support of the dense transform, in any number of row blocks") {
    for (const bool causal : {false, true})
      for (const double alpha : {1.5, 1.25, 2.0}) {
        CAPTURE(causal);
        CAPTURE(alpha);
        const std::size_t n = 150, d = 16;  // 150 rows: three blocks of 64
        const auto q = test::random_matrix<float>(n, d, 1.0, 5), k = test::random_matrix<float>(n, d, 1.0, 6);
        HeadSettings hs;
        hs.alpha = alpha;
        hs.causal = causal;
        hs.scale = 1.0;
        const Graph g = gold_graph(q.view(), k.view(), hs);
        // Dense reference in double: scores, mask, transform, support.
        test::Matrix<double> s(n, n), p(n, n);
        test::Matrix<std::uint8_t> mask(n, n, 1);
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t j = 0; j < n; ++j) {
            double dot = 0;
            for (std::size_t c = 0; c < d; ++c) dot += double(q(i, c)) * k(j, c);
            s(i, j) = dot;
            if (causal && j > i) mask(i, j) = 0;
          }
        transform_forward<double>(Transform::entmax(alpha), s.view(), p.view(), mask.view());
        std::size_t disagreements = 0, support = 0;
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t j = 0; j < n; ++j) {
            support += p(i, j) > 0;
            // float scores can flip entries whose weight is within rounding of 0
            if ((p(i, j) > 0) != g.contains(i, j) && p(i, j) > 1e-6) ++disagreements;
          }
        CHECK(disagreements == 0);
        CHECK(g.edges() <= support + n);  // no spurious edges beyond rounding
        CHECK(g.edges() >= n);            // every row has a non-empty support
        if (causal) CHECK(allowed_edge_count(g, true) == g.edges());
      }
  }

  TEST_CASE("gold_graph of a capture's head: an error names the capture, the layer and the head") {
    Capture c = Capture::make(2, 3, 4, {3, 2});
    for (std::size_t i = 0; i < c.queries.size(); ++i) c.queries[i] = c.keys[i] = 0.25f * float(i % 7) - 0.5f;
    // Not validated: a NaN key of layer 1, head 2 reaches the transform.
    c.keys[((1 * 3 + 2) * 5 + 4) * 4 + 1] = std::numeric_limits<float>::quiet_NaN();
    CHECK_NOTHROW(gold_graph(c, 1, 1, 1));
    CHECK_THROWS_WITH_AS(gold_graph(c, 1, 2, 1), doctest::Contains("layer 1, head 2: "), Error);
    c.source = "caps/demo";
    try {
      gold_graph(c, 1, 2, 1);
      FAIL("expected an error");
    } catch (const Error& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.rfind("capture caps/demo, layer 1, head 2: ", 0) == 0);
      CHECK(what.find("non-finite") != std::string::npos);
    }
    // An alpha beyond the entmax range (a capture that skipped validation).
    c.keys[((1 * 3 + 2) * 5 + 4) * 4 + 1] = 0.0f;
    c.head(0, 1).alpha = 1e308;
    CHECK_THROWS_WITH_AS(gold_graph(c, 0, 1, 0), doctest::Contains("capture caps/demo, layer 0, head 1: "), Error);
  }
}

}  // namespace
}  // namespace entgraph
