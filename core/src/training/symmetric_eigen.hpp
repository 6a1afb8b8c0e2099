// entgraph internal: the eigen-decomposition of a small symmetric matrix, for
// fits that need a matrix square root or an SVD (d x d, d = a head's
// dimension). Cyclic Jacobi rotations in double: accurate to the last digits,
// deterministic on every platform, and O(d^3) per sweep, which for d <= 256 is
// nothing next to reading a capture.
#pragma once

#include <cstddef>
#include <vector>

namespace entgraph::detail {

struct SymmetricEigen {
  std::vector<double> values;   // d eigenvalues, largest first
  std::vector<double> vectors;  // d x d, row-major: column c is the eigenvector of values[c]
};

// a is d x d, row-major and symmetric (only its upper triangle is read).
SymmetricEigen symmetric_eigen(std::vector<double> a, std::size_t d);

}  // namespace entgraph::detail
