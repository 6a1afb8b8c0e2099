// entgraph internal: xsimd kernels of the row transforms, templated on the
// instruction set. Included ONLY by kernels/simd/arch_<isa>.cpp, each compiled
// with that ISA's flags (a body visible elsewhere would be instantiated with
// the wrong flags).
//
// Tails are processed as one more full batch through a small buffer padded
// with -inf (inputs) so that every element goes through the same SIMD code.
// Sums are accumulated per lane in float and reduced in double.
//
// No standard algorithm is called here with argument types that other
// translation units also use (std::fill on float*, std::max on double...):
// such an instantiation is shared at link time, and the linker could keep the
// copy compiled with AVX-512 flags for every caller. Plain loops instead; the
// std::sort/nth_element calls take a lambda, whose type is unique to the ISA.
#pragma once

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/transform_kernels.hpp"

namespace entgraph::detail::simd {

constexpr float kInf = std::numeric_limits<float>::infinity();

template <class A>
struct Kernels {
  using B = xsimd::batch<float, A>;
  using BB = xsimd::batch_bool<float, A>;
  static constexpr std::size_t W = B::size;

  // Loads z[i, i+W) or, past the end, the rest padded with `fill`.
  static B load(const float* z, std::size_t i, std::size_t n, float fill) {
    if (i + W <= n) return B::load_unaligned(z + i);
    alignas(64) float buf[W];
    for (std::size_t l = 0; l < W; ++l) buf[l] = i + l < n ? z[i + l] : fill;
    return B::load_aligned(buf);
  }
  static void store(float* p, std::size_t i, std::size_t n, const B& v) {
    if (i + W <= n) return v.store_unaligned(p + i);
    alignas(64) float buf[W];
    v.store_aligned(buf);
    for (std::size_t l = 0; i + l < n; ++l) p[i + l] = buf[l];
  }
  static double sum(const B& v) {
    alignas(64) float buf[W];
    v.store_aligned(buf);
    double s = 0;
    for (std::size_t l = 0; l < W; ++l) s += buf[l];
    return s;
  }
  static float max(const B& v) {
    alignas(64) float buf[W];
    v.store_aligned(buf);
    float m = buf[0];
    for (std::size_t l = 1; l < W; ++l) m = buf[l] > m ? buf[l] : m;
    return m;
  }
  static float min(const B& v) {
    alignas(64) float buf[W];
    v.store_aligned(buf);
    float m = buf[0];
    for (std::size_t l = 1; l < W; ++l) m = buf[l] < m ? buf[l] : m;
    return m;
  }
  static B select0(const BB& c, const B& v) { return xsimd::select(c, v, B(0.0f)); }

  static bool valid(const float* z, std::size_t n) {
    BB ok(true);
    for (std::size_t i = 0; i < n; i += W) ok = ok & (load(z, i, n, 0.0f) < B(kInf));  // NaN compares false
    return xsimd::all(ok);
  }

  static bool finite(const float* z, std::size_t n) {
    BB ok(true);
    for (std::size_t i = 0; i < n; i += W) ok = ok & (xsimd::abs(load(z, i, n, 0.0f)) < B(kInf));
    return xsimd::all(ok);
  }

  static float row_max(const float* z, std::size_t n) {
    B m(-kInf);
    for (std::size_t i = 0; i < n; i += W) m = xsimd::max(m, load(z, i, n, -kInf));
    return max(m);
  }

  static void fill(float* p, std::size_t n, float v) {
    for (std::size_t i = 0; i < n; ++i) p[i] = v;
  }

  // p *= c.
  static void scale(float* p, std::size_t n, float c) {
    const B cb(c);
    for (std::size_t i = 0; i < n; i += W) store(p, i, n, load(p, i, n, 0.0f) * cb);
  }

