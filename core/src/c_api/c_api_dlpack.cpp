// The C API on DLPack tensors (c_api_dlpack.hpp): the places and views,
// then the core's Device ops, as for eg_matrix; nothing is copied.
#include "c_api/c_api_dlpack.hpp"

#include <cstdint>
#include <string>

namespace entgraph::c_api {
namespace {

std::string dims_text(const std::int64_t* x, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(x[i]);
  return s + "]";
}

}  // namespace

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

eg_status eg_batched_attention_backward_dlpack(const eg_dl_tensor* q, const eg_dl_tensor* k, const eg_dl_tensor* v,
                                               const eg_dl_tensor* grad_out, const eg_dl_tensor* grad_q,
                                               const eg_dl_tensor* grad_k, const eg_dl_tensor* grad_v,
                                               const eg_batched_attention_options* options) {
  return guard(__func__, [&](const char* fn) {
    const Place p = common_place(fn, "q", q,
                                 {{"k", k}, {"v", v}, {"grad_out", grad_out}, {"grad_q", grad_q}, {"grad_k", grad_k},
                                  {"grad_v", grad_v}});
    batched_attention_backward(p.device, p.memory, as_const(tensor4_of(fn, "q", q)),
                               as_const(tensor4_of(fn, "k", k)), as_const(tensor4_of(fn, "v", v)),
                               as_const(tensor4_of(fn, "grad_out", grad_out)), tensor4_of(fn, "grad_q", grad_q),
                               tensor4_of(fn, "grad_k", grad_k), tensor4_of(fn, "grad_v", grad_v),
                               to_batched_options(fn, options));
  });
}

}  // extern "C"
