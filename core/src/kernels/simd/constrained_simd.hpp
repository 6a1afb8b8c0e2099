// entgraph internal: the SIMD row kernels of constrained softmax and
// constrained sparsemax (p <= u on the simplex), forward and backward
// (kernels/simd/row_simd.hpp says how these headers are compiled).
#pragma once

#include "kernels/simd/row_simd.hpp"

namespace entgraph::detail::simd {

template <class A>
struct ConstrainedRows : RowSimd<A> {
  ENTGRAPH_ROW_SIMD_MEMBERS

  // Constrained softmax (p <= u on the simplex): p = min(u, c e) with
  // e = exp(z - max) and c the scalar that makes p sum to 1. The saturated set
  // {c e >= u} only grows with c, and c = (1 - sum_saturated u) /
  // sum_free e computed from a set is at least the c that set came from, so
  // the iteration rises to the fixed point; each step is one pass, usually two
  // or three in all. Rows it has not settled in kConstrainedPasses go to the
  // exact double solver. e is kept in scratch; p (which may alias z or u) is
  // written last.
  static constexpr int kConstrainedPasses = 32;

  static bool upper_bounds(const float* z, const float* u, std::size_t n, double* total) {
    BB ok(true);
    BD acc(0.0);
    for (std::size_t i = 0; i < n; i += W) {
      const B uv = load(u, i, n, 0.0f);
      ok = ok & (uv >= B(0.0f)) & (uv < B(kInf));  // NaN fails both
      add_wide(acc, select0(load(z, i, n, -kInf) > B(-kInf), uv));
    }
    *total = sum(acc);
    return xsimd::all(ok);
  }

  static void constrained_softmax(const float* z, const float* u, float* p, std::size_t n, float* scratch) {
    const float m = row_max(z, n);
    if (m == -kInf) return fill(p, n, 0.0f);
    float* e = scratch;
    const B mb(m);
    B acc(0.0f);
    for (std::size_t i = 0; i < n; i += W) {
      const B ev = xsimd::exp(load(z, i, n, -kInf) - mb);
      acc += ev;
      store(e, i, n, ev);
    }
    float c = static_cast<float>(1.0 / sum(acc));
    // c e within float rounding of u counts as reaching it: when the bounds
    // sum to exactly 1 every one must saturate, and the last c comes out of
    // (1 - sum_saturated u) / e an ulp short.
    const B near_one(1.0f - 0x1p-22f);
    std::size_t previous = n + 1;  // saturated count of the last pass
    for (int pass = 0;; ++pass) {
      if (pass == kConstrainedPasses) return constrained_softmax_exact(z, u, p, n);
      const B cb(c);
      BD bound(0.0), free(0.0);
      B count(0.0f);
      for (std::size_t i = 0; i < n; i += W) {
        // Entries with e = 0 (masked: their u may be anything) are never saturated, as the tail.
        const B ev = load(e, i, n, 0.0f), uv = load(u, i, n, kInf);
        const BB sat = (cb * ev >= uv * near_one) & (ev > B(0.0f));
        add_wide(bound, select0(sat, uv));
        add_wide(free, select0(!sat, ev));
        count += select0(sat, B(1.0f));
      }
      const double free_mass = sum(free), bound_mass = sum(bound);
      const std::size_t saturated = static_cast<std::size_t>(sum(count));
      // Nothing free but the bounds fall short of 1: the rest has e = 0 only
      // by underflow (scores more than ~87 below the max), which the double
      // solver resolves. So does a c that could lift such entries to their
      // bounds: with c < 2^60 they stay below 2^-66.
      if (!(free_mass > 0)) {
        if (bound_mass < 1.0 - 1e-6) return constrained_softmax_exact(z, u, p, n);
        break;
      }
      if (saturated == previous) break;  // the set is settled: c is its value
      previous = saturated;
      c = static_cast<float>((1.0 - bound_mass) / free_mass);
      if (!(c < 0x1p60f)) return constrained_softmax_exact(z, u, p, n);
    }
    const B cb(c);
    for (std::size_t i = 0; i < n; i += W) {
      const B ev = load(e, i, n, 0.0f), uv = load(u, i, n, kInf), w = cb * ev;
      store(p, i, n, xsimd::select((w >= uv * near_one) & (ev > B(0.0f)), uv, w));
    }
  }

