// entgraph internal: xsimd kernels of the row transforms, templated on the
// instruction set. Included ONLY by kernels/simd/transforms_<isa>.cpp, each compiled
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

// Functions that clang must inline into their loops in the SIMD128 build:
// there, a call that is not inlined passes its batches through memory (the
// wasm shadow stack). clang 14 left EntmaxWeight out of line in alpha =
// 1.25's Halley loop, which cost that case 8%; GCC inlines it. Native builds
// are left to their compiler's choice.
#if defined(__wasm_simd128__)
#define ENTGRAPH_SIMD128_INLINE __attribute__((always_inline))
#else
#define ENTGRAPH_SIMD128_INLINE
#endif

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
#if defined(__wasm_simd128__)
    // Lane by lane, not by the loop below, which clang turns into a memcpy
    // call: with a call in a loop V8 reloads every value the loop keeps in
    // registers from the stack, on every iteration, tail or not.
    static_assert(W == 4, "SIMD128 batches have four lanes");
    const v128_t x = static_cast<v128_t>(static_cast<__m128>(v));
    p[i] = wasm_f32x4_extract_lane(x, 0);
    if (i + 1 < n) p[i + 1] = wasm_f32x4_extract_lane(x, 1);
    if (i + 2 < n) p[i + 2] = wasm_f32x4_extract_lane(x, 2);
#else
    alignas(64) float buf[W];
    v.store_aligned(buf);
    for (std::size_t l = 0; i + l < n; ++l) p[i + l] = buf[l];
#endif
  }
  // The lanes' sum in double, added as a tree (depth log2 W, not W: a pass
  // over a few candidates is dominated by these reductions): lane l + W/2 to
  // lane l, then l + W/4, ... The order depends only on W, so wasm and native
  // SSE2 agree bit for bit; AVX2 and AVX-512 run the same tree in registers.
  static double sum(const B& v) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<A, xsimd::avx512bw>) {
      const __m512 x = static_cast<__m512>(v);
      const __m512d h8 = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x)),
                                       _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))));
      const __m256d h4 = _mm256_add_pd(_mm512_castpd512_pd256(h8), _mm512_extractf64x4_pd(h8, 1));
      const __m128d h2 = _mm_add_pd(_mm256_castpd256_pd128(h4), _mm256_extractf128_pd(h4, 1));
      return _mm_cvtsd_f64(_mm_add_sd(h2, _mm_unpackhi_pd(h2, h2)));
    }
#endif
#if defined(__AVX2__)
    if constexpr (std::is_same_v<A, xsimd::avx2>) {
      const __m256 x = static_cast<__m256>(v);
      const __m256d h4 = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
      const __m128d h2 = _mm_add_pd(_mm256_castpd256_pd128(h4), _mm256_extractf128_pd(h4, 1));
      return _mm_cvtsd_f64(_mm_add_sd(h2, _mm_unpackhi_pd(h2, h2)));
    }
#endif
    alignas(64) float buf[W];
    v.store_aligned(buf);
    double d[W];
    for (std::size_t l = 0; l < W; ++l) d[l] = buf[l];
    for (std::size_t w = W / 2; w >= 1; w /= 2)
      for (std::size_t l = 0; l < w; ++l) d[l] += d[l + w];
    return d[0];
  }
  // The largest and least lane (exact in any order: AVX-512 reduces in registers).
  static float max(const B& v) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<A, xsimd::avx512bw>) return _mm512_reduce_max_ps(static_cast<__m512>(v));
#endif
    return fold_lanes(v, [](float m, float x) { return x > m ? x : m; });
  }
  static float min(const B& v) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<A, xsimd::avx512bw>) return _mm512_reduce_min_ps(static_cast<__m512>(v));
#endif
    return fold_lanes(v, [](float m, float x) { return x < m ? x : m; });
  }
  // pick(... pick(pick(lane 0, lane 1), lane 2) ..., lane W - 1).
  template <class Pick>
  static float fold_lanes(const B& v, Pick pick) {
    alignas(64) float buf[W];
    v.store_aligned(buf);
    float m = buf[0];
    for (std::size_t l = 1; l < W; ++l) m = pick(m, buf[l]);
    return m;
  }
  static B select0(const BB& c, const B& v) {
#if defined(__wasm_simd128__)
    // One v128.and (the compat header's _mm_and_ps), not a bitselect.
    return B(_mm_and_ps(static_cast<__m128>(c), static_cast<__m128>(v)));
#else
    return xsimd::select(c, v, B(0.0f));
#endif
  }

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

  // Compression: the lanes of v where keep holds, in order, stored at out
  // (and their indices i + lane at idx), returning how many. The stores are
  // whole batches, so up to W values past the count are written: callers
  // leave that much room. AVX-512 compresses in a register (Zen 4's compress
  // straight to memory is microcoded, hundreds of cycles); AVX2 permutes by a
  // table of the 256 masks, SIMD128 swizzles bytes by a table of the 16;
  // SSE2 stores lane by lane.
  struct Compress8 {  // per 8-bit mask, the kept lanes' indices, 4 bits each
    std::uint32_t packed[256];
    constexpr Compress8() : packed() {
      for (unsigned m = 0; m < 256; ++m) {
        unsigned c = 0;
        for (unsigned l = 0; l < 8; ++l)
          if ((m >> l) & 1u) packed[m] |= l << (4 * c++);
      }
    }
  };
  static constexpr Compress8 kCompress8{};
