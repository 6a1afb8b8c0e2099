// Conformance of dense attention: every attention case of support/cases.hpp
// (transform x causal x key padding x shape) on every target of
// support/targets.hpp that supports it, forward against a naive float64
// attention over the full score matrix, backward against the float64
// backward.
//
// Compiled into the core test binary, its WebAssembly build and the CUDA test
// binary: public headers and the test support headers only.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "attention/attention_support.hpp"
#include "support/cases.hpp"
#include "support/targets.hpp"

using namespace entgraph;
using namespace entgraph::test;
using cases::AttentionCase;

namespace {

Problem problem_of(const AttentionCase& c, std::uint64_t seed) {
  return make_problem(c.n, c.m, c.d, c.dv, c.transform.transform(c.m), c.causal, c.padded, seed);
}

Matrix<float> forward_on(const Target& target, const Problem& p, std::size_t block_rows,
                         Matrix<float>* probs = nullptr) {
  return problem_forward_float(p, block_rows, probs,
                               [&](ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                   MatrixView<float> out, const AttentionOptions<float>& o,
                                   MatrixView<float> pr) { target_attention_forward(target, q, k, v, out, o, pr); });
}

}  // namespace

TEST_SUITE("conformance") {
  TEST_CASE("conformance: every attention case matches a naive float64 attention on every target") {
    const std::vector<Target> targets = conformance_targets();
    for (const AttentionCase& c : cases::attention_cases()) {
      CAPTURE(c.name);
      const Problem p = problem_of(c, 7);
      const NaiveResult naive = naive_attention(p);
      // Block sizes of one row, a few rows, the default, and more than n.
      for (std::size_t block_rows : {std::size_t(1), std::size_t(7), std::size_t(64), c.n + 5}) {
        CAPTURE(block_rows);
        // The double API is the oracle's own arithmetic, blocked.
        Matrix<double> out64(p.n, p.dv, 5.0);
        AttentionOptions<double> o = p.opts();
        o.block_rows = block_rows;
        attention_forward<double>(p.q.view(), p.k.view(), p.v.view(), out64.view(), o);
        CHECK(max_abs_diff(out64, naive.out) < 1e-12);
        for (const Target& target : targets) {
          // A device has no block_rows: it runs once.
          if (!supports(target, c) || (!full_float_api(target) && block_rows != 64)) continue;
          CAPTURE(target.name);
          const double tol = attention_tolerance(target) * std::max(1.0, max_abs(naive.out));
          if (!full_float_api(target)) {
            CHECK(max_abs_diff(forward_on(target, p, block_rows).cast<double>(), naive.out) < tol);
            continue;
          }
          Matrix<float> probs;
          const Matrix<float> out = forward_on(target, p, block_rows, &probs);
          CHECK(max_abs_diff(out.cast<double>(), naive.out) < tol);
          CHECK(max_abs_diff(probs.cast<double>(), naive.probs) < attention_tolerance(target));
          // Asking for P does not change O.
          CHECK(bit_identical(forward_on(target, p, block_rows), out));
        }
      }
    }
  }

  TEST_CASE("conformance: every attention case's backward matches the float64 backward on every target") {
    // dQ, dK, dV within 1e-4 relative to max(1, their largest entry); the
    // parameter gradients (CPU targets) too.
    const std::vector<Target> targets = conformance_targets();
    auto close = [](double got, double ref) { return std::abs(got - ref) < 1e-4 * std::max(1.0, std::abs(ref)); };
    auto close_all = [](const Matrix<double>& a, const Matrix<double>& b) {
      return max_abs_diff(a, b) < 1e-4 * std::max(1.0, max_abs(b));
    };
    for (const AttentionCase& c : cases::attention_cases()) {
      CAPTURE(c.name);
      const Problem p = problem_of(c, 31);
      const Matrix<double> g = float_exact(p.n, p.dv, 1.0, 77);
      const Grads ref = problem_backward<double>(p, g, 16);
      const TransformKind kind = c.transform.kind;
      for (const Target& target : targets) {
        if (!supports(target, c, Op::backward)) continue;
        CAPTURE(target.name);
        const bool params = full_float_api(target);
        const Grads got = problem_backward<float>(
            p, g, 16,
            [&](ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v, ConstMatrix<float> go,
                MatrixView<float> dq, MatrixView<float> dk, MatrixView<float> dv, const AttentionOptions<float>& o,
                AttentionParamGrads<float>* grads) {
              target_attention_backward(target, q, k, v, go, dq, dk, dv, o, grads);
            },
            params);
        CHECK(close_all(got.dq, ref.dq));
        CHECK(close_all(got.dk, ref.dk));
        CHECK(close_all(got.dv, ref.dv));
        if (!params) continue;
        CHECK(close(got.alpha, ref.alpha));
        if (kind == TransformKind::adaptive_span)
          for (std::size_t i = 0; i < p.n; ++i) CHECK(close(got.span[i], ref.span[i]));
        if (c.transform.constrained())
          for (std::size_t j = 0; j < p.m; ++j) CHECK(close(got.upper[j], ref.upper[j]));
      }
    }
  }
}  // TEST_SUITE
