// Dense attention: invariants of the weights, long rows and deep heads,
// backward against finite differences, determinism across thread counts,
// multi-head, and input validation. The forward and backward of every
// attention case on every target: conformance/test_attention.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention_support.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/runtime.hpp"
#include "support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

Matrix<float> run_forward_float(const Problem& p, std::size_t block_rows, Matrix<float>* probs = nullptr) {
  return problem_forward_float(
      p, block_rows, probs,
      [](ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v, MatrixView<float> out,
         const AttentionOptions<float>& o, MatrixView<float> pr) { attention_forward<float>(q, k, v, out, o, pr); });
}

// L = <G, O> in float64.
double loss(const Problem& p, const Matrix<double>& g) {
  Matrix<double> out(p.n, p.dv);
  attention_forward<double>(p.q.view(), p.k.view(), p.v.view(), out.view(), p.opts());
  double l = 0;
  for (std::size_t i = 0; i < out.data.size(); ++i) l += out.data[i] * g.data[i];
  return l;
}

// Central difference of the loss in one scalar of the problem.
double central_difference(Problem& p, double& x, const Matrix<double>& g, double eps = 1e-6) {
  const double saved = x;
  x = saved + eps;
  const double up = loss(p, g);
  x = saved - eps;
  const double down = loss(p, g);
  x = saved;
  return (up - down) / (2 * eps);
}

}  // namespace

