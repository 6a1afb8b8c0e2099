// entgraph internal: the SIMD row kernels with a closed-form threshold on
// their candidates: sparsemax and 1.5-entmax (kernels/simd/row_simd.hpp says
// how these headers are compiled).
#pragma once

#include "kernels/simd/row_simd.hpp"

namespace entgraph::detail::simd {

template <class A>
struct SparseRows : RowSimd<A> {
  ENTGRAPH_ROW_SIMD_MEMBERS

  // Sparsemax: p = max(z - tau, 0). The support lies in {z > max - 1}; those
  // candidates (centred on the max, so in (-1, 0]) are gathered in one pass.
  // On them the iteration tau <- (sum_{c > tau} c - 1) / #{c > tau}, started at
  // tau = -1 <= tau*, increases monotonically to tau* and stops exactly when the
  // support stops changing (Michelot 1986); each step is one vectorised pass
  // over the candidates. If it has not settled after kMaxPasses passes, the
  // candidates are sorted and solved exactly.
  static constexpr int kMaxPasses = 12;

  static double sparsemax_tau(float* c, std::size_t nc) {
    double tau = -1.0;
    std::size_t count = 0;
    for (int pass = 0; pass < kMaxPasses; ++pass) {
      const B t(static_cast<float>(tau));
      B s(0.0f), k(0.0f);
      for (std::size_t i = 0; i < nc; i += W) {
        const B v = load(c, i, nc, -kInf);
        const BB in = v > t;
        s += select0(in, v);
        k += select0(in, B(1.0f));
      }
      const std::size_t kn = static_cast<std::size_t>(sum(k));
      if (kn == count) return tau;
      count = kn;
      tau = (sum(s) - 1.0) / static_cast<double>(kn);
    }
    std::sort(c, c + nc, [](float a, float b) { return a > b; });
    double cum = 0;
    for (std::size_t j = 1; j <= nc; ++j) {
      cum += c[j - 1];
      if (1.0 + static_cast<double>(j) * c[j - 1] > cum) tau = (cum - 1.0) / static_cast<double>(j);
    }
    return tau;
  }

  static void sparsemax(const float* z, float* p, std::size_t n, const RowParams&, float* scratch) {
    Candidates cand;
    if (!candidates(z, n, -1.0f, 1.0f, false, scratch, cand)) return fill(p, n, 0.0f);
    // (z - max) - tau, not z - (max + tau): the latter rounds tau away when |max| >> 1.
    const B mb(cand.max), tb(static_cast<float>(sparsemax_tau(cand.c, cand.count)));
    for (std::size_t i = 0; i < n; i += W) store(p, i, n, xsimd::max((load(z, i, n, -kInf) - mb) - tb, B(0.0f)));
  }

  // 1.5-entmax: p = [(z - max)/2 - tau]_+^2 with tau in [-1, 0). Candidates
  // c = (z - max)/2 above a lower bound of tau are gathered (entmax15, below);
  // tau is the root of the convex,
  // decreasing f(x) = sum (c - x)_+^2 - 1. A pass at a trial point x sums
  // over S = {c > x}: K, S1 = sum (c - x), S2 = sum (c - x)^2 (f(x) = S2 - 1),
  // the least element of S and the largest element outside it. That gives
  // - rho, the root of the quadratic sum_S (c - rho)^2 = 1: it is tau exactly
  //   when S is the support (all of S above rho, the rest at or below it);
  // - bounds: f(x) >= 0 means x <= tau <= rho (right of x the quadratic is at
  //   least f), f(x) < 0 means S is inside the support, so rho <= tau < x.
  // The next point is rho when it narrows the bracket, else a Newton step on
  // h(x) = ||(c - x)_+||_2 - 1, x + (S2 - sqrt S2) / S1: h is convex too, so
  // from the left it never overshoots, and it is nearly linear, so it goes
  // much farther than Newton on f. About 3.5 passes at n = 512 from -1
  // (Newton on f took 5.5). rho loses digits when measured from far away
  // (c - x ~ 1 over thousands of candidates): it is accepted only from a
  // point with S2 <= 2, else it is the next point. Ties at the threshold
  // could stall all this: hence the sort fallback.
  //
  // One solver's state: the bracket and the trial point (a float value).
  struct Entmax15Search {
    double lower, upper, x;
    // The step after a pass at x that found K, S1, S2, the least element of
    // S and the largest outside it: true with `root` when it is tau, else x
    // moves to the next point.
    bool step(double K, double S1, double S2, double least, double largest_out, double& root) {
      if (K == 0) {  // x at or above the max: an upper bound
        upper = x;
        x = static_cast<float>(0.5 * (lower + upper));
        return false;
      }
      const bool below = S2 >= 1.0;
      const double mean = S1 / K, disc = std::max(mean * mean - (S2 - 1.0) / K, below ? -1.0 : 0.0);
      double next = 0.5 * (lower + upper);
      if (below) {
        lower = std::max(lower, x);
        next = x + (S2 - std::sqrt(S2)) / S1;
      } else {
        upper = std::min(upper, x);
      }
      if (disc >= 0.0) {
        root = x + mean - std::sqrt(disc);
        if (least >= root - 1e-7 && largest_out <= root + 1e-7 && S2 <= 2.0) return true;
        if (root > lower && root < upper) next = root;
        if (below) upper = std::min(upper, root);
        else lower = std::max(lower, root);
      }
      x = static_cast<float>(next >= lower && next <= upper && next != x ? next : 0.5 * (lower + upper));
      return false;
    }
  };

