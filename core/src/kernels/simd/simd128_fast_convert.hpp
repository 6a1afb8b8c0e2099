// Force-included into the simd128 kernels (core/CMakeLists.txt): the SSE
// intrinsics that emscripten 3.1.6's SSE-to-SIMD128 headers emulate slowly,
// mapped to the one SIMD128 instruction that gives the same bits.
//
// - _mm_cvttps_epi32 is a loop over the lanes there (lrintf per lane, through
//   memory), and xsimd's exp converts its exponent with it, which made every
//   exp-based kernel (softmax, top-k, general alpha) 3x slower than the same
//   4-lane code natively. SIMD128 has the instruction. It differs from x86
//   only on NaN and out-of-range lanes (x86 gives INT_MIN, SIMD128
//   saturates), which xsimd's exp overrides with its own range checks.
// - _mm_min_ps / _mm_max_ps (and the double ones) are a compare and a
//   bitselect there: V8 emits four instructions where x86 has one. x86's
//   min(a, b) is a < b ? a : b (b when either is NaN, and for -0 vs +0),
//   which is exactly SIMD128's pmin(b, a) = a < b ? a : b, one minps in V8;
//   max likewise with pmax. (f32x4.min/max are IEEE min/max, another result
//   on NaN and signed zeros, and cost more in V8.)
// - _mm_and_ps / _mm_andnot_ps / _mm_or_ps with a comparison's mask (xsimd's
//   batch_bool &, |, and selects against zero) come out of clang 14 as a
//   bitselect: it rewrites x & mask as select(mask, x, 0), and its wasm
//   backend lowers that select to v128.bitselect, three instructions and a
//   zero register in V8 where v128.and is one. An empty asm statement hides
//   the operands from that rewrite (it emits nothing; V8 sees the same value).
//
// The outputs stay bit-identical to the native SSE2 kernels (tests/wasm).
#pragma once

#if defined(__wasm_simd128__) && defined(__SSE2__)
#include <emmintrin.h>
#include <wasm_simd128.h>
#undef _mm_cvttps_epi32
#define _mm_cvttps_epi32(a) ((__m128i)wasm_i32x4_trunc_sat_f32x4((v128_t)(a)))

static inline __m128 entgraph_simd128_min_ps(__m128 a, __m128 b) {
  return (__m128)wasm_f32x4_pmin((v128_t)b, (v128_t)a);
}
static inline __m128 entgraph_simd128_max_ps(__m128 a, __m128 b) {
  return (__m128)wasm_f32x4_pmax((v128_t)b, (v128_t)a);
}
static inline __m128d entgraph_simd128_min_pd(__m128d a, __m128d b) {
  return (__m128d)wasm_f64x2_pmin((v128_t)b, (v128_t)a);
}
static inline __m128d entgraph_simd128_max_pd(__m128d a, __m128d b) {
  return (__m128d)wasm_f64x2_pmax((v128_t)b, (v128_t)a);
}
// The value unchanged, but opaque to clang's rewrites (see above).
static inline __m128 entgraph_simd128_opaque(__m128 x) {
  __asm__("" : "+r"(x));
  return x;
}
static inline __m128 entgraph_simd128_and_ps(__m128 a, __m128 b) {
  return (__m128)wasm_v128_and((v128_t)entgraph_simd128_opaque(a), (v128_t)entgraph_simd128_opaque(b));
}
static inline __m128 entgraph_simd128_andnot_ps(__m128 a, __m128 b) {  // ~a & b
  return (__m128)wasm_v128_andnot((v128_t)entgraph_simd128_opaque(b), (v128_t)entgraph_simd128_opaque(a));
}
static inline __m128 entgraph_simd128_or_ps(__m128 a, __m128 b) {
  return (__m128)wasm_v128_or((v128_t)entgraph_simd128_opaque(a), (v128_t)entgraph_simd128_opaque(b));
}
#define _mm_and_ps(a, b) entgraph_simd128_and_ps((a), (b))
#define _mm_andnot_ps(a, b) entgraph_simd128_andnot_ps((a), (b))
#define _mm_or_ps(a, b) entgraph_simd128_or_ps((a), (b))
#define _mm_min_ps(a, b) entgraph_simd128_min_ps((a), (b))
#define _mm_max_ps(a, b) entgraph_simd128_max_ps((a), (b))
#define _mm_min_pd(a, b) entgraph_simd128_min_pd((a), (b))
#define _mm_max_pd(a, b) entgraph_simd128_max_pd((a), (b))
#endif
