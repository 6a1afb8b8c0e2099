// Adversarial rows: huge and tiny magnitudes, ties exactly at the threshold,
// -inf mixed in, a 1e20 spike, peaked rows at extreme alpha. Every path must
// give finite, non-negative rows that sum to 1 and match the reference.
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

std::vector<Transform> adversarial_transforms() { return tagged_transforms(cases::kBasic | cases::kExtreme); }

// Checks a set of rows on the float64 path and on every float ISA against the
// long-double oracle: finite, non-negative, rows sum to 1, and within
// tolerance (1e-9 for float64, 1e-5 for float, relative to the row's largest
// weight; widened to twice the conditioning bound above on ill-conditioned rows).
void check_rows(const Transform& t, const Matrix<double>& z) {
  std::vector<std::vector<LD>> oracle;
  for (std::size_t i = 0; i < z.rows; ++i) oracle.push_back(oracle_forward(t, row_of(z, i)));
  auto empty_row = [&](std::size_t i) {
    for (std::size_t j = 0; j < z.cols; ++j)
      if (z(i, j) != -kInf) return false;
    return true;
  };
  auto check = [&](const auto& p, double base_tol, double eps, double sum_tol) {
    const DistStats st = dist_stats(p, nullptr, empty_row);
    CHECK(st.non_finite == 0);
    CHECK(st.min_p >= 0.0);
    CHECK(st.max_sum_err <= sum_tol);
    for (std::size_t i = 0; i < z.rows; ++i) {
      CAPTURE(i);
      const double tol = std::max(base_tol, 2 * entmax_conditioning(t, row_of(z, i), oracle[i], eps));
      CAPTURE(tol);
      CHECK(row_rel_err(row_of(p, i), oracle[i]) <= tol);
    }
  };
  {
    const std::string isa_name = "double (float64 reference)";
    CAPTURE(isa_name);
    Matrix<double> pd(z.rows, z.cols, -1.0);
    apply_forward<double>(t, z.view(), pd.view());
    check(pd, 1e-9, 1.1e-16, 1e-12);
  }
  const Matrix<float> zf = z.cast<float>();
  for (CpuIsa isa : available_cpu_isas()) {
    IsaScope scope(isa);
    const std::string isa_name = scope.name();
    CAPTURE(isa_name);
    Matrix<float> pf(z.rows, z.cols, -1.0f);
    apply_forward<float>(t, zf.view(), pf.view());
    check(pf, 1e-5, 6e-8, 1e-5);
  }
}

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE("transforms: rows of magnitude 1e4 and 1e-6 stay finite, sum to 1 and match the reference") {
    for (const Transform& t : adversarial_transforms()) {
      CAPTURE(describe(t));
      for (double scale : {1e4, 1e-6, 1e-30}) {
        for (std::size_t n : {2, 17, 100, 1000}) {
          CAPTURE(scale);
          CAPTURE(n);
          check_rows(t, float_exact_matrix(3, n, scale, 17 * n));
        }
      }
    }
  }

  TEST_CASE("transforms: a 1e20 spike gives a one-hot row") {
    auto ts = adversarial_transforms();
    ts.push_back(Transform::entmax(kMaxEntmaxAlpha));
    for (const Transform& t : ts) {
      CAPTURE(describe(t));
      for (std::size_t n : {2, 17, 300}) {
        CAPTURE(n);
        Matrix<double> z = float_exact_matrix(4, n, 1.0, 3 + n);
        z(0, 0) = 1e20;
        z(1, n - 1) = 1e20;
        z(2, n / 2) = 1e20;
        z(2, 0) = -1e20;
        z(3, n / 3) = 1e20;
        for (std::size_t j = 0; j < n; j += 2)
          if (j != n / 3) z(3, j) = -kInf;
        z = z.cast<float>().cast<double>();
        check_rows(t, z);
        const std::size_t hot[4] = {0, n - 1, n / 2, n / 3};
        for (CpuIsa isa : available_cpu_isas()) {
          IsaScope scope(isa);
          const std::string isa_name = scope.name();
          CAPTURE(isa_name);
          const Matrix<float> zf = z.cast<float>();
          Matrix<float> p(4, n);
          apply_forward<float>(t, zf.view(), p.view());
          for (std::size_t i = 0; i < 4; ++i) {
            CAPTURE(i);
            CHECK(p(i, hot[i]) == doctest::Approx(1.0).epsilon(1e-7));
            CHECK(support_size(row_of(p, i)) == 1);
          }
        }
      }
    }
  }

  TEST_CASE("transforms: ties exactly at the threshold") {
    // Each row puts entries exactly on the threshold of the transform named.
    struct Case {
      Transform t;
      std::vector<double> z;
      std::vector<double> p;
    };
    const std::vector<Case> cases = {
        {Transform::sparsemax(), {1, 0, 0}, {1, 0, 0}},
        {Transform::sparsemax(), {2, 1.5, 1.25, 1.25, 0}, {0.75, 0.25, 0, 0, 0}},
        {Transform::entmax(2.0), {2, 1.5, 1.25, 1.25, 0}, {0.75, 0.25, 0, 0, 0}},
        {Transform::entmax15(), {2, 0, 0, -1}, {1, 0, 0, 0}},
        {Transform::entmax(1.5), {2, 0, 0, -1}, {1, 0, 0, 0}},
        {Transform::entmax(3.0), {0.5, 0, 0}, {1, 0, 0}},
        {Transform::entmax(5.0), {0.25, 0, 0, -3}, {1, 0, 0, 0}},
        {Transform::topk_softmax(2), {1, 3, 1, 1, 0}, {}},
    };
    for (const Case& c : cases) {
      CAPTURE(describe(c.t));
      CAPTURE(c.z.size());
      std::vector<double> expect = c.p;
      if (expect.empty())
        for (auto x : oracle_forward(c.t, c.z)) expect.push_back(static_cast<double>(x));
      const auto pd = lib_forward(c.t, c.z);
      double err = 0;
      for (std::size_t j = 0; j < expect.size(); ++j) err = std::max(err, std::abs(pd[j] - expect[j]));
      CHECK(err <= 1e-12);
      const Matrix<float> zf = row_matrix<float>(c.z);
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        Matrix<float> p(1, c.z.size(), -1.0f);
        apply_forward<float>(c.t, zf.view(), p.view());
        double e = 0, sum = 0;
        for (std::size_t j = 0; j < expect.size(); ++j) {
          e = std::max(e, std::abs(p(0, j) - expect[j]));
          sum += p(0, j);
          CHECK(p(0, j) >= 0.0f);
        }
        CHECK(e <= 1e-6);
        CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
      }
    }
  }

  TEST_CASE("entmax: peaked rows at alpha = 1.01, 3 and 10 stay finite and match the reference") {
    for (double alpha : {1.01, 3.0, 10.0}) {
      CAPTURE(alpha);
      for (std::size_t n : {3, 64, 2000}) {
        CAPTURE(n);
        for (double peak : {5.0, 50.0, 500.0}) {
          CAPTURE(peak);
          Matrix<double> z = float_exact_matrix(3, n, 1.0, 5 * n);
          z(0, 0) += peak;
          z(1, n / 2) += peak;
          z(1, n / 2 + (n > 3 ? 1 : 0)) += peak * 0.999;  // two near peaks
          z(2, n - 1) -= peak;                            // one deep valley
          z = z.cast<float>().cast<double>();
          check_rows(Transform::entmax(alpha), z);
        }
      }
    }
  }

  TEST_CASE("transforms: -inf mixed with huge magnitudes and all-equal rows") {
    for (const Transform& t : adversarial_transforms()) {
      CAPTURE(describe(t));
      Matrix<double> z(5, 33, 0.0);
      for (std::size_t j = 0; j < 33; ++j) {
        z(0, j) = (j % 4 == 0) ? -kInf : 1e4 * std::sin(static_cast<double>(j));
        z(1, j) = (j % 2 == 0) ? -kInf : -1e30;                       // equal finite entries around -inf
        z(2, j) = (j == 7) ? 3.0 : -kInf;                             // one finite entry
        z(3, j) = -kInf;                                              // nothing to attend to
        z(4, j) = (j < 16) ? 1e-40 * static_cast<double>(j) : -kInf;  // float denormals
      }
      z = z.cast<float>().cast<double>();
      check_rows(t, z);
      const auto p1 = lib_forward(t, row_of(z, 1));
      for (std::size_t j = 1; j < 33; j += 2) CHECK(p1[j] == doctest::Approx(1.0 / 16).epsilon(1e-12));
      CHECK(lib_forward(t, row_of(z, 2))[7] == 1.0);
    }
  }

}  // TEST_SUITE

TEST_SUITE("transforms") {
  TEST_CASE("entmax: alpha = kMaxEntmaxAlpha on a uniform row gives 1/n") {
    // p = 1/n needs tau = -n^(1 - alpha), far below double range for n = 16:
    // only a computation relative to the maximum gets this right.
    for (std::size_t n : {2, 16, 100}) {
      CAPTURE(n);
      const Matrix<double> z(2, n, -1.5);
      check_rows(Transform::entmax(kMaxEntmaxAlpha), z);
    }
  }

}  // TEST_SUITE
