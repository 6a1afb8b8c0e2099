// Fused dense attention, the host side (see attention.hpp for the contract):
// checks, the candidate buffer, and the launch of the kernel instance for the
// head dimensions (fused_attention_kernel.cuh describes the algorithm).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "attention_common.cuh"
#include "backend_kernels.hpp"
#include "head_scan.hpp"
#include "entgraph/cuda/attention.hpp"
#include "fused_attention_traits.cuh"
#include "staging.cuh"

namespace entgraph::cuda {

bool detail::supported_head_dim(std::size_t d) { return d == 32 || d == 64 || d == 128; }

namespace {

using detail::Weighting;
using detail::fused::FusedParams;
using detail::fused::kBlockM;
using detail::fused::kDefaultCapacity;
using detail::fused::launch_fused;

constexpr const char* kOp = "cuda::attention_forward";

// Calls f(integral_constant<int, d>, integral_constant<int, dv>) for the
// supported head dimensions (checked by the caller).
template <class F>
void with_head_dims(std::size_t d, std::size_t dv, F&& f) {
  auto inner = [&](auto dc) {
    switch (dv) {
      case 32:
        f(dc, std::integral_constant<int, 32>{});
        break;
      case 64:
        f(dc, std::integral_constant<int, 64>{});
        break;
      default:
        f(dc, std::integral_constant<int, 128>{});
        break;
    }
  };
  switch (d) {
    case 32:
      inner(std::integral_constant<int, 32>{});
      break;
    case 64:
      inner(std::integral_constant<int, 64>{});
      break;
    default:
      inner(std::integral_constant<int, 128>{});
      break;
  }
}

void check_head_dim(std::size_t d, const char* name) {
  if (!detail::supported_head_dim(d))
    detail::argument_error(kOp, std::string(name) + " is not supported (got " + std::to_string(d) +
                                    ", expected 32, 64 or 128)");
}

void check_sizes(std::size_t n, std::size_t m, std::size_t d, std::size_t dv) {
  if (n == 0) detail::argument_error(kOp, "n is 0 (got 0 queries, expected n >= 1)");
  if (m == 0) detail::argument_error(kOp, "m is 0 (got 0 keys, expected m >= 1)");
  constexpr std::size_t kMax = static_cast<std::size_t>(INT_MAX) - kBlockM;
  if (n > kMax || m > kMax)
    detail::argument_error(kOp, "n or m is too large (got " + std::to_string(n) + " x " + std::to_string(m) +
                                    ", expected at most " + std::to_string(kMax) + ")");
  check_head_dim(d, "d");
  check_head_dim(dv, "dv");
}

// The candidate capacity actually used (entmax).
std::size_t capacity(std::size_t m, const FusedAttentionOptions& o) {
  const std::size_t cap = o.candidate_capacity == 0 ? kDefaultCapacity : o.candidate_capacity;
  return std::min(cap, m);
}

}  // namespace

std::size_t attention_workspace_bytes(std::size_t n, std::size_t m, const FusedAttentionOptions& options) {
  const Weighting w = detail::for_keys(
      detail::make_weighting(options.transform, 1.0, 1, "cuda::attention_workspace_bytes", "options.transform"), m);
  if (w.softmax) return 0;
  return n * capacity(m, options) * sizeof(float);
}

// The launch, arguments checked by the caller (sizes, head dimensions,
// pointers): the public entry below, a backend kernel, or batched
// attention's float32 path.
void detail::launch_fused_attention(const float* q, const float* k, const float* v, float* out, std::size_t n,
                                    std::size_t m, std::size_t d, std::size_t dv, const Weighting& weighting,
                                    const FusedAttentionOptions& options, cudaStream_t stream) {
  const Weighting w = detail::for_keys(weighting, m);
  FusedParams p{};
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = out;
  p.key_padding = options.key_padding;
  p.n = static_cast<int>(n);
  p.m = static_cast<int>(m);
  p.causal = options.causal;
  p.w = w;

  std::size_t bytes = 0;
  if (!w.softmax) {
    const std::size_t cap = capacity(m, options);
    if (cap > SIZE_MAX / sizeof(float) / n)
      detail::argument_error(kOp, "options.candidate_capacity is too large (got " + std::to_string(cap) + ")");
    bytes = n * cap * sizeof(float);
    p.cap = static_cast<int>(cap);
  }
  // Softmax needs no scratch and ignores a workspace.
  const detail::AttentionScratch scratch(w.softmax ? nullptr : options.workspace, options.workspace_bytes, bytes, stream,
                                         kOp, "cuda::attention_forward (candidate buffer)");
  p.cand = scratch.data();

  with_head_dims(d, dv, [&](auto dc, auto dvc) {
    constexpr int D = decltype(dc)::value, DV = decltype(dvc)::value;
    if (w.softmax)
      launch_fused<D, DV, true>(p, stream);
    else
      launch_fused<D, DV, false>(p, stream);
  });
}

void attention_forward(const float* q, const float* k, const float* v, float* out, std::size_t n, std::size_t m,
                       std::size_t d, std::size_t dv, const FusedAttentionOptions& options, cudaStream_t stream) {
  check_sizes(n, m, d, dv);
  detail::check_device_pointer(q, kOp, "q");
  detail::check_device_pointer(k, kOp, "k");
  detail::check_device_pointer(v, kOp, "v");
  detail::check_device_pointer(out, kOp, "out");
  if (options.key_padding) detail::check_device_pointer(options.key_padding, kOp, "options.key_padding", false);
  const Weighting w = detail::make_weighting(options.transform, options.scale, d, kOp, "options.transform");
  detail::launch_fused_attention(q, k, v, out, n, m, d, dv, w, options, stream);
}

// The backend's kernel: the core has validated the arguments; left to check
// is what the fused kernels cannot do (head dimensions, sizes, transforms).
void detail::host_attention_forward(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                    MatrixView<float> out, const AttentionOptions<float>& options) {
  const std::size_t n = q.rows, m = k.rows, d = q.cols, dv = v.cols;
  check_sizes(n, m, d, dv);
  const Weighting w = detail::make_weighting(options.transform, options.scale, d, kOp, "options.transform");
  detail::StagedAttention staged(q, k, v, options, "attention_forward");
  detail::launch_fused_attention(staged.q.data(), staged.k.data(), staged.v.data(), staged.out.data(), n, m, d, dv, w,
                                 staged.options, nullptr);
  staged.finish(out, "attention_forward");
}

// The backend's kernel on device memory (Memory::device): the core has
// checked all but the values; q, k and v are scanned here and the core's
// check_attention_values decides with the CPU's messages before the launch.
void detail::device_attention_forward(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                      MatrixView<float> out, const AttentionOptions<float>& options) {
  const std::size_t n = q.rows, m = k.rows, d = q.cols, dv = v.cols;
  check_sizes(n, m, d, dv);
  const Weighting w = detail::make_weighting(options.transform, options.scale, d, kOp, "options.transform");
  const cudaStream_t stream = detail::current_stream();
  const std::vector<HeadScan> scans =
      detail::scan_one_head("attention_forward", kOp, q, k, v, out, options.key_padding, /*aligned=*/true, stream);
  check_attention_values("attention_forward", q, k, v, options, scans[0], scans[1], scans[2]);
  detail::launch_fused_attention(q.data, k.data, v.data, out.data, n, m, d, dv, w,
                                 detail::fused_options(options, options.key_padding), stream);
  detail::finish_on_device(stream);
}

}  // namespace entgraph::cuda
