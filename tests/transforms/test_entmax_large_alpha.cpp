// alpha-entmax over the upper part of its range (alpha in (2, kMaxEntmaxAlpha]),
// against the long double oracle in the weights' own terms
// (oracle_entmax_relative): near-ties, where the threshold lies closer to a
// score than double resolves, wide rows, float and double entry points, every
// kernel table, forward and backward.
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

constexpr double kAlphas[] = {2.5, 10.0, 30.0, 100.0, 1000.0};

// Rows whose second entry gets weight about `small`: z = [0, -d, ...] with
// (a d)^(1/a) = 1 - small, then entries below (never in the support) and a
// tie of the first. Float-exact, so float and double runs see one input.
std::vector<std::vector<double>> near_tie_rows(double alpha) {
  const double a = alpha - 1;
  std::vector<std::vector<double>> rows;
  for (double small : {1e-6, 1e-3, 0.3}) {
    const double d = std::pow(1 - small, a) / a;
    rows.push_back(float_exact({0.0, -d, -2 * d, -1.5, -4.0}));
    rows.push_back(float_exact({-d, 0.0, -3.0, -d - 1.0 / a, 0.0}));  // the max twice
  }
  // Ulp-apart scores, and an exact tie below the max.
  rows.push_back({1.0, static_cast<double>(std::nextafter(1.0f, 0.0f)), 0.5, 0.5});
  rows.push_back(float_exact({0.25, 0.25, 0.25 - 1e-3 / a, -1.0}));
  return rows;
}

// Wide rows: gaussian at the scale where the support has dozens of entries,
// and a run of 1000+ scores one float ulp apart (near-ties everywhere).
std::vector<std::vector<double>> wide_rows(double alpha) {
  const double a = alpha - 1;
  std::vector<std::vector<double>> rows;
  rows.push_back(float_exact(gaussian_row(1000, 0.05 / a, 11)));
  rows.push_back(float_exact(gaussian_row(3000, 1.0, 12)));
  std::vector<double> run(1200);
  float x = 2.0f;
  for (auto& v : run) {
    v = x;
    x = std::nextafter(x, 0.0f);
  }
  run[7] = run[8];  // and a tie inside the run
  rows.push_back(run);
  return rows;
}

double max_abs_diff(const std::vector<double>& p, const std::vector<LD>& o) {
  double worst = 0;
  for (std::size_t j = 0; j < p.size(); ++j) worst = std::max(worst, std::abs(p[j] - static_cast<double>(o[j])));
  return worst;
}

// dz = s (dp - <s, dp> / sum s), s = p^(2 - alpha), in long double as
// dz_j = sum_i (dp_j - dp_i) s_j s_i / sum s with the products taken in logs:
// s alone overflows even long double at alpha = 1000 (p = 1e-6: 1e5988), and
// dp_j - <s, dp> / sum s cancels where one s dominates.
std::vector<LD> oracle_backward(const std::vector<double>& p, const std::vector<double>& dp, double alpha) {
  const LD e = 2 - static_cast<LD>(alpha);
  std::vector<std::size_t> sup;
  LD top = -std::numeric_limits<LD>::infinity();
  for (std::size_t j = 0; j < p.size(); ++j)
    if (p[j] > 0) {
      sup.push_back(j);
      top = std::max(top, e * std::log(static_cast<LD>(p[j])));
    }
  LD rest = 0;  // log sum s = top + log(rest)
  for (std::size_t j : sup) rest += std::exp(e * std::log(static_cast<LD>(p[j])) - top);
  const LD log_total = top + std::log(rest);
  std::vector<LD> dz(p.size(), 0);
  for (std::size_t j : sup)
    for (std::size_t i : sup) {
      if (i == j) continue;  // (dp_j - dp_j) s_j^2 / sum s: 0, though s_j^2 may overflow
      const LD w = std::exp(e * std::log(static_cast<LD>(p[j])) + e * std::log(static_cast<LD>(p[i])) - log_total);
      dz[j] += (static_cast<LD>(dp[j]) - static_cast<LD>(dp[i])) * w;
    }
  return dz;
}