  // Constrained sparsemax: p = clamp(z - tau, 0, u) with g(tau) = sum p = 1.
  // g is decreasing and piecewise linear: at tau, with F the free entries
  // (0 < z - tau < u) and S the saturated ones, g(t) = sum_S u + sum_F (z - t)
  // on tau's piece, whose root (sum_S u + sum_F z - 1) / |F| is exact as soon
  // as it lies on the same piece. Loose bounds make few long pieces, and
  // that root settles in two or three passes. Tight bounds (u ~ 1/n) make a
  // staircase of short pieces whose steps follow the scores' distribution:
  // g / sum u is about the share of entries above tau. So each pass
  // evaluates g at two points: the piece root, and a global guess that maps
  // the share through the normal quantile, as if the scores were normal,
  // and interpolates between the bracket's ends there (the first pass: the
  // scores' mean and deviation). A bracket lo < tau* <= hi (g(lo) >= 1 >
  // g(hi)) keeps guesses safe, Illinois weights keep it shrinking from both
  // ends, and rows not settled in kConstrainedPasses go to the exact solver.
  //
  // Each pass also retires the entries whose state is the same at both ends
  // of the bracket, hence at every tau left: zero at lo (zero above), or
  // saturated at hi (saturated below, its bound moved to a fixed total). The
  // next pass runs over the rest, the band, compacted into scratch: after
  // the first two passes, a small part of the row.
  //
  // tau is a double, applied as two floats: (z - hi) - lo is exact to float
  // rounding of the result near the threshold (z close to hi), where tight
  // bounds (p <= u ~ 1/n) need it; z - float(tau) would be off by an ulp of
  // |z| there, 5e-4 of p at n = 1000.
  struct SplitTau {
    B hi, lo;
    SplitTau() = default;
    explicit SplitTau(double t) : hi(static_cast<float>(t)), lo(static_cast<float>(t - static_cast<float>(t))) {}
    B above(const B& z) const { return (z - hi) - lo; }  // z - t
  };
  // The state of entries (z, u) at t, from d = z - t: saturated (d >= u, d > 0) or free.
  static void csparsemax_state(const B& d, const B& uv, BB& saturated, BB& free) {
    const BB positive = d > B(0.0f);
    saturated = (d >= uv) & positive;
    free = positive & !saturated;
  }

