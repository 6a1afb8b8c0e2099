// The Transform descriptor: names, parsing, and generic dispatch.
#include <sstream>
#include <string>

#include "entgraph/error.hpp"
#include "entgraph/transforms.hpp"
#include "runtime/backends.hpp"
#include "runtime/numbers.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {

std::string Transform::name() const {
  std::ostringstream out;
  switch (kind) {
    case TransformKind::softmax: return "softmax";
    case TransformKind::sparsemax: return "sparsemax";
    case TransformKind::entmax15: return "entmax15";
    case TransformKind::entmax: out << "entmax(alpha=" << detail::number_text(alpha) << ")"; return out.str();
    case TransformKind::topk_softmax: out << "topk_softmax(k=" << k << ")"; return out.str();
    case TransformKind::adaptive_span: return "adaptive_span";
    case TransformKind::constrained_softmax: return "constrained_softmax";
    case TransformKind::constrained_sparsemax: return "constrained_sparsemax";
  }
  return "unknown";
}

double Transform::tsallis_alpha() const {
  switch (kind) {
    case TransformKind::softmax: return 1.0;
    case TransformKind::topk_softmax: return 1.0;  // softmax over the kept entries
    case TransformKind::sparsemax: return 2.0;
    case TransformKind::entmax15: return 1.5;
    case TransformKind::entmax: return alpha;
    default: throw Error("Transform::tsallis_alpha: " + name() + " is not an entmax transform");
  }
}

TransformKind parse_transform_kind(const std::string& name) {
  static const std::pair<const char*, TransformKind> kNames[] = {
      {"softmax", TransformKind::softmax},
      {"sparsemax", TransformKind::sparsemax},
      {"entmax15", TransformKind::entmax15},
      {"entmax", TransformKind::entmax},
      {"topk", TransformKind::topk_softmax},
      {"topk_softmax", TransformKind::topk_softmax},
      {"adaptive_span", TransformKind::adaptive_span},
      {"constrained_softmax", TransformKind::constrained_softmax},
      {"constrained_sparsemax", TransformKind::constrained_sparsemax},
  };
  for (const auto& [text, kind] : kNames)
    if (name == text) return kind;
  throw Error("parse_transform_kind: unknown transform (got '" + name +
              "', expected softmax, sparsemax, entmax15, entmax, topk, adaptive_span, constrained_softmax or "
              "constrained_sparsemax)");
}

template <class T>
void transform_forward(const Transform& t, ConstMatrix<T> scores, MatrixView<T> probs, MaskView mask) {
  switch (t.kind) {
    case TransformKind::softmax: return softmax<T>(scores, probs, mask);
    case TransformKind::sparsemax: return sparsemax<T>(scores, probs, mask);
    case TransformKind::entmax15: return entmax15<T>(scores, probs, mask);
    case TransformKind::entmax: return entmax<T>(scores, probs, t.alpha, mask);
    case TransformKind::topk_softmax: return topk_softmax<T>(scores, probs, t.k, mask);
    default:
      throw Error("transform_forward: " + t.name() + " needs extra inputs; call it directly");
  }
}

template <class T>
void transform_backward(const Transform& t, ConstMatrix<T> probs, ConstMatrix<T> grad_probs,
                        MatrixView<T> grad_scores, T* grad_alpha) {
  switch (t.kind) {
    // With grad_alpha, softmax and sparsemax are entmax at alpha = 1 and 2.
    case TransformKind::softmax:
      if (grad_alpha) return entmax_backward<T>(probs, grad_probs, grad_scores, 1.0, grad_alpha);
      return softmax_backward<T>(probs, grad_probs, grad_scores);
    case TransformKind::sparsemax:
      if (grad_alpha) return entmax_backward<T>(probs, grad_probs, grad_scores, 2.0, grad_alpha);
      return sparsemax_backward<T>(probs, grad_probs, grad_scores);
    case TransformKind::entmax15:
      if (grad_alpha) return entmax_backward<T>(probs, grad_probs, grad_scores, 1.5, grad_alpha);
      return entmax15_backward<T>(probs, grad_probs, grad_scores);
    case TransformKind::entmax: return entmax_backward<T>(probs, grad_probs, grad_scores, t.alpha, grad_alpha);
    case TransformKind::topk_softmax:
      detail::check_topk_k("transform_backward", t.k);
      return topk_softmax_backward<T>(probs, grad_probs, grad_scores);
    default:
      throw Error("transform_backward: " + t.name() + " needs extra inputs; call it directly");
  }
}

namespace detail {
namespace {

// The op that runs a kind without extra inputs (the name its messages use),
// forward or backward; null for the kinds with extra inputs.
const char* op_name(TransformKind kind, bool backward) {
  switch (kind) {
    case TransformKind::softmax: return backward ? "softmax_backward" : "softmax";
    case TransformKind::sparsemax: return backward ? "sparsemax_backward" : "sparsemax";
    case TransformKind::entmax15: return backward ? "entmax15_backward" : "entmax15";
    case TransformKind::entmax: return backward ? "entmax_backward" : "entmax";
    case TransformKind::topk_softmax: return backward ? "topk_softmax_backward" : "topk_softmax";
    default: return nullptr;
  }
}

}  // namespace

void check_transform_forward(const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs, MaskView mask) {
  const char* op = op_name(t.kind, false);
  if (op == nullptr) throw Error("transform_forward: " + t.name() + " needs extra inputs; call it directly");
  if (t.kind == TransformKind::entmax) check_alpha(op, t.alpha);
  if (t.kind == TransformKind::topk_softmax) check_topk_k(op, t.k);
  check_forward_args<float>(op, scores, probs, mask);
}

void check_transform_backward(const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                              MatrixView<float> grad_scores) {
  const char* op = op_name(t.kind, true);
  if (op == nullptr) throw Error("transform_backward: " + t.name() + " needs extra inputs; call it directly");
  if (t.kind == TransformKind::entmax) check_alpha(op, t.alpha);
  if (t.kind == TransformKind::topk_softmax) check_topk_k("transform_backward", t.k);
  check_backward_args<float>(op, probs, grad_probs, grad_scores);
}

}  // namespace detail

void check_transform_parameters(const Transform& t, const char* op, const std::string& name) {
  detail::check_transform_scalars(t, op, name);
}

void transform_forward(Device device, const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs,
                       MaskView mask) {
  if (device == Device::cpu) return transform_forward<float>(t, scores, probs, mask);
  const auto kernel = detail::backend_kernel(device, "transform_forward", &BackendKernels::transform_forward);
  detail::check_transform_forward(t, scores, probs, mask);
  kernel(t, scores, probs, mask);
}

void transform_backward(Device device, const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                        MatrixView<float> grad_scores) {
  if (device == Device::cpu) return transform_backward<float>(t, probs, grad_probs, grad_scores);
  const auto kernel = detail::backend_kernel(device, "transform_backward", &BackendKernels::transform_backward);
  detail::check_transform_backward(t, probs, grad_probs, grad_scores);
  kernel(t, probs, grad_probs, grad_scores);
}

template void transform_forward<float>(const Transform&, ConstMatrix<float>, MatrixView<float>, MaskView);
template void transform_forward<double>(const Transform&, ConstMatrix<double>, MatrixView<double>, MaskView);
template void transform_backward<float>(const Transform&, ConstMatrix<float>, ConstMatrix<float>, MatrixView<float>,
                                        float*);
template void transform_backward<double>(const Transform&, ConstMatrix<double>, ConstMatrix<double>,
                                         MatrixView<double>, double*);

}  // namespace entgraph
