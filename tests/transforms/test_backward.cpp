// Backward (vector-Jacobian products) of the transforms that need no extra
// input: the float64 backward against central finite differences of the
// float64 forward, entmax's grad_alpha against finite differences in alpha,
// and extreme gradients. Every float kernel on every target against the
// float64 backward: conformance/test_transforms.cpp.
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

// The kBasic and kExtreme cases up to alpha = 6: beyond, the weights
// p^(2 - alpha) of the backward make central differences at eps = 1e-6 too
// inaccurate for the tolerance (the extreme-gradient test below takes them all).
std::vector<Transform> backward_transforms() {
  std::vector<Transform> ts;
  for (const Transform& t : tagged_transforms(cases::kBasic | cases::kExtreme))
    if (t.kind != TransformKind::entmax || t.alpha <= 6.0) ts.push_back(t);
  return ts;
}

// The kinds of backward the extreme-gradient test runs: the kBasic and
// kExtreme cases of support/cases.hpp (all the entmax kernels: exact 1.5, the
// integer-power alphas, general alpha near 1, below and above 2; top-k) and
// every case with extra inputs (adaptive span, both constrained kinds), whose
// inputs this test builds itself.
enum class Kind { basic, span, csoftmax, csparsemax };
struct ExtremeCase {
  Kind kind;
  Transform t;
  std::string name;
};

std::vector<ExtremeCase> extreme_cases() {
  std::vector<ExtremeCase> out;
  for (const cases::TransformCase& c : cases::transform_cases()) {
    Kind kind = Kind::basic;
    if (c.kind == TransformKind::adaptive_span)
      kind = Kind::span;
    else if (c.kind == TransformKind::constrained_softmax)
      kind = Kind::csoftmax;
    else if (c.kind == TransformKind::constrained_sparsemax)
      kind = Kind::csparsemax;
    else if (!c.has(cases::kBasic | cases::kExtreme))
      continue;
    out.push_back({kind, c.transform(), c.name});
  }
  return out;
}

// The exponent e of the weight s = p^e of the backward dz = s (g - <s, g> / sum s).
long double weight_exponent(const ExtremeCase& c) {
  if (c.kind != Kind::basic) return c.kind == Kind::csparsemax ? 0.0L : 1.0L;
  switch (c.t.kind) {
    case TransformKind::sparsemax: return 0.0L;
    case TransformKind::entmax15: return 0.5L;
    case TransformKind::entmax: return 2.0L - static_cast<long double>(c.t.alpha);
    default: return 1.0L;  // softmax, top-k
  }
}

// Forward and backward of one case in type T: probs from scores (masked
// entries -inf), then grad_scores from grad_probs.
template <class T>
void extreme_run(const ExtremeCase& c, const Matrix<T>& z, const Matrix<std::uint8_t>& keep, const Matrix<T>& upper,
                 const std::vector<T>& span, const Matrix<T>& g, Matrix<T>& p, Matrix<T>& dz) {
  AdaptiveSpan shape;
  shape.ramp = 2.0;
  switch (c.kind) {
    case Kind::basic:
      apply_forward<T>(c.t, z.view(), p.view(), keep.view());
      apply_backward<T>(c.t, p.view(), g.view(), dz.view());
      return;
    case Kind::span: {
      adaptive_span<T>(z.view(), span.data(), shape, p.view(), keep.view());
      std::vector<T> grad_span(z.rows);
      adaptive_span_backward<T>(p.view(), g.view(), span.data(), shape, dz.view(), grad_span.data());
      for (T x : grad_span) CHECK_FALSE(std::isnan(x));
      return;
    }
    case Kind::csoftmax:
    case Kind::csparsemax: {
      Matrix<T> grad_upper(z.rows, z.cols);
      if (c.kind == Kind::csoftmax) {
        constrained_softmax<T>(z.view(), upper.view(), p.view(), keep.view());
        constrained_softmax_backward<T>(p.view(), upper.view(), g.view(), dz.view(), grad_upper.view());
      } else {
        constrained_sparsemax<T>(z.view(), upper.view(), p.view(), keep.view());
        constrained_sparsemax_backward<T>(p.view(), upper.view(), g.view(), dz.view(), grad_upper.view());
      }
      for (T x : grad_upper.data) CHECK_FALSE(std::isnan(x));
      return;
    }
  }
}

