// Test support for batched attention (entgraph/batched_attention.hpp):
// (batch, heads, rows, cols) tensors in three layouts that own their
// storage, and the rounding tolerance of the 16-bit formats.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "entgraph/batched_attention.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph::test {

// Every transform batched attention takes, with a general alpha below and
// above 2 and top-k.
inline const Transform kBatchedTransforms[] = {Transform::softmax(),    Transform::sparsemax(),
                                               Transform::entmax15(),   Transform::entmax(1.25),
                                               Transform::entmax(3.0), Transform::topk_softmax(4)};

enum class Layout { bhnd, bnhd, padded };

inline const char* layout_name(Layout l) { return l == Layout::bhnd ? "bhnd" : (l == Layout::bnhd ? "bnhd" : "padded"); }

// A (batch, heads, rows, cols) tensor that owns its storage. Every element
// of the storage starts as NaN, so reading a padding element or an unset
// (padded) row shows up as a NaN in the output or an error.
struct Tensor4 {
  DType dtype;
  std::size_t batch, heads, rows, cols;
  std::size_t batch_stride = 0, head_stride = 0, row_stride = 0;
  std::vector<float> f32;
  std::vector<std::uint16_t> h16;

  Tensor4(DType t, std::size_t b, std::size_t h, std::size_t r, std::size_t c, Layout layout)
      : dtype(t), batch(b), heads(h), rows(r), cols(c) {
    switch (layout) {
      case Layout::bhnd:
        row_stride = c;
        head_stride = r * c;
        batch_stride = h * r * c;
        break;
      case Layout::bnhd:
        head_stride = c;
        row_stride = h * c;
        batch_stride = r * h * c;
        break;
      case Layout::padded:  // gaps after every row, head and sequence
        row_stride = c + 3;
        head_stride = r * row_stride + 5;
        batch_stride = h * head_stride + 7;
        break;
    }
    const std::size_t span = (b - 1) * batch_stride + (h - 1) * head_stride + (r - 1) * row_stride + c;
    if (t == DType::float32)
      f32.assign(span, std::numeric_limits<float>::quiet_NaN());
    else
      h16.assign(span, t == DType::bfloat16 ? 0x7fc0 : 0x7e00);
  }

  std::size_t offset(std::size_t b, std::size_t h, std::size_t i, std::size_t c) const {
    return b * batch_stride + h * head_stride + i * row_stride + c;
  }
  void* data() { return dtype == DType::float32 ? static_cast<void*>(f32.data()) : static_cast<void*>(h16.data()); }
  const void* data() const {
    return dtype == DType::float32 ? static_cast<const void*>(f32.data()) : static_cast<const void*>(h16.data());
  }
  BatchedTensor view() { return {data(), dtype, batch, heads, rows, cols, batch_stride, head_stride, row_stride}; }
  ConstBatchedTensor cview() const {
    return {data(), dtype, batch, heads, rows, cols, batch_stride, head_stride, row_stride};
  }
  // The element as the call reads it (exact widening).
  double get(std::size_t b, std::size_t h, std::size_t i, std::size_t c) const {
    const std::size_t o = offset(b, h, i, c);
    switch (dtype) {
      case DType::float32:
        return f32[o];
      case DType::bfloat16:
        return bfloat16_to_float(h16[o]);
      case DType::float16:
        return float16_to_float(h16[o]);
    }
    return 0;
  }
  // Stores x rounded to the dtype.
  void set(std::size_t b, std::size_t h, std::size_t i, std::size_t c, float x) {
    const std::size_t o = offset(b, h, i, c);
    if (dtype == DType::float32)
      f32[o] = x;
    else
      h16[o] = dtype == DType::bfloat16 ? float_to_bfloat16(x) : float_to_float16(x);
  }
  // Bitwise (NaN == NaN here).
  bool same_bits(const Tensor4& o) const {
    return f32.size() == o.f32.size() && h16 == o.h16 &&
           (f32.empty() || std::memcmp(f32.data(), o.f32.data(), f32.size() * sizeof(float)) == 0);
  }
};

// Half a unit in the last place of the format at |y|: one rounding.
inline double half_ulp(DType t, double y) {
  if (t == DType::float32) return 0.0;  // float32 rounding is inside the float32 tolerance
  const int bits = t == DType::bfloat16 ? 8 : 11;
  int e;
  std::frexp(std::max(std::abs(y), t == DType::float16 ? std::ldexp(1.0, -14) : 1e-300), &e);
  return std::ldexp(1.0, e - bits - 1);
}

// Elements of t's storage outside its view (the gaps of the padded layout)
// that no longer hold NaN: a call wrote where it must not.
inline std::size_t touched_gaps(const Tensor4& t) {
  const std::size_t size = t.f32.size() + t.h16.size();
  std::vector<bool> in_view(size, false);
  for (std::size_t b = 0; b < t.batch; ++b)
    for (std::size_t h = 0; h < t.heads; ++h)
      for (std::size_t i = 0; i < t.rows; ++i)
        for (std::size_t c = 0; c < t.cols; ++c) in_view[t.offset(b, h, i, c)] = true;
  std::size_t touched = 0;
  for (std::size_t x = 0; x < size; ++x) {
    if (in_view[x]) continue;
    const double value = t.dtype == DType::float32    ? t.f32[x]
                         : t.dtype == DType::bfloat16 ? bfloat16_to_float(t.h16[x])
                                                      : float16_to_float(t.h16[x]);
    touched += !std::isnan(value);
  }
  return touched;
}

}  // namespace entgraph::test
