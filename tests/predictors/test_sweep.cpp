// Pareto frontiers, recall at a sparsity, and the sweep outputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/predictors/sweep.hpp"

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

  TEST_CASE("default grids are the paper's") {
    CHECK(default_windows() == std::vector<long>{0, 1, 3, 5, 7, 9, 11, 15, 19, 23, 27});
    CHECK(default_grid("sparsefinder-distance").values.size() == 10);
    CHECK(default_grid("sparsefinder-kmeans").values ==
          std::vector<std::string>{"2", "4", "6", "8", "10", "12", "16", "20"});
    CHECK(default_grid("bigbird").parameter == "random");
    CHECK_THROWS_WITH_AS(default_grid("nope"), doctest::Contains("no grid for method 'nope'"), Error);
  }
}

}  // namespace
}  // namespace entgraph
