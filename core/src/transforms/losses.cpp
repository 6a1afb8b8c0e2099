// Fenchel-Young losses of the entmax family (Blondel, Martins & Niculae 2019).
#include "entgraph/losses.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {
namespace {

// Omega(p) = (sum p^alpha - 1) / (alpha (alpha - 1)); alpha = 1: sum p log p.
template <class T>
double tsallis_regulariser(const T* p, std::size_t n, double alpha) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i] <= 0) continue;
    s += alpha == 1.0 ? p[i] * std::log(static_cast<double>(p[i])) : std::pow(static_cast<double>(p[i]), alpha);
  }
  return alpha == 1.0 ? s : (s - 1.0) / (alpha * (alpha - 1.0));
}

template <class T>
void check_target(const char* op, ConstMatrix<T> target, MaskView mask) {
  for (std::size_t r = 0; r < target.rows; ++r) {
    double total = 0;
    for (std::size_t j = 0; j < target.cols; ++j) {
      const T q = target(r, j);
      const bool masked = !mask.empty() && !mask(r, j);
      if (!(std::isfinite(q) && q >= 0) || (masked && q != 0))
        throw Error(at_op(op) + "target is not a distribution at row " + std::to_string(r) + ", column " +
                    std::to_string(j) + " (got " + detail::number_text(q) +
                    (masked ? ", expected 0 on a masked entry)" : ", expected a finite value >= 0)"));
      total += q;
    }
    if (std::abs(total - 1.0) > 1e-4)
      throw Error(at_op(op) + "target row " + std::to_string(r) + " sums to " + detail::number_text(total) +
                  " (expected 1)");
  }
}

}  // namespace

template <class T>
void fenchel_young_loss(const Transform& t, ConstMatrix<T> scores, ConstMatrix<T> target, T* loss,
                        MatrixView<T> grad, MaskView mask) {
  const char* op = "fenchel_young_loss";
  if (!is_entmax_family(t.info()))
    throw Error(at_op(op) + "transform " + t.name() + " has no Fenchel-Young loss here (expected " +
                transform_names(is_entmax_family, " or ") + ")");
  const double alpha = t.tsallis_alpha();
  detail::check_shape(op, "target", target, scores.rows, scores.cols);
  if (!grad.empty()) detail::check_shape(op, "grad", grad, scores.rows, scores.cols);
  if (!mask.empty()) detail::check_shape(op, "mask", mask, scores.rows, scores.cols);
  if (loss == nullptr && scores.rows > 0) throw Error(at_op(op) + "loss is null (expected one value per row)");
  check_target<T>(op, target, mask);
  std::vector<T> probs(scores.rows * scores.cols);
  const MatrixView<T> p(probs.data(), scores.rows, scores.cols);
  transform_forward<T>(t, scores, p, mask);  // validates the scores

  const std::size_t n = scores.cols;
  detail::parallel_for(scores.rows, detail::grain_for(n), [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      const T *z = scores.row(r), *q = target.row(r), *pr = p.row(r);
      // <z, p - q> is the same for z - c whatever c (p and q both sum to 1),
      // but only in exact arithmetic: p is rounded to T, so on scores around
      // 1e4 the unshifted sum loses digits (float32: 1.18096 for 1.1806294).
      // Shifted by the row's largest unmasked score, the terms stay small.
      double shift = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < n; ++j)
        if ((mask.empty() || mask(r, j)) && std::isfinite(z[j])) shift = std::max(shift, static_cast<double>(z[j]));
      if (!std::isfinite(shift)) shift = 0;  // a fully masked row: no term below
      double inner = 0;  // <z - shift, p - q> over the entries that carry mass
      bool infinite = false;
      for (std::size_t j = 0; j < n; ++j) {
        if (pr[j] == q[j]) continue;  // includes masked entries (both 0)
        if (z[j] == -std::numeric_limits<T>::infinity()) infinite = true;  // q > 0 where p must be 0
        else inner += (static_cast<double>(z[j]) - shift) * (static_cast<double>(pr[j]) - q[j]);
      }
      const double value = inner + tsallis_regulariser(q, n, alpha) - tsallis_regulariser(pr, n, alpha);
      // Rounding can leave a tiny negative value where the loss is 0.
      loss[r] = infinite ? std::numeric_limits<T>::infinity() : static_cast<T>(value > 0 ? value : 0.0);
      if (!grad.empty())
        for (std::size_t j = 0; j < n; ++j) grad(r, j) = static_cast<T>(static_cast<double>(pr[j]) - q[j]);
    }
  });
}

template <class T>
void fenchel_young_loss(const Transform& t, ConstMatrix<T> scores, const std::int64_t* labels, T* loss,
                        MatrixView<T> grad, MaskView mask) {
  const char* op = "fenchel_young_loss";
  if (labels == nullptr && scores.rows > 0) throw Error(at_op(op) + "labels is null");
  std::vector<T> onehot(scores.rows * scores.cols, T(0));
  for (std::size_t r = 0; r < scores.rows; ++r) {
    const std::int64_t y = labels[r];
    if (y < 0 || static_cast<std::uint64_t>(y) >= scores.cols)
      throw Error(at_op(op) + "label out of range at row " + std::to_string(r) + " (got " +
                  std::to_string(y) + ", expected 0 <= label < " + std::to_string(scores.cols) + ")");
    if (!mask.empty() && mask.rows == scores.rows && mask.cols == scores.cols && !mask(r, static_cast<std::size_t>(y)))
      throw Error(at_op(op) + "label " + std::to_string(y) + " of row " + std::to_string(r) + " is masked");
    onehot[r * scores.cols + static_cast<std::size_t>(y)] = T(1);
  }
  fenchel_young_loss<T>(t, scores, ConstMatrix<T>(onehot.data(), scores.rows, scores.cols), loss, grad, mask);
}

#define ENTGRAPH_INSTANTIATE(T)                                                                                \
  template void fenchel_young_loss<T>(const Transform&, ConstMatrix<T>, ConstMatrix<T>, T*, MatrixView<T>,     \
                                      MaskView);                                                               \
  template void fenchel_young_loss<T>(const Transform&, ConstMatrix<T>, const std::int64_t*, T*, MatrixView<T>, \
                                      MaskView);
ENTGRAPH_INSTANTIATE(float)
ENTGRAPH_INSTANTIATE(double)
#undef ENTGRAPH_INSTANTIATE

}  // namespace entgraph
