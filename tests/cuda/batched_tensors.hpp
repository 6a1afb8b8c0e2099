// Batched tensors in host memory for the GPU's batched attention tests:
// any dtype (stored as its bits) and layout, random fills, per-sequence
// lengths, and the 16-bit formats' rounding.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "entgraph/batched_attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/transforms.hpp"
#include "support.hpp"

namespace entgraph::cuda::test_batched {

enum class Layout { bhnd, bnhd, padded };  // padded: bhnd with 8 spare columns per row

inline const char* layout_name(Layout l) { return l == Layout::bhnd ? "bhnd" : l == Layout::bnhd ? "bnhd" : "padded"; }

// A batched tensor in host memory, any dtype and layout.
struct HostTensor {
  DType dtype = DType::float32;
  std::size_t batch = 0, heads = 0, rows = 0, cols = 0;
  std::size_t batch_stride = 0, head_stride = 0, row_stride = 0;
  bool padded = false;  // 8 spare columns per row, which nothing may write
  std::vector<unsigned char> bytes;

  HostTensor(DType t, Layout layout, std::size_t b, std::size_t h, std::size_t r, std::size_t c)
      : dtype(t), batch(b), heads(h), rows(r), cols(c), padded(layout == Layout::padded) {
    switch (layout) {
      case Layout::bhnd:
        row_stride = c, head_stride = r * c, batch_stride = h * r * c;
        break;
      case Layout::bnhd:
        row_stride = h * c, head_stride = c, batch_stride = r * h * c;
        break;
      case Layout::padded:
        row_stride = c + 8, head_stride = r * (c + 8), batch_stride = h * r * (c + 8);
        break;
    }
    bytes.assign(batch * batch_stride * dtype_size(t), 0xff);  // NaN in every dtype
  }
  std::size_t offset(std::size_t b, std::size_t h, std::size_t i, std::size_t c) const {
    return (b * batch_stride + h * head_stride + i * row_stride + c) * dtype_size(dtype);
  }
  double get(std::size_t b, std::size_t h, std::size_t i, std::size_t c) const {
    const unsigned char* p = bytes.data() + offset(b, h, i, c);
    if (dtype == DType::float32) {
      float x;
      std::memcpy(&x, p, 4);
      return x;
    }
    std::uint16_t bits;
    std::memcpy(&bits, p, 2);
    return dtype == DType::bfloat16 ? bfloat16_to_float(bits) : float16_to_float(bits);
  }
  // Rounds x to the dtype (to nearest even).
  void set(std::size_t b, std::size_t h, std::size_t i, std::size_t c, double x) {
    unsigned char* p = bytes.data() + offset(b, h, i, c);
    const float f = static_cast<float>(x);
    if (dtype == DType::float32) {
      std::memcpy(p, &f, 4);
      return;
    }
    const std::uint16_t bits = dtype == DType::bfloat16 ? float_to_bfloat16(f) : float_to_float16(f);
    std::memcpy(p, &bits, 2);
  }
  template <class Ptr>
  BatchedTensorView<Ptr> view(Ptr data) const {
    return {data, dtype, batch, heads, rows, cols, batch_stride, head_stride, row_stride};
  }
};

inline HostTensor random_tensor(DType t, Layout layout, std::size_t b, std::size_t h, std::size_t r, std::size_t c,
                                double scale, std::uint64_t seed) {
  HostTensor x(t, layout, b, h, r, c);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  for (std::size_t bi = 0; bi < b; ++bi)
    for (std::size_t hi = 0; hi < h; ++hi)
      for (std::size_t i = 0; i < r; ++i)
        for (std::size_t ci = 0; ci < c; ++ci) x.set(bi, hi, i, ci, normal(rng));
  return x;
}

// Per-sequence lengths of a call (empty: full).
struct Lengths {
  std::vector<std::int32_t> query, key;
};

inline std::size_t length_of(const std::vector<std::int32_t>& lengths, std::size_t b, std::size_t full) {
  return lengths.empty() ? full : static_cast<std::size_t>(lengths[b]);
}

// Half an ulp of a 16-bit format at |x| (0 for float32).
inline double half_ulp(DType t, double x) {
  if (t == DType::float32 || x == 0.0) return 0.0;
  const int e = std::ilogb(std::abs(x));
  return t == DType::bfloat16 ? std::ldexp(1.0, e - 8) : std::ldexp(1.0, std::max(e, -14) - 11);
}

// Head h of sequence b of t, its first `rows` rows, widened to float64 (the
// oracles' input).
inline test::Matrix<double> head_matrix(const HostTensor& t, std::size_t b, std::size_t h, std::size_t rows) {
  test::Matrix<double> x(rows, t.cols);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t c = 0; c < t.cols; ++c) x(i, c) = t.get(b, h, i, c);
  return x;
}

// Options for the device entry points: the lengths (if any) copied to
// device memory, which the options point at while this lives.
struct DeviceOptions {
  DeviceArray<std::int32_t> query_lengths, key_lengths;
  BatchedAttentionOptions options;
};
inline DeviceOptions device_options(const Transform& t, bool causal, double scale, const Lengths& lengths) {
  DeviceOptions d;
  d.options.transform = t;
  d.options.causal = causal;
  d.options.scale = scale;
  if (!lengths.query.empty()) {
    d.query_lengths = DeviceArray<std::int32_t>(lengths.query.data(), lengths.query.size());
    d.options.query_lengths = d.query_lengths.data();
  }
  if (!lengths.key.empty()) {
    d.key_lengths = DeviceArray<std::int32_t>(lengths.key.data(), lengths.key.size());
    d.options.key_lengths = d.key_lengths.data();
  }
  return d;
}

}  // namespace entgraph::cuda::test_batched
