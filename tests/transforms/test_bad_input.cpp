// Misuse of the transform API: each throws entgraph::Error naming the
// offending argument, before anything is written.
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

constexpr double kSentinel = 42.0;

template <class T>
bool untouched(const Matrix<T>& m) {
  return std::all_of(m.data.begin(), m.data.end(), [](T x) { return x == static_cast<T>(kSentinel); });
}

// Evaluates `call`, expecting entgraph::Error whose message contains `needle`, with
// every output buffer still holding the sentinel.
#define EXPECT_REJECTED(call, needle, ...)                                  \
  do {                                                                      \
    CHECK_THROWS_WITH_AS(call, doctest::Contains(needle), entgraph::Error); \
    for (const auto* out_ : {__VA_ARGS__}) CHECK(untouched(*out_));         \
  } while (0)

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE_TEMPLATE("transforms: bad shapes, empty rows and non-finite scores throw and write nothing", T, float,
                     double) {
    for (const Transform& t : {Transform::softmax(), Transform::sparsemax(), Transform::entmax15(),
                               Transform::entmax(1.5), Transform::entmax(2.5), Transform::topk_softmax(3)}) {
      CAPTURE(describe(t));
      const std::size_t rows = 50, n = 300;
      Matrix<T> z = float_exact_matrix(rows, n, 1.0, 1).cast<T>();
      Matrix<T> p(rows, n, kSentinel), p_rows(rows + 1, n, kSentinel), p_cols(rows, n + 1, kSentinel);
      Matrix<std::uint8_t> mask_rows(rows - 1, n, 1), mask_cols(rows, n - 1, 1);
      EXPECT_REJECTED(apply_forward<T>(t, z.view(), p_rows.view()), "probs", &p_rows);
      EXPECT_REJECTED(apply_forward<T>(t, z.view(), p_cols.view()), "probs", &p_cols);
      EXPECT_REJECTED(apply_forward<T>(t, z.view(), p.view(), mask_rows.view()), "mask", &p);
      EXPECT_REJECTED(apply_forward<T>(t, z.view(), p.view(), mask_cols.view()), "mask", &p);
      // No columns.
      Matrix<T> z0(rows, 0), p0(rows, 0);
      CHECK_THROWS_WITH_AS(apply_forward<T>(t, z0.view(), p0.view()), doctest::Contains("scores"), entgraph::Error);
      // NaN or +inf anywhere in an unmasked entry, even in the last row.
      for (double bad : {kNaN, kInf}) {
        CAPTURE(bad);
        for (std::size_t at : {std::size_t{0}, rows * n / 2 + 7, rows * n - 1}) {
          CAPTURE(at);
          Matrix<T> zb = z;
          zb.data[at] = static_cast<T>(bad);
          EXPECT_REJECTED(apply_forward<T>(t, zb.view(), p.view()), "scores", &p);
          for (CpuIsa isa : available_cpu_isas()) {
            if (!std::is_same_v<T, float>) break;
            IsaScope scope(isa);
            const std::string isa_name = scope.name();
            CAPTURE(isa_name);
            EXPECT_REJECTED(apply_forward<T>(t, zb.view(), p.view()), "scores", &p);
          }
          // In place: the scores themselves must survive.
          Matrix<T> inplace = zb;
          CHECK_THROWS_AS(apply_forward<T>(t, inplace.view(), inplace.view()), entgraph::Error);
          CHECK(bytes_equal(inplace.data, zb.data));
        }
      }
      // Backward shapes.
      Matrix<T> pr(rows, n, T(1) / n), g(rows, n, T(1)), dz(rows, n, kSentinel), dz_rows(rows - 1, n, kSentinel),
          dz_cols(rows, n - 1, kSentinel), g_rows(rows + 1, n, T(1)), g_cols(rows, n + 1, T(1));
      EXPECT_REJECTED(apply_backward<T>(t, pr.view(), g_rows.view(), dz.view()), "grad_probs", &dz);
      EXPECT_REJECTED(apply_backward<T>(t, pr.view(), g_cols.view(), dz.view()), "grad_probs", &dz);
      EXPECT_REJECTED(apply_backward<T>(t, pr.view(), g.view(), dz_rows.view()), "grad_scores", &dz_rows);
      EXPECT_REJECTED(apply_backward<T>(t, pr.view(), g.view(), dz_cols.view()), "grad_scores", &dz_cols);
      Matrix<T> pr0(rows, 0), g0(rows, 0), dz0(rows, 0);
      CHECK_THROWS_AS(apply_backward<T>(t, pr0.view(), g0.view(), dz0.view()), entgraph::Error);
    }
  }

  TEST_CASE_TEMPLATE("entmax: alpha below 1, NaN or above kMaxEntmaxAlpha throws", T, float, double) {
    const Matrix<T> z = float_exact_matrix(3, 10, 1.0, 2).cast<T>();
    Matrix<T> p(3, 10, kSentinel), pr(3, 10, T(0.1)), g(3, 10, T(1)), dz(3, 10, kSentinel);
    T ga[3] = {T(kSentinel), T(kSentinel), T(kSentinel)};
    for (double alpha : {0.5, 0.0, -1.0, 0.9999999, 1.0 - 1e-12, kNaN, kMaxEntmaxAlpha * 1.0001, 1e308, kInf, -kInf}) {
      CAPTURE(alpha);
      EXPECT_REJECTED(entmax<T>(z.view(), p.view(), alpha), "alpha", &p);
      EXPECT_REJECTED(entmax_backward<T>(pr.view(), g.view(), dz.view(), alpha, ga), "alpha", &dz);
      EXPECT_REJECTED(transform_forward<T>(Transform::entmax(alpha), z.view(), p.view()), "alpha", &p);
      CHECK(ga[0] == T(kSentinel));
    }
    CHECK_NOTHROW(entmax<T>(z.view(), p.view(), 1.0));
    CHECK_NOTHROW(entmax<T>(z.view(), p.view(), kMaxEntmaxAlpha));
  }

  TEST_CASE_TEMPLATE("topk_softmax: k = 0 throws", T, float, double) {
    const Matrix<T> z = float_exact_matrix(3, 10, 1.0, 3).cast<T>();
    Matrix<T> p(3, 10, kSentinel);
    EXPECT_REJECTED(topk_softmax<T>(z.view(), p.view(), 0), " k", &p);
    EXPECT_REJECTED(transform_forward<T>(Transform::topk_softmax(0), z.view(), p.view()), " k", &p);
  }

  TEST_CASE_TEMPLATE("adaptive_span: non-finite span, ramp <= 0, bad scores and shapes throw", T, float, double) {
    const std::size_t rows = 4, n = 12;
    const Matrix<T> z = float_exact_matrix(rows, n, 1.0, 4).cast<T>();
    Matrix<T> p(rows, n, kSentinel), p_cols(rows, n + 1, kSentinel);
    std::vector<T> span(rows, T(3.5));
    AdaptiveSpan shape;
    shape.ramp = 4;
    CHECK_NOTHROW(adaptive_span<T>(z.view(), span.data(), shape, Matrix<T>(rows, n).view()));
    for (double bad : {kNaN, kInf, -kInf}) {
      CAPTURE(bad);
      std::vector<T> s2 = span;
      s2[rows - 1] = static_cast<T>(bad);
      EXPECT_REJECTED(adaptive_span<T>(z.view(), s2.data(), shape, p.view()), "span", &p);
    }
    for (double ramp : {0.0, -1.0, kNaN, -kInf}) {
      CAPTURE(ramp);
      AdaptiveSpan bad = shape;
      bad.ramp = ramp;
      EXPECT_REJECTED(adaptive_span<T>(z.view(), span.data(), bad, p.view()), "ramp", &p);
      Matrix<T> dz(rows, n, kSentinel);
      EXPECT_REJECTED(adaptive_span_backward<T>(z.view(), z.view(), span.data(), bad, dz.view()), "ramp", &dz);
    }
    Matrix<T> zb = z;
    zb(2, 5) = std::numeric_limits<T>::quiet_NaN();
    EXPECT_REJECTED(adaptive_span<T>(zb.view(), span.data(), shape, p.view()), "scores", &p);
    zb(2, 5) = std::numeric_limits<T>::infinity();
    EXPECT_REJECTED(adaptive_span<T>(zb.view(), span.data(), shape, p.view()), "scores", &p);
    EXPECT_REJECTED(adaptive_span<T>(z.view(), span.data(), shape, p_cols.view()), "probs", &p_cols);
    Matrix<std::uint8_t> mask(rows + 1, n, 1);
    EXPECT_REJECTED(adaptive_span<T>(z.view(), span.data(), shape, p.view(), mask.view()), "mask", &p);
    Matrix<T> g(rows, n + 1, T(1)), dz(rows, n, kSentinel);
    EXPECT_REJECTED(adaptive_span_backward<T>(z.view(), g.view(), span.data(), shape, dz.view()), "grad_probs", &dz);
  }

  TEST_CASE_TEMPLATE("constrained: bad bounds, bad scores and shapes throw", T, float, double) {
    const std::size_t rows = 4, n = 8;
    const Matrix<T> z = float_exact_matrix(rows, n, 1.0, 5).cast<T>();
    const Matrix<T> u(rows, n, T(0.25));
    for (int which = 0; which < 2; ++which) {
      CAPTURE(which);
      auto fwd = [&](const Matrix<T>& zz, const Matrix<T>& uu, Matrix<T>& pp) {
        if (which == 0)
          constrained_softmax<T>(zz.view(), uu.view(), pp.view());
        else
          constrained_sparsemax<T>(zz.view(), uu.view(), pp.view());
      };
      auto bwd = [&](const Matrix<T>& pp, const Matrix<T>& uu, const Matrix<T>& gg, Matrix<T>& dz, Matrix<T>* du) {
        const MatrixView<T> duv = du ? du->view() : MatrixView<T>();
        if (which == 0)
          constrained_softmax_backward<T>(pp.view(), uu.view(), gg.view(), dz.view(), duv);
        else
          constrained_sparsemax_backward<T>(pp.view(), uu.view(), gg.view(), dz.view(), duv);
      };
      Matrix<T> p(rows, n, kSentinel);
      for (double bad : {-0.25, -1e-30, kNaN, kInf}) {
        CAPTURE(bad);
        Matrix<T> ub = u;
        ub(rows - 1, n - 1) = static_cast<T>(bad);
        EXPECT_REJECTED(fwd(z, ub, p), "upper", &p);
      }
      const Matrix<T> u_rows(rows + 1, n, T(0.25)), u_cols(rows, n - 1, T(0.25));
      EXPECT_REJECTED(fwd(z, u_rows, p), "upper", &p);
      EXPECT_REJECTED(fwd(z, u_cols, p), "upper", &p);
      Matrix<T> zb = z;
      zb(1, 1) = std::numeric_limits<T>::quiet_NaN();
      EXPECT_REJECTED(fwd(zb, u, p), "scores", &p);
      Matrix<T> p_cols(rows, n + 1, kSentinel);
      EXPECT_REJECTED(fwd(z, u, p_cols), "probs", &p_cols);
      // Backward.
      const Matrix<T> pr(rows, n, T(1) / n), g(rows, n, T(1));
      Matrix<T> dz(rows, n, kSentinel), du(rows, n, kSentinel), du_cols(rows, n + 1, kSentinel);
      EXPECT_REJECTED(bwd(pr, u_cols, g, dz, &du), "upper", &dz, &du);
      EXPECT_REJECTED(bwd(pr, u, g, dz, &du_cols), "grad_upper", &dz, &du_cols);
      const Matrix<T> g_rows(rows + 1, n, T(1));
      EXPECT_REJECTED(bwd(pr, u, g_rows, dz, &du), "grad_probs", &dz, &du);
    }
  }

}  // TEST_SUITE
