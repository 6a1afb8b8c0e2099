// The bodies of code_scores and code_bounds and of their byte forms
// (kernels/code_scores.hpp), compiled once per instruction set with that
// set's flags; the vector width follows the compiler's target macros
// (AVX-512BW, AVX2, else SSE2, which Emscripten maps to WebAssembly
// SIMD128: _mm_madd_epi16 is i32x4.dot_i16x8_s). The avx2 build with
// AVX-VNNI (code_scores_avx_vnni.cpp) multiplies bytes with vpdpbusd.
//
// A tile of 4 query rows x 16 keys stays in registers while the dimensions
// stream through. Keys go in chunks of kChunkKeys so that a chunk's packed
// codes stay in cache while every row of the call passes over them.
#pragma once

#if defined(__AVX2__) || defined(__AVX512BW__)
#include <immintrin.h>
#else
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/code_scores.hpp"

// Internal linkage: each instruction set's translation unit has its own copy.
namespace entgraph::detail::code_simd {
namespace {

#if defined(__AVX512BW__)
using V = __m512i;
using F = __m512;
inline constexpr std::size_t kLanes = 16;
inline V zero() { return _mm512_setzero_si512(); }
inline V load(const std::int16_t* p) { return _mm512_loadu_si512(p); }
inline V broadcast(std::int32_t x) { return _mm512_set1_epi32(x); }
inline V madd_add(V acc, V q, V k) { return _mm512_add_epi32(acc, _mm512_madd_epi16(q, k)); }
inline V load_i32(const std::int32_t* p) { return _mm512_loadu_si512(p); }
inline V add_i32(V a, V b) { return _mm512_add_epi32(a, b); }
inline F to_float(V d) { return _mm512_cvtepi32_ps(d); }
inline F load_f(const float* p) { return _mm512_loadu_ps(p); }
inline F set_f(float x) { return _mm512_set1_ps(x); }
inline F mul_f(F a, F b) { return _mm512_mul_ps(a, b); }
inline F fma_f(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
inline F max_f(F a, F b) { return _mm512_max_ps(a, b); }
inline void store_f(float* p, F x) { _mm512_storeu_ps(p, x); }
inline float reduce_max(F x) { return _mm512_reduce_max_ps(x); }
#define ENTGRAPH_CODE_BYTES 1
inline V load_bytes(const std::int8_t* p) { return _mm512_loadu_si512(p); }
inline V maddubs_add(V acc16, V q, V k) { return _mm512_add_epi16(acc16, _mm512_maddubs_epi16(q, k)); }
inline V widen_add(V acc32, V acc16) { return _mm512_add_epi32(acc32, _mm512_madd_epi16(acc16, _mm512_set1_epi16(1))); }
inline V sub_i32(V a, V b) { return _mm512_sub_epi32(a, b); }
#elif defined(__AVX2__)
using V = __m256i;
using F = __m256;
inline constexpr std::size_t kLanes = 8;
inline V zero() { return _mm256_setzero_si256(); }
inline V load(const std::int16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline V broadcast(std::int32_t x) { return _mm256_set1_epi32(x); }
inline V madd_add(V acc, V q, V k) { return _mm256_add_epi32(acc, _mm256_madd_epi16(q, k)); }
inline V load_i32(const std::int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline V add_i32(V a, V b) { return _mm256_add_epi32(a, b); }
inline F to_float(V d) { return _mm256_cvtepi32_ps(d); }
inline F load_f(const float* p) { return _mm256_loadu_ps(p); }
inline F set_f(float x) { return _mm256_set1_ps(x); }
inline F mul_f(F a, F b) { return _mm256_mul_ps(a, b); }
inline F fma_f(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
inline F max_f(F a, F b) { return _mm256_max_ps(a, b); }
inline void store_f(float* p, F x) { _mm256_storeu_ps(p, x); }
inline float reduce_max(F x) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}
#define ENTGRAPH_CODE_BYTES 1
inline V load_bytes(const std::int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline V maddubs_add(V acc16, V q, V k) { return _mm256_add_epi16(acc16, _mm256_maddubs_epi16(q, k)); }
inline V widen_add(V acc32, V acc16) { return _mm256_add_epi32(acc32, _mm256_madd_epi16(acc16, _mm256_set1_epi16(1))); }
inline V sub_i32(V a, V b) { return _mm256_sub_epi32(a, b); }
#else
using V = __m128i;
using F = __m128;
inline constexpr std::size_t kLanes = 4;
inline V zero() { return _mm_setzero_si128(); }
inline V load(const std::int16_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline V broadcast(std::int32_t x) { return _mm_set1_epi32(x); }
inline V madd_add(V acc, V q, V k) { return _mm_add_epi32(acc, _mm_madd_epi16(q, k)); }
inline V load_i32(const std::int32_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline V add_i32(V a, V b) { return _mm_add_epi32(a, b); }
inline F to_float(V d) { return _mm_cvtepi32_ps(d); }
inline F load_f(const float* p) { return _mm_loadu_ps(p); }
inline F set_f(float x) { return _mm_set1_ps(x); }
inline F mul_f(F a, F b) { return _mm_mul_ps(a, b); }
inline F fma_f(F a, F b, F c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }  // no FMA: two roundings, covered
inline F max_f(F a, F b) { return _mm_max_ps(a, b); }
inline void store_f(float* p, F x) { _mm_storeu_ps(p, x); }
inline float reduce_max(F x) {
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_shuffle_ps(x, x, 1)));
}
#endif

inline constexpr std::size_t kBlock = kCodeBlockKeys;
inline constexpr std::size_t kVectors = kBlock / kLanes;  // vectors per key block
inline constexpr std::size_t kRows = 4;
inline constexpr std::size_t kChunkKeys = 256;

// Adds the 16-bit code products of one key block (kb: its packed codes) to
// the tile's rows qr: per pair of dimensions, the block's 32 codes are
// loaded once and multiplied with each row's broadcast pair of codes.
inline void add_pair_products(V (&acc)[kRows][kVectors], const std::int32_t* const* qr,
                              const std::int16_t* kb, std::size_t pairs) {
  for (std::size_t p = 0; p < pairs; ++p) {
    V kv[kVectors];
    for (std::size_t v = 0; v < kVectors; ++v) kv[v] = load(kb + p * 2 * kBlock + v * 2 * kLanes);
    for (std::size_t r = 0; r < kRows; ++r) {
      const V qv = broadcast(qr[r][p]);
      for (std::size_t v = 0; v < kVectors; ++v) acc[r][v] = madd_add(acc[r][v], qv, kv[v]);
    }
  }
}

// The tiles of code_scores and byte_code_scores: products(b, i0, nr, acc)
// sums key block b's integer products for rows [i0, i0 + nr) into acc (rows
// past nr repeat the last one: computed, never stored, so that the tile's
// loops have fixed bounds); the epilogue scales them, stores them and keeps
// each row's largest value of the current 64-key group (chunks start at
// multiples of 64 keys, so groups never straddle them).
template <class Products>
inline void score_tiles(std::size_t rows, std::size_t keys, const float* q_scale, const float* k_scale, float* out,
                        std::size_t ldo, float* group_max, std::size_t ldg, Products&& products) {
  static_assert(kChunkKeys % kCodeGroupKeys == 0 && kCodeGroupKeys % kBlock == 0);
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  alignas(64) float tail[kBlock];
  alignas(64) float tail_scale[kBlock];
  for (std::size_t j0 = 0; j0 < keys; j0 += kChunkKeys) {
    const std::size_t j1 = std::min(keys, j0 + kChunkKeys);
    for (std::size_t i0 = 0; i0 < rows; i0 += kRows) {
      const std::size_t nr = std::min(kRows, rows - i0);
      F top[kRows];  // set at every group's first block; set here too for the compiler's sake
      float top_tail[kRows];
      for (std::size_t r = 0; r < kRows; ++r) {
        top[r] = set_f(kLowest);
        top_tail[r] = kLowest;
      }
      for (std::size_t b = j0 / kBlock; b * kBlock < j1; ++b) {
        const std::size_t jb = b * kBlock, valid = std::min(kBlock, keys - jb);
        if (jb % kCodeGroupKeys == 0)
          for (std::size_t r = 0; r < kRows; ++r) {
            top[r] = set_f(kLowest);
            top_tail[r] = kLowest;
          }
        V acc[kRows][kVectors];
        products(b, i0, nr, acc);
        const float* ks = k_scale + jb;
        if (valid < kBlock) {  // the last block: k_scale and out end inside it
          std::fill(tail_scale, tail_scale + kBlock, 0.0f);
          std::copy(ks, ks + valid, tail_scale);
          ks = tail_scale;
        }
        F key_scale[kVectors];  // loaded once for the rows
        for (std::size_t v = 0; v < kVectors; ++v) key_scale[v] = load_f(ks + v * kLanes);
#pragma GCC unroll 4
        for (std::size_t r = 0; r < kRows; ++r) {  // fixed bounds: top stays in registers
          if (r >= nr) break;
          const std::size_t i = i0 + r;
          float* o = valid == kBlock ? out + i * ldo + jb : tail;
          for (std::size_t v = 0; v < kVectors; ++v) {
            const F score = mul_f(mul_f(to_float(acc[r][v]), key_scale[v]), set_f(q_scale[i]));
            store_f(o + v * kLanes, score);
            if (valid == kBlock) top[r] = max_f(top[r], score);
          }
          if (valid < kBlock) {
            std::copy(tail, tail + valid, out + i * ldo + jb);
            top_tail[r] = *std::max_element(tail, tail + valid);
          }
          if ((jb + kBlock) % kCodeGroupKeys == 0 || jb + kBlock >= keys)
            group_max[i * ldg + jb / kCodeGroupKeys] = std::max(reduce_max(top[r]), top_tail[r]);
        }
      }
    }
  }
}

// 16-bit codes (add_pair_products).
inline void code_scores(const std::int32_t* q, std::size_t rows, const std::int16_t* k, std::size_t pairs,
                        std::size_t keys, const float* q_scale, const float* k_scale, float* out, std::size_t ldo,
                        float* group_max, std::size_t ldg) {
  score_tiles(rows, keys, q_scale, k_scale, out, ldo, group_max, ldg,
              [&](std::size_t b, std::size_t i0, std::size_t nr, V (&acc)[kRows][kVectors]) {
                const std::int32_t* qr[kRows];
                for (std::size_t r = 0; r < kRows; ++r) qr[r] = q + (i0 + std::min(r, nr - 1)) * pairs;
                for (auto& row : acc)
                  for (V& a : row) a = zero();
                add_pair_products(acc, qr, k + b * pairs * 2 * kBlock, pairs);
              });
}

#if defined(ENTGRAPH_CODE_BYTES) && defined(__AVXVNNI__) && !defined(__AVX512BW__)
// Adds the byte code products of one key block (kb: its packed codes) to
// the tile's rows qr: per quad of dimensions, the block's 64 codes against
// each row's broadcast quad, four products into each 32-bit lane by
// AVX-VNNI (code_scores_avx_vnni.cpp); no 16-bit sums, so no segments.
inline void add_quad_products(V (&acc)[kRows][kVectors], const std::uint32_t* const* qr, const std::int8_t* kb,
                              std::size_t quads, std::size_t) {
  for (std::size_t p = 0; p < quads; ++p) {
    V kv[kVectors];
    for (std::size_t v = 0; v < kVectors; ++v) kv[v] = load_bytes(kb + p * 4 * kBlock + v * 4 * kLanes);
    for (std::size_t r = 0; r < kRows; ++r) {
      const V qv = broadcast(static_cast<std::int32_t>(qr[r][p]));
      for (std::size_t v = 0; v < kVectors; ++v) acc[r][v] = _mm256_dpbusd_avx_epi32(acc[r][v], qv, kv[v]);
    }
  }
}
#elif defined(ENTGRAPH_CODE_BYTES)
// Adds the byte code products of one key block (kb: its packed codes) to
// the tile's rows qr: per quad of dimensions, the block's 64 codes against
// each row's broadcast quad, in 16-bit sums widened every `segment` quads.
inline void add_quad_products(V (&acc)[kRows][kVectors], const std::uint32_t* const* qr, const std::int8_t* kb,
                              std::size_t quads, std::size_t segment) {
  for (std::size_t p0 = 0; p0 < quads; p0 += segment) {
    V sums[kRows][kVectors];
    for (auto& row : sums)
      for (V& a : row) a = zero();
    for (std::size_t p = p0; p < std::min(quads, p0 + segment); ++p) {
      V kv[kVectors];
      for (std::size_t v = 0; v < kVectors; ++v) kv[v] = load_bytes(kb + p * 4 * kBlock + v * 4 * kLanes);
      for (std::size_t r = 0; r < kRows; ++r) {
        const V qv = broadcast(static_cast<std::int32_t>(qr[r][p]));
        for (std::size_t v = 0; v < kVectors; ++v) sums[r][v] = maddubs_add(sums[r][v], qv, kv[v]);
      }
    }
    for (std::size_t r = 0; r < kRows; ++r)
      for (std::size_t v = 0; v < kVectors; ++v) acc[r][v] = widen_add(acc[r][v], sums[r][v]);
  }
}
#endif

#if defined(ENTGRAPH_CODE_BYTES)
// Byte codes: the 32-bit sums start at minus the keys' corrections.
inline void byte_code_scores(const std::uint32_t* q, std::size_t rows, const std::int8_t* k,
                             const std::int32_t* k_correction, std::size_t quads, std::size_t segment,
                             std::size_t keys, const float* q_scale, const float* k_scale, float* out,
                             std::size_t ldo, float* group_max, std::size_t ldg) {
  score_tiles(rows, keys, q_scale, k_scale, out, ldo, group_max, ldg,
              [&](std::size_t b, std::size_t i0, std::size_t nr, V (&acc)[kRows][kVectors]) {
                const std::uint32_t* qr[kRows];
                for (std::size_t r = 0; r < kRows; ++r) qr[r] = q + (i0 + std::min(r, nr - 1)) * quads;
                for (std::size_t v = 0; v < kVectors; ++v) {
                  const V correction = load_i32(k_correction + b * kBlock + v * kLanes);
                  for (std::size_t r = 0; r < kRows; ++r) acc[r][v] = sub_i32(zero(), correction);
                }
                add_quad_products(acc, qr, k + b * quads * 4 * kBlock, quads, segment);
              });
}
inline constexpr ByteCodeScores kByteCodeScores = &byte_code_scores;
#else
inline constexpr ByteCodeScores kByteCodeScores = nullptr;  // no byte multiply before SSSE3
#endif

// The tiles of code_bounds and byte_code_bounds: each accumulator starts at
// its row's and key's integer margins and products(b, ir, acc) adds key
// block b's integer products of the rows ir; the epilogue scales by the two
// power-of-two steps, adds the residual (kResid) and rounding columns, and
// keeps each row's largest bound of the current 64-key group (chunks start
// at multiples of 64 keys, so groups never straddle them).
template <bool kResid, class Products>
inline void bound_tiles_with(std::size_t rows, std::size_t keys, const CodeBoundSide& row, const CodeBoundSide& key,
                             float* out, std::size_t ldo, float* group_max, std::size_t ldg, Products&& products) {
  static_assert(kChunkKeys % kCodeGroupKeys == 0 && kCodeGroupKeys % kBlock == 0);
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  alignas(64) float tail[kBlock];
  for (std::size_t j0 = 0; j0 < keys; j0 += kChunkKeys) {
    const std::size_t j1 = std::min(keys, j0 + kChunkKeys);
    for (std::size_t i0 = 0; i0 < rows; i0 += kRows) {
      const std::size_t nr = std::min(kRows, rows - i0);
      std::size_t ir[kRows];
      for (std::size_t r = 0; r < kRows; ++r) ir[r] = i0 + std::min(r, nr - 1);
      F top[kRows];  // set at every group's first block; set here too for the compiler's sake
      float top_tail[kRows];
      for (std::size_t r = 0; r < kRows; ++r) {
        top[r] = set_f(kLowest);
        top_tail[r] = kLowest;
      }
      for (std::size_t b = j0 / kBlock; b * kBlock < j1; ++b) {
        const std::size_t jb = b * kBlock, valid = std::min(kBlock, keys - jb);
        if (jb % kCodeGroupKeys == 0)
          for (std::size_t r = 0; r < kRows; ++r) {
            top[r] = set_f(kLowest);
            top_tail[r] = kLowest;
          }
        V acc[kRows][kVectors];
        for (std::size_t v = 0; v < kVectors; ++v) {
          const V key_add = load_i32(key.add + jb + v * kLanes);
          for (std::size_t r = 0; r < kRows; ++r) acc[r][v] = add_i32(broadcast(row.add[ir[r]]), key_add);
        }
        products(b, ir, acc);
        F key_round[kVectors], key_resid[kVectors], key_scale[kVectors];  // loaded once for the rows
        for (std::size_t v = 0; v < kVectors; ++v) {
          key_round[v] = load_f(key.round + jb + v * kLanes);
          key_resid[v] = kResid ? load_f(key.resid + jb + v * kLanes) : key_round[v];
          key_scale[v] = load_f(key.scale + jb + v * kLanes);
        }
#pragma GCC unroll 4
        for (std::size_t r = 0; r < kRows; ++r) {  // fixed bounds: top stays in registers
          if (r >= nr) break;
          const std::size_t i = i0 + r;
          float* o = valid == kBlock ? out + i * ldo + jb : tail;
          for (std::size_t v = 0; v < kVectors; ++v) {
            F extra = mul_f(set_f(row.round[i]), key_round[v]);
            if (kResid) extra = fma_f(set_f(row.resid[i]), key_resid[v], extra);
            const F step = mul_f(set_f(row.scale[i]), key_scale[v]);
            const F bound = fma_f(to_float(acc[r][v]), step, extra);
            store_f(o + v * kLanes, bound);
            if (valid == kBlock) top[r] = max_f(top[r], bound);
          }
          if (valid < kBlock) {  // the last block: out ends inside it
            std::copy(tail, tail + valid, out + i * ldo + jb);
            top_tail[r] = *std::max_element(tail, tail + valid);
          }
          if ((jb + kBlock) % kCodeGroupKeys == 0 || jb + kBlock >= keys)
            group_max[i * ldg + jb / kCodeGroupKeys] = std::max(reduce_max(top[r]), top_tail[r]);
        }
      }
    }
  }
}

template <class Products>
inline void bound_tiles(std::size_t rows, std::size_t keys, const CodeBoundSide& row, const CodeBoundSide& key,
                        float* out, std::size_t ldo, float* group_max, std::size_t ldg, Products&& products) {
  if (key.resid != nullptr) {
    bound_tiles_with<true>(rows, keys, row, key, out, ldo, group_max, ldg, products);
  } else {
    bound_tiles_with<false>(rows, keys, row, key, out, ldo, group_max, ldg, products);
  }
}

inline void code_bounds(const std::int32_t* q, std::size_t rows, const std::int16_t* k, std::size_t pairs,
                        std::size_t keys, const CodeBoundSide& row, const CodeBoundSide& key, float* out,
                        std::size_t ldo, float* group_max, std::size_t ldg) {
  bound_tiles(rows, keys, row, key, out, ldo, group_max, ldg,
              [&](std::size_t b, const std::size_t(&ir)[kRows], V(&acc)[kRows][kVectors]) {
                const std::int32_t* qr[kRows];
                for (std::size_t r = 0; r < kRows; ++r) qr[r] = q + ir[r] * pairs;
                add_pair_products(acc, qr, k + b * pairs * 2 * kBlock, pairs);
              });
}

#if defined(ENTGRAPH_CODE_BYTES)
inline void byte_code_bounds(const std::uint32_t* q, std::size_t rows, const std::int8_t* k, std::size_t quads,
                             std::size_t segment, std::size_t keys, const CodeBoundSide& row, const CodeBoundSide& key,
                             float* out, std::size_t ldo, float* group_max, std::size_t ldg) {
  bound_tiles(rows, keys, row, key, out, ldo, group_max, ldg,
              [&](std::size_t b, const std::size_t(&ir)[kRows], V(&acc)[kRows][kVectors]) {
                const std::uint32_t* qr[kRows];
                for (std::size_t r = 0; r < kRows; ++r) qr[r] = q + ir[r] * quads;
                add_quad_products(acc, qr, k + b * quads * 4 * kBlock, quads, segment);
              });
}
inline constexpr ByteCodeBounds kByteCodeBounds = &byte_code_bounds;
#else
inline constexpr ByteCodeBounds kByteCodeBounds = nullptr;
#endif

}  // namespace
}  // namespace entgraph::detail::code_simd
