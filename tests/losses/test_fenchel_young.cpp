// Fenchel-Young losses (Blondel, Martins & Niculae 2019): non-negativity,
// zero at the prediction, gradient p - q, finite differences, closed forms
// (cross-entropy, sparsemax loss, KL), labels, masks and bad input.
#include <doctest/doctest.h>

#include "entgraph/losses.hpp"
#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

// The kinds with a loss among the kPaths cases of support/cases.hpp, and
// alpha = 1 exactly through the entmax kind (the cross-entropy's limit).
std::vector<Transform> loss_transforms() {
  std::vector<Transform> ts;
  for (const cases::TransformCase& c : cases::transform_cases(cases::kPaths))
    if (!c.extra_inputs() && c.kind != TransformKind::topk_softmax) ts.push_back(c.transform());
  ts.push_back(cases::transform_case("entmax_alpha1").transform());
  return ts;
}

double tsallis_alpha_of(const Transform& t) {
  switch (t.kind) {
    case TransformKind::softmax:
      return 1.0;
    case TransformKind::sparsemax:
      return 2.0;
    case TransformKind::entmax15:
      return 1.5;
    default:
      return t.alpha;
  }
}

// Omega(p) = (sum p^alpha - 1) / (alpha (alpha - 1)); alpha = 1: sum p log p.
LD omega(const std::vector<LD>& p, double alpha) {
  LD s = 0;
  if (alpha == 1.0) {
    for (LD x : p)
      if (x > 0) s += x * std::log(x);
    return s;
  }
  for (LD x : p)
    if (x > 0) s += std::pow(x, static_cast<LD>(alpha));
  return (s - 1) / (static_cast<LD>(alpha) * (static_cast<LD>(alpha) - 1));
}

// L(z; q) = <z, p - q> + Omega(q) - Omega(p), with the oracle's p.
LD oracle_loss(const Transform& t, const std::vector<double>& z, const std::vector<double>& q,
               const std::vector<std::uint8_t>* keep = nullptr) {
  const auto p = oracle_forward(t, z, keep);
  std::vector<LD> ql(q.begin(), q.end());
  LD l = 0;
  for (std::size_t j = 0; j < z.size(); ++j)
    if (!keep || (*keep)[j]) l += static_cast<LD>(z[j]) * (p[j] - ql[j]);
  return l + omega(ql, tsallis_alpha_of(t)) - omega(p, tsallis_alpha_of(t));
}

// Random target rows that are exact distributions in float and double: 1024
// units spread over a random subset of the allowed entries (the first allowed
// entry always among them), q = units / 1024.
Matrix<double> random_target(std::size_t rows, std::size_t n, std::uint64_t seed,
                             const Matrix<std::uint8_t>* mask = nullptr) {
  std::mt19937_64 rng(seed);
  Matrix<double> q(rows, n, 0.0);
  for (std::size_t i = 0; i < rows; ++i) {
    std::vector<std::size_t> pick;
    for (std::size_t j = 0; j < n; ++j)
      if ((!mask || (*mask)(i, j)) && (pick.empty() || rng() % 3 != 0)) pick.push_back(j);
    REQUIRE(!pick.empty());
    for (int unit = 0; unit < 1024; ++unit) q(i, pick[rng() % pick.size()]) += 1.0 / 1024;
  }
  return q;
}

template <class T>
std::vector<double> loss_of(const Transform& t, const Matrix<T>& z, const Matrix<T>& q, Matrix<T>* grad = nullptr,
                            const Matrix<std::uint8_t>* mask = nullptr) {
  std::vector<T> l(z.rows, T(-777));
  fenchel_young_loss<T>(t, z.view(), q.view(), l.data(), grad ? grad->view() : MatrixView<T>(),
                        mask ? MaskView(mask->view()) : MaskView());
  return std::vector<double>(l.begin(), l.end());
}

// Runs f(tag, tol) on the double path and on every float ISA.
template <class F>
void for_each_path(F f) {
  {
    const std::string isa_name = "double (float64 reference)";
    CAPTURE(isa_name);
    f(double{}, 1e-10);
  }
  for (CpuIsa isa : available_cpu_isas()) {
    IsaScope scope(isa);
    const std::string isa_name = scope.name();
    CAPTURE(isa_name);
    f(float{}, 1e-5);
  }
}

}  // namespace