#if defined(__wasm_simd128__)
  // SIMD128 compresses with i8x16.swizzle (which SSE2 lacks): per 4-bit mask,
  // the bytes of the kept lanes first, in order.
  struct Swizzle4 {
    std::uint8_t bytes[16][16];
    constexpr Swizzle4() : bytes() {
      for (unsigned m = 0; m < 16; ++m) {
        unsigned c = 0;
        for (unsigned l = 0; l < 4; ++l)
          if ((m >> l) & 1u) {
            for (unsigned b = 0; b < 4; ++b) bytes[m][4 * c + b] = static_cast<std::uint8_t>(4 * l + b);
            ++c;
          }
      }
    }
  };
  alignas(16) static constexpr Swizzle4 kSwizzle4{};
  static constexpr bool kRegisterCompress = true;
#else
  static constexpr bool kRegisterCompress = std::is_same_v<A, xsimd::avx512bw> || std::is_same_v<A, xsimd::avx2>;
#endif

  static std::size_t compress(const B& v, const BB& keep, float* out, std::size_t i = 0,
                              std::uint32_t* idx = nullptr) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<A, xsimd::avx512bw>) {
      const __mmask16 k = static_cast<__mmask16>(keep);
      _mm512_storeu_ps(out, _mm512_maskz_compress_ps(k, static_cast<__m512>(v)));
      if (idx != nullptr) {
        const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        _mm512_storeu_si512(idx, _mm512_maskz_compress_epi32(k, _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int>(i)))));
      }
      return static_cast<std::size_t>(__builtin_popcount(k));
    }
#endif
#if defined(__AVX2__)
    if constexpr (std::is_same_v<A, xsimd::avx2>) {
      const int bits = _mm256_movemask_ps(static_cast<__m256>(keep));
      const __m256i perm = _mm256_and_si256(
          _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(kCompress8.packed[bits])),
                            _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
          _mm256_set1_epi32(7));
      _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(static_cast<__m256>(v), perm));
      if (idx != nullptr)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx),
                            _mm256_add_epi32(perm, _mm256_set1_epi32(static_cast<int>(i))));
      return static_cast<std::size_t>(__builtin_popcount(static_cast<unsigned>(bits)));
    }
#endif
#if defined(__wasm_simd128__)
    static_assert(W == 4, "SIMD128 batches have four lanes");
    const unsigned bits = wasm_i32x4_bitmask(static_cast<v128_t>(static_cast<__m128>(keep)));
    const v128_t order = wasm_v128_load(kSwizzle4.bytes[bits]);
    wasm_v128_store(out, wasm_i8x16_swizzle(static_cast<v128_t>(static_cast<__m128>(v)), order));
    if (idx != nullptr)
      wasm_v128_store(idx, wasm_i8x16_swizzle(wasm_i32x4_add(wasm_i32x4_make(0, 1, 2, 3),
                                                              wasm_i32x4_splat(static_cast<std::int32_t>(i))),
                                              order));
    return static_cast<std::size_t>(__builtin_popcount(bits));
#else
    alignas(64) float buf[W], flag[W];
    v.store_aligned(buf);
    select0(keep, B(1.0f)).store_aligned(flag);
    std::size_t c = 0;
    for (std::size_t l = 0; l < W; ++l) {
      out[c] = buf[l];
      if (idx != nullptr) idx[c] = static_cast<std::uint32_t>(i + l);
      c += flag[l] != 0.0f;
    }
    return c;
