// graph_attention_forward: attention on the edges of a graph, checked against
// dense attention_forward, and its per-query exactness certificates.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention_support.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/model.hpp"
#include "support.hpp"

namespace entgraph {
namespace {

using test::Matrix;

// A random graph of n x m with about `density` of the pairs.
Graph random_graph(std::size_t n, std::size_t m, double density, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution keep(density);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j)
      if (keep(rng)) pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
  return Graph::from_pairs(n, m, std::move(pairs));
}

template <class T>
Matrix<T> dense_attention(const Matrix<T>& q, const Matrix<T>& k, const Matrix<T>& v, const AttentionOptions<T>& o) {
  Matrix<T> out(q.rows, v.cols);
  attention_forward<T>(q.view(), k.view(), v.view(), out.view(), o);
  return out;
}

template <class T>
Matrix<T> graph_attention(const Matrix<T>& q, const Matrix<T>& k, const Matrix<T>& v, const Graph& g,
                          const GraphAttentionOptions<T>& o, GraphAttentionReport* report) {
  Matrix<T> out(q.rows, v.cols, T(-7));
  graph_attention_forward<T>(q.view(), k.view(), v.view(), g, out.view(), o, report);
  return out;
}

template <class T>
double row_diff(const Matrix<T>& a, const Matrix<T>& b, std::size_t i) {
  double d = 0;
  for (std::size_t x = 0; x < a.cols; ++x)
    d = std::max(d, std::abs(static_cast<double>(a(i, x)) - static_cast<double>(b(i, x))));
  return d;
}

// Keys whose norms vary widely (every 5th key is "heavy", norm 3, the others
// norm <= 0.6) and queries of norm ~2: a row that holds the heavy keys bounds
// its left-out scores by the light norms, so sparse transforms can certify
// it; a row that misses a heavy key usually cannot be certified.
struct CertProblem {
  Matrix<float> q, k, v;
};
CertProblem cert_problem(std::size_t n, std::size_t m, std::size_t d, std::uint64_t seed) {
  CertProblem p{test::random_matrix<float>(n, d, 1.0, seed), test::random_matrix<float>(m, d, 1.0, seed + 1),
                test::random_matrix<float>(m, 3, 1.0, seed + 2)};
  std::mt19937_64 rng(seed + 3);
  std::uniform_real_distribution<double> light(0.05, 0.6);
  for (std::size_t j = 0; j < m; ++j) {
    double norm = 0;
    for (std::size_t x = 0; x < d; ++x) norm += static_cast<double>(p.k(j, x)) * p.k(j, x);
    const double target = j % 5 == 0 ? 3.0 : light(rng);
    for (std::size_t x = 0; x < d; ++x) p.k(j, x) = static_cast<float>(p.k(j, x) * target / std::sqrt(norm));
  }
  for (auto& x : p.q.data) x *= 2.0f / std::sqrt(static_cast<float>(d));
  return p;
}

// A random graph where each query also holds every heavy key with probability 1/2.
Graph cert_graph(std::size_t n, std::size_t m, double density, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution keep(density), heavy(0.5);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
  for (std::size_t i = 0; i < n; ++i) {
    const bool with_heavy = heavy(rng);
    for (std::size_t j = 0; j < m; ++j)
      if (keep(rng) || (with_heavy && j % 5 == 0))
        pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
  }
  return Graph::from_pairs(n, m, std::move(pairs));
}

std::vector<Transform> certifiable_transforms() {
  return {Transform::sparsemax(), Transform::entmax15(), Transform::entmax(1.25), Transform::entmax(2.5),
          Transform::topk_softmax(3), Transform::softmax()};
}

TEST_SUITE("attention") {
  TEST_CASE("graph attention on a superset of the gold graph equals dense attention") {
    struct Shape {
      std::size_t n, m;
    };
    std::size_t certified_total = 0, rows_total = 0;
    for (double alpha : {1.5, 1.25, 2.0})
      for (bool causal : {false, true})
        for (Shape shape : {Shape{24, 24}, Shape{16, 40}}) {
          CAPTURE(alpha);
          CAPTURE(causal);
          CAPTURE(shape.n);
          CAPTURE(shape.m);
          const std::size_t d = 8;
          const std::uint64_t seed = 11 + static_cast<std::uint64_t>(alpha * 100) + (causal ? 1000 : 0) + shape.m;
          const Matrix<float> q = test::random_matrix<float>(shape.n, d, 1.0, seed);
          const Matrix<float> k = test::random_matrix<float>(shape.m, d, 1.0, seed + 1);
          const Matrix<float> v = test::random_matrix<float>(shape.m, 5, 1.0, seed + 2);
          HeadSettings settings;
          settings.alpha = alpha;
          settings.causal = causal;
          settings.scale = 2.0 / std::sqrt(static_cast<double>(d));  // sparse enough to matter
          const Graph gold = gold_graph(q.view(), k.view(), settings);
          REQUIRE(allowed_edge_count(gold, causal) < allowed_pair_count(shape.n, shape.m, causal));  // really sparse

          GraphAttentionOptions<float> o;
          o.attention.transform = alpha == 1.5   ? Transform::entmax15()
                                  : alpha == 2.0 ? Transform::sparsemax()
                                                 : Transform::entmax(alpha);
          o.attention.causal = causal;
          o.attention.scale = settings.scale;
          const Matrix<float> dense = dense_attention<float>(q, k, v, o.attention);
          for (double extra : {0.0, 0.15}) {
            CAPTURE(extra);
            const Graph g = extra == 0.0 ? gold : graph_union(gold, random_graph(shape.n, shape.m, extra, seed + 3));
            GraphAttentionReport report;
            const Matrix<float> out = graph_attention<float>(q, k, v, g, o, &report);
            CHECK(test::max_abs_diff(out, dense) <= 1e-5);
            REQUIRE(report.certified.size() == shape.n);
            CHECK(report.recomputed_rows == 0);
            certified_total += report.certified_rows;
            rows_total += shape.n;
          }
          // Dropping the heaviest gold edge of a row with several changes that row.
          Matrix<float> probs(shape.n, shape.m), unused(shape.n, v.cols);
          attention_forward<float>(q.view(), k.view(), v.view(), unused.view(), o.attention, probs.view());
          for (std::size_t i = 0; i < shape.n; ++i) {
            if (gold.degree(i) < 2) continue;
            std::uint32_t heaviest = *gold.row_begin(i);
            for (const std::uint32_t* p = gold.row_begin(i); p != gold.row_end(i); ++p)
              if (probs(i, *p) > probs(i, heaviest)) heaviest = *p;
            std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
            for (std::size_t r = 0; r < shape.n; ++r)
              for (const std::uint32_t* p = gold.row_begin(r); p != gold.row_end(r); ++p)
                if (!(r == i && *p == heaviest)) pairs.emplace_back(static_cast<std::uint32_t>(r), *p);
            const Graph missing = Graph::from_pairs(shape.n, shape.m, std::move(pairs));
            GraphAttentionReport report;
            const Matrix<float> out = graph_attention<float>(q, k, v, missing, o, &report);
            CHECK(row_diff(out, dense, i) > 1e-4);
            CHECK(report.certified[i] == 0);
            break;
          }
        }
    MESSAGE("gold-superset rows certified: " << certified_total << " of " << rows_total);
  }

  TEST_CASE("graph attention: every certified row equals dense attention (random graphs)") {
    struct Shape {
      std::size_t n, m;
    };
    for (const Transform& t : certifiable_transforms()) {
      CAPTURE(test::describe(t));
      std::size_t certified = 0, uncertified = 0, uncertified_wrong = 0, rows = 0;
      for (std::uint64_t seed = 1; seed <= 12; ++seed)
        for (bool causal : {false, true})
          for (Shape shape : {Shape{20, 20}, Shape{12, 30}, Shape{30, 12}})
            for (double density : {0.05, 0.3, 0.7, 0.95}) {
              CAPTURE(seed);
              CAPTURE(causal);
              CAPTURE(shape.n);
              CAPTURE(shape.m);
              CAPTURE(density);
              const CertProblem p = cert_problem(shape.n, shape.m, 4, seed * 101);
              const Graph g = cert_graph(shape.n, shape.m, density, seed * 7 + 3);
              GraphAttentionOptions<float> o;
              o.attention.transform = t;
              o.attention.causal = causal;
              o.attention.scale = 1.0;
              const Matrix<float> dense = dense_attention<float>(p.q, p.k, p.v, o.attention);
              GraphAttentionReport report;
              const Matrix<float> out = graph_attention<float>(p.q, p.k, p.v, g, o, &report);
              REQUIRE(report.certified.size() == shape.n);
              std::size_t counted = 0;
              for (std::size_t i = 0; i < shape.n; ++i) {
                CAPTURE(i);
                if (report.certified[i]) {
                  ++counted;
                  CHECK(row_diff(out, dense, i) <= 1e-5);  // a certified row is never wrong
                } else if (row_diff(out, dense, i) > 1e-5) {
                  ++uncertified_wrong;
                }
              }
              CHECK(report.certified_rows == counted);
              CHECK(report.recomputed_rows == 0);
              certified += counted;
              uncertified += shape.n - counted;
              rows += shape.n;
            }
      MESSAGE(test::describe(t) << ": certified " << certified << " of " << rows << " rows, " << uncertified_wrong
                                << " uncertified rows differ from dense");
      CHECK(certified > 0);
      CHECK(uncertified > 0);
      CHECK(uncertified_wrong > 0);  // the graphs really miss weight: the certificate matters
      if (t.kind != TransformKind::softmax) CHECK(certified * 10 > rows);  // more than the trivial full rows
    }
  }

  TEST_CASE("graph attention: certified rows are exact in float64 too, and key padding is honoured") {
    std::size_t certified = 0;
    for (std::uint64_t seed = 1; seed <= 6; ++seed)
      for (bool causal : {false, true}) {
        const CertProblem pf = cert_problem(18, 25, 4, seed * 13);
        const Matrix<double> q = pf.q.cast<double>(), k = pf.k.cast<double>(), v = pf.v.cast<double>();
        std::vector<std::uint8_t> padding(25, 1);
        for (std::size_t j = 3; j < 25; j += 4) padding[j] = 0;
        const Graph g = cert_graph(18, 25, 0.3, seed);
        for (const Transform& t : {Transform::sparsemax(), Transform::entmax15(), Transform::topk_softmax(2)}) {
          CAPTURE(seed);
          CAPTURE(causal);
          CAPTURE(test::describe(t));
          GraphAttentionOptions<double> o;
          o.attention.transform = t;
          o.attention.causal = causal;
          o.attention.scale = 1.0;
          o.attention.key_padding = padding.data();
          const Matrix<double> dense = dense_attention<double>(q, k, v, o.attention);
          GraphAttentionReport report;
          const Matrix<double> out = graph_attention<double>(q, k, v, g, o, &report);
          for (std::size_t i = 0; i < 18; ++i)
            if (report.certified[i]) CHECK(row_diff(out, dense, i) <= 1e-12);
          certified += report.certified_rows;
          o.recompute_uncertified = true;
          const Matrix<double> exact = graph_attention<double>(q, k, v, g, o, &report);
          CHECK(test::max_abs_diff(exact, dense) <= 1e-12);
        }
      }
    MESSAGE("float64 rows certified: " << certified);
    CHECK(certified > 0);
  }

  TEST_CASE("graph attention: certified rows of the causal teacher on a local window are exact") {
    const Teacher teacher = Teacher::load(std::string(ENTGRAPH_SOURCE_DIR) + "/data/teacher-causal");
    const TeacherOutput fwd = teacher.forward(
        "And God remembered Noah, and every living thing, and all the cattle that was with him in the ark: and God "
        "made a wind to pass over the earth, and the waters asswaged;");
    const std::size_t n = fwd.tokens;
    std::size_t certified = 0, rows = 0, wrong_uncertified = 0;
    // Windows of w keys (optionally with key 0, an attention sink): the first
    // queries see all their keys (certified trivially); with w = 64 some later
    // queries are certified by the bound too.
    std::size_t beyond_trivial = 0;
    for (const auto& shape : {std::pair<std::size_t, bool>{16, false}, {64, false}, {64, true}}) {
      const std::size_t window = shape.first;
      const bool sink = shape.second;
      std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
      for (std::size_t i = 0; i < n; ++i) {
        if (sink) pairs.emplace_back(static_cast<std::uint32_t>(i), 0u);
        for (std::size_t j = i + 1 > window ? i + 1 - window : 0; j <= i; ++j)
          pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
      }
      const std::size_t trivial = std::min(n, window + (sink ? 1 : 0));
      const Graph g = Graph::from_pairs(n, n, std::move(pairs));
      for (std::size_t layer = 0; layer < fwd.layers; ++layer)
        for (std::size_t head = 0; head < fwd.heads; ++head) {
          CAPTURE(window);
          CAPTURE(sink);
          CAPTURE(layer);
          CAPTURE(head);
          const MatrixView<const float> q = fwd.queries_of(layer, head), k = fwd.keys_of(layer, head),
                                        v = fwd.values_of(layer, head);
          GraphAttentionOptions<float> o;
          o.attention.transform = teacher.config().alpha == 1.5 ? Transform::entmax15()
                                                                 : Transform::entmax(teacher.config().alpha);
          o.attention.causal = true;
          Matrix<float> dense(n, v.cols), out(n, v.cols);
          attention_forward<float>(q, k, v, dense.view(), o.attention);
          GraphAttentionReport report;
          graph_attention_forward<float>(q, k, v, g, out.view(), o, &report);
          for (std::size_t i = 0; i < n; ++i) {
            CAPTURE(i);
            if (report.certified[i])
              CHECK(row_diff(out, dense, i) <= 1e-5);
            else if (row_diff(out, dense, i) > 1e-5)
              ++wrong_uncertified;
          }
          // The first queries see all their keys: certified trivially.
          for (std::size_t i = 0; i < trivial; ++i) CHECK(report.certified[i] == 1);
          certified += report.certified_rows;
          rows += n;
          beyond_trivial += report.certified_rows - trivial;
          o.recompute_uncertified = true;
          graph_attention_forward<float>(q, k, v, g, out.view(), o, &report);
          CHECK(test::max_abs_diff(out, dense) <= 1e-5);
          CHECK(report.certified_rows + report.recomputed_rows == n);
        }
    }
    MESSAGE("teacher rows certified: " << certified << " of " << rows << ", " << beyond_trivial
                                       << " of them beyond the complete rows (" << wrong_uncertified
                                       << " uncertified rows differ from dense)");
    CHECK(beyond_trivial > 0);
    CHECK(certified < rows);
  }

  TEST_CASE("graph attention: recompute_uncertified makes every row exact") {
    std::size_t recomputed = 0;
    for (const Transform& t : certifiable_transforms())
      for (bool causal : {false, true})
        for (double density : {0.0, 0.2, 0.6}) {
          CAPTURE(test::describe(t));
          CAPTURE(causal);
          CAPTURE(density);
          const CertProblem p = cert_problem(20, 28, 4, 5);
          const Graph g = cert_graph(20, 28, density, 9);
          GraphAttentionOptions<float> o;
          o.attention.transform = t;
          o.attention.causal = causal;
          o.attention.scale = 1.0;
          o.recompute_uncertified = true;
          const Matrix<float> dense = dense_attention<float>(p.q, p.k, p.v, o.attention);
          GraphAttentionReport report;
          const Matrix<float> out = graph_attention<float>(p.q, p.k, p.v, g, o, &report);
          CHECK(test::max_abs_diff(out, dense) <= 1e-5);
          CHECK(report.certified_rows + report.recomputed_rows == 20);
          for (std::size_t i = 0; i < 20; ++i) CHECK(report.certified[i] <= 1);
          recomputed += report.recomputed_rows;
        }
    CHECK(recomputed > 0);
  }

  TEST_CASE("graph attention: certify = false gives the same output and certifies only full rows") {
    for (const Transform& t : certifiable_transforms())
      for (double density : {0.2, 0.6, 1.0}) {
        CAPTURE(test::describe(t));
        CAPTURE(density);
        const CertProblem p = cert_problem(20, 28, 4, 5);
        const Graph g = cert_graph(20, 28, density, 9);
        GraphAttentionOptions<float> o;
        o.attention.transform = t;
        o.attention.scale = 1.0;
        GraphAttentionReport checked, fast;
        const Matrix<float> a = graph_attention<float>(p.q, p.k, p.v, g, o, &checked);
        o.certify = false;
        const Matrix<float> b = graph_attention<float>(p.q, p.k, p.v, g, o, &fast);
        CHECK(test::max_abs_diff(a, b) <= 1e-6);
        if (density == 1.0) CHECK(test::max_abs_diff(b, dense_attention<float>(p.q, p.k, p.v, o.attention)) <= 1e-5);
        for (std::size_t i = 0; i < 20; ++i) {
          CHECK(fast.certified[i] == (g.degree(i) == 28 ? 1 : 0));
          CHECK(fast.certified[i] <= checked.certified[i]);
        }
      }
  }

  TEST_CASE("graph attention: fast tiles on window graphs match the row-by-row path and dense on full windows") {
    const std::size_t n = 100, d = 8;
    const auto q = test::random_matrix<float>(n, d, 1.0, 21), k = test::random_matrix<float>(n, d, 1.0, 22),
               v = test::random_matrix<float>(n, 5, 1.0, 23);
    for (bool causal : {false, true})
      for (std::size_t w : {4u, 12u, 200u}) {
        CAPTURE(causal);
        CAPTURE(w);
        std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t j = i > w ? i - w : 0; j <= std::min(n - 1, i + w); ++j)
            pairs.emplace_back(std::uint32_t(i), std::uint32_t(j));
        const Graph g = Graph::from_pairs(n, n, std::move(pairs));
        GraphAttentionOptions<float> o;
        o.attention.transform = Transform::entmax15();
        o.attention.causal = causal;
        const Matrix<float> checked = graph_attention<float>(q, k, v, g, o, nullptr);
        o.certify = false;
        const Matrix<float> fast = graph_attention<float>(q, k, v, g, o, nullptr);
        CHECK(test::max_abs_diff(checked, fast) <= 1e-6);
        if (w >= n) CHECK(test::max_abs_diff(fast, dense_attention<float>(q, k, v, o.attention)) <= 1e-5);
      }
  }

