// entgraph internal: the softmax family's SIMD row kernels: softmax, top-k
// softmax (the k-th largest score by SIMD counting passes) and adaptive span
// (kernels/simd/row_simd.hpp says how these headers are compiled).
#pragma once

#include "kernels/simd/row_simd.hpp"

namespace entgraph::detail::simd {

template <class A>
struct SoftmaxRows : RowSimd<A> {
  ENTGRAPH_ROW_SIMD_MEMBERS

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

  // Top-k softmax: the k-th largest score t, then a softmax over the scores
  // >= t (ties at the k-th all kept).
  //
  // t is found by narrowing a bracket lo <= t < hi with SIMD counting passes:
  // c(x) = #{z >= x} does not increase with x, and c(lo) >= k > c(hi). Each
  // pass counts at two trial points meant to fall just either side of rank k:
  // first from the row's mean and standard deviation as if the scores were
  // normal (attention scores nearly are: then one pass leaves a band of about
  // kBand scores), then by interpolating the counts between the bracket's
  // ends. A pass that does not halve the band is followed by one that shrinks
  // the bracket to the band's own min and max (all equal: that is t) and
  // splits it in thirds of the floats' order-preserving integer keys, so any
  // row, ties and outliers included, ends after a bounded number of passes.
  // Once the band is a quarter of the row it is compressed into scratch and
  // the passes run on it; at kBand scores or fewer it is selected directly.
  static constexpr std::size_t kBand = 32;

  // Counting in float lanes is exact below 2^24 per lane: longer arrays are
  // counted in chunks.
  static constexpr std::size_t kCountChunk = std::size_t{1} << 22;

  static std::uint32_t order_key(float x) {
    std::uint32_t b;
    std::memcpy(&b, &x, sizeof b);
    return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
  }
  static float key_value(std::uint32_t key) {
    const std::uint32_t b = (key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key;
    float x;
    std::memcpy(&x, &b, sizeof x);
    return x;
  }

  // One pass: the max of the row, and over its finite entries (not -inf):
  // their count, min, mean and standard deviation.
  struct RowStats {
    float max = -kInf, min = kInf;
    std::size_t finite = 0;
    double mean = 0.0, sd = 0.0;
  };
  static RowStats row_stats(const float* z, std::size_t n) {
    RowStats st;
    double total = 0.0, total_sq = 0.0;
    B mx(-kInf);
    for (std::size_t start = 0; start < n; start += kCountChunk) {
      const std::size_t end = n - start < kCountChunk ? n : start + kCountChunk;
      B mn(kInf), cnt(0.0f), s1(0.0f), s2(0.0f);
      for (std::size_t i = start; i < end; i += W) {
        const B v = load(z, i, end, -kInf);
        const BB in = v > B(-kInf);
        const B x = select0(in, v);
        mx = xsimd::max(mx, v);
        mn = xsimd::min(mn, xsimd::select(in, v, B(kInf)));
        cnt += select0(in, B(1.0f));
        s1 += x;
        s2 = xsimd::fma(x, x, s2);
      }
      const float chunk_min = min(mn);
      st.min = chunk_min < st.min ? chunk_min : st.min;
      st.finite += static_cast<std::size_t>(sum(cnt));
      total += sum(s1);
      total_sq += sum(s2);
    }
    st.max = max(mx);
    if (st.finite > 0) {
      st.mean = total / static_cast<double>(st.finite);
      const double var = total_sq / static_cast<double>(st.finite) - st.mean * st.mean;
      st.sd = var > 0.0 ? std::sqrt(var) : 0.0;
    }
    return st;
  }

  // One pass over a: ca = #{a >= ta}, cb = #{a >= tb} (ta <= tb), and the
  // entries in [ta, tb) copied to out (ca - cb of them), so that when the
  // rank falls between the two points the next pass reads only those.
  static void split_at(const float* a, std::size_t m, float ta, float tb, float* out, std::size_t& ca,
                       std::size_t& cb) {
    const B at(ta), bt(tb);
    std::size_t c = 0;
    ca = cb = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<A, xsimd::avx512bw>) {
      // Counts in integer lanes (mask to GPR moves and popcounts would chain
      // the loop); only the band's few lanes go through popcount.
      const __m512i one = _mm512_set1_epi32(1);
      __m512i na = _mm512_setzero_si512(), nb = _mm512_setzero_si512();
      for (std::size_t i = 0; i < m; i += W) {
        const __m512 v = static_cast<__m512>(load(a, i, m, -kInf));
        const __mmask16 ge_a = _mm512_cmp_ps_mask(v, static_cast<__m512>(at), _CMP_GE_OQ);
        const __mmask16 ge_b = _mm512_cmp_ps_mask(v, static_cast<__m512>(bt), _CMP_GE_OQ);
        na = _mm512_mask_add_epi32(na, ge_a, na, one);
        nb = _mm512_mask_add_epi32(nb, ge_b, nb, one);
        c += compress(B(v), BB(static_cast<__mmask16>(ge_a & ~ge_b)), out + c);  // branch-free
      }
      ca = static_cast<std::size_t>(static_cast<unsigned>(_mm512_reduce_add_epi32(na)));
      cb = static_cast<std::size_t>(static_cast<unsigned>(_mm512_reduce_add_epi32(nb)));
      return;
    }
#endif
    for (std::size_t start = 0; start < m; start += kCountChunk) {
      const std::size_t end = m - start < kCountChunk ? m : start + kCountChunk;
      B na(0.0f), nb(0.0f);
      for (std::size_t i = start; i < end; i += W) {
        const B v = load(a, i, end, -kInf);
        const BB ge_a = v >= at, ge_b = v >= bt;
        na += select0(ge_a, B(1.0f));
        nb += select0(ge_b, B(1.0f));
        const BB mid = ge_a & !ge_b;
        if (kRegisterCompress || xsimd::any(mid)) c += compress(v, mid, out + c);  // no branch where it is cheap
      }
      ca += static_cast<std::size_t>(sum(na));
      cb += static_cast<std::size_t>(sum(nb));
    }
  }