TEST_SUITE("attention") {
  TEST_CASE("attention: long rows and deep heads match the naive attention") {
    // m and d beyond the kernels' depth chunks (512 and 256).
    for (const Transform& t : {Transform::softmax(), Transform::entmax15(), Transform::sparsemax()}) {
      CAPTURE(describe(t));
      Problem p = make_problem(20, 700, 270, 20, t, true, true, 11);
      const NaiveResult naive = naive_attention(p);
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        const Matrix<float> out = run_forward_float(p, 8);
        CHECK(max_abs_diff(out.cast<double>(), naive.out) < 5e-5 * std::max(1.0, max_abs(naive.out)));
      }
    }
  }

  TEST_CASE("attention: strided views give the same bits as contiguous ones") {
    const std::size_t n = 29, m = 41, d = 20, dv = 18, pad = 3;
    for (const Transform& t : {Transform::softmax(), Transform::entmax15()}) {
      CAPTURE(describe(t));
      const Matrix<float> q = random_matrix<float>(n, d, 1.0, 1), k = random_matrix<float>(m, d, 1.0, 2),
                          v = random_matrix<float>(m, dv, 1.0, 3), go = random_matrix<float>(n, dv, 1.0, 4);
      // The same matrices inside wider buffers.
      auto widen = [&](const Matrix<float>& x) {
        Matrix<float> w(x.rows, x.cols + pad, -99.0f);
        for (std::size_t i = 0; i < x.rows; ++i)
          for (std::size_t j = 0; j < x.cols; ++j) w(i, j) = x(i, j);
        return w;
      };
      auto strided = [&](Matrix<float>& w) { return MatrixView<float>(w.data.data(), w.rows, w.cols - pad, w.cols); };
      Matrix<float> qw = widen(q), kw = widen(k), vw = widen(v), gow = widen(go);
      for (std::size_t block_rows : {std::size_t(4), static_cast<std::size_t>(-1)}) {
        CAPTURE(block_rows);
        AttentionOptions<float> o;
        o.transform = t;
        o.causal = true;
        o.block_rows = block_rows;
        Matrix<float> out(n, dv), probs(n, m), dq(n, d), dk(m, d), dvm(m, dv);
        attention_forward<float>(q.view(), k.view(), v.view(), out.view(), o, probs.view());
        attention_backward<float>(q.view(), k.view(), v.view(), go.view(), dq.view(), dk.view(), dvm.view(), o);
        Matrix<float> outw(n, dv + pad), probsw(n, m + pad), dqw(n, d + pad), dkw(m, d + pad), dvw(m, dv + pad);
        attention_forward<float>(strided(qw), strided(kw), strided(vw), strided(outw), o, strided(probsw));
        attention_backward<float>(strided(qw), strided(kw), strided(vw), strided(gow), strided(dqw), strided(dkw),
                                  strided(dvw), o);
        auto narrow = [&](Matrix<float>& w) {
          Matrix<float> x(w.rows, w.cols - pad);
          for (std::size_t i = 0; i < x.rows; ++i)
            for (std::size_t j = 0; j < x.cols; ++j) x(i, j) = w(i, j);
          return x;
        };
        CHECK(bit_identical(narrow(outw), out));
        CHECK(bit_identical(narrow(probsw), probs));
        CHECK(bit_identical(narrow(dqw), dq));
        CHECK(bit_identical(narrow(dkw), dk));
        CHECK(bit_identical(narrow(dvw), dvm));
        // The padding columns of the outputs are not touched.
        CHECK(outw(0, dv) == 0.0f);
        CHECK(dkw(m - 1, d + pad - 1) == 0.0f);
      }
    }
  }

  TEST_CASE("attention: weights sum to 1, masked weights are 0, fully masked queries give 0") {
    for (const Transform& t : attention_transforms()) {
      CAPTURE(describe(t));
      // n > m with a causal mask: queries 0..15 see no key.
      Problem p = make_problem(53, 37, 16, 9, t, true, true);
      const Matrix<std::uint8_t> mask = full_mask(p);
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        Matrix<float> probs;
        const Matrix<float> out = run_forward_float(p, 7, &probs);
        std::size_t fully_masked = 0;
        for (std::size_t i = 0; i < p.n; ++i) {
          double sum = 0;
          bool any = false;
          bool masked_zero = true, non_negative = true;
          for (std::size_t j = 0; j < p.m; ++j) {
            sum += probs(i, j);
            any = any || mask(i, j);
            masked_zero = masked_zero && (mask(i, j) || probs(i, j) == 0.0f);
            non_negative = non_negative && probs(i, j) >= 0.0f;
          }
          CHECK(masked_zero);
          CHECK(non_negative);
          if (any) {
            CHECK(std::abs(sum - 1.0) < 1e-5);
          } else {
            ++fully_masked;
            CHECK(sum == 0.0);
            for (std::size_t x = 0; x < p.dv; ++x) CHECK(out(i, x) == 0.0f);
          }
        }
        CHECK(fully_masked == 16);
      }
    }
    // Every key is padding: every output row is 0.
    Problem p = make_problem(9, 11, 8, 5, Transform::entmax15(), false, false);
    p.padding.assign(p.m, 0);
    Matrix<float> probs;
    const Matrix<float> out = run_forward_float(p, 4, &probs);
    CHECK(max_abs(out) == 0.0);
    CHECK(max_abs(probs) == 0.0);
  }

  TEST_CASE("attention: sparse transforms give sparse weights") {
    // Guards the sparse paths of the tests above: they must see zeros.
    Problem p = make_problem(37, 53, 40, 37, Transform::entmax15(), false, false);
    Matrix<float> probs;
    run_forward_float(p, 7, &probs);
    std::size_t zeros = 0;
    for (float x : probs.data) zeros += x == 0.0f;
    CHECK(zeros > probs.data.size() / 4);
  }

  TEST_CASE("attention: backward matches central finite differences in float64") {
    for (const Transform& t : attention_transforms()) {
      // n = 7 > m = 5 with the causal mask: queries 0 and 1 see no key, and
      // the first block of two rows has none at all.
      for (int variant = 0; variant < 3; ++variant) {
        const bool masked = variant >= 1;
        const std::size_t n = variant == 2 ? 7 : 5, m = variant == 2 ? 5 : 7;
        CAPTURE(describe(t));
        CAPTURE(masked);
        CAPTURE(n);
        Problem p = make_problem(n, m, 4, 3, t, masked, masked, 21);
        if (t.kind == TransformKind::adaptive_span) {
          // Distances reach 6 (queries at 2..6): spans of 1..3 with ramp 3
          // put keys inside the ramp.
          p.options.span_ramp = 3.0;
          // Non-integer spans: at an integer span a key sits on the ramp's kink.
          for (std::size_t i = 0; i < p.n; ++i) p.span[i] = 1.2 + 0.37 * static_cast<double>(i);
        }
        if (t.info().family == TransformFamily::constrained) {
          // Tight bounds saturate without extreme scores (a dominant score
          // makes the free mass a difference of nearly equal numbers).
          p.options.scale = 1.0;
          for (std::size_t j = 1; j < p.m; ++j) p.upper[j] = 0.15 + 0.03 * static_cast<double>(j);
          // A query that sees key 0 alone must not sit on the bound p = u = 1.
          p.upper[0] = 1.5;
        }
        const Matrix<double> g = float_exact(p.n, p.dv, 1.0, 99);
        const Grads grads = problem_backward<double>(p, g, 2);
        auto check_close = [](const std::string& what, std::size_t index, double analytic, double numeric) {
          CAPTURE(what);
          CAPTURE(index);
          CAPTURE(analytic);
          CAPTURE(numeric);
          CHECK(std::abs(analytic - numeric) < 1e-6 * std::max(1.0, std::abs(numeric)));
        };
        for (std::size_t i = 0; i < p.n; ++i)
          for (std::size_t x = 0; x < p.d; ++x)
            check_close("dq", i * p.d + x, grads.dq(i, x), central_difference(p, p.q(i, x), g));
        for (std::size_t j = 0; j < p.m; ++j)
          for (std::size_t x = 0; x < p.d; ++x)
            check_close("dk", j * p.d + x, grads.dk(j, x), central_difference(p, p.k(j, x), g));
        for (std::size_t j = 0; j < p.m; ++j)
          for (std::size_t x = 0; x < p.dv; ++x)
            check_close("dv", j * p.dv + x, grads.dv(j, x), central_difference(p, p.v(j, x), g));
        if (t.kind == TransformKind::entmax) {
          check_close("alpha", 0, grads.alpha, central_difference(p, p.options.transform.alpha, g));
          CHECK(std::abs(grads.alpha) > 1e-4);
        } else {
          CHECK(grads.alpha == 0.0);
        }
        if (t.kind == TransformKind::adaptive_span) {
          double largest = 0;
          for (std::size_t i = 0; i < p.n; ++i) {
            check_close("span", i, grads.span[i], central_difference(p, p.span[i], g));
            largest = std::max(largest, std::abs(grads.span[i]));
          }
          CHECK(largest > 1e-3);
        }
        if (t.info().family == TransformFamily::constrained) {
          double largest = 0;
          for (std::size_t j = 0; j < p.m; ++j) {
            check_close("upper", j, grads.upper[j], central_difference(p, p.upper[j], g));
            largest = std::max(largest, std::abs(grads.upper[j]));
          }
          CHECK(largest > 1e-3);
        }
      }
    }
  }

  TEST_CASE("attention: results are bit-identical for 1, 2 and 3 threads") {
    for (const Transform& t :
         {Transform::softmax(), Transform::entmax(1.3), Transform{TransformKind::constrained_sparsemax, 2.0, 0}}) {
      CAPTURE(describe(t));
      Problem p = make_problem(200, 150, 40, 24, t, true, true, 41);
      const Matrix<double> g = float_exact(p.n, p.dv, 1.0, 5);
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        Matrix<float> out1, probs1;
        Grads grads1;
        for (std::size_t threads : {1, 2, 3}) {
          CAPTURE(threads);
          ThreadsScope ts(threads);
          Matrix<float> probs;
          const Matrix<float> out = run_forward_float(p, 16, &probs);
          const Grads grads = problem_backward<float>(p, g, 16);
          if (threads == 1) {
            out1 = out;
            probs1 = probs;
            grads1 = grads;
            continue;
          }
          CHECK(bit_identical(out, out1));
          CHECK(bit_identical(probs, probs1));
          CHECK(bit_identical(grads.dq, grads1.dq));
          CHECK(bit_identical(grads.dk, grads1.dk));
          CHECK(bit_identical(grads.dv, grads1.dv));
          CHECK(grads.alpha == grads1.alpha);
          CHECK(grads.upper == grads1.upper);
        }
      }
    }
  }

  TEST_CASE("attention: multi-head equals a loop over heads") {
    const std::size_t heads = 3, n = 19, m = 23, d = 12, dv = 10;
    for (const Transform& t : attention_transforms()) {
      CAPTURE(describe(t));
      const Matrix<float> q = random_matrix<float>(heads * n, d, 1.0, 1),
                          k = random_matrix<float>(heads * m, d, 1.0, 2),
                          v = random_matrix<float>(heads * m, dv, 1.0, 3),
                          go = random_matrix<float>(heads * n, dv, 1.0, 4);
      std::vector<float> span, upper;
      for (std::size_t i = 0; i < heads * n; ++i) span.push_back(2.0f + static_cast<float>(i % 7));
      for (std::size_t j = 0; j < heads * m; ++j)
        upper.push_back(j % m == 0 ? 1.0f : 0.2f + 0.01f * static_cast<float>(j % 11));
      AttentionOptions<float> o;
      o.transform = t;
      o.causal = true;
      o.block_rows = 5;
      o.span = span.data();
      o.span_ramp = 3.0;
      o.upper = upper.data();
      for (std::size_t threads : {1, 4}) {  // heads in turn, or heads in parallel
        ThreadsScope ts(threads);
        Matrix<float> out(heads * n, dv), probs(heads * n, m), dq(heads * n, d), dk(heads * m, d), dvm(heads * m, dv);
        std::vector<double> grad_alpha(heads, -1.0);
        multihead_attention_forward<float>(
            ConstHeads<float>(q.data.data(), heads, n, d), ConstHeads<float>(k.data.data(), heads, m, d),
            ConstHeads<float>(v.data.data(), heads, m, dv), HeadsView<float>(out.data.data(), heads, n, dv), o,
            HeadsView<float>(probs.data.data(), heads, n, m));
        multihead_attention_backward<float>(
            ConstHeads<float>(q.data.data(), heads, n, d), ConstHeads<float>(k.data.data(), heads, m, d),
            ConstHeads<float>(v.data.data(), heads, m, dv), ConstHeads<float>(go.data.data(), heads, n, dv),
            HeadsView<float>(dq.data.data(), heads, n, d), HeadsView<float>(dk.data.data(), heads, m, d),
            HeadsView<float>(dvm.data.data(), heads, m, dv), o, grad_alpha.data());
        for (std::size_t h = 0; h < heads; ++h) {
          CAPTURE(h);
          AttentionOptions<float> oh = o;
          oh.span = span.data() + h * n;
          oh.upper = upper.data() + h * m;
          Matrix<float> out_h(n, dv), probs_h(n, m), dq_h(n, d), dk_h(m, d), dv_h(m, dv);
          const MatrixView<const float> qh(q.data.data() + h * n * d, n, d), kh(k.data.data() + h * m * d, m, d),
              vh(v.data.data() + h * m * dv, m, dv), goh(go.data.data() + h * n * dv, n, dv);
          attention_forward<float>(qh, kh, vh, out_h.view(), oh, probs_h.view());
          AttentionParamGrads<float> params;
          attention_backward<float>(qh, kh, vh, goh, dq_h.view(), dk_h.view(), dv_h.view(), oh, &params);
          CHECK(std::memcmp(out_h.data.data(), out.data.data() + h * n * dv, n * dv * sizeof(float)) == 0);
          CHECK(std::memcmp(probs_h.data.data(), probs.data.data() + h * n * m, n * m * sizeof(float)) == 0);
          CHECK(std::memcmp(dq_h.data.data(), dq.data.data() + h * n * d, n * d * sizeof(float)) == 0);
          CHECK(std::memcmp(dk_h.data.data(), dk.data.data() + h * m * d, m * d * sizeof(float)) == 0);
          CHECK(std::memcmp(dv_h.data.data(), dvm.data.data() + h * m * dv, m * dv * sizeof(float)) == 0);
          CHECK(grad_alpha[h] == params.alpha);
        }
      }
    }
  }

  TEST_CASE("attention: inputs whose scores may overflow are refused, naming q, k and the scale") {
    // Finite entries near 1e38 (the readers accept them) whose products are
    // not: the scores would be +-inf, which the transforms take for masked
    // keys (or NaN). Refused up front, before anything is written.
    const std::size_t n = 4, m = 5, d = 3, dv = 2;
    Matrix<float> q = random_matrix<float>(n, d), k = random_matrix<float>(m, d);
    const Matrix<float> v = random_matrix<float>(m, dv);
    Matrix<float> out(n, dv, 7.0f);
    q(1, 0) = 2e19f;
    k(2, 2) = 3e19f;
    AttentionOptions<float> o;
    o.transform = Transform::entmax(1.5);
    std::string msg = error_message([&] { attention_forward<float>(q.view(), k.view(), v.view(), out.view(), o); });
    CAPTURE(msg);
    CHECK(msg.rfind("attention_forward: the scores options.scale * q . k may overflow float", 0) == 0);
    CHECK(msg.find("q row 1") != std::string::npos);
    CHECK(msg.find("k row 2") != std::string::npos);
    CHECK(out(0, 0) == 7.0f);
    // The backward too.
    Matrix<float> go = random_matrix<float>(n, dv), dq(n, d), dk(m, d), dvm(m, dv);
    msg = error_message([&] {
      attention_backward<float>(q.view(), k.view(), v.view(), go.view(), dq.view(), dk.view(), dvm.view(), o);
    });
    CHECK(msg.find("may overflow float") != std::string::npos);
    // A scale above 1 counts: 1e19 * 1e19 fits, times 1e3 does not.
    q(1, 0) = 1e19f;
    k(2, 2) = 1e19f;
    attention_forward<float>(q.view(), k.view(), v.view(), out.view(), o);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < dv; ++j) CHECK(std::isfinite(out(i, j)));
    o.scale = 1e3;
    msg = error_message([&] { attention_forward<float>(q.view(), k.view(), v.view(), out.view(), o); });
    CHECK(msg.find("options.scale is 1000") != std::string::npos);
    // float64: the same at its own range.
    Matrix<double> qd = q.cast<double>(), kd = k.cast<double>(), vd = v.cast<double>();
    Matrix<double> outd(n, dv);
    AttentionOptions<double> od;
    qd(0, 0) = 1e160;
    kd(0, 0) = 1e160;
    msg = error_message([&] { attention_forward<double>(qd.view(), kd.view(), vd.view(), outd.view(), od); });
    CHECK(msg.find("may overflow double") != std::string::npos);
  }

  TEST_CASE("attention: values that may make the output overflow are refused; large ones that cannot are kept") {
    // issue 29: v at FLT_MAX gave infinite outputs. The output is a weighted
    // mean of v's rows, so |o| <= max |v| up to rounding: 3e38 computes (and
    // stays finite), FLT_MAX is refused naming v's entry.
    const std::size_t n = 4, m = 5, d = 3, dv = 2;
    const Matrix<float> q = random_matrix<float>(n, d), k = random_matrix<float>(m, d);
    Matrix<float> v = random_matrix<float>(m, dv);
    for (std::size_t j = 0; j < m; ++j) v(j, 1) = 3e38f;
    Matrix<float> out(n, dv, 7.0f);
    for (const Transform& t : {Transform::softmax(), Transform::entmax(1.5), Transform::sparsemax()}) {
      AttentionOptions<float> o;
      o.transform = t;
      attention_forward<float>(q.view(), k.view(), v.view(), out.view(), o);
      for (std::size_t i = 0; i < n; ++i) CHECK(std::isfinite(out(i, 1)));
    }
    v(3, 1) = std::numeric_limits<float>::max();
    std::fill(out.data.begin(), out.data.end(), 7.0f);
    const std::string msg = error_message([&] { attention_forward<float>(q.view(), k.view(), v.view(), out.view(), {}); });
    CAPTURE(msg);
    CHECK(msg.rfind("attention_forward: v may make the output overflow float: |v[3][1]|", 0) == 0);
    CHECK(out(0, 0) == 7.0f);
  }

  TEST_CASE("attention: bad input throws an error naming the argument") {
    const std::size_t n = 4, m = 5, d = 3, dv = 2;
    Matrix<float> q = random_matrix<float>(n, d), k = random_matrix<float>(m, d), v = random_matrix<float>(m, dv);
    Matrix<float> out(n, dv), probs(n, m), go(n, dv), dq(n, d), dk(m, d), dvm(m, dv);
    std::vector<float> span(n, 2.0f), upper(m, 0.5f);
    const AttentionOptions<float> base;
    auto forward = [&](const AttentionOptions<float>& o, MatrixView<const float> qv, MatrixView<const float> kv,
                       MatrixView<const float> vv, MatrixView<float> ov, MatrixView<float> pv) {
      return error_message([&] { attention_forward<float>(qv, kv, vv, ov, o, pv); });
    };
    auto fwd = [&](const AttentionOptions<float>& o) {
      return forward(o, q.view(), k.view(), v.view(), out.view(), {});
    };
    auto contains = [](const std::string& msg, const std::string& what) {
      CAPTURE(msg);
      CHECK(msg.rfind("attention_forward: ", 0) == 0);
      CHECK(msg.find(what) != std::string::npos);
    };
    Matrix<float> k_wide = random_matrix<float>(m, d + 1), v_short = random_matrix<float>(m - 1, dv);
    contains(forward(base, q.view(), k_wide.view(), v.view(), out.view(), {}),
             "k.cols does not match q.cols (got 4, expected 3)");
    contains(forward(base, q.view(), k.view(), v_short.view(), out.view(), {}),
             "v.rows does not match k.rows (got 4, expected 5)");
    Matrix<float> out_bad(n, dv + 1), probs_bad(n, m + 1);
    contains(forward(base, q.view(), k.view(), v.view(), out_bad.view(), {}),
             "out has the wrong shape (got 4x3, expected 4x2)");
    contains(forward(base, q.view(), k.view(), v.view(), out.view(), probs_bad.view()), "probs has the wrong shape");
    contains(forward(base, MatrixView<const float>(q.data.data(), 0, d), k.view(), v.view(),
                     MatrixView<float>(out.data.data(), 0, dv), {}),
             "q.rows is 0");
    contains(forward(base, q.view(), MatrixView<const float>(k.data.data(), 0, d),
                     MatrixView<const float>(v.data.data(), 0, dv), out.view(), {}),
             "k.rows is 0");
    contains(forward(base, MatrixView<const float>(q.data.data(), n, 0), MatrixView<const float>(k.data.data(), m, 0),
                     v.view(), out.view(), {}),
             "q.cols is 0");
    AttentionOptions<float> o = base;
    o.block_rows = 0;
    contains(fwd(o), "options.block_rows");
    o = base;
    o.scale = std::nan("");
    contains(fwd(o), "options.scale");
    o.scale = INFINITY;
    contains(fwd(o), "options.scale");
    o = base;
    o.transform = Transform::entmax(0.5);
    contains(fwd(o), "options.transform.alpha");
    o.transform = Transform::topk_softmax(0);
    contains(fwd(o), "options.transform.k");
    o = base;
    o.transform.kind = TransformKind::adaptive_span;
    contains(fwd(o), "options.span is missing");
    o.span = span.data();
    span[2] = INFINITY;
    contains(fwd(o), "options.span[2]");
    span[2] = 2.0f;
    o.span_ramp = 0.0;
    contains(fwd(o), "options.span_ramp");
    o = base;
    o.transform.kind = TransformKind::constrained_softmax;
    contains(fwd(o), "options.upper is missing");
    o.upper = upper.data();
    upper[1] = -0.5f;
    contains(fwd(o), "options.upper[1]");
    upper[1] = 0.1f;  // 0.5 * 4 + 0.1 >= 1 still
    upper.assign(m, 0.1f);
    contains(fwd(o), "options.upper: the bounds of the keys visible to query 0 sum to less than 1");
    upper.assign(m, 0.5f);
    CHECK(fwd(o) == "");
    for (Matrix<float>* x : {&q, &k, &v}) {
      const float saved = x->data[1];
      x->data[1] = std::nanf("");
      const std::string msg = fwd(base);
      CHECK(msg.find(x == &q   ? "q has a non-finite entry"
                     : x == &k ? "k has a non-finite entry"
                               : "v has a non-finite entry") != std::string::npos);
      x->data[1] = INFINITY;
      CHECK(fwd(base).find("non-finite") != std::string::npos);
      x->data[1] = saved;
    }
    // Nothing was written by the calls that threw.
    Matrix<float> untouched(n, dv, 42.0f);
    o = base;
    o.block_rows = 0;
    forward(o, q.view(), k.view(), v.view(), untouched.view(), {});
    CHECK(max_abs_diff(untouched, Matrix<float>(n, dv, 42.0f)) == 0.0);

    // Backward: its own name, and the gradient shapes.
    auto bwd = [&](MatrixView<const float> gov, MatrixView<float> dqv, MatrixView<float> dkv, MatrixView<float> dvv) {
      return error_message([&] { attention_backward<float>(q.view(), k.view(), v.view(), gov, dqv, dkv, dvv, base); });
    };
    Matrix<float> wrong(1, 1);
    CHECK(bwd(go.view(), dq.view(), dk.view(), dvm.view()) == "");
    CHECK(bwd(wrong.view(), dq.view(), dk.view(), dvm.view())
              .rfind("attention_backward: grad_out has the wrong shape", 0) == 0);
    CHECK(bwd(go.view(), wrong.view(), dk.view(), dvm.view())
              .rfind("attention_backward: grad_q has the wrong shape", 0) == 0);
    CHECK(bwd(go.view(), dq.view(), wrong.view(), dvm.view())
              .rfind("attention_backward: grad_k has the wrong shape", 0) == 0);
    CHECK(
        bwd(go.view(), dq.view(), dk.view(), wrong.view()).rfind("attention_backward: grad_v has the wrong shape", 0) ==
        0);
    go.data[3] = INFINITY;
    CHECK(bwd(go.view(), dq.view(), dk.view(), dvm.view())
              .rfind("attention_backward: grad_out has a non-finite entry", 0) == 0);
    go.data[3] = 0.5f;

    // Multi-head: head counts must agree.
    const std::string msg = error_message([&] {
      multihead_attention_forward<float>(
          ConstHeads<float>(q.data.data(), 1, n, d), ConstHeads<float>(k.data.data(), 2, m, d),
          ConstHeads<float>(v.data.data(), 1, m, dv), HeadsView<float>(out.data.data(), 1, n, dv), base);
    });
    CHECK(msg.rfind("multihead_attention_forward: k.heads does not match q.heads (got 2, expected 1)", 0) == 0);
  }
}
