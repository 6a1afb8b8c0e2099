// Constrained softmax and constrained sparsemax: bounds, loose bounds,
// binding bounds against bisection oracles, infeasible bounds, masks and the
// backward (scores and bounds) against finite differences.
#include <doctest/doctest.h>

#include <limits>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

enum class Kind { softmax, sparsemax };

std::string kind_name(Kind k) { return k == Kind::softmax ? "constrained_softmax" : "constrained_sparsemax"; }

template <class T>
Matrix<T> cforward(Kind kind, const Matrix<double>& z, const Matrix<double>& u,
                   const Matrix<std::uint8_t>* mask = nullptr) {
  const Matrix<T> zt = z.cast<T>(), ut = u.cast<T>();
  Matrix<T> p(z.rows, z.cols, T(-1));
  const MaskView m = mask ? MaskView(mask->view()) : MaskView();
  if (kind == Kind::softmax)
    constrained_softmax<T>(zt.view(), ut.view(), p.view(), m);
  else
    constrained_sparsemax<T>(zt.view(), ut.view(), p.view(), m);
  return p;
}

template <class T>
void cbackward(Kind kind, const Matrix<T>& p, const Matrix<T>& u, const Matrix<T>& g, Matrix<T>& dz, Matrix<T>* du) {
  const MatrixView<T> duv = du ? du->view() : MatrixView<T>();
  if (kind == Kind::softmax)
    constrained_softmax_backward<T>(p.view(), u.view(), g.view(), dz.view(), duv);
  else
    constrained_sparsemax_backward<T>(p.view(), u.view(), g.view(), dz.view(), duv);
}

std::vector<LD> coracle(Kind kind, const std::vector<double>& z, const std::vector<double>& u,
                        const std::vector<std::uint8_t>* keep = nullptr) {
  return kind == Kind::softmax ? oracle_csoftmax(z, u, keep) : oracle_csparsemax(z, u, keep);
}

// Bounds in [lo, hi) scaled so that each row sums to `total` (float-exact).
Matrix<double> random_bounds(std::size_t rows, std::size_t n, double total, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(0.2, 1.0);
  Matrix<double> u(rows, n);
  for (std::size_t i = 0; i < rows; ++i) {
    double s = 0;
    for (std::size_t j = 0; j < n; ++j) s += u(i, j) = dist(rng);
    for (std::size_t j = 0; j < n; ++j) u(i, j) = static_cast<float>(u(i, j) * total / s);
  }
  return u;
}

double rows_vs_oracle(Kind kind, const Matrix<double>& z, const Matrix<double>& u, const Matrix<double>& p,
                      const Matrix<std::uint8_t>* mask = nullptr) {
  double worst = 0;
  for (std::size_t i = 0; i < z.rows; ++i) {
    std::vector<std::uint8_t> keep;
    if (mask) keep.assign(mask->data.begin() + i * z.cols, mask->data.begin() + (i + 1) * z.cols);
    worst =
        std::max(worst, row_rel_err(row_of(p, i), coracle(kind, row_of(z, i), row_of(u, i), mask ? &keep : nullptr)));
  }
  return worst;
}