  // Copies the entries of a in [lo, hi) to out (W of room past the end);
  // returns their count and their min and max.
  static std::size_t gather_band(const float* a, std::size_t m, float lo, float hi, float* out, float& bmin,
                                 float& bmax) {
    std::size_t c = 0;
    const B L(lo), H(hi);
    B mn(kInf), mx(-kInf);
    for (std::size_t i = 0; i < m; i += W) {
      const B v = load(a, i, m, -kInf);
      const BB in = (v >= L) & (v < H);
      if (!xsimd::any(in)) continue;
      mn = xsimd::min(mn, xsimd::select(in, v, B(kInf)));
      mx = xsimd::max(mx, xsimd::select(in, v, B(-kInf)));
      c += compress(v, in, out + c);
    }
    bmin = min(mn);
    bmax = max(mx);
    return c;
  }

  // The k-th largest of z (1 <= k <= st.finite). scratch holds 2n + 64
  // floats: two buffers for the band, used in turn, with room between.
  static float kth_largest(const float* z, std::size_t n, std::size_t k, const RowStats& st, float* scratch) {
    float* const buffers[2] = {scratch, scratch + n + 32};  // W of room past each (scratch: 2n + 64)
    int next = 0;             // the buffer the next band goes to
    const float* a = z;       // the entries still searched: the row, then a band
    float* copied = nullptr;  // a when it is a band in scratch
    std::size_t m = n, rank = k;
    float lo = st.min, hi = std::nextafter(st.max, kInf);
    std::size_t c_lo = st.finite, c_hi = 0;  // counts over a of >= lo and >= hi
    bool guessed = false, stalled = false;
    for (int pass = 0; pass < 200 && c_lo - c_hi > kBand; ++pass) {
      const std::size_t band = c_lo - c_hi;
      // Aim a little either side of the rank: at rank + margin (>= rank) and rank - margin.
      const double margin = static_cast<double>(kBand) / 4.0;
      const double r_a = static_cast<double>(rank) + margin, r_b = static_cast<double>(rank) + 1.0 - margin;
      float ta = lo, tb = lo;
      if (stalled) {
        float bmin, bmax;
        gather_band(a, m, lo, hi, buffers[next], bmin, bmax);  // only the bounds are used
        if (!(bmin < bmax)) return bmin;                        // every score of the band is the k-th
        lo = bmin;  // no score lies between the old and the new ends: the counts stay
        hi = std::nextafter(bmax, kInf);
      } else if (!guessed) {
        guessed = true;
        if (std::isfinite(st.mean) && std::isfinite(st.sd) && st.sd > 0.0) {
          // Even for normal scores the rank at a quantile point varies by
          // sqrt(r (1 - r / f)): aim 2.5 of those either side, so that the
          // band is usually caught and copied in this pass.
          const double f = static_cast<double>(st.finite), rr = static_cast<double>(rank);
          const double spread = margin + 2.5 * std::sqrt(rr * (1.0 - rr / f));
          const double g_a = rr + spread, g_b = rr + 1.0 - spread;
          const double q_a = (g_a - 0.5 < f - 0.5 ? g_a - 0.5 : f - 0.5) / f;
          const double q_b = (g_b - 0.5 > 0.5 ? g_b - 0.5 : 0.5) / f;
          ta = static_cast<float>(st.mean + st.sd * normal_upper_quantile(q_a));
          tb = static_cast<float>(st.mean + st.sd * normal_upper_quantile(q_b));
        }
      } else {
        const double span = static_cast<double>(hi) - static_cast<double>(lo);
        const double width = static_cast<double>(c_lo - c_hi);
        ta = static_cast<float>(static_cast<double>(lo) + span * (static_cast<double>(c_lo) - r_a) / width);
        tb = static_cast<float>(static_cast<double>(lo) + span * (static_cast<double>(c_lo) - r_b) / width);
      }
      // A point past an end is that end (its count is known; the other point
      // still splits the band). No point strictly inside (a stall, a guess
      // that is not finite, a band too narrow for the interpolation): thirds
      // of the keys.
      const std::uint32_t key_lo = order_key(lo), d = order_key(hi) - key_lo;
      if (d <= 1) return lo;  // lo is the only value the band can hold
      if (tb < ta) {
        const float t = ta;
        ta = tb;
        tb = t;
      }
      ta = ta > lo ? ta : lo;
      tb = tb < hi ? tb : hi;
      if (!(ta < hi && tb > lo && (ta > lo || tb < hi))) {
        ta = key_value(key_lo + (d / 3 > 1 ? d / 3 : 1));
        tb = key_value(key_lo + (d - d / 3 < d ? d - d / 3 : d - 1));
      }
      std::size_t ca, cb;
      split_at(a, m, ta, tb, buffers[next], ca, cb);
      if (cb >= rank) {
        lo = tb;
        c_lo = cb;
      } else if (ca >= rank) {  // the band is [ta, tb), just copied
        a = copied = buffers[next];
        next ^= 1;
        m = ca - cb;
        rank -= cb;
        lo = ta;
        hi = tb;
        c_lo = m;
        c_hi = 0;
      } else {
        hi = ta;
        c_hi = ca;
      }
      stalled = 2 * (c_lo - c_hi) > band;
    }
    // The band: the copied array itself when nothing outside [lo, hi) is left in it.
    float* out = copied;
    std::size_t count = m;
    if (copied == nullptr || c_lo != m || c_hi != 0) {
      float bmin, bmax;
      out = buffers[next];
      count = gather_band(a, m, lo, hi, out, bmin, bmax);
    }
    const std::size_t r = rank - c_hi;  // 1 <= r <= count
    if (count <= kBand) return rank_select(out, count, r);
    std::nth_element(out, out + (r - 1), out + count, [](float x, float y) { return x > y; });  // after 200 passes only
    return out[r - 1];
  }

