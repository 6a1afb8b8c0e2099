// entgraph: batched attention over (batch, heads, rows, cols) tensors in
// float32, bfloat16 or float16, as models call it.
//
// For each sequence b < batch and query head h < Hq:
//   S = scale Q[b, h] K[b, g]^T,  P = pi(S) row by row,  O[b, h] = P V[b, g],
// where g = h / (Hq / Hkv) is the key/value head that query head h shares
// (grouped-query attention; Hq must be a multiple of Hkv; Hkv = Hq is plain
// multi-head attention, Hkv = 1 multi-query attention). pi is softmax,
// sparsemax, entmax15, entmax(alpha) or topk_softmax(k) (transforms.hpp).
//
// Tensors are views with element strides: element (b, h, i, c) is at
// data[b * batch_stride + h * head_stride + i * row_stride + c] (columns are
// contiguous). PyTorch's [B, H, n, d] contiguous layout is
// bhnd(...), [B, n, H, d] (SDPA's input before its transpose, FlashAttention's
// layout) is bnhd(...).
//
// dtype: q, k and v share one dtype; out has that dtype or float32 (16-bit
// inputs with a float32 output skip the output's rounding: the output the
// GPU path's exactness is stated for, docs/CUDA.md). bfloat16 and float16
// are read exactly (widened to float32); products are accumulated in float32
// (the CPU runs the float32 attention path of attention.hpp on each head);
// the output is rounded once, to nearest even, into out's dtype (a value that
// float32 rounding pushed past the format's largest finite one gives that
// value: the exact output is a weighted mean of v's entries).
//
// Per-sequence lengths (variable-length batches, padded to n and m):
// query_lengths[b] in [0, n] valid queries, key_lengths[b] in [0, m] valid
// keys. Query rows i >= query_lengths[b] of out are written as zeros, keys
// j >= key_lengths[b] are invisible to every query. causal applies the rule
// of heads.hpp per sequence: key j is visible to query i iff
// j <= i + (m_b - n_b) (the queries are the last n_b positions of the m_b
// keys). A query that sees no key gets a zero row.
//
// Threads: the CPU runs (sequence, head) pairs on the thread pool
// (runtime.hpp); results do not depend on the thread count.
//
// Errors (entgraph::Error naming the argument; nothing is written when one
// is thrown): a null data pointer, a dtype outside DType, data not aligned
// to its dtype, a zero size (batch, heads, n, m, d, dv), shapes that
// disagree (batch, d between Q and K, m between K and V, dv between V and
// out, Hkv between K and V, Hq and n between Q and out), Hq not a multiple
// of Hkv, a row_stride below cols, views whose elements may overlap (the
// dimensions ordered by stride must nest: each stride at least the extent
// of the smaller ones, as in every contiguous or row-padded bhnd or bnhd
// view), strides reaching past the end of the address space, out's memory
// range (first element to last) overlapping an input's, mixed dtypes (k or v
// unlike q, out neither q's dtype nor float32), a
// length outside its range, NaN or inf in Q, K or V (within the valid
// lengths), scores or outputs that may overflow float32 (as in
// attention.hpp), a non-finite scale, transform parameters out of range,
// transforms with extra inputs (adaptive span, constrained).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "entgraph/device.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph {

enum class DType : std::uint8_t { float32, bfloat16, float16 };

// "float32", "bfloat16", "float16"; parse_dtype also accepts "f32", "bf16",
// "f16", "fp16", "fp32" and throws entgraph::Error naming the accepted names.
const char* dtype_name(DType dtype);
DType parse_dtype(const std::string& name);
// Bytes of one element: 4, 2, 2.
std::size_t dtype_size(DType dtype);

// Exact widening, and rounding to nearest even (overflow to +-inf, NaN stays
// NaN) of the 16-bit formats, bit patterns as uint16.
float bfloat16_to_float(std::uint16_t bits);
std::uint16_t float_to_bfloat16(float x);
float float16_to_float(std::uint16_t bits);
std::uint16_t float_to_float16(float x);

// A (batch, heads, rows, cols) view; strides are in elements.
template <class Ptr>
struct BatchedTensorView {
  Ptr data = nullptr;
  DType dtype = DType::float32;
  std::size_t batch = 0, heads = 0, rows = 0, cols = 0;
  std::size_t batch_stride = 0, head_stride = 0, row_stride = 0;

  // Contiguous [batch, heads, rows, cols] (PyTorch's [B, H, n, d]).
  static BatchedTensorView bhnd(Ptr data, DType dtype, std::size_t batch, std::size_t heads, std::size_t rows,
                                std::size_t cols) {
    return {data, dtype, batch, heads, rows, cols, heads * rows * cols, rows * cols, cols};
  }
  // Contiguous [batch, rows, heads, cols] (PyTorch's [B, n, H, d]).
  static BatchedTensorView bnhd(Ptr data, DType dtype, std::size_t batch, std::size_t heads, std::size_t rows,
                                std::size_t cols) {
    return {data, dtype, batch, heads, rows, cols, rows * heads * cols, cols, heads * cols};
  }
};
using BatchedTensor = BatchedTensorView<void*>;
using ConstBatchedTensor = BatchedTensorView<const void*>;
inline ConstBatchedTensor as_const(const BatchedTensor& t) {
  return {t.data, t.dtype, t.batch, t.heads, t.rows, t.cols, t.batch_stride, t.head_stride, t.row_stride};
}

