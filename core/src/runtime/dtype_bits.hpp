// entgraph internal: float32 <-> bfloat16 / float16 on bit patterns, inline
// for the loops that convert whole rows (batched attention); the public
// functions of batched_attention.hpp call these. Working on the bits makes
// rounding IEEE round-to-nearest-even whatever the compiler, the ISA or the
// FPU's rounding mode.
#pragma once

#include <cstdint>
#include <cstring>

namespace entgraph::detail {

inline std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

inline float float_of(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

inline float widen_bfloat16(std::uint16_t bits) { return float_of(static_cast<std::uint32_t>(bits) << 16); }

inline std::uint16_t round_to_bfloat16(float x) {
  const std::uint32_t b = bits_of(x);
  // NaN: truncation could clear every payload bit left and give inf, so the
  // quiet bit is set (sign and the top payload bits stay).
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((b >> 16) | 0x0040u);
  // Round to nearest even on the 16 dropped bits. A carry runs into the
  // exponent, which is the next binade, or inf past the largest finite value;
  // subnormals need nothing special (bfloat16 has float's exponent range).
  return static_cast<std::uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

inline float widen_float16(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return float_of(sign | 0x7f800000u | (mantissa << 13));  // inf, or NaN with its payload
  if (exponent != 0) return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));  // rebias 15 -> 127
  // Zero or subnormal: mantissa * 2^-24, exact in float (mantissa < 2^10).
  return float_of(sign | bits_of(static_cast<float>(mantissa) * 0x1p-24f));
}

inline std::uint16_t round_to_float16(float x) {
  const std::uint32_t b = bits_of(x);
  const auto sign = static_cast<std::uint16_t>((b >> 16) & 0x8000u);
  const std::uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: quiet, with the top payload bits
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  // From 65520 (the tie between 65504 and 2^16, which rounds to the even
  // 2^16) up, and inf itself: inf.
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // a normal half (>= 2^-14)
    // Rebias the exponent, then round to nearest even on the 13 dropped
    // bits; a carry moves into the exponent, as it should.
    const std::uint32_t r = a - (112u << 23);
    return static_cast<std::uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  // Up to 2^-25 (half the smallest subnormal; the tie rounds to the even 0),
  // float subnormals included: zero.
  if (a <= 0x33000000u) return sign;
  // A half subnormal: round(x * 2^24) to nearest even. x = M 2^(e - 150) with
  // M the 24-bit significand, so x * 2^24 = M / 2^(126 - e), a shift of 14..24.
  const std::uint32_t e = a >> 23, significand = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
  std::uint32_t q = significand >> shift;
  const std::uint32_t rest = significand & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u) != 0)) ++q;  // 1024 is the smallest normal: right too
  return static_cast<std::uint16_t>(sign | q);
}

}  // namespace entgraph::detail
