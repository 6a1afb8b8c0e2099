// entgraph internal: the SIMD row kernels of α-entmax for general α, and of
// short rows (general α and 1.5-entmax) solved a row per lane
// (kernels/simd/row_simd.hpp says how these headers are compiled).
#pragma once

#include "kernels/simd/row_simd.hpp"
#include "kernels/simd/sparsemax_simd.hpp"

namespace entgraph::detail::simd {

template <class A>
struct EntmaxRows : RowSimd<A> {
  ENTGRAPH_ROW_SIMD_MEMBERS

  // General alpha-entmax, alpha in (1, kMaxEntmaxAlpha]. With a = alpha - 1,
  // u = z - max <= 0 and the unknown lambda >= 0,
  //   p = (1 + a (u - lambda))_+^(1/a) = exp(log1p(a (u - lambda)) / a),
  // which tends to exp(u - lambda) (softmax) as a -> 1 without cancellation.
  // f(lambda) = sum p - 1 is decreasing, f(0) >= 0 (the max has p = 1) and
  // f(lambda_hi) <= 0 for lambda_hi = (1 - nc^-a) / a, nc the number of
  // candidates u > -1/a (the only entries that can have p > 0 for lambda >= 0).
  // The weights are scattered to the candidates' positions and renormalised.
  //
  // For alpha <= 2 the iteration runs in float SIMD. For alpha > 2, p = w^(1/a)
  // magnifies the relative error of a small w = 1 + a (u - lambda): no
  // threshold in float or double resolves an entry just above it (at alpha =
  // 10, p = 0.12 needs w = 5e-9; near a tie at alpha = 1000, 1e-5994). There
  // entmax_relative solves the row in the weights' own terms, in double.
  static void entmax(const float* z, float* p, std::size_t n, const RowParams& params, float* scratch) {
    if (params.alpha > 2.0) return entmax_relative(z, p, n, params.alpha);
    const double a = params.alpha - 1.0;
    const float reach = static_cast<float>(1.0 / a);
    Candidates cand;
    if (!candidates(z, n, std::isfinite(reach) ? -reach : -kInf, 1.0f, true, scratch, cand)) return fill(p, n, 0.0f);
    entmax_candidates_float(cand.c, cand.count, a);
    fill(p, n, 0.0f);
    for (std::size_t j = 0; j < cand.count; ++j) p[cand.idx[j]] = cand.c[j];
  }

  // Safeguarded Halley on a decreasing f over [lo, hi] with f(lo) >= 0 >=
  // f(hi): evaluate(x, f, slope, curv) gives f(x), -f'(x) and f''(x). Halley
  // converges cubically, which halves the passes of Newton here; steps that
  // leave the bracket become bisections. Stops when a step is below `tol`
  // relative to x while |f| <= f_tol (a tiny step alone proves nothing where
  // the slope is huge), or when the bracket is that small; after 30 passes a
  // tiny step is enough (float sums can keep |f| above f_tol as noise).
  template <class Evaluate>
  static double solve_decreasing(double lo, double hi, double x, double tol, double f_tol, Evaluate evaluate) {
    for (int it = 0; it < 200; ++it) {
      double f, slope, curv;
      evaluate(x, f, slope, curv);
      if (f > 0) lo = x > lo ? x : lo;
      else hi = x < hi ? x : hi;
      const double denom = 2 * slope * slope - f * curv;
      const double step_to = denom > 0 ? x + 2 * f * slope / denom : x;
      const double limit = tol * (1.0 + std::fabs(x));
      // Converged where the step is tiny and f small: a root hit exactly
      // (f = 0) lands on the bracket's end, which must not send it bisecting.
      if (f == 0.0 || (denom > 0 && std::fabs(step_to - x) <= limit && std::fabs(f) <= f_tol))
        return std::min(std::max(step_to, lo), hi);
      const double next = denom > 0 && step_to > lo && step_to < hi ? step_to : 0.5 * (lo + hi);
      const double step = std::fabs(next - x);
      x = next;
      if ((step <= limit && it >= 30) || hi - lo <= limit) break;
    }
    return x;
  }

