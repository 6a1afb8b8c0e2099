// entgraph internal: the SIMD backward of the softmax and entmax family,
// dz = s (dp - <s, dp> / sum s) with s a power of p on the support
// (kernels/simd/row_simd.hpp says how these headers are compiled).
#pragma once

#include "kernels/simd/row_simd.hpp"
#include "kernels/simd/entmax_alpha_simd.hpp"

namespace entgraph::detail::simd {

template <class A>
struct BackwardRows : RowSimd<A> {
  ENTGRAPH_ROW_SIMD_MEMBERS

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
#if defined(__wasm_simd128__)
    // SIMD128: two whole batches per iteration, then the rest as below. The
    // batches are added in the same order, so the sums are the same bits.
    // V8's loop overhead (an interrupt check, the end-of-row test of each
    // load, address arithmetic) is per iteration, and in a sparse row most
    // iterations only find that a batch has no support: a pair of empty
    // batches is skipped with one test.
    const auto accumulate = [&](const B& pb, std::size_t i) {
      const B s = weight(pb);
      const B g = B::load_unaligned(dp + i);
      ss += s;
      sdp += s * g;
      big = xsimd::max(big, xsimd::abs(g));
    };
    std::size_t i0 = 0;
    for (; i0 + 2 * W <= n; i0 += 2 * W) {
      const B p0 = B::load_unaligned(p + i0), p1 = B::load_unaligned(p + i0 + W);
      if (Sparse) {
        const BB in0 = p0 > B(0.0f), in1 = p1 > B(0.0f);
        if (!xsimd::any(in0 | in1)) continue;
        if (xsimd::any(in0)) accumulate(p0, i0);
        if (xsimd::any(in1)) accumulate(p1, i0 + W);
      } else {
        accumulate(p0, i0);
        accumulate(p1, i0 + W);
      }
    }
#else
    constexpr std::size_t i0 = 0;
#endif
    for (std::size_t i = i0; i < n; i += W) {
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
    family_store<Sparse>(p, dp, dz, n, qd, weight);
  }

