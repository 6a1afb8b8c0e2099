// Top-k softmax: selection size, ties, k >= n, masks.
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

template <class T>
std::vector<double> topk_row(const std::vector<double>& z, std::size_t k,
                             const std::vector<std::uint8_t>* keep = nullptr) {
  const Matrix<T> zt = row_matrix<T>(z);
  Matrix<T> p(1, z.size(), T(-1));
  MaskView mask;
  if (keep) mask = MaskView(keep->data(), 1, z.size());
  topk_softmax<T>(zt.view(), p.view(), k, mask);
  return row_of(p, 0);
}

// Runs f(row function) on the double path and on every float ISA.
template <class F>
void for_each_path(F f) {
  {
    const std::string isa_name = "double (float64 reference)";
    CAPTURE(isa_name);
    f([](const std::vector<double>& z, std::size_t k, const std::vector<std::uint8_t>* keep) {
      return topk_row<double>(z, k, keep);
    });
  }
  for (CpuIsa isa : available_cpu_isas()) {
    IsaScope scope(isa);
    const std::string isa_name = scope.name();
    CAPTURE(isa_name);
    f([](const std::vector<double>& z, std::size_t k, const std::vector<std::uint8_t>* keep) {
      return topk_row<float>(z, k, keep);
    });
  }
}

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE("topk_softmax: keeps exactly the k largest entries when there are no ties") {
    for (std::size_t n : {7, 17, 100, 1000}) {
      for (std::size_t k : {1, 2, 5, 16, 33}) {
        CAPTURE(n);
        CAPTURE(k);
        const std::vector<double> z = float_exact(gaussian_row(n, 2.0, 10 * n + k));
        std::vector<double> sorted = z;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());  // no ties
        const double kth = sorted[std::min(k, n) - 1];
        const auto o = oracle_topk(z, k);
        for_each_path([&](auto f) {
          const auto p = f(z, k, nullptr);
          std::size_t wrong = 0;
          for (std::size_t j = 0; j < n; ++j) wrong += (p[j] > 0) != (z[j] >= kth);
          CHECK(support_size(p) == std::min(k, n));
          CHECK(wrong == 0);
          CHECK(row_rel_err(p, o) <= 1e-6);
        });
      }
    }
  }

  TEST_CASE("topk_softmax: every entry tied with the k-th largest is kept") {
    // [3, 1, 2, 2, 0] with k = 2: the k-th value is 2 and both 2s are kept.
    for_each_path([&](auto f) {
      const std::vector<double> z = {3, 1, 2, 2, 0};
      const auto p = f(z, 2, nullptr);
      CHECK(support_size(p) == 3);
      CHECK(p[1] == 0.0);
      CHECK(p[4] == 0.0);
      CHECK(p[2] == p[3]);
      const double e = std::exp(-1.0);
      CHECK(p[0] == doctest::Approx(1 / (1 + 2 * e)).epsilon(1e-6));
      CHECK(p[2] == doctest::Approx(e / (1 + 2 * e)).epsilon(1e-6));
      // k = 1 with a tie at the top keeps both.
      const auto q = f({5, 1, 5, 4}, 1, nullptr);
      CHECK(q[0] == doctest::Approx(0.5).epsilon(1e-7));
      CHECK(q[2] == doctest::Approx(0.5).epsilon(1e-7));
      CHECK(q[1] == 0.0);
      CHECK(q[3] == 0.0);
    });
    // Many ties: integer scores.
    for (std::size_t n : {20, 257}) {
      for (std::size_t k : {1, 3, 10, 50}) {
        CAPTURE(n);
        CAPTURE(k);
        std::mt19937_64 rng(n * k);
        std::vector<double> z(n);
        for (auto& x : z) x = static_cast<double>(rng() % 9);
        std::vector<double> sorted = z;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        const double kth = sorted[std::min(k, n) - 1];
        const auto expected_count =
            static_cast<std::size_t>(std::count_if(z.begin(), z.end(), [&](double x) { return x >= kth; }));
        const auto o = oracle_topk(z, k);
        for_each_path([&](auto f) {
          const auto p = f(z, k, nullptr);
          CHECK(support_size(p) == expected_count);
          CHECK(support_size(p) >= std::min(k, n));
          CHECK(row_rel_err(p, o) <= 1e-6);
        });
      }
    }
  }

  TEST_CASE("topk_softmax: k >= n is softmax") {
    for (std::size_t n : {1, 2, 17, 300}) {
      CAPTURE(n);
      const std::vector<double> z = float_exact(gaussian_row(n, 3.0, 77 + n));
      const auto o = oracle_softmax(z);
      // 2^40, or the largest k where size_t has 32 bits (WebAssembly).
      const std::size_t huge =
          static_cast<std::size_t>(std::min<unsigned long long>(1ull << 40, std::numeric_limits<std::size_t>::max()));
      for (std::size_t k : {n, n + 1, huge}) {
        CAPTURE(k);
        for_each_path([&](auto f) {
          const auto p = f(z, k, nullptr);
          CHECK(support_size(p) == n);
          CHECK(row_rel_err(p, o) <= 1e-6);
        });
      }
    }
  }

  TEST_CASE("topk_softmax: k counts unmasked entries only") {
    // The masked entries hold the largest scores; the selection ignores them.
    const std::size_t n = 40;
    std::vector<double> z = float_exact(gaussian_row(n, 1.0, 5));
    std::vector<std::uint8_t> keep(n, 1);
    for (std::size_t j = 0; j < n; j += 4) {
      z[j] = 100.0 + static_cast<double>(j);
      keep[j] = 0;
    }
    const std::size_t unmasked = n - n / 4;
    for (std::size_t k : {1, 4, 29, 30, 31, 100}) {
      CAPTURE(k);
      const auto o = oracle_topk(z, k, &keep);
      for_each_path([&](auto f) {
        const auto p = f(z, k, &keep);
        std::size_t masked_nonzero = 0;
        for (std::size_t j = 0; j < n; ++j) masked_nonzero += !keep[j] && p[j] != 0;
        CHECK(masked_nonzero == 0);
        CHECK(support_size(p) == std::min(k, unmasked));
        CHECK(row_rel_err(p, o) <= 1e-6);
      });
    }
  }

  TEST_CASE("topk_softmax: the selection holds on rows built to defeat it") {
    // The SIMD kernels narrow a bracket around the k-th largest with counting
    // passes guided by a normal guess: ties across the band, outliers far
    // from the rest, scales spanning decades, two clusters, constant rows,
    // signed zeros and rows mostly masked must all keep exactly {z >= k-th}.
    const char* kinds[] = {"gaussian", "ties", "outliers", "exp scales", "two clusters", "constant", "zeros", "masked"};
    for (std::size_t n : {33, 100, 512, 1000, 4096, 5000}) {
      for (std::size_t kind = 0; kind < 8; ++kind) {
        std::mt19937_64 rng(1000 * n + kind);
        std::normal_distribution<double> normal(0.0, 1.0);
        std::vector<double> z(n);
        std::vector<std::uint8_t> keep(n, 1);
        for (std::size_t j = 0; j < n; ++j) {
          const double g = normal(rng);
          switch (kind) {
            case 0: z[j] = g; break;
            case 1: z[j] = std::round(2.0 * g) / 2.0; break;
            case 2: z[j] = rng() % 50 == 0 ? 1e30 : 1e-20 * g; break;
            case 3: z[j] = std::exp(8.0 * g); break;
            case 4: z[j] = (rng() % 2 == 0 ? -1000.0 : 1000.0) + g; break;
            case 5: z[j] = 0.25; break;
            case 6: z[j] = rng() % 2 == 0 ? 0.0 : -0.0; break;
            default: z[j] = g; keep[j] = rng() % 4 == 0; break;
          }
        }
        z = float_exact(z);
        std::vector<double> visible;
        for (std::size_t j = 0; j < n; ++j)
          if (keep[j]) visible.push_back(z[j]);
        std::sort(visible.begin(), visible.end(), std::greater<>());
        for (std::size_t k : {std::size_t{1}, std::size_t{8}, std::size_t{31}, std::size_t{32}, std::size_t{33}, n / 8,
                              n / 2, n - 1}) {
          if (k == 0) continue;
          CAPTURE(n);
          const std::string kind_name = kinds[kind];
          CAPTURE(kind_name);
          CAPTURE(k);
          const double kth = visible.empty() ? 0.0 : visible[std::min(k, visible.size()) - 1];
          const auto o = oracle_topk(z, k, &keep);
          for_each_path([&](auto f) {
            const auto p = f(z, k, &keep);
            // Nothing outside {z >= k-th} gets weight; everything inside whose
            // weight is representable gets some (far clusters underflow to 0).
            std::size_t wrong = 0;
            for (std::size_t j = 0; j < n; ++j) {
              const bool kept = keep[j] && z[j] >= kth;
              wrong += (p[j] != 0.0 && !kept) || (p[j] == 0.0 && static_cast<double>(o[j]) > 1e-30);
            }
            CHECK(wrong == 0);
            // Float sums of thousands of equal weights: the conformance table's tolerance.
            CHECK(row_rel_err(p, o) <= 1e-5);
          });
        }
      }
    }
  }

}  // TEST_SUITE