// Checks dz against the exact backward (long double, whose range holds every
// intermediate) of the p it was given: exactly 0 where p = 0, within
// rounding of the exact value wherever that is finite in T, and never NaN.
template <class T>
void extreme_check(const ExtremeCase& c, const Matrix<T>& p, const Matrix<T>& upper, const Matrix<T>& g,
                   const Matrix<T>& dz, double tol, std::size_t& checked) {
  const long double e = weight_exponent(c);
  const long double limit = 0.99L * static_cast<long double>(std::numeric_limits<T>::max());
  for (std::size_t i = 0; i < p.rows; ++i) {
    // Free entries carry the gradient (constrained: below their bound).
    auto free = [&](std::size_t j) {
      const T pj = p(i, j), uj = upper(i, j);
      if (c.kind == Kind::csoftmax) return pj < uj || pj == 0;
      if (c.kind == Kind::csparsemax) return pj > 0 && pj < uj;
      return pj > 0;
    };
    long double ss = 0, sg = 0, big = 0;
    for (std::size_t j = 0; j < p.cols; ++j) {
      if (!free(j) || !(p(i, j) > 0)) continue;
      const long double s = std::pow(static_cast<long double>(p(i, j)), e);
      ss += s;
      sg += s * static_cast<long double>(g(i, j));
      big = std::max(big, std::fabs(static_cast<long double>(g(i, j))));
    }
    const long double q = ss > 0 ? sg / ss : 0.0L;
    for (std::size_t j = 0; j < p.cols; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      const T got = dz(i, j);
      CAPTURE(got);
      REQUIRE_FALSE(std::isnan(got));
      if (!(p(i, j) > 0) || !free(j)) {
        CHECK(got == T(0));  // p = 0 (or a saturated constrained entry): exactly 0
        continue;
      }
      const long double s = std::pow(static_cast<long double>(p(i, j)), e);
      const long double exact = s * (static_cast<long double>(g(i, j)) - q);
      if (std::fabs(exact) > limit) continue;  // beyond T: infinity is the right answer
      CHECK(std::isfinite(got));
      const long double err = std::fabs(static_cast<long double>(got) - exact);
      const long double scale = s * (std::fabs(static_cast<long double>(g(i, j))) + big);
      CHECK(static_cast<double>(err) <= tol * static_cast<double>(scale) + 1e-300);
      ++checked;
    }
  }
}

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE("transforms: backward of gradients of +-3e38 is finite where the exact one is, 0 where p = 0") {
    const double huge = 3e38;
    for (const ExtremeCase& c : extreme_cases()) {
      CAPTURE(c.name);
      std::size_t checked = 0;  // entries with p > 0 and a finite exact gradient
      for (std::size_t n : {1, 2, 5, 17, 64, 300}) {
        CAPTURE(n);
        const std::size_t rows = 6;
        const Matrix<double> zd = float_exact_matrix(rows, n, 2.0, 9000 + n);
        Matrix<std::uint8_t> keep = random_mask(rows, n, 0.75, 9001 + n);
        for (std::size_t i = 0; i < rows; ++i) keep(i, 0) = keep(i, n > 1 ? 1 : 0) = 1;
        // Upper bounds: some entries capped below what they would get.
        Matrix<double> ud(rows, n, 1.0);
        for (std::size_t i = 0; i < rows; ++i)
          for (std::size_t j = 0; j < n; j += 3) ud(i, j) = n >= 3 ? 0.6 / static_cast<double>(n) + 0.05 : 1.0;
        std::vector<double> span_d(rows);
        for (std::size_t i = 0; i < rows; ++i) span_d[i] = static_cast<double>(i % 3) * 2.0;
        // Gradients of size `huge`: row 0 all +huge (its sums overflow); row 1
        // mixes them with ordinary values; row 2 alternates signs; the others
        // have random signs.
        auto gradients = [&](double huge_value) {
          std::mt19937_64 rng(9002 + n);
          Matrix<double> g(rows, n);
          for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < n; ++j) {
              const double sign = (rng() & 1) ? 1.0 : -1.0;
              if (i == 0) g(i, j) = huge_value;
              else if (i == 1) g(i, j) = j % 2 ? sign * huge_value : sign * 0.5;
              else if (i == 2) g(i, j) = j % 2 ? huge_value : -huge_value;
              else g(i, j) = sign * huge_value;
            }
          return g;
        };
        const Matrix<double> gd = gradients(huge);
        for (double size : {huge, 1e307}) {  // double, at the float and near the double limit
          CAPTURE(size);
          const Matrix<double> g = size == huge ? gd : gradients(size);
          Matrix<double> p(rows, n), dz(rows, n, kNaN);
          extreme_run<double>(c, zd, keep, ud, span_d, g, p, dz);
          extreme_check<double>(c, p, ud, g, dz, 1e-9, checked);
        }
        const Matrix<float> zf = zd.cast<float>(), uf = ud.cast<float>(), gf = gd.cast<float>();
        const std::vector<float> span_f(span_d.begin(), span_d.end());
        for (CpuIsa isa : available_cpu_isas()) {
          IsaScope scope(isa);
          const std::string isa_name = scope.name();
          CAPTURE(isa_name);
          Matrix<float> p(rows, n), dz(rows, n, std::numeric_limits<float>::quiet_NaN());
          extreme_run<float>(c, zf, keep, uf, span_f, gf, p, dz);
          extreme_check<float>(c, p, uf, gf, dz, 2e-4, checked);
        }
      }
      CHECK(checked > 100);
    }
  }

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

}  // TEST_SUITE
