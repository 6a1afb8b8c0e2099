// Test support for batched attention's gradients and block-sparse
// attention: a float64 reference of the forward and of its gradients (the
// transforms' Jacobians in closed form: dS_j = g_j (dP_j - sum g dP / sum g),
// g_j = p_j^(2 - alpha) on the support; top-k softmax: softmax's on its k
// keys) over each row's visible keys, optionally restricted further by a
// mask; and a batched problem in tensors of a dtype and layout.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "attention/batched_support.hpp"
#include "entgraph/batched_attention.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph::test {

struct BatchedShape {
  std::size_t batch = 3, hq = 4, hkv = 2, n = 21, m = 26, d = 8, dv = 6;
  std::vector<std::int32_t> qlen, klen;  // empty: full lengths
  std::size_t n_of(std::size_t b) const { return qlen.empty() ? n : static_cast<std::size_t>(qlen[b]); }
  std::size_t m_of(std::size_t b) const { return klen.empty() ? m : static_cast<std::size_t>(klen[b]); }
};

// Dense float64 arrays [b][h][i][c] of the inputs, and the options.
struct Problem64 {
  BatchedShape s;
  Transform t = Transform::entmax15();
  double scale = 0.5;
  bool causal = false;
  std::vector<double> q, k, v, grad_out;
  // Block-sparse attention's graph on top of the masks: null lets every key.
  std::function<bool(std::size_t b, std::size_t h, std::size_t i, std::size_t j)> allowed;
  std::size_t qi(std::size_t b, std::size_t h, std::size_t i, std::size_t c) const {
    return ((b * s.hq + h) * s.n + i) * s.d + c;
  }
  std::size_t ki(std::size_t b, std::size_t g, std::size_t j, std::size_t c) const {
    return ((b * s.hkv + g) * s.m + j) * s.d + c;
  }
  std::size_t vi(std::size_t b, std::size_t g, std::size_t j, std::size_t c) const {
    return ((b * s.hkv + g) * s.m + j) * s.dv + c;
  }
  std::size_t oi(std::size_t b, std::size_t h, std::size_t i, std::size_t c) const {
    return ((b * s.hq + h) * s.n + i) * s.dv + c;
  }
  // Keys query i of sequence b sees: a prefix.
  std::size_t visible(std::size_t b, std::size_t i) const {
    const std::size_t nb = s.n_of(b), mb = s.m_of(b);
    if (!causal) return mb;
    const long long last = static_cast<long long>(i) + static_cast<long long>(mb) - static_cast<long long>(nb);
    return last < 0 ? 0 : std::min<std::size_t>(mb, static_cast<std::size_t>(last) + 1);
  }
  double alpha() const {
    switch (t.kind) {
      case TransformKind::softmax:
      case TransformKind::topk_softmax:
        return 1.0;
      case TransformKind::sparsemax:
        return 2.0;
      case TransformKind::entmax15:
        return 1.5;
      default:
        return t.alpha;
    }
  }
};

// Row (b, h, i)'s keys and their weights (the core's float64 transform as
// the oracle of the forward).
struct RowWeights {
  std::vector<std::size_t> keys;
  std::vector<double> w;
};
inline RowWeights weights(const Problem64& p, std::size_t b, std::size_t h, std::size_t i) {
  const std::size_t g = h / (p.s.hq / p.s.hkv);
  RowWeights r;
  for (std::size_t j = 0; j < p.visible(b, i); ++j)
    if (!p.allowed || p.allowed(b, h, i, j)) r.keys.push_back(j);
  const std::size_t cnt = r.keys.size();
  std::vector<double> z(cnt);
  r.w.assign(cnt, 0.0);
  for (std::size_t x = 0; x < cnt; ++x) {
    double dot = 0.0;
    for (std::size_t c = 0; c < p.s.d; ++c) dot += p.q[p.qi(b, h, i, c)] * p.k[p.ki(b, g, r.keys[x], c)];
    z[x] = p.scale * dot;
  }
  if (cnt > 0)
    transform_forward<double>(p.t, MatrixView<const double>(z.data(), 1, cnt), MatrixView<double>(r.w.data(), 1, cnt));
  return r;
}

