// Adaptive and dynamic attention span (Sukhbaatar et al. 2019): validation,
// dispatch, and the gradients with respect to the span.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "entgraph/transforms.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {
namespace {

void check_ramp(const char* op, double ramp) {
  if (!(ramp > 0 && std::isfinite(ramp)))
    throw Error(at_op(op) + "ramp must be finite and > 0 (got " + detail::number_text(ramp) + ")");
}

template <class T>
void check_span(const char* op, const T* span, std::size_t rows) {
  if (span == nullptr && rows > 0) throw Error(at_op(op) + "span is null (expected one value per row)");
  for (std::size_t r = 0; r < rows; ++r)
    if (!std::isfinite(span[r]))
      throw Error(at_op(op) + "span is not finite at row " + std::to_string(r) + " (got " +
                      detail::number_text(span[r]) + ")",
                  ErrorCode::bad_value);
}

detail::RowParams row_params(double span, const AdaptiveSpan& shape, std::size_t row) {
  detail::RowParams p;
  p.span = span;
  p.ramp = shape.ramp;
  p.query_pos = static_cast<std::ptrdiff_t>(row) + shape.query_offset;
  return p;
}

double sigmoid(double a) { return a >= 0 ? 1.0 / (1.0 + std::exp(-a)) : std::exp(a) / (1.0 + std::exp(a)); }

}  // namespace

// dL/dz per row (defined below adaptive_span_backward).
template <class T>
void span_gradient(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, const T* span, const AdaptiveSpan& shape,
                   T* grad_span);

double span_from_adaptive_span_repo(double current_val, double max_span) {
  if (!std::isfinite(current_val))
    throw Error(at_op("span_from_adaptive_span_repo") + "current_val must be finite (got " + detail::number_text(current_val) +
                ")");
  if (!(std::isfinite(max_span) && max_span > 0))
    throw Error(at_op("span_from_adaptive_span_repo") + "max_span must be finite and > 0 (got " +
                detail::number_text(max_span) + ")");
  return current_val * max_span + 1.0;
}

template <class T>
T span_mask(T distance, T span, T ramp) {
  return std::clamp((ramp + span - distance) / ramp, T(0), T(1));
}

template <class T>
void adaptive_span(ConstMatrix<T> scores, const T* span, const AdaptiveSpan& shape, MatrixView<T> probs,
                   MaskView mask) {
  check_ramp("adaptive_span", shape.ramp);
  check_span("adaptive_span", span, scores.rows);
  detail::forward_rows<T>("adaptive_span", scores, probs, mask, detail::kernels_for<T>().adaptive_span,
                          [&](std::size_t r) { return row_params(static_cast<double>(span[r]), shape, r); });
}

// dL/dz_r = sum over keys strictly inside the ramp of (g_j - <g, p>) p_j / (m_j R):
// there dm_j/dz = 1/R, and p_j / m_j = exp(s_j) / W.
template <class T>
void adaptive_span_backward(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, const T* span,
                            const AdaptiveSpan& shape, MatrixView<T> grad_scores, T* grad_span) {
  check_ramp("adaptive_span_backward", shape.ramp);
  check_span("adaptive_span_backward", span, probs.rows);
  // grad_span first: grad_scores may overwrite probs or grad_probs.
  detail::check_backward_args<T>("adaptive_span_backward", probs, grad_probs, grad_scores);
  if (grad_span != nullptr) span_gradient<T>(probs, grad_probs, span, shape, grad_span);
  detail::backward_rows<T>("adaptive_span_backward", probs, grad_probs, grad_scores,
                           detail::kernels_for<T>().softmax_backward, {});
}

template <class T>
void span_gradient(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, const T* span, const AdaptiveSpan& shape,
                   T* grad_span) {
  const std::size_t n = probs.cols;
  detail::parallel_for(probs.rows, detail::grain_for(n), [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      const T* p = probs.row(r);
      const T* g = grad_probs.row(r);
      double gp = 0;
      for (std::size_t j = 0; j < n; ++j) gp += static_cast<double>(g[j]) * p[j];
      const double pos = static_cast<double>(static_cast<std::ptrdiff_t>(r) + shape.query_offset);
      // Only keys on the ramp, 0 < m < 1, i.e. pos - z - R < j < pos - z, depend on z.
      const double first = std::max(0.0, std::floor(pos - span[r] - shape.ramp));
      const double last = std::min(static_cast<double>(n) - 1.0, std::ceil(pos - span[r]));
      double out = 0;
      for (double jd = first; jd <= last; ++jd) {
        const std::size_t j = static_cast<std::size_t>(jd);
        const double m = span_mask<double>(pos - jd, span[r], shape.ramp);
        if (m > 0 && m < 1) out += (g[j] - gp) * p[j] / (m * shape.ramp);
      }
      grad_span[r] = static_cast<T>(out);
    }
  });
}

