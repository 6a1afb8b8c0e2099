// How a predicted graph compares with the gold one (see predictors.hpp).
#include <cuda_runtime.h>

#include "entgraph/attention.hpp"
#include "backend_kernels.hpp"
#include "kernel_launch.cuh"
#include "staging.cuh"
#include "entgraph/cuda/predictors.hpp"
#include "predictors_common.cuh"
#include "reduce.cuh"

namespace entgraph::cuda {
namespace {

// Counts over allowed keys (j < limit), as compare_graphs does:
// totals[0] = gold edges, totals[1] = predicted edges, totals[2] = hits.
// One warp per row; each predicted key is looked up in the sorted gold row by
// binary search, which counts the same pairs as the CPU's merge of two sorted,
// repeat-free rows. Per-lane sums, one warp reduction and three atomics per warp.
__global__ void graph_metrics_kernel(const std::size_t* pred_offsets, const std::uint32_t* pred_indices,
                                     const std::size_t* gold_offsets, const std::uint32_t* gold_indices,
                                     std::size_t n, std::size_t m, bool causal, unsigned long long* totals) {
  const unsigned lane = threadIdx.x % detail::kWarpSize;
  unsigned long long gold = 0, predicted = 0, hits = 0;
  for (std::size_t i = detail::first_warp_row(); i < n; i += detail::warp_row_stride()) {
    const std::size_t limit = causal ? causal_key_limit(i, n, m) : m;
    const std::size_t gb = gold_offsets[i], ge = gold_offsets[i + 1];
    for (std::size_t p = gb + lane; p < ge; p += detail::kWarpSize)
      if (gold_indices[p] < limit) ++gold;
    for (std::size_t p = pred_offsets[i] + lane; p < pred_offsets[i + 1]; p += detail::kWarpSize) {
      const std::uint32_t key = pred_indices[p];
      if (key >= limit) continue;
      ++predicted;
      std::size_t lo = gb, hi = ge;  // lower_bound of key in the gold row
      while (lo < hi) {
        const std::size_t mid = lo + (hi - lo) / 2;
        if (gold_indices[mid] < key)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo < ge && gold_indices[lo] == key) ++hits;
    }
  }
  // Every lane of every warp gets here (the row loop is warp-uniform).
  gold = detail::warp_sum(gold);
  predicted = detail::warp_sum(predicted);
  hits = detail::warp_sum(hits);
  if (lane == 0 && (gold | predicted | hits) != 0) {
    atomicAdd(totals + 0, gold);
    atomicAdd(totals + 1, predicted);
    atomicAdd(totals + 2, hits);
  }
}

}  // namespace

namespace {

// The count, the graphs' shapes checked by the caller.
GraphMetrics count_metrics(const DeviceGraph& predicted, const DeviceGraph& gold, bool causal, cudaStream_t stream,
                           const char* op) {
  const std::size_t n = predicted.queries, m = predicted.keys;
  GraphMetrics metrics;
  metrics.allowed = allowed_pair_count(n, m, causal);
  metrics.queries = n;
  if (n == 0 || (predicted.edges() == 0 && gold.edges() == 0)) return metrics;
  DeviceArray<unsigned long long> totals(3, op);
  check(cudaMemsetAsync(totals.data(), 0, 3 * sizeof(unsigned long long), stream), op);
  constexpr unsigned kRows = detail::kRowsPerBlock;
  launch(graph_metrics_kernel, detail::grid_for(n, kRows), kRows * detail::kWarpSize, 0, stream,
         predicted.offsets.data(), predicted.indices.data(), gold.offsets.data(), gold.indices.data(), n, m, causal,
         totals.data());
  check(cudaGetLastError(), op);
  unsigned long long host[3] = {0, 0, 0};
  check(cudaMemcpyAsync(host, totals.data(), sizeof(host), cudaMemcpyDeviceToHost, stream), op);
  check(cudaStreamSynchronize(stream), op);
  metrics.gold = static_cast<std::size_t>(host[0]);
  metrics.predicted = static_cast<std::size_t>(host[1]);
  metrics.hits = static_cast<std::size_t>(host[2]);
  return metrics;
}

}  // namespace

GraphMetrics compare_graphs(const DeviceGraph& predicted, const DeviceGraph& gold, bool causal, cudaStream_t stream) {
  constexpr const char* op = "cuda::compare_graphs";
  if (predicted.queries != gold.queries || predicted.keys != gold.keys)
    detail::argument_error(op, "graphs of different shapes (" + std::to_string(predicted.queries) + " x " +
                                   std::to_string(predicted.keys) + " and " + std::to_string(gold.queries) + " x " +
                                   std::to_string(gold.keys) + ")");
  for (const DeviceGraph* g : {&predicted, &gold})
    if (g->offsets.size() != predicted.queries + 1)
      detail::argument_error(op, "a graph's offsets hold " + std::to_string(g->offsets.size()) +
                                     " values, expected queries + 1 = " + std::to_string(predicted.queries + 1));
  return count_metrics(predicted, gold, causal, stream, op);
}

// The backend's kernel: the core has checked the shapes and validated both
// graphs, which go up as they are.
GraphMetrics detail::host_compare_graphs(const Graph& predicted, const Graph& gold, bool causal) {
  const DeviceGraph p = detail::upload_valid(predicted, "compare_graphs: uploading predicted");
  const DeviceGraph g = detail::upload_valid(gold, "compare_graphs: uploading gold");
  return count_metrics(p, g, causal, nullptr, "compare_graphs");
}

}  // namespace entgraph::cuda
