// Tests of the non-learned and clustering predictors (core/src/predictors/:
// fixed_patterns.cpp, reformer.cpp, routing.cpp): window, global, longformer,
// bigbird, reformer, routing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "support.hpp"

using entgraph::Capture;
using entgraph::Error;
using entgraph::Graph;
using entgraph::MatrixView;
using entgraph::PredictorSettings;
using entgraph::load_predictor;
using entgraph::make_predictor;
using entgraph::test::Matrix;
using entgraph::test::random_matrix;

namespace {

using PairSet = std::set<std::pair<std::size_t, std::size_t>>;

PairSet pairs_of(const Graph& g) {
  g.validate("predicted");
  PairSet s;
  for (std::size_t i = 0; i < g.queries; ++i)
    for (const std::uint32_t* p = g.row_begin(i); p != g.row_end(i); ++p) s.emplace(i, *p);
  return s;
}

// Brute force: every pair (i, j) with keep(i, j).
template <class F>
PairSet brute(std::size_t n, std::size_t m, F keep) {
  PairSet s;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j)
      if (keep(static_cast<long>(i), static_cast<long>(j))) s.emplace(i, j);
  return s;
}

bool in_window(long i, long j, long w, bool causal) { return std::labs(i - j) <= w && (!causal || j <= i); }
bool in_global(long i, long j, long g) { return i < g || j < g; }

Graph predict(const std::string& method, const PredictorSettings& settings, std::size_t n, std::size_t m,
              bool causal, std::size_t layer = 0, std::size_t head = 0, std::size_t d = 4) {
  const Matrix<float> q = random_matrix<float>(n, d, 1.0, 11), k = random_matrix<float>(m, d, 1.0, 12);
  return make_predictor(method, settings)->predict(q.view(), k.view(), layer, head, causal);
}

bool same_graph(const Graph& a, const Graph& b) {
  return a.queries == b.queries && a.keys == b.keys && a.offsets == b.offsets && a.indices == b.indices;
}

// The error message of f(), or "" if it does not throw entgraph::Error.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Points around `clusters` random unit-ish centres in d dimensions; label[i] is the cluster of row i.
struct Clustered {
  Matrix<float> points;
  std::vector<int> label;
};
Clustered clustered(std::size_t rows, std::size_t d, const Matrix<float>& centres, double noise, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);  // test data only: need not be portable
  Clustered c{Matrix<float>(rows, d), std::vector<int>(rows)};
  for (std::size_t i = 0; i < rows; ++i) {
    const std::size_t z = i % centres.rows;
    c.label[i] = static_cast<int>(z);
    for (std::size_t t = 0; t < d; ++t) c.points(i, t) = static_cast<float>(centres(z, t) + noise * normal(rng));
  }
  return c;
}

PairSet same_cluster(const std::vector<int>& ql, const std::vector<int>& kl) {
  PairSet s;
  for (std::size_t i = 0; i < ql.size(); ++i)
    for (std::size_t j = 0; j < kl.size(); ++j)
      if (ql[i] == kl[j]) s.emplace(i, j);
  return s;
}

double recall(const PairSet& predicted, const PairSet& gold) {
  std::size_t hits = 0;
  for (const auto& p : gold) hits += predicted.count(p);
  return static_cast<double>(hits) / static_cast<double>(gold.size());
}

}  // namespace

