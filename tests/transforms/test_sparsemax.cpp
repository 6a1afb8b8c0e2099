// Sparsemax: closed forms, exact small examples, ties at the threshold and
// sparse-consistency.
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

TEST_SUITE("transforms") {
  TEST_CASE("sparsemax: two-element rows are clamp((a - b + 1) / 2, 0, 1)") {
    const double values[] = {-3.0, -1.0, -0.75, -0.5, -0.125, 0.0, 0.25, 0.5, 1.0, 1.5, 4.0};
    const std::size_t m = std::size(values) * std::size(values);
    Matrix<double> z(m, 2);
    std::vector<double> expect(m);
    std::size_t r = 0;
    for (double a : values)
      for (double b : values) {
        z(r, 0) = a;
        z(r, 1) = b;
        expect[r++] = std::clamp((a - b + 1) / 2, 0.0, 1.0);
      }
    auto check = [&](const auto& p, double tol) {
      double worst = 0;
      std::size_t zero_mismatch = 0;
      for (std::size_t i = 0; i < m; ++i) {
        worst = std::max({worst, std::abs(p(i, 0) - expect[i]), std::abs(p(i, 1) - (1 - expect[i]))});
        zero_mismatch += (expect[i] == 0) != (p(i, 0) == 0);
        zero_mismatch += (expect[i] == 1) != (p(i, 1) == 0);
      }
      CHECK(worst <= tol);
      CHECK(zero_mismatch == 0);
    };
    Matrix<double> pd(m, 2);
    sparsemax<double>(z.view(), pd.view());
    check(pd, 1e-15);
    const Matrix<float> zf = z.cast<float>();
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      Matrix<float> pf(m, 2);
      sparsemax<float>(zf.view(), pf.view());
      check(pf, 1e-6);
    }
  }

  TEST_CASE("sparsemax: exact values on small examples") {
    // z = [1, 0.5, -1]: support {0, 1}, tau = 0.25.
    // z = [0.5, 0.25, 0.25, -2]: support {0, 1, 2}, tau = 0; the tie is kept whole.
    // z = [1, 0, 0]: tau = 0, the two zeros sit exactly on the threshold.
    // z = [2, 1.5, 1.25, 0]: support {0, 1}, tau = 1.25, so 1.25 sits exactly on it.
    const std::vector<std::vector<double>> zs = {
        {1, 0.5, -1}, {0.5, 0.25, 0.25, -2}, {1, 0, 0}, {2, 1.5, 1.25, 0}, {0.5, 0.5, 0.5, 0.5}};
    const std::vector<std::vector<double>> ps = {
        {0.75, 0.25, 0}, {0.5, 0.25, 0.25, 0}, {1, 0, 0}, {0.75, 0.25, 0, 0}, {0.25, 0.25, 0.25, 0.25}};
    for (std::size_t c = 0; c < zs.size(); ++c) {
      CAPTURE(c);
      const std::vector<double>& expect = ps[c];
      CHECK(lib_forward(Transform::sparsemax(), zs[c]) == expect);
      const Matrix<float> zf = row_matrix<float>(zs[c]);
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        Matrix<float> p(1, zs[c].size());
        sparsemax<float>(zf.view(), p.view());
        const auto row = row_of(p, 0);
        double worst = 0;
        for (std::size_t j = 0; j < row.size(); ++j) {
          worst = std::max(worst, std::abs(row[j] - expect[j]));
          if (expect[j] == 0) CHECK(row[j] == 0.0);
        }
        CHECK(worst <= 1e-7);
      }
    }
  }

  TEST_CASE("sparsemax: p = max(0, z - tau) with one tau per row") {
    const Matrix<double> z = float_exact_matrix(6, 300, 1.0, 21);
    const Matrix<float> zf = z.cast<float>();
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      Matrix<float> p(6, 300);
      sparsemax<float>(zf.view(), p.view());
      for (std::size_t i = 0; i < 6; ++i) {
        // tau from the support, then every entry must agree with it.
        double tau = 0;
        std::size_t k = 0;
        for (std::size_t j = 0; j < 300; ++j)
          if (p(i, j) > 0) {
            tau += z(i, j) - p(i, j);
            ++k;
          }
        REQUIRE(k > 0);
        tau /= k;
        double worst = 0;
        for (std::size_t j = 0; j < 300; ++j) worst = std::max(worst, std::abs(p(i, j) - std::max(0.0, z(i, j) - tau)));
        CHECK(worst <= 1e-6);
      }
    }
  }

  TEST_CASE("sparsemax: sparse-consistency, masking entries outside the support changes nothing") {
    for (std::size_t n : {5, 40, 300, 2000}) {
      CAPTURE(n);
      const std::size_t rows = 4;
      const Matrix<double> z = float_exact_matrix(rows, n, 2.0, 30 + n);
      Matrix<double> pd(rows, n);
      sparsemax<double>(z.view(), pd.view());
      // Keep the support and a random half of the rest.
      Matrix<std::uint8_t> mask = random_mask(rows, n, 0.5, 31 + n);
      for (std::size_t i = 0; i < pd.data.size(); ++i)
        if (pd.data[i] > 0) mask.data[i] = 1;
      Matrix<double> pdm(rows, n);
      sparsemax<double>(z.view(), pdm.view(), mask.view());
      CHECK(row_rel_err(pdm, pd) <= 1e-12);
      const Matrix<float> zf = z.cast<float>();
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        Matrix<float> pf(rows, n), pfm(rows, n);
        sparsemax<float>(zf.view(), pf.view());
        sparsemax<float>(zf.view(), pfm.view(), mask.view());
        CHECK(max_abs_err(pf, pfm) <= 1e-6);
      }
    }
  }

}  // TEST_SUITE
