// The C API's batched attention (eg_tensor4, eg_batched_attention_forward
// and _backward), block-sparse attention (eg_block_graph) and the 16-bit
// conversions.
#include <cstdint>
#include <limits>
#include <string>

#include "c_api/c_api_types.hpp"
#include "entgraph/batched_attention.hpp"
#include "entgraph/block_sparse_attention.hpp"

namespace entgraph::c_api {
namespace {

// a * b, or an Error naming the argument and what overflows.
std::size_t product(const char* function, const char* name, std::size_t a, std::size_t b,
                    const char* what = "a zero stride's packed size") {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a)
    throw Error(at_op(function) + cpp_name(name) + ": " + what + " overflows (" + std::to_string(a) + " x " +
                std::to_string(b) + ")");
  return a * b;
}

// A C tensor as a view; zero strides become the packed strides (see
// entgraph.h). The C++ call checks everything else.
BatchedTensor to_tensor(const char* function, const char* name, const eg_tensor4* t) {
  require(function, t, name);
  BatchedTensor v;
  switch (const int dtype = enum_value(t->dtype)) {
    case EG_DTYPE_FLOAT32:
      v.dtype = DType::float32;
      break;
    case EG_DTYPE_BFLOAT16:
      v.dtype = DType::bfloat16;
      break;
    case EG_DTYPE_FLOAT16:
      v.dtype = DType::float16;
      break;
    default:
      throw_bad_enum(function, (std::string(name) + "->dtype").c_str(), dtype,
                     "EG_DTYPE_FLOAT32, EG_DTYPE_BFLOAT16 or EG_DTYPE_FLOAT16");
  }
  v.data = t->data;
  v.batch = t->batch;
  v.heads = t->heads;
  v.rows = t->rows;
  v.cols = t->cols;
  v.row_stride = t->row_stride != 0 ? t->row_stride : t->cols;
  v.head_stride = t->head_stride != 0 ? t->head_stride : product(function, name, t->rows, v.row_stride);
  v.batch_stride = t->batch_stride != 0 ? t->batch_stride : product(function, name, t->heads, v.head_stride);
  return v;
}

// A borrowed C block graph copied into a BlockGraph, which the C++ call
// validates. Its shape is checked against q and k first (op: the C++ op's
// name, for its messages), so that no more offsets are read than a shape
// that fits the tensors says.
BlockGraph to_block_graph(const char* function, const eg_block_graph* g, const ConstBatchedTensor& q,
                          const ConstBatchedTensor& k, const char* op) {
  require(function, g, "graph");
  BlockGraph out;
  out.batch = g->batch;
  out.heads = g->heads;
  out.queries = g->queries;
  out.keys = g->keys;
  out.query_block = g->query_block;
  out.key_block = g->key_block;
  check_block_graph_shape(out, q, k, op);
  const char* what = "batch x heads x query blocks";
  const std::size_t rows =
      product(function, "graph", product(function, "graph", out.batch, out.heads, what), out.query_blocks(), what);
  if (rows == std::numeric_limits<std::size_t>::max())
    throw Error(at_op(function) + cpp_name("graph") + ": too many block rows (" + std::to_string(rows) + ")");
  require(function, g->offsets, "graph->offsets");
  out.offsets.assign(g->offsets, g->offsets + rows + 1);
  if (out.offsets.back() > 0) {
    require(function, g->blocks, "graph->blocks");
    out.blocks.assign(g->blocks, g->blocks + out.offsets.back());
  }
  return out;
}

}  // namespace

BatchedAttentionOptions to_batched_options(const char* function, const eg_batched_attention_options* options) {
  BatchedAttentionOptions o;
  if (options == nullptr) return o;
  o.transform = to_transform(function, &options->transform, "options->transform");
  o.scale = options->scale;
  o.causal = options->causal != 0;
  o.query_lengths = options->query_lengths;
  o.key_lengths = options->key_lengths;
  return o;
}

}  // namespace entgraph::c_api

using namespace entgraph;
using namespace entgraph::c_api;

