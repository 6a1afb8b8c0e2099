// Constrained softmax (Martins & Kreutzer 2017) and constrained sparsemax
// (Malaviya et al. 2018): p <= u elementwise on the simplex.
//
// The rows are solved by the kernel tables (SIMD for float, sort-free; the
// exact double solvers in kernels/reference as the reference and fallback);
// this file validates the bounds and computes the backward.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/transforms.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {
namespace {

// Bounds must be finite and >= 0 where unmasked, and sum to >= 1 over the
// entries that can take mass (unmasked, score > -inf), unless there are none.
template <class T>
void check_upper(const char* op, ConstMatrix<T> scores, ConstMatrix<T> upper, MaskView mask) {
  detail::check_shape(op, "upper", upper, scores.rows, scores.cols);
  for (std::size_t r = 0; r < scores.rows; ++r) {
    double total = 0;
    bool any = false;
    for (std::size_t j = 0; j < scores.cols; ++j) {
      if (!mask.empty() && !mask(r, j)) continue;
      const T b = upper(r, j);
      if (!(std::isfinite(b) && b >= 0))
        throw Error(std::string(op) + ": upper must be finite and >= 0 (got " + detail::number_text(b) +
                    " at row " + std::to_string(r) + ", column " + std::to_string(j) + ")");
      if (scores(r, j) == -std::numeric_limits<T>::infinity()) continue;
      total += b;
      any = true;
    }
    if (any && total < 1.0 - 1e-6)
      throw Error(std::string(op) + ": upper bounds of row " + std::to_string(r) + " sum to " +
                  detail::number_text(total) + " (expected >= 1: no distribution satisfies them)");
  }
}

template <class T, class Row>
void constrained_forward(const char* op, ConstMatrix<T> scores, ConstMatrix<T> upper, MatrixView<T> probs,
                         MaskView mask, Row row_fn) {
  if (!mask.empty()) detail::check_shape(op, "mask", mask, scores.rows, scores.cols);
  check_upper<T>(op, scores, upper, mask);
  // The row kernel needs its row's bounds: the row index travels in query_pos.
  detail::forward_rows<T>(op, scores, probs, mask,
                          [&](const T* z, T* p, std::size_t n, const detail::RowParams& params, T* scratch) {
                            row_fn(z, upper.row(static_cast<std::size_t>(params.query_pos)), p, n, scratch);
                          },
                          [](std::size_t r) {
                            detail::RowParams params;
                            params.query_pos = static_cast<std::ptrdiff_t>(r);
                            return params;
                          });
}

// Shared backward: free entries pass gradient to z through `weight`, saturated
// ones to u. q is the mean of dp over free entries weighted by `weight`.
template <class T, class Free, class Weight>
void constrained_backward(const char* op, ConstMatrix<T> probs, ConstMatrix<T> upper, ConstMatrix<T> grad_probs,
                          MatrixView<T> grad_scores, MatrixView<T> grad_upper, Free is_free, Weight weight) {
  detail::check_shape(op, "upper", upper, probs.rows, probs.cols);
  detail::check_shape(op, "grad_probs", grad_probs, probs.rows, probs.cols);
  detail::check_shape(op, "grad_scores", grad_scores, probs.rows, probs.cols);
  if (!grad_upper.empty()) detail::check_shape(op, "grad_upper", grad_upper, probs.rows, probs.cols);
  detail::check_nonempty(op, "probs", probs);
  detail::check_finite<T>(op, "grad_probs", grad_probs);
  const std::size_t n = probs.cols;
  detail::parallel_for(probs.rows, detail::grain_for(n), [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      const T *p = probs.row(r), *u = upper.row(r), *g = grad_probs.row(r);
      // Gradients scaled by 2^-k, the power of two of the largest |g|, so
      // that neither the sum nor g - q overflows whatever their size (exact:
      // a power of two); only the final product can, where the exact one does.
      // The scalings are products with exact powers of two (as ldexp, without
      // its call per entry).
      double big = 0;
      for (std::size_t j = 0; j < n; ++j) big = std::max(big, std::abs(static_cast<double>(g[j])));
      const int k = big > 0 ? std::ilogb(big) : 0;
      const double down = std::ldexp(1.0, -k), up = std::ldexp(1.0, k);
      double wsum = 0, wg = 0;
      for (std::size_t j = 0; j < n; ++j) {
        const bool free = is_free(p[j], u[j]);
        const double w = free ? weight(p[j]) : 0.0;
        wsum += w;
        wg += w * (static_cast<double>(g[j]) * down);
      }
      const double q = wsum > 0 ? wg / wsum : 0.0;  // scaled by 2^-k
      // Branch-free selects (the classes of random rows defeat prediction).
      // Read everything first: the outputs may alias probs or grad_probs.
      T* dz = grad_scores.row(r);
      T* du = grad_upper.empty() ? nullptr : grad_upper.row(r);
      for (std::size_t j = 0; j < n; ++j) {
        const T pj = p[j];
        const double d = static_cast<double>(g[j]) * down - q;
        const bool free = is_free(pj, u[j]);
        const double w = free ? weight(pj) : 0.0;  // p = 0: w = 0, so dz is exactly 0
        const double sat = !free & (pj > 0) ? 1.0 : 0.0;
        dz[j] = detail::narrow<T>((w * d) * up);
        if (du != nullptr) du[j] = detail::narrow<T>((sat * d) * up);
      }
    }
  });
}

}  // namespace

