// The unfused middle step of attention (the GEMM + transform + GEMM
// baseline, and a way to get P): one warp per row of S (see attention.hpp).
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "attention_common.cuh"
#include "entgraph/attention.hpp"
#include "entgraph/cuda/attention.hpp"
#include "kernel_launch.cuh"

namespace entgraph::cuda {
namespace {

using detail::kWarpSize;
using detail::Weighting;


constexpr int kProbWarps = 4;

__global__ void __launch_bounds__(kProbWarps * 32)
    scores_to_probs_kernel(float* scores, int n, int m, const std::uint8_t* key_padding, bool causal, Weighting w) {
  const int lane = threadIdx.x % kWarpSize;
  const int i = static_cast<int>(blockIdx.x) * kProbWarps + static_cast<int>(threadIdx.x / kWarpSize);
  if (i >= n) return;  // whole warps
  float* row = scores + static_cast<std::size_t>(i) * static_cast<std::size_t>(m);
  const int limit = causal ? static_cast<int>(causal_key_limit(static_cast<std::size_t>(i), static_cast<std::size_t>(n),
                                                               static_cast<std::size_t>(m)))
                           : m;
  float mx = -INFINITY;
  for (int j = lane; j < m; j += kWarpSize) {
    const bool ok = j < limit && (key_padding == nullptr || key_padding[j] != 0);
    const float x = ok ? row[j] * w.factor : -INFINITY;
    row[j] = x;
    mx = fmaxf(mx, x);
  }
  mx = detail::warp_max(mx);
  __syncwarp();  // every lane's x is in memory before the solve reads the row
  if (mx == -INFINITY) {
    for (int j = lane; j < m; j += kWarpSize) row[j] = 0.0f;
    return;
  }
  const detail::Tau tau = detail::row_threshold(row, static_cast<std::size_t>(m), mx, w);
  float z = 0.0f;
  for (int j = lane; j < m; j += kWarpSize) z += detail::attention_weight(row[j], mx, tau, w);
  z = detail::warp_sum(z);
  const float inv = 1.0f / z;  // z >= the max's weight > 0
  for (int j = lane; j < m; j += kWarpSize) row[j] = detail::attention_weight(row[j], mx, tau, w) * inv;
}

}  // namespace

void scores_to_probs(float* scores, std::size_t n, std::size_t m, std::size_t d, const FusedAttentionOptions& options,
                     cudaStream_t stream) {
  constexpr const char* op = "cuda::scores_to_probs";
  if (n == 0) detail::argument_error(op, "n is 0 (got 0 rows, expected n >= 1)");
  if (m == 0) detail::argument_error(op, "m is 0 (got 0 columns, expected m >= 1)");
  if (d == 0) detail::argument_error(op, "d is 0 (got 0, expected the head dimension of the default scale)");
  if (n > INT_MAX || m > INT_MAX)
    detail::argument_error(op, "n or m is too large (got " + std::to_string(n) + " x " + std::to_string(m) + ")");
  detail::check_device_pointer(scores, op, "scores", false);
  if (options.key_padding) detail::check_device_pointer(options.key_padding, op, "options.key_padding", false);
  const Weighting w = detail::make_weighting(options.transform, options.scale, d, op, "options.transform");
  const unsigned blocks = static_cast<unsigned>((n + kProbWarps - 1) / kProbWarps);
  launch(scores_to_probs_kernel, blocks, kProbWarps * 32, 0, stream, scores, static_cast<int>(n), static_cast<int>(m),
         options.key_padding, options.causal, w);
  check(cudaGetLastError(), "cuda::scores_to_probs (launch)");
}

}  // namespace entgraph::cuda
