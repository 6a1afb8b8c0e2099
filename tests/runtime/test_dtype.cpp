// Element types of batched tensors: names, sizes, and the float32 <->
// bfloat16 / float16 conversions against a float64 reference: every 16-bit
// pattern decoded by formula, and rounding as "the nearest representable
// value, ties to the even pattern, past the largest finite value inf", found
// by search over the format's values rather than by bit manipulation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "entgraph/batched_attention.hpp"
#include "entgraph/error.hpp"

using namespace entgraph;

namespace {

struct Format {
  const char* name;
  int exponent_bits, mantissa_bits;
  float (*widen)(std::uint16_t);
  std::uint16_t (*round)(float);

  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  unsigned max_exponent() const { return (1u << exponent_bits) - 1; }
  // The pattern of +inf; as a value, the binade past the largest finite one
  // (what IEEE rounding compares against before it overflows).
  std::uint16_t inf_bits() const { return static_cast<std::uint16_t>(max_exponent() << mantissa_bits); }

  // The value of a non-NaN pattern by the textbook formula, with +inf read
  // as 2^(emax + 1) when `unbounded`.
  double value(std::uint16_t bits, bool unbounded = false) const {
    const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
    const unsigned e = (bits >> mantissa_bits) & max_exponent();
    const unsigned m = bits & ((1u << mantissa_bits) - 1);
    if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - bias() - mantissa_bits);
    if (e == max_exponent() && !unbounded) return sign * std::numeric_limits<double>::infinity();
    return sign * std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -mantissa_bits), static_cast<int>(e) - bias());
  }
  bool is_nan(std::uint16_t bits) const {
    return ((bits >> mantissa_bits) & max_exponent()) == max_exponent() && (bits & ((1u << mantissa_bits) - 1)) != 0;
  }

  // Round to nearest even by search: positive patterns 0 .. inf_bits() are
  // ascending in value.
  std::uint16_t reference_round(float x) const {
    const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
    const double a = std::abs(static_cast<double>(x));
    if (std::isinf(a)) return static_cast<std::uint16_t>(sign | inf_bits());
    unsigned lo = 0, hi = inf_bits();  // value(lo) <= a < value(hi), or a at the top
    if (a >= value(inf_bits(), true)) return static_cast<std::uint16_t>(sign | inf_bits());
    while (hi - lo > 1) {
      const unsigned mid = (lo + hi) / 2;
      if (value(static_cast<std::uint16_t>(mid)) <= a)
        lo = mid;
      else
        hi = mid;
    }
    const double vlo = value(static_cast<std::uint16_t>(lo)), vhi = value(static_cast<std::uint16_t>(hi), true);
    unsigned pick;
    if (a == vlo)
      pick = lo;
    else if (2 * a < vlo + vhi)
      pick = lo;  // both sides exact in double
    else if (2 * a > vlo + vhi)
      pick = hi;
    else
      pick = (lo & 1u) == 0 ? lo : hi;
    return static_cast<std::uint16_t>(sign | pick);
  }
};

