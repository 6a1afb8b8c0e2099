// The Transform descriptor: names, parsing, and generic dispatch.
#include <cmath>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/transforms.hpp"
#include "runtime/backends.hpp"
#include "runtime/numbers.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {

const TransformInfo& transform_info(TransformKind kind) {
  const TransformInfo* info = find_transform_info(kind);
  if (info == nullptr)
    throw Error(at_op("transform_info") + "kind is not a transform (got " + std::to_string(static_cast<int>(kind)) +
                ", expected a TransformKind)");
  return *info;
}

Transform Transform::of(TransformKind kind, double alpha, std::size_t k) {
  const TransformInfo& info = transform_info(kind);
  return {kind, info.parameter == TransformParameter::alpha ? alpha : info.alpha,
          info.parameter == TransformParameter::k ? k : 0};
}

std::string Transform::name() const {
  const TransformInfo* row = find_transform_info(kind);
  if (row == nullptr) return "unknown";  // for messages about a corrupt kind
  switch (row->parameter) {
    case TransformParameter::none: return row->name;
    case TransformParameter::alpha: return std::string(row->name) + "(alpha=" + detail::number_text(alpha) + ")";
    case TransformParameter::k: return std::string(row->name) + "(k=" + std::to_string(k) + ")";
  }
  return row->name;
}

double Transform::tsallis_alpha() const {
  const TransformInfo& row = info();
  switch (row.family) {
    case TransformFamily::entmax: return row.parameter == TransformParameter::alpha ? alpha : row.alpha;
    case TransformFamily::top_k: return row.alpha;  // softmax over the kept entries
    default: throw Error(at_op("Transform::tsallis_alpha") + name() + " is not an entmax transform");
  }
}

TransformKind parse_transform_kind(const std::string& name) {
  for (const TransformInfo& row : kTransformInfos)
    if (name == row.name || (row.alias[0] != '\0' && name == row.alias)) return row.kind;
  throw Error(at_op("parse_transform_kind") + "unknown transform (got '" + name + "', expected " +
              transform_names(nullptr, " or ", true) + ")");
}

std::string transform_names(bool (*keep)(const TransformInfo&), const char* last_separator, bool shown) {
  std::vector<const char*> names;
  for (const TransformInfo& row : kTransformInfos)
    if (keep == nullptr || keep(row)) names.push_back(shown ? row.shown_name() : row.name);
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out.append(i == 0 ? "" : i + 1 == names.size() ? last_separator : ", ").append(names[i]);
  return out;
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
      throw Error(at_op("transform_forward") + t.name() + " needs extra inputs; call it directly");
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
      throw Error(at_op("transform_backward") + t.name() + " needs extra inputs; call it directly");
  }
}

namespace detail {
namespace {

// The op that runs a kind without extra inputs (the name its messages use),
// forward or backward; null for the kinds with extra inputs.
const char* op_name(TransformKind kind, bool backward) {
  const TransformInfo* row = find_transform_info(kind);
  if (row == nullptr || row->extra_inputs()) return nullptr;
  return backward ? row->backward_name : row->name;
}

// The kind's parameter, with the messages of the kind's own function (alpha
// under `op`; k under `k_op`, as transform_backward names it).
void check_parameter(const Transform& t, const char* op, const char* k_op) {
  switch (transform_info(t.kind).parameter) {
    case TransformParameter::none: return;
    case TransformParameter::alpha: return check_alpha(op, t.alpha);
    case TransformParameter::k: return check_topk_k(k_op, t.k);
  }
}

}  // namespace

void check_transform_forward(const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs, MaskView mask,
                             bool values) {
  const char* op = op_name(t.kind, false);
  if (op == nullptr) throw Error(at_op("transform_forward") + t.name() + " needs extra inputs; call it directly");
  check_parameter(t, op, op);
  check_forward_args<float>(op, scores, probs, mask, values);
}

void check_transform_backward(const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                              MatrixView<float> grad_scores, bool values) {
  const char* op = op_name(t.kind, true);
  if (op == nullptr) throw Error(at_op("transform_backward") + t.name() + " needs extra inputs; call it directly");
  check_parameter(t, op, "transform_backward");
  check_backward_args<float>(op, probs, grad_probs, grad_scores, values);
}

}  // namespace detail

void check_transform_parameters(const Transform& t, const char* op, const std::string& name) {
  detail::check_transform_scalars(t, op, name);
}

void check_attention_scale(double scale, const char* op, const std::string& name) {
  if (!std::isfinite(scale))
    throw Error(at_op(op) + cpp_name(name) + " is not finite (got " + detail::number_text(scale) +
                ", expected a finite number)");
}

void transform_forward(Device device, const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs,
                       MaskView mask) {
  transform_forward(device, Memory::host, t, scores, probs, mask);
}

void transform_backward(Device device, const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                        MatrixView<float> grad_scores) {
  transform_backward(device, Memory::host, t, probs, grad_probs, grad_scores);
}

void transform_forward(Device device, Memory memory, const Transform& t, ConstMatrix<float> scores,
                       MatrixView<float> probs, MaskView mask) {
  if (device == Device::cpu) return transform_forward<float>(t, scores, probs, mask);  // its memory is the host's
  const auto kernel = detail::backend_kernel(device, "transform_forward", memory, &BackendKernels::transform_forward,
                                             &BackendKernels::transform_forward_on_device);
  detail::check_transform_forward(t, scores, probs, mask, /*values=*/memory == Memory::host);
  kernel(t, scores, probs, mask);
}

void transform_backward(Device device, Memory memory, const Transform& t, ConstMatrix<float> probs,
                        ConstMatrix<float> grad_probs, MatrixView<float> grad_scores) {
  if (device == Device::cpu) return transform_backward<float>(t, probs, grad_probs, grad_scores);
  const auto kernel = detail::backend_kernel(device, "transform_backward", memory, &BackendKernels::transform_backward,
                                             &BackendKernels::transform_backward_on_device);
  detail::check_transform_backward(t, probs, grad_probs, grad_scores, /*values=*/memory == Memory::host);
  kernel(t, probs, grad_probs, grad_scores);
}

template void transform_forward<float>(const Transform&, ConstMatrix<float>, MatrixView<float>, MaskView);
template void transform_forward<double>(const Transform&, ConstMatrix<double>, MatrixView<double>, MaskView);
template void transform_backward<float>(const Transform&, ConstMatrix<float>, ConstMatrix<float>, MatrixView<float>,
                                        float*);
template void transform_backward<double>(const Transform&, ConstMatrix<double>, ConstMatrix<double>,
                                         MatrixView<double>, double*);

}  // namespace entgraph