  // One pass over the band at P points. With kSolve, at the first, in double
  // lanes, sum_S u + sum_F z (`mass`, without the retired bounds) and |F|:
  // the piece's root comes out as exact as the double solver's. The other
  // points only probe the bracket: g itself, summed in float lanes from terms
  // in [0, u] (u, or z - t), so its error is about band / W float ulps of g,
  // which `margin` bounds. With kSolve it also retires what the bracket
  // [lo, hi] settles (adding to `retired`) and compacts the rest into keep_z,
  // keep_u (which may be band_z, band_u: writes never pass reads); returns
  // the band's new size.
  struct Piece {
    bool exact;
    double mass, free_count;  // exact
    double next, previous;    // exact: the nearest breakpoints above and below (state changes of band entries)
    double g, margin;         // a probe
  };
  template <bool kSolve, std::size_t P>
  static std::size_t csparsemax_pass(const float* band_z, const float* band_u, std::size_t band, const double* at,
                                     double lo, double hi, float* keep_z, float* keep_u, Piece* piece,
                                     double& retired) {
    const SplitTau at_lo(lo), at_hi(hi);
    SplitTau split[P];
    for (std::size_t j = 0; j < P; ++j) split[j] = SplitTau(at[j]);
    BD mass(0.0), retiring(0.0);
    B count(0.0f), next(kInf), previous(-kInf), probe[P];
    for (std::size_t j = 0; j < P; ++j) probe[j] = B(0.0f);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < band; i += W) {
      const B zv = load(band_z, i, band, -kInf), uv = load(band_u, i, band, 0.0f);
      BB sat, in, stays(true);
      if constexpr (kSolve) {
        BB sat_hi, in_hi;
        csparsemax_state(at_hi.above(zv), uv, sat_hi, in_hi);
        stays = (!sat_hi) & (at_lo.above(zv) > B(0.0f));
        add_wide(retiring, select0(sat_hi, uv));
        // (An entry retiring now counts as the bracket's ends say, should
        // rounding class it otherwise at a point inside.)
        csparsemax_state(split[0].above(zv), uv, sat, in);
        in = in & stays;
        add_wide(mass, xsimd::select(sat & stays, uv, select0(in, zv)));  // one of the two, or 0
        count += select0(in, B(1.0f));
        // Going up, saturated entries turn free at z - u and free ones zero at
        // z; going down, zero ones turn free at z.
        next = xsimd::min(next, xsimd::select(sat & stays, zv - uv, xsimd::select(in, zv, B(kInf))));
        previous = xsimd::max(previous, xsimd::select(stays & !(sat | in), zv, B(-kInf)));
      }
      for (std::size_t j = kSolve ? 1 : 0; j < P; ++j) {
        const B d = split[j].above(zv);
        csparsemax_state(d, uv, sat, in);
        probe[j] += select0(stays, xsimd::select(sat, uv, select0(in, d)));
      }
      if constexpr (kSolve) {
        if (xsimd::any(stays)) {
          compress(uv, stays, keep_u + kept);
          kept += compress(zv, stays, keep_z + kept);
        }
      }
    }
    retired += sum(retiring);
    const double margin = 0x1p-21 * static_cast<double>(band / W + 2);
    for (std::size_t j = 0; j < P; ++j) {
      const double g = retired + sum(probe[j]);
      piece[j] = {false, 0.0, 0.0, 0.0, 0.0, g, margin * (g > 1.0 ? g : 1.0)};
    }
    if constexpr (kSolve) {
      piece[0] = {true, sum(mass), sum(count), static_cast<double>(min(next)), static_cast<double>(max(previous)), 0.0, 0.0};
      return kept;
    }
    return band;
  }