// out = attention over the valid rows, dense [b][h][i][c] (zeros elsewhere).
inline std::vector<double> reference_out(const Problem64& p) {
  std::vector<double> out(p.s.batch * p.s.hq * p.s.n * p.s.dv, 0.0);
  for (std::size_t b = 0; b < p.s.batch; ++b)
    for (std::size_t h = 0; h < p.s.hq; ++h)
      for (std::size_t i = 0; i < p.s.n_of(b); ++i) {
        const RowWeights r = weights(p, b, h, i);
        const std::size_t g = h / (p.s.hq / p.s.hkv);
        for (std::size_t x = 0; x < r.keys.size(); ++x)
          for (std::size_t c = 0; c < p.s.dv; ++c) out[p.oi(b, h, i, c)] += r.w[x] * p.v[p.vi(b, g, r.keys[x], c)];
      }
  return out;
}

// L = sum grad_out . out over the valid rows, in float64.
inline double loss(const Problem64& p) {
  const std::vector<double> out = reference_out(p);
  double l = 0.0;
  for (std::size_t x = 0; x < out.size(); ++x) l += p.grad_out[x] * out[x];
  return l;
}

struct Grads64 {
  std::vector<double> q, k, v;
};

// The gradients of loss(p) in closed form.
inline Grads64 reference_grads(const Problem64& p) {
  Grads64 out{std::vector<double>(p.q.size(), 0.0), std::vector<double>(p.k.size(), 0.0),
              std::vector<double>(p.v.size(), 0.0)};
  const double a = p.alpha();
  for (std::size_t b = 0; b < p.s.batch; ++b)
    for (std::size_t h = 0; h < p.s.hq; ++h)
      for (std::size_t i = 0; i < p.s.n_of(b); ++i) {
        const std::size_t g = h / (p.s.hq / p.s.hkv);
        const RowWeights r = weights(p, b, h, i);
        const std::size_t cnt = r.keys.size();
        std::vector<double> dp(cnt, 0.0), gw(cnt, 0.0);
        double sum_g = 0.0, sum_gdp = 0.0;
        for (std::size_t x = 0; x < cnt; ++x) {
          for (std::size_t c = 0; c < p.s.dv; ++c) dp[x] += p.grad_out[p.oi(b, h, i, c)] * p.v[p.vi(b, g, r.keys[x], c)];
          gw[x] = r.w[x] > 0.0 ? std::pow(r.w[x], 2.0 - a) : 0.0;
          sum_g += gw[x];
          sum_gdp += gw[x] * dp[x];
        }
        for (std::size_t x = 0; x < cnt; ++x) {
          const std::size_t j = r.keys[x];
          const double ds = sum_g > 0.0 ? gw[x] * (dp[x] - sum_gdp / sum_g) : 0.0;
          for (std::size_t c = 0; c < p.s.d; ++c) {
            out.q[p.qi(b, h, i, c)] += p.scale * ds * p.k[p.ki(b, g, j, c)];
            out.k[p.ki(b, g, j, c)] += p.scale * ds * p.q[p.qi(b, h, i, c)];
          }
          for (std::size_t c = 0; c < p.s.dv; ++c) out.v[p.vi(b, g, j, c)] += r.w[x] * p.grad_out[p.oi(b, h, i, c)];
        }
      }
  return out;
}

