// Top-k softmax op: validation and dispatch (kernels in kernels/).
#include <string>

#include "entgraph/transforms.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {

template <class T>
void topk_softmax(ConstMatrix<T> scores, MatrixView<T> probs, std::size_t k, MaskView mask) {
  detail::check_topk_k("topk_softmax", k);
  detail::RowParams params;
  params.k = k;
  detail::forward_rows<T>("topk_softmax", scores, probs, mask, detail::kernels_for<T>().topk_softmax,
                          [&](std::size_t) { return params; });
}

// The kept set is constant under the backward, so it is softmax's.
template <class T>
void topk_softmax_backward(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores) {
  detail::backward_rows<T>("topk_softmax_backward", probs, grad_probs, grad_scores,
                           detail::kernels_for<T>().softmax_backward, {});
}

template void topk_softmax<float>(ConstMatrix<float>, MatrixView<float>, std::size_t, MaskView);
template void topk_softmax<double>(ConstMatrix<double>, MatrixView<double>, std::size_t, MaskView);
template void topk_softmax_backward<float>(ConstMatrix<float>, ConstMatrix<float>, MatrixView<float>);
template void topk_softmax_backward<double>(ConstMatrix<double>, ConstMatrix<double>, MatrixView<double>);

}  // namespace entgraph
