// The split of P V's weights into two 16-bit parts (native/cuda/src/
// weight_split.hpp) on the host, no GPU needed: with a reference rounding
// that searches every 16-bit value (independent of any bit trick), hi + lo
// is within 2^-16 of p for bfloat16, and within 2^-22 (or 2^-25 absolute,
// after the 2^15 scale) for float16, over weights from 1 down to 1e-30;
// and a weighted mean computed with the split weights stays within 2^-16 of
// the exact one.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "weight_split.hpp"

namespace entgraph::cuda::detail {
namespace {

// Every finite non-negative value of a 16-bit format, ascending, with its bits.
struct Format {
  std::vector<double> value;
  std::vector<std::uint16_t> bits;
};

Format bfloat16_values() {
  Format f;
  for (std::uint32_t b = 0; b < 0x7f80; ++b) {  // 0x7f80 is +inf
    const std::uint32_t wide = b << 16;
    float x;
    std::memcpy(&x, &wide, sizeof x);
    f.value.push_back(x);
    f.bits.push_back(static_cast<std::uint16_t>(b));
  }
  return f;
}

Format float16_values() {
  Format f;
  for (std::uint32_t b = 0; b < 0x7c00; ++b) {  // 0x7c00 is +inf
    const int exponent = static_cast<int>(b >> 10), mantissa = static_cast<int>(b & 0x3ff);
    f.value.push_back(exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25));
    f.bits.push_back(static_cast<std::uint16_t>(b));
  }
  return f;
}

// Round to nearest, ties to the even bit pattern, by search: the reference
// the kernel's CUDA conversions (__float2bfloat16_rn, __float2half_rn) are
// documented to match.
std::uint16_t nearest(const Format& f, double x) {
  const double a = std::abs(x);
  const auto it = std::upper_bound(f.value.begin(), f.value.end(), a);
  std::size_t i = static_cast<std::size_t>(it - f.value.begin());
  REQUIRE(i < f.value.size());  // the weights here never reach the largest finite value
  const std::size_t below = i - 1;
  const double down = a - f.value[below], up = f.value[i] - a;
  if (down < up || (down == up && f.bits[below] % 2 == 0)) i = below;
  const std::uint16_t sign = x < 0 ? 0x8000 : 0;
  return static_cast<std::uint16_t>(f.bits[i] | sign);
}

double widen(const Format& f, std::uint16_t bits) {
  const double v = f.value[bits & 0x7fff];
  return (bits & 0x8000) != 0 ? -v : v;
}

const Format& bf16() {
  static const Format f = bfloat16_values();
  return f;
}
const Format& f16() {
  static const Format f = float16_values();
  return f;
}

struct RoundBfloat16 {
  static std::uint16_t to_bits(float x) { return nearest(bf16(), x); }
  static float to_float(std::uint16_t b) { return static_cast<float>(widen(bf16(), b)); }
};
struct RoundFloat16 {
  static std::uint16_t to_bits(float x) { return nearest(f16(), x); }
  static float to_float(std::uint16_t b) { return static_cast<float>(widen(f16(), b)); }
};

// Weights as the kernel sees them: 1, powers of two, values next to
// rounding ties of both formats, and random ones spread over 30 decades.
std::vector<float> weights() {
  std::vector<float> w = {1.0f, 0.5f, 0.75f, 1.0f - 0x1p-24f, 0x1p-10f, 0x1p-24f, 0x1p-30f, 1e-30f};
  for (int e = 0; e > -100; --e) {
    const float base = std::ldexp(1.0f, e);
    for (float t : {1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-23f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.5f + 0x1p-9f})
      w.push_back(base * t);
  }
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> decades(-30.0, 0.0);
  for (int i = 0; i < 20000; ++i) w.push_back(static_cast<float>(std::pow(10.0, decades(rng))));
  return w;
}

}  // namespace

TEST_SUITE("cuda_host") {
  TEST_CASE("weight split, bfloat16: hi + lo within 2^-16 of p") {
    for (float p : weights()) {
      const WeightParts s = split_weight<RoundBfloat16>(p * kWeightScaleBfloat16);
      const double hi = widen(bf16(), s.hi), lo = widen(bf16(), s.lo);
      CAPTURE(p);
      CHECK(std::abs(hi - p) <= std::ldexp(static_cast<double>(p), -8));  // one rounding: 2^-8
      CHECK(std::abs(hi + lo - p) <= std::ldexp(static_cast<double>(p), -16));
    }
  }

  TEST_CASE("weight split, float16 with the 2^15 scale: within 2^-22, or 2^-25 absolute") {
    for (float p : weights()) {
      const double scaled = static_cast<double>(p) * kWeightScaleFloat16;
      const WeightParts s = split_weight<RoundFloat16>(p * kWeightScaleFloat16);
      const double sum = widen(f16(), s.hi) + widen(f16(), s.lo);
      CAPTURE(p);
      CHECK(std::abs(sum - scaled) <= std::max(std::ldexp(scaled, -22), 0x1p-25));
    }
    // The scale keeps the largest weight finite and a weight of 2^-29 normal.
    CHECK(kWeightScaleFloat16 * 1.0f <= 65504.0f);
    CHECK(kWeightScaleFloat16 * 0x1p-29f >= 0x1p-14f);
  }

  TEST_CASE("weight split: a weighted mean of values with the split weights stays within 2^-16 of the exact one") {
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int trial = 0; trial < 50; ++trial) {
      const int keys = 1 + static_cast<int>(unit(rng) * 3000);
      double exact = 0.0, split = 0.0, sum = 0.0, largest = 0.0;
      for (int j = 0; j < keys; ++j) {
        const float p = static_cast<float>(std::pow(unit(rng), 4.0));  // many small weights
        const double v = widen(bf16(), nearest(bf16(), normal(rng)));  // V's entries are bfloat16
        const WeightParts s = split_weight<RoundBfloat16>(p);
        exact += static_cast<double>(p) * v;
        split += (widen(bf16(), s.hi) + widen(bf16(), s.lo)) * v;
        sum += p;
        largest = std::max(largest, std::abs(v));
      }
      if (sum == 0.0) continue;
      CHECK(std::abs(split - exact) / sum <= std::ldexp(largest, -16));
    }
  }
}

}  // namespace entgraph::cuda::detail
