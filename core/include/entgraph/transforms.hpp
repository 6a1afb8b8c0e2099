// entgraph: attention transforms, applied row by row, with their backward.
//
// Every function here maps each row z of a rows x n score matrix to a row p of
// attention weights (p >= 0, sum p = 1), or back-propagates an upstream
// gradient dL/dp to dL/dz (the vector-Jacobian product).
//
// Common contract
// - T is float (SIMD kernels, chosen at run time; see runtime.hpp) or double
//   (the scalar float64 reference, the oracle of the tests).
// - Input and output views must have the same rows and cols; strides may
//   differ. Output may alias input exactly (in place); partial overlap is not
//   allowed.
// - mask (optional) has the same shape: a zero entry is masked and gets exactly
//   p = 0, whatever its score (even NaN). A row with every entry masked, or
//   every unmasked score equal to -inf, gives all zeros: there is nothing to
//   attend to, and that is reported as zero weight, not as an error.
// - -inf scores are allowed and get p = 0. NaN or +inf in an unmasked score, a
//   matrix with no columns, or mismatched shapes throw entgraph::Error before
//   anything is written.
// - Rows are independent; large inputs run on the library's thread pool, and
//   the result is bit-identical for any thread count.
// - Backward functions need only the forward output p (and the transform's
//   parameters): masked entries have p = 0 and so get a zero gradient.
//   Upstream gradients must be finite (else entgraph::Error); any finite ones,
//   up to the type's maximum (±3e38 in float), give a finite result wherever
//   the exact vector-Jacobian product is finite in T (sums and differences
//   are scaled so that nothing overflows on the way), infinity only where the
//   exact value itself exceeds T's range, never NaN, and exactly 0 where p = 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "entgraph/device.hpp"
#include "entgraph/matrix_view.hpp"
#include "entgraph/transform_list.hpp"

