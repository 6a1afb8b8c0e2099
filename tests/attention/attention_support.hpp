// Helpers of the attention tests: a naive float64 attention over the full
// score matrix (the oracle), problem setups with float-exact inputs, and
// error-message capture.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/error.hpp"
#include "entgraph/score_bounds.hpp"
#include "entgraph/transforms.hpp"
#include "support.hpp"
#include "support/cases.hpp"

namespace entgraph::test {

// Forces the kernel of float score bounds for one scope (set_bound_kernel),
// as IsaScope does the instruction set.
class BoundKernelScope {
 public:
  explicit BoundKernelScope(BoundKernel kernel) : saved_(bound_kernel()) { set_bound_kernel(kernel); }
  ~BoundKernelScope() { set_bound_kernel(saved_); }
  BoundKernelScope(const BoundKernelScope&) = delete;
  BoundKernelScope& operator=(const BoundKernelScope&) = delete;

 private:
  BoundKernel saved_;
};

// The float bound kernels this machine can force: float32, int16, int8, and
// bf16 where the CPU and the ISA in use have it.
inline std::vector<BoundKernel> forcible_bound_kernels() {
  std::vector<BoundKernel> kernels{BoundKernel::float32, BoundKernel::int16, BoundKernel::int8};
  try {
    BoundKernelScope probe(BoundKernel::bf16);
    kernels.push_back(BoundKernel::bf16);
  } catch (const Error&) {
  }
  return kernels;
}

// Every transform kind, with parameters that make the sparse ones sparse:
// the kPaths cases of support/cases.hpp.
inline std::vector<Transform> attention_transforms() {
  std::vector<Transform> ts;
  for (const cases::TransformCase& c : cases::transform_cases(cases::kPaths)) ts.push_back(c.transform());
  return ts;
}


// One attention problem in float64 with float-exact inputs, so that the float
// API sees exactly the same numbers.
struct Problem {
  std::size_t n = 0, m = 0, d = 0, dv = 0;
  Matrix<double> q, k, v;
  std::vector<std::uint8_t> padding;  // empty: none
  std::vector<double> span;           // n values
  std::vector<double> upper;          // m values
  AttentionOptions<double> options;

