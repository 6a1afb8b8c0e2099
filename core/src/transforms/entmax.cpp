// alpha-entmax ops (exact 1.5 and general alpha): validation, dispatch, and
// the gradient with respect to alpha.
#include <cmath>
#include <string>
#include <type_traits>

#include "entgraph/transforms.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {
template <class T>
void entmax15(ConstMatrix<T> scores, MatrixView<T> probs, MaskView mask) {
  if constexpr (std::is_same_v<T, float>) {
    if (scores.cols <= detail::kShortRow)  // several rows per SIMD pass
      return detail::forward_row_batches("entmax15", scores, probs, mask, detail::kernels_for<T>().entmax15_short,
                                         [](std::size_t) { return detail::RowParams{}; });
  }
  detail::forward_rows<T>("entmax15", scores, probs, mask, detail::kernels_for<T>().entmax15,
                          [](std::size_t) { return detail::RowParams{}; });
}

template <class T>
void entmax15_backward(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores) {
  detail::backward_rows<T>("entmax15_backward", probs, grad_probs, grad_scores,
                           detail::kernels_for<T>().entmax15_backward, {});
}

template <class T>
void entmax(ConstMatrix<T> scores, MatrixView<T> probs, double alpha, MaskView mask) {
  detail::check_alpha("entmax", alpha);
  detail::RowParams params;
  params.alpha = alpha;
  const auto& kernels = detail::kernels_for<T>();
  if constexpr (std::is_same_v<T, float>) {
    if (alpha != 1.0 && scores.cols <= detail::kShortRow)  // several rows per SIMD pass
      return detail::forward_row_batches("entmax", scores, probs, mask, kernels.entmax_short,
                                         [&](std::size_t) { return params; });
  }
  detail::forward_rows<T>("entmax", scores, probs, mask, alpha == 1.0 ? kernels.softmax : kernels.entmax,
                          [&](std::size_t) { return params; });
}

template <class T>
void entmax_backward(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores, double alpha,
                     T* grad_alpha) {
  detail::check_alpha("entmax_backward", alpha);
  detail::RowParams params;
  params.alpha = alpha;
  const auto& kernels = detail::kernels_for<T>();
  if (grad_alpha == nullptr || alpha == 1.0) {
    detail::backward_rows<T>("entmax_backward", probs, grad_probs, grad_scores,
                             alpha == 1.0 ? kernels.softmax_backward : kernels.entmax_backward, params);
    if (grad_alpha != nullptr)
      for (std::size_t r = 0; r < probs.rows; ++r) grad_alpha[r] = T(0);
    return;
  }
  // One kernel per row computes both: grad_alpha from the first pass's sums,
  // before dz (which may alias probs or grad_probs) is written.
  detail::check_backward_args<T>("entmax_backward", probs, grad_probs, grad_scores);
  const std::size_t n = probs.cols;
  detail::parallel_for(probs.rows, detail::grain_for(n), [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      double ga = 0.0;
      kernels.entmax_backward_alpha(probs.row(r), grad_probs.row(r), grad_scores.row(r), n, params, &ga);
      grad_alpha[r] = static_cast<T>(ga);
    }
  });
}

double entmax_alpha_from_param(double a) {
  // softplus(a) = log1p(exp(a)), written to neither overflow nor lose small values.
  const double softplus = a > 0 ? a + std::log1p(std::exp(-a)) : std::log1p(std::exp(a));
  return 1.0 + softplus;
}

double entmax_alpha_param_grad(double a) {
  return a >= 0 ? 1.0 / (1.0 + std::exp(-a)) : std::exp(a) / (1.0 + std::exp(a));
}

#define ENTGRAPH_INSTANTIATE(T)                                                                           \
  template void entmax15<T>(ConstMatrix<T>, MatrixView<T>, MaskView);                                     \
  template void entmax15_backward<T>(ConstMatrix<T>, ConstMatrix<T>, MatrixView<T>);                      \
  template void entmax<T>(ConstMatrix<T>, MatrixView<T>, double, MaskView);                               \
  template void entmax_backward<T>(ConstMatrix<T>, ConstMatrix<T>, MatrixView<T>, double, T*);
ENTGRAPH_INSTANTIATE(float)
ENTGRAPH_INSTANTIATE(double)
#undef ENTGRAPH_INSTANTIATE

}  // namespace entgraph
