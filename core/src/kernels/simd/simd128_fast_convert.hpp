// Force-included into the simd128 kernels (core/CMakeLists.txt).
//
// Emscripten 3.1.6 emulates SSE2's _mm_cvttps_epi32 one lane at a time
// (lrintf per lane, through memory), and xsimd's exp converts its exponent
// with it, which made every exp-based kernel (softmax, top-k, general alpha)
// 3x slower than the same 4-lane code natively. SIMD128 has the instruction.
// It differs from x86 only on NaN and out-of-range lanes (x86 gives INT_MIN,
// SIMD128 saturates), which xsimd's exp overrides with its own range checks:
// the outputs stay bit-identical to the native SSE2 kernels (tests/wasm).
#pragma once

#if defined(__wasm_simd128__) && defined(__SSE2__)
#include <emmintrin.h>
#include <wasm_simd128.h>
#undef _mm_cvttps_epi32
#define _mm_cvttps_epi32(a) ((__m128i)wasm_i32x4_trunc_sat_f32x4((v128_t)(a)))
#endif