TEST_SUITE("losses") {
  TEST_CASE("fenchel_young: loss >= 0, gradient = p - q, and the loss matches the independent oracle") {
    for (const Transform& t : loss_transforms()) {
      CAPTURE(describe(t));
      for (std::size_t n : {1, 2, 7, 100}) {
        CAPTURE(n);
        const std::size_t rows = 6;
        const Matrix<double> z = float_exact_matrix(rows, n, 2.0, 10 + n);
        const Matrix<double> q = random_target(rows, n, 11 + n);
        for_each_path([&](auto tag, double tol) {
          using T = decltype(tag);
          const Matrix<T> zt = z.cast<T>(), qt = q.cast<T>();
          Matrix<T> grad(rows, n, T(-777)), p(rows, n);
          const auto l = loss_of(t, zt, qt, &grad);
          apply_forward<T>(t, zt.view(), p.view());
          double min_loss = kInf, oerr = 0, gerr = 0;
          for (std::size_t i = 0; i < rows; ++i) {
            min_loss = std::min(min_loss, l[i]);
            const double o = static_cast<double>(oracle_loss(t, row_of(z, i), row_of(q, i)));
            oerr = std::max(oerr, std::abs(l[i] - o) / std::max(1.0, std::abs(o)));
            for (std::size_t j = 0; j < n; ++j)
              gerr =
                  std::max(gerr, std::abs(static_cast<double>(grad(i, j)) - (static_cast<double>(p(i, j)) - q(i, j))));
          }
          CHECK(min_loss >= -tol);
          CHECK(oerr <= tol);
          CHECK(gerr <= tol);
        });
      }
    }
  }

  TEST_CASE("fenchel_young: the loss is 0 when the target is the prediction") {
    for (const Transform& t : loss_transforms()) {
      CAPTURE(describe(t));
      const std::size_t rows = 5, n = 40;
      const Matrix<double> z = float_exact_matrix(rows, n, 2.0, 20);
      for_each_path([&](auto tag, double tol) {
        using T = decltype(tag);
        // The target is the prediction of the same path (for float, its rows
        // sum to 1 only within float rounding, hence the looser tolerance).
        const Matrix<T> zt = z.cast<T>();
        Matrix<T> q(rows, n), grad(rows, n);
        apply_forward<T>(t, zt.view(), q.view());
        const auto l = loss_of(t, zt, q, &grad);
        for (std::size_t i = 0; i < rows; ++i) CHECK(std::abs(l[i]) <= 10 * tol);
        double g = 0;
        for (T x : grad.data) g = std::max(g, std::abs(static_cast<double>(x)));
        CHECK(g <= 1e-6);
      });
      // And strictly positive for any other target.
      Matrix<double> other = random_target(rows, n, 21);
      const auto l = loss_of(t, z, other);
      for (double x : l) CHECK(x > 1e-6);
    }
  }

  TEST_CASE("fenchel_young: the loss gradient matches finite differences") {
    const double eps = 1e-6;
    for (const Transform& t : loss_transforms()) {
      CAPTURE(describe(t));
      for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        const std::size_t n = 4 + 5 * seed;
        const std::vector<double> z = gaussian_row(n, 1.5, 30 + seed);
        const Matrix<double> q = random_target(1, n, 40 + seed);
        auto f = [&](const std::vector<double>& x) { return loss_of(t, row_matrix<double>(x), q)[0]; };
        Matrix<double> grad(1, n);
        loss_of(t, row_matrix<double>(z), q, &grad);
        const auto fd = fd_grad(f, z, eps);
        double err = 0;
        for (std::size_t j = 0; j < n; ++j) err = std::max(err, std::abs(grad(0, j) - fd[j]));
        CHECK(err <= 1e-7);
      }
    }
  }

  TEST_CASE("fenchel_young: softmax with a one-hot label is the cross-entropy, with a soft target the KL") {
    const std::size_t rows = 8, n = 50;
    const Matrix<double> z = float_exact_matrix(rows, n, 3.0, 50);
    std::vector<std::int64_t> labels(rows);
    for (std::size_t i = 0; i < rows; ++i) labels[i] = static_cast<std::int64_t>((7 * i + 3) % n);
    const Matrix<double> q = random_target(rows, n, 51);
    for_each_path([&](auto tag, double tol) {
      using T = decltype(tag);
      const Matrix<T> zt = z.cast<T>();
      std::vector<T> l(rows, T(-777));
      fenchel_young_loss<T>(Transform::softmax(), zt.view(), labels.data(), l.data());
      const auto lq = loss_of(Transform::softmax(), zt, q.cast<T>());
      for (std::size_t i = 0; i < rows; ++i) {
        CAPTURE(i);
        const auto row = row_of(z, i);
        const auto p = oracle_softmax(row);
        const double ce = -static_cast<double>(std::log(p[static_cast<std::size_t>(labels[i])]));
        CHECK(static_cast<double>(l[i]) == doctest::Approx(ce).epsilon(tol));
        LD kl = 0;
        for (std::size_t j = 0; j < n; ++j)
          if (q(i, j) > 0) kl += q(i, j) * std::log(static_cast<LD>(q(i, j)) / p[j]);
        CHECK(lq[i] == doctest::Approx(static_cast<double>(kl)).epsilon(tol).scale(1.0));
      }
    });
  }

  TEST_CASE("fenchel_young: sparsemax loss closed form") {
    // z = [1, 0.5, -1]: p = [0.75, 0.25, 0], tau = 0.25;
    // L(y) = -z_y + (1/2) sum_S (z_j^2 - tau^2) + 1/2 = -z_y + 1.0625.
    const Matrix<double> z = row_matrix<double>({1, 0.5, -1});
    const double expect[3] = {0.0625, 0.5625, 2.0625};
    for_each_path([&](auto tag, double tol) {
      using T = decltype(tag);
      const Matrix<T> zt = z.cast<T>();
      for (std::int64_t y = 0; y < 3; ++y) {
        CAPTURE(y);
        T l = T(-777);
        Matrix<T> grad(1, 3);
        fenchel_young_loss<T>(Transform::sparsemax(), zt.view(), &y, &l, grad.view());
        CHECK(static_cast<double>(l) == doctest::Approx(expect[y]).epsilon(tol));
        const double p[3] = {0.75, 0.25, 0};
        for (std::int64_t j = 0; j < 3; ++j)
          CHECK(static_cast<double>(grad(0, j)) == doctest::Approx(p[j] - (j == y)).epsilon(tol).scale(1.0));
      }
    });
    // The same closed form on random rows, with tau from the sorting oracle.
    for (std::uint64_t seed = 1; seed <= 10; ++seed) {
      const std::size_t n = 3 + 4 * seed;
      const std::vector<double> zr = gaussian_row(n, 1.0, 60 + seed);
      const std::int64_t y = static_cast<std::int64_t>(seed % n);
      const auto p = oracle_sparsemax(zr);
      LD tau = 0;
      for (std::size_t j = 0; j < n; ++j)
        if (p[j] > 0) {
          tau = zr[j] - p[j];
          break;
        }
      LD expectl = 0.5L - zr[static_cast<std::size_t>(y)];
      for (std::size_t j = 0; j < n; ++j)
        if (p[j] > 0) expectl += (static_cast<LD>(zr[j]) * zr[j] - tau * tau) / 2;
      double l = -777;
      fenchel_young_loss<double>(Transform::sparsemax(), row_matrix<double>(zr).view(), &y, &l);
      CHECK(l == doctest::Approx(static_cast<double>(expectl)).epsilon(1e-12));
    }
  }

  TEST_CASE("fenchel_young: the label overload equals the distribution overload with a one-hot target") {
    for (const Transform& t : loss_transforms()) {
      CAPTURE(describe(t));
      const std::size_t rows = 6, n = 33;
      const Matrix<double> z = float_exact_matrix(rows, n, 2.0, 70);
      std::vector<std::int64_t> labels(rows);
      Matrix<double> onehot(rows, n, 0.0);
      for (std::size_t i = 0; i < rows; ++i) {
        labels[i] = static_cast<std::int64_t>((5 * i + 1) % n);
        onehot(i, static_cast<std::size_t>(labels[i])) = 1.0;
      }
      for_each_path([&](auto tag, double tol) {
        using T = decltype(tag);
        const Matrix<T> zt = z.cast<T>();
        Matrix<T> g1(rows, n), g2(rows, n);
        std::vector<T> l1(rows, T(-777));
        fenchel_young_loss<T>(t, zt.view(), labels.data(), l1.data(), g1.view());
        const auto l2 = loss_of(t, zt, onehot.cast<T>(), &g2);
        for (std::size_t i = 0; i < rows; ++i)
          CHECK(static_cast<double>(l1[i]) == doctest::Approx(l2[i]).epsilon(tol).scale(1.0));
        CHECK(max_abs_err(g1, g2) <= tol);
      });
    }
  }

  TEST_CASE("fenchel_young: a mask restricts the problem to the unmasked entries") {
    for (const Transform& t : loss_transforms()) {
      CAPTURE(describe(t));
      const std::size_t rows = 4, n = 20;
      Matrix<double> z = float_exact_matrix(rows, n, 2.0, 80);
      Matrix<std::uint8_t> mask = random_mask(rows, n, 0.6, 81);
      for (std::size_t i = 0; i < rows; ++i) mask(i, 0) = 1;
      const Matrix<double> q = random_target(rows, n, 82, &mask);
      for (std::size_t i = 0; i < z.data.size(); ++i)
        if (!mask.data[i]) z.data[i] = (i % 2) ? kNaN : 1e6;  // ignored under the mask
      Matrix<double> grad(rows, n, -777.0);
      const auto l = loss_of(t, z, q, &grad, &mask);
      for (std::size_t i = 0; i < rows; ++i) {
        CAPTURE(i);
        std::vector<std::uint8_t> keep(mask.data.begin() + i * n, mask.data.begin() + (i + 1) * n);
        CHECK(l[i] == doctest::Approx(static_cast<double>(oracle_loss(t, row_of(z, i), row_of(q, i), &keep)))
                          .epsilon(1e-10)
                          .scale(1.0));
        for (std::size_t j = 0; j < n; ++j)
          if (!keep[j]) CHECK(grad(i, j) == 0.0);
      }
      // Labels: a masked label throws, an unmasked one matches the one-hot target.
      std::vector<std::int64_t> labels(rows, 0);
      double out[4];
      CHECK_NOTHROW(fenchel_young_loss<double>(t, z.view(), labels.data(), out, {}, mask.view()));
      for (std::size_t j = 1; j < n; ++j)
        if (!mask(2, j)) {
          labels[2] = static_cast<std::int64_t>(j);
          break;
        }
      REQUIRE(labels[2] != 0);
      CHECK_THROWS_WITH_AS(fenchel_young_loss<double>(t, z.view(), labels.data(), out, {}, mask.view()),
                           doctest::Contains("label"), entgraph::Error);
      // A target with mass on a masked entry throws.
      Matrix<double> bad = q;
      for (std::size_t j = 0; j < n; ++j)
        if (!mask(1, j)) {
          bad(1, j) = bad(1, 0);
          bad(1, 0) = 0;
          break;
        }
      CHECK_THROWS_WITH_AS(loss_of<double>(t, z, bad, nullptr, &mask), doctest::Contains("target"), entgraph::Error);
    }
  }

  TEST_CASE_TEMPLATE("fenchel_young: bad input throws and writes nothing", T, float, double) {
    const std::size_t rows = 3, n = 6;
    const Matrix<T> z = float_exact_matrix(rows, n, 1.0, 90).cast<T>();
    const Matrix<T> q = random_target(rows, n, 91).cast<T>();
    std::vector<T> l(rows, T(42));
    Matrix<T> grad(rows, n, T(42));
    auto untouched = [&] {
      return std::all_of(l.begin(), l.end(), [](T x) { return x == T(42); }) &&
             std::all_of(grad.data.begin(), grad.data.end(), [](T x) { return x == T(42); });
    };
    const Transform t = Transform::entmax15();
    // Targets that are not distributions.
    Matrix<T> q_sum = q, q_neg = q, q_nan = q;
    for (std::size_t j = 0; j < n; ++j) q_sum(2, j) *= T(0.99);
    for (std::size_t j = 0; j < n; ++j) q_neg(1, j) = 0;
    q_neg(1, 0) = T(1.25);  // sums to 1 but has a negative entry
    q_neg(1, 1) = T(-0.25);
    q_nan(0, 3) = std::numeric_limits<T>::quiet_NaN();
    for (const Matrix<T>* bad : {&q_sum, &q_neg, &q_nan}) {
      CHECK_THROWS_WITH_AS(fenchel_young_loss<T>(t, z.view(), bad->view(), l.data(), grad.view()),
                           doctest::Contains("target"), entgraph::Error);
      CHECK(untouched());
    }
    // Shapes.
    const Matrix<T> q_cols(rows, n + 1, T(1) / (n + 1)), q_rows(rows + 1, n, T(1) / n);
    CHECK_THROWS_WITH_AS(fenchel_young_loss<T>(t, z.view(), q_cols.view(), l.data()), doctest::Contains("target"),
                         entgraph::Error);
    CHECK_THROWS_WITH_AS(fenchel_young_loss<T>(t, z.view(), q_rows.view(), l.data()), doctest::Contains("target"),
                         entgraph::Error);
    Matrix<T> g_cols(rows, n + 1, T(42));
    CHECK_THROWS_WITH_AS(fenchel_young_loss<T>(t, z.view(), q.view(), l.data(), g_cols.view()),
                         doctest::Contains("grad"), entgraph::Error);
    CHECK(untouched());
    // Scores.
    Matrix<T> zb = z;
    zb(1, 2) = std::numeric_limits<T>::infinity();
    CHECK_THROWS_WITH_AS(fenchel_young_loss<T>(t, zb.view(), q.view(), l.data(), grad.view()),
                         doctest::Contains("scores"), entgraph::Error);
    CHECK(untouched());
    // Labels out of range.
    for (std::int64_t bad_label : {std::int64_t{-1}, static_cast<std::int64_t>(n), std::int64_t{1} << 40}) {
      CAPTURE(bad_label);
      std::vector<std::int64_t> labels = {0, bad_label, 1};
      CHECK_THROWS_WITH_AS(fenchel_young_loss<T>(t, z.view(), labels.data(), l.data(), grad.view()),
                           doctest::Contains("label"), entgraph::Error);
      CHECK(untouched());
    }
    // Transforms without a Fenchel-Young loss here.
    for (TransformKind kind : {TransformKind::adaptive_span, TransformKind::constrained_softmax}) {
      Transform other;
      other.kind = kind;
      CHECK_THROWS_AS(fenchel_young_loss<T>(other, z.view(), q.view(), l.data(), grad.view()), entgraph::Error);
      CHECK(untouched());
    }
    // Bad alpha.
    CHECK_THROWS_WITH_AS(fenchel_young_loss<T>(Transform::entmax(0.5), z.view(), q.view(), l.data()),
                         doctest::Contains("alpha"), entgraph::Error);
    CHECK(untouched());
  }

  TEST_CASE("fenchel_young: bit-identical for 1, 2 and 3 threads") {
    const std::size_t rows = 300, n = 1000;
    const Matrix<float> z = random_matrix<float>(rows, n, 2.0, 100);
    const Matrix<float> q = random_target(rows, n, 101).cast<float>();
    for (const Transform& t : loss_transforms()) {
      CAPTURE(describe(t));
      std::vector<float> first;
      for (std::size_t th : {1, 2, 3}) {
        CAPTURE(th);
        ThreadsScope scope(th);
        Matrix<float> grad(rows, n, -1.0f);
        std::vector<float> l(rows, -1.0f);
        fenchel_young_loss<float>(t, z.view(), q.view(), l.data(), grad.view());
        l.insert(l.end(), grad.data.begin(), grad.data.end());
        if (first.empty())
          first = l;
        else
          CHECK(bytes_equal(l, first));
      }
    }
  }
}  // TEST_SUITE