#endif
  }

  // Appends c = (z - shift) * mul of the entries where keep(z, c) holds to
  // vals, and their indices to idx unless it is null (W of room past the end
  // of each); returns the count. The -inf padding of the tail is never kept.
  template <class Keep>
  static std::size_t gather_where(const float* z, std::size_t n, float shift, float mul, Keep keep, float* vals,
                                  std::uint32_t* idx) {
    // Skipping batches that keep nothing is a branch that short rows
    // mispredict (about half their batches keep something): there a register
    // compress of every batch is cheaper. Long rows keep little, and skip.
    // (Two loops: with one, the compiler branches on the test anyway.)
    if (kRegisterCompress && n <= 64 * W) return gather_loop<false>(z, n, shift, mul, keep, vals, idx);
    return gather_loop<true>(z, n, shift, mul, keep, vals, idx);
  }
  template <bool kSkip, class Keep>
  static std::size_t gather_loop(const float* z, std::size_t n, float shift, float mul, Keep keep, float* vals,
                                 std::uint32_t* idx) {
    std::size_t c = 0;
    const B sb(shift), mb(mul);
    for (std::size_t i = 0; i < n; i += W) {
      const B raw = load(z, i, n, -kInf);
      const B v = (raw - sb) * mb;
      const BB kept = keep(raw, v);
      if (kSkip && !xsimd::any(kept)) continue;
      c += compress(v, kept, vals + c, i, idx == nullptr ? nullptr : idx + c);
    }
    return c;
  }

  // The entries with c = (z - shift) * mul > threshold. The test is on the
  // centred value: shift + threshold / mul would round away when |shift| >> 1.
  static std::size_t gather_candidates(const float* z, std::size_t n, float threshold, float shift, float mul,
                                       float* vals, std::uint32_t* idx) {
    const B t(threshold);
    return gather_where(z, n, shift, mul, [&](const B&, const B& c) { return c > t; }, vals, idx);
  }

  // A row's max and its candidates c = (z - max) * mul > threshold, with
  // their indices when `indexed` (else idx is null), laid out in scratch.
  // False for a row of only -inf (nothing to attend to), which the caller
  // turns into zeros.
  struct Candidates {
    float max;
    float* c;
    std::uint32_t* idx;
    std::size_t count;
  };
  static bool candidates(const float* z, std::size_t n, float threshold, float mul, bool indexed, float* scratch,
                         Candidates& out) {
    out.max = row_max(z, n);
    if (out.max == -kInf) return false;
    out.c = scratch;
    out.idx = indexed ? reinterpret_cast<std::uint32_t*>(scratch + n + 16) : nullptr;
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
    if (!candidates(z, n, -1.0f, 1.0f, false, scratch, cand)) return fill(p, n, 0.0f);
    // (z - max) - tau, not z - (max + tau): the latter rounds tau away when |max| >> 1.
    const B mb(cand.max), tb(static_cast<float>(sparsemax_tau(cand.c, cand.count)));
    for (std::size_t i = 0; i < n; i += W) store(p, i, n, xsimd::max((load(z, i, n, -kInf) - mb) - tb, B(0.0f)));
  }

  // -------------------------------------------------------------------------
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

  // -------------------------------------------------------------------------
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
    for (int pass = 0; pass < kMaxPasses && xsimd::any(active); ++pass) {
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
        if (flag[r] != 0.0f) entmax15(z[r], p[r], n, params, scratch);
    }
  }

  // -------------------------------------------------------------------------
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

  // z with P(Z > z) = q for a standard normal Z (Abramowitz & Stegun 26.2.23,
  // |error| < 5e-4): only a guess for where to count.
  static double normal_upper_quantile(double q) {
    const bool upper = q < 0.5;
    const double t = std::sqrt(-2.0 * std::log(upper ? q : 1.0 - q));
    const double z = t - (2.515517 + t * (0.802853 + t * 0.010328)) / (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308)));
    return upper ? z : -z;
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

  // -------------------------------------------------------------------------
  // Constrained softmax (p <= u on the simplex): p = min(u, c e) with
  // e = exp(z - max) and c the scalar that makes p sum to 1. The saturated set
  // {c e >= u} only grows with c, and c = (1 - sum_saturated u) /
  // sum_free e computed from a set is at least the c that set came from, so
  // the iteration rises to the fixed point; each step is one pass, usually two
  // or three in all. Rows it has not settled in kConstrainedPasses go to the
  // exact double solver. e is kept in scratch; p (which may alias z or u) is
  // written last.
  static constexpr int kConstrainedPasses = 32;

  // Sums in double lanes, for the constrained solvers: their thresholds come
  // from differences like 1 - sum_saturated u, where float lanes lose the
  // digits that tight bounds (u ~ 1/n) need.
  using BD = xsimd::batch<double, A>;
  static void add_wide(BD& acc, const B& v) {
    alignas(64) float buf[W];
    v.store_aligned(buf);
    for (std::size_t h = 0; h < W; h += BD::size) acc += BD::load_aligned(buf + h);
  }
  static double sum(const BD& v) {
    alignas(64) double buf[BD::size];
    v.store_aligned(buf);
    double s = 0;
    for (std::size_t l = 0; l < BD::size; ++l) s += buf[l];
    return s;
  }

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

  // constexpr: the per-ISA tables are then constant-initialized, never by
  // code compiled with that ISA's flags running at startup on any CPU.
  static constexpr TransformKernels table(CpuIsa isa) {
    return {isa,          valid,  finite,  upper_bounds,       softmax,  sparsemax,          entmax15,
            entmax15_short, entmax,   entmax_short, topk_softmax, adaptive_span,   softmax_backward, sparsemax_backward, entmax15_backward, entmax_backward,
            entmax_backward_alpha, constrained_softmax, constrained_sparsemax, constrained_backward<true>,
            constrained_backward<false>};
  }
};

}  // namespace entgraph::detail::simd
