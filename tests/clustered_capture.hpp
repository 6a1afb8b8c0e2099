// Shared by the training and predictor tests: a synthetic capture whose
// gold graph is learnable.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "entgraph/io/capture.hpp"

namespace entgraph::test {

// Tokens belong to clusters; the queries and keys of a cluster point the same
// way, so entmax attends within clusters and the gold graph is learnable.

inline Capture clustered_capture(std::size_t layers, std::size_t heads, std::size_t dim,
                                 std::vector<std::size_t> lengths, std::size_t clusters, bool causal,
                                 std::uint64_t seed = 11) {
  Capture c = Capture::make(layers, heads, dim, lengths);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::size_t tokens = c.tokens();
  for (std::size_t l = 0; l < layers; ++l)
    for (std::size_t h = 0; h < heads; ++h) {
      // Cluster directions of norm 4 (different per head).
      std::vector<double> mu(clusters * dim);
      for (std::size_t j = 0; j < clusters; ++j) {
        double norm = 0;
        for (std::size_t t = 0; t < dim; ++t) {
          mu[j * dim + t] = normal(rng);
          norm += mu[j * dim + t] * mu[j * dim + t];
        }
        for (std::size_t t = 0; t < dim; ++t) mu[j * dim + t] *= 4.0 / std::sqrt(norm);
      }
      const std::size_t base = (l * heads + h) * tokens * dim;
      for (std::size_t t = 0; t < tokens; ++t) {
        const std::size_t j = static_cast<std::size_t>(rng() % clusters);
        for (std::size_t x = 0; x < dim; ++x) {
          c.queries[base + t * dim + x] = static_cast<float>(mu[j * dim + x] + 0.3 * normal(rng));
          c.keys[base + t * dim + x] = static_cast<float>(mu[j * dim + x] + 0.3 * normal(rng));
        }
      }
      c.head(l, h).causal = causal;
    }
  return c;
}

}  // namespace entgraph::test