const Format kBf16{"bfloat16", 8, 7, bfloat16_to_float, float_to_bfloat16};
const Format kF16{"float16", 5, 10, float16_to_float, float_to_float16};

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
float float_of(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("dtype: names, sizes and parsing; unknown names and values are refused") {
    CHECK(std::string(dtype_name(DType::float32)) == "float32");
    CHECK(std::string(dtype_name(DType::bfloat16)) == "bfloat16");
    CHECK(std::string(dtype_name(DType::float16)) == "float16");
    CHECK(dtype_size(DType::float32) == 4);
    CHECK(dtype_size(DType::bfloat16) == 2);
    CHECK(dtype_size(DType::float16) == 2);
    for (DType t : {DType::float32, DType::bfloat16, DType::float16}) CHECK(parse_dtype(dtype_name(t)) == t);
    CHECK(parse_dtype("f32") == DType::float32);
    CHECK(parse_dtype("fp32") == DType::float32);
    CHECK(parse_dtype("bf16") == DType::bfloat16);
    CHECK(parse_dtype("f16") == DType::float16);
    CHECK(parse_dtype("fp16") == DType::float16);
    CHECK_THROWS_WITH_AS(parse_dtype("half"),
                         "dtype: unknown dtype (got 'half', expected float32, bfloat16 or float16, or f32, fp32, "
                         "bf16, f16, fp16)",
                         Error);
    CHECK_THROWS_WITH_AS(parse_dtype(std::string("bf\x01", 3)), doctest::Contains("got 'bf\\x01'"), Error);
    CHECK_THROWS_WITH_AS(parse_dtype("BF16"), doctest::Contains("unknown dtype"), Error);
    CHECK_THROWS_WITH_AS(dtype_size(static_cast<DType>(7)),
                         "dtype_size: dtype is not a DType (got 7, expected float32, bfloat16 or float16)", Error);
    CHECK_THROWS_WITH_AS(dtype_name(static_cast<DType>(3)), doctest::Contains("dtype_name: dtype is not a DType"),
                         Error);
  }

  TEST_CASE("dtype: every 16-bit pattern widens to its exact value and rounds back to itself") {
    for (const Format* f : {&kBf16, &kF16}) {
      const std::string format = f->name;
      CAPTURE(format);
      std::size_t widen_failures = 0, round_failures = 0;
      unsigned first_widen = 0, first_round = 0;
      for (unsigned p = 0; p <= 0xffffu; ++p) {
        const auto bits = static_cast<std::uint16_t>(p);
        const float x = f->widen(bits);
        const std::uint16_t back = f->round(x);
        bool widen_ok, round_ok;
        if (f->is_nan(bits)) {
          // NaN stays NaN with its sign, both ways.
          widen_ok = std::isnan(x) && std::signbit(x) == ((bits & 0x8000u) != 0);
          round_ok = f->is_nan(back) && (back & 0x8000u) == (bits & 0x8000u);
        } else {
          const double v = f->value(bits);
          // Signed zeros are told apart by the sign bit.
          widen_ok = static_cast<double>(x) == v && std::signbit(x) == ((bits & 0x8000u) != 0);
          round_ok = back == bits;
        }
        if (!widen_ok && widen_failures++ == 0) first_widen = p;
        if (!round_ok && round_failures++ == 0) first_round = p;
      }
      CAPTURE(first_widen);
      CAPTURE(first_round);
      CHECK(widen_failures == 0);
      CHECK(round_failures == 0);
    }
    // Spot values the formula itself must agree with.
    CHECK(bfloat16_to_float(0x3f80) == 1.0f);
    CHECK(bfloat16_to_float(0xc040) == -3.0f);
    CHECK(bfloat16_to_float(0x0001) == std::ldexp(1.0f, -133));  // smallest subnormal
    CHECK(float16_to_float(0x3c00) == 1.0f);
    CHECK(float16_to_float(0x7bff) == 65504.0f);
    CHECK(float16_to_float(0x0001) == std::ldexp(1.0f, -24));
    CHECK(float16_to_float(0x03ff) == 1023 * std::ldexp(1.0f, -24));
    CHECK(std::isinf(float16_to_float(0xfc00)));
  }

  TEST_CASE("dtype: rounding to bfloat16 and float16 matches a float64 search for random floats") {
    std::mt19937_64 rng(30);
    std::uniform_int_distribution<std::uint32_t> any_bits;
    std::uniform_real_distribution<double> log_mag(-160.0, 130.0);
    for (const Format* f : {&kBf16, &kF16}) {
      const std::string format = f->name;
      CAPTURE(format);
      std::size_t failures = 0;
      float first = 0;
      for (int s = 0; s < 400000; ++s) {
        float x;
        if (s % 2 == 0) {
          x = float_of(any_bits(rng));
          if (std::isnan(x)) continue;
        } else {  // magnitudes across the 16-bit formats' ranges, both signs
          const double range = f == &kF16 ? 0.25 : 1.0;
          x = static_cast<float>(std::exp2(log_mag(rng) * range) * (s % 4 == 1 ? 1 : -1));
        }
        if (f->round(x) != f->reference_round(x) && failures++ == 0) first = x;
      }
      CAPTURE(first);
      CHECK(failures == 0);
    }
  }

  TEST_CASE("dtype: ties round to the even pattern, one float off a tie to the nearer side, overflow to inf") {
    for (const Format* f : {&kBf16, &kF16}) {
      const std::string format = f->name;
      CAPTURE(format);
      std::size_t failures = 0;
      unsigned first = 0;
      // Every pair of neighbouring non-negative values, the largest finite
      // value and the overflow threshold included; the midpoint of two
      // neighbours needs one bit more than the format, so it is a float.
      for (unsigned p = 0; p < f->inf_bits(); ++p) {
        const double lo = f->value(static_cast<std::uint16_t>(p));
        const double hi = f->value(static_cast<std::uint16_t>(p + 1), true);
        const auto mid = static_cast<float>((lo + hi) / 2);
        REQUIRE(static_cast<double>(mid) == (lo + hi) / 2);
        const unsigned even = (p & 1u) == 0 ? p : p + 1;
        for (unsigned sign : {0u, 0x8000u}) {
          const float s = sign ? -1.0f : 1.0f;
          const float below = std::nextafter(mid, 0.0f), above = std::nextafter(mid, 2 * mid + 1.0f);
          const bool ok = f->round(s * mid) == (sign | even) && f->round(s * below) == (sign | p) &&
                          f->round(s * above) == (sign | (p + 1)) && f->reference_round(s * mid) == (sign | even) &&
                          f->reference_round(s * below) == (sign | p);
          if (!ok && failures++ == 0) first = p;
        }
      }
      CAPTURE(first);
      CHECK(failures == 0);
    }
    // Named cases: overflow, subnormals, infinities, NaN.
    const float inf = std::numeric_limits<float>::infinity();
    CHECK(float_to_bfloat16(std::numeric_limits<float>::max()) == 0x7f80);
    CHECK(float_to_bfloat16(float_of(0x7f7f7fffu)) == 0x7f7f);  // just below the tie with 2^128
    CHECK(float_to_bfloat16(float_of(0x7f7f8000u)) == 0x7f80);  // the tie: 0x7f7f is odd, inf is even
    CHECK(float_to_bfloat16(-inf) == 0xff80);
    CHECK(float_to_bfloat16(std::numeric_limits<float>::denorm_min()) == 0x0000);
    CHECK(float_to_bfloat16(-0.0f) == 0x8000);
    CHECK(float_to_float16(65504.0f) == 0x7bff);
    CHECK(float_to_float16(65519.996f) == 0x7bff);
    CHECK(float_to_float16(65520.0f) == 0x7c00);
    CHECK(float_to_float16(-1e30f) == 0xfc00);
    CHECK(float_to_float16(inf) == 0x7c00);
    CHECK(float_to_float16(std::ldexp(1.0f, -25)) == 0x0000);  // tie with 0: even
    CHECK(float_to_float16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(float_to_float16(1023.5f * std::ldexp(1.0f, -24)) == 0x0400);  // into the normals
    CHECK(float_to_float16(-std::numeric_limits<float>::denorm_min()) == 0x8000);
    // NaN: quiet, sign kept, never inf, whatever the payload.
    for (std::uint32_t payload : {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0x7fffffffu, 0x7f801000u})
      for (std::uint32_t sign : {0u, 0x80000000u}) {
        const float nan = float_of(payload | sign);
        CAPTURE(bits_of(nan));
        const std::uint16_t b = float_to_bfloat16(nan), h = float_to_float16(nan);
        CHECK(kBf16.is_nan(b));
        CHECK(kF16.is_nan(h));
        CHECK(((b & 0x8000u) != 0) == (sign != 0));
        CHECK(((h & 0x8000u) != 0) == (sign != 0));
        CHECK(std::isnan(bfloat16_to_float(b)));
        CHECK(std::isnan(float16_to_float(h)));
      }
  }
}
