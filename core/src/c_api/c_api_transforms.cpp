// The C API's transforms: eg_transform <-> entgraph::Transform, forward and
// backward on a device.
#include <string>

#include "c_api/c_api_types.hpp"

namespace entgraph::c_api {

// The two enums name the same kinds, each with its own values (the C ABI must
// not depend on TransformKind's order).

Transform to_transform(const char* function, const eg_transform* transform, const char* name) {
  require(function, transform, name);
  Transform t;
  t.alpha = transform->alpha;
  t.k = transform->k;
  const int kind = enum_value(transform->kind);
  switch (kind) {
    case EG_TRANSFORM_SOFTMAX: t.kind = TransformKind::softmax; return t;
    case EG_TRANSFORM_SPARSEMAX: t.kind = TransformKind::sparsemax; return t;
    case EG_TRANSFORM_ENTMAX15: t.kind = TransformKind::entmax15; return t;
    case EG_TRANSFORM_ENTMAX: t.kind = TransformKind::entmax; return t;
    case EG_TRANSFORM_TOPK_SOFTMAX: t.kind = TransformKind::topk_softmax; return t;
    case EG_TRANSFORM_ADAPTIVE_SPAN: t.kind = TransformKind::adaptive_span; return t;
    case EG_TRANSFORM_CONSTRAINED_SOFTMAX: t.kind = TransformKind::constrained_softmax; return t;
    case EG_TRANSFORM_CONSTRAINED_SPARSEMAX: t.kind = TransformKind::constrained_sparsemax; return t;
  }
  throw_bad_enum(function, (std::string(name) + ".kind").c_str(), kind, "an eg_transform_kind, 0 to 7");
}

eg_transform to_c(const Transform& t) {
  // No default label: -Wswitch flags a TransformKind added without a C name.
  switch (t.kind) {
    case TransformKind::softmax: return {EG_TRANSFORM_SOFTMAX, t.alpha, t.k};
    case TransformKind::sparsemax: return {EG_TRANSFORM_SPARSEMAX, t.alpha, t.k};
    case TransformKind::entmax15: return {EG_TRANSFORM_ENTMAX15, t.alpha, t.k};
    case TransformKind::entmax: return {EG_TRANSFORM_ENTMAX, t.alpha, t.k};
    case TransformKind::topk_softmax: return {EG_TRANSFORM_TOPK_SOFTMAX, t.alpha, t.k};
    case TransformKind::adaptive_span: return {EG_TRANSFORM_ADAPTIVE_SPAN, t.alpha, t.k};
    case TransformKind::constrained_softmax: return {EG_TRANSFORM_CONSTRAINED_SOFTMAX, t.alpha, t.k};
    case TransformKind::constrained_sparsemax: return {EG_TRANSFORM_CONSTRAINED_SPARSEMAX, t.alpha, t.k};
  }
  throw Error("eg_transform: TransformKind " + std::to_string(static_cast<int>(t.kind)) + " has no C name");
}

}  // namespace entgraph::c_api

using namespace entgraph;
using namespace entgraph::c_api;

extern "C" {

eg_status eg_transform_parse(const char* name, eg_transform* out) {
  return guard(__func__, Failure::argument, [&](const char* fn) {
    require(fn, name, "name");
    require(fn, out, "out");
    // The factories' alphas (softmax 1, sparsemax 2, entmax15 1.5); the
    // other kinds keep Transform's defaults.
    Transform t;
    t.kind = parse_transform_kind(name);
    if (t.kind == TransformKind::softmax || t.kind == TransformKind::topk_softmax) t.alpha = 1.0;
    if (t.kind == TransformKind::sparsemax) t.alpha = 2.0;
    *out = to_c(t);
  });
}

eg_status eg_transform_forward(eg_device device, const eg_transform* transform, eg_const_matrix scores,
                               eg_matrix probs, const eg_mask* mask) {
  return guard(__func__, Failure::argument, [&](const char* fn) {
    const MaskView mask_view = mask == nullptr ? MaskView{} : to_view<const std::uint8_t>(fn, "mask", *mask);
    transform_forward(to_device(fn, device), to_transform(fn, transform), to_view(fn, "scores", scores),
                      to_view(fn, "probs", probs), mask_view);
  });
}

eg_status eg_transform_backward(eg_device device, const eg_transform* transform, eg_const_matrix probs,
                                eg_const_matrix grad_probs, eg_matrix grad_scores) {
  return guard(__func__, Failure::argument, [&](const char* fn) {
    transform_backward(to_device(fn, device), to_transform(fn, transform),
                       to_view(fn, "probs", probs), to_view(fn, "grad_probs", grad_probs),
                       to_view(fn, "grad_scores", grad_scores));
  });
}

}  // extern "C"
