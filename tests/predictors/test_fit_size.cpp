// Predictor::fit refuses settings whose fit would be absurd for the capture
// (too many learned values, too much work) before doing any of it, and
// sweeps check every grid value before fitting the first.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "clustered_capture.hpp"
#include "entgraph/error.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "entgraph/predictors/sweep.hpp"

namespace entgraph::test {
namespace {

TEST_SUITE("predictors") {
  TEST_CASE("fit_size: what each learned method would build, from its settings and the capture's sizes") {
    const Capture c = clustered_capture(2, 3, 8, {10, 6}, 2, false);  // 6 heads, 16 tokens, head_dim 8
    // Fixed patterns learn nothing.
    CHECK(make_predictor("window", {})->fit_size(c).parameters == 0);
    // Sparsefinder: wq and wk (8 x r) per head, plus the method's own values.
    CHECK(make_predictor("sparsefinder-distance", {{"r", "3"}})->fit_size(c).parameters == 6 * 2 * 8 * 3);
    CHECK(make_predictor("sparsefinder-quantization", {{"r", "3"}, {"buckets", "5"}})->fit_size(c).parameters ==
          6 * (2 * 8 * 3 + 3 * 4));
    CHECK(make_predictor("sparsefinder-kmeans", {{"r", "3"}, {"clusters", "7"}})->fit_size(c).parameters ==
          6 * (2 * 8 * 3 + 7 * 3));
    CHECK(make_predictor("routing", {{"clusters", "7"}})->fit_size(c).parameters == 6 * 7 * 8);
    CHECK(make_predictor("lowrank-threshold", {})->fit_size(c).parameters == 6 * 2 * 8 * 8);  // r = head_dim
    CHECK(make_predictor("lowrank-threshold", {{"r", "2"}})->fit_size(c).parameters == 6 * 2 * 8 * 2);
    // More iterations, restarts or tokens: more work.
    const auto kmeans = [&](const char* iterations) {
      return make_predictor("sparsefinder-kmeans", {{"iterations", iterations}})->fit_size(c).operations;
    };
    CHECK(kmeans("40") > kmeans("20"));
  }

  TEST_CASE("fit: settings too large for the capture are refused before any work, naming them") {
    const Capture c = clustered_capture(2, 3, 8, {10, 6}, 2, false);
    auto huge = make_predictor("sparsefinder-quantization", {{"buckets", "65536"}, {"r", "256"}});
    CHECK_THROWS_WITH_AS(huge->fit(c, {}),
                         doctest::Contains("sparsefinder-quantization: fit: would learn 100686336 values on this capture "
                                           "(2 layers x 3 heads, 16 tokens, head_dim 8) with settings {buckets=65536, "
                                           "r=256}, more than the limit of 16777216"),
                         Error);
    const Capture wide = clustered_capture(2, 3, 64, {10, 6}, 2, false);
    auto slow = make_predictor("routing", {{"clusters", "32"}, {"iterations", "1000000"}});
    CHECK_THROWS_WITH_AS(slow->fit(wide, {}),
                         "routing: fit: would take about 3.93e+11 multiply-adds on this capture (2 layers x 3 heads, "
                         "16 tokens, head_dim 64) with settings {clusters=32, iterations=1000000}, more than the limit "
                         "of 1e+11; use smaller settings",
                         Error);
    // A sensible fit of the same method goes through.
    make_predictor("routing", {{"clusters", "4"}})->fit(c, {});

    // A sweep refuses a grid with one absurd value before fitting the others.
    SweepGrid grid{"sparsefinder-quantization", "buckets", {"4", "65536"}, {{"r", "256"}}};
    CHECK_THROWS_WITH_AS(run_sweep({grid}, c, c, {}), doctest::Contains("would learn"), Error);
  }

  TEST_CASE("fit_size: the limit grows with the capture's attention, above a floor of 1e11") {
    const Capture small = clustered_capture(2, 3, 8, {10, 6}, 2, false);
    CHECK(attention_operations(small) == 6.0 * (100 + 36) * 8);
    CHECK(fit_operations_limit(small) == kMaxFitOperations);
    const Capture big = Capture::make(4, 4, 64, std::vector<std::size_t>(64, 1024));
    CHECK(fit_operations_limit(big) == kFitOperationsPerAttention * 16.0 * 64 * 1024.0 * 1024.0 * 64);
  }

  // Each learned method at the worst end of its settings' ranges, on 16
  // tokens: refused before any work (naming the setting or the estimate), or
  // fitted. Measured on a 2-core machine, every accepted fit here takes
  // seconds; before the limits, kmeans with clusters = 65536 ran for minutes.
  TEST_CASE("fit: every method's worst in-range settings on 16 tokens are refused up front or fit") {
    const Capture c = clustered_capture(2, 3, 8, {10, 6}, 2, false);  // 6 heads, 16 tokens, head_dim 8
    const auto refused = [&](const char* method, const PredictorSettings& s, const char* why) {
      CAPTURE(method);
      CHECK_THROWS_WITH_AS(make_predictor(method, s)->fit(c, {}), doctest::Contains(why), Error);
    };
    // More clusters than the 32 points of a head: refused whatever the cost, naming the setting.
    refused("sparsefinder-kmeans", {{"clusters", "65536"}},
            "sparsefinder-kmeans: fit: setting 'clusters' = 65536 is more than the 32 points (queries and keys, 16 "
            "tokens) of each head of this capture; use clusters <= 32");
    refused("sparsefinder-kmeans", {{"clusters", "33"}}, "setting 'clusters' = 33");
    refused("routing", {{"clusters", "65536"}}, "routing: fit: setting 'clusters' = 65536");
    // At most the points, the other settings at their maximum: the estimate is over the limit.
    refused("sparsefinder-kmeans",
            {{"clusters", "32"}, {"restarts", "1000"}, {"iterations", "100000"}, {"r", "256"}},
            "more than the limit of 1e+11");
    refused("sparsefinder-distance", {{"epochs", "1000"}, {"negatives", "1000"}, {"r", "256"}},
            "more than the limit of 1e+11");
    refused("sparsefinder-quantization", {{"epochs", "1000"}, {"negatives", "1000"}},
            "more than the limit of 1e+11");
    refused("sparsefinder-quantization", {{"buckets", "65536"}, {"r", "256"}}, "would learn");
    // lowrank-threshold: the eigen work grows with head_dim (as d^4 past 256).
    const Capture wide = clustered_capture(1, 1, 1100, {16}, 2, false);
    CHECK_THROWS_WITH_AS(make_predictor("lowrank-threshold", {})->fit(wide, {}),
                         doctest::Contains("head_dim 1100) with settings {}, more than the limit of 1e+11"), Error);
    // Accepted at their worst: these fit (and end).
    for (const auto& [method, settings] : std::vector<std::pair<const char*, PredictorSettings>>{
             {"lowrank-threshold", {{"r", "256"}, {"bits", "8"}}},
             {"routing", {{"clusters", "32"}, {"iterations", "1048576"}}},
             {"sparsefinder-kmeans", {{"clusters", "32"}, {"top", "32"}, {"restarts", "10"}, {"iterations", "100000"}}},
             {"sparsefinder-distance", {{"epochs", "1000"}, {"negatives", "10"}, {"r", "16"}}},
             {"reformer", {{"buckets", "65536"}, {"rounds", "64"}}}}) {
      CAPTURE(method);
      auto p = make_predictor(method, settings);
      CHECK_NOTHROW(p->fit(c, {}));
      CHECK(p->to_json().find("\"parameters\"") != std::string::npos);
    }
  }
}

}  // namespace
}  // namespace entgraph::test
