// The gathered kernels of graph attention (kernels/matmul_kernels.hpp) on
// every instruction set against a float64 loop: dot products with indexed
// rows, and weighted sums of indexed rows, for lengths around the SIMD widths.
#include <doctest/doctest.h>

#include <cstdint>
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
}

}  // namespace
}  // namespace entgraph