template <class T>
std::size_t above_bound(const Matrix<T>& p, const Matrix<double>& u) {
  std::size_t c = 0;
  for (std::size_t i = 0; i < p.data.size(); ++i) c += static_cast<double>(p.data[i]) > u.data[i];
  return c;
}

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE("constrained: p <= u, rows sum to 1, and binding bounds match the bisection oracle") {
    for (Kind kind : {Kind::softmax, Kind::sparsemax}) {
      CAPTURE(kind_name(kind));
      for (std::size_t n : {3, 8, 17, 100, 1000}) {
        for (double total : {1.05, 1.5, 4.0}) {
          CAPTURE(n);
          CAPTURE(total);
          const std::size_t rows = 4;
          const Matrix<double> z = float_exact_matrix(rows, n, n > 100 ? 3.0 : 1.5, 10 * n);
          const Matrix<double> u = random_bounds(rows, n, total, 11 * n);
          const Matrix<double> pd = cforward<double>(kind, z, u);
          const DistStats sd = dist_stats(pd);
          CHECK(sd.min_p >= 0.0);
          CHECK(sd.max_sum_err <= 1e-12);
          CHECK(above_bound(pd, u) == 0);
          CHECK(rows_vs_oracle(kind, z, u, pd) <= 1e-10);
          // The bounds bind somewhere (else this is an unconstrained test).
          std::size_t saturated = 0;
          for (std::size_t i = 0; i < pd.data.size(); ++i) saturated += pd.data[i] == u.data[i];
          if (total < 2) CHECK(saturated > 0);
          for (CpuIsa isa : available_cpu_isas()) {
            IsaScope scope(isa);
            const std::string isa_name = scope.name();
            CAPTURE(isa_name);
            const Matrix<float> pf = cforward<float>(kind, z, u);
            const DistStats st = dist_stats(pf);
            CHECK(st.non_finite == 0);
            CHECK(st.min_p >= 0.0);
            CHECK(st.max_sum_err <= 1e-5);
            CHECK(above_bound(pf, u) == 0);
            CHECK(row_rel_err(pf, pd) <= 1e-5);
          }
        }
      }
    }
  }

  TEST_CASE("constrained: loose bounds (u >= 1) give softmax and sparsemax") {
    for (Kind kind : {Kind::softmax, Kind::sparsemax}) {
      CAPTURE(kind_name(kind));
      for (std::size_t n : {1, 2, 17, 300}) {
        for (double bound : {1.0, 5.0}) {
          CAPTURE(n);
          CAPTURE(bound);
          const Matrix<double> z = float_exact_matrix(3, n, 2.0, 20 + n);
          const Matrix<double> u(3, n, bound);
          Matrix<double> ref(3, n);
          if (kind == Kind::softmax)
            softmax<double>(z.view(), ref.view());
          else
            sparsemax<double>(z.view(), ref.view());
          CHECK(row_rel_err(cforward<double>(kind, z, u), ref) <= 1e-12);
          for (CpuIsa isa : available_cpu_isas()) {
            IsaScope scope(isa);
            const std::string isa_name = scope.name();
            CAPTURE(isa_name);
            CHECK(row_rel_err(cforward<float>(kind, z, u), ref) <= 1e-5);
          }
        }
      }
    }
  }

  TEST_CASE("constrained: bounds summing to exactly 1 give p = u, zero bounds give 0") {
    for (Kind kind : {Kind::softmax, Kind::sparsemax}) {
      CAPTURE(kind_name(kind));
      Matrix<double> z(2, 4), u(2, 4);
      const double zs[] = {3.0, -1.0, 0.5, 0.25};
      const double us[] = {0.5, 0.25, 0.125, 0.125};
      const double u2[] = {0.0, 0.75, 0.0, 0.5};
      for (std::size_t j = 0; j < 4; ++j) {
        z(0, j) = z(1, j) = zs[j];
        u(0, j) = us[j];
        u(1, j) = u2[j];
      }
      const Matrix<double> pd = cforward<double>(kind, z, u);
      for (std::size_t j = 0; j < 4; ++j) CHECK(pd(0, j) == doctest::Approx(us[j]).epsilon(1e-12));
      CHECK(pd(1, 0) == 0.0);
      CHECK(pd(1, 2) == 0.0);
      CHECK(pd(1, 1) + pd(1, 3) == doctest::Approx(1.0).epsilon(1e-12));
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        const Matrix<float> pf = cforward<float>(kind, z, u);
        CHECK(row_rel_err(pf, pd) <= 1e-6);
        CHECK(pf(1, 0) == 0.0f);
        CHECK(pf(1, 2) == 0.0f);
      }
    }
  }

  TEST_CASE("constrained: masked entries get 0 and their bounds are ignored") {
    for (Kind kind : {Kind::softmax, Kind::sparsemax}) {
      CAPTURE(kind_name(kind));
      const std::size_t rows = 3, n = 30;
      const Matrix<double> z = float_exact_matrix(rows, n, 1.0, 31);
      Matrix<double> u = random_bounds(rows, n, 3.0, 32);
      Matrix<std::uint8_t> mask = random_mask(rows, n, 0.6, 33);
      Matrix<double> dirty_u = u, dirty_z = z;
      for (std::size_t i = 0; i < u.data.size(); ++i)
        if (!mask.data[i]) {
          dirty_u.data[i] = (i % 2) ? -1.0 : kNaN;
          dirty_z.data[i] = (i % 3) ? kNaN : kInf;
        }
      const Matrix<double> pd = cforward<double>(kind, z, u, &mask);
      CHECK(dist_stats(pd, &mask).masked_nonzero == 0);
      CHECK(rows_vs_oracle(kind, z, u, pd, &mask) <= 1e-10);
      Matrix<double> pdirty;
      CHECK_NOTHROW(pdirty = cforward<double>(kind, dirty_z, dirty_u, &mask));
      CHECK(row_rel_err(pdirty, pd) <= 1e-14);
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        Matrix<float> pf;
        CHECK_NOTHROW(pf = cforward<float>(kind, dirty_z, dirty_u, &mask));
        CHECK(dist_stats(pf, &mask).masked_nonzero == 0);
        CHECK(row_rel_err(pf, pd) <= 1e-5);
      }
    }
  }

  TEST_CASE("constrained: the SIMD solvers agree with the exact ones on hard rows") {
    // The float kernels solve without sorting (fixed-point passes for
    // softmax; piece roots, chords and bisection for sparsemax): tight bounds
    // (u ~ 1/n, g a staircase), bounds summing to exactly 1, zero bounds,
    // scores offset by 1e4, ties, and one bound of 1 on a row's only key;
    // and scores far from normal, which the sparsemax solver's first guess
    // assumes: uniform tight bounds c / n over wide, nearly flat, two-cluster
    // and skewed (exp) scores.
    for (Kind kind : {Kind::softmax, Kind::sparsemax}) {
      CAPTURE(kind_name(kind));
      for (std::size_t n : {5, 64, 1000, 4096}) {
        for (int shape = 0; shape < 9; ++shape) {
          CAPTURE(n);
          CAPTURE(shape);
          Matrix<double> z = float_exact_matrix(2, n, 2.0, 900 + n + static_cast<std::size_t>(shape));
          Matrix<double> u = random_bounds(2, n, shape == 0 ? 1.0001 : 1.5, 950 + n);
          for (std::size_t j = 0; j < n; ++j) {
            if (shape == 1) u(0, j) = u(1, j) = 1.0 / 1024.0 * (j < 1024 ? 1.0 : 0.0);  // sum exactly 1 when n >= 1024
            if (shape == 2) z(0, j) = static_cast<float>(z(0, j) + 1e4);  // float-exact, as the float path sees it
            if (shape == 3) z(0, j) = z(1, j) = std::round(z(0, j));
            if (shape == 4) u(0, j) = j % 3 == 0 ? 0.0 : 2.0 * u(0, j);  // zero bounds; the rest still sum past 1
            const double c[] = {2.0, 1.01, 4.0, 3.0};
            if (shape >= 5) u(0, j) = u(1, j) = static_cast<float>(c[shape - 5] / static_cast<double>(n));
            for (std::size_t r = 0; r < 2; ++r) {
              double& x = z(r, j);
              if (shape == 5) x = static_cast<float>(50.0 * x);
              if (shape == 6) x = static_cast<float>(1e-3 * x);
              if (shape == 7) x = static_cast<float>((j % 2 == 0 ? 3.0 : -3.0) + 0.1 * x);
              if (shape == 8) x = static_cast<float>(std::exp(x));
            }
          }
          if (shape == 1 && n < 1024) continue;
          if (shape == 4) {  // row 1: one key, bound 1
            for (std::size_t j = 1; j < n; ++j) z(1, j) = -std::numeric_limits<double>::infinity();
            u(1, 0) = 1.0;
          }
          const Matrix<double> pd = cforward<double>(kind, z, u);
          for (CpuIsa isa : available_cpu_isas()) {
            IsaScope scope(isa);
            const std::string isa_name = scope.name();
            CAPTURE(isa_name);
            const Matrix<float> pf = cforward<float>(kind, z, u);
            CHECK(above_bound(pf, u) == 0);
            CHECK(dist_stats(pf).max_sum_err <= 1e-5);
            CHECK(row_rel_err(pf, pd) <= 1e-5);
            std::size_t saturation_differs = 0;  // p == u decides where the backward sends gradient
            for (std::size_t i = 0; i < pd.data.size(); ++i)
              saturation_differs += (pd.data[i] == u.data[i] && pd.data[i] > 0) !=
                                    (static_cast<double>(pf.data[i]) == static_cast<double>(static_cast<float>(u.data[i])) && pf.data[i] > 0);
            CHECK(saturation_differs == 0);
          }
        }
      }
    }
  }

  TEST_CASE("constrained: bounds that sum to less than 1 throw") {
    for (Kind kind : {Kind::softmax, Kind::sparsemax}) {
      CAPTURE(kind_name(kind));
      const Matrix<double> z = float_exact_matrix(2, 4, 1.0, 41);
      Matrix<double> u(2, 4, 0.5);
      for (std::size_t j = 0; j < 4; ++j) u(1, j) = 0.24;  // row 1 sums to 0.96
      CHECK_THROWS_WITH_AS(cforward<double>(kind, z, u), doctest::Contains("upper"), entgraph::Error);
      CHECK_THROWS_WITH_AS(cforward<float>(kind, z, u), doctest::Contains("upper"), entgraph::Error);
      // Masked bounds do not count: row 0 keeps two entries of 0.25 each.
      Matrix<double> u2(2, 4, 0.25);
      for (std::size_t j = 0; j < 4; ++j) u2(1, j) = 1.0;
      Matrix<std::uint8_t> mask(2, 4, 1);
      mask(0, 1) = mask(0, 3) = 0;
      CHECK_NOTHROW(cforward<double>(kind, z, u2));
      CHECK_THROWS_WITH_AS(cforward<double>(kind, z, u2, &mask), doctest::Contains("upper"), entgraph::Error);
    }
  }

  TEST_CASE("constrained: backward matches finite differences in the scores and in the bounds") {
    const double eps = 1e-6;
    for (Kind kind : {Kind::softmax, Kind::sparsemax}) {
      CAPTURE(kind_name(kind));
      std::size_t checked = 0, with_saturated = 0;
      for (std::uint64_t seed = 1; seed <= 40 && checked < 6; ++seed) {
        const std::size_t n = 4 + seed % 9;
        const std::vector<double> z = gaussian_row(n, 1.5, 500 + seed);
        const std::vector<double> u = row_of(random_bounds(1, n, 1.3 + 0.1 * (seed % 4), 600 + seed), 0);
        const std::vector<double> g = gaussian_row(n, 1.0, 700 + seed);
        auto fwd = [&](const std::vector<double>& zz, const std::vector<double>& uu) {
          return row_of(cforward<double>(kind, row_matrix<double>(zz), row_matrix<double>(uu)), 0);
        };
        // 0 zero, 1 free, 2 saturated.
        auto classes = [&](const std::vector<double>& p, const std::vector<double>& uu) {
          std::vector<double> c(n);
          for (std::size_t j = 0; j < n; ++j) c[j] = p[j] <= 1e-13 ? 0 : (p[j] >= uu[j] - 1e-13 ? 2 : 1);
          return c;
        };
        const auto p = fwd(z, u);
        const auto c0 = classes(p, u);
        bool stable = true;
        for (std::size_t j = 0; j < n && stable; ++j)
          for (double d : {-10 * eps, 10 * eps}) {
            auto zz = z, uu = u;
            zz[j] += d;
            uu[j] += d;
            stable = stable && classes(fwd(zz, u), u) == c0 && classes(fwd(z, uu), uu) == c0;
          }
        if (!stable) continue;
        ++checked;
        CAPTURE(seed);
        CAPTURE(n);
        with_saturated += std::count(c0.begin(), c0.end(), 2.0) > 0;
        Matrix<double> pm = row_matrix<double>(p), um = row_matrix<double>(u), gm = row_matrix<double>(g);
        Matrix<double> dz(1, n, kNaN), du(1, n, kNaN);
        cbackward<double>(kind, pm, um, gm, dz, &du);
        const auto fdz = fd_vjp([&](const std::vector<double>& zz) { return fwd(zz, u); }, z, g, eps);
        const auto fdu = fd_vjp([&](const std::vector<double>& uu) { return fwd(z, uu); }, u, g, eps);
        double ez = 0, eu = 0;
        for (std::size_t j = 0; j < n; ++j) {
          ez = std::max(ez, std::abs(dz(0, j) - fdz[j]));
          eu = std::max(eu, std::abs(du(0, j) - fdu[j]));
        }
        CHECK(ez <= 1e-6 * std::max(1.0, max_abs(fdz)));
        CHECK(eu <= 1e-6 * std::max(1.0, max_abs(fdu)));
        // grad_upper is optional and does not change grad_scores.
        Matrix<double> dz2(1, n, kNaN);
        cbackward<double>(kind, pm, um, gm, dz2, nullptr);
        CHECK(bytes_equal(dz.data, dz2.data));
      }
      CHECK(checked >= 3);
      CHECK(with_saturated >= 2);
    }
  }

  TEST_CASE("constrained: float backward matches the float64 backward on every ISA") {
    for (Kind kind : {Kind::softmax, Kind::sparsemax}) {
      CAPTURE(kind_name(kind));
      for (std::size_t n : {3, 17, 300}) {
        CAPTURE(n);
        const std::size_t rows = 4;
        const Matrix<double> z = float_exact_matrix(rows, n, 1.5, 800 + n);
        const Matrix<double> u = random_bounds(rows, n, 1.4, 801 + n);
        const Matrix<float> pf = cforward<double>(kind, z, u).cast<float>(), uf = u.cast<float>(),
                            gf = random_matrix<float>(rows, n, 1.0, 802 + n);
        const Matrix<double> p2 = pf.cast<double>(), u2 = uf.cast<double>(), g2 = gf.cast<double>();
        Matrix<double> dzd(rows, n), dud(rows, n);
        cbackward<double>(kind, p2, u2, g2, dzd, &dud);
        for (CpuIsa isa : available_cpu_isas()) {
          IsaScope scope(isa);
          const std::string isa_name = scope.name();
          CAPTURE(isa_name);
          Matrix<float> dzf(rows, n), duf(rows, n);
          cbackward<float>(kind, pf, uf, gf, dzf, &duf);
          CHECK(max_abs_err(dzf, dzd) <= 1e-5);
          CHECK(max_abs_err(duf, dud) <= 1e-5);
        }
      }
    }
  }

}  // TEST_SUITE