  // The r-th largest of x[0, m), branch-free for a small band: the largest
  // x_i with #{x_j >= x_i} >= r. W candidates at a time, each x_j broadcast
  // against them, so there is no reduction per candidate.
  static float rank_select(const float* x, std::size_t m, std::size_t r) {
    const B rb(static_cast<float>(r));
    B best(-kInf);
    for (std::size_t i = 0; i < m; i += W) {
      const B cand = load(x, i, m, -kInf);
      B count(0.0f);
      for (std::size_t j = 0; j < m; ++j) count += select0(B(x[j]) >= cand, B(1.0f));
      best = xsimd::max(best, xsimd::select(count >= rb, cand, B(-kInf)));
    }
    return max(best);
  }

  // The softmax runs on the kept scores only, compressed with their indices
  // (k of them, not n: the exp is most of the work), then scattered.
  static void topk_softmax(const float* z, float* p, std::size_t n, const RowParams& params, float* scratch) {
    const RowStats st = row_stats(z, n);
    if (st.max == -kInf) return fill(p, n, 0.0f);
    const B mb(st.max);
    if (params.k >= st.finite) {  // every finite score is kept: softmax
      B acc(0.0f);
      for (std::size_t i = 0; i < n; i += W) {
        const B e = xsimd::exp(load(z, i, n, -kInf) - mb);
        acc += e;
        store(p, i, n, e);
      }
      return scale(p, n, static_cast<float>(1.0 / sum(acc)));
    }
    const B kth(kth_largest(z, n, params.k, st, scratch));
    if (params.k * W >= n) {
      // Most batches hold a kept score: one exp pass, as softmax, masked.
      B acc(0.0f);
      for (std::size_t i = 0; i < n; i += W) {
        const B v = load(z, i, n, -kInf);
        const B e = select0(v >= kth, xsimd::exp(v - mb));
        acc += e;
        store(p, i, n, e);
      }
      return scale(p, n, static_cast<float>(1.0 / sum(acc)));
    }
    float* vals = scratch;
    std::uint32_t* idx = reinterpret_cast<std::uint32_t*>(scratch + n + 16);
    const std::size_t count = gather_where(z, n, st.max, 1.0f, [&](const B& raw, const B&) { return raw >= kth; }, vals, idx);
    B acc(0.0f);
    for (std::size_t i = 0; i < count; i += W) {
      const B e = xsimd::exp(load(vals, i, count, -kInf));  // the padding's exp(-inf) is 0
      acc += e;
      store(vals, i, count, e);
    }
    const float inv = static_cast<float>(1.0 / sum(acc));
    fill(p, n, 0.0f);
    for (std::size_t j = 0; j < count; ++j) p[idx[j]] = vals[j] * inv;
  }

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
};

}  // namespace entgraph::detail::simd
