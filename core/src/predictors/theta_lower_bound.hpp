// A fast start for lowrank-threshold's threshold steps (theta_steps.hpp),
// CPU only.
//
// theta_steps::steps compacts the keys at every step and sums them in key
// order, one dependent add after another, with a branch per key: exact and
// the same on the GPU, but about 4 ns a key, and a row takes several steps.
// This bound runs the same steps (the closed form on the keys above tau,
// else Michelot's mean rule or Newton from below) over the whole list
// without compacting it, two vectors of two keys at a time without a
// branch (a compiler vector: SSE2 on the baseline target, f64x2 in
// WebAssembly; its ?: is a blend, or maxpd and minpd). Its sums run in another order, so its closed form is not
// bit for bit the one steps() proves: it only says where steps() starts,
// lowered by far more than its rounding, so that no key of the support is
// dropped. steps() then proves its closed form on the same keys in one step,
// and since that closed form only depends on the support, the threshold is
// the one steps() finds from any lower bound.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

namespace entgraph::detail {

// The α the bound solves for (1.5-entmax and sparsemax have closed forms).
inline bool theta_lower_bound_applies(double alpha) { return alpha == 1.5 || alpha == 2.0; }

// A lower bound of the threshold of x[0 .. count) (x = (α − 1)(e − max e),
// so the largest is 0; see theta_steps.hpp) close to it, from a lower bound
// tau >= -1, for α = 1.5 and sparsemax (other α get tau back). Each sum has
// at most count terms in [0, 1] (x <= 0 and tau >= -1): its rounding is
// far below the margin (count + 1)² 2^-40 taken off the closed form.
inline double theta_lower_bound(const double* x, std::size_t count, double alpha, double tau) {
  if (!theta_lower_bound_applies(alpha) || count == 0 || !(tau >= -1.0)) return tau;
  using Doubles = double __attribute__((vector_size(16)));
  constexpr std::size_t W = 4;  // keys a pass: two vectors, each with its own sums
  const double terms = static_cast<double>(count) + 1.0, margin = terms * terms * 0x1p-40;
  // The last keys, padded with -inf (never above tau) to a whole pass.
  const std::size_t passes = (count + W - 1) / W;
  double tail[W];
  std::fill(tail, tail + W, -std::numeric_limits<double>::infinity());
  std::copy(x + (passes - 1) * W, x + count, tail);
  const Doubles zero = {0.0, 0.0}, one = {1.0, 1.0};
  for (int step = 0; step < 100; ++step) {
    Doubles kept[2] = {zero, zero}, s1[2] = {zero, zero}, s2[2] = {zero, zero}, low[2] = {one, one};
    const Doubles t = {tau, tau};
    for (std::size_t pass = 0; pass < passes; ++pass) {
      const double* p = pass + 1 < passes ? x + pass * W : tail;
      for (int h = 0; h < 2; ++h) {
        Doubles v;
        std::memcpy(&v, p + 2 * h, sizeof v);
        const Doubles gap = v - t;
        const auto on = gap > zero;
        const Doubles g = on ? gap : zero;  // maxpd
        kept[h] += on ? one : zero;
        s1[h] += g;
        s2[h] += g * g;
        const Doubles above = on ? gap : one;
        low[h] = above < low[h] ? above : low[h];  // minpd
      }
    }
    const Doubles k2 = kept[0] + kept[1], sum2 = s1[0] + s1[1], squares2 = s2[0] + s2[1];
    const double k = k2[0] + k2[1], sum = sum2[0] + sum2[1], squares = squares2[0] + squares2[1];
    const double lowest = std::min(std::min(low[0][0], low[0][1]), std::min(low[1][0], low[1][1]));
    if (!(k > 0.0)) return tau;  // nothing above tau: it was not below the threshold
    // In gap units: the closed form on the keys above tau, and the step from
    // below where it does not hold.
    double closed, next;
    if (alpha == 2.0) {
      closed = (sum - 1.0) / k;
      next = closed;
    } else {
      const double mean = sum / k, disc = (1.0 - (squares - sum * mean)) / k;
      closed = disc >= 0.0 ? mean - std::sqrt(disc) : -1.0;
      next = (squares - 1.0) / (2.0 * sum);  // Newton on Σ gap² − 1
    }
    if (closed >= 0.0 && lowest > closed) return tau + closed - margin;
    if (!(next > 0.0)) break;
    tau += next;
  }
  return tau - margin;
}

}  // namespace entgraph::detail
