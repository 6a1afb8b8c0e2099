// evaluate_many: several predictors and union windows in one call, the same
// numbers as evaluate() one predictor and one window at a time.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "clustered_capture.hpp"
#include "entgraph/error.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "entgraph/predictors/sweep.hpp"
#include "entgraph/runtime.hpp"

namespace entgraph {
namespace {

// Fixed patterns, a clustering method and a learned one, fitted on `train`.
std::vector<std::unique_ptr<Predictor>> fitted_predictors(const Capture& train) {
  std::vector<std::unique_ptr<Predictor>> list;
  list.push_back(make_predictor("window", {{"window", "1"}}));
  list.push_back(make_predictor("routing", {{"clusters", "3"}}));
  list.push_back(make_predictor("sparsefinder-distance", {{"r", "4"}, {"t", "2"}}));
  list.push_back(make_predictor("bigbird", {{"random", "2"}, {"window", "0"}, {"global", "1"}}));
  for (auto& p : list)
    if (p->learned()) p->fit(train, {});
  return list;
}

std::vector<const Predictor*> pointers(const std::vector<std::unique_ptr<Predictor>>& list) {
  std::vector<const Predictor*> out;
  for (const auto& p : list) out.push_back(p.get());
  return out;
}

// Bit for bit: the same sums in the same order.
void check_same(const EvalReport& many, const EvalReport& one) {
  CHECK(many.recall == one.recall);
  CHECK(many.sparsity == one.sparsity);
  CHECK(many.gold_sparsity == one.gold_sparsity);
  REQUIRE(many.per_head.size() == one.per_head.size());
  for (std::size_t h = 0; h < one.per_head.size(); ++h) {
    CHECK(many.per_head[h].hits == one.per_head[h].hits);
    CHECK(many.per_head[h].predicted == one.per_head[h].predicted);
    CHECK(many.per_head[h].gold == one.per_head[h].gold);
  }
}

TEST_SUITE("predictors") {
  TEST_CASE("evaluate_many equals evaluate for each predictor and window, whatever the thread count") {
    const Capture train = test::clustered_capture(2, 2, 8, {24, 24, 24}, 3, true, 11);
    const Capture test = test::clustered_capture(2, 2, 8, {20, 24}, 3, true, 12);
    const auto list = fitted_predictors(train);
    const std::vector<long> windows = {-1, 0, 2, 5};

    set_num_threads(1);
    const std::vector<EvalReport> serial = evaluate_many(pointers(list), test, windows);
    set_num_threads(3);
    const std::vector<EvalReport> threaded = evaluate_many(pointers(list), test, windows);
    set_num_threads(0);
    REQUIRE(serial.size() == list.size() * windows.size());
    REQUIRE(threaded.size() == serial.size());

    for (std::size_t p = 0; p < list.size(); ++p)
      for (std::size_t w = 0; w < windows.size(); ++w) {
        CAPTURE(list[p]->method());
        CAPTURE(windows[w]);
        const EvalReport& many = serial[p * windows.size() + w];
        check_same(threaded[p * windows.size() + w], many);
        // One predictor, its union window set on it, through evaluate().
        std::unique_ptr<Predictor> copy = list[p]->with_settings({});
        copy->set_union_patterns(windows[w], 0);
        check_same(many, evaluate(*copy, test));
      }
    // Window -1 is the predictor alone: evaluate() of the predictor as given.
    for (std::size_t p = 0; p < list.size(); ++p) {
      const std::vector<EvalReport> single = evaluate_many({list[p].get()}, test, {-1});
      REQUIRE(single.size() == 1);
      check_same(single[0], evaluate(*list[p], test));
    }
    // Different predictors do give different numbers (the ordering is tested, not just equal copies).
    CHECK(serial[0].sparsity != serial[windows.size()].sparsity);
  }

  TEST_CASE("evaluate_many keeps a predictor's own union patterns and adds the window on top") {
    const Capture test = test::clustered_capture(1, 2, 8, {24}, 3, true, 5);
    auto p = make_predictor("global", {{"global", "1"}});
    p->set_union_patterns(3, 0);
    const std::vector<EvalReport> r = evaluate_many({p.get()}, test, {-1, 1, 6});
    REQUIRE(r.size() == 3);
    check_same(r[0], evaluate(*p, test));
    check_same(r[1], r[0]);  // window 1 lies inside its own window 3
    CHECK(r[2].sparsity < r[0].sparsity);
  }

  TEST_CASE("evaluate_many refuses bad arguments, naming them") {
    const Capture test = test::clustered_capture(1, 1, 4, {12}, 2, false);
    auto p = make_predictor("window", {{"window", "1"}});
    CHECK_THROWS_WITH_AS(evaluate_many({}, test, {-1}), doctest::Contains("predictors is empty"), Error);
    CHECK_THROWS_WITH_AS(evaluate_many({p.get(), nullptr}, test, {-1}), doctest::Contains("predictors[1] is null"),
                         Error);
    CHECK_THROWS_WITH_AS(evaluate_many({p.get()}, test, {}), doctest::Contains("windows is empty"), Error);
    CHECK_THROWS_WITH_AS(evaluate_many({p.get()}, test, {0, -2}), doctest::Contains("windows[1] is -2"), Error);
  }

  TEST_CASE("evaluate_many: an error on one head, on a pool thread, reaches the caller naming the head") {
    const Capture one = test::clustered_capture(1, 1, 4, {12}, 2, false);
    const Capture two = test::clustered_capture(2, 1, 4, {12, 12}, 2, false);
    auto window = make_predictor("window", {{"window", "1"}});
    auto routing = make_predictor("routing", {{"clusters", "2"}});
    routing->fit(one, {});
    set_num_threads(2);
    CHECK_THROWS_WITH_AS(evaluate_many({window.get(), routing.get()}, two, {-1, 1}),
                         doctest::Contains("layer 1, head 0: routing: predict"), Error);
    set_num_threads(0);
  }
}

}  // namespace
}  // namespace entgraph