  TEST_CASE("graph attention: bucket graphs (queries regrouped into tiles) match the row path; one bucket is dense") {
    const std::size_t n = 90, d = 8;
    const auto q = test::random_matrix<float>(n, d, 1.0, 31), k = test::random_matrix<float>(n, d, 1.0, 32),
               v = test::random_matrix<float>(n, 5, 1.0, 33);
    std::mt19937_64 rng(34);
    for (std::size_t buckets : {1u, 3u, 7u})
      for (bool causal : {false, true}) {
        CAPTURE(buckets);
        CAPTURE(causal);
        test::Matrix<std::uint32_t> qb(n, 1), kb(n, 1);
        for (auto& b : qb.data) b = static_cast<std::uint32_t>(rng() % buckets);
        for (auto& b : kb.data) b = static_cast<std::uint32_t>(rng() % buckets);
        const Graph g = Graph::from_buckets(qb.view(), kb.view(), buckets);
        GraphAttentionOptions<float> o;
        o.attention.transform = Transform::entmax15();
        o.attention.causal = causal;
        const Matrix<float> checked = graph_attention<float>(q, k, v, g, o, nullptr);
        o.certify = false;
        GraphAttentionReport report;
        const Matrix<float> fast = graph_attention<float>(q, k, v, g, o, &report);
        CHECK(test::max_abs_diff(checked, fast) <= 1e-6);
        if (buckets == 1) {
          CHECK(test::max_abs_diff(fast, dense_attention<float>(q, k, v, o.attention)) <= 1e-5);
          CHECK(report.certified_rows == n);
        }
      }
  }

