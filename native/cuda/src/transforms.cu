// The row-wise transforms on the GPU, host side: the launches of the kernels
// (transform_kernels.cuh: one thread block per row, grid-stride over rows,
// the row staged in shared memory when it fits) and the device-memory entry
// points, which check their arguments with the core's checks (messages
// prefixed "cuda::") and scan for NaN/+inf first (value_scan.hpp), so a bad
// input leaves every output untouched. The backend's host-memory kernels:
// transforms_backend.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "backend_kernels.hpp"
#include "checks.cuh"
#include "entgraph/backend.hpp"
#include "entgraph/cuda/transforms.hpp"
#include "kernel_launch.cuh"
#include "transform_kernels.cuh"
#include "transform_launch.hpp"
#include "value_scan.hpp"

namespace entgraph::cuda {
namespace {

// ---------------------------------------------------------------------------
// Host side: names, checks, launches.

unsigned threads_for(std::size_t n) {
  const std::size_t warps = (n + detail::kWarpSize - 1) / detail::kWarpSize;
  return static_cast<unsigned>(std::clamp<std::size_t>(warps * detail::kWarpSize, detail::kWarpSize, kMaxThreads));
}

unsigned grid_for(std::size_t rows) { return static_cast<unsigned>(std::min(rows, kMaxGrid)); }

// "cuda::<transform>[_backward]", after checking the kind and its parameters
// with the core's check.
std::string checked_op(const Transform& t, bool backward) {
  const char* entry = backward ? "cuda::transform_backward" : "cuda::transform_forward";
  if (!detail::transform_supported(t.kind))
    throw Error(std::string(entry) + ": " + t.name() +
                " needs extra inputs; the CUDA backend has no kernel for it (expected " +
                transform_names(has_cuda_transform, " or ") + ")");
  const TransformInfo& row = t.info();
  const std::string op = std::string("cuda::") + (backward ? row.backward_name : row.name);
  check_transform_parameters(t, op.c_str(), "t");
  return op;
}

void check_sizes(const std::string& op, const char* arg, std::size_t rows, std::size_t cols) {
  if (cols == 0) throw Error(op + ": " + arg + " rows are empty (got n = 0, expected n >= 1)");
  if (cols > detail::kMaxTransformCols)
    throw Error(op + ": " + arg + " rows are too long (got n = " + std::to_string(cols) +
                ", expected n <= " + std::to_string(detail::kMaxTransformCols) + ")");
  if (rows > std::numeric_limits<std::size_t>::max() / cols)
    throw Error(op + ": " + arg + " is too large (got " + shape_text(rows, cols) + ")");
}

template <class Op>
void launch_forward(const std::string& op_name, Op op, const float* scores, float* probs, const std::uint8_t* mask,
                    std::size_t rows, std::size_t cols, cudaStream_t stream) {
  const unsigned n = static_cast<unsigned>(cols), threads = threads_for(cols), grid = grid_for(rows);
  if (n <= kMaxStagedCols) {
    launch(forward_kernel<true, Op>, grid, threads, n * sizeof(float), stream, scores, probs, mask, rows, n, op);
  } else {
    launch(forward_kernel<false, Op>, grid, threads, 0, stream, scores, probs, mask, rows, n, op);
  }
  check(cudaGetLastError(), (op_name + ": launch").c_str());
}

template <Weight kWeight>
void launch_backward(const std::string& op_name, const float* probs, const float* grad_probs, float* grad_scores,
                     std::size_t rows, std::size_t cols, double exponent, cudaStream_t stream) {
  launch(backward_kernel<kWeight>, grid_for(rows), threads_for(cols), 0, stream, probs, grad_probs, grad_scores, rows,
         static_cast<unsigned>(cols), exponent);
  check(cudaGetLastError(), (op_name + ": launch").c_str());
}

}  // namespace

namespace detail {

bool transform_supported(TransformKind kind) {
  const TransformInfo* row = find_transform_info(kind);
  return row != nullptr && has_cuda_transform(*row);
}

// The forward's launch on arguments already checked (by the device-memory
// entry points below, or by the core's op layer for the backend's kernel).
void launch_transform_forward(const std::string& op, const Transform& t, const float* scores, float* probs,
                              const std::uint8_t* mask, std::size_t rows, std::size_t cols, cudaStream_t stream) {
  if (t.kind == TransformKind::topk_softmax) {
    const unsigned k = static_cast<unsigned>(std::min<std::size_t>(t.k, cols));  // k >= cols keeps all
    return launch_forward(op, TopkRow{k}, scores, probs, mask, rows, cols, stream);
  }
  const double alpha = t.tsallis_alpha();
  if (alpha == 1.0) return launch_forward(op, SoftmaxRow{}, scores, probs, mask, rows, cols, stream);
  if (alpha == 2.0) return launch_forward(op, ExactEntmaxRow<1>{}, scores, probs, mask, rows, cols, stream);
  if (alpha == 1.5) return launch_forward(op, ExactEntmaxRow<2>{}, scores, probs, mask, rows, cols, stream);
  launch_forward(op, EntmaxRow{alpha}, scores, probs, mask, rows, cols, stream);
}

void launch_transform_backward(const std::string& op, const Transform& t, const float* probs,
                               const float* grad_probs, float* grad_scores, std::size_t rows, std::size_t cols,
                               cudaStream_t stream) {
  const double alpha = t.tsallis_alpha();  // top-k: softmax's backward on its kept entries
  if (alpha == 1.0)
    return launch_backward<Weight::prob>(op, probs, grad_probs, grad_scores, rows, cols, 0.0, stream);
  if (alpha == 2.0)
    return launch_backward<Weight::support>(op, probs, grad_probs, grad_scores, rows, cols, 0.0, stream);
  if (alpha == 1.5)
    return launch_backward<Weight::sqrt_prob>(op, probs, grad_probs, grad_scores, rows, cols, 0.0, stream);
  launch_backward<Weight::power>(op, probs, grad_probs, grad_scores, rows, cols, 2.0 - alpha, stream);
}

}  // namespace detail

namespace {

void run_forward(const Transform& t, const float* scores, float* probs, std::size_t rows, std::size_t cols,
                 const std::uint8_t* mask, cudaStream_t stream, bool scan) {
  const std::string op = checked_op(t, false);
  check_sizes(op, "scores", rows, cols);
  if (rows == 0) return;
  detail::check_device_pointer(scores, op.c_str(), "scores", false);
  detail::check_device_pointer(probs, op.c_str(), "probs", false);
  if (mask != nullptr) detail::check_device_pointer(mask, op.c_str(), "mask", false);
  if (scan) detail::check_device_values(op, "scores", scores, mask, rows, cols, true, stream);
  detail::launch_transform_forward(op, t, scores, probs, mask, rows, cols, stream);
}

void run_backward(const Transform& t, const float* probs, const float* grad_probs, float* grad_scores,
                  std::size_t rows, std::size_t cols, cudaStream_t stream, bool scan) {
  const std::string op = checked_op(t, true);
  check_sizes(op, "probs", rows, cols);
  if (rows == 0) return;
  detail::check_device_pointer(probs, op.c_str(), "probs", false);
  detail::check_device_pointer(grad_probs, op.c_str(), "grad_probs", false);
  detail::check_device_pointer(grad_scores, op.c_str(), "grad_scores", false);
  if (scan) detail::check_device_values(op, "grad_probs", grad_probs, nullptr, rows, cols, false, stream);
  detail::launch_transform_backward(op, t, probs, grad_probs, grad_scores, rows, cols, stream);
}

}  // namespace

void transform_forward(const Transform& t, const float* scores, float* probs, std::size_t rows, std::size_t cols,
                       const std::uint8_t* mask, cudaStream_t stream) {
  run_forward(t, scores, probs, rows, cols, mask, stream, true);
}

void transform_forward_unchecked(const Transform& t, const float* scores, float* probs, std::size_t rows,
                                 std::size_t cols, const std::uint8_t* mask, cudaStream_t stream) {
  run_forward(t, scores, probs, rows, cols, mask, stream, false);
}

void transform_backward(const Transform& t, const float* probs, const float* grad_probs, float* grad_scores,
                        std::size_t rows, std::size_t cols, cudaStream_t stream) {
  run_backward(t, probs, grad_probs, grad_scores, rows, cols, stream, true);
}

void transform_backward_unchecked(const Transform& t, const float* probs, const float* grad_probs,
                                  float* grad_scores, std::size_t rows, std::size_t cols, cudaStream_t stream) {
  run_backward(t, probs, grad_probs, grad_scores, rows, cols, stream, false);
}

}  // namespace entgraph::cuda
