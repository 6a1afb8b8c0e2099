// Pareto frontiers, recall at a sparsity, and the sweep outputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "clustered_capture.hpp"
#include "entgraph/error.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "entgraph/predictors/sweep.hpp"
#include "entgraph/runtime.hpp"

namespace entgraph {
namespace {

SweepPoint point(double sparsity, double recall, const std::string& method = "m") {
  SweepPoint p;
  p.method = method;
  p.parameter = "t";
  p.value = std::to_string(recall);
  p.sparsity = sparsity;
  p.recall = recall;
  return p;
}

TEST_SUITE("predictors") {
  TEST_CASE("pareto_front keeps exactly the non-dominated points, by sparsity") {
    const std::vector<SweepPoint> pts = {point(0.5, 0.99), point(0.6, 0.90), point(0.55, 0.80),  // dominated by 0.6
                                         point(0.9, 0.40), point(0.9, 0.50), point(0.95, 0.30),
                                         point(0.7, 0.90)};  // dominates 0.6/0.90
    const std::vector<std::size_t> front = pareto_front(pts);
    REQUIRE(front.size() == 4);
    CHECK(front[0] == 0);
    CHECK(front[1] == 6);
    CHECK(front[2] == 4);
    CHECK(front[3] == 5);
    // Brute force: a point is on the front iff nothing dominates it.
    for (std::size_t i = 0; i < pts.size(); ++i) {
      bool dominated = false;
      for (const SweepPoint& o : pts)
        dominated = dominated || (o.sparsity >= pts[i].sparsity && o.recall >= pts[i].recall &&
                                  (o.sparsity > pts[i].sparsity || o.recall > pts[i].recall));
      CHECK((std::find(front.begin(), front.end(), i) != front.end()) == !dominated);
    }
    CHECK(pareto_front({}).empty());
  }

  TEST_CASE("recall_at_sparsity interpolates along the frontier") {
    const std::vector<SweepPoint> pts = {point(0.5, 1.0), point(0.7, 0.9), point(0.9, 0.5)};
    CHECK(recall_at_sparsity(pts, 0.7) == doctest::Approx(0.9));
    CHECK(recall_at_sparsity(pts, 0.8) == doctest::Approx(0.7));
    CHECK(recall_at_sparsity(pts, 0.3) == doctest::Approx(1.0));  // sparser points exist: the best of them
    CHECK(recall_at_sparsity(pts, 0.95) == -1.0);                 // nothing that sparse
  }

  TEST_CASE("sweep CSV, JSON and SVG hold every point and the gold line") {
    std::vector<SweepPoint> pts = {point(0.5, 0.9, "window"), point(0.8, 0.7, "window"), point(0.85, 0.8, "kmeans")};
    pts[1].window = 3;
    const std::string csv = sweep_csv(pts);
    CHECK(csv.rfind("method,parameter,value,window,sparsity,recall,pareto", 0) == 0);
    CHECK(std::count(csv.begin(), csv.end(), '\n') == 4);
    CHECK(csv.find("window,t,0.700000,3,0.8,0.7") != std::string::npos);
    const std::string json = sweep_json(pts, 0.88);
    CHECK(json.find("\"gold_sparsity\": 0.88") != std::string::npos);
    CHECK(json.find("\"method\": \"kmeans\"") != std::string::npos);
    const std::string svg = pareto_svg(pts, 0.88, "a <title>");
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(svg.find("</svg>") != std::string::npos);
    CHECK(svg.find("a &lt;title>") != std::string::npos);  // escaped
    CHECK(svg.find("stroke-dasharray") != std::string::npos);  // the gold sparsity line
    std::size_t circles = 0;
    for (std::size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++circles;
    CHECK(circles == pts.size());
    CHECK(svg.find(">window</text>") != std::string::npos);
    CHECK(svg.find(">kmeans</text>") != std::string::npos);
  }

  TEST_CASE("with_settings changes predict-time settings of a fitted predictor, and only those") {
    const Capture c = test::clustered_capture(1, 2, 8, {32, 32}, 3, true, 5);
    for (const auto& [method, key, value] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"sparsefinder-distance", "t", "2.5"}, {"sparsefinder-kmeans", "top", "2"},
             {"lowrank-threshold", "margin", "0.1"}}) {
      CAPTURE(method);
      const std::vector<std::string> cheap = predict_time_settings(method);
      CHECK(std::find(cheap.begin(), cheap.end(), key) != cheap.end());
      PredictorSettings settings = {{"r", "4"}};
      std::unique_ptr<Predictor> fitted = make_predictor(method, settings);
      fitted->fit(c, {});
      settings[key] = value;
      std::unique_ptr<Predictor> refitted = make_predictor(method, settings);
      refitted->fit(c, {});
      // The same fit with the new value, byte for byte, as a fresh fit would give.
      const std::unique_ptr<Predictor> changed = fitted->with_settings({{key, value}});
      CHECK(changed->to_json() == refitted->to_json());
      CHECK(fitted->settings().at("r") == "4");  // the original is untouched
      CHECK(fitted->settings().count(key) == 0);
      CHECK_THROWS_WITH_AS(fitted->with_settings({{"r", "8"}}), doctest::Contains("setting 'r' changes the fit"), Error);
      CHECK_THROWS_WITH_AS(fitted->with_settings({{"bogus", "1"}}), doctest::Contains("unknown setting 'bogus'"),
                           Error);
      const std::string named = "setting '" + key + "'";
      CHECK_THROWS_WITH_AS(fitted->with_settings({{key, "x"}}), doctest::Contains(named.c_str()), Error);
    }
    CHECK(predict_time_settings("window").empty());
    CHECK_THROWS_AS(predict_time_settings("nope"), Error);
  }