template <class T>
void constrained_softmax(ConstMatrix<T> scores, ConstMatrix<T> upper, MatrixView<T> probs, MaskView mask) {
  constrained_forward<T>("constrained_softmax", scores, upper, probs, mask, detail::kernels_for<T>().constrained_softmax);
}

template <class T>
void constrained_sparsemax(ConstMatrix<T> scores, ConstMatrix<T> upper, MatrixView<T> probs, MaskView mask) {
  constrained_forward<T>("constrained_sparsemax", scores, upper, probs, mask,
                         detail::kernels_for<T>().constrained_sparsemax);
}

template <class T>
void constrained_softmax_backward(ConstMatrix<T> probs, ConstMatrix<T> upper, ConstMatrix<T> grad_probs,
                                  MatrixView<T> grad_scores, MatrixView<T> grad_upper) {
  constrained_backward<T>(
      "constrained_softmax_backward", probs, upper, grad_probs, grad_scores, grad_upper,
      [](T p, T u) { return (p < u) | (p == 0); },  // | and &, not || and &&: no branches to mispredict
      [](T p) { return static_cast<double>(p); });
}

template <class T>
void constrained_sparsemax_backward(ConstMatrix<T> probs, ConstMatrix<T> upper, ConstMatrix<T> grad_probs,
                                    MatrixView<T> grad_scores, MatrixView<T> grad_upper) {
  constrained_backward<T>(
      "constrained_sparsemax_backward", probs, upper, grad_probs, grad_scores, grad_upper,
      [](T p, T u) { return (p > 0) & (p < u); }, [](T) { return 1.0; });
}

#define ENTGRAPH_INSTANTIATE(T)                                                                                  \
  template void constrained_softmax<T>(ConstMatrix<T>, ConstMatrix<T>, MatrixView<T>, MaskView);                 \
  template void constrained_sparsemax<T>(ConstMatrix<T>, ConstMatrix<T>, MatrixView<T>, MaskView);               \
  template void constrained_softmax_backward<T>(ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, MatrixView<T>,   \
                                                MatrixView<T>);                                                  \
  template void constrained_sparsemax_backward<T>(ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, MatrixView<T>, \
                                                  MatrixView<T>);
ENTGRAPH_INSTANTIATE(float)
ENTGRAPH_INSTANTIATE(double)
#undef ENTGRAPH_INSTANTIATE

}  // namespace entgraph
