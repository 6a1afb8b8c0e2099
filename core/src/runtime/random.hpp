// entgraph internal: the library's one random-number module.
//
// Every random draw of the library comes from std::mt19937_64 (whose output
// the C++ standard fixes) through the helpers below, never through the std
// distributions (whose algorithms each standard library chooses), so results
// are the same on every platform and in the WebAssembly build, up to the last
// bit of libm's log / cos / sin for the normal draws.
//
// Two families of draws are in use, and each caller keeps its own so that
// results stay bit-identical to the files and tables made before the two were
// brought together here; they are equally uniform and differ only in which
// raw 64-bit values they reject or how they map them:
//
//   projections, k-means      mix_seed, uniform_below, uniform_open01, standard_normal
//   fixed patterns, reformer, keyed_seed, uniform_below_reject_low, uniform01,
//   routing                   NormalPairs
#pragma once

#include <cstdint>
#include <random>

namespace entgraph::detail {

// SplitMix64's output function (Steele, Lea and Flood 2014, the constants of
// Vigna's splitmix64.c): a bijection of 64-bit words that spreads every input
// bit, used to derive engine seeds.
std::uint64_t splitmix64(std::uint64_t x);

// ---------------------------------------------------------------- seeds

// An engine seed for stream (a, b) of `seed`: projections use (layer, head),
// k-means (0x6b6d, 0), Sparsefinder's k-means per head (layer, head).
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b);

// An engine seed for one stream of a predictor, keyed by a tag naming the
// method and (seed, a, b, c), e.g. (seed, layer, head, row).
std::uint64_t keyed_seed(std::uint64_t tag, std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c);

// ---------------------------------------------------------------- integers

// Uniform in [0, n) without modulo bias: draws x until x is below the largest
// multiple of n that fits in 2^64 - 1, then x mod n. n <= 1: 0, with no draw.
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n);

// Uniform in [0, n), n >= 1, without modulo bias: draws x until x >= 2^64 mod
// n (rejecting the lowest values instead), then x mod n. Always draws once at
// least; when n divides 2^64 it rejects nothing.
std::uint64_t uniform_below_reject_low(std::mt19937_64& rng, std::uint64_t n);

// ---------------------------------------------------------------- reals

// Uniform in (0, 1): the top 53 bits of one draw, plus one half, times 2^-53.
double uniform_open01(std::mt19937_64& rng);

// Uniform in [0, 1): the top 53 bits of one draw times 2^-53.
double uniform01(std::mt19937_64& rng);

// A standard normal by Box-Muller from two uniform_open01 draws (the cosine
// output only).
double standard_normal(std::mt19937_64& rng);

// Standard normals by Box-Muller using both outputs of each pair: u1 in
// (0, 1] (the top 53 bits plus one, times 2^-53) and u2 = uniform01, giving
// r cos(2 pi u2) and then r sin(2 pi u2), r = sqrt(-2 ln u1).
class NormalPairs {
 public:
  explicit NormalPairs(std::mt19937_64 rng) : rng_(rng) {}
  double next();

 private:
  std::mt19937_64 rng_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace entgraph::detail