namespace {

// The arguments both directions of the dynamic span share.
template <class T>
void check_dynamic_span(const char* op, ConstMatrix<T> hidden, const T* v, T b, double max_span) {
  if (!(max_span > 0 && std::isfinite(max_span)))
    throw Error(at_op(op) + "max_span must be finite and > 0 (got " + detail::number_text(max_span) + ")");
  if (v == nullptr) throw Error(at_op(op) + "v must not be null");
  if (!std::isfinite(b)) throw Error(at_op(op) + "b is not finite", ErrorCode::bad_value);
  detail::check_finite<T>(op, "hidden", hidden);
  for (std::size_t j = 0; j < hidden.cols; ++j)
    if (!std::isfinite(v[j]))
      throw Error(at_op(op) + "v is not finite at " + std::to_string(j), ErrorCode::bad_value);
}

// v . x_t + b, in double.
template <class T>
double span_logit(ConstMatrix<T> hidden, const T* v, T b, std::size_t t) {
  double a = b;
  for (std::size_t j = 0; j < hidden.cols; ++j) a += static_cast<double>(v[j]) * hidden(t, j);
  return a;
}

}  // namespace

template <class T>
void dynamic_span(ConstMatrix<T> hidden, const T* v, T b, double max_span, T* span) {
  check_dynamic_span<T>("dynamic_span", hidden, v, b, max_span);
  if (span == nullptr) throw Error(at_op("dynamic_span") + "span must not be null");
  for (std::size_t t = 0; t < hidden.rows; ++t)
    span[t] = static_cast<T>(max_span * sigmoid(span_logit<T>(hidden, v, b, t)));
}

template <class T>
void dynamic_span_backward(ConstMatrix<T> hidden, const T* v, T b, double max_span, const T* grad_span, T* grad_v,
                           T* grad_b, MatrixView<T> grad_hidden) {
  const char* op = "dynamic_span_backward";
  check_dynamic_span<T>(op, hidden, v, b, max_span);
  if (grad_span == nullptr || grad_v == nullptr || grad_b == nullptr)
    throw Error(at_op(op) + "grad_span, grad_v and grad_b must not be null");
  if (!grad_hidden.empty()) detail::check_shape(op, "grad_hidden", grad_hidden, hidden.rows, hidden.cols);
  std::vector<double> gv(hidden.cols, 0.0);
  double gb = 0;
  for (std::size_t t = 0; t < hidden.rows; ++t) {
    const double s = sigmoid(span_logit<T>(hidden, v, b, t));
    const double da = static_cast<double>(grad_span[t]) * max_span * s * (1 - s);
    gb += da;
    for (std::size_t j = 0; j < hidden.cols; ++j) {
      gv[j] += da * hidden(t, j);
      if (!grad_hidden.empty()) grad_hidden(t, j) = static_cast<T>(da * v[j]);
    }
  }
  for (std::size_t j = 0; j < hidden.cols; ++j) grad_v[j] = static_cast<T>(gv[j]);
  *grad_b = static_cast<T>(gb);
}

#define ENTGRAPH_INSTANTIATE(T)                                                                                 \
  template T span_mask<T>(T, T, T);                                                                             \
  template void adaptive_span<T>(ConstMatrix<T>, const T*, const AdaptiveSpan&, MatrixView<T>, MaskView);       \
  template void adaptive_span_backward<T>(ConstMatrix<T>, ConstMatrix<T>, const T*, const AdaptiveSpan&,        \
                                          MatrixView<T>, T*);                                                   \
  template void dynamic_span<T>(ConstMatrix<T>, const T*, T, double, T*);                                       \
  template void dynamic_span_backward<T>(ConstMatrix<T>, const T*, T, double, const T*, T*, T*, MatrixView<T>);
ENTGRAPH_INSTANTIATE(float)
ENTGRAPH_INSTANTIATE(double)
#undef ENTGRAPH_INSTANTIATE

}  // namespace entgraph