  TEST_CASE("predictor_has_setting knows each method's keys") {
    CHECK(predictor_has_setting("window", "window"));
    CHECK(predictor_has_setting("window", "extra_window"));
    CHECK_FALSE(predictor_has_setting("window", "windw"));
    CHECK(predictor_has_setting("sparsefinder-kmeans", "r"));
    CHECK(predictor_has_setting("lowrank-threshold", "margin"));
    CHECK_FALSE(predictor_has_setting("routing", "r"));
    CHECK_THROWS_AS(predictor_has_setting("nope", "r"), Error);
  }

  TEST_CASE("a sweep fits a predict-time grid once, and its points do not depend on the thread count") {
    const Capture train = test::clustered_capture(1, 2, 8, {32, 32, 32}, 3, true, 7);
    const Capture test = test::clustered_capture(1, 2, 8, {32, 32}, 3, true, 7);
    const std::vector<SweepGrid> grids = {{"sparsefinder-distance", "t", {"1", "2", "3"}, {{"r", "4"}}},
                                          {"sparsefinder-quantization", "buckets", {"2", "4"}, {{"r", "4"}}},
                                          {"window", "window", {"1", "3"}, {}}};
    SweepOptions options;
    options.windows = {-1, 2};
    std::vector<std::string> fitted_json;
    options.on_fitted = [&](const SweepGrid&, const std::string&, const Predictor& p) {
      fitted_json.push_back(p.to_json());
    };
    set_num_threads(1);
    const SweepResult one = run_sweep(grids, train, test, options);
    set_num_threads(0);
    fitted_json.clear();
    const SweepResult all = run_sweep(grids, train, test, options);
    REQUIRE(one.points.size() == 3 * 2 + 2 * 2 + 2);
    REQUIRE(all.points.size() == one.points.size());
    for (std::size_t i = 0; i < one.points.size(); ++i) {
      CHECK(one.points[i].sparsity == all.points[i].sparsity);
      CHECK(one.points[i].recall == all.points[i].recall);
    }
    // Every value reuses the first fit, and equals a separate fit with that value.
    REQUIRE(fitted_json.size() == 3 + 2 + 2);
    for (std::size_t v = 0; v < 2; ++v) {
      std::unique_ptr<Predictor> p =
          make_predictor("sparsefinder-quantization", {{"r", "4"}, {"buckets", grids[1].values[v]}});
      p->fit(train, {});
      CHECK(fitted_json[3 + v] == p->to_json());
    }
    for (std::size_t v = 0; v < 3; ++v) {
      std::unique_ptr<Predictor> p = make_predictor("sparsefinder-distance", {{"r", "4"}, {"t", grids[0].values[v]}});
      p->fit(train, {});
      CHECK(fitted_json[v] == p->to_json());
      p->set_union_patterns(2, 0);
      const EvalReport r = evaluate(*p, test);
      CHECK(r.recall == all.points[2 * v + 1].recall);
      CHECK(r.sparsity == all.points[2 * v + 1].sparsity);
    }
    const std::string json = sweep_json(all.points, all.gold_sparsity, {0.5, 0.99});
    CHECK(json.find("\"recall_at\"") != std::string::npos);
    CHECK(json.find("\"0.5\":") != std::string::npos);
  }

  TEST_CASE("default grids are the paper's") {
    CHECK(default_windows() == std::vector<long>{0, 1, 3, 5, 7, 9, 11, 15, 19, 23, 27});
    CHECK(default_grid("sparsefinder-distance").values.size() == 10);
    CHECK(default_grid("sparsefinder-kmeans").values ==
          std::vector<std::string>{"2", "4", "6", "8", "10", "12", "16", "20"});
    CHECK(default_grid("bigbird").parameter == "random");
    CHECK_THROWS_WITH_AS(default_grid("nope"), doctest::Contains("no grid for method 'nope'"), Error);
  }

  TEST_CASE("evaluate and fit: an error while working on one head names the capture, the layer and the head") {
    // Fitted on one layer, evaluated on two: layer 1 is outside the fit.
    const Capture one = test::clustered_capture(1, 1, 4, {12}, 2, false);
    Capture two = test::clustered_capture(2, 1, 4, {12}, 2, false);
    two.source = "caps/two";
    auto routing = make_predictor("routing", {{"clusters", "2"}});
    routing->fit(one, {});
    try {
      evaluate(*routing, two);
      FAIL("expected an error");
    } catch (const Error& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.rfind("capture caps/two, layer 1, head 0: routing: predict: layer 1, head 0 is outside", 0) == 0);
    }
    // Fitting on a capture that skipped validation: the bad head is named.
    two.keys[(1 * 12 + 5) * 4 + 2] = std::numeric_limits<float>::quiet_NaN();
    for (const char* method : {"sparsefinder-distance", "lowrank-threshold"}) {
      CAPTURE(method);
      auto p = make_predictor(method, {{"r", "2"}});
      try {
        p->fit(two, {});
        FAIL("expected an error");
      } catch (const Error& e) {
        const std::string what = e.what();
        CAPTURE(what);
        CHECK(what.find("caps/two") != std::string::npos);
        CHECK(what.find("layer 1, head 0") != std::string::npos);
      }
    }
  }
}

}  // namespace
}  // namespace entgraph
