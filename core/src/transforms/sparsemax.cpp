// Sparsemax op: validation and dispatch (kernels in kernels/).
#include "entgraph/transforms.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {

template <class T>
void sparsemax(ConstMatrix<T> scores, MatrixView<T> probs, MaskView mask) {
  detail::forward_rows<T>("sparsemax", scores, probs, mask, detail::kernels_for<T>().sparsemax,
                          [](std::size_t) { return detail::RowParams{}; });
}

template <class T>
void sparsemax_backward(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores) {
  detail::backward_rows<T>("sparsemax_backward", probs, grad_probs, grad_scores,
                           detail::kernels_for<T>().sparsemax_backward, {});
}

template void sparsemax<float>(ConstMatrix<float>, MatrixView<float>, MaskView);
template void sparsemax<double>(ConstMatrix<double>, MatrixView<double>, MaskView);
template void sparsemax_backward<float>(ConstMatrix<float>, ConstMatrix<float>, MatrixView<float>);
template void sparsemax_backward<double>(ConstMatrix<double>, ConstMatrix<double>, MatrixView<double>);

}  // namespace entgraph
