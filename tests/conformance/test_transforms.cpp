// Conformance of the row-wise transforms: every case of support/cases.hpp on
// every target of support/targets.hpp (each CPU instruction set's float
// kernels, CUDA where it is registered and usable), forward and backward,
// against the core's float64 reference. The float64 reference itself is
// checked against independent oracles in transforms/test_conformance.cpp.
//
// Compiled into the core test binary, its WebAssembly build and the CUDA test
// binary: public headers and the test support headers only.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "support/cases.hpp"
#include "support/targets.hpp"
#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;
using cases::TransformCase;

namespace {

constexpr std::size_t kSizes[] = {1, 2, 3, 7, 16, 17, 100, 1000, 5000};
constexpr double kScales[] = {0.01, 0.1, 1.0, 10.0};

std::size_t rows_for(std::size_t n) { return n >= 1000 ? 2 : (n >= 100 ? 4 : 8); }

// Rows sum to 1 within 1e-5; 1e-6 for general-alpha entmax on the CPU, whose
// kernels renormalise.
double sum_tol(const Transform& t, const Target& target) {
  return t.kind == TransformKind::entmax && target.device == Device::cpu ? 1e-6 : 1e-5;
}

// The constrained kinds reject a row whose unmasked bounds sum below 1, which
// random masks make: they run unmasked here (test_constrained.cpp masks them
// with bounds made for the mask).
bool maskable(const TransformCase& c) { return !c.constrained(); }

// A target's float forward against the float64 reference pd of the same
// float-exact scores z: finite, non-negative, masked entries exactly 0, rows
// sum to 1 (0 where the reference row is empty), and each row within 1e-5 of
// the reference relative to its largest weight, widened for alpha > 2 to twice
// the rounding bound of entmax_conditioning (float's unit roundoff 6e-8).
void check_forward(const Target& target, const TransformCase& c, const Matrix<double>& z, const Matrix<double>& pd,
                   const Matrix<float>& pf, const Matrix<std::uint8_t>* mask) {
  const Transform t = c.transform(z.cols);
  const DistStats st = dist_stats(pf, mask, [&](std::size_t i) {
    for (std::size_t j = 0; j < pd.cols; ++j)
      if (pd(i, j) != 0) return false;
    return true;
  });
  CHECK(st.non_finite == 0);
  CHECK(st.min_p >= 0.0);
  CHECK(st.masked_nonzero == 0);
  CHECK(st.max_sum_err <= sum_tol(t, target));
  std::size_t bad_rows = 0;
  double worst = 0;
  for (std::size_t i = 0; i < z.rows; ++i) {
    std::vector<double> zi = row_of(z, i);
    if (mask)
      for (std::size_t j = 0; j < z.cols; ++j)
        if (!(*mask)(i, j)) zi[j] = -kInf;
    const std::vector<double> ri = row_of(pd, i);
    const std::vector<LD> ref(ri.begin(), ri.end());
    const double tol = std::max(1e-5, 2 * entmax_conditioning(t, zi, ref, 6e-8));
    const double err = row_rel_err(row_of(pf, i), ref);
    worst = std::max(worst, err / tol);
    bad_rows += !(err <= tol);
  }
  CAPTURE(worst);  // the worst row's error in units of its tolerance
  CHECK(bad_rows == 0);
}

// The rows of a float64 matrix, as seen by a float result: entries beyond
// float's range must be infinite with the right sign; the others within `tol`
// relative to max(1, the row's largest finite |reference|).
std::size_t count_far(const Matrix<float>& got, const Matrix<double>& ref, double tol, double* worst) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < ref.rows; ++i) {
    double scale = 1;
    for (std::size_t j = 0; j < ref.cols; ++j)
      if (std::abs(ref(i, j)) <= std::numeric_limits<float>::max()) scale = std::max(scale, std::abs(ref(i, j)));
    for (std::size_t j = 0; j < ref.cols; ++j) {
      const double r = ref(i, j), g = got(i, j);
      if (std::abs(r) > std::numeric_limits<float>::max()) {
        bad += !(std::isinf(g) && (g > 0) == (r > 0));
        continue;
      }
      const double d = std::abs(g - r) / scale;
      *worst = std::max(*worst, std::isnan(d) ? kInf : d);
      bad += !(d <= tol);
    }
  }
  return bad;
}


}  // namespace