  static void constrained_sparsemax(const float* z, const float* u, float* p, std::size_t n, float* scratch) {
    // At lo = min (z - u) over the entries that can take mass every one is
    // saturated: g(lo) = sum u >= 1 (the op checked it, to 1e-6). The row's
    // max and the scores' moments come from the same pass.
    B lo_b(kInf), max_b(-kInf), s1(0.0f), s2(0.0f), count(0.0f);
    BD bound_total(0.0);
    for (std::size_t i = 0; i < n; i += W) {
      const B zv = load(z, i, n, -kInf), uv = load(u, i, n, 0.0f);
      const BB in = zv > B(-kInf);
      const B zin = select0(in, zv);
      max_b = xsimd::max(max_b, zv);
      lo_b = xsimd::min(lo_b, xsimd::select(in, zv - uv, B(kInf)));
      add_wide(bound_total, select0(in, uv));
      s1 += zin;
      s2 += zin * zin;
      count += select0(in, B(1.0f));
    }
    const float m = max(max_b);
    if (m == -kInf) return fill(p, n, 0.0f);
    // (min in float lanes, then one ulp lower: the rounded z - u may lie above the exact one)
    const float lo_f = min(lo_b);
    double lo = static_cast<double>(lo_f) - (std::fabs(static_cast<double>(lo_f)) * 0x1p-23 + 0x1p-126),
           hi = static_cast<double>(m);
    const double total = sum(bound_total), finite = sum(count);
    double g_lo = total, g_hi = 0.0;  // g at the bracket's ends
    const double edge = 0.5 / finite;
    auto quantile = [&](double g) { return normal_upper_quantile(std::clamp(g / total, edge, 1.0 - edge)); };
    const double target = quantile(1.0);
    // First points: on a staircase the free window (width ~ mean u) sits just
    // below the score whose share above is 1 / sum u, and two more points
    // either side, as far as that share's sampling error (2 sd) reaches.
    // (Loose bounds put them all below tau*, where the piece roots climb.)
    const double mean = sum(s1) / finite, sd = std::sqrt(std::max(sum(s2) / finite - mean * mean, 0.0));
    const double share = std::min(1.0 / total, 0.5), density = std::exp(-0.5 * target * target) * 0.3989422804014327;
    const double spread = 2.0 * sd * std::sqrt(share * (1.0 - share) / finite) / density + 0.5 * total / finite;
    auto inside = [&](double t) { return t > lo && t < hi; };
    double at[3] = {mean + sd * target - 0.5 * total / finite, 0.0, 0.0};
    if (!inside(at[0])) at[0] = 0.5 * (lo + hi);
    const double centre = at[0];
    at[1] = inside(centre - spread) ? centre - spread : centre;
    at[2] = inside(centre + spread) ? centre + spread : centre;
    std::size_t points = 3;
    // Bounds summing to 1 (or, within the op's tolerance, less) saturate
    // every entry: tau = lo.
    double tau = total > 1.0 ? at[0] : lo;
    // The band: the whole row at first, then compacted into scratch.
    const float *band_z = z, *band_u = u;
    float* const keep_z = scratch;
    float* const keep_u = scratch + n + W;
    std::size_t band = n;
    double retired = 0.0;  // sum u of entries saturated over the whole bracket
    int same_side = 0;     // Illinois: evaluations in a row that moved the same end
    double end_root[2] = {lo - 1.0, lo - 1.0};  // the piece roots last seen at lo and hi
    for (int pass = 0; total > 1.0; ++pass) {
      if (pass == kConstrainedPasses) return constrained_sparsemax_exact(z, u, p, n);
      tau = at[0];
      // The first pass only probes: its bracket is the whole range, where
      // nothing retires and no piece root is near.
      Piece piece[3];
      if (pass == 0) {
        csparsemax_pass<false, 3>(band_z, band_u, band, at, lo, hi, keep_z, keep_u, piece, retired);
      } else {
        band = points == 1 ? csparsemax_pass<true, 1>(band_z, band_u, band, at, lo, hi, keep_z, keep_u, piece, retired)
                           : csparsemax_pass<true, 2>(band_z, band_u, band, at, lo, hi, keep_z, keep_u, piece, retired);
        band_z = keep_z;
        band_u = keep_u;
      }
      double root = lo - 1.0;  // tau's piece root (outside the bracket: none)
      bool settled = false, own_root = false;
      for (std::size_t j = 0; j < points && !settled; ++j) {
        const double k = piece[j].free_count, base = retired + piece[j].mass;
        const double g = piece[j].exact ? base - k * at[j] : piece[j].g;  // sum p at this point
        if (!piece[j].exact && std::fabs(g - 1.0) <= piece[j].margin) continue;  // too close to tell the side
        if (g == 1.0) {  // a root (on a flat piece, as when the bounds sum to exactly 1)
          tau = at[j];
          settled = true;
          continue;
        }
        // The piece's root; on a flat piece (nothing free), one past the
        // nearest breakpoint on the root's side as if a single entry turned
        // free there (a proposal, like any point in the bracket).
        double piece_root = lo - 1.0;
        if (piece[j].exact) {
          if (k > 0) piece_root = (base - 1.0) / k;
          else piece_root = g > 1.0 ? piece[j].next + (g - 1.0) : piece[j].previous - (1.0 - g);
        }
        if (g > 1.0) {
          same_side = same_side > 0 ? same_side + 1 : 1;
          if (at[j] > lo) lo = at[j], g_lo = g, end_root[0] = piece_root;
        } else {
          same_side = same_side < 0 ? same_side - 1 : -1;
          if (at[j] < hi) hi = at[j], g_hi = g, end_root[1] = piece_root;
        }
        if (piece[j].exact) root = piece_root, own_root = k > 0 && piece_root == at[j];
      }
      if (settled || own_root) break;  // on a flat piece at 1, or tau is its own piece's root: exact
      // Illinois: the end kept k times in a row weighs 2^-(k-1).
      const double wl = same_side <= -2 ? std::ldexp(1.0, std::max(same_side + 1, -60)) : 1.0;
      const double wh = same_side >= 2 ? std::ldexp(1.0, std::max(1 - same_side, -60)) : 1.0;
      const double a = (target - quantile(g_lo)) * wl, b = (quantile(g_hi) - target) * wh;
      double guess = a > 0 && b > 0 && std::abs(same_side) < 4 ? lo + (hi - lo) * a / (a + b) : 0.5 * (lo + hi);
      if (!inside(guess)) guess = 0.5 * (lo + hi);
      // Next: tau's piece root if it is in the bracket (else that of an end),
      // and the guess. (A long streak on one side bisects.)
      // (lo and hi themselves were evaluated: only points strictly inside.)
      if (!inside(root)) root = inside(end_root[0]) ? end_root[0] : end_root[1];
      points = 1;
      at[0] = guess;
      if (inside(root)) {
        at[0] = root;
        if (guess != root) at[points++] = guess;
      }
    }
    // p = clamp(z - tau, 0, u) in double lanes, then rounded: an entry within
    // float rounding of its bound is saturated (p == u) exactly when the
    // double solver says so, which the backward's routing of gradient to u
    // depends on. Masked entries get 0 whatever their u.
    const BD tau_d(tau), zero(0.0);
    for (std::size_t i = 0; i < n; i += W) {
      alignas(64) float zb[W], ub[W], pb[W];
      load(z, i, n, -kInf).store_aligned(zb);
      load(u, i, n, 0.0f).store_aligned(ub);
      for (std::size_t h = 0; h < W; h += BD::size) {
        const BD d = BD::load_aligned(zb + h) - tau_d;
        xsimd::select(d > zero, xsimd::min(d, BD::load_aligned(ub + h)), zero).store_aligned(pb + h);
      }
      store(p, i, n, B::load_aligned(pb));
    }
  }