  // The family backward's second pass: dz = s(p) (dp - q).
  template <bool Sparse, class Weight>
  static void family_store(const float* p, const float* dp, float* dz, std::size_t n, double qd, Weight weight) {
    const B q(static_cast<float>(qd));
#if defined(__wasm_simd128__)
    // Two whole batches per iteration, as in family_backward.
    const auto put = [&](const B& pb, std::size_t i) {
      if (Sparse && !xsimd::any(pb > B(0.0f))) return B(0.0f).store_unaligned(dz + i);
      (weight(pb) * (B::load_unaligned(dp + i) - q)).store_unaligned(dz + i);
    };
    std::size_t i0 = 0;
    for (; i0 + 2 * W <= n; i0 += 2 * W) {
      const B p0 = B::load_unaligned(p + i0), p1 = B::load_unaligned(p + i0 + W);
      if (Sparse && !xsimd::any((p0 > B(0.0f)) | (p1 > B(0.0f)))) {
        B(0.0f).store_unaligned(dz + i0);
        B(0.0f).store_unaligned(dz + i0 + W);
        continue;
      }
      put(p0, i0);
      put(p1, i0 + W);
    }
#else
    constexpr std::size_t i0 = 0;
#endif
    for (std::size_t i = i0; i < n; i += W) {
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
  template <class F>
  static void with_entmax_weight(const RowParams& params, F f) {
    const int roots = root_count(params.alpha);
    f([roots](const B& x) {
      B r = x;
      for (int j = 0; j < roots; ++j) r = xsimd::sqrt(r);
      return select0(x > B(0.0f), x / xsimd::max(r, B(1e-30f)));
    });
  }

  static void entmax_backward(const float* p, const float* dp, float* dz, std::size_t n, const RowParams& params) {
    if (root_count(params.alpha) > 0)
      return with_entmax_weight(params, [&](auto weight) { family_backward<true>(p, dp, dz, n, 2.0 - params.alpha, weight); });
    entmax_log_backward(p, dp, dz, n, params.alpha, nullptr);
  }

  // The backward and the row's gradient in alpha (entmax_grad_alpha's
  // formula) together. Below alpha = 1.25 the formula's beta^2 = 1 / (alpha -
  // 1)^2 multiplies the float sums' rounding past float accuracy (at alpha =
  // 1.0001, beyond the value itself): there grad_alpha comes from the double
  // reference.
  static constexpr double kFloatGradAlphaMin = 1.25;

  static void entmax_backward_alpha(const float* p, const float* dp, float* dz, std::size_t n,
                                    const RowParams& params, double* grad_alpha) {
    if (params.alpha < kFloatGradAlphaMin) {
      *grad_alpha = entmax_grad_alpha(p, dp, n, params.alpha);  // before dz, which may alias p or dp
      return entmax_backward(p, dp, dz, n, params);
    }
    entmax_log_backward(p, dp, dz, n, params.alpha, grad_alpha);
  }

  static int root_count(double alpha) {
    for (int j = 1; j <= 3; ++j)
      if (alpha == 1.0 + std::ldexp(1.0, -j)) return j;
    return 0;
  }

  // The general-alpha backward through s = exp((2 - alpha) log p), and
  // grad_alpha when asked: the first pass's log also gives p log p, so the
  // gradient's sums (p log p, dp p, dp p log p) cost a few multiply-adds.
  // Unless dz aliases an input, the first pass leaves s in dz for the second,
  // which then needs no log or exp. Rows whose float sums overflow go to
  // family_backward_robust (and grad_alpha to the double reference).
  // dz = s (dp - q) as s ((dp - dp_m) - r), m the entry of the largest s
  // (s_top) and r = sum_j s_j (dp_j - dp_m) / total = q - dp_m: no
  // cancellation where s is largest. s is in dz when keep_s, else recomputed.
  static void pivot_backward(const float* p, const float* dp, float* dz, std::size_t n, const B& eb, bool keep_s,
                             double s_top, double total) {
    auto weight = [&](std::size_t i) {
      if (keep_s) return load(dz, i, n, 0.0f);
      const B pb = load(p, i, n, 0.0f);
      return select0(pb > B(0.0f), xsimd::exp(eb * xsimd::log(xsimd::max(pb, B(1e-30f)))));
    };
    float pivot = 0.0f;
    for (std::size_t i = 0; i < n; i += W) {
      alignas(64) float sv[W], gv[W];
      weight(i).store_aligned(sv);
      load(dp, i, n, 0.0f).store_aligned(gv);
      std::size_t l = 0;
      while (l < W && static_cast<double>(sv[l]) != s_top) ++l;
      if (l < W) {
        pivot = gv[l];
        break;
      }
    }
    const B pv(pivot);
    B rest(0.0f);
    for (std::size_t i = 0; i < n; i += W) rest += weight(i) * (load(dp, i, n, 0.0f) - pv);
    const B r(static_cast<float>(sum(rest) / total));
    for (std::size_t i = 0; i < n; i += W) store(dz, i, n, weight(i) * ((load(dp, i, n, 0.0f) - pv) - r));
  }

  static void entmax_log_backward(const float* p, const float* dp, float* dz, std::size_t n, double alpha,
                                  double* grad_alpha) {
    const double e = 2.0 - alpha;
    const B eb(static_cast<float>(e));
    const bool keep_s = dz != p && dz != dp;
    B ss(0.0f), sdp(0.0f), big(0.0f), h(0.0f), gp(0.0f), gplp(0.0f), smax(0.0f);
    for (std::size_t i = 0; i < n; i += W) {
      const B pb = load(p, i, n, 0.0f);
      const BB in = pb > B(0.0f);
      if (!xsimd::any(in)) {
        if (keep_s) store(dz, i, n, B(0.0f));
        continue;
      }
      const B lp = xsimd::log(xsimd::max(pb, B(1e-30f)));  // a normal float: subnormal inputs to log are slow
      const B s = select0(in, xsimd::exp(eb * lp));
      if (keep_s) store(dz, i, n, s);
      const B g = load(dp, i, n, 0.0f);
      smax = xsimd::max(smax, s);
      ss += s;
      sdp += s * g;
      big = xsimd::max(big, xsimd::abs(g));
      if (grad_alpha != nullptr) {
        const B plp = select0(in, pb * lp);
        h += plp;
        gp += pb * g;
        gplp += plp * g;
      }
    }
    const double total = sum(ss), weighted = sum(sdp), g_p = sum(gp), g_plp = sum(gplp);
    const double qd = total > 0 ? weighted / total : 0.0;
    if (!(std::isfinite(total) && std::isfinite(weighted) && std::isfinite(g_p) && std::isfinite(g_plp) &&
          static_cast<double>(max(big)) + std::fabs(qd) <= static_cast<double>(std::numeric_limits<float>::max()))) {
      if (grad_alpha != nullptr) *grad_alpha = entmax_grad_alpha(p, dp, n, alpha);
      return family_backward_robust(p, dp, dz, n, e);  // p and dp are intact: dz aliases neither, or was not written
    }
    if (grad_alpha != nullptr) {
      const double beta = 1.0 / (alpha - 1.0);
      *grad_alpha = total > 0 ? beta * beta * (g_p - qd) - beta * (g_plp - sum(h) * qd) : 0.0;
    }
    // alpha > 2: s = p^(2 - alpha) grows without bound as p -> 0, and when one
    // entry holds most of sum s, q = <s, dp> / sum s is its dp plus a small
    // rest that float cannot resolve: its dz = s (dp - q) came out 0 (alpha =
    // 10, p = 0.017 beside 0.983: -0.51 expected). Relative to that entry's
    // dp (the pivot) the rest is computed, not cancelled.
    const double s_top = static_cast<double>(max(smax));
    if (s_top > 1.0 && s_top > 0.5 * total) return pivot_backward(p, dp, dz, n, eb, keep_s, s_top, total);
    const B q(static_cast<float>(qd));
    if (keep_s) {
      for (std::size_t i = 0; i < n; i += W) {
        const B s = load(dz, i, n, 0.0f);
        if (xsimd::any(s > B(0.0f))) store(dz, i, n, s * (load(dp, i, n, 0.0f) - q));
      }
      return;
    }
    family_store<true>(p, dp, dz, n, qd, [eb](const B& x) {
      return select0(x > B(0.0f), xsimd::exp(eb * xsimd::log(xsimd::max(x, B(1e-30f)))));
    });
  }
};

}  // namespace entgraph::detail::simd
