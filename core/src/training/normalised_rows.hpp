// entgraph internal: rows scaled to unit length, in double, the one way that
// spherical k-means (training/kmeans.cpp), routing and Reformer's hashing
// (predictors/) see a query or key as a direction.
#pragma once

#include <cmath>
#include <cstddef>

#include "entgraph/matrix_view.hpp"

namespace entgraph::detail {

// Row i of v, L2-normalised, in double: out[c] = v(i, c) / |v_i|, the squares
// summed in order in double. A row whose squared norm is 0 or not finite
// (a NaN or an infinity in it) maps to the zero vector.
inline void normalised_row(MatrixView<const float> v, std::size_t i, double* out) {
  double s = 0.0;
  const float* r = v.row(i);
  for (std::size_t c = 0; c < v.cols; ++c) s += static_cast<double>(r[c]) * r[c];
  const bool ok = s > 0.0 && std::isfinite(s);
  const double inv = ok ? 1.0 / std::sqrt(s) : 0.0;
  for (std::size_t c = 0; c < v.cols; ++c) out[c] = ok ? static_cast<double>(r[c]) * inv : 0.0;
}

}  // namespace entgraph::detail