TEST_SUITE("losses") {
  TEST_CASE("fenchel_young: float32 losses are shift-invariant, matching float64 to float32 rounding at offsets of 1e4") {
    // The loss does not change when a constant is added to every score. With
    // p rounded to float32, <z, p - q> on unshifted scores around 1e4 lost
    // three digits (softmax, label 1: 1.18096 for 1.1806294).
    {
      const std::vector<float> z = {10000.5f, 10000.0f, 9999.25f, 9998.0f};
      const std::int64_t label = 1;
      float l = -1;
      fenchel_young_loss<float>(Transform::softmax(), ConstMatrix<float>(z.data(), 1, 4), &label, &l);
      CHECK(l == doctest::Approx(1.1806294).epsilon(2e-7));
    }
    const std::size_t rows = 16, n = 40;
    const Matrix<double> base = float_exact_matrix(rows, n, 3.0, 77);
    const Matrix<double> q = random_target(rows, n, 78);
    for (const Transform& t : loss_transforms()) {
      CAPTURE(t.name());
      for (double offset : {0.0, 1e4, -1e4, 3e4}) {
        CAPTURE(offset);
        Matrix<double> z = base;
        for (double& x : z.data) x += offset;
        const Matrix<float> zf = z.cast<float>();
        // The reference: the float64 loss of the same (float-rounded) scores.
        const std::vector<double> want = loss_of(t, zf.cast<double>(), q);
        for (CpuIsa isa : available_cpu_isas()) {
          IsaScope scope(isa);
          const std::string isa_name = scope.name();
          CAPTURE(isa_name);
          const std::vector<double> got = loss_of(t, zf, q.cast<float>());
          for (std::size_t i = 0; i < rows; ++i) {
            CAPTURE(i);
            // A few float32 roundings of the loss itself, and of its terms near 0.
            CHECK(std::abs(got[i] - want[i]) <= 8 * 0x1p-24 * std::max(1.0, std::abs(want[i])));
          }
        }
      }
    }
  }
}