  // start: a lower bound on tau (-1 always is one).
  static double entmax15_tau(float* c, std::size_t nc, double start) {
    Entmax15Search search{start, 0.0, static_cast<float>(start)};
    for (int pass = 0; pass < kMaxPasses; ++pass) {
      const B xb(static_cast<float>(search.x));
      // S1 and S2 in double lanes: on flat rows thousands of equal terms
      // would round the same way in float lanes (a constant row of 3000 then
      // summed to 1 + 1e-5 on SSE2).
      BD s1(0.0), s2(0.0);
      B k(0.0f), lo(kInf), hi(-kInf);
      for (std::size_t i = 0; i < nc; i += W) {
        const B v = load(c, i, nc, -kInf);
        const BB in = v > xb;
        const B d = select0(in, v - xb);
        add_wide(s1, d);
        add_wide(s2, d * d);
        k += select0(in, B(1.0f));
        lo = xsimd::min(lo, xsimd::select(in, v, B(kInf)));
        hi = xsimd::max(hi, xsimd::select(in, B(-kInf), v));
      }
      double root;
      if (search.step(sum(k), sum(s1), sum(s2), min(lo), max(hi), root)) return root;
    }
    std::sort(c, c + nc, [](float a, float b) { return a > b; });
    double s = 0, ss = 0, t = -1.0;
    for (std::size_t j = 1; j <= nc; ++j) {
      const double v = c[j - 1], kk = static_cast<double>(j);
      s += v;
      ss += v * v;
      const double m = s / kk, delta = (1.0 - (ss - kk * m * m)) / kk;
      if (delta < 0) break;
      const double tj = m - std::sqrt(delta);
      if (tj < v) t = tj;
      else break;
    }
    return t;
  }

  // At most W candidates: each candidate c_j proposes the support
  // {c >= c_j}, and all proposals are solved at once, one per lane, in nc
  // steps with no horizontal sum (those dominate passes over a few
  // candidates). Relative to c_j, over its proposal: K, S1 = sum (c - c_j),
  // S2 = sum (c - c_j)^2, and the root of sum (c - t)^2 = 1,
  // t_j = c_j + S1/K - sqrt((S1/K)^2 - (S2 - 1)/K). The consistent proposals
  // (t_j < c_j) are the sorted row's prefixes up to the support, whose roots
  // grow with the prefix: tau is the largest of them, the sorted scan's
  // answer (ties enter a proposal together). Even and odd i keep separate
  // sums so that two independent chains hide the adds' latency.

  struct Proposals {
    B k = B(0.0f), s1 = B(0.0f), s2 = B(0.0f);
    void add(const B& d) {
      const BB in = d >= B(0.0f);
      const B dm = select0(in, d);
      k += select0(in, B(1.0f));
      s1 += dm;
      s2 += dm * dm;
    }
    B root(const Proposals& other, const B& cj) const {
      const B kk = k + other.k, inv = B(1.0f) / kk, mean = (s1 + other.s1) * inv;
      const B disc = mean * mean - (s2 + other.s2 - B(1.0f)) * inv;
      const B t = cj + mean - xsimd::sqrt(xsimd::max(disc, B(0.0f)));
      return xsimd::select((kk > B(0.0f)) & (disc >= B(0.0f)) & (t < cj), t, B(-1.0f));
    }
  };

  static double entmax15_tau_pairs(const float* c, std::size_t nc) {  // nc <= W
    const B cj = load(c, 0, nc, kInf);  // +inf lanes propose nothing
    Proposals even, odd;
    std::size_t i = 0;
    for (; i + 1 < nc; i += 2) {
      even.add(B(c[i]) - cj);
      odd.add(B(c[i + 1]) - cj);
    }
    if (i < nc) even.add(B(c[i]) - cj);
    // tau >= -1: the max (c = 0) alone has mass 1 there.
    return max(even.root(odd, cj));
  }

  // The row: its lanes' maxima first (the row max pass, kept lane-wise).
  // tau of any subset of the scores is a lower bound on the row's tau (more
  // entries only add mass), and that of the W lane maxima, solved exactly in
  // one batch of proposals, usually lies just below it: gathering only the
  // scores above it leaves a few more than the support, often few enough for
  // the proposals again, and starts the passes next to the root.
  static void entmax15(const float* z, float* p, std::size_t n, const RowParams&, float* scratch) {
    B lanes(-kInf);
    for (std::size_t i = 0; i < n; i += W) lanes = xsimd::max(lanes, load(z, i, n, -kInf));
    const float m = max(lanes);
    if (m == -kInf) return fill(p, n, 0.0f);
    const B mb(m), half(0.5f);
    alignas(64) float top[W];
    ((lanes - mb) * half).store_aligned(top);
    // (less a margin for the float solve: a floor above tau would drop support)
    const double floor = std::max(entmax15_tau_pairs(top, W) - 1e-5, -1.0);
    const std::size_t nc = gather_candidates(z, n, static_cast<float>(floor), m, 0.5f, scratch, nullptr);
    const double tau = nc <= W ? entmax15_tau_pairs(scratch, nc) : entmax15_tau(scratch, nc, floor);
    const B tb(static_cast<float>(tau));
    for (std::size_t i = 0; i < n; i += W) {
      const B d = xsimd::max((load(z, i, n, -kInf) - mb) * half - tb, B(0.0f));
      store(p, i, n, d * d);
    }
  }
};

}  // namespace entgraph::detail::simd