  // w and p = w^(1/a) of candidates v at the unknown x (a float batch), in
  // the form entmax_candidates_float describes (w <= 0 gives garbage p;
  // callers select on w > 0). When 1/a is a small integer k (alpha = 1 + 1/k:
  // 1.5, 1.333, 1.25, ...), w^k by multiplication replaces a log and an exp,
  // the bulk of the cost.
  struct EntmaxWeight {
    bool threshold_form;
    int int_power;
    B ab, inv;
    explicit EntmaxWeight(double a)
        : threshold_form(a > 0.5),
          int_power(1.0 / a == std::floor(1.0 / a) && 1.0 / a <= 8.0 ? static_cast<int>(1.0 / a) : 0),
          ab(static_cast<float>(a)),
          inv(static_cast<float>(1.0 / a)) {}
    ENTGRAPH_SIMD128_INLINE void operator()(const B& v, const B& x, B& w, B& pw) const {
      if (threshold_form) {
        w = ab * (v - x);
      } else {
        const B y = ab * (v - x);
        w = B(1.0f) + y;
        if (!int_power) {
          pw = xsimd::exp(xsimd::log1p(xsimd::max(y, B(-1.0f + 1e-7f))) * inv);
          return;
        }
      }
      if (int_power) {
        pw = w;
        for (int k = 1; k < int_power; ++k) pw *= w;
      } else {
        pw = xsimd::exp(xsimd::log(xsimd::max(w, B(1e-30f))) * inv);
      }
    }
  };

  // Overwrites the candidates c (u values) with their normalised weights.
  // The unknown is kept where float resolves w = 1 + a (c - lambda) best:
  // - alpha <= 1.5: lambda itself, with w^(1/a) = exp(log1p(a (c - lambda)) / a)
  //   (no cancellation as a -> 0, where the weights tend to softmax's);
  // - alpha > 1.5: the threshold t = lambda - 1/a, with w = a (c - t). There w
  //   is small on flat rows (about n^-a) and 1 + x would cancel.
  static void entmax_candidates_float(float* c, std::size_t nc, double a) {
    const EntmaxWeight weight(a);
    const double hi = -std::expm1(-a * std::log(static_cast<double>(nc))) / a;
    const double offset = weight.threshold_form ? -1.0 / a : 0.0;  // unknown = lambda + offset
    const B one(1.0f);
    // f = sum p - 1, -f' = sum p / w and f'' = (1 - a) sum p / w^2 over the
    // candidates (dp/dlambda = -p / w since w' = -a and a / a = 1), or over
    // every stride-th batch of them, scaled up to estimate the full sums.
    auto evaluate_sampled = [&](std::size_t stride, double x, double& f, double& slope, double& curv) {
      const B xb(static_cast<float>(x));
      B sm(0.0f), sd(0.0f), sc(0.0f);
      std::size_t seen = 0;
      for (std::size_t i = 0; i < nc; i += stride * W) {
        B w, pw;
        weight(load(c, i, nc, -kInf), xb, w, pw);
        const BB in = w > B(0.0f);
        pw = select0(in, pw);
        const B r = one / xsimd::max(w, B(1e-30f));  // one division, not two: divisions dominate here
        const B q = pw * r;
        sm += pw;
        sd += q;
        sc += q * r;
        seen += i + W <= nc ? W : nc - i;
      }
      const double up = static_cast<double>(nc) / static_cast<double>(seen);
      f = up * sum(sm) - 1.0;
      slope = up * sum(sd);
      curv = (1.0 - a) * up * sum(sc);
    };
    auto evaluate = [&](double x, double& f, double& slope, double& curv) { evaluate_sampled(1, x, f, slope, curv); };
    // Many candidates: a coarse solve on one batch in 8 (or 4) first, so
    // that the full passes start next to the root, where Halley needs about
    // two. The full solve keeps the true bracket, so a poor sample costs
    // passes, never accuracy.
    double start = offset;
    const std::size_t stride = nc >= 64 * W ? 8 : nc >= 16 * W ? 4 : 1;
    if (stride > 1) {
      start = solve_decreasing(offset, hi + offset, offset, 1e-3, 1e-2,
                               [&](double x, double& f, double& slope, double& curv) {
                                 evaluate_sampled(stride, x, f, slope, curv);
                               });
    }
    // f is convex for alpha <= 2: Halley from the left. No early stop on the
    // step size: at alpha = 2, f is piecewise linear and the cubic rate does
    // not hold across its kinks.
    const double x = solve_decreasing(offset, hi + offset, start, 1e-7, 1e-6, evaluate);
    // Weights at x, then normalised (one transcendental pass, not two).
    const B xb(static_cast<float>(x));
    B sm(0.0f);
    for (std::size_t i = 0; i < nc; i += W) {
      B w, pw;
      weight(load(c, i, nc, -kInf), xb, w, pw);
      pw = select0(w > B(0.0f), pw);
      sm += pw;
      store(c, i, nc, pw);
    }
    scale(c, nc, static_cast<float>(1.0 / sum(sm)));
  }