TEST_SUITE("conformance") {
  TEST_CASE("conformance: the case list has unique names that spell their parameters") {
    std::set<std::string> names;
    for (const TransformCase& c : cases::transform_cases()) {
      CAPTURE(c.name);
      CHECK(names.insert(c.name).second);
      std::string expect = Transform{c.kind, 1.0, 0}.name();
      if (c.kind == TransformKind::entmax) expect = "entmax_alpha" + c.label(0).substr(6);  // label "alpha=1.25"
      if (c.kind == TransformKind::topk_softmax) expect = "topk_softmax" + (c.k ? "_k" + std::to_string(c.k) : "");
      CHECK(expect == c.name);
    }
    std::set<std::string> attention_names;
    for (const cases::AttentionCase& c : cases::attention_cases()) CHECK(attention_names.insert(c.name).second);
  }

  TEST_CASE("conformance: every transform case matches the float64 reference on every target") {
    const std::vector<Target> targets = conformance_targets();
    for (const TransformCase& c : cases::transform_cases()) {
      CAPTURE(c.name);
      std::uint64_t seed = 100;
      for (std::size_t n : kSizes) {
        for (double scale : kScales) {
          CAPTURE(n);
          CAPTURE(scale);
          const std::size_t rows = rows_for(n);
          const Matrix<double> zd = float_exact_matrix(rows, n, scale, ++seed);
          const Matrix<float> zf = zd.cast<float>();
          Matrix<double> pd(rows, n);
          cases::forward<double>(c, cases::extra_inputs<double>(c, rows, n), zd.view(), pd.view());
          const cases::ExtraInputs<float> extra = cases::extra_inputs<float>(c, rows, n);
          for (const Target& target : targets) {
            if (!supports(target, c)) continue;
            CAPTURE(target.name);
            Matrix<float> pf(rows, n, -7.0f);
            target_forward(target, c, extra, zf.view(), pf.view());
            check_forward(target, c, zd, pd, pf, nullptr);
          }
        }
      }
    }
  }

  TEST_CASE("conformance: every transform case matches the float64 reference with random masks on every target") {
    const std::vector<Target> targets = conformance_targets();
    for (const TransformCase& c : cases::transform_cases()) {
      if (!maskable(c)) continue;
      CAPTURE(c.name);
      std::uint64_t seed = 500;
      for (std::size_t n : {3, 17, 100, 1000}) {
        for (double keep : {0.1, 0.5, 0.9}) {
          CAPTURE(n);
          CAPTURE(keep);
          const std::size_t rows = 8;
          const Matrix<double> zd = float_exact_matrix(rows, n, 2.0, ++seed);
          const Matrix<float> zf = zd.cast<float>();
          Matrix<std::uint8_t> mask = random_mask(rows, n, keep, ++seed);
          for (std::size_t j = 0; j < n; ++j) mask(rows - 1, j) = 0;  // one fully masked row
          Matrix<double> pd(rows, n);
          cases::forward<double>(c, cases::extra_inputs<double>(c, rows, n), zd.view(), pd.view(), mask.view());
          const cases::ExtraInputs<float> extra = cases::extra_inputs<float>(c, rows, n);
          for (const Target& target : targets) {
            if (!supports(target, c)) continue;
            CAPTURE(target.name);
            Matrix<float> pf(rows, n, -7.0f);
            target_forward(target, c, extra, zf.view(), pf.view(), mask.view());
            check_forward(target, c, zd, pd, pf, &mask);
          }
        }
      }
    }
  }

  TEST_CASE("conformance: every transform case's backward matches the float64 backward on every target") {
    // probs = the float64 forward (rounded to float), with a mask where the
    // kind allows one; dp ~ N(0, 1). dz within 1e-5 of the float64 backward
    // relative to max(1, the row's largest |dz|), exactly 0 off the support;
    // the parameter gradients (CPU targets) within 1e-4.
    const std::vector<Target> targets = conformance_targets();
    for (const TransformCase& c : cases::transform_cases()) {
      CAPTURE(c.name);
      for (std::size_t n : {1, 3, 17, 100, 1000}) {
        CAPTURE(n);
        const std::size_t rows = 4;
        const Matrix<double> z = float_exact_matrix(rows, n, 2.0, 4000 + n);
        Matrix<std::uint8_t> mask = random_mask(rows, n, 0.8, 4001 + n);
        mask(0, 0) = 1;
        if (!maskable(c)) mask = Matrix<std::uint8_t>(rows, n, 1);
        const cases::ExtraInputs<double> extra_d = cases::extra_inputs<double>(c, rows, n);
        const cases::ExtraInputs<float> extra_f = cases::extra_inputs<float>(c, rows, n);
        Matrix<double> pd(rows, n);
        cases::forward<double>(c, extra_d, z.view(), pd.view(), mask.view());
        const Matrix<float> pf = pd.cast<float>(), gf = random_matrix<float>(rows, n, 1.0, 4002 + n);
        const Matrix<double> p2 = pf.cast<double>(), gd = gf.cast<double>();
        Matrix<double> dzd(rows, n), dud(rows, n);
        std::vector<double> gad(rows, kNaN), gsd(rows, kNaN);
        cases::backward<double>(c, extra_d, p2.view(), gd.view(), dzd.view(), {gad.data(), gsd.data(), dud.view()});
        for (const Target& target : targets) {
          if (!supports(target, c, Op::backward)) continue;
          CAPTURE(target.name);
          const bool params = full_float_api(target) && c.param_grads();
          Matrix<float> dzf(rows, n, -3.0f), duf(rows, n, -3.0f);
          std::vector<float> gaf(rows, -3.0f), gsf(rows, -3.0f);
          cases::ParamGrads<float> grads;
          if (params) grads = {gaf.data(), gsf.data(), duf.view()};
          target_backward(target, c, extra_f, pf.view(), gf.view(), dzf.view(), grads);
          double worst = 0;
          const std::size_t far = count_far(dzf, dzd, 1e-5, &worst);
          CAPTURE(worst);
          CHECK(far == 0);
          std::size_t off_support_nonzero = 0;
          for (std::size_t j = 0; j < rows * n; ++j) off_support_nonzero += pf.data[j] == 0 && dzf.data[j] != 0;
          CHECK(off_support_nonzero == 0);
          if (!params) continue;
          auto close = [](double got, double ref) {
            return std::abs(got - ref) <= 1e-4 * std::max(1.0, std::abs(ref));
          };
          for (std::size_t i = 0; i < rows; ++i) {
            CAPTURE(i);
            if (c.kind == TransformKind::entmax) CHECK(close(gaf[i], gad[i]));
            if (c.kind == TransformKind::adaptive_span) CHECK(close(gsf[i], gsd[i]));
          }
          if (c.constrained()) {
            double upper_worst = 0;
            CHECK(count_far(duf, dud, 1e-4, &upper_worst) == 0);
          }
        }
      }
    }
  }
}  // TEST_SUITE