  // Constrained backward: free entries (softmax: p < u or p == 0; sparsemax:
  // 0 < p < u) pass gradient to z with weight w (p; 1), saturated ones
  // (p == u > 0) to u: dz = w (g - q), du = g - q, q = sum w g / sum w over
  // the free entries. g is scaled by 2^-k, the power of two of max |g|
  // (exact), so the float sums stay near 1; rows whose scale leaves float's
  // comfortable range go to the double reference. Reads before writes per
  // batch: dz and du may alias p or g.
  template <bool kSoftmax>
  static void constrained_backward(const float* p, const float* u, const float* g, float* dz, float* du,
                                   std::size_t n) {
    B big(0.0f);
    for (std::size_t i = 0; i < n; i += W) big = xsimd::max(big, xsimd::abs(load(g, i, n, 0.0f)));
    const float largest = max(big);
    if (!(largest > 0x1p-100f && largest < 0x1p100f))
      return constrained_backward_exact(kSoftmax, p, u, g, dz, du, n);
    const int k = std::ilogb(largest);
    const B down(std::ldexp(1.0f, -k)), up(std::ldexp(1.0f, k));
    auto weight = [](const B& pb, const B& ub) {
      if constexpr (kSoftmax)
        return select0((pb < ub) | (pb == B(0.0f)), pb);
      else
        return select0((pb > B(0.0f)) & (pb < ub), B(1.0f));
    };
    B ws(0.0f), wg(0.0f);
    for (std::size_t i = 0; i < n; i += W) {
      const B w = weight(load(p, i, n, 0.0f), load(u, i, n, kInf));
      ws += w;
      wg += w * (load(g, i, n, 0.0f) * down);
    }
    const double total = sum(ws);
    const B q(static_cast<float>(total > 0 ? sum(wg) / total : 0.0));
    for (std::size_t i = 0; i < n; i += W) {
      const B pb = load(p, i, n, 0.0f), ub = load(u, i, n, kInf);
      const B d = load(g, i, n, 0.0f) * down - q;
      const BB free = kSoftmax ? (pb < ub) | (pb == B(0.0f)) : (pb > B(0.0f)) & (pb < ub);
      const B w = weight(pb, ub);
      store(dz, i, n, (w * d) * up);  // p = 0: w = 0, dz exactly 0
      if (du != nullptr) store(du, i, n, select0((!free) & (pb > B(0.0f)), d) * up);
    }
  }
};

}  // namespace entgraph::detail::simd
