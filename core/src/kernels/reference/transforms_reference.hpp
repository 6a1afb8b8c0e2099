// entgraph internal: the scalar float64 reference of every row transform.
//
// These are the oracles of the test suite and the double-precision public API.
// They use the textbook algorithms (sorting, bisection), deliberately not the
// ones of the SIMD kernels, so that the two check each other. Same contract as
// the kernel table: one row, -inf allowed, no NaN/+inf.
#pragma once

#include <cstddef>

#include "kernels/transform_kernels.hpp"

namespace entgraph::detail {

using ForwardRow64 = void (*)(const double* z, double* p, std::size_t n, const RowParams& params, double* scratch);
using BackwardRow64 = void (*)(const double* p, const double* dp, double* dz, std::size_t n,
                               const RowParams& params);
using BackwardAlphaRow64 = void (*)(const double* p, const double* dp, double* dz, std::size_t n,
                                    const RowParams& params, double* grad_alpha);
using ConstrainedRow64 = void (*)(const double* z, const double* u, double* p, std::size_t n, double* scratch);
using ConstrainedBackwardRow64 = void (*)(const double* p, const double* u, const double* g, double* dz, double* du,
                                          std::size_t n);

struct ReferenceKernels64 {
  ForwardRow64 softmax;
  ForwardRow64 sparsemax;
  ForwardRow64 entmax15;
  ForwardRow64 entmax;
  ForwardRow64 topk_softmax;
  ForwardRow64 adaptive_span;
  BackwardRow64 softmax_backward;
  BackwardRow64 sparsemax_backward;
  BackwardRow64 entmax15_backward;
  BackwardRow64 entmax_backward;
  BackwardAlphaRow64 entmax_backward_alpha;
  ConstrainedRow64 constrained_softmax;
  ConstrainedRow64 constrained_sparsemax;
  ConstrainedBackwardRow64 constrained_softmax_backward;
  ConstrainedBackwardRow64 constrained_sparsemax_backward;
};

extern const ReferenceKernels64 kReference64;

// Which table serves element type T: float -> the active ISA's, double -> the reference.
template <class T>
const auto& kernels_for();
template <>
inline const auto& kernels_for<float>() {
  return transform_kernels();
}
template <>
inline const auto& kernels_for<double>() {
  return kReference64;
}

}  // namespace entgraph::detail