  TEST_CASE("graph attention: softmax on the full graph is dense softmax; a missing key leaves the row uncertified") {
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      const Matrix<float> q = test::random_matrix<float>(10, 6, 1.0, 21);
      const Matrix<float> k = test::random_matrix<float>(14, 6, 1.0, 22);
      const Matrix<float> v = test::random_matrix<float>(14, 4, 1.0, 23);
      GraphAttentionOptions<float> o;
      o.attention.transform = Transform::softmax();
      o.attention.causal = causal;
      const Matrix<float> dense = dense_attention<float>(q, k, v, o.attention);
      GraphAttentionReport report;
      Matrix<float> out = graph_attention<float>(q, k, v, Graph::full(10, 14, causal), o, &report);
      CHECK(test::max_abs_diff(out, dense) <= 1e-6);
      CHECK(report.certified_rows == 10);
      // Future keys in the graph are ignored under the causal mask.
      out = graph_attention<float>(q, k, v, Graph::full(10, 14, false), o, &report);
      CHECK(test::max_abs_diff(out, dense) <= 1e-6);
      CHECK(report.certified_rows == 10);

      // Query 7 loses key 2 (visible to it causal or not).
      std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
      const Graph full = Graph::full(10, 14, causal);
      for (std::size_t i = 0; i < 10; ++i)
        for (const std::uint32_t* p = full.row_begin(i); p != full.row_end(i); ++p)
          if (!(i == 7 && *p == 2)) pairs.emplace_back(static_cast<std::uint32_t>(i), *p);
      out = graph_attention<float>(q, k, v, Graph::from_pairs(10, 14, std::move(pairs)), o, &report);
      CHECK(report.certified[7] == 0);
      CHECK(report.certified_rows == 9);
      CHECK(row_diff(out, dense, 7) > 1e-4);
      for (std::size_t i = 0; i < 10; ++i)
        if (i != 7) CHECK(row_diff(out, dense, i) <= 1e-6);
    }
  }

  TEST_CASE("graph attention: queries without candidate keys get zero rows") {
    // Causal with n > m: queries 0..2 see no key at all (certified), the others see some.
    const Matrix<float> q = test::random_matrix<float>(8, 4, 1.0, 31);
    const Matrix<float> k = test::random_matrix<float>(5, 4, 1.0, 32);
    const Matrix<float> v = test::random_matrix<float>(5, 2, 1.0, 33);
    GraphAttentionOptions<float> o;
    o.attention.transform = Transform::sparsemax();
    o.attention.causal = true;
    GraphAttentionReport report;
    const Matrix<float> out = graph_attention<float>(q, k, v, Graph::empty(8, 5), o, &report);
    CHECK(test::max_abs(out) == 0.0);
    for (std::size_t i = 0; i < 8; ++i) CHECK(report.certified[i] == (i < 3 ? 1 : 0));
    o.recompute_uncertified = true;
    const Matrix<float> exact = graph_attention<float>(q, k, v, Graph::empty(8, 5), o, &report);
    CHECK(test::max_abs_diff(exact, dense_attention<float>(q, k, v, o.attention)) <= 1e-6);
    CHECK(report.recomputed_rows == 5);
    CHECK(report.certified_rows == 3);
  }

  TEST_CASE("graph attention rejects bad arguments by name and writes nothing") {
    const Matrix<float> q = test::random_matrix<float>(6, 4, 1.0, 41);
    const Matrix<float> k = test::random_matrix<float>(7, 4, 1.0, 42);
    const Matrix<float> v = test::random_matrix<float>(7, 3, 1.0, 43);
    const Matrix<float> k_bad = test::random_matrix<float>(7, 5, 1.0, 44);
    const Matrix<float> v_bad = test::random_matrix<float>(8, 3, 1.0, 45);
    Matrix<float> q_nan = q;
    q_nan(2, 1) = std::nanf("");
    const Graph g = random_graph(6, 7, 0.5, 46);
    Graph unsorted = Graph::full(6, 7, false);
    std::swap(unsorted.indices[0], unsorted.indices[1]);
    Graph out_of_range = Graph::full(6, 7, false);
    out_of_range.indices.back() = 9;
    GraphAttentionOptions<float> o;
    GraphAttentionOptions<float> span = o;
    span.attention.transform = Transform{TransformKind::adaptive_span, 1.0, 0};
    GraphAttentionOptions<float> bad_alpha = o;
    bad_alpha.attention.transform = Transform::entmax(0.5);

    struct Case {
      const char* name;
      const Matrix<float>* q;
      const Matrix<float>* k;
      const Matrix<float>* v;
      const Graph* g;
      std::size_t out_rows, out_cols;
      const GraphAttentionOptions<float>* o;
      const char* expect;
    };
    const Graph wrong_queries = Graph::empty(5, 7), wrong_keys = Graph::empty(6, 8);
    const std::vector<Case> cases = {
        {"k cols", &q, &k_bad, &v, &g, 6, 3, &o, "k.cols"},
        {"v rows", &q, &k, &v_bad, &g, 6, 3, &o, "v.rows"},
        {"out rows", &q, &k, &v, &g, 5, 3, &o, "out"},
        {"out cols", &q, &k, &v, &g, 6, 2, &o, "out"},
        {"graph queries", &q, &k, &v, &wrong_queries, 6, 3, &o, "graph.queries"},
        {"graph keys", &q, &k, &v, &wrong_keys, 6, 3, &o, "graph.keys"},
        {"unsorted graph", &q, &k, &v, &unsorted, 6, 3, &o, "graph"},
        {"graph key out of range", &q, &k, &v, &out_of_range, 6, 3, &o, "graph"},
        {"adaptive span", &q, &k, &v, &g, 6, 3, &span, "options.attention.transform"},
        {"alpha", &q, &k, &v, &g, 6, 3, &bad_alpha, "options.attention.transform.alpha"},
        {"nan q", &q_nan, &k, &v, &g, 6, 3, &o, "q"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.name);
      Matrix<float> out(c.out_rows, c.out_cols, 5.0f);
      GraphAttentionReport report;
      report.certified_rows = 99;
      const std::string msg = test::error_message([&] {
        graph_attention_forward<float>(c.q->view(), c.k->view(), c.v->view(), *c.g, out.view(), *c.o, &report);
      });
      CAPTURE(msg);
      CHECK(msg.rfind("graph_attention_forward: ", 0) == 0);
      CHECK(msg.find(c.expect) != std::string::npos);
      CHECK(std::all_of(out.data.begin(), out.data.end(), [](float x) { return x == 5.0f; }));
      CHECK(report.certified_rows == 99);
      CHECK(report.certified.empty());
    }
    // The unsorted graph's message says what is wrong.
    Matrix<float> out(6, 3);
    CHECK(test::error_message([&] {
            graph_attention_forward<float>(q.view(), k.view(), v.view(), unsorted, out.view(), o);
          }).find("not sorted") != std::string::npos);
  }
}

}  // namespace
}  // namespace entgraph
