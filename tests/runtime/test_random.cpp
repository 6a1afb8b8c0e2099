// The library's random-number module (runtime/random.hpp): pinned draws (the
// values every fitted predictor and sweep table depends on), ranges and
// uniformity of both integer rules.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/random.hpp"

using namespace entgraph;

TEST_SUITE("runtime") {
  TEST_CASE("random: the draws of both families are pinned") {
    CHECK(detail::mix_seed(1, 2, 3) == 1554285974358639789ULL);
    std::mt19937_64 a(detail::mix_seed(1, 2, 3));
    for (std::uint64_t expect : {994u, 442u, 674u, 586u}) CHECK(detail::uniform_below(a, 1000) == expect);
    CHECK(detail::uniform_open01(a) == doctest::Approx(0.12886206831506225).epsilon(1e-15));
    CHECK(detail::standard_normal(a) == doctest::Approx(0.69901255524915629).epsilon(1e-12));

    CHECK(std::mt19937_64(detail::keyed_seed(2, 7, 1, 2, 3))() == 2011084399435457723ULL);
    std::mt19937_64 b(detail::keyed_seed(1, 0, 0, 0, 5));
    for (std::uint64_t expect : {899u, 351u, 761u, 610u}) CHECK(detail::uniform_below_reject_low(b, 1000) == expect);
    CHECK(detail::uniform01(b) == doctest::Approx(0.83424758928107368).epsilon(1e-15));
    detail::NormalPairs normal(std::mt19937_64(detail::keyed_seed(2, 0, 0, 0, 0)));
    for (double expect : {-0.24729070390786931, -1.9711171405229246, 1.7606777185935591})
      CHECK(normal.next() == doctest::Approx(expect).epsilon(1e-12));
  }

  TEST_CASE("random: both integer rules stay in range and are uniform") {
    for (bool low : {false, true}) {
      CAPTURE(low);
      std::mt19937_64 rng(5);
      std::vector<int> counts(7, 0);
      for (int i = 0; i < 70000; ++i) {
        const std::uint64_t x = low ? detail::uniform_below_reject_low(rng, 7) : detail::uniform_below(rng, 7);
        REQUIRE(x < 7);
        ++counts[x];
      }
      for (int n : counts) CHECK(std::abs(n - 10000) < 600);
      const std::uint64_t big = (std::uint64_t{1} << 63) + 1;  // rejects almost half of the draws
      for (int i = 0; i < 100; ++i)
        CHECK((low ? detail::uniform_below_reject_low(rng, big) : detail::uniform_below(rng, big)) < big);
    }
    std::mt19937_64 a(9), b(9);
    CHECK(detail::uniform_below(a, 1) == 0);  // no draw
    CHECK(a() == b());
    CHECK(detail::uniform_below_reject_low(a, 1) == 0);  // one draw
    b();
    CHECK(a() == b());
  }

  TEST_CASE("random: reals are in their intervals, normals standard") {
    std::mt19937_64 rng(3);
    detail::NormalPairs pairs(std::mt19937_64(4));
    double sum[2] = {0, 0}, sq[2] = {0, 0};
    for (int i = 0; i < 20000; ++i) {
      const double u = detail::uniform01(rng), v = detail::uniform_open01(rng);
      REQUIRE(u >= 0.0);
      REQUIRE(u < 1.0);
      REQUIRE(v > 0.0);
      REQUIRE(v < 1.0);
      const double z[2] = {pairs.next(), detail::standard_normal(rng)};
      for (int f = 0; f < 2; ++f) {
        sum[f] += z[f];
        sq[f] += z[f] * z[f];
      }
    }
    for (int f = 0; f < 2; ++f) {
      CHECK(std::abs(sum[f] / 20000) < 0.05);
      CHECK(std::abs(sq[f] / 20000 - 1) < 0.05);
    }
    CHECK(detail::mix_seed(1, 2, 3) != detail::mix_seed(1, 3, 2));
  }
}
