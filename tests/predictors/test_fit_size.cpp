// Predictor::fit refuses settings whose fit would be absurd for the capture
// (too many learned values, too much work) before doing any of it, and
// sweeps check every grid value before fitting the first.
#include <doctest/doctest.h>

#include <string>

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
    auto slow = make_predictor("routing", {{"clusters", "60000"}, {"iterations", "1000000"}});
    CHECK_THROWS_WITH_AS(slow->fit(c, {}), doctest::Contains("routing: fit: would take about"), Error);
    CHECK_THROWS_WITH_AS(slow->fit(c, {}), doctest::Contains("more than the limit of 1e13"), Error);
    // A sensible fit of the same method goes through.
    make_predictor("routing", {{"clusters", "4"}})->fit(c, {});

    // A sweep refuses a grid with one absurd value before fitting the others.
    SweepGrid grid{"sparsefinder-quantization", "buckets", {"4", "65536"}, {{"r", "256"}}};
    CHECK_THROWS_WITH_AS(run_sweep({grid}, c, c, {}), doctest::Contains("would learn"), Error);
  }
}

}  // namespace
}  // namespace entgraph::test
