// entgraph internal: cyclic Jacobi eigen-decomposition (training/symmetric_eigen.hpp).
#include "training/symmetric_eigen.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace entgraph::detail {

SymmetricEigen symmetric_eigen(std::vector<double> a, std::size_t d) {
  for (std::size_t x = 0; x < d; ++x)  // symmetrise from the upper triangle
    for (std::size_t y = x + 1; y < d; ++y) a[y * d + x] = a[x * d + y];
  std::vector<double> v(d * d, 0.0);
  for (std::size_t x = 0; x < d; ++x) v[x * d + x] = 1.0;
  double scale = 0.0;
  for (double e : a) scale += e * e;
  for (int sweep = 0; sweep < 64; ++sweep) {
    double off = 0.0;
    for (std::size_t p = 0; p < d; ++p)
      for (std::size_t q = p + 1; q < d; ++q) off += a[p * d + q] * a[p * d + q];
    if (!(off > 1e-30 * scale)) break;  // also stops on NaN
    for (std::size_t p = 0; p < d; ++p)
      for (std::size_t q = p + 1; q < d; ++q) {
        const double apq = a[p * d + q];
        if (apq == 0.0) continue;
        // The rotation that zeroes a_pq (Golub & Van Loan, Alg. 8.5.1).
        const double theta = (a[q * d + q] - a[p * d + p]) / (2.0 * apq);
        const double t = (theta >= 0.0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (std::size_t k = 0; k < d; ++k) {  // columns p and q
          const double akp = a[k * d + p], akq = a[k * d + q];
          a[k * d + p] = c * akp - s * akq;
          a[k * d + q] = s * akp + c * akq;
        }
        for (std::size_t k = 0; k < d; ++k) {  // rows p and q
          const double apk = a[p * d + k], aqk = a[q * d + k];
          a[p * d + k] = c * apk - s * aqk;
          a[q * d + k] = s * apk + c * aqk;
        }
        for (std::size_t k = 0; k < d; ++k) {
          const double vkp = v[k * d + p], vkq = v[k * d + q];
          v[k * d + p] = c * vkp - s * vkq;
          v[k * d + q] = s * vkp + c * vkq;
        }
      }
  }
  std::vector<std::size_t> order(d);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return a[x * d + x] > a[y * d + y]; });
  SymmetricEigen e;
  e.values.resize(d);
  e.vectors.resize(d * d);
  for (std::size_t c = 0; c < d; ++c) {
    e.values[c] = a[order[c] * d + order[c]];
    for (std::size_t x = 0; x < d; ++x) e.vectors[x * d + c] = v[x * d + order[c]];
  }
  return e;
}

}  // namespace entgraph::detail