struct BatchedAttentionOptions {
  Transform transform = Transform::entmax15();
  double scale = 0.0;  // 0 means 1 / sqrt(d)
  bool causal = false;
  // batch values each, optional (null: every sequence has all n queries / m
  // keys). Host memory here; device memory in entgraph::cuda's own entry point.
  const std::int32_t* query_lengths = nullptr;
  const std::int32_t* key_lengths = nullptr;
};

// out = attention(q, k, v) as above. q: (B, Hq, n, d), k: (B, Hkv, m, d),
// v: (B, Hkv, m, dv), out: (B, Hq, n, dv).
void batched_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                               const BatchedAttentionOptions& options);

// The same on `device` (host memory): checked in the core as above, then run
// there (CUDA: tensor cores for bfloat16 and float16).
void batched_attention_forward(Device device, ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                               BatchedTensor out, const BatchedAttentionOptions& options);
// The same with the tensors and the lengths in `memory` (device.hpp).
// Memory::device: q, k, v, out, options.query_lengths and key_lengths lie in
// the device's memory and nothing is copied; the core checks shapes,
// strides, addresses and parameters, and the device's kernel reads the
// lengths and scans the values, with the CPU's messages
// (check_batched_attention_values, backend.hpp). Device::cpu takes host
// memory either way.
void batched_attention_forward(Device device, Memory memory, ConstBatchedTensor q, ConstBatchedTensor k,
                               ConstBatchedTensor v, BatchedTensor out, const BatchedAttentionOptions& options);

// The gradients of batched attention: given dL/dout (grad_out, (B, Hq, n,
// dv)), writes dL/dq (grad_q, (B, Hq, n, d)), dL/dk (grad_k, (B, Hkv, m, d))
// and dL/dv (grad_v, (B, Hkv, m, dv)) of out = attention(q, k, v) as
// batched_attention_forward defines it (same options; the forward is
// recomputed, nothing is saved between the calls).
//
// A key/value head's gradients sum over the query heads that share it
// (grouped-query attention), in float32, in the order of the query heads,
// and are rounded once into their dtype. Each head's gradients are those of
// attention_backward<float> on the head's widened valid rows
// (attention.hpp), so float32 tensors get its bits. Rows past a sequence's
// lengths (query rows i >= query_lengths[b] of grad_q, key rows j >=
// key_lengths[b] of grad_k and grad_v) are written as zeros, as are the
// gradients of a sequence without queries or without keys.
//
// dtype: q, k, v as in the forward; grad_out and each gradient have q's
// dtype or float32 (each its own choice). 16-bit gradients are rounded to
// nearest even, and a gradient past the format's range becomes +-inf (as
// PyTorch's conversions do: a mixed-precision loss scaler looks for it);
// grad_out's entries are widened exactly.
//
// Errors: those of the forward for q, k, v and the options; grad_out and the
// gradients are checked like out (data, dtype, shape against q, k and v,
// strides); no gradient may share memory with an input (grad_out included)
// or with another gradient; NaN or inf in grad_out's valid rows. Nothing is
// written when one is thrown.
void batched_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                BatchedTensor grad_v, const BatchedAttentionOptions& options);
// The same on `device` (host memory): checked in the core, then run by the
// device's kernel (BackendKernels::batched_attention_backward; a device
// without one refuses the call). Device::cpu runs the function above.
void batched_attention_backward(Device device, ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                BatchedTensor grad_v, const BatchedAttentionOptions& options);
// The same with the tensors and lengths in `memory`, as the forward.
void batched_attention_backward(Device device, Memory memory, ConstBatchedTensor q, ConstBatchedTensor k,
                                ConstBatchedTensor v, ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                BatchedTensor grad_k, BatchedTensor grad_v, const BatchedAttentionOptions& options);

// The checks above alone (for backends' own entry points, which call it
// before they launch anything). `op` names the caller in messages.
// check_values = false skips every check that reads the memory of the
// tensors or of the lengths (NaN/inf, score and value ranges, the lengths'
// values), for device pointers; shapes, strides and addresses are checked.
void check_batched_attention(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                             const BatchedAttentionOptions& options, const char* op, bool check_values = true);
// The backward's checks alone, as check_batched_attention.
void check_batched_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                      ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                      BatchedTensor grad_v, const BatchedAttentionOptions& options, const char* op,
                                      bool check_values = true);

}  // namespace entgraph
