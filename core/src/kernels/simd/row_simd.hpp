// entgraph internal: the row helpers shared by the SIMD transform kernels
// (kernels/simd/*_simd.hpp), templated on the instruction set: loads and
// stores padded past the row's end, lane reductions, validity scans, and the
// compression of selected lanes. Included ONLY through
// kernels/simd/transforms_simd.hpp by kernels/simd/transforms_<isa>.cpp, each
// compiled with that ISA's flags (a body visible elsewhere would be
// instantiated with the wrong flags).
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

#include "kernels/simd/lane_tables.hpp"
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
struct RowSimd {
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

  // Sums in double lanes (the constrained solvers and 1.5-entmax): the
  // constrained thresholds come from differences like 1 - sum_saturated u,
  // where float lanes lose the digits that tight bounds (u ~ 1/n) need.
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

  // z with P(Z > z) = q for a standard normal Z (Abramowitz & Stegun 26.2.23,
  // |error| < 5e-4): only a guess for where to count.
  static double normal_upper_quantile(double q) {
    const bool upper = q < 0.5;
    const double t = std::sqrt(-2.0 * std::log(upper ? q : 1.0 - q));
    const double z = t - (2.515517 + t * (0.802853 + t * 0.010328)) / (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308)));
    return upper ? z : -z;
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
  // (compress8_lanes: kernels/simd/lane_tables.hpp.)
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
      const __m256i perm = compress8_lanes(bits);
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
};

// The row helpers' names in a family of kernels deriving from RowSimd<A>
// (members of a dependent base are not found by unqualified lookup).
#define ENTGRAPH_ROW_SIMD_MEMBERS                                               \
  using R = RowSimd<A>;                                                         \
  using typename R::B;                                                          \
  using typename R::BB;                                                         \
  using R::W;                                                                   \
  using R::load;                                                                \
  using R::store;                                                               \
  using R::sum;                                                                 \
  using R::max;                                                                 \
  using R::min;                                                                 \
  using R::fold_lanes;                                                          \
  using R::select0;                                                             \
  using R::row_max;                                                             \
  using typename R::BD;                                                         \
  using R::add_wide;                                                            \
  using R::normal_upper_quantile;                                               \
  using R::kRegisterCompress;                                                   \
  using R::fill;                                                                \
  using R::scale;                                                               \
  using R::compress;                                                            \
  using R::gather_where;                                                        \
  using R::gather_candidates;                                                   \
  using R::candidates;                                                          \
  using typename R::Candidates;

}  // namespace entgraph::detail::simd
