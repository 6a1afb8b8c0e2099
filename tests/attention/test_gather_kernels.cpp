// The gathered kernels of graph attention (kernels/matmul_kernels.hpp) on
// every instruction set against a float64 loop: dot products with indexed
// rows, weighted sums of indexed rows, and threshold selection, for lengths
// around the SIMD widths.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/matmul_kernels.hpp"
#include "support.hpp"

namespace entgraph {
namespace {

TEST_SUITE("attention") {
  TEST_CASE("gather_dot and gather_axpy match a float64 loop on every ISA") {
    std::mt19937_64 rng(9);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const std::size_t rows = 50, ld = 70;
    std::vector<float> b(rows * ld);
    for (float& x : b) x = normal(rng);
    for (CpuIsa isa : available_cpu_isas()) {
      const auto& mm = isa == CpuIsa::reference ? detail::reference_matmul_kernels<float>() : detail::matmul_kernels(isa);
      CAPTURE(cpu_isa_name(isa));
      for (std::size_t k : {1u, 7u, 16u, 33u, 64u, 70u})
        for (std::size_t count : {0u, 1u, 2u, 5u, 31u}) {
          std::vector<std::uint32_t> idx(count);
          std::vector<float> x(k), w(count), out(count + 1, -7.0f), sum(k + 1, -7.0f);
          for (auto& i : idx) i = static_cast<std::uint32_t>(rng() % rows);
          for (float& v : x) v = normal(rng);
          for (std::size_t c = 0; c < count; ++c) w[c] = c % 3 == 1 ? 0.0f : normal(rng);
          mm.gather_dot(x.data(), b.data(), ld, idx.data(), count, k, 0.5f, out.data());
          mm.gather_axpy(w.data(), b.data(), ld, idx.data(), count, k, sum.data());
          for (std::size_t c = 0; c < count; ++c) {
            double s = 0;
            for (std::size_t p = 0; p < k; ++p) s += double(x[p]) * b[idx[c] * ld + p];
            CHECK(out[c] == doctest::Approx(0.5 * s).epsilon(1e-5).scale(1.0));
          }
          CHECK(out[count] == -7.0f);  // nothing written past count
          for (std::size_t j = 0; j < k; ++j) {
            double s = 0;
            for (std::size_t c = 0; c < count; ++c) s += double(w[c]) * b[idx[c] * ld + j];
            CHECK(sum[j] == doctest::Approx(s).epsilon(1e-5).scale(1.0));
          }
          CHECK(sum[k] == -7.0f);
        }
    }
  }

  TEST_CASE("select_above lists exactly the entries in (threshold, ceiling] of its range, in order, on every ISA") {
    std::mt19937_64 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    constexpr std::size_t G = detail::kSelectGroup;
    for (CpuIsa isa : available_cpu_isas()) {
      const auto& mm = isa == CpuIsa::reference ? detail::reference_matmul_kernels<float>() : detail::matmul_kernels(isa);
      CAPTURE(cpu_isa_name(isa));
      for (std::size_t n : {0u, 1u, 17u, 64u, 100u, 1100u, 2048u})
        for (float threshold : {-10.0f, 0.0f, 1.5f, 10.0f}) {
          std::vector<float> x(n);
          for (float& v : x) v = normal(rng);
          for (std::size_t j = 0; j < n; j += 97) x[j] = threshold + 1.0f;  // hits in many groups
          if (n > 2) x[1] = threshold;  // equal is not above
          if (n > 3) x[2] = std::nextafter(threshold, 100.0f);
          if (n > 4) x[3] = std::numeric_limits<float>::quiet_NaN();
          if (n > 5) x[4] = threshold + 0.5f;  // equal to the ceiling below: selected
          if (n > 6) x[5] = std::nextafter(threshold + 0.5f, 100.0f);
          // Group maxima; every third group's raised (an upper bound is enough).
          const std::size_t groups = (n + G - 1) / G;
          std::vector<float> group_max(groups, -std::numeric_limits<float>::infinity());
          for (std::size_t j = 0; j < n; ++j)
            if (x[j] > group_max[j / G]) group_max[j / G] = x[j];
          for (std::size_t g = 0; g < groups; g += 3) group_max[g] += 1.0f;
          std::uniform_int_distribution<std::size_t> pick(0, n);
          for (int trial = 0; trial < 6; ++trial) {
            std::size_t from = trial == 0 ? 0 : pick(rng), to = trial == 0 ? n : pick(rng);
            if (from > to) std::swap(from, to);
            for (bool with_groups : {true, false})
              for (float ceiling : {std::numeric_limits<float>::infinity(), threshold + 0.5f}) {
                CAPTURE(from);
                CAPTURE(to);
                CAPTURE(with_groups);
                CAPTURE(ceiling);
                std::vector<std::uint32_t> idx(to - from + 1, 999u), want;
                for (std::size_t j = from; j < to; ++j)
                  if (x[j] > threshold && x[j] <= ceiling) want.push_back(static_cast<std::uint32_t>(j));
                const std::size_t count = mm.select_above(x.data(), with_groups ? group_max.data() : nullptr, from,
                                                          to, threshold, ceiling, idx.data());
                REQUIRE(count == want.size());
                for (std::size_t c = 0; c < count; ++c) CHECK(idx[c] == want[c]);
                CHECK(idx[to - from] == 999u);  // nothing written past the room of to - from entries
              }
          }
        }
    }
  }

  TEST_CASE("max_value is the largest entry, -inf for none, on every ISA") {
    std::mt19937_64 rng(12);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (CpuIsa isa : available_cpu_isas()) {
      const auto& mm = isa == CpuIsa::reference ? detail::reference_matmul_kernels<float>() : detail::matmul_kernels(isa);
      CAPTURE(cpu_isa_name(isa));
      CHECK(mm.max_value(nullptr, 0) == -std::numeric_limits<float>::infinity());
      for (std::size_t n : {1u, 3u, 15u, 16u, 17u, 31u, 32u, 33u, 100u, 1000u})
        for (std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
          std::vector<float> x(n);
          for (float& v : x) v = normal(rng) - 10.0f;
          x[at] = 5.0f;
          if (n > 2) x[(at + 1) % n] = -std::numeric_limits<float>::infinity();
          CHECK(mm.max_value(x.data(), n) == 5.0f);
        }
    }
  }
}

}  // namespace
}  // namespace entgraph
