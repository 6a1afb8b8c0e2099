// Softmax op: validation and dispatch (kernels in kernels/).
#include "entgraph/transforms.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {

template <class T>
void softmax(ConstMatrix<T> scores, MatrixView<T> probs, MaskView mask) {
  detail::forward_rows<T>("softmax", scores, probs, mask, detail::kernels_for<T>().softmax,
                          [](std::size_t) { return detail::RowParams{}; });
}

template <class T>
void softmax_backward(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores) {
  detail::backward_rows<T>("softmax_backward", probs, grad_probs, grad_scores,
                           detail::kernels_for<T>().softmax_backward, {});
}

template void softmax<float>(ConstMatrix<float>, MatrixView<float>, MaskView);
template void softmax<double>(ConstMatrix<double>, MatrixView<double>, MaskView);
template void softmax_backward<float>(ConstMatrix<float>, ConstMatrix<float>, MatrixView<float>);
template void softmax_backward<double>(ConstMatrix<double>, ConstMatrix<double>, MatrixView<double>);

}  // namespace entgraph
