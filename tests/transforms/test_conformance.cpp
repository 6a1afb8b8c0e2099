// The float64 reference of every transform against the independent
// long-double oracles of transform_support.hpp, large alpha on every path
// against the oracle, and the generic entry points (transform_forward,
// names). Every float kernel on every target against the float64 reference:
// conformance/test_transforms.cpp.
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

constexpr double kScales[] = {0.01, 0.1, 1.0, 10.0};

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE("entmax: large alpha (6, 10, 100) matches the oracle on every path within its conditioning") {
    // For alpha > 2 a support entry near the threshold is ill-conditioned
    // (dp/dx ~ p^(2-alpha)); the tolerance is twice the bound of
    // entmax_conditioning, and at least 1e-9 (float64) or 1e-5 (float).
    for (double alpha : {6.0, 10.0, 100.0}) {
      CAPTURE(alpha);
      const Transform t = Transform::entmax(alpha);
      std::uint64_t seed = 700;
      for (std::size_t n : {7, 100, 1000}) {
        for (double scale : {0.001, 0.01, 0.1, 1.0}) {
          CAPTURE(n);
          CAPTURE(scale);
          const Matrix<double> z = float_exact_matrix(3, n, scale, ++seed);
          const Matrix<float> zf = z.cast<float>();
          std::vector<std::vector<LD>> oracle;
          for (std::size_t i = 0; i < 3; ++i) oracle.push_back(oracle_forward(t, row_of(z, i)));
          auto check = [&](const auto& p, double base, double eps) {
            for (std::size_t i = 0; i < 3; ++i) {
              CAPTURE(i);
              const double tol = std::max(base, 2 * entmax_conditioning(t, row_of(z, i), oracle[i], eps));
              CAPTURE(tol);
              CHECK(row_rel_err(row_of(p, i), oracle[i]) <= tol);
            }
          };
          Matrix<double> pd(3, n);
          apply_forward<double>(t, z.view(), pd.view());
          check(pd, 1e-9, 1.1e-16);
          for (CpuIsa isa : available_cpu_isas()) {
            IsaScope scope(isa);
            const std::string isa_name = scope.name();
            CAPTURE(isa_name);
            Matrix<float> pf(3, n);
            apply_forward<float>(t, zf.view(), pf.view());
            check(pf, 1e-5, 6e-8);
          }
        }
      }
    }
  }

  TEST_CASE("transforms: float64 reference matches the independent long-double oracles") {
    for (const Transform& t : basic_transforms()) {
      CAPTURE(describe(t));
      std::uint64_t seed = 900;
      for (std::size_t n : {1, 2, 3, 7, 16, 17, 100, 1000}) {
        for (double scale : kScales) {
          for (bool masked : {false, true}) {
            CAPTURE(n);
            CAPTURE(scale);
            CAPTURE(masked);
            const std::vector<double> z = gaussian_row(n, scale, ++seed);
            std::vector<std::uint8_t> keep(n, 1);
            if (masked) {
              std::mt19937_64 rng(seed);
              for (auto& k : keep) k = (rng() % 3) != 0;
              keep[n / 2] = 1;
            }
            const auto p = lib_forward(t, z, masked ? &keep : nullptr);
            const auto o = oracle_forward(t, z, masked ? &keep : nullptr);
            CHECK(row_rel_err(p, o) <= 1e-9);
            // The support: no exact zero where the oracle has a weight above
            // 1e-12 and no weight above 1e-12 where the oracle has an exact zero.
            std::size_t support_mismatch = 0;
            for (std::size_t j = 0; j < n; ++j)
              if ((p[j] == 0 && o[j] > 1e-12L) || (o[j] == 0 && p[j] > 1e-12)) ++support_mismatch;
            CHECK(support_mismatch == 0);
          }
        }
      }
    }
  }

  TEST_CASE("transforms: transform_forward and transform_backward equal the direct functions") {
    const Matrix<double> zd = float_exact_matrix(6, 37, 1.5, 3);
    const Matrix<float> zf = zd.cast<float>();
    const Matrix<float> g = random_matrix<float>(6, 37, 1.0, 4);
    for (const Transform& t : basic_transforms()) {
      CAPTURE(describe(t));
      Matrix<float> p1(6, 37), p2(6, 37, 3.0f), d1(6, 37), d2(6, 37, 3.0f);
      std::vector<float> a1(6, 0.0f), a2(6, 5.0f);
      apply_forward<float>(t, zf.view(), p1.view());
      transform_forward<float>(t, zf.view(), p2.view());
      CHECK(bytes_equal(p1.data, p2.data));
      apply_backward<float>(t, p1.view(), g.view(), d1.view(), a1.data());
      // grad_alpha only where the kind has an alpha to learn.
      transform_backward<float>(t, p1.view(), g.view(), d2.view(),
                                t.kind == TransformKind::entmax ? a2.data() : nullptr);
      CHECK(bytes_equal(d1.data, d2.data));
      if (t.kind == TransformKind::entmax) CHECK(bytes_equal(a1, a2));
    }
  }

  TEST_CASE("transforms: transform_forward rejects kinds that need extra inputs") {
    const Matrix<double> z = float_exact_matrix(2, 5, 1.0, 3);
    Matrix<double> p(2, 5, 9.0), g(2, 5, 9.0);
    for (TransformKind kind :
         {TransformKind::adaptive_span, TransformKind::constrained_softmax, TransformKind::constrained_sparsemax}) {
      Transform t;
      t.kind = kind;
      CHECK_THROWS_AS(transform_forward<double>(t, z.view(), p.view()), entgraph::Error);
      CHECK_THROWS_AS(transform_backward<double>(t, z.view(), z.view(), g.view()), entgraph::Error);
    }
    CHECK(p.data == std::vector<double>(10, 9.0));
    CHECK(g.data == std::vector<double>(10, 9.0));
  }

  TEST_CASE("transforms: names, parse_transform_kind and tsallis_alpha") {
    CHECK(Transform::softmax().name() == "softmax");
    CHECK(Transform::sparsemax().name() == "sparsemax");
    CHECK(Transform::entmax15().name() == "entmax15");
    CHECK(Transform::entmax(1.25).name() == "entmax(alpha=1.25)");
    CHECK(Transform::topk_softmax(8).name() == "topk_softmax(k=8)");
    // A head's alpha: 1.5 takes entmax15's exact kernel, every other alpha the general one.
    CHECK(Transform::for_alpha(1.5).kind == TransformKind::entmax15);
    for (double alpha : {1.0, 1.25, 2.0, 3.0}) {
      CHECK(Transform::for_alpha(alpha).kind == TransformKind::entmax);
      CHECK(Transform::for_alpha(alpha).alpha == alpha);
    }

    CHECK(parse_transform_kind("softmax") == TransformKind::softmax);
    CHECK(parse_transform_kind("sparsemax") == TransformKind::sparsemax);
    CHECK(parse_transform_kind("entmax15") == TransformKind::entmax15);
    CHECK(parse_transform_kind("entmax") == TransformKind::entmax);
    CHECK(parse_transform_kind("topk") == TransformKind::topk_softmax);
    CHECK(parse_transform_kind("topk_softmax") == TransformKind::topk_softmax);
    CHECK(parse_transform_kind("adaptive_span") == TransformKind::adaptive_span);
    CHECK(parse_transform_kind("constrained_softmax") == TransformKind::constrained_softmax);
    CHECK(parse_transform_kind("constrained_sparsemax") == TransformKind::constrained_sparsemax);
    // The error names the accepted names.
    CHECK_THROWS_WITH_AS(parse_transform_kind("softmin"), doctest::Contains("sparsemax"), entgraph::Error);
    CHECK_THROWS_WITH_AS(parse_transform_kind(""), doctest::Contains("entmax15"), entgraph::Error);

    CHECK(Transform::softmax().tsallis_alpha() == 1.0);
    CHECK(Transform::topk_softmax(3).tsallis_alpha() == 1.0);
    CHECK(Transform::sparsemax().tsallis_alpha() == 2.0);
    CHECK(Transform::entmax15().tsallis_alpha() == 1.5);
    CHECK(Transform::entmax(1.7).tsallis_alpha() == 1.7);
    Transform span;
    span.kind = TransformKind::adaptive_span;
    CHECK_THROWS_AS(span.tsallis_alpha(), entgraph::Error);
  }

}  // TEST_SUITE
