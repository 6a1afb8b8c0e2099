// entgraph internal: the kernel table of the row-wise transforms.
//
// One table per backend (the float64 reference, and one per SIMD instruction
// set), filled once; ops pick a table by cpu_isa() and call through it. A
// kernel transforms one row, never throws and never allocates: the op has
// validated its input (no NaN, no +inf; -inf marks masked entries) and hands
// it scratch space of scratch_floats(n) floats.
#pragma once

#include <cstddef>

#include "entgraph/runtime.hpp"

namespace entgraph::detail {

struct RowParams {
  double alpha = 1.5;           // entmax
  std::size_t k = 0;            // topk_softmax
  double span = 0.0;            // adaptive span: z of this row
  double ramp = 1.0;            // adaptive span: R
  std::ptrdiff_t query_pos = 0; // adaptive span: position of this row's query
};

inline constexpr std::size_t scratch_floats(std::size_t n) { return 2 * n + 64; }

using ValidRow = bool (*)(const float* z, std::size_t n);  // no NaN and no +inf
// Constrained transforms' bounds: true when every u is finite and >= 0, with
// *total = the sum (in double) of u where z > -inf.
using BoundsRow = bool (*)(const float* z, const float* u, std::size_t n, double* total);
using ForwardRow = void (*)(const float* z, float* p, std::size_t n, const RowParams& params, float* scratch);
using BackwardRow = void (*)(const float* p, const float* dp, float* dz, std::size_t n, const RowParams& params);
// Several short rows at once (count <= kRowBatch, n <= kShortRow): row r
// reads z[r] and writes p[r], as a ForwardRow would; scratch holds
// short_rows_scratch(n) floats.
inline constexpr std::size_t kRowBatch = 16;
inline constexpr std::size_t kShortRow = 128;
inline constexpr std::size_t short_rows_scratch(std::size_t n) { return kRowBatch * n + 64; }
using ForwardRows = void (*)(const float* const* z, float* const* p, std::size_t count, std::size_t n,
                             const RowParams& params, float* scratch);
// Constrained softmax / sparsemax: the row's upper bounds u beside its scores.
// p may alias z or u: kernels read everything before writing p.
using ConstrainedRow = void (*)(const float* z, const float* u, float* p, std::size_t n, float* scratch);
// Their backward: dz, and du (the gradient in u; may be null). The outputs
// may alias p or g.
using ConstrainedBackwardRow = void (*)(const float* p, const float* u, const float* g, float* dz, float* du,
                                        std::size_t n);
// A backward that also returns the row's gradient in the transform's alpha.
using BackwardAlphaRow = void (*)(const float* p, const float* dp, float* dz, std::size_t n, const RowParams& params,
                                  double* grad_alpha);

struct TransformKernels {
  CpuIsa isa;
  ValidRow valid;   // no NaN, no +inf (scores)
  ValidRow finite;  // no NaN, no +-inf (gradients)
  BoundsRow upper_bounds;
  ForwardRow softmax;
  ForwardRow sparsemax;
  ForwardRow entmax15;
  ForwardRows entmax15_short;  // the same, for short rows
  ForwardRow entmax;  // general alpha in (1, kMaxEntmaxAlpha]
  ForwardRows entmax_short;  // the same, for short rows
  ForwardRow topk_softmax;
  ForwardRow adaptive_span;
  BackwardRow softmax_backward;  // p (dp - <p, dp>): softmax, top-k, adaptive span
  BackwardRow sparsemax_backward;
  BackwardRow entmax15_backward;
  BackwardRow entmax_backward;   // general alpha
  BackwardAlphaRow entmax_backward_alpha;  // general alpha, and d<dp, p>/d alpha
  ConstrainedRow constrained_softmax;
  ConstrainedRow constrained_sparsemax;
  ConstrainedBackwardRow constrained_softmax_backward;
  ConstrainedBackwardRow constrained_sparsemax_backward;
};

// The backward of the entmax family, dz = s (dp - <s, dp> / sum s) with
// s = p^e on the support (p > 0) and dz = 0 off it (e: 1 softmax, 0
// sparsemax, 1/2 entmax15, 2 - alpha entmax), evaluated in double with dp
// and s scaled so that nothing overflows on the way: the result is infinite
// only where the exact one is beyond the type's range. For the rows whose
// plain evaluation would overflow (|dp| near the maximum, or s beyond it for
// alpha > 2); every kernel falls back to it. Never throws; dz may alias p or dp.
void family_backward_robust(const float* p, const float* dp, float* dz, std::size_t n, double e);
void family_backward_robust(const double* p, const double* dp, double* dz, std::size_t n, double e);

// d<dp, p>/d alpha of an alpha-entmax row p, in double. With s = p^(2 - alpha)
// on the support, S = sum s, H = sum p log p and beta = 1 / (alpha - 1):
//   beta^2 (<dp, p> - <dp, s> / S) - beta (<dp, p log p> - H <dp, s> / S).
// The reference of every kernel's grad_alpha, and their fallback where float
// sums overflow.
double entmax_grad_alpha(const float* p, const float* dp, std::size_t n, double alpha);
double entmax_grad_alpha(const double* p, const double* dp, std::size_t n, double alpha);

// alpha-entmax for alpha > 2 (the kernels' path there, and the reference's),
// solved relative to the support in double: no threshold tau is formed,
// since at large alpha it lies closer to a score than double resolves
// (1e-28 at alpha = 10 near a tie, far less at 1000). Accurate to a few
// ulps of 1 per weight for every alpha in (2, kMaxEntmaxAlpha]; see the
// definition. -inf entries get 0; p may alias z. Never throws.
void entmax_relative(const float* z, float* p, std::size_t n, double alpha);
void entmax_relative(const double* z, double* p, std::size_t n, double alpha);

// The exact constrained rows in double (the references, and the kernels'
// fallback for rows their passes do not settle).
void constrained_softmax_exact(const float* z, const float* u, float* p, std::size_t n);
void constrained_softmax_exact(const double* z, const double* u, double* p, std::size_t n);
void constrained_sparsemax_exact(const float* z, const float* u, float* p, std::size_t n);
void constrained_sparsemax_exact(const double* z, const double* u, double* p, std::size_t n);
// Their backward in double, with gradients scaled by a power of two so that
// nothing overflows on the way (softmax_kind: constrained softmax, else
// sparsemax). The reference, and the kernels' path for extreme gradients.
void constrained_backward_exact(bool softmax_kind, const float* p, const float* u, const float* g, float* dz,
                                float* du, std::size_t n);
void constrained_backward_exact(bool softmax_kind, const double* p, const double* u, const double* g, double* dz,
                                double* du, std::size_t n);

// The table of an available instruction set (throws if it is not).
const TransformKernels& transform_kernels(CpuIsa isa);
// The table of cpu_isa().
inline const TransformKernels& transform_kernels() { return transform_kernels(cpu_isa()); }

// Per-ISA tables, defined in kernels/simd/transforms_<isa>.cpp and
// kernels/reference/transforms_reference.cpp.
extern const TransformKernels kReferenceKernels;
extern const TransformKernels kSse2Kernels;
extern const TransformKernels kAvx2Kernels;
extern const TransformKernels kAvx512Kernels;
extern const TransformKernels kSimd128Kernels;

}  // namespace entgraph::detail
