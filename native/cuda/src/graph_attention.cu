// Attention on the edges of a CSR graph (see graph_attention.hpp).
//
// One warp per query, four per block. The query row sits in shared memory;
// lane t computes the scores of the row's keys t, t + 32, ... (a whole dot
// product per lane: the key rows are read as float4 and stay in L1/L2 across
// queries) into a scratch with one float per edge, at the edge's CSR position,
// so rows never collide and nothing needs sizing per row. The warp then finds
// the row max, the entmax threshold (attention_common.cuh) and the sum of the
// weights, and walks the row 32 edges at a time: each lane computes one
// weight, the warp broadcasts them in turn, and a non-zero weight adds its V
// row (lanes over the columns, coalesced). Zero weights (outside the entmax
// support, or masked) skip their V row entirely.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attention_common.cuh"
#include "backend_kernels.hpp"
#include "head_scan.hpp"
#include "kernel_launch.cuh"
#include "staging.cuh"
#include "entgraph/cuda/graph_attention.hpp"
#include "entgraph/error.hpp"
#include "predictors_common.cuh"
#include "reduce.cuh"

namespace entgraph::cuda {
namespace {

using detail::kFullWarp;
using detail::kWarpSize;
using detail::Weighting;

constexpr const char* kOp = "cuda::graph_attention_forward";
constexpr int kGraphWarps = 4;
constexpr std::size_t kMaxHeadDim = 8192;  // the query rows of a block must fit in shared memory
constexpr int kColumnsPerPass = 4 * 32;     // output columns per walk over the row (4 per lane)

struct GraphParams {
  const float* q;
  const float* k;
  const float* v;
  const std::size_t* offsets;
  const std::uint32_t* indices;
  const std::uint8_t* key_padding;  // may be null
  float* scores;                    // one per edge
  float* out;
  std::size_t edges, n, m;
  int d, dv, ldq;  // ldq: the shared-memory stride of a query row (d rounded up to 4)
  bool causal;
  Weighting w;
};

// q_i . k_j with q_i in shared memory; four partial sums for instruction-level parallelism.
template <bool kVec4>
__device__ float row_dot(const float* qs, const float* kr, int d) {
  if constexpr (kVec4) {
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (int c = 0; c < d; c += 4) {
      const float4 x = *reinterpret_cast<const float4*>(qs + c);
      const float4 y = __ldg(reinterpret_cast<const float4*>(kr + c));
      a0 = fmaf(x.x, y.x, a0);
      a1 = fmaf(x.y, y.y, a1);
      a2 = fmaf(x.z, y.z, a2);
      a3 = fmaf(x.w, y.w, a3);
    }
    return (a0 + a1) + (a2 + a3);
  } else {
    float a = 0.0f;
    for (int c = 0; c < d; ++c) a = fmaf(qs[c], __ldg(kr + c), a);
    return a;
  }
}

template <bool kVec4>
__global__ void __launch_bounds__(kGraphWarps * 32) graph_attention_kernel(const GraphParams p) {
  float4* graph_smem = dynamic_shared<float4>();
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int warp = static_cast<int>(threadIdx.x / kWarpSize);
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * kGraphWarps + warp;
  if (i >= p.n) return;  // whole warps: nothing below synchronises the block

  float* qs = reinterpret_cast<float*>(graph_smem) + warp * p.ldq;
  const float* qi = p.q + i * static_cast<std::size_t>(p.d);
  for (int c = lane; c < p.d; c += kWarpSize) qs[c] = qi[c];
  __syncwarp();

  // The row's edges, clamped to the scratch even for malformed offsets.
  const std::size_t first = p.offsets[i], last = p.offsets[i + 1];
  const std::size_t begin = first < p.edges ? first : p.edges;
  const std::size_t end = last < begin ? begin : (last < p.edges ? last : p.edges);
  const std::size_t count = end - begin;
  const std::uint32_t* keys = p.indices + begin;
  float* s = p.scores + begin;
  const std::size_t limit = p.causal ? causal_key_limit(i, p.n, p.m) : p.m;

  float mx = -INFINITY;
  for (std::size_t t = lane; t < count; t += kWarpSize) {
    const std::uint32_t j = keys[t];
    float x = -INFINITY;
    if (j < limit && (p.key_padding == nullptr || p.key_padding[j] != 0))
      x = __fmul_rn(row_dot<kVec4>(qs, p.k + static_cast<std::size_t>(j) * p.d, p.d), p.w.factor);
    s[t] = x;
    mx = fmaxf(mx, x);
  }
  mx = detail::warp_max(mx);
  __syncwarp();  // every lane's scores are in memory before other lanes read them

  float* o = p.out + i * static_cast<std::size_t>(p.dv);
  if (mx == -INFINITY) {  // nothing to attend to
    for (int c = lane; c < p.dv; c += kWarpSize) o[c] = 0.0f;
    return;
  }
  const detail::Tau tau = detail::row_threshold(s, count, mx, p.w);
  float z = 0.0f;
  for (std::size_t t = lane; t < count; t += kWarpSize) z += detail::attention_weight(s[t], mx, tau, p.w);
  z = detail::warp_sum(z);
  const float inv = 1.0f / z;  // z >= the max's weight > 0

  for (int c0 = 0; c0 < p.dv; c0 += kColumnsPerPass) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (std::size_t t0 = 0; t0 < count; t0 += kWarpSize) {
      const std::size_t t = t0 + lane;
      float mine = 0.0f;
      std::uint32_t key = 0;
      if (t < count) {
        mine = detail::attention_weight(s[t], mx, tau, p.w);
        key = keys[t];
      }
      const int in_chunk = count - t0 < kWarpSize ? static_cast<int>(count - t0) : static_cast<int>(kWarpSize);
      for (int u = 0; u < in_chunk; ++u) {
        const float pu = __shfl_sync(kFullWarp, mine, u);
        const std::uint32_t ju = __shfl_sync(kFullWarp, key, u);
        if (pu > 0.0f) {  // uniform across the warp; implies the key is visible (so < m)
          const float* vr = p.v + static_cast<std::size_t>(ju) * p.dv;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = c0 + lane + 32 * e;
            if (c < p.dv) acc[e] = fmaf(pu, __ldg(vr + c), acc[e]);
          }
        }
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = c0 + lane + 32 * e;
      if (c < p.dv) o[c] = acc[e] * inv;
    }
  }
}

void check_graph_sizes(std::size_t n, std::size_t m, std::size_t d, std::size_t dv) {
  if (n == 0) detail::argument_error(kOp, "n is 0 (got 0 queries, expected n >= 1)");
  if (m == 0) detail::argument_error(kOp, "m is 0 (got 0 keys, expected m >= 1)");
  if (d == 0) detail::argument_error(kOp, "d is 0 (got d = 0, expected d >= 1)");
  if (dv == 0) detail::argument_error(kOp, "dv is 0 (got dv = 0, expected dv >= 1)");
  if (d > kMaxHeadDim)
    detail::argument_error(kOp, "d is too large (got " + std::to_string(d) + ", expected at most " +
                                    std::to_string(kMaxHeadDim) + ")");
  if (dv > static_cast<std::size_t>(INT_MAX))
    detail::argument_error(kOp, "dv is too large (got " + std::to_string(dv) + ")");
  if (m > std::numeric_limits<std::uint32_t>::max())
    detail::argument_error(kOp, "m is too large for a graph (got " + std::to_string(m) + ", expected < 2^32)");
  if (n / kGraphWarps >= static_cast<std::size_t>(INT_MAX))
    detail::argument_error(kOp, "n is too large (got " + std::to_string(n) + ")");
}

}  // namespace

