// entgraph: dense scaled dot-product attention, forward and backward.
//
// One head: Q is n x d (queries), K is m x d (keys), V is m x dv (values),
//   S = scale * Q K^T  (n x m),   P = pi(S) row by row,   O = P V  (n x dv),
// where pi is any transform of transforms.hpp. n != m is allowed.
//
// Memory: S and P are computed in blocks of `block_rows` query rows, so the
// working set is O(block_rows * m), never O(n * m), unless the caller asks
// for P. Blocks run on the thread pool; results are bit-identical for any
// thread count (the backward's key-side sums are reduced in a fixed order).
//
// Masks (combined; a query whose keys are all masked gets a zero output row):
// - causal: key j is visible to query i iff j <= i + (m - n) (queries are the
//   last n positions of the m keys, as in decoding with a cache);
// - key_padding: m flags, 0 marks a padding key that no query may see.
//
// Errors (entgraph::Error naming the argument): shapes that disagree, d = 0,
// n = 0 or m = 0, non-finite scale, NaN/inf in Q, K, V or grad_out, a transform
// parameter out of range, a missing span/upper array for the transforms
// that need one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "entgraph/device.hpp"
#include "entgraph/heads.hpp"  // causal_key_limit, the causal rule above
#include "entgraph/matrix_view.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph {

template <class T>
struct AttentionOptions {
  Transform transform = Transform::entmax15();
  double scale = 0.0;  // 0 means 1 / sqrt(d)
  bool causal = false;
  const std::uint8_t* key_padding = nullptr;  // m flags, optional
  std::size_t block_rows = 64;                // query rows per block, >= 1

  // adaptive_span: span z of each query (n values; repeat one value for a
  // per-head span) and the ramp R. Distances are x = i + (m - n) - j.
  const T* span = nullptr;
  double span_ramp = 32.0;

  // constrained_softmax / constrained_sparsemax: upper bound of each key
  // (m values), shared by every query.
  const T* upper = nullptr;
};

// Gradients of the transform's own parameters, summed over the head's rows.
template <class T>
struct AttentionParamGrads {
  double alpha = 0.0;     // entmax: dL/dalpha
  T* span = nullptr;      // adaptive_span: if set, receives dL/dz per query (n values)
  T* upper = nullptr;     // constrained: if set, receives dL/du per key (m values)
};

// O = pi(scale Q K^T) V. out is n x dv. probs, if not empty, receives P (n x m).
template <class T>
void attention_forward(ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, MatrixView<T> out,
                       const AttentionOptions<T>& options, MatrixView<T> probs = {});

// Given dL/dO (n x dv), writes dL/dQ (n x d), dL/dK (m x d), dL/dV (m x dv),
// recomputing P block by block. params, if not null, receives the transform
// parameters' gradients.
template <class T>
void attention_backward(ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, ConstMatrix<T> grad_out,
                        MatrixView<T> grad_q, MatrixView<T> grad_k, MatrixView<T> grad_v,
                        const AttentionOptions<T>& options, AttentionParamGrads<T>* params = nullptr);

// The same on `device` (entgraph/device.hpp), float32, without probs or
// parameter gradients: checked in the core as above, then run there.
void attention_forward(Device device, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                       MatrixView<float> out, const AttentionOptions<float>& options);
// The forward with its arrays in `memory` (device.hpp). Memory::device: q, k,
// v, out and the options' arrays (key_padding, span, upper) lie in the
// device's memory and nothing is copied; the core checks shapes and
// parameters, the device's kernel scans the values (the CPU's messages).
// Device::cpu takes host memory either way.
void attention_forward(Device device, Memory memory, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                       MatrixView<float> out, const AttentionOptions<float>& options);
void attention_backward(Device device, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                        ConstMatrix<float> grad_out, MatrixView<float> grad_q, MatrixView<float> grad_k,
                        MatrixView<float> grad_v, const AttentionOptions<float>& options);
// The backward with its arrays in `memory`, as attention_forward above
// (the device's kernel scans q, k, v and grad_out).
void attention_backward(Device device, Memory memory, ConstMatrix<float> q, ConstMatrix<float> k,
                        ConstMatrix<float> v, ConstMatrix<float> grad_out, MatrixView<float> grad_q,
                        MatrixView<float> grad_k, MatrixView<float> grad_v, const AttentionOptions<float>& options);

// A contiguous [heads, rows, cols] tensor.
template <class T>
struct HeadsView {
  T* data = nullptr;
  std::size_t heads = 0;
  std::size_t rows = 0;
  std::size_t cols = 0;

  constexpr MatrixView<T> head(std::size_t h) const { return {data + h * rows * cols, rows, cols}; }
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  constexpr HeadsView(const HeadsView<U>& o) : data(o.data), heads(o.heads), rows(o.rows), cols(o.cols) {}  // NOLINT
  constexpr HeadsView() = default;
  constexpr HeadsView(T* d, std::size_t h, std::size_t r, std::size_t c) : data(d), heads(h), rows(r), cols(c) {}
};
template <class T>
using ConstHeads = HeadsView<const typename NonDeduced<T>::type>;

// Multi-head attention over [heads, n, d] Q, [heads, m, d] K, [heads, m, dv] V
// into [heads, n, dv]; every head uses the same options, except that span (if
// used) is read at head * n and upper at head * m. probs, if not empty, is
// [heads, n, m].
template <class T>
void multihead_attention_forward(ConstHeads<T> q, ConstHeads<T> k, ConstHeads<T> v, HeadsView<T> out,
                                 const AttentionOptions<T>& options, HeadsView<T> probs = {});
// grad_alpha, if not null, receives one dL/dalpha per head.
template <class T>
void multihead_attention_backward(ConstHeads<T> q, ConstHeads<T> k, ConstHeads<T> v, ConstHeads<T> grad_out,
                                  HeadsView<T> grad_q, HeadsView<T> grad_k, HeadsView<T> grad_v,
                                  const AttentionOptions<T>& options, double* grad_alpha = nullptr);

}  // namespace entgraph
