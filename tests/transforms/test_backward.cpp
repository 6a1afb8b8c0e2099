// Backward (vector-Jacobian products) of the transforms that need no extra
// input: the float64 backward against central finite differences of the
// float64 forward, entmax's grad_alpha against finite differences in alpha,
// and every float kernel against the float64 backward.
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

std::vector<double> lib_backward(const Transform& t, const std::vector<double>& p, const std::vector<double>& g,
                                 double* grad_alpha = nullptr) {
  const Matrix<double> pm = row_matrix<double>(p), gm = row_matrix<double>(g);
  Matrix<double> dz(1, p.size(), kNaN);
  apply_backward<double>(t, pm.view(), gm.view(), dz.view(), grad_alpha);
  return row_of(dz, 0);
}

std::vector<Transform> backward_transforms() {
  auto ts = basic_transforms();
  ts.push_back(Transform::entmax(1.01));
  ts.push_back(Transform::entmax(1.1));
  ts.push_back(Transform::entmax(6.0));
  return ts;
}

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE("transforms: float64 backward matches central finite differences") {
    const double eps = 1e-6;
    for (const Transform& t : backward_transforms()) {
      CAPTURE(describe(t));
      for (std::size_t n : {1, 2, 5, 12, 40}) {
        for (bool masked : {false, true}) {
          CAPTURE(n);
          CAPTURE(masked);
          std::size_t checked = 0;
          for (std::uint64_t seed = 1; seed <= 20 && checked < 3; ++seed) {
            const std::vector<double> z = gaussian_row(n, 1.5, 1000 * n + seed);
            std::vector<std::uint8_t> keep(n, 1);
            if (masked)
              for (std::size_t j = 1; j < n; j += 3) keep[j] = 0;
            auto f = [&](const std::vector<double>& x) { return lib_forward(t, x, &keep); };
            if (!support_stable(f, z, 10 * eps)) continue;  // too close to a support boundary
            ++checked;
            const std::vector<double> g = gaussian_row(n, 1.0, 7 * seed + n);
            const auto p = f(z);
            const auto analytic = lib_backward(t, p, g);
            const auto fd = fd_vjp(f, z, g, eps);
            double err = 0;
            for (std::size_t j = 0; j < n; ++j) err = std::max(err, std::abs(analytic[j] - fd[j]));
            CAPTURE(seed);
            CHECK(err <= 2e-6 * std::max(1.0, max_abs(fd)));
            std::size_t masked_nonzero = 0;
            for (std::size_t j = 0; j < n; ++j) masked_nonzero += !keep[j] && analytic[j] != 0;
            CHECK(masked_nonzero == 0);
          }
          CHECK(checked >= 1);
        }
      }
    }
  }

  TEST_CASE("entmax: grad_alpha matches a finite difference in alpha") {
    const double eps = 1e-6;
    for (double alpha : {1.01, 1.1, 1.5, 2.0, 2.5, 4.0}) {
      CAPTURE(alpha);
      std::size_t checked = 0;
      for (std::uint64_t seed = 1; seed <= 30 && checked < 4; ++seed) {
        const std::size_t n = 3 + 7 * (seed % 5);
        const std::vector<double> z = gaussian_row(n, 1.5, 2000 + seed);
        auto f = [&](double a) { return lib_forward(Transform::entmax(a), z); };
        const auto p = f(alpha);
        if (!same_support(p, f(alpha + 10 * eps)) || !same_support(p, f(alpha - 10 * eps))) continue;
        ++checked;
        CAPTURE(n);
        const std::vector<double> g = gaussian_row(n, 1.0, 3000 + seed);
        const double fd = (dot(g, f(alpha + eps)) - dot(g, f(alpha - eps))) / (2 * eps);
        double ga = kNaN;
        lib_backward(Transform::entmax(alpha), p, g, &ga);
        CHECK(ga == doctest::Approx(fd).epsilon(1e-5).scale(1.0));
      }
      CHECK(checked >= 2);
    }
  }

  TEST_CASE("entmax: at alpha = 1 the backward is softmax's and grad_alpha is 0") {
    const std::vector<double> z = gaussian_row(30, 1.0, 1);
    const std::vector<double> g = gaussian_row(30, 1.0, 2);
    const auto p = lib_forward(Transform::softmax(), z);
    double ga = kNaN;
    const auto dz = lib_backward(Transform::entmax(1.0), p, g, &ga);
    CHECK(ga == 0.0);
    CHECK(row_rel_err(dz, [&] {
            const auto s = lib_backward(Transform::softmax(), p, g);
            return std::vector<LD>(s.begin(), s.end());
          }()) <= 1e-14);
  }

  TEST_CASE("transforms: float backward matches the float64 backward on every ISA") {
    for (const Transform& t : backward_transforms()) {
      CAPTURE(describe(t));
      for (std::size_t n : {1, 3, 17, 100, 1000}) {
        CAPTURE(n);
        const std::size_t rows = 4;
        const Matrix<double> z = float_exact_matrix(rows, n, 2.0, 4000 + n);
        Matrix<double> pd(rows, n);
        Matrix<std::uint8_t> mask = random_mask(rows, n, 0.8, 4001 + n);
        mask(0, 0) = 1;
        apply_forward<double>(t, z.view(), pd.view(), mask.view());
        const Matrix<float> pf = pd.cast<float>(), gf = random_matrix<float>(rows, n, 1.0, 4002 + n);
        const Matrix<double> p2 = pf.cast<double>(), gd = gf.cast<double>();
        Matrix<double> dzd(rows, n);
        std::vector<double> gad(rows, kNaN);
        apply_backward<double>(t, p2.view(), gd.view(), dzd.view(), gad.data());
        for (CpuIsa isa : available_cpu_isas()) {
          IsaScope scope(isa);
          const std::string isa_name = scope.name();
          CAPTURE(isa_name);
          Matrix<float> dzf(rows, n, -3.0f);
          std::vector<float> gaf(rows, -3.0f);
          apply_backward<float>(t, pf.view(), gf.view(), dzf.view(), gaf.data());
          double worst = 0;
          std::size_t masked_nonzero = 0;
          for (std::size_t i = 0; i < rows; ++i) {
            double scale = 1, err = 0;
            for (std::size_t j = 0; j < n; ++j) {
              scale = std::max(scale, std::abs(dzd(i, j)));
              const double d = std::abs(dzf(i, j) - dzd(i, j));
              err = std::max(err, std::isnan(d) ? kInf : d);
              masked_nonzero += !mask(i, j) && dzf(i, j) != 0;
            }
            worst = std::max(worst, err / scale);
          }
          CHECK(worst <= 1e-5);
          CHECK(masked_nonzero == 0);
          if (t.kind == TransformKind::entmax && t.alpha >= 1.25) {
            double gworst = 0;
            for (std::size_t i = 0; i < rows; ++i)
              gworst = std::max(gworst, std::abs(gaf[i] - gad[i]) / std::max(1.0, std::abs(gad[i])));
            CHECK(gworst <= 1e-4);
          }
        }
      }
    }
  }

}  // TEST_SUITE