std::size_t graph_attention_workspace_bytes(std::size_t edges) { return edges * sizeof(float); }

namespace {

// The launch, arguments checked by the caller (sizes, pointers).
void launch_graph_attention(const float* q, const float* k, const float* v, const std::size_t* offsets,
                            const std::uint32_t* indices, std::size_t edges, float* out, std::size_t n, std::size_t m,
                            std::size_t d, std::size_t dv, const Weighting& w, const FusedAttentionOptions& options,
                            cudaStream_t stream) {
  GraphParams p{};
  p.q = q;
  p.k = k;
  p.v = v;
  p.offsets = offsets;
  p.indices = indices;
  p.key_padding = options.key_padding;
  p.out = out;
  p.edges = edges;
  p.n = n;
  p.m = m;
  p.d = static_cast<int>(d);
  p.dv = static_cast<int>(dv);
  p.ldq = static_cast<int>((d + 3) / 4 * 4);
  p.causal = options.causal;
  p.w = w;

  const detail::AttentionScratch scratch(options.workspace, options.workspace_bytes,
                                         graph_attention_workspace_bytes(edges), stream, kOp,
                                         "cuda::graph_attention_forward (score scratch)");
  p.scores = scratch.data();

  const std::size_t smem = static_cast<std::size_t>(kGraphWarps) * p.ldq * sizeof(float);
  const unsigned blocks = static_cast<unsigned>((n + kGraphWarps - 1) / kGraphWarps);
  const bool vec4 = d % 4 == 0 && detail::aligned16(k);
  const auto kernel = vec4 ? graph_attention_kernel<true> : graph_attention_kernel<false>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        "cuda::graph_attention_forward (shared memory size)");
  launch(kernel, blocks, kGraphWarps * 32, smem, stream, p);
  check(cudaGetLastError(), "cuda::graph_attention_forward (launch)");
}

}  // namespace

