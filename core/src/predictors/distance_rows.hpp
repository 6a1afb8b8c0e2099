// The graph of sparsefinder-distance (sparsefinder.cpp) on projected points:
//   edge (i, j) iff a_0 − t <= b_0 <= a_0 + t and Σ_c (a_c − b_c)² <= t²,
// a = qp row i, b = kp row j, every operation in double, the sum in c order
// and never fused (the definition the CUDA kernel follows too,
// native/cuda/src/distance.cu). The first condition is Sparsefinder's
// sorted-coordinate window; rounding makes it a condition of its own.
//
// Without the double sum for every pair: a float pass over all visible keys
// (vectorised, any order or fusion) settles every pair whose float sum is
// farther from t² than its error bound; only the pairs near t² are summed
// again in double. The graph is the definition's on every instruction set.
#pragma once

#include <cstddef>

#include "entgraph/graph.hpp"

namespace entgraph::detail {

// qp: n x r, kp: m x r (rows contiguous), r >= 1; t finite and >= 0. Causal: row i
// sees keys [0, causal_key_limit(i, n, m)).
Graph distance_rows(const float* qp, std::size_t n, const float* kp, std::size_t m, std::size_t r, double t,
                    bool causal);

}  // namespace entgraph::detail
