// entgraph internal: DLPack tensors (eg_dl_tensor) as the C++ API's views
// and places, for the C API's _dlpack entry points: each tensor becomes a
// view and its device a (Device, Memory) pair; nothing is copied.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "c_api/c_api_types.hpp"
#include "entgraph/batched_attention.hpp"

namespace entgraph::c_api {

// DLPack's type codes this layer reads.
inline constexpr std::uint8_t kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6;

struct Place {
  Device device;
  Memory memory;
  std::int32_t id;
};

inline Place place_of(const char* fn, const char* name, const eg_dl_tensor& t) {
  switch (t.device.device_type) {
    case EG_DL_CPU: return {Device::cpu, Memory::host, t.device.device_id};
    case EG_DL_CUDA: return {Device::cuda, Memory::device, t.device.device_id};
  }
  throw Error(at_op(fn) + cpp_name(std::string(name) + ".device.device_type") + " is not supported (got " +
                  std::to_string(t.device.device_type) + ", expected EG_DL_CPU (1) or EG_DL_CUDA (2))",
              ErrorCode::unsupported);
}

// A 1-D (one row) or 2-D tensor of `code` with `bits` as a rows x cols view.
template <class T>
MatrixView<T> view_of(const char* fn, const char* name, const eg_dl_tensor* t, std::uint8_t code,
                      std::uint8_t alt_code = 255) {
  require(fn, t, name);
  const std::string arg(name);
  if ((t->dtype.code != code && t->dtype.code != alt_code) || t->dtype.bits != 8 * sizeof(T) || t->dtype.lanes != 1)
    throw Error(at_op(fn) + cpp_name(arg + ".dtype") + " is not " + (code == kDLFloat ? "float32" : "uint8 or bool") +
                " (got code " + std::to_string(t->dtype.code) + ", " + std::to_string(t->dtype.bits) + " bits, " +
                std::to_string(t->dtype.lanes) + " lanes)");
  if (t->ndim != 1 && t->ndim != 2)
    throw Error(at_op(fn) + cpp_name(arg + ".ndim") + " must be 1 or 2 (got " + std::to_string(t->ndim) + ")");
  require(fn, t->shape, (arg + ".shape").c_str());
  const std::int64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->shape[t->ndim - 1];
  if (rows < 0 || cols < 0)
    throw Error(at_op(fn) + cpp_name(arg + ".shape") + " has a negative size (got " + std::to_string(rows) + " x " +
                std::to_string(cols) + ")");
  std::int64_t stride = cols;
  if (t->strides != nullptr) {
    if (cols > 1 && t->strides[t->ndim - 1] != 1)
      throw Error(at_op(fn) + cpp_name(arg + ".strides") + ": the last stride must be 1 (got " +
                  std::to_string(t->strides[t->ndim - 1]) + ")");
    if (t->ndim == 2 && rows > 1) stride = t->strides[0];
    if (stride < cols)
      throw Error(at_op(fn) + cpp_name(arg + ".strides") + ": the row stride is below its cols (got " +
                  std::to_string(stride) + ", expected >= " + std::to_string(cols) + ")");
  }
  require(fn, t->data, (arg + ".data").c_str());
  // As an eg_matrix from here: to_view checks that the rows' addresses fit.
  struct {
    T* data;
    std::size_t rows, cols, stride;
  } m{reinterpret_cast<T*>(static_cast<unsigned char*>(t->data) + t->byte_offset), static_cast<std::size_t>(rows),
      static_cast<std::size_t>(cols), static_cast<std::size_t>(stride)};
  return to_view<T>(fn, name, m);
}

// The one place of a call's tensors (mask may be null).
inline Place common_place(const char* fn, const char* first_name, const eg_dl_tensor* first,
                          std::initializer_list<std::pair<const char*, const eg_dl_tensor*>> others) {
  require(fn, first, first_name);
  const Place p = place_of(fn, first_name, *first);
  for (const auto& [name, t] : others) {
    if (t == nullptr) continue;
    const Place q = place_of(fn, name, *t);
    if (q.device != p.device || q.id != p.id)
      throw Error(at_op(fn) + cpp_name(std::string(name) + ".device") + " differs from " + first_name +
                  "'s (got type " + std::to_string(t->device.device_type) + " id " + std::to_string(q.id) +
                  ", expected type " + std::to_string(first->device.device_type) + " id " + std::to_string(p.id) + ")");
  }
  return p;
}

// A 4-D (batch, heads, rows, cols) tensor of float32, bfloat16 or float16
// as a batched view; strides NULL (row-major) or in elements, the last 1.
// The C++ call checks that the strides nest and the addresses fit.
BatchedTensor tensor4_of(const char* fn, const char* name, const eg_dl_tensor* t);

}  // namespace entgraph::c_api
