// Adaptive attention span (Sukhbaatar et al. 2019): the soft mask, the
// forward against an independent oracle, spans beyond the row, the backward
// (scores and span) against finite differences, and dynamic span.
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

template <class T>
Matrix<T> span_forward(const Matrix<double>& s, const std::vector<double>& z, const AdaptiveSpan& shape,
                       const Matrix<std::uint8_t>* mask = nullptr) {
  const Matrix<T> st = s.cast<T>();
  std::vector<T> zt(z.begin(), z.end());
  Matrix<T> p(s.rows, s.cols, T(-1));
  adaptive_span<T>(st.view(), zt.data(), shape, p.view(), mask ? MaskView(mask->view()) : MaskView());
  return p;
}

double oracle_err(const Matrix<double>& s, const std::vector<double>& z, const AdaptiveSpan& shape,
                  const Matrix<double>& p, const Matrix<std::uint8_t>* mask = nullptr) {
  double worst = 0;
  for (std::size_t i = 0; i < s.rows; ++i) {
    std::vector<std::uint8_t> keep;
    if (mask) keep.assign(mask->data.begin() + i * s.cols, mask->data.begin() + (i + 1) * s.cols);
    const auto o = oracle_span(row_of(s, i), z[i], shape.ramp, static_cast<std::ptrdiff_t>(i) + shape.query_offset,
                               mask ? &keep : nullptr);
    worst = std::max(worst, row_rel_err(row_of(p, i), o));
  }
  return worst;
}

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE("adaptive_span: a span from facebookresearch/adaptive-span gives its attention (computed by hand)") {
    // Its AdaptiveMask over max_size = 4 keys (oldest first, the last one the
    // previous token): template linspace(1 - 4, 0) = [-3, -2, -1, 0], mask =
    // clamp((template + current_val * 4) / ramp + 1, 0, 1); with
    // current_val = 0.25 and ramp = 2: [0, 0.5, 1, 1]. Attention is
    // softmax(s) * mask, renormalised.
    const double current_val = 0.25, max_size = 4, ramp = 2;
    const std::vector<double> s = {0.5, -0.25, 1.0, 0.125};
    const std::vector<double> fb_mask = {0.0, 0.5, 1.0, 1.0};
    std::vector<double> want(4);
    double total = 0;
    for (std::size_t j = 0; j < 4; ++j) total += want[j] = fb_mask[j] * std::exp(s[j]);
    for (double& w : want) w /= total;
    // Here: the query at position 4, keys 0..3 (distances 4, 3, 2, 1).
    const double z = span_from_adaptive_span_repo(current_val, max_size);
    CHECK(z == 2.0);
    AdaptiveSpan shape;
    shape.ramp = ramp;
    shape.query_offset = 4;
    const Matrix<double> sm = [&] {
      Matrix<double> m(1, 4);
      m.data = s;
      return m;
    }();
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      const Matrix<float> p = span_forward<float>(sm, {z}, shape);
      CHECK(p(0, 0) == 0.0f);  // the mask's 0 is exactly 0 here too
      for (std::size_t j = 1; j < 4; ++j) CHECK(p(0, j) == doctest::Approx(want[j]).epsilon(1e-6));
    }
    const Matrix<double> pd = span_forward<double>(sm, {z}, shape);
    for (std::size_t j = 0; j < 4; ++j) CHECK(pd(0, j) == doctest::Approx(want[j]).epsilon(1e-14));
    // Without the conversion (z = current_val * max_size) the keys shift by one.
    CHECK(span_forward<double>(sm, {current_val * max_size}, shape)(0, 1) == 0.0);
    CHECK_THROWS_WITH_AS(span_from_adaptive_span_repo(0.5, 0), doctest::Contains("max_span must be finite and > 0"),
                         Error);
    CHECK_THROWS_WITH_AS(span_from_adaptive_span_repo(std::nan(""), 8), doctest::Contains("current_val"), Error);
  }

  TEST_CASE("adaptive_span: the span mask is 1 up to z, 0 from z + R, linear and non-increasing between") {
    for (double z : {0.0, 2.5, 17.0}) {
      for (double ramp : {0.5, 1.0, 32.0}) {
        CAPTURE(z);
        CAPTURE(ramp);
        double prev_d = 2, prev_f = 2;
        std::size_t increases = 0, wrong = 0;
        for (int k = -40; k <= 4000; ++k) {
          const double x = -5.0 + k * 0.0125 * (1 + ramp / 4);
          const double md = span_mask<double>(x, z, ramp);
          const float mf = span_mask<float>(static_cast<float>(x), static_cast<float>(z), static_cast<float>(ramp));
          increases += (md > prev_d) + (mf > prev_f);
          prev_d = md;
          prev_f = mf;
          const double expect = x <= z ? 1.0 : (x >= z + ramp ? 0.0 : (ramp + z - x) / ramp);
          wrong += std::abs(md - expect) > 1e-14;
          wrong += std::abs(mf - expect) > 1e-6 * (1 + std::abs(x) / ramp);
          if (x <= z) wrong += md != 1.0;
          if (x >= z + ramp) wrong += md != 0.0 || mf != 0.0f;
        }
        CHECK(increases == 0);
        CHECK(wrong == 0);
      }
    }
    CHECK(span_mask<double>(3.0, 2.0, 4.0) == 0.75);
    CHECK(span_mask<double>(-10.0, 2.0, 4.0) == 1.0);
    CHECK(span_mask<double>(6.0, 2.0, 4.0) == 0.0);
    CHECK(span_mask<float>(4.0f, 2.0f, 4.0f) == 0.5f);
  }

  TEST_CASE("adaptive_span: matches the independent oracle on every ISA") {
    for (std::size_t n : {1, 7, 64, 300}) {
      for (double ramp : {1.0, 8.0, 32.0}) {
        CAPTURE(n);
        CAPTURE(ramp);
        const std::size_t rows = 5;
        const Matrix<double> s = float_exact_matrix(rows, n, 2.0, 10 + n);
        AdaptiveSpan shape;
        shape.ramp = ramp;
        shape.query_offset = static_cast<std::ptrdiff_t>(n) - static_cast<std::ptrdiff_t>(rows);
        const std::vector<double> z = {0.0, 3.25, 10.5, 40.0, 1000.0};
        Matrix<std::uint8_t> causal(rows, n, 1);
        for (std::size_t i = 0; i < rows; ++i)
          for (std::size_t j = 0; j < n; ++j)
            if (static_cast<std::ptrdiff_t>(j) > static_cast<std::ptrdiff_t>(i) + shape.query_offset) causal(i, j) = 0;
        const Matrix<double> pd = span_forward<double>(s, z, shape);
        CHECK(oracle_err(s, z, shape, pd) <= 1e-12);
        const Matrix<double> pdc = span_forward<double>(s, z, shape, &causal);
        CHECK(oracle_err(s, z, shape, pdc, &causal) <= 1e-12);
        CHECK(dist_stats(pdc, &causal).masked_nonzero == 0);
        for (CpuIsa isa : available_cpu_isas()) {
          IsaScope scope(isa);
          const std::string isa_name = scope.name();
          CAPTURE(isa_name);
          const Matrix<float> pf = span_forward<float>(s, z, shape);
          const DistStats st = dist_stats(pf);
          CHECK(st.non_finite == 0);
          CHECK(st.min_p >= 0.0);
          CHECK(st.max_sum_err <= 1e-5);
          CHECK(row_rel_err(pf, pd) <= 1e-5);
          const Matrix<float> pfc = span_forward<float>(s, z, shape, &causal);
          CHECK(row_rel_err(pfc, pdc) <= 1e-5);
          CHECK(dist_stats(pfc, &causal).masked_nonzero == 0);
        }
      }
    }
  }

  TEST_CASE("adaptive_span: keys beyond the span get exactly 0 and a huge span is softmax") {
    const std::size_t rows = 4, n = 200;
    const Matrix<double> s = float_exact_matrix(rows, n, 1.0, 3);
    AdaptiveSpan shape;
    shape.ramp = 16.0;
    shape.query_offset = 150;
    const std::vector<double> z = {5.0, 20.5, 60.0, 0.0};
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      const Matrix<float> p = span_forward<float>(s, z, shape);
      std::size_t beyond_nonzero = 0, inside_zero = 0;
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < n; ++j) {
          const double x = static_cast<double>(i) + 150 - static_cast<double>(j);
          if (x >= z[i] + shape.ramp) beyond_nonzero += p(i, j) != 0;
          if (x < z[i] + shape.ramp) inside_zero += p(i, j) == 0;
        }
      CHECK(beyond_nonzero == 0);
      CHECK(inside_zero == 0);
      // Huge span: every key has m = 1.
      const std::vector<double> huge(rows, 1e9);
      Matrix<float> soft(rows, n);
      const Matrix<float> sf = s.cast<float>();
      softmax<float>(sf.view(), soft.view());
      CHECK(row_rel_err(span_forward<float>(s, huge, shape), soft) <= 1e-6);
    }
    // A row whose every key is beyond the span gives zeros.
    AdaptiveSpan far;
    far.ramp = 2.0;
    far.query_offset = 1000;
    const Matrix<double> p = span_forward<double>(s, {1.0, 1.0, 1.0, 1.0}, far);
    CHECK(p.data == std::vector<double>(rows * n, 0.0));
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      const Matrix<float> pf = span_forward<float>(s, {1.0, 1.0, 1.0, 1.0}, far);
      CHECK(pf.data == std::vector<float>(rows * n, 0.0f));
    }
  }

  TEST_CASE("adaptive_span: backward matches finite differences in the scores and in the span") {
    const std::size_t rows = 3, n = 24;
    const Matrix<double> s = random_matrix<double>(rows, n, 1.0, 5);
    const Matrix<double> g = random_matrix<double>(rows, n, 1.0, 6);
    AdaptiveSpan shape;
    shape.ramp = 5.5;
    shape.query_offset = 15;
    // Non-integer spans: no key sits on a ramp end (x = z or x = z + R).
    const std::vector<double> z = {3.3, 7.71, 12.1};
    const Matrix<double> p = span_forward<double>(s, z, shape);
    Matrix<double> dz(rows, n, kNaN);
    std::vector<double> dspan(rows, kNaN);
    adaptive_span_backward<double>(p.view(), g.view(), z.data(), shape, dz.view(), dspan.data());
    const double eps = 1e-6;
    for (std::size_t i = 0; i < rows; ++i) {
      CAPTURE(i);
      const auto gi = row_of(g, i);
      // Scores.
      auto fs = [&](const std::vector<double>& x) {
        Matrix<double> sm = s;
        for (std::size_t j = 0; j < n; ++j) sm(i, j) = x[j];
        return row_of(span_forward<double>(sm, z, shape), i);
      };
      const auto fd = fd_vjp(fs, row_of(s, i), gi, eps);
      double err = 0;
      for (std::size_t j = 0; j < n; ++j) err = std::max(err, std::abs(dz(i, j) - fd[j]));
      CHECK(err <= 1e-7);
      // Span.
      auto lz = [&](double zi) {
        std::vector<double> zz = z;
        zz[i] = zi;
        return dot(gi, row_of(span_forward<double>(s, zz, shape), i));
      };
      const double fdz = (lz(z[i] + eps) - lz(z[i] - eps)) / (2 * eps);
      CHECK(std::abs(fdz) > 1e-4);  // the span matters for this row
      CHECK(dspan[i] == doctest::Approx(fdz).epsilon(1e-6).scale(1.0));
    }
    // Without grad_span the score gradient is the same.
    Matrix<double> dz2(rows, n, kNaN);
    adaptive_span_backward<double>(p.view(), g.view(), z.data(), shape, dz2.view());
    CHECK(bytes_equal(dz.data, dz2.data));
    // Float kernels agree with the float64 backward.
    const Matrix<float> pf = p.cast<float>(), gf = g.cast<float>();
    const Matrix<double> p2 = pf.cast<double>(), g2 = gf.cast<double>();
    Matrix<double> dzr(rows, n);
    std::vector<double> dspanr(rows);
    adaptive_span_backward<double>(p2.view(), g2.view(), z.data(), shape, dzr.view(), dspanr.data());
    const std::vector<float> zf(z.begin(), z.end());
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      Matrix<float> dzf(rows, n);
      std::vector<float> dspanf(rows);
      adaptive_span_backward<float>(pf.view(), gf.view(), zf.data(), shape, dzf.view(), dspanf.data());
      CHECK(max_abs_err(dzf, dzr) <= 1e-6);
      for (std::size_t i = 0; i < rows; ++i) CHECK(dspanf[i] == doctest::Approx(dspanr[i]).epsilon(1e-5).scale(1.0));
    }
  }

  TEST_CASE("adaptive_span: grad_span is 0 when no key lies strictly inside the ramp") {
    const std::size_t n = 10;
    const Matrix<double> s = random_matrix<double>(1, n, 1.0, 8);
    const Matrix<double> g = random_matrix<double>(1, n, 1.0, 9);
    AdaptiveSpan shape;
    shape.ramp = 0.5;
    shape.query_offset = 9;
    // Integer distances with z = 3, R = 0.5: x <= 3 gives m = 1, x >= 4 gives m = 0.
    const std::vector<double> z = {3.0};
    const Matrix<double> p = span_forward<double>(s, z, shape);
    Matrix<double> dz(1, n);
    double dspan = kNaN;
    adaptive_span_backward<double>(p.view(), g.view(), z.data(), shape, dz.view(), &dspan);
    CHECK(dspan == 0.0);
  }

  TEST_CASE("dynamic_span: z_t = S sigmoid(v . x_t + b) and its backward matches finite differences") {
    const std::size_t n = 6, d = 5;
    const double max_span = 64.0, b = -0.3;
    const Matrix<double> h = random_matrix<double>(n, d, 1.0, 11);
    const std::vector<double> v = gaussian_row(d, 0.7, 12), gz = gaussian_row(n, 1.0, 13);
    std::vector<double> z(n, kNaN);
    dynamic_span<double>(h.view(), v.data(), b, max_span, z.data());
    for (std::size_t t = 0; t < n; ++t) {
      double a = b;
      for (std::size_t k = 0; k < d; ++k) a += v[k] * h(t, k);
      CHECK(z[t] == doctest::Approx(max_span / (1 + std::exp(-a))).epsilon(1e-14));
    }
    // Loss L = sum_t gz_t z_t.
    auto loss = [&](const Matrix<double>& hh, const std::vector<double>& vv, double bb) {
      std::vector<double> zz(n);
      dynamic_span<double>(hh.view(), vv.data(), bb, max_span, zz.data());
      return dot(gz, zz);
    };
    std::vector<double> gv(d, kNaN);
    double gb = kNaN;
    Matrix<double> gh(n, d, kNaN);
    dynamic_span_backward<double>(h.view(), v.data(), b, max_span, gz.data(), gv.data(), &gb, gh.view());
    const double eps = 1e-6;
    const auto fdv = fd_grad([&](const std::vector<double>& vv) { return loss(h, vv, b); }, v, eps);
    for (std::size_t k = 0; k < d; ++k) CHECK(gv[k] == doctest::Approx(fdv[k]).epsilon(1e-6).scale(1.0));
    CHECK(gb == doctest::Approx((loss(h, v, b + eps) - loss(h, v, b - eps)) / (2 * eps)).epsilon(1e-6).scale(1.0));
    const auto fdh = fd_grad(
        [&](const std::vector<double>& flat) {
          Matrix<double> hh = h;
          hh.data = flat;
          return loss(hh, v, b);
        },
        h.data, eps);
    double err = 0;
    for (std::size_t i = 0; i < h.data.size(); ++i) err = std::max(err, std::abs(gh.data[i] - fdh[i]));
    CHECK(err <= 1e-6);
    // Without grad_hidden, grad_v and grad_b are unchanged.
    std::vector<double> gv2(d, kNaN);
    double gb2 = kNaN;
    dynamic_span_backward<double>(h.view(), v.data(), b, max_span, gz.data(), gv2.data(), &gb2);
    CHECK(bytes_equal(gv, gv2));
    CHECK(gb2 == gb);
    // Float agrees with double.
    const Matrix<float> hf = h.cast<float>();
    const std::vector<float> vf(v.begin(), v.end()), gzf(gz.begin(), gz.end());
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      std::vector<float> zf(n);
      dynamic_span<float>(hf.view(), vf.data(), static_cast<float>(b), max_span, zf.data());
      for (std::size_t t = 0; t < n; ++t) CHECK(zf[t] == doctest::Approx(z[t]).epsilon(1e-5));
      std::vector<float> gvf(d);
      float gbf = 0;
      Matrix<float> ghf(n, d);
      dynamic_span_backward<float>(hf.view(), vf.data(), static_cast<float>(b), max_span, gzf.data(), gvf.data(), &gbf,
                                   ghf.view());
      for (std::size_t k = 0; k < d; ++k) CHECK(gvf[k] == doctest::Approx(gv[k]).epsilon(1e-4).scale(1.0));
      CHECK(gbf == doctest::Approx(gb).epsilon(1e-4).scale(1.0));
      CHECK(max_abs_err(ghf, gh) <= 1e-4 * std::max(1.0, max_abs(gh.data)));
    }
  }

}  // TEST_SUITE
