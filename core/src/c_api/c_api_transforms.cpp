// The C API's transforms: eg_transform <-> entgraph::Transform, forward and
// backward on a device.
#include <iterator>
#include <string>

#include "c_api/c_api_types.hpp"

namespace entgraph::c_api {

// The C enum's values are the c_value column of transform_list.hpp (the C
// ABI must not depend on TransformKind's order).

Transform to_transform(const char* function, const eg_transform* transform, const char* name) {
  require(function, transform, name);
  const int kind = enum_value(transform->kind);
  for (const TransformInfo& row : kTransformInfos)
    if (row.c_value == kind) return {row.kind, transform->alpha, transform->k};
  const std::string range = "an eg_transform_kind, 0 to " + std::to_string(std::size(kTransformInfos) - 1);
  throw_bad_enum(function, (std::string(name) + ".kind").c_str(), kind, range.c_str());
}

eg_transform to_c(const Transform& t) {
  return {static_cast<eg_transform_kind>(t.info().c_value), t.alpha, t.k};
}

}  // namespace entgraph::c_api

using namespace entgraph;
using namespace entgraph::c_api;

extern "C" {

eg_status eg_transform_parse(const char* name, eg_transform* out) {
  return guard(__func__, [&](const char* fn) {
    require(fn, name, "name");
    require(fn, out, "out");
    // The kind's own alpha (softmax 1, sparsemax 2, entmax15 1.5; entmax
    // its default, 1.5) and k = 0: a top-k caller sets k.
    const TransformKind kind = parse_transform_kind(name);
    *out = to_c(Transform::of(kind, transform_info(kind).alpha, 0));
  });
}

eg_status eg_transform_forward(eg_device device, const eg_transform* transform, eg_const_matrix scores,
                               eg_matrix probs, const eg_mask* mask) {
  return guard(__func__, [&](const char* fn) {
    const MaskView mask_view = mask == nullptr ? MaskView{} : to_view<const std::uint8_t>(fn, "mask", *mask);
    transform_forward(to_device(fn, device), to_transform(fn, transform), to_view(fn, "scores", scores),
                      to_view(fn, "probs", probs), mask_view);
  });
}

eg_status eg_transform_backward(eg_device device, const eg_transform* transform, eg_const_matrix probs,
                                eg_const_matrix grad_probs, eg_matrix grad_scores) {
  return guard(__func__, [&](const char* fn) {
    transform_backward(to_device(fn, device), to_transform(fn, transform),
                       to_view(fn, "probs", probs), to_view(fn, "grad_probs", grad_probs),
                       to_view(fn, "grad_scores", grad_scores));
  });
}

}  // extern "C"