// The library's problem: tensors in a dtype and layout, NaN outside the
// valid rows, and float64 copies of what the call reads.
struct Batched {
  BatchedShape s;
  BatchedAttentionOptions o;
  Tensor4 q, k, v, grad_out, grad_q, grad_k, grad_v;
  Batched(const BatchedShape& shape, DType dtype, DType grad_dtype, Layout layout)
      : s(shape),
        q(dtype, s.batch, s.hq, s.n, s.d, layout),
        k(dtype, s.batch, s.hkv, s.m, s.d, layout),
        v(dtype, s.batch, s.hkv, s.m, s.dv, layout),
        grad_out(grad_dtype, s.batch, s.hq, s.n, s.dv, layout),
        grad_q(grad_dtype, s.batch, s.hq, s.n, s.d, layout),
        grad_k(grad_dtype, s.batch, s.hkv, s.m, s.d, layout),
        grad_v(grad_dtype, s.batch, s.hkv, s.m, s.dv, layout) {
    o.query_lengths = s.qlen.empty() ? nullptr : s.qlen.data();
    o.key_lengths = s.klen.empty() ? nullptr : s.klen.data();
  }
  void fill(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> dist(0.0, 1.0);
    auto rows = [&](Tensor4& t, bool queries) {
      for (std::size_t b = 0; b < t.batch; ++b)
        for (std::size_t h = 0; h < t.heads; ++h)
          for (std::size_t i = 0; i < (queries ? s.n_of(b) : s.m_of(b)); ++i)
            for (std::size_t c = 0; c < t.cols; ++c) t.set(b, h, i, c, static_cast<float>(dist(rng)));
    };
    rows(q, true);
    rows(k, false);
    rows(v, false);
    rows(grad_out, true);
  }
  void backward() {
    batched_attention_backward(q.cview(), k.cview(), v.cview(), grad_out.cview(), grad_q.view(), grad_k.view(),
                               grad_v.view(), o);
  }
  Problem64 as_float64() const {
    Problem64 p;
    p.s = s;
    p.t = o.transform;
    p.scale = o.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(s.d)) : o.scale;
    p.causal = o.causal;
    auto dense = [&](const Tensor4& t, bool queries) {
      std::vector<double> x(t.batch * t.heads * t.rows * t.cols, 0.0);
      for (std::size_t b = 0; b < t.batch; ++b)
        for (std::size_t h = 0; h < t.heads; ++h)
          for (std::size_t i = 0; i < (queries ? s.n_of(b) : s.m_of(b)); ++i)
            for (std::size_t c = 0; c < t.cols; ++c) x[((b * t.heads + h) * t.rows + i) * t.cols + c] = t.get(b, h, i, c);
      return x;
    };
    p.q = dense(q, true);
    p.k = dense(k, false);
    p.v = dense(v, false);
    p.grad_out = dense(grad_out, true);
    return p;
  }
};

// got (a gradient tensor) against want (dense [b][h][i][c]): valid rows
// within rel of the largest |want| plus one rounding of a 16-bit format;
// rows past the lengths +0 exactly; gaps untouched.
inline void check_grad(const char* name, const Tensor4& got, const std::vector<double>& want, const BatchedShape& s, bool queries,
                double rel) {
  CAPTURE(name);
  double biggest = 0.0;
  for (double x : want) biggest = std::max(biggest, std::abs(x));
  const double tol = rel * std::max(biggest, 1e-30);
  std::size_t bad = 0, nonzero_padded = 0;
  double worst = 0.0;
  for (std::size_t b = 0; b < got.batch; ++b)
    for (std::size_t h = 0; h < got.heads; ++h)
      for (std::size_t i = 0; i < got.rows; ++i)
        for (std::size_t c = 0; c < got.cols; ++c) {
          const double g = got.get(b, h, i, c);
          if (i >= (queries ? s.n_of(b) : s.m_of(b))) {
            nonzero_padded += !(g == 0.0 && !std::signbit(g));
            continue;
          }
          const double w = want[((b * got.heads + h) * got.rows + i) * got.cols + c];
          const double err = std::abs(g - w);
          if (!(err <= tol + half_ulp(got.dtype, std::abs(w) + tol))) ++bad;
          if (!(err <= worst)) worst = err;
        }
  CAPTURE(biggest);
  CAPTURE(worst);
  CHECK(biggest > 0.0);
  CHECK(bad == 0);
  CHECK(nonzero_padded == 0);
  CHECK(touched_gaps(got) == 0);
}

inline void check_grad_reference(const Batched& p, double rel) {
  const Grads64 want = reference_grads(p.as_float64());
  check_grad("grad_q", p.grad_q, want.q, p.s, true, rel);
  check_grad("grad_k", p.grad_k, want.k, p.s, false, rel);
  check_grad("grad_v", p.grad_v, want.v, p.s, false, rel);
}

}  // namespace entgraph::test