  // General alpha on short rows: over a few dozen candidates a pass is mostly
  // fixed cost (horizontal sums, the scalar Halley step, the gather and
  // scatter), so W rows are solved together, one per lane. They are
  // transposed into scratch (entry j of every row side by side), every sum
  // is lane-wise, and each lane runs entmax_candidates_float's safeguarded
  // Halley iteration on its own bracket, frozen once it converges: a row's
  // result does not depend on the rows beside it. alpha > 2 keeps the
  // per-row kernel (its solve needs double).
  static void entmax_short(const float* const* z, float* const* p, std::size_t count, std::size_t n,
                           const RowParams& params, float* scratch) {
    if (params.alpha > 2.0) {
      for (std::size_t r = 0; r < count; ++r) entmax(z[r], p[r], n, params, scratch);
      return;
    }
    for (std::size_t first = 0; first < count; first += W)
      entmax_lanes(z + first, p + first, std::min(W, count - first), n, params.alpha - 1.0, scratch);
  }

  // Up to W rows side by side in scratch (64-byte aligned): block[j W + r] =
  // z[r][j], lanes past `rows` a row of zeros; and back.
  static float* transpose_in(const float* const* z, std::size_t rows, std::size_t n, float* scratch) {
    float* const block = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(scratch) + 63) & ~std::uintptr_t{63});
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t r = 0; r < W; ++r) block[j * W + r] = r < rows ? z[r][j] : 0.0f;
    return block;
  }
  static void transpose_out(const float* block, float* const* p, std::size_t rows, std::size_t n) {
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < n; ++j) p[r][j] = block[j * W + r];
  }
  // The lanes' row max; rows of only -inf (not live) get 0.
  static B lane_max(const float* block, std::size_t n, BB& live) {
    B m(-kInf);
    for (std::size_t j = 0; j < n; ++j) m = xsimd::max(m, B::load_aligned(block + j * W));
    live = m > B(-kInf);
    return select0(live, m);
  }

  static void entmax_lanes(const float* const* z, float* const* p, std::size_t rows, std::size_t n, double a,
                           float* scratch) {
    float* const block = transpose_in(z, rows, n, scratch);
    auto column = [&](std::size_t j) { return B::load_aligned(block + j * W); };
    BB live;
    const B m = lane_max(block, n, live);  // rows of only -inf get zeros
    // As entmax_candidates_float: the unknown is lambda (alpha <= 1.5) or the
    // threshold lambda - 1/a, x in [offset, hi]; w = 1 + a (u - lambda) and
    // p = w^(1/a) over the candidates u = z - max > -1/a.
    const EntmaxWeight weight(a);
    const double beta = 1.0 / a;
    const B ab(static_cast<float>(a)), one(1.0f), reach(static_cast<float>(-beta));
    const B offset(weight.threshold_form ? static_cast<float>(-beta) : 0.0f);
    B candidates(0.0f);
    for (std::size_t j = 0; j < n; ++j) candidates += select0(column(j) - m > reach, one);
    // f(lambda_hi) <= 0 at lambda_hi = (1 - nc^-a) / a (every candidate at the max).
    B lo = offset, hi = offset + (one - xsimd::exp(-ab * xsimd::log(xsimd::max(candidates, one)))) * B(static_cast<float>(beta));
    B x = lo;
    BB active = live & (hi > lo);
    const B tol(1e-7f), f_tol(1e-6f);
    for (int it = 0; it < 200 && xsimd::any(active); ++it) {
      B sm(0.0f), sd(0.0f), sc(0.0f);
      for (std::size_t j = 0; j < n; ++j) {
        B w, pw;
        weight(column(j) - m, x, w, pw);
        pw = select0(w > B(0.0f), pw);
        const B r = one / xsimd::max(w, B(1e-30f)), q = pw * r;
        sm += pw;
        sd += q;
        sc += q * r;
      }
      const B f = sm - one, slope = sd, curv = B(static_cast<float>(1.0 - a)) * sc;
      lo = xsimd::select(active & (f > B(0.0f)), xsimd::max(x, lo), lo);
      hi = xsimd::select(active & !(f > B(0.0f)), xsimd::min(x, hi), hi);
      const B denom = B(2.0f) * slope * slope - f * curv;
      const BB halley = denom > B(0.0f);
      const B step_to = xsimd::select(halley, x + B(2.0f) * f * slope / denom, x);
      const B limit = tol * (one + xsimd::abs(x));
      const BB converged = (f == B(0.0f)) | (halley & (xsimd::abs(step_to - x) <= limit) & (xsimd::abs(f) <= f_tol));
      const B next = xsimd::select(halley & (step_to > lo) & (step_to < hi), step_to, B(0.5f) * (lo + hi));
      const BB stop = ((xsimd::abs(next - x) <= limit) & BB(it >= 30)) | (hi - lo <= limit);
      x = xsimd::select(active, xsimd::select(converged, xsimd::min(xsimd::max(step_to, lo), hi), next), x);
      active = active & !(converged | stop);
    }
    // Weights at x, normalised, written back row by row.
    B total(0.0f);
    for (std::size_t j = 0; j < n; ++j) {
      B w, pw;
      weight(column(j) - m, x, w, pw);
      pw = select0(w > B(0.0f), pw);
      total += pw;
      pw.store_aligned(block + j * W);
    }
    const B scale_by = xsimd::select(live & (total > B(0.0f)), one / total, B(0.0f));
    for (std::size_t j = 0; j < n; ++j) (column(j) * scale_by).store_aligned(block + j * W);
    transpose_out(block, p, rows, n);
  }

  // entmax15 on short rows, W at a time: entmax15_tau's iteration with every
  // sum lane-wise, each lane frozen once its support checks; a lane not
  // settled in kMaxPasses (ties at the threshold) takes the row kernel.
  static void entmax15_short(const float* const* z, float* const* p, std::size_t count, std::size_t n,
                             const RowParams& params, float* scratch) {
    for (std::size_t first = 0; first < count; first += W)
      entmax15_lanes(z + first, p + first, std::min(W, count - first), n, params, scratch);
  }

  static void entmax15_lanes(const float* const* z, float* const* p, std::size_t rows, std::size_t n,
                             const RowParams& params, float* scratch) {
    float* const block = transpose_in(z, rows, n, scratch);
    auto column = [&](std::size_t j) { return B::load_aligned(block + j * W); };
    BB live;
    const B m = lane_max(block, n, live), half(0.5f), one(1.0f), zero(0.0f);
    for (std::size_t j = 0; j < n; ++j) ((column(j) - m) * half).store_aligned(block + j * W);  // c, -inf where masked
    B lower(-1.0f), upper(0.0f), x(-1.0f), tau(-1.0f);
    BB active = live;
    for (int pass = 0; pass < SparseRows<A>::kMaxPasses && xsimd::any(active); ++pass) {
      B s1(0.0f), s2(0.0f), k(0.0f), lo(kInf), hi(-kInf);
      for (std::size_t j = 0; j < n; ++j) {
        const B v = column(j);
        const BB in = v > x;
        const B d = select0(in, v - x);
        s1 += d;
        s2 += d * d;
        k += select0(in, one);
        lo = xsimd::min(lo, xsimd::select(in, v, B(kInf)));
        hi = xsimd::max(hi, xsimd::select(in, B(-kInf), v));
      }
      const BB empty = k == zero, below = (s2 >= one) & (!empty);
      const B mean = s1 / xsimd::max(k, one);
      const B disc = mean * mean - (s2 - one) / xsimd::max(k, one);
      const BB has_root = (!empty) & (below | (disc >= zero));
      const B rho = x + mean - xsimd::sqrt(xsimd::max(disc, zero));
      const BB accept = active & has_root & (disc >= zero) & (lo >= rho - B(1e-7f)) & (hi <= rho + B(1e-7f)) &
                        (s2 <= B(2.0f));
      tau = xsimd::select(accept, rho, tau);
      // Bounds: below, x <= tau <= rho; above (or empty), rho <= tau < x.
      lower = xsimd::select(below, xsimd::max(lower, x), lower);
      upper = xsimd::select(!below, xsimd::min(upper, x), upper);
      B next = xsimd::select(below, x + (s2 - xsimd::sqrt(s2)) / xsimd::max(s1, B(1e-30f)), B(0.5f) * (lower + upper));
      next = xsimd::select(has_root & (disc >= zero) & (rho > lower) & (rho < upper), rho, next);
      lower = xsimd::select(has_root & (disc >= zero) & (!below), xsimd::max(lower, rho), lower);
      upper = xsimd::select(has_root & (disc >= zero) & below, xsimd::min(upper, rho), upper);
      next = xsimd::select((next >= lower) & (next <= upper) & (next != x), next, B(0.5f) * (lower + upper));
      active = active & !accept;
      x = xsimd::select(active, next, x);
    }
    for (std::size_t j = 0; j < n; ++j) {
      const B d = xsimd::max(column(j) - tau, zero);
      select0(live, d * d).store_aligned(block + j * W);
    }
    transpose_out(block, p, rows, n);
    if (xsimd::any(active)) {  // unsettled lanes: the row kernel (sorts)
      alignas(64) float flag[W];
      select0(active, one).store_aligned(flag);
      for (std::size_t r = 0; r < rows; ++r)
        if (flag[r] != 0.0f) SparseRows<A>::entmax15(z[r], p[r], n, params, scratch);
    }
  }
};

}  // namespace entgraph::detail::simd