void graph_attention_forward(const float* q, const float* k, const float* v, const std::size_t* offsets,
                             const std::uint32_t* indices, std::size_t edges, float* out, std::size_t n,
                             std::size_t m, std::size_t d, std::size_t dv, const FusedAttentionOptions& options,
                             cudaStream_t stream) {
  check_graph_sizes(n, m, d, dv);
  detail::check_device_pointer(q, kOp, "q", false);
  detail::check_device_pointer(k, kOp, "k", false);
  detail::check_device_pointer(v, kOp, "v", false);
  detail::check_device_pointer(out, kOp, "out", false);
  detail::check_device_pointer(offsets, kOp, "offsets", false);
  if (edges > 0) detail::check_device_pointer(indices, kOp, "indices", false);
  if (options.key_padding) detail::check_device_pointer(options.key_padding, kOp, "options.key_padding", false);
  const Weighting w = detail::make_weighting(options.transform, options.scale, d, kOp, "options.transform");
  launch_graph_attention(q, k, v, offsets, indices, edges, out, n, m, d, dv, w, options, stream);
}

void graph_attention_forward(const float* q, const float* k, const float* v, const DeviceGraph& graph, float* out,
                             std::size_t d, std::size_t dv, const FusedAttentionOptions& options,
                             cudaStream_t stream) {
  if (graph.offsets.size() != graph.queries + 1)
    detail::argument_error(kOp, "graph.offsets has the wrong size (got " + std::to_string(graph.offsets.size()) +
                                    ", expected queries + 1 = " + std::to_string(graph.queries + 1) + ")");
  graph_attention_forward(q, k, v, graph.offsets.data(), graph.indices.data(), graph.edges(), out, graph.queries,
                          graph.keys, d, dv, options, stream);
}

namespace {

// What the GPU cannot run, for the backend's kernels (the core has checked
// the rest); the resolved transform.
Weighting check_backend_call(std::size_t n, std::size_t m, std::size_t d, std::size_t dv,
                             const AttentionOptions<float>& options) {
  check_graph_sizes(n, m, d, dv);
  return detail::make_weighting(options.transform, options.scale, d, kOp, "options.attention.transform");
}

}  // namespace

// The backend's kernel: the core has validated the arguments and the graph.
void detail::host_graph_attention_forward(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                          const Graph& graph, MatrixView<float> out,
                                          const AttentionOptions<float>& options) {
  const std::size_t n = q.rows, m = k.rows, d = q.cols, dv = v.cols;
  const Weighting w = check_backend_call(n, m, d, dv, options);
  const DeviceGraph dg = detail::upload_valid(graph, "graph_attention_forward: uploading graph");
  detail::StagedAttention staged(q, k, v, options, "graph_attention_forward");
  launch_graph_attention(staged.q.data(), staged.k.data(), staged.v.data(), dg.offsets.data(), dg.indices.data(),
                         dg.edges(), staged.out.data(), n, m, d, dv, w, staged.options, nullptr);
  staged.finish(out, "graph_attention_forward");
}

// The backend's kernel on device memory (Memory::device): the core has
// checked all but q's, k's and v's values (the graph included); they are
// scanned here and judged by the core's check_graph_attention_values before
// the launch. Only the graph is copied.
void detail::device_graph_attention_forward(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                            const Graph& graph, MatrixView<float> out,
                                            const AttentionOptions<float>& options) {
  const std::size_t n = q.rows, m = k.rows, d = q.cols, dv = v.cols;
  const Weighting w = check_backend_call(n, m, d, dv, options);
  const cudaStream_t stream = detail::current_stream();
  const std::vector<HeadScan> scans = detail::scan_one_head("graph_attention_forward", kOp, q, k, v, out,
                                                           options.key_padding, /*aligned=*/false, stream);
  check_graph_attention_values("graph_attention_forward", q, k, v, options, scans[0], scans[1], scans[2]);
  const DeviceGraph dg = detail::upload_valid(graph, "graph_attention_forward: uploading graph");
  launch_graph_attention(q.data, k.data, v.data, dg.offsets.data(), dg.indices.data(), dg.edges(), out.data, n, m, d,
                         dv, w, detail::fused_options(options, options.key_padding), stream);
  // The graph's copy is freed below: cudaFree waits for the kernel that reads it.
  detail::finish_on_device(stream);
}

}  // namespace entgraph::cuda
