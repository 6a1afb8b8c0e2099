// The C API on DLPack tensors (eg_dl_tensor, DLTensor's layout): each tensor
// becomes a view and its device a (Device, Memory) pair, then the core's
// Device ops run as for eg_matrix; nothing is copied.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "c_api/c_api_types.hpp"

namespace entgraph::c_api {
namespace {

// DLPack's type codes this layer reads.
constexpr std::uint8_t kDLUInt = 1, kDLFloat = 2, kDLBool = 6;

struct Place {
  Device device;
  Memory memory;
  std::int32_t id;
};

Place place_of(const char* fn, const char* name, const eg_dl_tensor& t) {
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
Place common_place(const char* fn, const char* first_name, const eg_dl_tensor* first,
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

}  // namespace
}  // namespace entgraph::c_api

using namespace entgraph;
using namespace entgraph::c_api;

extern "C" {

eg_status eg_transform_forward_dlpack(const eg_transform* transform, const eg_dl_tensor* scores,
                                      const eg_dl_tensor* probs, const eg_dl_tensor* mask) {
  return guard(__func__, [&](const char* fn) {
    const Place p = common_place(fn, "scores", scores, {{"probs", probs}, {"mask", mask}});
    const MaskView mask_view =
        mask == nullptr ? MaskView{} : view_of<const std::uint8_t>(fn, "mask", mask, kDLUInt, kDLBool);
    transform_forward(p.device, p.memory, to_transform(fn, transform), view_of<const float>(fn, "scores", scores, kDLFloat),
                      view_of<float>(fn, "probs", probs, kDLFloat), mask_view);
  });
}

eg_status eg_transform_backward_dlpack(const eg_transform* transform, const eg_dl_tensor* probs,
                                       const eg_dl_tensor* grad_probs, const eg_dl_tensor* grad_scores) {
  return guard(__func__, [&](const char* fn) {
    const Place p = common_place(fn, "probs", probs, {{"grad_probs", grad_probs}, {"grad_scores", grad_scores}});
    transform_backward(p.device, p.memory, to_transform(fn, transform),
                       view_of<const float>(fn, "probs", probs, kDLFloat),
                       view_of<const float>(fn, "grad_probs", grad_probs, kDLFloat),
                       view_of<float>(fn, "grad_scores", grad_scores, kDLFloat));
  });
}

}  // extern "C"