static_assert(sizeof(float) == 4, "eg_tensor4's float32 elements are IEEE single precision");

extern "C" {

eg_batched_attention_options eg_batched_attention_options_default(void) {
  const BatchedAttentionOptions d;  // the C++ defaults, so that both APIs agree
  return {to_c(d.transform), d.scale, d.causal ? 1 : 0, d.query_lengths, d.key_lengths};
}

eg_status eg_batched_attention_forward(eg_device device, const eg_tensor4* q, const eg_tensor4* k, const eg_tensor4* v,
                                       const eg_tensor4* out, const eg_batched_attention_options* options) {
  return guard(__func__, [&](const char* fn) {
    batched_attention_forward(to_device(fn, device), as_const(to_tensor(fn, "q", q)), as_const(to_tensor(fn, "k", k)),
                              as_const(to_tensor(fn, "v", v)), to_tensor(fn, "out", out), to_batched_options(fn, options));
  });
}

eg_status eg_batched_attention_backward(eg_device device, const eg_tensor4* q, const eg_tensor4* k,
                                        const eg_tensor4* v, const eg_tensor4* grad_out, const eg_tensor4* grad_q,
                                        const eg_tensor4* grad_k, const eg_tensor4* grad_v,
                                        const eg_batched_attention_options* options) {
  return guard(__func__, [&](const char* fn) {
    batched_attention_backward(to_device(fn, device), as_const(to_tensor(fn, "q", q)),
                               as_const(to_tensor(fn, "k", k)), as_const(to_tensor(fn, "v", v)),
                               as_const(to_tensor(fn, "grad_out", grad_out)), to_tensor(fn, "grad_q", grad_q),
                               to_tensor(fn, "grad_k", grad_k), to_tensor(fn, "grad_v", grad_v),
                               to_batched_options(fn, options));
  });
}

eg_status eg_block_sparse_attention_forward(eg_device device, const eg_tensor4* q, const eg_tensor4* k,
                                            const eg_tensor4* v, const eg_block_graph* graph, const eg_tensor4* out,
                                            const eg_batched_attention_options* options) {
  return guard(__func__, [&](const char* fn) {
    const ConstBatchedTensor cq = as_const(to_tensor(fn, "q", q)), ck = as_const(to_tensor(fn, "k", k));
    block_sparse_attention_forward(to_device(fn, device), cq, ck, as_const(to_tensor(fn, "v", v)),
                                   to_block_graph(fn, graph, cq, ck, "block_sparse_attention_forward"),
                                   to_tensor(fn, "out", out), to_batched_options(fn, options));
  });
}

eg_status eg_block_sparse_attention_backward(eg_device device, const eg_tensor4* q, const eg_tensor4* k,
                                             const eg_tensor4* v, const eg_block_graph* graph,
                                             const eg_tensor4* grad_out, const eg_tensor4* grad_q,
                                             const eg_tensor4* grad_k, const eg_tensor4* grad_v,
                                             const eg_batched_attention_options* options) {
  return guard(__func__, [&](const char* fn) {
    const ConstBatchedTensor cq = as_const(to_tensor(fn, "q", q)), ck = as_const(to_tensor(fn, "k", k));
    block_sparse_attention_backward(to_device(fn, device), cq, ck, as_const(to_tensor(fn, "v", v)),
                                    to_block_graph(fn, graph, cq, ck, "block_sparse_attention_backward"),
                                    as_const(to_tensor(fn, "grad_out", grad_out)), to_tensor(fn, "grad_q", grad_q),
                                    to_tensor(fn, "grad_k", grad_k), to_tensor(fn, "grad_v", grad_v),
                                    to_batched_options(fn, options));
  });
}

float eg_bfloat16_to_float(uint16_t bits) { return bfloat16_to_float(bits); }
uint16_t eg_float_to_bfloat16(float x) { return float_to_bfloat16(x); }
float eg_float16_to_float(uint16_t bits) { return float16_to_float(bits); }
uint16_t eg_float_to_float16(float x) { return float_to_float16(x); }

}  // extern "C"