  AttentionOptions<double> opts() const {
    AttentionOptions<double> o = options;
    o.key_padding = padding.empty() ? nullptr : padding.data();
    o.span = span.data();
    o.upper = upper.data();
    return o;
  }
};

inline Matrix<double> float_exact(std::size_t rows, std::size_t cols, double scale, std::uint64_t seed) {
  return random_matrix<float>(rows, cols, scale, seed).cast<double>();
}

// Random Q, K, V; spans in [1, 12] with ramp 4; bounds in [0.15, 0.6] with
// key 0 at 1 (so every query that sees key 0 can be satisfied); padding keeps
// key 0 and about 80% of the others.
inline Problem make_problem(std::size_t n, std::size_t m, std::size_t d, std::size_t dv, const Transform& t,
                            bool causal, bool padded, std::uint64_t seed = 7) {
  Problem p;
  p.n = n;
  p.m = m;
  p.d = d;
  p.dv = dv;
  p.q = float_exact(n, d, 1.0, seed);
  p.k = float_exact(m, d, 1.0, seed + 1);
  p.v = float_exact(m, dv, 1.0, seed + 2);
  std::mt19937_64 rng(seed + 3);
  std::uniform_real_distribution<double> span_dist(1.0, 12.0), upper_dist(0.15, 0.6);
  for (std::size_t i = 0; i < n; ++i) p.span.push_back(static_cast<float>(span_dist(rng)));
  for (std::size_t j = 0; j < m; ++j) p.upper.push_back(j == 0 ? 1.0 : static_cast<float>(upper_dist(rng)));
  if (padded) {
    std::bernoulli_distribution keep(0.8);
    for (std::size_t j = 0; j < m; ++j) p.padding.push_back(j == 0 || keep(rng) ? 1 : 0);
  }
  p.options.transform = t;
  p.options.causal = causal;
  p.options.span_ramp = 4.0;
  // Larger scores than 1/sqrt(d) make the sparse transforms sparse and the
  // constrained ones saturate.
  p.options.scale = 2.0 / std::sqrt(static_cast<double>(d));
  return p;
}

// The float options of a problem (span/upper copied into float storage).
struct FloatOptions {
  std::vector<float> span, upper;
  AttentionOptions<float> options;
  explicit FloatOptions(const Problem& p) {
    for (double x : p.span) span.push_back(static_cast<float>(x));
    for (double x : p.upper) upper.push_back(static_cast<float>(x));
    const AttentionOptions<double> o = p.opts();
    options.transform = o.transform;
    options.scale = o.scale;
    options.causal = o.causal;
    options.key_padding = o.key_padding;
    options.block_rows = o.block_rows;
    options.span = span.data();
    options.span_ramp = o.span_ramp;
    options.upper = upper.data();
  }
};

// The float forward of a problem through `forward` (a call with
// attention_forward<float>'s arguments), with options.block_rows =
// block_rows; P into *probs if probs is not null.
template <class Forward>
Matrix<float> problem_forward_float(const Problem& p, std::size_t block_rows, Matrix<float>* probs, Forward forward) {
  FloatOptions fo(p);
  fo.options.block_rows = block_rows;
  const Matrix<float> q = p.q.cast<float>(), k = p.k.cast<float>(), v = p.v.cast<float>();
  Matrix<float> out(p.n, p.dv, 123.0f);  // garbage that must be overwritten
  if (probs) *probs = Matrix<float>(p.n, p.m, 123.0f);
  forward(q.view(), k.view(), v.view(), out.view(), fo.options, probs ? probs->view() : MatrixView<float>{});
  return out;
}

// The gradients of a problem's attention: dQ, dK, dV and those of the
// transform's own parameters (dL/dalpha, dL/dspan per query, dL/dupper per key).
struct Grads {
  Matrix<double> dq, dk, dv;
  double alpha = 0;
  std::vector<double> span, upper;
};

// The backward of a problem in T for the upstream gradient grad_out, through
// `backward` (a call with attention_backward<T>'s arguments; by default that
// function). It gets null parameter gradients when `params` is false; the
// gradients it leaves alone read 7.
template <class T, class Backward>
Grads problem_backward(const Problem& p, const Matrix<double>& grad_out, std::size_t block_rows, Backward backward,
                       bool params = true) {
  AttentionOptions<T> o;
  std::vector<T> span(p.span.begin(), p.span.end()), upper(p.upper.begin(), p.upper.end());
  o.transform = p.options.transform;
  o.scale = p.options.scale;
  o.causal = p.options.causal;
  o.key_padding = p.padding.empty() ? nullptr : p.padding.data();
  o.block_rows = block_rows;
  o.span = span.data();
  o.span_ramp = p.options.span_ramp;
  o.upper = upper.data();
  const Matrix<T> q = p.q.cast<T>(), k = p.k.cast<T>(), v = p.v.cast<T>(), go = grad_out.cast<T>();
  Matrix<T> dq(p.n, p.d, T(7)), dk(p.m, p.d, T(7)), dv(p.m, p.dv, T(7));
  std::vector<T> dspan(p.n, T(7)), dupper(p.m, T(7));
  AttentionParamGrads<T> grads;
  grads.span = dspan.data();
  grads.upper = dupper.data();
  backward(q.view(), k.view(), v.view(), go.view(), dq.view(), dk.view(), dv.view(), o, params ? &grads : nullptr);
  Grads g{dq.template cast<double>(), dk.template cast<double>(), dv.template cast<double>(), grads.alpha, {}, {}};
  for (T x : dspan) g.span.push_back(static_cast<double>(x));
  for (T x : dupper) g.upper.push_back(static_cast<double>(x));
  return g;
}

template <class T>
Grads problem_backward(const Problem& p, const Matrix<double>& grad_out, std::size_t block_rows) {
  return problem_backward<T>(
      p, grad_out, block_rows,
      [](ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, ConstMatrix<T> go, MatrixView<T> dq, MatrixView<T> dk,
         MatrixView<T> dv, const AttentionOptions<T>& o,
         AttentionParamGrads<T>* grads) { attention_backward<T>(q, k, v, go, dq, dk, dv, o, grads); });
}

// The full keep-mask of a problem (n x m).
inline Matrix<std::uint8_t> full_mask(const Problem& p) {
  Matrix<std::uint8_t> mask(p.n, p.m, 1);
  for (std::size_t i = 0; i < p.n; ++i)
    for (std::size_t j = 0; j < p.m; ++j) {
      const bool visible = !p.options.causal || static_cast<long long>(j) <= static_cast<long long>(i) +
                                                                                 static_cast<long long>(p.m) -
                                                                                 static_cast<long long>(p.n);
      const bool kept = p.padding.empty() || p.padding[j] != 0;
      mask(i, j) = visible && kept ? 1 : 0;
    }
  return mask;
}

struct NaiveResult {
  Matrix<double> out, probs;
};

// S over all n x m pairs, the transform's float64 public function on the
// whole matrix, then P V.
inline NaiveResult naive_attention(const Problem& p) {
  const AttentionOptions<double> o = p.opts();
  const double scale = o.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(p.d)) : o.scale;
  Matrix<double> s(p.n, p.m);
  for (std::size_t i = 0; i < p.n; ++i)
    for (std::size_t j = 0; j < p.m; ++j) {
      double acc = 0;
      for (std::size_t x = 0; x < p.d; ++x) acc += p.q(i, x) * p.k(j, x);
      s(i, j) = scale * acc;
    }
  const Matrix<std::uint8_t> mask = full_mask(p);
  const MaskView mv = mask.view();
  NaiveResult r{Matrix<double>(p.n, p.dv), Matrix<double>(p.n, p.m)};
  switch (o.transform.kind) {
    case TransformKind::adaptive_span:
      adaptive_span<double>(
          s.view(), o.span,
          AdaptiveSpan{o.span_ramp, static_cast<std::ptrdiff_t>(p.m) - static_cast<std::ptrdiff_t>(p.n)},
          r.probs.view(), mv);
      break;
    case TransformKind::constrained_softmax:
    case TransformKind::constrained_sparsemax: {
      Matrix<double> u(p.n, p.m);
      for (std::size_t i = 0; i < p.n; ++i)
        for (std::size_t j = 0; j < p.m; ++j) u(i, j) = p.upper[j];
      if (o.transform.kind == TransformKind::constrained_softmax)
        constrained_softmax<double>(s.view(), u.view(), r.probs.view(), mv);
      else
        constrained_sparsemax<double>(s.view(), u.view(), r.probs.view(), mv);
      break;
    }
    default:
      transform_forward<double>(o.transform, s.view(), r.probs.view(), mv);
  }
  for (std::size_t i = 0; i < p.n; ++i)
    for (std::size_t x = 0; x < p.dv; ++x) {
      double acc = 0;
      for (std::size_t j = 0; j < p.m; ++j) acc += r.probs(i, j) * p.v(j, x);
      r.out(i, x) = acc;
    }
  return r;
}

// The message of the entgraph::Error that f throws, or "" if it throws none.
inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

template <class T>
bool bit_identical(const Matrix<T>& a, const Matrix<T>& b) {
  return a.data.size() == b.data.size() && std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(T)) == 0;
}

template <class T>
double max_abs(const Matrix<T>& a) {
  double m = 0;
  for (T x : a.data) m = std::max(m, std::abs(static_cast<double>(x)));
  return m;
}

}  // namespace entgraph::test