namespace entgraph {

// ---------------------------------------------------------------------------
// Softmax: p = exp(z - max z) / sum exp(z - max z).
template <class T>
void softmax(ConstMatrix<T> scores, MatrixView<T> probs, MaskView mask = {});
// dz = p * (dp - <p, dp>).
template <class T>
void softmax_backward(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores);

// ---------------------------------------------------------------------------
// Sparsemax (Martins & Astudillo 2016): the Euclidean projection of z onto the
// simplex, p = max(0, z - tau). Exact: the float kernel finds the support with
// a few vectorised passes and solves tau in closed form on it.
template <class T>
void sparsemax(ConstMatrix<T> scores, MatrixView<T> probs, MaskView mask = {});
// dz = s * (dp - mean_{p>0} dp), s = [p > 0].
template <class T>
void sparsemax_backward(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores);

// ---------------------------------------------------------------------------
// alpha-entmax (Peters, Niculae & Martins 2019):
//   p = [(alpha - 1) z - tau]_+ ^ (1 / (alpha - 1)),  tau such that sum p = 1.
// alpha = 1 is softmax, alpha = 2 is sparsemax; larger alpha is sparser.
//
// entmax15: exact for alpha = 1.5 (support by vectorised Newton passes, tau in
// closed form on the support; sorts only the candidate keys, and only when the
// support is still ambiguous after a few passes).
template <class T>
void entmax15(ConstMatrix<T> scores, MatrixView<T> probs, MaskView mask = {});
// dz = s * (dp - <s, dp> / sum s), s = sqrt(p).
template <class T>
void entmax15_backward(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores);

// entmax: any alpha in [1, kMaxEntmaxAlpha]. alpha = 1 exactly is softmax (the
// limit, so that alpha = 1 + softplus(a) may round to 1). Solved by a
// safeguarded Halley iteration on tau (bracketed, falling back to bisection),
// started from a solve on a sample of the row when the row is long, in a
// log1p parametrisation that stays accurate as alpha -> 1 (float, alpha <=
// 1.5), on the threshold itself for 1.5 < alpha <= 2; the result is
// renormalised so that rows sum to 1 within float rounding. For alpha > 2
// (float and double) no threshold is formed: near a tie it lies closer to a
// score than double resolves (1e-28 at alpha = 10), and the power
// 1/(alpha-1) turns that rounding into weight (a plain solve was off by 0.017
// at alpha = 10, 0.49 at 1000). The row is solved in double in the weights'
// own terms, p_j = (p_k^(alpha-1) + (alpha-1)(z_j - z_k))^(1/(alpha-1)) over
// the sorted support down to z_k: within 1e-15 per weight of a long double
// reference over the whole range (tests/transforms/test_entmax_large_alpha.cpp). When 1/(alpha-1) is an integer up to 8 (alpha = 1.5, 1.25, ...)
// powers are products, several times faster than the general alpha.
// Throws if alpha is NaN, < 1 or > kMaxEntmaxAlpha.
inline constexpr double kMaxEntmaxAlpha = 1000.0;
template <class T>
void entmax(ConstMatrix<T> scores, MatrixView<T> probs, double alpha, MaskView mask = {});
// dz = s * (dp - <s, dp> / sum s), s = p^(2 - alpha) on the support.
// If grad_alpha is not null it receives, per row, dL/dalpha (Correia et al.
// 2019): with S = sum s, H = sum p log p and beta = 1 / (alpha - 1),
//   dp_i/dalpha = beta^2 (p_i - s_i / S) - beta (p_i log p_i - s_i H / S).
// At alpha = 1 the gradient with respect to alpha is reported as 0 (the
// expression is 0/0 there); use alpha slightly above 1 when learning it.
template <class T>
void entmax_backward(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores, double alpha,
                     T* grad_alpha = nullptr);

// Learnable alpha that can never drift below 1: alpha = 1 + softplus(a).
double entmax_alpha_from_param(double a);
// d alpha / d a = sigmoid(a), for chaining grad_alpha to the parameter a.
double entmax_alpha_param_grad(double a);

// ---------------------------------------------------------------------------
// Top-k softmax (Zhao et al. 2019, Explicit Sparse Transformer): keep the k
// largest scores of each row (every score equal to the k-th largest is kept
// too, so ties never make the result depend on order), softmax over them, 0
// elsewhere. k >= number of unmasked entries is softmax. Throws if k = 0.
template <class T>
void topk_softmax(ConstMatrix<T> scores, MatrixView<T> probs, std::size_t k, MaskView mask = {});
// The selection is treated as constant (as in the paper): dz = p * (dp - <p, dp>).
template <class T>
void topk_softmax_backward(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores);

// ---------------------------------------------------------------------------
// Adaptive attention span (Sukhbaatar et al. 2019). Row i is the query at
// position i + query_offset, column j the key at position j, distance
// x = i + query_offset - j. With span z_i of row i and ramp width R,
//   m(x) = clamp((R + z_i - x) / R, 0, 1),   p_j = m(x_j) exp(s_j) / sum_k m(x_k) exp(s_k).
// Keys with m = 0 get exactly 0. Future keys (x < 0) have m = 1: combine with a
// causal mask to exclude them. A row whose every key has m = 0 gives zeros.
struct AdaptiveSpan {
  double ramp = 32.0;               // R > 0
  std::ptrdiff_t query_offset = 0;  // position of row 0's query
};
// The soft span mask m_z(x).
template <class T>
T span_mask(T distance, T span, T ramp);
// The span z of this convention for a span learned with
// facebookresearch/adaptive-span's AdaptiveMask (current_val in [0, 1],
// max_span = its max_size): that code gives the previous token the mask
// value the paper (and this library) gives distance 0, so its spans are one
// position shorter: z = current_val * max_span + 1 gives the same attention.
// Throws unless current_val and max_span are finite and max_span > 0.
double span_from_adaptive_span_repo(double current_val, double max_span);
// span has one entry per row: the same z for every row of a head (learned per
// head), or z_t from dynamic_span (one per query). Throws on non-finite span,
// ramp <= 0, or NaN/+inf scores.
template <class T>
void adaptive_span(ConstMatrix<T> scores, const T* span, const AdaptiveSpan& shape, MatrixView<T> probs,
                   MaskView mask = {});
// grad_scores = p * (dp - <p, dp>); grad_span (optional, one per row) = dL/dz_i,
// counting only keys strictly inside the ramp (0 < m < 1), where m depends on z.
template <class T>
void adaptive_span_backward(ConstMatrix<T> probs, ConstMatrix<T> grad_probs, const T* span,
                            const AdaptiveSpan& shape, MatrixView<T> grad_scores, T* grad_span = nullptr);

// Dynamic span: z_t = max_span * sigmoid(v . x_t + b) for each row x_t of
// hidden (n x d_model); v has d_model entries; span receives n values.
template <class T>
void dynamic_span(ConstMatrix<T> hidden, const T* v, T b, double max_span, T* span);
// Given dL/dz_t, accumulates nothing: writes dL/dv (d_model), dL/db (one
// value) and, if grad_hidden is not empty, dL/dx_t (n x d_model).
template <class T>
void dynamic_span_backward(ConstMatrix<T> hidden, const T* v, T b, double max_span, const T* grad_span, T* grad_v,
                           T* grad_b, MatrixView<T> grad_hidden = {});

// ---------------------------------------------------------------------------
// Constrained softmax (Martins & Kreutzer 2017) and constrained sparsemax
// (Malaviya et al. 2018): the same problems with per-entry upper bounds
// 0 <= p <= u (upper has the scores' shape).
//   csoftmax:   p = min(u, c exp(z)), c such that sum p = 1.
//   csparsemax: p = clamp(z - tau, 0, u), tau such that sum p = 1.
// Throws if an unmasked bound is negative or not finite, or if the unmasked
// bounds of a row sum to less than 1 (then no distribution satisfies them).
// Constrained softmax is solved exactly by an active-set iteration (a few
// passes, no sort); constrained sparsemax by sorting the 2n breakpoints of its
// piecewise-linear threshold equation. Neither has a SIMD kernel (they are not
// on attention's hot path); their float path accumulates in double.
template <class T>
void constrained_softmax(ConstMatrix<T> scores, ConstMatrix<T> upper, MatrixView<T> probs, MaskView mask = {});
template <class T>
void constrained_sparsemax(ConstMatrix<T> scores, ConstMatrix<T> upper, MatrixView<T> probs, MaskView mask = {});
// Saturated entries (p == u > 0) pass gradient to u, free entries to z:
//   csoftmax:   F = {p < u}, m = sum_F p; dz_j = [j in F] p_j (dp_j - sum_F p dp / m)
//               du_i = [i saturated] (dp_i - sum_F p dp / m)
//   csparsemax: F = {0 < p < u};        dz_j = [j in F] (dp_j - mean_F dp)
//               du_i = [i saturated] (dp_i - mean_F dp)
// grad_upper is optional.
template <class T>
void constrained_softmax_backward(ConstMatrix<T> probs, ConstMatrix<T> upper, ConstMatrix<T> grad_probs,
                                  MatrixView<T> grad_scores, MatrixView<T> grad_upper = {});
template <class T>
void constrained_sparsemax_backward(ConstMatrix<T> probs, ConstMatrix<T> upper, ConstMatrix<T> grad_probs,
                                    MatrixView<T> grad_scores, MatrixView<T> grad_upper = {});

// ---------------------------------------------------------------------------
// A transform named by value, for code that is generic over transforms
// (attention, the CLI, losses). Kinds that need extra inputs (adaptive span,
// constrained) take them from the caller of that code, not from here. The
// kinds and what is known of each are the rows of transform_list.hpp.
enum class TransformKind {
#define ENTGRAPH_TRANSFORM_KIND(kind, ...) kind,
  ENTGRAPH_TRANSFORMS(ENTGRAPH_TRANSFORM_KIND)
#undef ENTGRAPH_TRANSFORM_KIND
};

enum class TransformFamily { entmax, top_k, span, constrained };
enum class TransformParameter { none, alpha, k };
// What the CUDA backend runs of a kind (TransformInfo::cuda).
enum : unsigned { kCudaTransform = 1u, kCudaAttention = 2u };

// One row of transform_list.hpp (its columns are explained there).
struct TransformInfo {
  TransformKind kind;
  const char* name;           // "topk_softmax": Transform::name()'s kind, the forward's op name
  const char* backward_name;  // "topk_softmax_backward"
  TransformFamily family;
  TransformParameter parameter;
  double alpha;
  const char* alias;  // "topk", or ""
  int c_value;        // eg_transform_kind
  unsigned cuda;      // kCudaTransform | kCudaAttention