std::vector<double> float_forward(const Transform& t, const std::vector<double>& z) {
  const Matrix<float> s = row_matrix<float>(z);
  Matrix<float> p(1, z.size(), -1.0f);
  apply_forward<float>(t, s.view(), p.view());
  return row_of(p, 0);
}

template <class T>
std::vector<double> backward(const Transform& t, const std::vector<double>& p, const std::vector<double>& dp) {
  const Matrix<T> pm = row_matrix<T>(p), gm = row_matrix<T>(dp);
  Matrix<T> dz(1, p.size());
  apply_backward<T>(t, pm.view(), gm.view(), dz.view());
  return row_of(dz, 0);
}

// The largest error relative to the largest |dz| that T holds; entries
// beyond T's range must be infinite with the right sign (+1 if one is not).
template <class T>
double scaled_err(const std::vector<double>& dz, const std::vector<LD>& o) {
  const LD limit = std::numeric_limits<T>::max();
  double scale = 0, worst = 0;
  for (LD x : o)
    if (std::abs(x) <= limit) scale = std::max(scale, std::abs(static_cast<double>(x)));
  for (std::size_t j = 0; j < o.size(); ++j) {
    if (std::abs(o[j]) > limit) {
      if (!(std::isinf(dz[j]) && (dz[j] > 0) == (o[j] > 0))) worst += 1;
      continue;
    }
    worst = std::max(worst, std::abs(dz[j] - static_cast<double>(o[j])) / std::max(scale, 1e-300));
  }
  return worst;
}

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE("entmax, large alpha: the oracle's weights solve the defining equations") {
    // The oracle itself: on its support p_j^(alpha-1) - p_k^(alpha-1) =
    // (alpha-1)(z_j - z_k) (checked where both sides are resolvable), the
    // weights sum to 1, and the row gets [1 - 1e-6, 1e-6].
    const double a = 999;
    const std::vector<double> z = {0.0, -std::pow(1 - 1e-6, a) / a, -0.5, -1, -2};
    const auto o = oracle_entmax(z, 1000.0);
    CHECK(static_cast<double>(o[1]) == doctest::Approx(1e-6).epsilon(1e-6));
    CHECK(static_cast<double>(o[0]) == doctest::Approx(1 - 1e-6).epsilon(1e-12));
    for (double alpha : {3.0, 10.0}) {
      const std::vector<double> row = float_exact(gaussian_row(50, 0.1, 3));
      const auto p = oracle_entmax(row, alpha);
      LD sum = 0, lo = 2;
      std::size_t k = 0;
      for (std::size_t j = 0; j < row.size(); ++j) {
        sum += p[j];
        if (p[j] > 0 && p[j] < lo) lo = p[j], k = j;
      }
      CHECK(static_cast<double>(sum) == doctest::Approx(1.0).epsilon(1e-15));
      for (std::size_t j = 0; j < row.size(); ++j) {
        if (!(p[j] > 0)) {
          CHECK(row[j] <= row[k]);
          continue;
        }
        const LD lhs = std::pow(p[j], static_cast<LD>(alpha - 1)) - std::pow(lo, static_cast<LD>(alpha - 1));
        const double rhs = (alpha - 1) * (row[j] - row[k]);
        CHECK(std::abs(static_cast<double>(lhs) - rhs) <= 1e-10 * rhs + 1e-300);
      }
    }
  }

  TEST_CASE("entmax, large alpha: forward within 1e-6 of the oracle, double and float, every kernel") {
    for (double alpha : kAlphas) {
      CAPTURE(alpha);
      std::vector<std::vector<double>> rows = near_tie_rows(alpha);
      for (auto& r : wide_rows(alpha)) rows.push_back(r);
      for (std::size_t r = 0; r < rows.size(); ++r) {
        CAPTURE(r);
        const auto o = oracle_entmax(rows[r], alpha);
        CHECK(max_abs_diff(lib_forward(Transform::entmax(alpha), rows[r]), o) <= 1e-6);
        for (CpuIsa isa : available_cpu_isas()) {
          IsaScope scope(isa);
          const std::string isa_name = scope.name();
          CAPTURE(isa_name);
          CHECK(max_abs_diff(float_forward(Transform::entmax(alpha), rows[r]), o) <= 1e-6);
        }
      }
    }
  }

  TEST_CASE("entmax, large alpha: short rows in a batch get the same weights as alone") {
    for (double alpha : kAlphas) {
      CAPTURE(alpha);
      const auto rows = near_tie_rows(alpha);
      Matrix<float> z(rows.size(), 5, -kInf), p(rows.size(), 5, -1.0f);
      for (std::size_t r = 0; r < rows.size(); ++r)
        for (std::size_t j = 0; j < rows[r].size(); ++j) z(r, j) = static_cast<float>(rows[r][j]);
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        apply_forward<float>(Transform::entmax(alpha), z.view(), p.view());
        for (std::size_t r = 0; r < rows.size(); ++r) {
          std::vector<double> zr(5);
          for (std::size_t j = 0; j < 5; ++j) zr[j] = z(r, j);
          CHECK(max_abs_diff(row_of(p, r), oracle_entmax(zr, alpha)) <= 1e-6);
        }
      }
    }
  }

  TEST_CASE("entmax, large alpha: backward matches the oracle at the same weights, and finite differences") {
    for (double alpha : kAlphas) {
      CAPTURE(alpha);
      std::vector<std::vector<double>> rows = near_tie_rows(alpha);
      rows.push_back(wide_rows(alpha)[0]);
      for (std::size_t r = 0; r < rows.size(); ++r) {
        CAPTURE(r);
        const auto& z = rows[r];
        const std::vector<double> dp = float_exact(gaussian_row(z.size(), 1.0, 100 + r));
        // double: the library's weights, its backward against the oracle's at them
        const auto p = lib_forward(Transform::entmax(alpha), z);
        CHECK(scaled_err<double>(backward<double>(Transform::entmax(alpha), p, dp), oracle_backward(p, dp, alpha)) <= 1e-9);
        // float, every kernel, at the float weights
        for (CpuIsa isa : available_cpu_isas()) {
          IsaScope scope(isa);
          const std::string isa_name = scope.name();
          CAPTURE(isa_name);
          std::vector<double> pf = float_forward(Transform::entmax(alpha), z);
          CHECK(scaled_err<float>(backward<float>(Transform::entmax(alpha), pf, dp), oracle_backward(pf, dp, alpha)) <= 1e-5);
        }
        if (z.size() > 8) continue;
        // The oracle's backward against central differences of its forward,
        // per support entry, with eps * max s <= 1e-4 (the Jacobian's entries
        // are up to max s = p^(2 - alpha): 2^998 for a tie at alpha = 1000,
        // where no difference in double resolves it; those rows are skipped).
        // z_i +- eps is exact for eps >= 2^-50: the scores are float-exact, |z| < 8.
        const auto o = oracle_entmax(z, alpha);
        std::vector<double> po(z.size());
        double log_smax = -kInf;
        for (std::size_t j = 0; j < z.size(); ++j) {
          po[j] = static_cast<double>(o[j]);
          if (po[j] > 0) log_smax = std::max(log_smax, (2 - alpha) * std::log(po[j]));
        }
        const int e2 = static_cast<int>(std::ceil((log_smax - std::log(1e-4)) / std::log(2.0)));
        if (e2 > 50) continue;
        const double eps = std::ldexp(1.0, -std::max(e2, 20));
        const auto dz = oracle_backward(po, dp, alpha);
        for (std::size_t i = 0; i < z.size(); ++i) {
          if (!(po[i] > 0)) continue;
          auto f = [&](double shift) {
            std::vector<double> zs(z);
            zs[i] += shift;
            const auto q = oracle_entmax(zs, alpha);
            LD s = 0;
            for (std::size_t j = 0; j < z.size(); ++j) s += q[j] * static_cast<LD>(dp[j]);
            return s;
          };
          const double fd = static_cast<double>((f(eps) - f(-eps)) / (2 * static_cast<LD>(eps)));
          CHECK(static_cast<double>(dz[i]) == doctest::Approx(fd).epsilon(1e-5).scale(1.0));
        }
      }
    }
  }
}
