// entgraph internal: the library's random-number module (see runtime/random.hpp).
#include "runtime/random.hpp"

#include <cmath>
#include <initializer_list>

namespace entgraph::detail {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ (b * 0xD6E8FEB86659FD93ULL));
}

std::uint64_t keyed_seed(std::uint64_t tag, std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  std::uint64_t h = splitmix64(tag);
  for (std::uint64_t v : {seed, a, b, c}) h = splitmix64(h ^ v);
  return h;
}

std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  if (n <= 1) return 0;
  const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
  for (;;) {
    const std::uint64_t x = rng();
    if (x < limit) return x % n;
  }
}

std::uint64_t uniform_below_reject_low(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    const std::uint64_t x = rng();
    if (x >= threshold) return x % n;
  }
}

double uniform_open01(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

double standard_normal(std::mt19937_64& rng) {
  const double u1 = uniform_open01(rng), u2 = uniform_open01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

double NormalPairs::next() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = static_cast<double>((rng_() >> 11) + 1) * 0x1.0p-53;
  const double u2 = uniform01(rng_);
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double t = 6.283185307179586476925286766559 * u2;
  spare_ = r * std::sin(t);
  has_spare_ = true;
  return r * std::cos(t);
}

}  // namespace entgraph::detail