  // The name front ends show and accept: the alias where there is one.
  constexpr const char* shown_name() const { return alias[0] != '\0' ? alias : name; }
  // Adaptive span and the constrained kinds take more than scores.
  constexpr bool extra_inputs() const {
    return family == TransformFamily::span || family == TransformFamily::constrained;
  }
};

#define ENTGRAPH_TRANSFORM_INFO(kind, family, parameter, alpha, alias, c_value, cuda)                          \
  TransformInfo{TransformKind::kind, #kind,     #kind "_backward", TransformFamily::family,                  \
                TransformParameter::parameter, alpha, alias, c_value, cuda},
inline constexpr TransformInfo kTransformInfos[] = {ENTGRAPH_TRANSFORMS(ENTGRAPH_TRANSFORM_INFO)};
#undef ENTGRAPH_TRANSFORM_INFO

// The row of a kind; nullptr for a value that names none (a corrupt enum).
constexpr const TransformInfo* find_transform_info(TransformKind kind) {
  const auto i = static_cast<std::size_t>(kind);
  return i < sizeof kTransformInfos / sizeof kTransformInfos[0] ? &kTransformInfos[i] : nullptr;
}
// The row of a kind; throws entgraph::Error for a value that names none.
const TransformInfo& transform_info(TransformKind kind);

struct Transform {
  TransformKind kind = TransformKind::softmax;
  double alpha = 1.5;  // entmax only
  std::size_t k = 0;   // topk_softmax only

