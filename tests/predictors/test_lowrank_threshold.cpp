// Tests of the lowrank-threshold predictor (closed-form low-rank score
// estimate + each row's own entmax threshold) and of the Jacobi
// eigen-decomposition its fit uses.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "clustered_capture.hpp"
#include "predictors/predictor_support.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "entgraph/runtime.hpp"
#include "training/symmetric_eigen.hpp"

namespace entgraph::test {
namespace {

// Random queries and keys with no structure: only the full rank recovers the scores.
Capture random_capture(std::size_t dim, bool causal) {
  Capture c = Capture::make(1, 2, dim, {40, 40});
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  for (float& x : c.queries) x = normal(rng);
  for (float& x : c.keys) x = normal(rng);
  for (std::size_t h = 0; h < 2; ++h) c.head(0, h).causal = causal;
  c.head(0, 1).alpha = 2.0;  // sparsemax in the second head
  return c;
}

void check_error(const std::function<void()>& fn, const std::string& word) {
  try {
    fn();
    FAIL("no entgraph::Error thrown");
  } catch (const Error& e) {
    CAPTURE(e.what());
    CHECK(std::string(e.what()).find(word) != std::string::npos);
  }
}

}  // namespace

TEST_SUITE("training") {
  TEST_CASE("symmetric_eigen: A V = V diag(values), V orthonormal, values descending") {
    std::mt19937_64 rng(3);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (std::size_t d : {1u, 2u, 5u, 32u}) {
      std::vector<double> b(d * d), a(d * d, 0.0);
      for (double& x : b) x = normal(rng);
      for (std::size_t x = 0; x < d; ++x)
        for (std::size_t y = 0; y < d; ++y)
          for (std::size_t z = 0; z < d; ++z) a[x * d + y] += b[x * d + z] * b[y * d + z];
      a[0] = a[0] + 1.0;
      const detail::SymmetricEigen e = detail::symmetric_eigen(a, d);
      for (std::size_t c = 0; c + 1 < d; ++c) CHECK(e.values[c] >= e.values[c + 1]);
      double worst = 0.0, orth = 0.0;
      for (std::size_t c = 0; c < d; ++c)
        for (std::size_t x = 0; x < d; ++x) {
          double av = 0.0;
          for (std::size_t y = 0; y < d; ++y) av += a[x * d + y] * e.vectors[y * d + c];
          worst = std::max(worst, std::abs(av - e.values[c] * e.vectors[x * d + c]));
          double dot = 0.0;
          for (std::size_t y = 0; y < d; ++y) dot += e.vectors[y * d + c] * e.vectors[y * d + x];
          orth = std::max(orth, std::abs(dot - (c == x ? 1.0 : 0.0)));
        }
      CAPTURE(d);
      CHECK(worst <= 1e-10 * (1.0 + std::abs(e.values[0])));
      CHECK(orth <= 1e-12);
    }
  }
}

TEST_SUITE("predictors") {
  TEST_CASE("lowrank-threshold: at full rank and margin 0 it predicts the gold graph (entmax15 and sparsemax)") {
    for (bool causal : {false, true}) {
      const Capture c = random_capture(6, causal);
      for (const char* r : {"6", "0"}) {  // r = 0: head_dim
        auto p = make_predictor("lowrank-threshold", {{"r", r}, {"bits", "0"}});
        p->fit(c, {});
        const GraphMetrics m = evaluate_all(*p, c);
        CAPTURE(causal);
        CAPTURE(r);
        CHECK(m.recall() >= 0.999);
        CHECK(m.hits >= m.predicted - m.predicted / 500);  // and (almost) nothing else
      }
    }
  }

  TEST_CASE("lowrank-threshold: quantized estimates lose recall as bits fall, and agree on every instruction set") {
    const Capture c = random_capture(6, true);
    double last = 2.0;
    for (const char* bits : {"8", "6", "4", "2"}) {
      auto p = make_predictor("lowrank-threshold", {{"bits", bits}});
      p->fit(c, {});
      const GraphMetrics m = evaluate_all(*p, c);
      CAPTURE(bits);
      CHECK(m.recall() <= last + 0.02);  // fewer bits, no better (up to noise)
      if (std::string(bits) == "8") CHECK(m.recall() >= 0.97);
      if (std::string(bits) == "4") CHECK(m.recall() >= 0.75);
      last = m.recall();
    }
    // Integer codes make the estimate exact in any summation order.
    auto p = make_predictor("lowrank-threshold", {{"bits", "4"}});
    p->fit(c, {});
    const CpuIsa saved = cpu_isa();
    std::vector<Graph> graphs;
    for (const CpuIsa isa : available_cpu_isas()) {
      set_cpu_isa(isa);
      graphs.push_back(p->predict(c.queries_of(0, 0, 0), c.keys_of(0, 0, 0), 0, 0, true));
    }
    set_cpu_isa(saved);
    for (const Graph& g : graphs) {
      CHECK(g.offsets == graphs.front().offsets);
      CHECK(g.indices == graphs.front().indices);
    }
  }

  TEST_CASE("lowrank-threshold: a rank-r estimate finds clustered attention; the margin trades sparsity for recall") {
    const Capture train = clustered_capture(1, 2, 16, {64, 64, 64}, 3, true, 21);
    const Capture test = clustered_capture(1, 2, 16, {64, 64}, 3, true, 21);  // same directions, other tokens
    double last_sparsity = 2.0, last_recall = -1.0;
    for (const char* margin : {"-0.2", "0", "0.2"}) {
      auto p = make_predictor("lowrank-threshold", {{"r", "3"}, {"margin", margin}});
      p->fit(train, {});
      const GraphMetrics m = evaluate_all(*p, test);
      CAPTURE(margin);
      CHECK(m.sparsity() < last_sparsity);
      CHECK(m.recall() >= last_recall);
      if (std::string(margin) == "0") {
        CHECK(m.recall() >= 0.9);
        CHECK(std::abs(m.sparsity() - m.gold_sparsity()) <= 0.1);
      }
      last_sparsity = m.sparsity();
      last_recall = m.recall();
    }
  }

  TEST_CASE("lowrank-threshold: the fit is deterministic and its parameter file round-trips") {
    const Capture c = clustered_capture(2, 2, 8, {48, 48}, 4, false, 9);
    auto a = make_predictor("lowrank-threshold", {{"r", "4"}, {"margin", "0.05"}});
    auto b = make_predictor("lowrank-threshold", {{"r", "4"}, {"margin", "0.05"}});
    a->fit(c, {});
    b->fit(c, {});
    const std::string json = a->to_json();
    CHECK(json == b->to_json());
    auto loaded = load_predictor(json, "file");
    CHECK(loaded->to_json() == json);
    // r = 0 stores the head_dim it stands for, and checks it on loading.
    auto full = make_predictor("lowrank-threshold", {});
    full->fit(c, {});
    nlohmann::json file = nlohmann::json::parse(full->to_json());
    CHECK(file["parameters"]["r"] == 8);
    CHECK(load_predictor(file.dump())->to_json() == full->to_json());
    file["settings"]["r"] = "4";
    check_error([&] { load_predictor(file.dump()); }, "does not match the setting r = 4");
    for (std::size_t l = 0; l < 2; ++l)
      for (std::size_t h = 0; h < 2; ++h) {
        const Graph g1 = a->predict(c.queries_of(l, h, 1), c.keys_of(l, h, 1), l, h, false);
        const Graph g2 = loaded->predict(c.queries_of(l, h, 1), c.keys_of(l, h, 1), l, h, false);
        CHECK(g1.offsets == g2.offsets);
        CHECK(g1.indices == g2.indices);
      }
  }

  TEST_CASE("lowrank-threshold: on head_dim > 256 the default r is 256, and its file loads back") {
    // The r a file may hold and the setting's range end at 256; the default
    // (r = head_dim) used to write r = 260 here, which the loader refused.
    const Capture c = clustered_capture(1, 1, 260, {12}, 2, false);
    auto p = make_predictor("lowrank-threshold", {});
    p->fit(c, {});
    const std::string json = p->to_json();
    nlohmann::json file = nlohmann::json::parse(json);
    CHECK(file["parameters"]["r"] == 256);
    CHECK(file["parameters"]["wq"][0][0].size() == 260);
    CHECK(file["parameters"]["wq"][0][0][0].size() == 256);
    auto loaded = load_predictor(json, "wide.json");
    CHECK(loaded->to_json() == json);
    const Graph g1 = p->predict(c.queries_of(0, 0, 0), c.keys_of(0, 0, 0), 0, 0, false);
    const Graph g2 = loaded->predict(c.queries_of(0, 0, 0), c.keys_of(0, 0, 0), 0, 0, false);
    CHECK(g1.indices == g2.indices);
    CHECK(g1.edges() > 0);
    // The same file claiming r = 260 is refused, naming the limit.
    file["parameters"]["r"] = 260;
    check_error([&] { load_predictor(file.dump(), "wide.json"); }, "'r': expected an integer in [1, 256]");
  }

  TEST_CASE("lowrank-threshold: bad settings, files and calls are errors that name what is wrong") {
    check_error([] { make_predictor("lowrank-threshold", {{"rank", "4"}}); }, "unknown setting 'rank'");
    check_error([] { make_predictor("lowrank-threshold", {{"r", "-1"}}); }, "'r'");
    check_error([] { make_predictor("lowrank-threshold", {{"r", "257"}}); }, "'r'");
    check_error([] { make_predictor("lowrank-threshold", {{"bits", "1"}}); }, "'bits'");
    check_error([] { make_predictor("lowrank-threshold", {{"bits", "9"}}); }, "'bits'");
    check_error([] { make_predictor("lowrank-threshold", {{"margin", "nan"}}); }, "'margin'");
    const Capture c = clustered_capture(1, 1, 8, {16}, 2, true);
    auto p = make_predictor("lowrank-threshold", {{"r", "2"}});
    check_error([&] { p->predict(c.queries_of(0, 0, 0), c.keys_of(0, 0, 0), 0, 0, true); }, "before fit");
    p->fit(c, {});
    check_error([&] { p->predict(c.queries_of(0, 0, 0), c.keys_of(0, 0, 0), 0, 1, true); }, "out of range");
    for (const char* which : {"q", "k"}) {  // a NaN or infinity has no integer code
      Capture bad = c;
      (which[0] == 'q' ? bad.queries : bad.keys)[3 * 8 + 5] = std::numeric_limits<float>::quiet_NaN();
      check_error([&] { p->predict(bad.queries_of(0, 0, 0), bad.keys_of(0, 0, 0), 0, 0, true); },
                  std::string(which) + " has a NaN or infinite value (row 3, column 5)");
      (which[0] == 'q' ? bad.queries : bad.keys)[3 * 8 + 5] = std::numeric_limits<float>::infinity();
      check_error([&] { p->predict(bad.queries_of(0, 0, 0), bad.keys_of(0, 0, 0), 0, 0, true); }, "infinite");
    }
    nlohmann::json file = nlohmann::json::parse(p->to_json());
    REQUIRE(file["parameters"]["alpha"][0][0] == 1.5);
    file["parameters"]["alpha"][0][0] = 0.5;
    check_error([&] { load_predictor(file.dump()); }, "alpha[0][0]");
  }

  TEST_CASE("lowrank-threshold: finite q and k too large to estimate are errors; tiny and huge ones that fit are not") {
    const Capture c = clustered_capture(1, 1, 8, {24}, 2, true);
    for (const char* bits : {"4", "8", "0"}) {
      CAPTURE(bits);
      auto p = make_predictor("lowrank-threshold", {{"bits", bits}});
      p->fit(c, {});
      auto predict_scaled = [&](float q_factor, float k_factor) {
        Capture s = c;
        for (float& x : s.queries) x *= q_factor;
        for (float& x : s.keys) x *= k_factor;
        return p->predict(s.queries_of(0, 0, 0), s.keys_of(0, 0, 0), 0, 0, true);
      };
      // Entries near float's largest: their projections overflow float32.
      Capture huge = c;
      for (std::size_t col = 0; col < 8; ++col) huge.keys[5 * 8 + col] = 3.0e38f;
      check_error([&] { p->predict(huge.queries_of(0, 0, 0), huge.keys_of(0, 0, 0), 0, 0, true); },
                  "k's projection overflows float32 at row 5");
      // Finite projections whose products would overflow: |q|, |k| ~ 1e20.
      check_error([&] { predict_scaled(1e20f, 1e20f); }, "estimated scores of q and k may overflow float32");
      // Products of order 1 from a subnormal-scale side and a huge side: a
      // valid graph, every row with at least its best key.
      for (const auto& [qf, kf] : {std::pair{1e-36f, 1e36f}, std::pair{1e30f, 1e-30f}}) {
        const Graph g = predict_scaled(qf, kf);
        g.validate("predict");
        for (std::size_t i = 0; i < g.queries; ++i) CHECK(g.degree(i) >= 1);
      }
    }
  }

  TEST_CASE("lowrank-threshold: a softmax head (alpha 1) predicts every allowed key") {
    Capture c = clustered_capture(1, 1, 8, {20}, 2, true);
    c.head(0, 0).alpha = 1.0;
    auto p = make_predictor("lowrank-threshold", {{"r", "2"}});
    p->fit(c, {});
    const Graph g = p->predict(c.queries_of(0, 0, 0), c.keys_of(0, 0, 0), 0, 0, true);
    CHECK(g.edges() == 20u * 21u / 2u);
  }
}

}  // namespace entgraph::test
