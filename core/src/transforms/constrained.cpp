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
#include <type_traits>
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
    // Unmasked float rows: one SIMD pass; any doubt (a bad bound, a small
    // total, a row of only -inf) goes through the loop below for its message.
    if constexpr (std::is_same_v<T, float>) {
      if (mask.empty() && detail::transform_kernels().upper_bounds(scores.row(r), upper.row(r), scores.cols, &total) &&
          total >= 1.0 - 1e-6)
        continue;
      total = 0;
    }
    bool any = false;
    for (std::size_t j = 0; j < scores.cols; ++j) {
      if (!mask.empty() && !mask(r, j)) continue;
      const T b = upper(r, j);
      if (!(std::isfinite(b) && b >= 0))
        throw Error(at_op(op) + "upper must be finite and >= 0 (got " + detail::number_text(b) +
                    " at row " + std::to_string(r) + ", column " + std::to_string(j) + ")");
      if (scores(r, j) == -std::numeric_limits<T>::infinity()) continue;
      total += b;
      any = true;
    }
    if (any && total < 1.0 - 1e-6)
      throw Error(at_op(op) + "upper bounds of row " + std::to_string(r) + " sum to " +
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

// Shared backward: validation, then the kind's row kernel (dz, and du when
// grad_upper is given).
template <class T, class Kernel>
void constrained_backward(const char* op, ConstMatrix<T> probs, ConstMatrix<T> upper, ConstMatrix<T> grad_probs,
                          MatrixView<T> grad_scores, MatrixView<T> grad_upper, Kernel kernel) {
  detail::check_shape(op, "upper", upper, probs.rows, probs.cols);
  detail::check_shape(op, "grad_probs", grad_probs, probs.rows, probs.cols);
  detail::check_shape(op, "grad_scores", grad_scores, probs.rows, probs.cols);
  if (!grad_upper.empty()) detail::check_shape(op, "grad_upper", grad_upper, probs.rows, probs.cols);
  detail::check_nonempty(op, "probs", probs);
  detail::check_finite<T>(op, "grad_probs", grad_probs);
  const std::size_t n = probs.cols;
  detail::parallel_for(probs.rows, detail::grain_for(n), [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r)
      kernel(probs.row(r), upper.row(r), grad_probs.row(r), grad_scores.row(r),
             grad_upper.empty() ? nullptr : grad_upper.row(r), n);
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
  constrained_backward<T>("constrained_softmax_backward", probs, upper, grad_probs, grad_scores, grad_upper,
                          detail::kernels_for<T>().constrained_softmax_backward);
}

template <class T>
void constrained_sparsemax_backward(ConstMatrix<T> probs, ConstMatrix<T> upper, ConstMatrix<T> grad_probs,
                                    MatrixView<T> grad_scores, MatrixView<T> grad_upper) {
  constrained_backward<T>("constrained_sparsemax_backward", probs, upper, grad_probs, grad_scores, grad_upper,
                          detail::kernels_for<T>().constrained_sparsemax_backward);
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
