// libentgraph_cuda_ctypes.so: entgraph::cuda::batched_attention_forward and
// batched_attention_backward for Python's ctypes on tensors that already
// live on the GPU (torch tensors' data_ptr()), with no copies:
// tools/gpu_peers.py calls them. A flat C signature, so that a caller needs
// no C++ ABI; every exception becomes a status code and a message kept per
// thread.
//
// Dtype codes: 0 float32, 1 bfloat16, 2 float16. Transform codes: 0 softmax,
// 1 sparsemax, 2 entmax15, 3 entmax(alpha). Status: 0 success, 1 an argument
// the contract refuses (entgraph::Error), 2 a CUDA error (CudaError), 3 out
// of memory, 4 anything else. Strides are in elements, three per tensor:
// batch, head, row (columns are contiguous).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "entgraph/batched_attention.hpp"
#include "entgraph/cuda/batched_attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/error.hpp"

namespace {

thread_local std::string last_error;

// A failing call's message; storing it must not throw out of a C function.
void set_last_error(const char* a, const char* b = "") noexcept {
  try {
    last_error.assign(a).append(b);
  } catch (...) {
    last_error.clear();
  }
}

int fail_current_exception(const char* function) noexcept {
  try {
    throw;
  } catch (const entgraph::cuda::CudaError& e) {  // before Error: it is one
    set_last_error(e.what());
    return 2;
  } catch (const entgraph::Error& e) {
    set_last_error(e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    set_last_error(function, ": out of memory");
    return 3;
  } catch (const std::exception& e) {
    set_last_error(function, ": internal error: ");
    try {
      last_error.append(e.what());
    } catch (...) {
    }
    return 4;
  } catch (...) {
    set_last_error(function, ": internal error: unknown exception");
    return 4;
  }
}

entgraph::DType dtype_from_code(int code, const char* what, const char* function) {
  switch (code) {
    case 0:
      return entgraph::DType::float32;
    case 1:
      return entgraph::DType::bfloat16;
    case 2:
      return entgraph::DType::float16;
  }
  throw entgraph::Error(std::string(function) + ": " + what + " dtype code " + std::to_string(code) +
                        " is not 0 (float32), 1 (bfloat16) or 2 (float16)");
}

entgraph::Transform transform_from_code(int code, double alpha, const char* function) {
  switch (code) {
    case 0:
      return entgraph::Transform::softmax();
    case 1:
      return entgraph::Transform::sparsemax();
    case 2:
      return entgraph::Transform::entmax15();
    case 3:
      return entgraph::Transform::entmax(alpha);
  }
  throw entgraph::Error(std::string(function) + ": transform code " + std::to_string(code) +
                        " is not 0 (softmax), 1 (sparsemax), 2 (entmax15) or 3 (entmax(alpha))");
}

std::size_t to_size(std::int64_t value, const char* tensor, const char* what, const char* function) {
  if (value < 0)
    throw entgraph::Error(std::string(function) + ": " + tensor + "'s " + what + " is negative (" +
                          std::to_string(value) + ")");
  return static_cast<std::size_t>(value);
}

template <class Ptr>
entgraph::BatchedTensorView<Ptr> view(Ptr data, entgraph::DType dtype, std::int64_t batch, std::int64_t heads,
                                      std::int64_t rows, std::int64_t cols, const std::int64_t* strides,
                                      const char* name, const char* function) {
  if (strides == nullptr) throw entgraph::Error(std::string(function) + ": " + name + "'s strides are null");
  return {data,
          dtype,
          to_size(batch, name, "batch", function),
          to_size(heads, name, "heads", function),
          to_size(rows, name, "rows", function),
          to_size(cols, name, "cols", function),
          to_size(strides[0], name, "batch stride", function),
          to_size(strides[1], name, "head stride", function),
          to_size(strides[2], name, "row stride", function)};
}

// q, k, v (all in `dtype`) and the options, as both directions take them.
struct Inputs {
  entgraph::ConstBatchedTensor q, k, v;
  entgraph::BatchedAttentionOptions options;
};

Inputs make_inputs(const char* function, int dtype, const void* q, const void* k, const void* v, std::int64_t batch,
                   std::int64_t heads_q, std::int64_t heads_kv, std::int64_t n, std::int64_t m, std::int64_t d,
                   std::int64_t dv, const std::int64_t* q_strides, const std::int64_t* k_strides,
                   const std::int64_t* v_strides, int transform, double alpha, double scale, int causal,
                   const std::int32_t* query_lengths, const std::int32_t* key_lengths) {
  const entgraph::DType in = dtype_from_code(dtype, "input", function);
  Inputs c;
  c.q = view<const void*>(q, in, batch, heads_q, n, d, q_strides, "q", function);
  c.k = view<const void*>(k, in, batch, heads_kv, m, d, k_strides, "k", function);
  c.v = view<const void*>(v, in, batch, heads_kv, m, dv, v_strides, "v", function);
  c.options.transform = transform_from_code(transform, alpha, function);
  c.options.scale = scale;
  c.options.causal = causal != 0;
  c.options.query_lengths = query_lengths;
  c.options.key_lengths = key_lengths;
  return c;
}

// A tensor the call writes (out, a gradient), in its own dtype code: it may
// differ from the inputs' here; whether that is allowed is the contract's
// decision (it names the reason when it refuses).
entgraph::BatchedTensor output_view(void* data, int dtype, std::int64_t batch, std::int64_t heads, std::int64_t rows,
                                    std::int64_t cols, const std::int64_t* strides, const char* name,
                                    const char* function) {
  return view<void*>(data, dtype_from_code(dtype, name, function), batch, heads, rows, cols, strides, name, function);
}

}  // namespace

extern "C" {

// The message of this thread's last failing call ("" if none failed yet).
const char* entgraph_cuda_last_error(void) { return last_error.c_str(); }

// Device scratch bytes that entgraph_cuda_batched_attention needs for these
// arguments (written to *bytes), so that a caller can allocate it once.
int entgraph_cuda_batched_attention_workspace(int dtype, int out_dtype, std::int64_t batch, std::int64_t heads_q,
                                              std::int64_t heads_kv, std::int64_t n, std::int64_t m, std::int64_t d,
                                              std::int64_t dv, const std::int64_t* q_strides,
                                              const std::int64_t* k_strides, int transform, double alpha, int causal,
                                              std::size_t* bytes) {
  try {
    if (bytes == nullptr) throw entgraph::Error("entgraph_cuda_batched_attention_workspace: bytes is null");
    const char* function = "entgraph_cuda_batched_attention_workspace";
    // Only shapes matter here; data pointers are never read.
    const std::int64_t no_strides[3] = {0, 0, 0};
    const Inputs c = make_inputs(function, dtype, nullptr, nullptr, nullptr, batch, heads_q, heads_kv, n, m, d, dv,
                                 q_strides, k_strides, no_strides, transform, alpha, 0.0, causal, nullptr, nullptr);
    dtype_from_code(out_dtype, "output", function);
    *bytes = entgraph::cuda::batched_attention_workspace_bytes(c.q, c.k, c.options);
    return 0;
  } catch (...) {
    return fail_current_exception("entgraph_cuda_batched_attention_workspace");
  }
}

// out = attention(q, k, v) on device pointers, asynchronous on `stream`
// (a cudaStream_t; null: the legacy default stream). workspace: device
// scratch of workspace_bytes, or null to allocate it per call.
int entgraph_cuda_batched_attention(int dtype, int out_dtype, const void* q, const void* k, const void* v, void* out,
                                    std::int64_t batch, std::int64_t heads_q, std::int64_t heads_kv, std::int64_t n,
                                    std::int64_t m, std::int64_t d, std::int64_t dv, const std::int64_t* q_strides,
                                    const std::int64_t* k_strides, const std::int64_t* v_strides,
                                    const std::int64_t* out_strides, int transform, double alpha, double scale,
                                    int causal, const std::int32_t* query_lengths, const std::int32_t* key_lengths,
                                    void* workspace, std::size_t workspace_bytes, void* stream) {
  try {
    const char* function = "entgraph_cuda_batched_attention";
    const Inputs c = make_inputs(function, dtype, q, k, v, batch, heads_q, heads_kv, n, m, d, dv, q_strides, k_strides,
                                 v_strides, transform, alpha, scale, causal, query_lengths, key_lengths);
    const entgraph::BatchedTensor o = output_view(out, out_dtype, batch, heads_q, n, dv, out_strides, "out", function);
    entgraph::cuda::batched_attention_forward(c.q, c.k, c.v, o, c.options, workspace, workspace_bytes,
                                              static_cast<cudaStream_t>(stream));
    return 0;
  } catch (...) {
    return fail_current_exception("entgraph_cuda_batched_attention");
  }
}

// grad_q, grad_k, grad_v = the gradients of out = attention(q, k, v) for
// grad_out, on device pointers, asynchronous on `stream` (the forward is
// recomputed; the library allocates its scratch on the stream). q, k, v and
// grad_out are in `dtype` (grad_out in q's, as the GPU requires); each
// gradient has its own dtype code (q's or float32). grad_k and grad_v have
// k's and v's heads (a shared head's gradients sum over its query heads).
int entgraph_cuda_batched_attention_backward(
    int dtype, int grad_q_dtype, int grad_k_dtype, int grad_v_dtype, const void* q, const void* k, const void* v,
    const void* grad_out, void* grad_q, void* grad_k, void* grad_v, std::int64_t batch, std::int64_t heads_q,
    std::int64_t heads_kv, std::int64_t n, std::int64_t m, std::int64_t d, std::int64_t dv,
    const std::int64_t* q_strides, const std::int64_t* k_strides, const std::int64_t* v_strides,
    const std::int64_t* grad_out_strides, const std::int64_t* grad_q_strides, const std::int64_t* grad_k_strides,
    const std::int64_t* grad_v_strides, int transform, double alpha, double scale, int causal,
    const std::int32_t* query_lengths, const std::int32_t* key_lengths, void* stream) {
  try {
    const char* function = "entgraph_cuda_batched_attention_backward";
    const Inputs c = make_inputs(function, dtype, q, k, v, batch, heads_q, heads_kv, n, m, d, dv, q_strides, k_strides,
                                 v_strides, transform, alpha, scale, causal, query_lengths, key_lengths);
    const entgraph::ConstBatchedTensor go =
        view<const void*>(grad_out, c.q.dtype, batch, heads_q, n, dv, grad_out_strides, "grad_out", function);
    const entgraph::BatchedTensor gq =
        output_view(grad_q, grad_q_dtype, batch, heads_q, n, d, grad_q_strides, "grad_q", function);
    const entgraph::BatchedTensor gk =
        output_view(grad_k, grad_k_dtype, batch, heads_kv, m, d, grad_k_strides, "grad_k", function);
    const entgraph::BatchedTensor gv =
        output_view(grad_v, grad_v_dtype, batch, heads_kv, m, dv, grad_v_strides, "grad_v", function);
    entgraph::cuda::batched_attention_backward(c.q, c.k, c.v, go, gq, gk, gv, c.options,
                                               static_cast<cudaStream_t>(stream));
    return 0;
  } catch (...) {
    return fail_current_exception("entgraph_cuda_batched_attention_backward");
  }
}

}  // extern "C"
