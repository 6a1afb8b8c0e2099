// entgraph internal: the forward row kernel of a transform that takes scores
// only, for ops that run rows straight through it (graph attention,
// block-sparse attention): their scores come from finite Q and K, so
// transform_forward's checks and thread-pool dispatch (which dominate on
// short rows) are not needed, and every path of an op gets the same bits
// (transform_forward may batch short rows through another kernel).
#pragma once

#include "entgraph/error.hpp"
#include "entgraph/transforms.hpp"
#include "kernels/reference/transforms_reference.hpp"
#include "kernels/transform_kernels.hpp"

namespace entgraph::detail {

// The kernel of t for T, with params set for it; `op` names the caller if t
// has none (transforms with extra inputs, which the ops refuse before).
template <class T>
auto row_kernel(const Transform& t, RowParams& params, const char* op) {
  const auto& kernels = kernels_for<T>();
  params.alpha = t.alpha;
  params.k = t.k;
  // No default: -Wswitch names a kind added to transform_list.hpp without its row kernel here.
  switch (t.kind) {
    case TransformKind::softmax:
      return kernels.softmax;
    case TransformKind::sparsemax:
      return kernels.sparsemax;
    case TransformKind::entmax15:
      return kernels.entmax15;
    case TransformKind::entmax:
      return t.alpha == 1.0 ? kernels.softmax : kernels.entmax;
    case TransformKind::topk_softmax:
      return kernels.topk_softmax;
    case TransformKind::adaptive_span:
    case TransformKind::constrained_softmax:
    case TransformKind::constrained_sparsemax:
      break;
  }
  throw Error(at_op(op) + "no row kernel for " + t.name());
}

// The backward row kernel of t (dz from p and dp), as row_kernel.
template <class T>
auto row_backward_kernel(const Transform& t, RowParams& params, const char* op) {
  const auto& kernels = kernels_for<T>();
  params.alpha = t.alpha;
  params.k = t.k;
  switch (t.kind) {
    case TransformKind::softmax:
    case TransformKind::topk_softmax:  // softmax's on its support: p is 0 off it
      return kernels.softmax_backward;
    case TransformKind::sparsemax:
      return kernels.sparsemax_backward;
    case TransformKind::entmax15:
      return kernels.entmax15_backward;
    case TransformKind::entmax:
      return t.alpha == 1.0 ? kernels.softmax_backward : kernels.entmax_backward;
    case TransformKind::adaptive_span:
    case TransformKind::constrained_softmax:
    case TransformKind::constrained_sparsemax:
      break;
  }
  throw Error(at_op(op) + "no row kernel for " + t.name());
}

}  // namespace entgraph::detail
