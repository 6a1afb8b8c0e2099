// The C API on DLPack tensors (eg_dl_tensor, DLTensor's layout): each tensor
// becomes a view and its device a (Device, Memory) pair, then the core's
// Device ops run as for eg_matrix; nothing is copied.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "c_api/c_api_types.hpp"
#include "entgraph/batched_attention.hpp"

namespace entgraph::c_api {
namespace {

// DLPack's type codes this layer reads.
constexpr std::uint8_t kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6;

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

std::string dims_text(const std::int64_t* x, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(x[i]);
  return s + "]";
}

// A 4-D (batch, heads, rows, cols) tensor of float32, bfloat16 or float16
// as a batched view; strides NULL (row-major) or in elements, the last 1.
// The C++ call checks that the strides nest and the addresses fit.
BatchedTensor tensor4_of(const char* fn, const char* name, const eg_dl_tensor* t) {
  require(fn, t, name);
  const std::string arg(name);
  BatchedTensor v;
  const eg_dl_dtype dt = t->dtype;
  if (dt.lanes == 1 && dt.code == kDLFloat && dt.bits == 32)
    v.dtype = DType::float32;
  else if (dt.lanes == 1 && dt.code == kDLBfloat && dt.bits == 16)
    v.dtype = DType::bfloat16;
  else if (dt.lanes == 1 && dt.code == kDLFloat && dt.bits == 16)
    v.dtype = DType::float16;
  else
    throw Error(at_op(fn) + cpp_name(arg + ".dtype") + " is not float32, bfloat16 or float16 (got code " +
                std::to_string(dt.code) + ", " + std::to_string(dt.bits) + " bits, " + std::to_string(dt.lanes) +
                " lanes)");
  if (t->ndim != 4)
    throw Error(at_op(fn) + cpp_name(arg + ".ndim") + " must be 4, (batch, heads, rows, cols) (got " +
                std::to_string(t->ndim) + ")");
  require(fn, t->shape, (arg + ".shape").c_str());
  for (int i = 0; i < 4; ++i)
    if (t->shape[i] < 0)
      throw Error(at_op(fn) + cpp_name(arg + ".shape") + " has a negative size (got " + dims_text(t->shape, 4) + ")");
  // Row-major strides, packed from the inside out (no overflow: checked).
  std::uint64_t strides[4] = {0, 0, 0, 1};
  for (int i = 2; i >= 0; --i) {
    const auto size = static_cast<std::uint64_t>(t->shape[i + 1]);
    if (size != 0 && strides[i + 1] > UINT64_MAX / size)
      throw Error(at_op(fn) + cpp_name(arg + ".shape") + " is too large to be packed (got " + dims_text(t->shape, 4) +
                  ")");
    strides[i] = strides[i + 1] * size;
  }
  if (t->strides != nullptr) {
    for (int i = 0; i < 4; ++i)
      if (t->strides[i] < 0)
        throw Error(at_op(fn) + cpp_name(arg + ".strides") + " has a negative stride (got " +
                    dims_text(t->strides, 4) + ")");
    if (t->shape[3] > 1 && t->strides[3] != 1)
      throw Error(at_op(fn) + cpp_name(arg + ".strides") + ": the last stride must be 1 (got " +
                  dims_text(t->strides, 4) + ")");
    for (int i = 0; i < 3; ++i) strides[i] = static_cast<std::uint64_t>(t->strides[i]);
  }
  require(fn, t->data, (arg + ".data").c_str());
  v.data = static_cast<unsigned char*>(t->data) + t->byte_offset;
  v.batch = static_cast<std::size_t>(t->shape[0]);
  v.heads = static_cast<std::size_t>(t->shape[1]);
  v.rows = static_cast<std::size_t>(t->shape[2]);
  v.cols = static_cast<std::size_t>(t->shape[3]);
  v.batch_stride = static_cast<std::size_t>(strides[0]);
  v.head_stride = static_cast<std::size_t>(strides[1]);
  v.row_stride = static_cast<std::size_t>(strides[2]);
  return v;
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

eg_status eg_attention_forward_dlpack(const eg_dl_tensor* q, const eg_dl_tensor* k, const eg_dl_tensor* v,
                                      const eg_dl_tensor* out, const eg_attention_options* options) {
  return guard(__func__, [&](const char* fn) {
    const Place p = common_place(fn, "q", q, {{"k", k}, {"v", v}, {"out", out}});
    attention_forward(p.device, p.memory, view_of<const float>(fn, "q", q, kDLFloat),
                      view_of<const float>(fn, "k", k, kDLFloat), view_of<const float>(fn, "v", v, kDLFloat),
                      view_of<float>(fn, "out", out, kDLFloat), to_attention_options(fn, options));
  });
}

eg_status eg_graph_attention_forward_dlpack(const eg_dl_tensor* q, const eg_dl_tensor* k, const eg_dl_tensor* v,
                                            const eg_graph* graph, const eg_dl_tensor* out,
                                            const eg_graph_attention_options* options) {
  return guard(__func__, [&](const char* fn) {
    const Place p = common_place(fn, "q", q, {{"k", k}, {"v", v}, {"out", out}});
    graph_attention_forward(p.device, p.memory, view_of<const float>(fn, "q", q, kDLFloat),
                            view_of<const float>(fn, "k", k, kDLFloat), view_of<const float>(fn, "v", v, kDLFloat),
                            graph_of(fn, graph, "graph"), view_of<float>(fn, "out", out, kDLFloat),
                            to_graph_attention_options(fn, options));
  });
}

eg_status eg_batched_attention_forward_dlpack(const eg_dl_tensor* q, const eg_dl_tensor* k, const eg_dl_tensor* v,
                                              const eg_dl_tensor* out, const eg_batched_attention_options* options) {
  return guard(__func__, [&](const char* fn) {
    const Place p = common_place(fn, "q", q, {{"k", k}, {"v", v}, {"out", out}});
    batched_attention_forward(p.device, p.memory, as_const(tensor4_of(fn, "q", q)), as_const(tensor4_of(fn, "k", k)),
                              as_const(tensor4_of(fn, "v", v)), tensor4_of(fn, "out", out),
                              to_batched_options(fn, options));
  });
}

}  // extern "C"