  // A kind with its parameter: alpha is read only where it is the kind's
  // parameter (entmax), k only where k is (topk_softmax); the other kinds
  // get their row's alpha and k = 0, as the factories below.
  static Transform of(TransformKind kind, double alpha, std::size_t k);
  static Transform softmax() { return {TransformKind::softmax, 1.0, 0}; }
  static Transform sparsemax() { return {TransformKind::sparsemax, 2.0, 0}; }
  static Transform entmax15() { return {TransformKind::entmax15, 1.5, 0}; }
  static Transform entmax(double alpha) { return {TransformKind::entmax, alpha, 0}; }
  static Transform topk_softmax(std::size_t k) { return {TransformKind::topk_softmax, 1.0, k}; }
  // The α-entmax of a head's α (a teacher's, a capture's, a predictor's):
  // entmax15's exact kernel at α = 1.5, the general one at any other α
  // (α = 1 is softmax's weights, α = 2 sparsemax's).
  static Transform for_alpha(double alpha) { return alpha == 1.5 ? entmax15() : entmax(alpha); }

  const TransformInfo& info() const { return transform_info(kind); }
  // "softmax", "sparsemax", "entmax15", "entmax(alpha=1.25)", "topk_softmax(k=8)", ...
  std::string name() const;
  // The alpha of the Tsallis entropy this transform maximises (1 for softmax
  // and top-k, 2 for sparsemax); throws for kinds that have none.
  double tsallis_alpha() const;
};

// Parses a kind by its name or alias (transform_list.hpp): softmax,
// sparsemax, entmax15, entmax, topk (or topk_softmax), adaptive_span,
// constrained_softmax, constrained_sparsemax. Throws entgraph::Error naming
// the accepted names.
TransformKind parse_transform_kind(const std::string& name);

// The names of the kinds whose row passes `keep` (all kinds if it is null),
// in the list's order, joined by ", " and, before the last, `last_separator`
// (", " or " or "): the lists that messages give. shown: the names front
// ends accept ("topk") instead of the kinds' own ("topk_softmax").
std::string transform_names(bool (*keep)(const TransformInfo&), const char* last_separator, bool shown = false);
// Filters for it.
inline bool takes_scores_only(const TransformInfo& row) { return !row.extra_inputs(); }
inline bool is_entmax_family(const TransformInfo& row) { return row.family == TransformFamily::entmax; }
inline bool takes_alpha(const TransformInfo& row) { return row.parameter == TransformParameter::alpha; }
inline bool takes_k(const TransformInfo& row) { return row.parameter == TransformParameter::k; }
inline bool has_cuda_transform(const TransformInfo& row) { return (row.cuda & kCudaTransform) != 0; }
inline bool has_cuda_attention(const TransformInfo& row) { return (row.cuda & kCudaAttention) != 0; }

// Forward/backward of the kinds that need no extra inputs (softmax, sparsemax,
// entmax15, entmax, topk_softmax); throws for the others.
template <class T>
void transform_forward(const Transform& t, ConstMatrix<T> scores, MatrixView<T> probs, MaskView mask = {});
template <class T>
void transform_backward(const Transform& t, ConstMatrix<T> probs, ConstMatrix<T> grad_probs,
                        MatrixView<T> grad_scores, T* grad_alpha = nullptr);

// The same on `device` (entgraph/device.hpp), float32: the arguments are
// checked in the core as the CPU's calls check them, then the device runs.
void transform_forward(Device device, const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs,
                       MaskView mask = {});
void transform_backward(Device device, const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                        MatrixView<float> grad_scores);

// The same with the arrays in `memory` (entgraph/device.hpp): Memory::device
// takes the device's own pointers (cudaMalloc'd, a torch tensor's
// data_ptr()), copies nothing and returns when the outputs are written. The
// core checks the shapes and parameters; the device's kernel scans the values
// (NaN, +inf) before it writes, with the CPU's messages. On Device::cpu both
// memories are the host's.
void transform_forward(Device device, Memory memory, const Transform& t, ConstMatrix<float> scores,
                       MatrixView<float> probs, MaskView mask = {});
void transform_backward(Device device, Memory memory, const Transform& t, ConstMatrix<float> probs,
                        ConstMatrix<float> grad_probs, MatrixView<float> grad_scores);

}  // namespace entgraph