  // Appends c = (z - shift) * mul of the entries with c > threshold to vals,
  // and their indices to idx; returns the count. The test is on the centred
  // value: shift + threshold / mul would round away when |shift| >> 1. Whole
  // batches below the threshold cost one compare, cheap for peaked rows.
  static std::size_t gather_candidates(const float* z, std::size_t n, float threshold, float shift, float mul,
                                       float* vals, std::uint32_t* idx) {
    std::size_t c = 0;
    const B t(threshold), sb(shift), mb(mul);
#if defined(__AVX512F__)
    // AVX-512 compresses the selected lanes in a register, one instruction
    // each for the values and the indices, and stores the first popcount
    // lanes (Zen 4's compress straight to memory is microcoded, hundreds of
    // cycles); the -inf padding of the tail is never selected.
    if constexpr (std::is_same_v<A, xsimd::avx512bw>) {
      const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
      for (std::size_t i = 0; i < n; i += W) {
        const __m512 v = static_cast<__m512>((load(z, i, n, -kInf) - sb) * mb);
        const __mmask16 keep = _mm512_cmp_ps_mask(v, static_cast<__m512>(t), _CMP_GT_OQ);
        if (keep == 0) continue;
        const int count = __builtin_popcount(keep);
        const __mmask16 first = static_cast<__mmask16>((1u << count) - 1u);
        _mm512_mask_storeu_ps(vals + c, first, _mm512_maskz_compress_ps(keep, v));
        _mm512_mask_storeu_epi32(idx + c, first,
                                 _mm512_maskz_compress_epi32(keep, _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int>(i)))));
        c += static_cast<std::size_t>(count);
      }
      return c;
    }
#endif
    for (std::size_t i = 0; i < n; i += W) {
      const B v = (load(z, i, n, -kInf) - sb) * mb;
      if (!xsimd::any(v > t)) continue;
      alignas(64) float buf[W];
      v.store_aligned(buf);
      for (std::size_t l = 0; l < W; ++l) {
        vals[c] = buf[l];
        idx[c] = static_cast<std::uint32_t>(i + l);
        c += buf[l] > threshold;
      }
    }
    return c;
  }

  // A row's max and its candidates c = (z - max) * mul > threshold, with
  // their indices, laid out in scratch. False for a row of only -inf (nothing
  // to attend to), which the caller turns into zeros.
  struct Candidates {
    float max;
    float* c;
    std::uint32_t* idx;
    std::size_t count;
  };
  static bool candidates(const float* z, std::size_t n, float threshold, float mul, float* scratch,
                         Candidates& out) {
    out.max = row_max(z, n);
    if (out.max == -kInf) return false;
    out.c = scratch;
    out.idx = reinterpret_cast<std::uint32_t*>(scratch + n + 16);
    out.count = gather_candidates(z, n, threshold, out.max, mul, out.c, out.idx);
    return true;
  }

  // -------------------------------------------------------------------------
  static void softmax(const float* z, float* p, std::size_t n, const RowParams&, float*) {
    const float m = row_max(z, n);
    if (m == -kInf) return fill(p, n, 0.0f);
    const B mb(m);
    B acc(0.0f);
    for (std::size_t i = 0; i < n; i += W) {
      const B e = xsimd::exp(load(z, i, n, -kInf) - mb);
      acc += e;
      store(p, i, n, e);
    }
    scale(p, n, static_cast<float>(1.0 / sum(acc)));
  }

  // -------------------------------------------------------------------------
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
    if (!candidates(z, n, -1.0f, 1.0f, scratch, cand)) return fill(p, n, 0.0f);
    // (z - max) - tau, not z - (max + tau): the latter rounds tau away when |max| >> 1.
    const B mb(cand.max), tb(static_cast<float>(sparsemax_tau(cand.c, cand.count)));
    for (std::size_t i = 0; i < n; i += W) store(p, i, n, xsimd::max((load(z, i, n, -kInf) - mb) - tb, B(0.0f)));
  }

  // -------------------------------------------------------------------------
  // 1.5-entmax: p = [(z - max)/2 - tau]_+^2 with tau in [-1, 0]. Candidates
  // c = (z - max)/2 > -1 are gathered. Then each pass computes, over the
  // current support {c > t}, count k, S1 = sum (c - t), S2 = sum (c - t)^2 and
  // min c, and the closed-form root t + s of sum (c - t - s)^2 = 1 on that
  // support. If every support element stays above it, it is the exact tau.
  // Otherwise take a Newton step on f(t) = sum (c - t)_+^2 - 1: f is convex, so
  // Newton from the left never overshoots and the support only shrinks towards
  // the true one. Ties at the threshold can stall that, hence the sort fallback.
  static double entmax15_tau(float* c, std::size_t nc) {
    double t = -1.0;
    for (int pass = 0; pass < kMaxPasses; ++pass) {
      const B tb(static_cast<float>(t));
      B s1(0.0f), s2(0.0f), k(0.0f), lo(kInf);
      for (std::size_t i = 0; i < nc; i += W) {
        const B v = load(c, i, nc, -kInf);
        const BB in = v > tb;
        const B d = select0(in, v - tb);
        s1 += d;
        s2 += d * d;
        k += select0(in, B(1.0f));
        lo = xsimd::min(lo, xsimd::select(in, v, B(kInf)));
      }
      const double S1 = sum(s1), S2 = sum(s2), K = sum(k), mean = S1 / K;
      // Closed form on this support: tau = mean_c - sqrt((1 - V) / K) with
      // V = sum (c - mean_c)^2. From S1, S2 (sums of d = c - t ~ 1) both the
      // mean and V lose digits on nearly uniform rows, so they only propose; an
      // accepted root is recomputed from sums of e = c - pivot around the
      // proposed mean, which are small and centred (one more pass).
      const double v_rough = S2 - S1 * S1 / K;
      if (v_rough <= 1.0 && static_cast<double>(min(lo)) >= t + mean - std::sqrt((1.0 - v_rough) / K) - 1e-6) {
        const float pivot = static_cast<float>(t + mean);
        const B pb(pivot);
        B se(0.0f), se2(0.0f);
        for (std::size_t i = 0; i < nc; i += W) {
          const B v = load(c, i, nc, -kInf);
          const B e = select0(v > tb, v - pb);
          se += e;
          se2 += e * e;
        }
        const double E1 = sum(se), V = sum(se2) - E1 * E1 / K;
        const double root = pivot + E1 / K - std::sqrt((V < 1.0 ? 1.0 - V : 0.0) / K);
        // Accept within float rounding: an element this close to tau gets ~0.
        if (static_cast<double>(min(lo)) >= root - 1e-7) return root;
      }
      const double step = (S2 - 1.0) / (2.0 * S1);
      if (!(step > 1e-9)) return t;  // f(t) ~ 0 already
      t += step;
    }
    std::sort(c, c + nc, [](float a, float b) { return a > b; });
    double s = 0, ss = 0;
    t = -1.0;
    for (std::size_t j = 1; j <= nc; ++j) {
      const double x = c[j - 1], kk = static_cast<double>(j);
      s += x;
      ss += x * x;
      const double mean = s / kk, delta = (1.0 - (ss - kk * mean * mean)) / kk;
      if (delta < 0) break;
      const double tj = mean - std::sqrt(delta);
      if (tj < x) t = tj;
      else break;
    }
    return t;
  }

  static void entmax15(const float* z, float* p, std::size_t n, const RowParams&, float* scratch) {
    Candidates cand;
    if (!candidates(z, n, -1.0f, 0.5f, scratch, cand)) return fill(p, n, 0.0f);
    const B mb(cand.max), half(0.5f), tb(static_cast<float>(entmax15_tau(cand.c, cand.count)));
    for (std::size_t i = 0; i < n; i += W) {
      const B d = xsimd::max((load(z, i, n, -kInf) - mb) * half - tb, B(0.0f));
      store(p, i, n, d * d);
    }
  }

  // -------------------------------------------------------------------------
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
  // magnifies the relative error of a small w = 1 + a (u - lambda): a float w
  // cannot resolve an entry just above the threshold (at alpha = 10, p = 0.12
  // needs w = 5e-9). There the candidates (few: they lie within 1/a < 1 of the
  // max) are solved in double, with w = a (u - t) for the threshold t.
  static void entmax(const float* z, float* p, std::size_t n, const RowParams& params, float* scratch) {
    const double a = params.alpha - 1.0;
    const float reach = static_cast<float>(1.0 / a);
    Candidates cand;
    if (!candidates(z, n, std::isfinite(reach) ? -reach : -kInf, 1.0f, scratch, cand)) return fill(p, n, 0.0f);
    if (params.alpha > 2.0) {
      entmax_candidates_double(cand.c, cand.count, a);
    } else {
      entmax_candidates_float(cand.c, cand.count, a);
    }
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
      double next = denom > 0 ? x + 2 * f * slope / denom : 0.5 * (lo + hi);
      if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
      const double step = std::fabs(next - x), limit = tol * (1.0 + std::fabs(next));
      x = next;
      if ((step <= limit && (std::fabs(f) <= f_tol || it >= 30)) || hi - lo <= limit) break;
    }
    return x;
  }

  // Overwrites the candidates c (u values) with their normalised weights.
  // The unknown is kept where float resolves w = 1 + a (c - lambda) best:
  // - alpha <= 1.5: lambda itself, with w^(1/a) = exp(log1p(a (c - lambda)) / a)
  //   (no cancellation as a -> 0, where the weights tend to softmax's);
  // - alpha > 1.5: the threshold t = lambda - 1/a, with w = a (c - t). There w
  //   is small on flat rows (about n^-a) and 1 + x would cancel.
  static void entmax_candidates_float(float* c, std::size_t nc, double a) {
    const bool threshold_form = a > 0.5;
    const double hi = -std::expm1(-a * std::log(static_cast<double>(nc))) / a;
    const double offset = threshold_form ? -1.0 / a : 0.0;  // unknown = lambda + offset
    const B ab(static_cast<float>(a)), inv(static_cast<float>(1.0 / a)), one(1.0f);
    // When 1/a is a small integer k (alpha = 1 + 1/k: 1.5, 1.333, 1.25, ...),
    // w^k by multiplication replaces a log and an exp, the bulk of the cost.
    const double beta = 1.0 / a;
    const int int_power = beta == std::floor(beta) && beta <= 8.0 ? static_cast<int>(beta) : 0;
    // w and p = w^(1/a) (w <= 0 gives garbage p; callers select on w > 0) of
    // candidates v at the unknown x (x as a float batch).
    auto weight = [&](const B& v, const B& x, B& w, B& pw) {
      if (threshold_form) {
        w = ab * (v - x);
      } else {
        const B y = ab * (v - x);
        w = one + y;
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
    };
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

  static void entmax_candidates_double(float* c, std::size_t nc, double a) {
    const double inv = 1.0 / a;
    const double t_hi = -std::exp(-a * std::log(static_cast<double>(nc))) * inv;  // lambda_hi - 1/a, relative to the max
    double mass = 1.0;
    // In t = lambda - 1/a: p = (a (u - t))^(1/a) for u > t.
    // dp/dt = -p / (a d). curv = 0 makes solve_decreasing take Newton steps:
    // from the right of the root of a concave f they never cross it, while
    // Halley's can, and just left of an entry's threshold the slope of
    // d^(1/a) is unbounded, so a tiny step there would not mean convergence.
    auto evaluate = [&](double t, double& f, double& slope, double& curv) {
      double sm = 0, sd = 0;
      for (std::size_t i = 0; i < nc; ++i) {
        const double d = static_cast<double>(c[i]) - t;
        if (d <= 0) continue;
        const double pw = std::exp(std::log(a * d) * inv);
        sm += pw;
        sd += pw / (a * d);
      }
      mass = sm;
      f = sm - 1.0;
      slope = sd;
      curv = 0.0;
    };
    // f is concave for alpha > 2: Newton from the right is monotone. But the
    // right end t_hi can sit many decades closer to the max than the root
    // (t_hi - max = -nc^-a / a, 1e-28 at alpha = 10), where Newton only grows
    // the distance ninefold per step: bisect the distance geometrically to
    // within a factor 2 first.
    // (nc^-a underflows for alpha near kMaxEntmaxAlpha: keep d_lo > 0.)
    double d_lo = -t_hi > 1e-300 ? -t_hi : 1e-300, d_hi = inv;  // f(max - d_lo) <= 0 <= f(max - d_hi)
    for (int it = 0; it < 64 && d_hi > 2 * d_lo; ++it) {
      const double d = std::sqrt(d_lo * d_hi);
      double f, slope, curv;
      evaluate(-d, f, slope, curv);
      (f > 0 ? d_hi : d_lo) = d;
    }
    const double t = solve_decreasing(-d_hi, -d_lo, -d_lo, 1e-15, 1e-12, evaluate);
    double f, slope, curv;
    evaluate(t, f, slope, curv);
    for (std::size_t i = 0; i < nc; ++i) {
      const double d = static_cast<double>(c[i]) - t;
      c[i] = d > 0 ? static_cast<float>(std::exp(std::log(a * d) * inv) / mass) : 0.0f;
    }
  }

  // -------------------------------------------------------------------------
  // Top-k softmax: the k-th largest score, then a softmax over the scores >= it
  // (ties at the k-th all kept).
  //
  // The k-th largest: a sample of one entry in 8 brackets it between two of
  // its own order statistics (rank k/8 give or take three standard
  // deviations); one SIMD pass counts the row above each, and if the bracket
  // holds, only the entries inside it are gathered and selected among. Short
  // rows, or a sample that missed, select on a copy of the whole row.
  static std::size_t count_above(const float* z, std::size_t n, float t, bool or_equal) {
    const B tb(t);
    B cnt(0.0f);
    for (std::size_t i = 0; i < n; i += W) {
      const B v = load(z, i, n, -kInf);
      cnt += select0(or_equal ? (v >= tb) : (v > tb), B(1.0f));
    }
    return static_cast<std::size_t>(sum(cnt));
  }

  static float kth_largest(const float* z, std::size_t n, std::size_t k, float* scratch) {
    auto greater = [](float a, float b) { return a > b; };
    if (n >= 512) {
      const std::size_t ns = n / 8;
      for (std::size_t i = 0; i < ns; ++i) scratch[i] = z[8 * i];
      const double r = static_cast<double>(k) * static_cast<double>(ns) / static_cast<double>(n);
      const double margin = 3.0 * std::sqrt(r + 1.0) + 2.0;
      const std::size_t r_hi = r > margin ? static_cast<std::size_t>(r - margin) : 0;
      const std::size_t r_lo = static_cast<std::size_t>(r + margin) < ns ? static_cast<std::size_t>(r + margin) : ns - 1;
      std::nth_element(scratch, scratch + r_hi, scratch + ns, greater);
      const float t_hi = scratch[r_hi];
      std::nth_element(scratch + r_hi, scratch + r_lo, scratch + ns, greater);
      const float t_lo = scratch[r_lo];
      const std::size_t above = count_above(z, n, t_hi, false);
      if (above < k && count_above(z, n, t_lo, true) >= k) {
        std::size_t band = 0;
        for (std::size_t i = 0; i < n; ++i) {
          scratch[band] = z[i];
          band += z[i] >= t_lo && z[i] <= t_hi;
        }
        const std::size_t rank = k - above - 1;
        std::nth_element(scratch, scratch + rank, scratch + band, greater);
        return scratch[rank];
      }
    }
    for (std::size_t i = 0; i < n; ++i) scratch[i] = z[i];
    std::nth_element(scratch, scratch + (k - 1), scratch + n, greater);
    return scratch[k - 1];
  }

  static void topk_softmax(const float* z, float* p, std::size_t n, const RowParams& params, float* scratch) {
    const float m = row_max(z, n);
    if (m == -kInf) return fill(p, n, 0.0f);
    const float kth = params.k < n ? kth_largest(z, n, params.k, scratch) : -kInf;
    const B mb(m), kb(kth);
    B acc(0.0f);
    for (std::size_t i = 0; i < n; i += W) {
      const B v = load(z, i, n, -kInf);
      const B e = select0(v >= kb, xsimd::exp(v - mb));
      acc += e;
      store(p, i, n, e);
    }
    scale(p, n, static_cast<float>(1.0 / sum(acc)));
  }

  // -------------------------------------------------------------------------
  // Adaptive span: p ∝ m(x) exp(s), m(x) = clamp((R + z - x)/R, 0, 1) with
  // x = query_pos - j, i.e. m = clamp(base + j/R, 0, 1). The max is taken over
  // keys with m > 0 only, so keys outside the span cannot underflow the rest.
  static void adaptive_span(const float* s, float* p, std::size_t n, const RowParams& params, float*) {
    const double base = (params.ramp + params.span - static_cast<double>(params.query_pos)) / params.ramp;
    const B b0(static_cast<float>(base)), step(static_cast<float>(1.0 / params.ramp));
    alignas(64) float lane[W];
    for (std::size_t l = 0; l < W; ++l) lane[l] = static_cast<float>(l);
    const B iota = B::load_aligned(lane);
    auto mask_at = [&](std::size_t i) {
      return xsimd::min(xsimd::max(b0 + (iota + B(static_cast<float>(i))) * step, B(0.0f)), B(1.0f));
    };
    B mx(-kInf);
    for (std::size_t i = 0; i < n; i += W)
      mx = xsimd::max(mx, xsimd::select(mask_at(i) > B(0.0f), load(s, i, n, -kInf), B(-kInf)));
    const float m = max(mx);
    if (m == -kInf) return fill(p, n, 0.0f);
    const B mb(m);
    B acc(0.0f);
    for (std::size_t i = 0; i < n; i += W) {
      const B mk = mask_at(i);
      const B w = select0(mk > B(0.0f), mk * xsimd::exp(load(s, i, n, -kInf) - mb));
      acc += w;
      store(p, i, n, w);
    }
    scale(p, n, static_cast<float>(1.0 / sum(acc)));
  }

  // -------------------------------------------------------------------------
  // Backward of the entmax family: dz = s (dp - <s, dp> / sum s) with s(p)
  // = p^e on the support. For the sparse members (Sparse = true) a batch with
  // no support needs neither dp nor the weight: it is skipped, then written
  // as zeros. A row whose sums overflow, or where dp - q could (|dp| near the
  // float maximum), goes to family_backward_robust before anything is
  // written: finite inputs give finite outputs wherever the exact ones are,
  // and exactly 0 where p = 0.
  template <bool Sparse, class Weight>
  static void family_backward(const float* p, const float* dp, float* dz, std::size_t n, double e, Weight weight) {
    B ss(0.0f), sdp(0.0f), big(0.0f);
    for (std::size_t i = 0; i < n; i += W) {
      const B pb = load(p, i, n, 0.0f);
      if (Sparse && !xsimd::any(pb > B(0.0f))) continue;
      const B s = weight(pb);
      const B g = load(dp, i, n, 0.0f);
      ss += s;
      sdp += s * g;
      big = xsimd::max(big, xsimd::abs(g));
    }
    const double total = sum(ss), weighted = sum(sdp);
    const double qd = total > 0 ? weighted / total : 0.0;
    if (!(std::isfinite(total) && std::isfinite(weighted) &&
          static_cast<double>(max(big)) + std::fabs(qd) <= static_cast<double>(std::numeric_limits<float>::max())))
      return family_backward_robust(p, dp, dz, n, e);
    const B q(static_cast<float>(qd));
    for (std::size_t i = 0; i < n; i += W) {
      const B pb = load(p, i, n, 0.0f);
      if (Sparse && !xsimd::any(pb > B(0.0f))) {
        store(dz, i, n, B(0.0f));
        continue;
      }
      store(dz, i, n, weight(pb) * (load(dp, i, n, 0.0f) - q));
    }
  }

  static void softmax_backward(const float* p, const float* dp, float* dz, std::size_t n, const RowParams&) {
    family_backward<false>(p, dp, dz, n, 1.0, [](const B& x) { return x; });
  }
  static void sparsemax_backward(const float* p, const float* dp, float* dz, std::size_t n, const RowParams&) {
    family_backward<true>(p, dp, dz, n, 0.0, [](const B& x) { return select0(x > B(0.0f), B(1.0f)); });
  }
  static void entmax15_backward(const float* p, const float* dp, float* dz, std::size_t n, const RowParams&) {
    family_backward<true>(p, dp, dz, n, 0.5, [](const B& x) { return xsimd::sqrt(x); });
  }
  // s = p^(2 - alpha) on the support. For alpha = 1 + 2^-j (1.5, 1.25,
  // 1.125), s = p / p^(2^-j) takes j square roots instead of a log and an exp.
  static void entmax_backward(const float* p, const float* dp, float* dz, std::size_t n, const RowParams& params) {
    int roots = 0;
    for (int j = 1; j <= 3; ++j)
      if (params.alpha == 1.0 + std::ldexp(1.0, -j)) roots = j;
    if (roots > 0) {
      family_backward<true>(p, dp, dz, n, 2.0 - params.alpha, [&](const B& x) {
        B r = x;
        for (int j = 0; j < roots; ++j) r = xsimd::sqrt(r);
        return select0(x > B(0.0f), x / xsimd::max(r, B(1e-30f)));
      });
      return;
    }
    const B e(static_cast<float>(2.0 - params.alpha));
    family_backward<true>(p, dp, dz, n, 2.0 - params.alpha, [&](const B& x) {
      // The clamp must stay a normal float: subnormal inputs to log are slow.
      return select0(x > B(0.0f), xsimd::exp(e * xsimd::log(xsimd::max(x, B(1e-30f)))));
    });
  }

  static TransformKernels table(CpuIsa isa) {
    return {isa,          valid,  finite,         softmax,  sparsemax,          entmax15,          entmax,
            topk_softmax, adaptive_span,   softmax_backward, sparsemax_backward, entmax15_backward, entmax_backward};
  }
};

}  // namespace entgraph::detail::simd