TEST_SUITE("predictors") {
  TEST_CASE("pattern methods are registered and fixed patterns learn nothing") {
    const std::vector<std::string> names = entgraph::predictor_methods();
    for (const char* m : {"window", "global", "longformer", "bigbird", "reformer", "routing"}) {
      CAPTURE(m);
      CHECK(std::count(names.begin(), names.end(), std::string(m)) == 1);
      CHECK(make_predictor(m)->method() == m);
      CHECK(make_predictor(m)->learned() == (std::string(m) == "routing"));
    }
  }

  TEST_CASE("window: exact edge set, causal keeps only j <= i") {
    for (bool causal : {false, true})
      for (long w : {0L, 1L, 3L, 20L})
        for (auto [n, m] : {std::pair<std::size_t, std::size_t>{12, 12}, {10, 7}, {5, 9}, {1, 1}}) {
          CAPTURE(causal);
          CAPTURE(w);
          CAPTURE(n);
          CAPTURE(m);
          const Graph g = predict("window", {{"window", std::to_string(w)}}, n, m, causal);
          CHECK(pairs_of(g) == brute(n, m, [&](long i, long j) { return in_window(i, j, w, causal); }));
          if (causal)
            for (const auto& [i, j] : pairs_of(g)) CHECK(j <= i);
        }
    // The default is w = 3.
    CHECK(pairs_of(predict("window", {}, 9, 9, false)) ==
          brute(9, 9, [](long i, long j) { return in_window(i, j, 3, false); }));
  }

  TEST_CASE("window: large n costs O(n w), edge count by formula") {
    const std::size_t n = 200000;
    const Graph g = predict("window", {{"window", "2"}}, n, n, false, 0, 0, 1);
    CHECK(g.edges() == 5 * n - 6);  // rows 0 and n-1 lose 2 keys, rows 1 and n-2 lose 1
    const Graph c = predict("window", {{"window", "2"}}, n, n, true, 0, 0, 1);
    CHECK(c.edges() == 3 * n - 3);
  }

  TEST_CASE("global and longformer: exact edge sets") {
    for (bool causal : {false, true})
      for (long g : {0L, 2L, 5L, 30L}) {
        CAPTURE(causal);
        CAPTURE(g);
        const std::size_t n = 11, m = 11;
        CHECK(pairs_of(predict("global", {{"global", std::to_string(g)}}, n, m, causal)) ==
              brute(n, m, [&](long i, long j) { return in_global(i, j, g); }));
        for (long w : {0L, 2L}) {
          CAPTURE(w);
          CHECK(pairs_of(predict("longformer", {{"global", std::to_string(g)}, {"window", std::to_string(w)}}, n, m,
                                 causal)) ==
                brute(n, m, [&](long i, long j) { return in_window(i, j, w, causal) || in_global(i, j, g); }));
        }
      }
    CHECK(pairs_of(predict("global", {}, 6, 8, false)) == brute(6, 8, [](long i, long j) { return in_global(i, j, 2); }));
    CHECK(pairs_of(predict("longformer", {}, 20, 20, false)) ==
          brute(20, 20, [](long i, long j) { return in_window(i, j, 3, false) || in_global(i, j, 2); }));
  }

  TEST_CASE("bigbird: window + global + exactly r random keys per row, deterministic per seed") {
    const std::size_t n = 40, m = 40;
    for (bool causal : {false, true})
      for (long r : {0L, 1L, 3L, 100L}) {
        CAPTURE(causal);
        CAPTURE(r);
        const long w = 2, gl = 3;
        const PredictorSettings s = {{"window", "2"}, {"global", "3"}, {"random", std::to_string(r)}, {"seed", "5"}};
        const Graph g = predict("bigbird", s, n, m, causal);
        const PairSet base = brute(n, m, [&](long i, long j) { return in_window(i, j, w, causal) || in_global(i, j, gl); });
        const PairSet got = pairs_of(g);
        CHECK(std::includes(got.begin(), got.end(), base.begin(), base.end()));
        for (std::size_t i = 0; i < n; ++i) {
          CAPTURE(i);
          std::size_t base_row = 0, free = 0;
          for (std::size_t j = 0; j < m; ++j) {
            const bool b = base.count({i, j}) > 0;
            base_row += b;
            free += !b && (!causal || j <= i);
          }
          const std::size_t expect = static_cast<long>(i) < gl ? m : base_row + std::min<std::size_t>(r, free);
          CHECK(g.degree(i) == expect);
          if (causal && static_cast<long>(i) >= gl)
            for (const std::uint32_t* p = g.row_begin(i); p != g.row_end(i); ++p) CHECK(*p <= i);
        }
        // Deterministic for a seed, different across seeds.
        CHECK(same_graph(g, predict("bigbird", s, n, m, causal)));
        PredictorSettings other = s;
        other["seed"] = "6";
        if (r == 1 || r == 3) CHECK_FALSE(same_graph(g, predict("bigbird", other, n, m, causal)));
      }
    // The random keys depend on (layer, head) too.
    const PredictorSettings s = {{"random", "3"}};
    CHECK_FALSE(same_graph(predict("bigbird", s, 30, 30, false, 0, 0), predict("bigbird", s, 30, 30, false, 1, 0)));
    CHECK_FALSE(same_graph(predict("bigbird", s, 30, 30, false, 0, 0), predict("bigbird", s, 30, 30, false, 0, 1)));
    // Defaults: window 3, global 2, random 2.
    const Graph d = predict("bigbird", {}, 30, 30, false);
    CHECK(d.degree(15) == 7 + 2 + 2);
  }

  TEST_CASE("bigbird: random keys cover the free keys roughly uniformly") {
    std::vector<std::size_t> hits(64, 0);
    const Graph g = predict("bigbird", {{"window", "0"}, {"global", "0"}, {"random", "4"}}, 4000, 64, false);
    for (std::size_t i = 0; i < g.queries; ++i)
      for (const std::uint32_t* p = g.row_begin(i); p != g.row_end(i); ++p) ++hits[*p];
    // Each key: (4000 * 4 + 63 window hits) / 64 ~ 251 expected; allow wide slack.
    for (std::size_t j = 0; j < 64; ++j) {
      CAPTURE(j);
      CHECK(hits[j] > 170);
      CHECK(hits[j] < 340);
    }
  }

  TEST_CASE("reformer: identical query and key share a bucket; clustered data gets high recall") {
    const std::size_t d = 16, n = 96;
    const Matrix<float> centres = random_matrix<float>(4, d, 1.0, 77);
    const Clustered q = clustered(n, d, centres, 0.03, 1), k = clustered(n, d, centres, 0.03, 2);
    // Identical rows: query 5 == key 17 (scaled by 2, which normalisation removes exactly).
    Matrix<float> kk = k.points;
    for (std::size_t t = 0; t < d; ++t) kk(17, t) = 2.0f * q.points(5, t);
    for (const char* seed : {"0", "1", "2", "3"})
      for (const char* buckets : {"2", "8", "32"}) {
        CAPTURE(seed);
        CAPTURE(buckets);
        const auto p = make_predictor("reformer", {{"seed", seed}, {"buckets", buckets}, {"rounds", "1"}});
        const Graph g = p->predict(q.points.view(), kk.view(), 0, 0, false);
        CHECK(g.contains(5, 17));
      }
    const auto p = make_predictor("reformer", {});  // 8 buckets, 2 rounds
    const Graph g = p->predict(q.points.view(), k.points.view(), 0, 0, false);
    const PairSet gold = same_cluster(q.label, k.label), got = pairs_of(g);
    const double density = static_cast<double>(got.size()) / static_cast<double>(n * n);
    const double r = recall(got, gold);
    CAPTURE(density);
    CHECK(r > 0.95);
    CHECK(r > density + 0.3);  // a random graph of the same size has recall ~ density
    CHECK(density < 0.75);
    // Deterministic per seed, differs across seeds and heads.
    CHECK(same_graph(g, make_predictor("reformer", {})->predict(q.points.view(), k.points.view(), 0, 0, false)));
    const Matrix<float> a = random_matrix<float>(64, 8, 1.0, 3), b = random_matrix<float>(64, 8, 1.0, 4);
    const Graph g0 = make_predictor("reformer", {{"seed", "0"}})->predict(a.view(), b.view(), 0, 0, false);
    CHECK_FALSE(same_graph(g0, make_predictor("reformer", {{"seed", "1"}})->predict(a.view(), b.view(), 0, 0, false)));
    CHECK_FALSE(same_graph(g0, make_predictor("reformer", {{"seed", "0"}})->predict(a.view(), b.view(), 0, 1, false)));
    // One round: a partition into at most B buckets, so two query rows are equal or disjoint.
    {
      const Graph one = make_predictor("reformer", {{"rounds", "1"}, {"buckets", "6"}})->predict(a.view(), b.view(), 2, 3, false);
      std::set<std::vector<std::uint32_t>> rows;
      std::size_t keys = 0;
      for (std::size_t i = 0; i < one.queries; ++i) rows.emplace(one.row_begin(i), one.row_end(i));
      for (const auto& row : rows) keys += row.size();
      CHECK(rows.size() <= 6);
      CHECK(rows.size() >= 2);
      CHECK(keys <= 64);  // disjoint rows: every key in one bucket only
    }
    // More rounds only add edges (each round's rotation is independent of the count).
    const Graph r1 = make_predictor("reformer", {{"rounds", "1"}})->predict(a.view(), b.view(), 0, 0, false);
    const Graph r3 = make_predictor("reformer", {{"rounds", "3"}})->predict(a.view(), b.view(), 0, 0, false);
    const PairSet s1 = pairs_of(r1), s3 = pairs_of(r3);
    CHECK(std::includes(s3.begin(), s3.end(), s1.begin(), s1.end()));
    CHECK(s3.size() > s1.size());
  }

  TEST_CASE("routing: fit, predict, save and reload") {
    const std::size_t d = 8;
    Capture cap = Capture::make(1, 2, d, {40, 24});
    const Matrix<float> centres = random_matrix<float>(4, d, 1.0, 99);
    for (std::size_t head = 0; head < 2; ++head)
      for (std::size_t s = 0; s < 2; ++s) {
        const std::size_t rows = cap.lengths[s];
        const Clustered q = clustered(rows, d, centres, 0.05, 10 + 4 * head + s),
                        k = clustered(rows, d, centres, 0.05, 20 + 4 * head + s);
        auto qv = cap.queries_of(0, head, s);
        auto kv = cap.keys_of(0, head, s);
        for (std::size_t i = 0; i < rows; ++i)
          for (std::size_t t = 0; t < d; ++t) qv(i, t) = q.points(i, t), kv(i, t) = k.points(i, t);
      }
    auto p = make_predictor("routing", {{"clusters", "4"}, {"seed", "3"}});
    CHECK(p->learned());
    CHECK(error_of([&] { p->predict(cap.queries_of(0, 0, 0), cap.keys_of(0, 0, 0), 0, 0, false); })
              .find("not fitted") != std::string::npos);
    CHECK(error_of([&] { (void)p->to_json(); }).find("not fitted") != std::string::npos);
    p->fit(cap, {});

    // Fresh data of the same clusters: recall of the same-cluster pairs is high.
    const Clustered q = clustered(40, d, centres, 0.05, 500), k = clustered(40, d, centres, 0.05, 501);
    const Graph g = p->predict(q.points.view(), k.points.view(), 0, 1, false);
    const PairSet got = pairs_of(g), gold = same_cluster(q.label, k.label);
    CHECK(recall(got, gold) > 0.9);
    CHECK(got.size() < 40 * 40 / 2);

    // Each query is chosen by at most c centroids; each centroid takes ceil(n/c) queries.
    const Graph g2 = p->predict(q.points.view(), k.points.view(), 0, 0, true);
    g2.validate();

    // Save, reload: identical graphs on both heads; the file names the centroids.
    const std::string json = p->to_json();
    const nlohmann::json parsed = nlohmann::json::parse(json);
    CHECK(parsed["method"] == "routing");
    CHECK(parsed["parameters"]["centroids"].size() == 1);
    CHECK(parsed["parameters"]["centroids"][0].size() == 2);
    CHECK(parsed["parameters"]["centroids"][0][0].size() == 4);
    CHECK(parsed["parameters"]["centroids"][0][0][0].size() == d);
    const auto back = load_predictor(json, "routing.json");
    CHECK(back->method() == "routing");
    for (std::size_t head = 0; head < 2; ++head)
      for (bool causal : {false, true}) {
        const Matrix<float> a = random_matrix<float>(33, d, 1.0, 40 + head), b = random_matrix<float>(29, d, 1.0, 50);
        CHECK(same_graph(p->predict(a.view(), b.view(), 0, head, causal), back->predict(a.view(), b.view(), 0, head, causal)));
      }
    CHECK(back->to_json() == json);

    // Fitting is deterministic for a seed.
    auto again = make_predictor("routing", {{"clusters", "4"}, {"seed", "3"}});
    again->fit(cap, {});
    CHECK(again->to_json() == json);

    // Out of range head, wrong head_dim.
    CHECK(error_of([&] { p->predict(q.points.view(), k.points.view(), 0, 2, false); }).find("head 2") != std::string::npos);
    const Matrix<float> wide = random_matrix<float>(5, d + 1, 1.0, 1);
    CHECK(error_of([&] { p->predict(wide.view(), wide.view(), 0, 0, false); }).find("columns") != std::string::npos);
  }

  TEST_CASE("routing: every centroid takes ceil(n/c) queries and ceil(m/c) keys") {
    Capture cap = Capture::make(1, 1, 4, {30});
    const Matrix<float> r = random_matrix<float>(30, 4, 1.0, 8);
    std::copy(r.data.begin(), r.data.end(), cap.queries.begin());
    const Matrix<float> r2 = random_matrix<float>(30, 4, 1.0, 9);
    std::copy(r2.data.begin(), r2.data.end(), cap.keys.begin());
    for (const char* c : {"1", "3", "7"}) {
      CAPTURE(c);
      auto p = make_predictor("routing", {{"clusters", c}, {"iterations", "5"}});
      p->fit(cap, {});
      const Graph g = p->predict(cap.queries_of(0, 0, 0), cap.keys_of(0, 0, 0), 0, 0, false);
      g.validate();
      if (std::string(c) == "1") CHECK(g.edges() == 30 * 30);  // one centroid takes everything
      // Brute force from the saved centroids: centroid z links its top-t
      // normalised queries with its top-t normalised keys (ties: lower index).
      const nlohmann::json cents = nlohmann::json::parse(p->to_json())["parameters"]["centroids"][0][0];
      auto top = [&](MatrixView<const float> v, const nlohmann::json& mu) {
        std::vector<std::pair<double, std::size_t>> scored;
        for (std::size_t i = 0; i < v.rows; ++i) {
          double nn = 0.0, s = 0.0;
          for (std::size_t t = 0; t < v.cols; ++t) nn += double(v(i, t)) * v(i, t);
          for (std::size_t t = 0; t < v.cols; ++t) s += double(v(i, t)) / std::sqrt(nn) * double(float(mu[t].get<double>()));
          scored.emplace_back(-s, i);
        }
        std::sort(scored.begin(), scored.end());
        std::vector<std::size_t> out;
        for (std::size_t t = 0; t < (v.rows + cents.size() - 1) / cents.size(); ++t) out.push_back(scored[t].second);
        return out;
      };
      PairSet expect;
      for (const nlohmann::json& mu : cents)
        for (std::size_t i : top(cap.queries_of(0, 0, 0), mu))
          for (std::size_t j : top(cap.keys_of(0, 0, 0), mu)) expect.emplace(i, j);
      CHECK(pairs_of(g) == expect);
      // An upper bound: every centroid links ceil(n/c) queries with ceil(m/c) keys.
      const std::size_t cc = std::stoul(c), t = (30 + cc - 1) / cc;
      CHECK(g.edges() <= cc * t * t);
      CHECK(g.edges() >= t * t);
    }
  }

  TEST_CASE("extra_window and extra_global are added to every pattern method") {
    const Matrix<float> q = random_matrix<float>(25, 6, 1.0, 1), k = random_matrix<float>(25, 6, 1.0, 2);
    Capture cap = Capture::make(1, 1, 6, {25});
    std::copy(q.data.begin(), q.data.end(), cap.queries.begin());
    std::copy(k.data.begin(), k.data.end(), cap.keys.begin());
    for (const char* m : {"window", "global", "longformer", "bigbird", "reformer", "routing"})
      for (bool causal : {false, true}) {
        CAPTURE(m);
        CAPTURE(causal);
        const PredictorSettings plain_settings = {{"seed", "0"}};
        PredictorSettings plain = std::string(m) == "window" || std::string(m) == "global" ||
                                          std::string(m) == "longformer"
                                      ? PredictorSettings{}
                                      : plain_settings;
        PredictorSettings extra = plain;
        extra["extra_window"] = "1";
        extra["extra_global"] = "2";
        auto a = make_predictor(m, plain), b = make_predictor(m, extra);
        a->fit(cap, {});
        b->fit(cap, {});
        const PairSet pa = pairs_of(a->predict(q.view(), k.view(), 0, 0, causal));
        const PairSet pb = pairs_of(b->predict(q.view(), k.view(), 0, 0, causal));
        PairSet expect = pa;
        const PairSet lg = brute(25, 25, [&](long i, long j) { return in_window(i, j, 1, causal) || in_global(i, j, 2); });
        expect.insert(lg.begin(), lg.end());
        CHECK(pb == expect);
      }
    // global + extra_window = longformer.
    CHECK(pairs_of(make_predictor("global", {{"global", "3"}, {"extra_window", "2"}})->predict(q.view(), k.view(), 0, 0, true)) ==
          pairs_of(make_predictor("longformer", {{"global", "3"}, {"window", "2"}})->predict(q.view(), k.view(), 0, 0, true)));
  }

  TEST_CASE("bad settings throw entgraph::Error naming the key") {
    struct Bad {
      const char* method;
      PredictorSettings settings;
      const char* key;
    };
    const std::vector<Bad> bad = {
        {"window", {{"windw", "3"}}, "'windw'"},
        {"window", {{"window", "-1"}}, "'window'"},
        {"window", {{"window", "3.5"}}, "'window'"},
        {"window", {{"window", "abc"}}, "'window'"},
        {"window", {{"window", ""}}, "'window'"},
        {"window", {{"global", "2"}}, "'global'"},  // not a setting of window
        {"window", {{"extra_window", "-2"}}, "'extra_window'"},
        {"global", {{"global", "-3"}}, "'global'"},
        {"global", {{"window", "1"}}, "'window'"},
        {"global", {{"extra_global", "x"}}, "'extra_global'"},
        {"longformer", {{"window", "-1"}}, "'window'"},
        {"longformer", {{"global", "two"}}, "'global'"},
        {"longformer", {{"random", "2"}}, "'random'"},
        {"bigbird", {{"random", "-1"}}, "'random'"},
        {"bigbird", {{"seed", "-1"}}, "'seed'"},
        {"bigbird", {{"seed", "1e3"}}, "'seed'"},
        {"bigbird", {{"window", "x"}}, "'window'"},
        {"reformer", {{"buckets", "7"}}, "'buckets'"},
        {"reformer", {{"buckets", "0"}}, "'buckets'"},
        {"reformer", {{"buckets", "-2"}}, "'buckets'"},
        {"reformer", {{"buckets", "eight"}}, "'buckets'"},
        {"reformer", {{"rounds", "0"}}, "'rounds'"},
        {"reformer", {{"round", "2"}}, "'round'"},
        {"routing", {{"clusters", "0"}}, "'clusters'"},
        {"routing", {{"clusters", "4x"}}, "'clusters'"},
        {"routing", {{"iterations", "-1"}}, "'iterations'"},
        {"routing", {{"cluster", "4"}}, "'cluster'"},
        {"routing", {{"seed", "abc"}}, "'seed'"},
    };
    for (const Bad& b : bad) {
      CAPTURE(b.method);
      CAPTURE(b.key);
      const std::string message = error_of([&] { make_predictor(b.method, b.settings); });
      CAPTURE(message);
      CHECK(message.find(b.key) != std::string::npos);
      CHECK(message.find(b.method) != std::string::npos);
    }
    // Edge values that are fine.
    CHECK_NOTHROW(make_predictor("window", {{"window", "0"}}));
    CHECK_NOTHROW(make_predictor("reformer", {{"buckets", "2"}, {"rounds", "1"}}));
    CHECK_NOTHROW(make_predictor("routing", {{"clusters", "1"}, {"iterations", "0"}}));
  }

  TEST_CASE("fixed patterns and reformer round-trip through to_json; load_predictor rejects malformed files") {
    const Matrix<float> q = random_matrix<float>(20, 4, 1.0, 1), k = random_matrix<float>(20, 4, 1.0, 2);
    for (const char* m : {"window", "global", "longformer", "bigbird", "reformer"}) {
      CAPTURE(m);
      const PredictorSettings s = std::string(m) == "bigbird" || std::string(m) == "reformer"
                                      ? PredictorSettings{{"seed", "9"}, {"extra_window", "1"}}
                                      : PredictorSettings{{"extra_window", "1"}};
      const auto p = make_predictor(m, s);
      const auto back = load_predictor(p->to_json());
      CHECK(back->method() == m);
      CHECK(back->settings() == s);
      CHECK(same_graph(p->predict(q.view(), k.view(), 1, 2, false), back->predict(q.view(), k.view(), 1, 2, false)));
      // A fixed pattern has no parameters.
      nlohmann::json j = nlohmann::json::parse(p->to_json());
      j["parameters"]["centroids"] = nlohmann::json::array();
      CHECK(error_of([&] { load_predictor(j.dump()); }).find("parameters") != std::string::npos);
      // Bad settings inside a file.
      j = nlohmann::json::parse(p->to_json());
      j["settings"]["bogus"] = "1";
      CHECK(error_of([&] { load_predictor(j.dump()); }).find("'bogus'") != std::string::npos);
    }

    // Routing files.
    Capture cap = Capture::make(2, 1, 3, {12});
    const Matrix<float> r = random_matrix<float>(24, 3, 1.0, 5);
    std::copy(r.data.begin(), r.data.end(), cap.queries.begin());
    std::copy(r.data.rbegin(), r.data.rend(), cap.keys.begin());
    auto p = make_predictor("routing", {{"clusters", "2"}});
    p->fit(cap, {});
    const nlohmann::json good = nlohmann::json::parse(p->to_json());
    CHECK_NOTHROW(load_predictor(good.dump()));
    auto broken = [&](auto edit) {
      nlohmann::json j = good;
      edit(j);
      return error_of([&] { load_predictor(j.dump(), "bad.json"); });
    };
    CHECK(broken([](nlohmann::json& j) { j.erase("parameters"); }).find("centroids") != std::string::npos);
    CHECK(broken([](nlohmann::json& j) { j["parameters"] = nlohmann::json::object(); }).find("centroids") !=
          std::string::npos);
    CHECK(broken([](nlohmann::json& j) { j["parameters"]["centroids"] = nlohmann::json::array(); }).find("centroids") !=
          std::string::npos);
    CHECK(broken([](nlohmann::json& j) { j["parameters"]["centroids"] = 3; }).find("centroids") != std::string::npos);
    CHECK(broken([](nlohmann::json& j) { j["parameters"]["extra"] = 1; })
              .find("routing: parameters: unknown key \"extra\" (routing reads centroids)") != std::string::npos);
    // Wrong number of centroids for the clusters setting.
    CHECK(broken([](nlohmann::json& j) { j["settings"]["clusters"] = "3"; }).find("clusters = 3") != std::string::npos);
    CHECK(broken([](nlohmann::json& j) { j["parameters"]["centroids"][0][0].erase(1); }).find("centroids[0][0]") !=
          std::string::npos);
    // Inconsistent head_dim, heads per layer, non-numbers.
    CHECK(broken([](nlohmann::json& j) { j["parameters"]["centroids"][1][0][1].push_back(0.5); })
              .find("centroids[1][0][1]") != std::string::npos);
    CHECK(broken([](nlohmann::json& j) { j["parameters"]["centroids"][1].push_back(j["parameters"]["centroids"][1][0]); })
              .find("centroids[1]") != std::string::npos);
    CHECK(broken([](nlohmann::json& j) { j["parameters"]["centroids"][0][0][0][0] = "x"; }).find("centroids[0][0][0]") !=
          std::string::npos);
    CHECK(broken([](nlohmann::json& j) { j["parameters"]["centroids"][0][0][0] = nlohmann::json::array(); })
              .find("centroids[0][0][0]") != std::string::npos);
    CHECK(broken([](nlohmann::json& j) { j["parameters"]["centroids"][0][0][0][0] = nullptr; })
              .find("centroids[0][0][0]") != std::string::npos);
    // A loaded file with a smaller head_dim is refused at predict time.
    const auto loaded = load_predictor(good.dump());
    CHECK(error_of([&] { loaded->predict(q.view(), k.view(), 0, 0, false); }).find("columns") != std::string::npos);
    CHECK(error_of([&] { loaded->predict(r.view(), r.view(), 2, 0, false); }).find("layer 2") != std::string::npos);
  }
}
