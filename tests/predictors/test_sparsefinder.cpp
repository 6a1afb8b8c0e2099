// Tests of the Sparsefinder predictors: sparsefinder-distance,
// sparsefinder-quantization and sparsefinder-kmeans.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "clustered_capture.hpp"
#include "predictors/predictor_support.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/model.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "entgraph/training/projection.hpp"
#include "predictors/parameter_json.hpp"
#include "support.hpp"

namespace entgraph::test {
namespace {



// The projection of layer 0, head 0 as saved in a parameter file's "parameters".
Projection saved_projection(const nlohmann::json& parameters, std::size_t dim, std::size_t rank) {
  Projection pr;
  pr.dim = dim;
  pr.rank = rank;
  for (const auto& row : parameters["wq"][0][0])
    for (const auto& x : row) pr.wq.push_back(x.get<float>());
  for (const auto& row : parameters["wk"][0][0])
    for (const auto& x : row) pr.wk.push_back(x.get<float>());
  return pr;
}

const std::vector<std::string> kLearned = {"sparsefinder-distance", "sparsefinder-quantization",
                                           "sparsefinder-kmeans"};

bool same_graph(const Graph& a, const Graph& b) {
  return a.queries == b.queries && a.keys == b.keys && a.offsets == b.offsets && a.indices == b.indices;
}

void check_error(const std::function<void()>& fn, const std::vector<std::string>& words) {
  try {
    fn();
    FAIL("no entgraph::Error thrown");
  } catch (const Error& e) {
    for (const std::string& w : words) {
      CAPTURE(e.what());
      CHECK(std::string(e.what()).find(w) != std::string::npos);
    }
  }
}

}  // namespace

TEST_SUITE("predictors") {

TEST_CASE("sparsefinder methods are registered and learned") {
  const std::vector<std::string> all = predictor_methods();
  for (const std::string& m : kLearned) {
    CAPTURE(m);
    CHECK(std::find(all.begin(), all.end(), m) != all.end());
    auto p = make_predictor(m);
    CHECK(p->method() == m);
    CHECK(p->learned());
  }
}

TEST_CASE("sparsefinder predictors beat a random graph of equal sparsity") {
  for (bool causal : {false, true}) {
    const Capture c = clustered_capture(1, 2, 16, {64, 64, 48, 64}, 4, causal);
    const std::vector<PredictorSettings> settings = {
        {{"epochs", "2"}, {"t", "1.0"}}, {{"epochs", "2"}, {"buckets", "4"}}, {{"epochs", "2"}, {"clusters", "4"}}};
    for (std::size_t i = 0; i < kLearned.size(); ++i) {
      CAPTURE(causal);
      CAPTURE(kLearned[i]);
      auto p = make_predictor(kLearned[i], settings[i]);
      p->fit(c, {});
      GraphMetrics m = evaluate_all(*p, c);
      if (i == 0) {  // the distance threshold is swept (0.5..5): keep the best margin over random
        const std::string json = p->to_json();
        for (const char* t : {"0.5", "2", "3", "4", "5"}) {
          nlohmann::json j = nlohmann::json::parse(json);
          j["settings"]["t"] = t;
          const GraphMetrics mt = evaluate_all(*load_predictor(j.dump()), c);
          if (mt.recall() - (1 - mt.sparsity()) > m.recall() - (1 - m.sparsity())) m = mt;
        }
      }
      const std::string label = kLearned[i] + (causal ? " causal" : "");
      MESSAGE(label << ": recall " << m.recall() << ", sparsity "
                          << m.sparsity() << " (gold sparsity " << m.gold_sparsity() << ")");
      CHECK(m.sparsity() > 0.2);
      // A random graph of sparsity s has expected recall 1 - s.
      CHECK(m.recall() > (1.0 - m.sparsity()) + 0.25);
    }
  }
}

TEST_CASE("sparsefinder-distance equals the brute-force threshold graph") {
  const Capture c = clustered_capture(1, 1, 16, {80}, 4, false);
  std::size_t edges = 0;
  for (const std::string t : {"0.5", "2.0", "5.0"}) {
    auto p = make_predictor("sparsefinder-distance", {{"t", t}, {"seed", "4"}});
    p->fit(c, {});
    const auto j = nlohmann::json::parse(p->to_json())["parameters"];
    const Projection pr = saved_projection(j, 16, 4);
    const std::vector<float> qp = pr.project_queries(c.queries_of(0, 0, 0)), kp = pr.project_keys(c.keys_of(0, 0, 0));
    for (bool causal : {false, true}) {
      CAPTURE(t);
      CAPTURE(causal);
      std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
      const double tt = std::stod(t);
      for (std::uint32_t i = 0; i < 80; ++i)
        for (std::uint32_t k = 0; k < (causal ? i + 1 : 80u); ++k) {
          double d2 = 0;
          for (std::size_t x = 0; x < 4; ++x) {
            const double v = static_cast<double>(qp[i * 4 + x]) - kp[k * 4 + x];
            d2 += v * v;
          }
          if (d2 <= tt * tt) pairs.emplace_back(i, k);
        }
      const Graph want = Graph::from_pairs(80, 80, pairs);
      const Graph got = p->predict(c.queries_of(0, 0, 0), c.keys_of(0, 0, 0), 0, 0, causal);
      CHECK(same_graph(got, want));
      CHECK(got.edges() < 80 * 80);
      edges += want.edges();
    }
  }
  CHECK(edges > 0);
}

TEST_CASE("sparsefinder-quantization bins are balanced on the training capture") {
  const Capture c = clustered_capture(1, 1, 16, {128, 128}, 4, false);
  auto p = make_predictor("sparsefinder-quantization", {{"buckets", "4"}, {"seed", "1"}});
  p->fit(c, {});
  const auto j = nlohmann::json::parse(p->to_json())["parameters"];
  REQUIRE(j["edges"][0][0].size() == 4);
  REQUIRE(j["edges"][0][0][0].size() == 3);
  const Projection pr = saved_projection(j, 16, 4);
  std::vector<std::vector<int>> counts(4, std::vector<int>(4, 0));
  for (std::size_t s = 0; s < 2; ++s)
    for (const auto& pts : {pr.project_queries(c.queries_of(0, 0, s)), pr.project_keys(c.keys_of(0, 0, s))})
      for (std::size_t i = 0; i < pts.size(); ++i) {
        const auto& e = j["edges"][0][0][i % 4];
        int bin = 0;
        for (const auto& x : e)
          if (x.get<float>() <= pts[i]) ++bin;
        ++counts[i % 4][bin];
      }
  for (const auto& coord : counts)
    for (int n : coord) CHECK(std::abs(n - 128) <= 2);  // 512 points per coordinate, 4 bins
}

TEST_CASE("parameter files write each float as a short decimal that reads back to it exactly") {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values = {0.0f, -0.0f, 0.1f, 1.0f / 3.0f, 16777217.0f, 3.4028235e38f, -1.17549435e-38f, 1e-45f,
                               0.07193161f};
  for (int i = 0; i < 2000; ++i) values.push_back(normal(rng) * std::pow(10.0f, static_cast<float>(i % 13 - 6)));
  const std::string text = detail::write_matrix(values.data(), 1, values.size()).dump();
  const nlohmann::json back = nlohmann::json::parse(text);
  for (std::size_t j = 0; j < values.size(); ++j) {
    CAPTURE(values[j]);
    const float read = static_cast<float>(back[0][j].get<double>());  // the readers' path
    CHECK(std::memcmp(&read, &values[j], sizeof read) == 0);
  }
  // At most 9 significant digits each, as printed (json's printer does not
  // always print a double shortest: 0.07193161 would come out as 0.07193161000000001).
  for (std::size_t j = 0; j < values.size(); ++j) {
    CAPTURE(values[j]);
    CHECK(detail::dumped_digits(back[0][j].get<double>()) <= 9);
  }
}

TEST_CASE("sparsefinder parameters round-trip exactly") {
  const Capture c = clustered_capture(2, 2, 8, {50, 30}, 3, true);
  const std::vector<PredictorSettings> settings = {
      {{"t", "1.5"}, {"r", "3"}, {"seed", "9"}},
      {{"buckets", "5"}, {"r", "4"}, {"extra_window", "2"}},
      {{"clusters", "6"}, {"top", "2"}, {"restarts", "2"}, {"iterations", "7"}}};
  for (std::size_t i = 0; i < kLearned.size(); ++i) {
    CAPTURE(kLearned[i]);
    auto p = make_predictor(kLearned[i], settings[i]);
    // An unfitted predictor saves and loads, and refuses to predict.
    auto blank = load_predictor(p->to_json());
    check_error([&] { blank->predict(c.queries_of(0, 0, 0), c.keys_of(0, 0, 0), 0, 0, true); }, {"before fit"});
    FitOptions fo;
    fo.seed = 5;
    p->fit(c, fo);
    const std::string text = p->to_json();
    auto q = load_predictor(text, "saved.json");
    CHECK(q->method() == kLearned[i]);
    CHECK(q->settings() == p->settings());
    CHECK(q->to_json() == text);
    for (std::size_t l = 0; l < 2; ++l)
      for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t s = 0; s < 2; ++s) {
          const Graph a = p->predict(c.queries_of(l, h, s), c.keys_of(l, h, s), l, h, true);
          const Graph b = q->predict(c.queries_of(l, h, s), c.keys_of(l, h, s), l, h, true);
          CHECK(same_graph(a, b));
        }
    // Fitting again with the same settings and seed gives the same file.
    auto again = make_predictor(kLearned[i], settings[i]);
    again->fit(c, fo);
    CHECK(again->to_json() == text);
    // Predict checks its arguments.
    const Matrix<float> wrong = random_matrix<float>(5, 7);
    check_error([&] { q->predict(wrong.view(), wrong.view(), 0, 0, false); }, {kLearned[i], "head_dim"});
    check_error([&] { q->predict(c.queries_of(0, 0, 0), c.keys_of(0, 0, 0), 2, 0, false); }, {"layer 2"});
  }
}

TEST_CASE("sparsefinder settings are checked") {
  check_error([] { make_predictor("sparsefinder-distance", {{"r", "0"}}); }, {"sparsefinder-distance", "'r'"});
  check_error([] { make_predictor("sparsefinder-distance", {{"t", "-1"}}); }, {"'t'"});
  check_error([] { make_predictor("sparsefinder-distance", {{"lr", "fast"}}); }, {"'lr'"});
  check_error([] { make_predictor("sparsefinder-distance", {{"buckets", "4"}}); }, {"unknown setting 'buckets'"});
  check_error([] { make_predictor("sparsefinder-quantization", {{"buckets", "0"}}); }, {"'buckets'"});
  check_error([] { make_predictor("sparsefinder-quantization", {{"epochs", "-1"}}); }, {"'epochs'"});
  check_error([] { make_predictor("sparsefinder-kmeans", {{"clusters", "x"}}); }, {"'clusters'"});
  check_error([] { make_predictor("sparsefinder-kmeans", {{"clusters", "4"}, {"top", "5"}}); }, {"'top'"});
  check_error([] { make_predictor("sparsefinder-kmeans", {{"restarts", "0"}}); }, {"'restarts'"});
  check_error([] { make_predictor("sparsefinder-kmeans", {{"margin", "nan"}}); }, {"'margin'"});
  check_error([] { make_predictor("sparsefinder-kmeans", {{"batch", "0"}}); }, {"'batch'"});
  check_error([] { make_predictor("sparsefinder-kmeans", {{"negatives", "0"}}); }, {"'negatives'"});
  check_error([] { make_predictor("sparsefinder-kmeans", {{"seed", "-3"}}); }, {"'seed'"});
  check_error([] { make_predictor("sparsefinder-kmeans", {{"t", "1"}}); }, {"unknown setting 't'"});
}

TEST_CASE("malformed sparsefinder parameter files are rejected naming the field") {
  const Capture c = clustered_capture(1, 2, 4, {20}, 2, false);
  auto p = make_predictor("sparsefinder-kmeans", {{"clusters", "3"}, {"r", "2"}});
  p->fit(c, {});
  const nlohmann::json good = nlohmann::json::parse(p->to_json());
  auto broken = [&](const std::function<void(nlohmann::json&)>& edit, const std::vector<std::string>& words) {
    nlohmann::json j = good;
    edit(j);
    check_error([&] { load_predictor(j.dump(), "bad.json"); }, words);
  };
  broken([](nlohmann::json& j) { j["parameters"].erase("wq"); }, {"'wq'", "missing"});
  broken([](nlohmann::json& j) { j["parameters"]["wk"][0][1] = nlohmann::json::array(); }, {"'wk[0][1]'"});
  broken([](nlohmann::json& j) { j["parameters"]["wq"][0][0][2] = {1.0}; }, {"'wq[0][0][2]'"});
  broken([](nlohmann::json& j) { j["parameters"]["wq"][0][0][1][1] = "x"; }, {"'wq[0][0][1][1]'"});
  broken([](nlohmann::json& j) { j["parameters"]["heads"] = 3; }, {"'wq"});
  broken([](nlohmann::json& j) { j["parameters"]["layers"] = -1; }, {"'layers'"});
  broken([](nlohmann::json& j) { j["parameters"]["head_dim"] = "4"; }, {"'head_dim'"});
  broken([](nlohmann::json& j) { j["parameters"]["r"] = 3; }, {"'r'"});
  broken([](nlohmann::json& j) { j["settings"]["r"] = "3"; }, {"'r'"});
  broken([](nlohmann::json& j) { j["parameters"]["clusters"] = 4; }, {"'clusters'"});
  broken([](nlohmann::json& j) { j["parameters"].erase("centroids"); }, {"'centroids'"});
  broken([](nlohmann::json& j) { j["parameters"]["centroids"][0][0].erase(0); }, {"'centroids[0][0]'"});
  broken([](nlohmann::json& j) { j["settings"]["colour"] = "red"; }, {"unknown setting 'colour'"});

  auto qz = make_predictor("sparsefinder-quantization", {{"buckets", "3"}, {"r", "2"}});
  qz->fit(c, {});
  nlohmann::json j = nlohmann::json::parse(qz->to_json());
  j["parameters"]["edges"][0][1][0] = {2.0, 1.0};
  check_error([&] { load_predictor(j.dump()); }, {"'edges[0][1][0]'", "ascending"});
  j = nlohmann::json::parse(qz->to_json());
  j["parameters"].erase("buckets");
  check_error([&] { load_predictor(j.dump()); }, {"'buckets'"});
}

TEST_CASE("parameter files: a key the method does not read is an error naming the key and the method") {
  const Capture c = clustered_capture(1, 2, 4, {20}, 2, false);
  auto low = make_predictor("lowrank-threshold", {{"r", "2"}});
  low->fit(c, {});
  // A lowrank-threshold file relabelled sparsefinder-distance (same projection keys, and "alpha").
  nlohmann::json j = nlohmann::json::parse(low->to_json());
  j["method"] = "sparsefinder-distance";
  j["settings"] = {{"r", "2"}};
  check_error([&] { load_predictor(j.dump(), "relabelled.json"); },
              {"load_predictor: relabelled.json: sparsefinder-distance: parameters: unknown key \"alpha\" "
               "(sparsefinder-distance reads layers, heads, head_dim, r, wq, wk)"});
  j["parameters"].erase("alpha");
  CHECK_NOTHROW(load_predictor(j.dump(), "distance.json"));  // the rest is a valid distance file
  // An extra key in each learned method's file.
  const std::vector<std::pair<std::string, PredictorSettings>> methods = {
      {"lowrank-threshold", {}},
      {"sparsefinder-distance", {{"r", "2"}}},
      {"sparsefinder-quantization", {{"r", "2"}}},
      {"sparsefinder-kmeans", {{"r", "2"}, {"clusters", "3"}}},
      {"routing", {{"clusters", "2"}}}};
  for (const auto& [method, settings] : methods) {
    CAPTURE(method);
    auto p = make_predictor(method, settings);
    p->fit(c, {});
    nlohmann::json k = nlohmann::json::parse(p->to_json());
    CHECK_NOTHROW(load_predictor(k.dump()));
    k["parameters"]["edges2"] = 1;
    check_error([&] { load_predictor(k.dump(), "extra.json"); },
                {"extra.json: " + method + ": parameters: unknown key \"edges2\" (" + method + " reads "});
  }
}

TEST_CASE("parameter files: repeated keys and numbers beyond float32 are errors naming the file and the entry") {
  const Capture c = clustered_capture(1, 2, 4, {20}, 2, false);
  auto p = make_predictor("sparsefinder-kmeans", {{"clusters", "3"}, {"r", "2"}});
  p->fit(c, {});
  const std::string text = p->to_json();
  const nlohmann::json good = nlohmann::json::parse(text);
  CHECK_NOTHROW(load_predictor(text, "good.json"));

  {  // A key the format does not have (a typo) is an error, not ignored.
    nlohmann::json j = good;
    j["parameter"] = j["parameters"];
    check_error([&] { load_predictor(j.dump(), "typo.json"); },
                {"load_predictor: typo.json: unknown key \"parameter\" (expected format, version, method, settings, "
                 "parameters)"});
  }
  // 1e39 is a finite double but no float32: the entry is named, not turned into inf.
  for (double big : {1e39, -1e39, 3.5e38}) {
    CAPTURE(big);
    nlohmann::json j = good;
    j["parameters"]["wq"][0][1][2][1] = big;
    check_error([&] { load_predictor(j.dump(), "bad.json"); },
                {"load_predictor: bad.json: ", "'wq[0][1][2][1]'", "float32"});
    j = good;
    j["parameters"]["centroids"][0][0][2][0] = big;
    check_error([&] { load_predictor(j.dump(), "bad.json"); }, {"bad.json", "'centroids[0][0][2][0]'", "float32"});
  }
  {
    nlohmann::json j = good;
    j["parameters"]["wq"][0][0][0][0] = 1e39;
    check_error([&] { load_predictor(j.dump(), "bad.json"); }, {"got 1e+39"});
    // The largest float is a float, but prediction's float32 arithmetic would
    // overflow on it: projection entries are bounded by 2^62 / (head_dim
    // sqrt(r)), here 2^62 / (4 sqrt(2)) = 2^59.5, centroids by 2^62 / sqrt(r).
    for (double beyond : {3.4028234663852886e38, 0x1p60, -0x1p60}) {
      CAPTURE(beyond);
      j["parameters"]["wq"][0][0][0][0] = beyond;
      check_error([&] { load_predictor(j.dump(), "huge.json"); },
                  {"load_predictor: huge.json: sparsefinder-kmeans: parameters: 'wq[0][0][0][0]': expected a number of "
                   "magnitude at most ", "float32 arithmetic would overflow"});
    }
    j["parameters"]["wq"][0][0][0][0] = 0x1p59;
    CHECK_NOTHROW(load_predictor(j.dump(), "large.json"));
    j = good;
    j["parameters"]["centroids"][0][1][2][0] = 0x1p62;
    check_error([&] { load_predictor(j.dump(), "huge.json"); }, {"huge.json", "'centroids[0][1][2][0]'", "magnitude"});
    j["parameters"]["centroids"][0][1][2][0] = 0x1p61;
    CHECK_NOTHROW(load_predictor(j.dump(), "large.json"));
  }
  auto routing = make_predictor("routing", {{"clusters", "2"}});
  routing->fit(c, {});
  nlohmann::json r = nlohmann::json::parse(routing->to_json());
  r["parameters"]["centroids"][0][1][1][3] = 1e39;
  check_error([&] { load_predictor(r.dump(), "routing.json"); },
              {"routing.json", "centroids[0][1][1][3]", "float32", "1e+39"});

  // A key repeated at the top, in settings, or deep in the parameters.
  const std::size_t brace = text.find('{');
  check_error([&] { load_predictor("{\"method\": \"routing\", " + text.substr(brace + 1), "dup.json"); },
              {"load_predictor: dup.json: ", "duplicate key \"method\" in the file"});
  std::string dup = text;
  const std::size_t settings = dup.find("\"settings\": {");
  REQUIRE(settings != std::string::npos);
  dup.insert(settings + 13, "\"r\": \"3\", ");
  check_error([&] { load_predictor(dup, "dup.json"); }, {"dup.json", "duplicate key \"r\" in the object \"settings\""});
  dup = text;
  const std::size_t clusters = dup.find("\"clusters\":3");  // in "parameters" ("settings" holds "3")
  REQUIRE(clusters != std::string::npos);
  dup.insert(clusters, "\"clusters\":3,");
  check_error([&] { load_predictor(dup, "dup.json"); },
              {"dup.json", "duplicate key \"clusters\" in the object \"parameters\""});

  // An error about a whole object quotes a short excerpt of it, not kilobytes.
  nlohmann::json window = good;
  window["method"] = "window";
  window["settings"] = nlohmann::json::object();
  REQUIRE(window["parameters"].dump().size() > 300);
  try {
    load_predictor(window.dump(), "window.json");
    FAIL("expected an error");
  } catch (const Error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("expected an empty object") != std::string::npos);
    CHECK(what.size() < 250);
    CHECK(what.find("...") != std::string::npos);
  }
}

TEST_CASE("sparsefinder-kmeans on the shipped causal teacher") {
  std::ifstream in(std::string(ENTGRAPH_SOURCE_DIR) + "/data/heldout.txt", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  REQUIRE(all.size() >= 8 * 256);
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < 8; ++i) texts.push_back(all.substr(i * 256, 256));
  const Capture c = Teacher::load(std::string(ENTGRAPH_SOURCE_DIR) + "/data/teacher-causal").capture(texts);
  auto p = make_predictor("sparsefinder-kmeans", {{"seed", "1"}});
  const auto start = std::chrono::steady_clock::now();
  p->fit(c, {});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const GraphMetrics m = evaluate_all(*p, c);
  MESSAGE("sparsefinder-kmeans fit on the causal teacher (" << c.layers * c.heads << " heads, " << c.tokens()
          << " tokens, " << num_threads() << " threads): " << seconds << " s; recall " << m.recall()
          << ", sparsity " << m.sparsity() << " (gold sparsity " << m.gold_sparsity() << ")");
  CHECK(m.recall() > 1.0 - m.sparsity());
}

}  // TEST_SUITE

}  // namespace entgraph::test
