// entgraph internal: validation and the parallel row loop shared by every
// row-wise transform op. An op checks its arguments here, once, before any
// output is written; then rows run on the thread pool, each through a kernel
// that never throws.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "entgraph/error.hpp"
#include "entgraph/matrix_view.hpp"
#include "entgraph/transforms.hpp"
#include "entgraph/view_checks.hpp"
#include "kernels/reference/transforms_reference.hpp"
#include "runtime/numbers.hpp"
#include "runtime/parallel.hpp"

namespace entgraph::detail {

// v in T, past T's range (for float: what rounds to infinity) as an explicit
// infinity rather than an out-of-range conversion.
template <class T>
T narrow(double v) {
  if constexpr (std::is_same_v<T, float>) {
    if (!(std::abs(v) < 0x1.ffffffp127) && !std::isnan(v))
      return v > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  }
  return static_cast<T>(v);
}

// Checks the scalar parameter of an entmax (alpha) or top-k (k) transform;
// name is how the caller's argument is called ("options.transform"). Other
// kinds pass.
void check_transform_scalars(const Transform& t, const char* op, const std::string& name);
// For ops that take only the transforms without extra inputs (softmax,
// sparsemax, entmax15, entmax, topk_softmax): checks their scalars as above
// and returns true; returns false for the kinds that need extra inputs
// (adaptive_span, constrained_*: the caller says why it refuses them);
// throws "<name>.kind is not a transform" for a value outside TransformKind.
bool check_plain_transform(const Transform& t, const char* op, const std::string& name);
// Throws unless 1 <= alpha <= kMaxEntmaxAlpha (the entmax ops' own argument).
void check_alpha(const char* op, double alpha);
// Throws unless k >= 1 (the top-k op's own argument).
void check_topk_k(const char* op, std::size_t k);
// Every check transform_forward<float>(t, ...) makes before it writes, in its
// order and with its messages, for a transform it takes; the op layer runs it
// before another device's kernel; values = false leaves out the scan of the
// values (Memory::device: the device's kernel scans them).
void check_transform_forward(const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs, MaskView mask,
                             bool values = true);
// The same for transform_backward<float>(t, ...) without grad_alpha.
void check_transform_backward(const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                              MatrixView<float> grad_scores, bool values = true);
// Numbers in error messages: the shortest text that reads back (number_text).
inline std::string num(double x) { return number_text(x); }
inline std::string num(std::size_t x) { return std::to_string(x); }

// The view checks are public (entgraph/view_checks.hpp): backends use them too.
using entgraph::check_nonempty;
using entgraph::check_shape;
using entgraph::check_view;
using entgraph::shape_text;

// Throws if an unmasked entry of `scores` is NaN or +inf. -inf is allowed.
template <class T>
void check_scores(const char* op, const char* arg, ConstMatrix<T> scores, MaskView mask);

// Throws if any entry (masked or not) is NaN or +/-inf.
template <class T>
void check_finite(const char* op, const char* arg, ConstMatrix<T> values);
// The error of check_scores (allow_neg_inf) and check_finite for entry
// (row, col) of `arg`, whose value is x.
[[noreturn]] void throw_non_finite(const char* op, const char* arg, std::size_t row, std::size_t col, double x,
                                   bool allow_neg_inf);

// Per-thread scratch of at least n elements, reused across calls.
template <class T>
T* thread_scratch(std::size_t n);

// The row loop of a forward transform: validates shapes and scores, then for
// each row calls kernel(z_row, p_row, n, params_of(row), scratch), with masked
// entries replaced by -inf in a copy of the row first. params_of(row) builds
// the row's RowParams (most ops return one constant value).
template <class T>
// values: also scan the values (not where they lie in a device's own memory,
// which the device's kernel scans).
void check_forward_args(const char* op, ConstMatrix<T> scores, MatrixView<T> probs, MaskView mask,
                        bool values = true) {
  check_shape(op, "probs", probs, scores.rows, scores.cols);
  check_nonempty(op, "scores", scores);
  if (!mask.empty()) check_shape(op, "mask", mask, scores.rows, scores.cols);
  if (values) check_scores<T>(op, "scores", scores, mask);
}

template <class T, class Kernel, class Params>
void forward_rows(const char* op, ConstMatrix<T> scores, MatrixView<T> probs, MaskView mask, Kernel kernel,
                  Params params_of) {
  check_forward_args<T>(op, scores, probs, mask);
  const std::size_t n = scores.cols;
  parallel_for(scores.rows, grain_for(n), [&](std::size_t begin, std::size_t end) {
    T* scratch = thread_scratch<T>(n + scratch_floats(n));
    for (std::size_t r = begin; r < end; ++r) {
      const T* z = scores.row(r);
      if (!mask.empty()) {
        const std::uint8_t* keep = mask.row(r);
        for (std::size_t j = 0; j < n; ++j) scratch[j] = keep[j] ? z[j] : -std::numeric_limits<T>::infinity();
        z = scratch;
      }
      kernel(z, probs.row(r), n, params_of(r), scratch + n);
    }
  });
}

// forward_rows for a kernel that takes kRowBatch rows at once (ForwardRows),
// used where n <= kShortRow. Masked rows are copied into scratch first.
template <class Params>
void forward_row_batches(const char* op, ConstMatrix<float> scores, MatrixView<float> probs, MaskView mask,
                         ForwardRows kernel, Params params_of) {
  check_forward_args<float>(op, scores, probs, mask);
  const std::size_t n = scores.cols, batches = (scores.rows + kRowBatch - 1) / kRowBatch;
  parallel_for(batches, grain_for(kRowBatch * n), [&](std::size_t begin, std::size_t end) {
    float* const copies = thread_scratch<float>(kRowBatch * n + short_rows_scratch(n));
    float* const scratch = copies + kRowBatch * n;
    const float* z[kRowBatch];
    float* p[kRowBatch];
    for (std::size_t b = begin; b < end; ++b) {
      const std::size_t first = b * kRowBatch, count = std::min(kRowBatch, scores.rows - first);
      for (std::size_t r = 0; r < count; ++r) {
        z[r] = scores.row(first + r);
        p[r] = probs.row(first + r);
        if (!mask.empty()) {
          const std::uint8_t* keep = mask.row(first + r);
          float* copy = copies + r * n;
          for (std::size_t j = 0; j < n; ++j) copy[j] = keep[j] ? z[r][j] : -std::numeric_limits<float>::infinity();
          z[r] = copy;
        }
      }
      kernel(z, p, count, n, params_of(first), scratch);
    }
  });
}

// The row loop of a backward transform: grad_scores[r] = kernel(probs[r], grad_probs[r]).
// grad_scores may alias probs or grad_probs, so anything else computed from
// them (a parameter's gradient) must be computed before backward_rows runs,
// after check_backward_args.
template <class T>
void check_backward_args(const char* op, ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores,
                         bool values = true) {
  check_shape(op, "grad_probs", grad_probs, probs.rows, probs.cols);
  check_shape(op, "grad_scores", grad_scores, probs.rows, probs.cols);
  check_nonempty(op, "probs", probs);
  if (values) check_finite<T>(op, "grad_probs", grad_probs);
}

template <class T, class Kernel>
void backward_rows(const char* op, ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores,
                   Kernel kernel, const RowParams& params) {
  check_backward_args<T>(op, probs, grad_probs, grad_scores);
  const std::size_t n = probs.cols;
  parallel_for(probs.rows, grain_for(n), [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) kernel(probs.row(r), grad_probs.row(r), grad_scores.row(r), n, params);
  });
}

}  // namespace entgraph::detail
