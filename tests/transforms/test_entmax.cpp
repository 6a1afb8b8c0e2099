// alpha-entmax (entmax15 and general alpha): closed forms, limits, the
// threshold structure, monotonicity in alpha, sparse-consistency and the
// learnable-alpha parametrisation.
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

// entmax15 of [a, b] (Peters et al. 2019): with d = (a - b) / 2, p = one-hot
// when |d| >= 1, else x = (|d| + sqrt(2 - d^2)) / 2, p_big = x^2, p_small = (x - |d|)^2.
std::pair<double, double> entmax15_pair(double a, double b) {
  const double d = (a - b) / 2;
  if (d >= 1) return {1.0, 0.0};
  if (d <= -1) return {0.0, 1.0};
  const double ad = std::abs(d), x = (ad + std::sqrt(2 - ad * ad)) / 2;
  const double big = x * x, small = (x - ad) * (x - ad);
  return d >= 0 ? std::make_pair(big, small) : std::make_pair(small, big);
}

template <class T>
Matrix<T> run(const Transform& t, const Matrix<double>& z, const Matrix<std::uint8_t>* mask = nullptr) {
  const Matrix<T> zt = z.cast<T>();
  Matrix<T> p(z.rows, z.cols, T(-1));
  apply_forward<T>(t, zt.view(), p.view(), mask ? MaskView(mask->view()) : MaskView());
  return p;
}

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE("entmax15: two-element rows follow the closed form") {
    const double values[] = {-3.0, -2.0, -1.5, -0.5, -0.125, 0.0, 0.25, 1.0, 1.75, 2.0, 5.0};
    const std::size_t m = std::size(values) * std::size(values);
    Matrix<double> z(m, 2);
    std::vector<std::pair<double, double>> expect;
    std::size_t r = 0;
    for (double a : values)
      for (double b : values) {
        z(r, 0) = a;
        z(r, 1) = b;
        expect.push_back(entmax15_pair(a, b));
        ++r;
      }
    auto check = [&](const auto& p, double tol) {
      double worst = 0;
      std::size_t zero_mismatch = 0;
      for (std::size_t i = 0; i < m; ++i) {
        worst = std::max({worst, std::abs(p(i, 0) - expect[i].first), std::abs(p(i, 1) - expect[i].second)});
        zero_mismatch += (expect[i].first == 0) != (p(i, 0) == 0);
        zero_mismatch += (expect[i].second == 0) != (p(i, 1) == 0);
      }
      CHECK(worst <= tol);
      CHECK(zero_mismatch == 0);
    };
    check(run<double>(Transform::entmax15(), z), 1e-14);
    check(run<double>(Transform::entmax(1.5), z), 1e-12);
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      check(run<float>(Transform::entmax15(), z), 1e-6);
      check(run<float>(Transform::entmax(1.5), z), 1e-6);
    }
  }

  TEST_CASE("entmax: two-element rows satisfy p1^(alpha-1) - p2^(alpha-1) = (alpha-1)(z1 - z2)") {
    for (double alpha : {1.1, 1.25, 2.5, 4.0}) {
      CAPTURE(alpha);
      Matrix<double> z(40, 2);
      for (std::size_t i = 0; i < 40; ++i) {
        z(i, 0) = 0.0;
        z(i, 1) = (static_cast<double>(i) - 19.5) / (4.0 * (alpha - 1));  // (alpha-1)|z1-z2| in [0.125, 4.875]
      }
      const Matrix<double> pd = run<double>(Transform::entmax(alpha), z);
      double worst = 0;
      std::size_t wrong_support = 0;
      for (std::size_t i = 0; i < 40; ++i) {
        const double gap = (alpha - 1) * (z(i, 0) - z(i, 1));
        if (std::abs(gap) < 1) {
          wrong_support += !(pd(i, 0) > 0 && pd(i, 1) > 0);
          worst = std::max(worst, std::abs(std::pow(pd(i, 0), alpha - 1) - std::pow(pd(i, 1), alpha - 1) - gap));
        } else {
          wrong_support += (gap > 0) ? !(pd(i, 0) == 1 && pd(i, 1) == 0) : !(pd(i, 0) == 0 && pd(i, 1) == 1);
        }
      }
      CHECK(worst <= 1e-10);
      CHECK(wrong_support == 0);
    }
  }

  TEST_CASE("entmax: p^(alpha-1) - (alpha-1) z is the same on the support, and the rest is below the threshold") {
    for (double alpha : {1.25, 1.5, 2.0, 3.0, 10.0}) {
      CAPTURE(alpha);
      const Matrix<double> z = float_exact_matrix(4, 200, 1.0, 50);
      auto check = [&](const auto& p, double tol) {
        double spread = 0, above = 0;
        for (std::size_t i = 0; i < p.rows; ++i) {
          double lo = kInf, hi = -kInf;
          for (std::size_t j = 0; j < p.cols; ++j)
            if (p(i, j) > 1e-4) {  // well inside the support, where float error is small
              const double c = std::pow(static_cast<double>(p(i, j)), alpha - 1) - (alpha - 1) * z(i, j);
              lo = std::min(lo, c);
              hi = std::max(hi, c);
            }
          spread = std::max(spread, hi - lo);
          const double tau = -hi;  // (alpha-1) z - tau = p^(alpha-1)
          for (std::size_t j = 0; j < p.cols; ++j)
            if (p(i, j) == 0) above = std::max(above, (alpha - 1) * z(i, j) - tau);
        }
        CHECK(spread <= tol);
        CHECK(above <= tol);
      };
      check(run<double>(Transform::entmax(alpha), z), 1e-10);
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        check(run<float>(Transform::entmax(alpha), z), 1e-4);
        if (alpha == 1.5) check(run<float>(Transform::entmax15(), z), 1e-4);
      }
    }
  }

  TEST_CASE("entmax: alpha = 2 is sparsemax and alpha = 1.5 is entmax15") {
    for (std::size_t n : {2, 7, 17, 100, 1000}) {
      CAPTURE(n);
      for (double scale : {0.1, 1.0, 10.0}) {
        CAPTURE(scale);
        const Matrix<double> z = float_exact_matrix(3, n, scale, 70 + n);
        Matrix<std::uint8_t> mask = random_mask(3, n, 0.7, 71);
        mask(0, 0) = 1;
        CHECK(row_rel_err(run<double>(Transform::entmax(2.0), z), run<double>(Transform::sparsemax(), z)) <= 1e-10);
        CHECK(row_rel_err(run<double>(Transform::entmax(1.5), z), run<double>(Transform::entmax15(), z)) <= 1e-10);
        CHECK(row_rel_err(run<double>(Transform::entmax(2.0), z, &mask),
                          run<double>(Transform::sparsemax(), z, &mask)) <= 1e-10);
        for (CpuIsa isa : available_cpu_isas()) {
          IsaScope scope(isa);
          const std::string isa_name = scope.name();
          CAPTURE(isa_name);
          CHECK(row_rel_err(run<float>(Transform::entmax(2.0), z), run<float>(Transform::sparsemax(), z)) <= 1e-5);
          CHECK(row_rel_err(run<float>(Transform::entmax(1.5), z), run<float>(Transform::entmax15(), z)) <= 1e-5);
          CHECK(row_rel_err(run<float>(Transform::entmax(1.5), z, &mask),
                            run<float>(Transform::entmax15(), z, &mask)) <= 1e-5);
        }
      }
    }
  }

  TEST_CASE("entmax: alpha = 1 exactly is softmax and alpha -> 1 tends to softmax") {
    for (std::size_t n : {2, 17, 1000}) {
      CAPTURE(n);
      const Matrix<double> z = float_exact_matrix(3, n, 2.0, 90 + n);
      const Matrix<double> sd = run<double>(Transform::softmax(), z);
      CHECK(row_rel_err(run<double>(Transform::entmax(1.0), z), sd) <= 1e-14);
      const double d3 = row_rel_err(run<double>(Transform::entmax(1.001), z), sd);
      const double d4 = row_rel_err(run<double>(Transform::entmax(1.0001), z), sd);
      const double d5 = row_rel_err(run<double>(Transform::entmax(1.00001), z), sd);
      CHECK(d3 <= 2e-2);
      CHECK(d4 <= 2e-3);
      CHECK(d5 <= 2e-4);
      // Roughly linear in alpha - 1.
      CHECK(d4 < d3 / 5);
      CHECK(d5 < d4 / 5);
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        const Matrix<float> sf = run<float>(Transform::softmax(), z);
        CHECK(row_rel_err(run<float>(Transform::entmax(1.0), z), sf) <= 1e-6);
        CHECK(row_rel_err(run<float>(Transform::entmax(1.0001), z), sd) <= d4 + 1e-5);
        CHECK(row_rel_err(run<float>(Transform::entmax(1.00001), z), sd) <= d5 + 1e-5);
      }
    }
  }

  TEST_CASE("entmax: the support never grows as alpha grows") {
    std::size_t rows_checked = 0;
    for (std::uint64_t seed = 1; seed <= 12; ++seed) {
      const std::size_t n = 5 + 11 * seed;
      const std::vector<double> z = float_exact(gaussian_row(n, seed % 2 ? 1.0 : 0.3, 110 + seed));
      CAPTURE(n);
      std::size_t prev_lib = n + 1, prev_oracle = n + 1, grew_lib = 0, grew_oracle = 0, mismatch = 0;
      for (double alpha = 1.1; alpha <= 4.0 + 1e-9; alpha += 0.1) {
        const auto p = lib_forward(Transform::entmax(alpha), z);
        const auto o = oracle_entmax(z, alpha);
        std::size_t ko = 0;
        for (auto x : o) ko += x > 0;
        const std::size_t kl = support_size(p);
        grew_lib += kl > prev_lib;
        grew_oracle += ko > prev_oracle;
        mismatch += kl != ko;
        prev_lib = kl;
        prev_oracle = ko;
      }
      CHECK(grew_lib == 0);
      CHECK(grew_oracle == 0);
      CHECK(mismatch == 0);
      // The sweep must actually move the support.
      rows_checked +=
          support_size(lib_forward(Transform::entmax(4.0), z)) < support_size(lib_forward(Transform::entmax(1.1), z));
    }
    CHECK(rows_checked >= 8);
  }

  TEST_CASE("entmax: sparse-consistency, masking entries outside the support changes nothing") {
    for (const Transform& t : {Transform::entmax15(), Transform::entmax(1.3), Transform::entmax(2.5)}) {
      CAPTURE(describe(t));
      std::size_t outside = 0;  // entries the masks actually removed
      for (std::size_t n : {6, 64, 500, 3000}) {
        CAPTURE(n);
        const std::size_t rows = 3;
        const Matrix<double> z = float_exact_matrix(rows, n, 2.0, 130 + n);
        const Matrix<double> pd = run<double>(t, z);
        for (double keep : {0.0, 0.3, 0.8}) {
          CAPTURE(keep);
          Matrix<std::uint8_t> mask = random_mask(rows, n, keep, 131 + n);
          for (std::size_t i = 0; i < pd.data.size(); ++i) {
            if (pd.data[i] > 0) mask.data[i] = 1;
            outside += mask.data[i] == 0;
          }
          CHECK(row_rel_err(run<double>(t, z, &mask), pd) <= 1e-12);
          for (CpuIsa isa : available_cpu_isas()) {
            IsaScope scope(isa);
            const std::string isa_name = scope.name();
            CAPTURE(isa_name);
            CHECK(max_abs_err(run<float>(t, z, &mask), run<float>(t, z)) <= 1e-6);
          }
        }
      }
      CHECK(outside > 1000);
    }
  }

  TEST_CASE("entmax15: flat rows of any length sum to 1 (thousands of equal terms in the threshold's sums)") {
    for (std::size_t n : {129, 1000, 3000, 4096, 20000}) {
      CAPTURE(n);
      Matrix<double> z(3, n);
      const Matrix<double> noise = float_exact_matrix(1, n, 1e-4, 160 + n);
      for (std::size_t j = 0; j < n; ++j) {
        z(0, j) = 0.25;                                          // constant
        z(1, j) = static_cast<float>(0.25 + noise(0, j));        // nearly constant
        z(2, j) = j % 2 == 0 ? 1e4 : static_cast<float>(1e4 - 0.5);  // two levels, offset
      }
      const Matrix<double> pd = run<double>(Transform::entmax15(), z);
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        const Matrix<float> pf = run<float>(Transform::entmax15(), z);
        CHECK(dist_stats(pf).max_sum_err <= 1e-6);
        CHECK(row_rel_err(pf, pd) <= 1e-5);
      }
    }
  }

  TEST_CASE("entmax: short rows are solved in batches, and a row's result does not depend on the rows beside it") {
    // (entmax15 stands in the list as alpha = 1.5.)
    // n <= kShortRow runs kRowBatch rows at a time, one per SIMD lane: each
    // row must come out as it does alone, bit for bit, on every ISA, with
    // masks, fully masked rows and a partial last batch; and agree with the
    // float64 reference.
    for (double alpha : {1.25, 1.4, 1.5, 1.75, 2.0}) {
      CAPTURE(alpha);
      const Transform t = alpha == 1.5 ? Transform::entmax15() : Transform::entmax(alpha);
      for (std::size_t n : {1, 7, 64, 128}) {
        CAPTURE(n);
        const std::size_t rows = 37;
        Matrix<double> z = float_exact_matrix(rows, n, 3.0, 150 + n);
        for (std::size_t j = 0; j < n; ++j) z(5, j) = z(6, j) = 1.5;  // a constant row and its twin
        Matrix<std::uint8_t> mask = random_mask(rows, n, 0.7, 151 + n);
        for (std::size_t j = 0; j < n; ++j) mask(9, j) = 0;  // fully masked: zeros
        const Matrix<double> pd = run<double>(t, z, &mask);
        for (CpuIsa isa : available_cpu_isas()) {
          IsaScope scope(isa);
          const std::string isa_name = scope.name();
          CAPTURE(isa_name);
          const Matrix<float> all = run<float>(t, z, &mask);
          CHECK(row_rel_err(all, pd) <= 1e-5);
          CHECK(dist_stats(all, &mask).max_sum_err <= 2e-6);
          std::size_t differs = 0;
          for (std::size_t r : {std::size_t{0}, std::size_t{5}, std::size_t{9}, std::size_t{16}, std::size_t{36}}) {
            Matrix<double> one(1, n);
            Matrix<std::uint8_t> one_mask(1, n);
            for (std::size_t j = 0; j < n; ++j) one(0, j) = z(r, j), one_mask(0, j) = mask(r, j);
            const Matrix<float> alone = run<float>(t, one, &one_mask);
            for (std::size_t j = 0; j < n; ++j) differs += alone(0, j) != all(r, j);
          }
          CHECK(differs == 0);
          for (std::size_t j = 0; j < n; ++j) CHECK(all(9, j) == 0.0f);
        }
      }
    }
  }

  TEST_CASE("entmax: alpha = kMaxEntmaxAlpha is accepted and close to argmax") {
    const std::vector<double> z = float_exact(gaussian_row(300, 1.0, 140));
    const std::size_t top = static_cast<std::size_t>(std::max_element(z.begin(), z.end()) - z.begin());
    const auto o = oracle_entmax(z, kMaxEntmaxAlpha);
    const auto pd = lib_forward(Transform::entmax(kMaxEntmaxAlpha), z);
    CHECK(row_rel_err(pd, o) <= 1e-9);
    CHECK(pd[top] >= 0.5);
    const Matrix<double> zm = row_matrix<double>(z);
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      const auto pf = row_of(run<float>(Transform::entmax(kMaxEntmaxAlpha), zm), 0);
      CHECK(row_rel_err(pf, o) <= 1e-5);
      double sum = 0;
      for (double x : pf) sum += x;
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
    }
  }

  TEST_CASE("entmax: alpha = 1 + softplus(a), never below 1, with derivative sigmoid(a)") {
    for (double a : {-30.0, -5.0, -1.0, -0.1, 0.0, 0.3, 2.0, 10.0, 40.0}) {
      CAPTURE(a);
      const double expect = 1.0 + std::log1p(std::exp(a));
      CHECK(entmax_alpha_from_param(a) == doctest::Approx(expect).epsilon(1e-14));
      CHECK(entmax_alpha_param_grad(a) == doctest::Approx(1.0 / (1.0 + std::exp(-a))).epsilon(1e-14));
      const double eps = 1e-6;
      const double fd = (entmax_alpha_from_param(a + eps) - entmax_alpha_from_param(a - eps)) / (2 * eps);
      CHECK(entmax_alpha_param_grad(a) == doctest::Approx(fd).epsilon(1e-7));
    }
    // Large |a|: no overflow, no NaN, alpha >= 1 always.
    for (double a : {-1e308, -1e6, -1000.0, -745.0, -40.0}) {
      CAPTURE(a);
      const double alpha = entmax_alpha_from_param(a);
      CHECK(alpha >= 1.0);
      CHECK(alpha <= 1.0 + 1e-15);
      CHECK(entmax_alpha_param_grad(a) >= 0.0);
      CHECK(entmax_alpha_param_grad(a) < 1e-17);
    }
    for (double a : {40.0, 1000.0, 1e6}) {
      CAPTURE(a);
      CHECK(entmax_alpha_from_param(a) == doctest::Approx(1.0 + a).epsilon(1e-15));
      CHECK(entmax_alpha_param_grad(a) == doctest::Approx(1.0).epsilon(1e-15));
    }
    // The parametrised alpha is a valid entmax alpha even where it rounds to 1.
    const std::vector<double> z = {0.5, -0.25, 1.0};
    CHECK_NOTHROW(lib_forward(Transform::entmax(entmax_alpha_from_param(-800.0)), z));
  }

}  // TEST_SUITE
