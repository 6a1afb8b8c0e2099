// Builds a CSR graph from a per-pair predicate, one warp per query row:
// count the edges of each row, exclusive scan (CUB) into offsets, fill.
// The warp walks the allowed keys of its row 32 at a time in ascending
// order and compacts the hits with a ballot, so every row comes out sorted
// and without repeats; no sort pass is needed.
//
// `Rows` is a trivially copyable functor: rows.row(i) (device) returns an
// object whose operator()(j) says whether (i, j) is an edge. It must give the
// same answer in both passes (plain deterministic arithmetic does).
#pragma once

#include <cuda_runtime.h>

#include <cub/cub.cuh>

#include <cstddef>
#include <cstdint>

#include "entgraph/attention.hpp"
#include "entgraph/cuda/device_graph.hpp"
#include "kernel_launch.cuh"
#include "predictors_common.cuh"
#include "reduce.cuh"

namespace entgraph::cuda::detail {

// The row loop is uniform across a warp (i depends only on the warp), and
// every lane runs the same number of key steps, so full-mask ballots are safe.
template <class Rows>
__global__ void count_rows_kernel(Rows rows, std::size_t n, std::size_t m, bool causal, std::size_t* counts) {
  const unsigned lane = threadIdx.x % kWarpSize;
  for (std::size_t i = first_warp_row(); i < n; i += warp_row_stride()) {
    const std::size_t limit = causal ? causal_key_limit(i, n, m) : m;
    const auto row = rows.row(i);
    std::size_t count = 0;
    for (std::size_t base = 0; base < limit; base += kWarpSize) {
      const std::size_t j = base + lane;
      const bool edge = j < limit && row(j);
      count += static_cast<std::size_t>(__popc(__ballot_sync(kFullWarp, edge)));
    }
    if (lane == 0) counts[i] = count;
  }
}

template <class Rows>
__global__ void fill_rows_kernel(Rows rows, std::size_t n, std::size_t m, bool causal, const std::size_t* offsets,
                                 std::uint32_t* indices) {
  const unsigned lane = threadIdx.x % kWarpSize;
  const unsigned below = (1u << lane) - 1u;  // lanes before this one
  for (std::size_t i = first_warp_row(); i < n; i += warp_row_stride()) {
    const std::size_t limit = causal ? causal_key_limit(i, n, m) : m;
    const auto row = rows.row(i);
    const std::size_t end = offsets[i + 1];
    std::size_t pos = offsets[i];
    for (std::size_t base = 0; base < limit; base += kWarpSize) {
      const std::size_t j = base + lane;
      const bool edge = j < limit && row(j);
      const unsigned hits = __ballot_sync(kFullWarp, edge);
      const std::size_t p = pos + static_cast<std::size_t>(__popc(hits & below));
      if (edge && p < end) indices[p] = static_cast<std::uint32_t>(j);  // p < end: never past the row
      pos += static_cast<std::size_t>(__popc(hits));
    }
  }
}

// In place: data[0..count) becomes its exclusive prefix sum.
inline void exclusive_scan(std::size_t* data, std::size_t count, cudaStream_t stream, const char* what) {
  std::size_t bytes = 0;
  check(cub::DeviceScan::ExclusiveSum(nullptr, bytes, data, data, count, stream), what);
  DeviceArray<unsigned char> temp(bytes > 0 ? bytes : 1, what);
  check(cub::DeviceScan::ExclusiveSum(temp.data(), bytes, data, data, count, stream), what);
}

// n + 1 zeros on `stream`: per-row counts go to [0, n), and [n] stays 0,
// so that the exclusive scan of all n + 1 is the CSR offsets, total included.
inline DeviceArray<std::size_t> zeroed_counts(std::size_t n, cudaStream_t stream, const char* what) {
  DeviceArray<std::size_t> counts(n + 1, what);
  check(cudaMemsetAsync(counts.data(), 0, (n + 1) * sizeof(std::size_t), stream), what);
  return counts;
}

// counts (zeroed_counts, [0, n) filled) become offsets; waits for the stream
// and returns the total.
inline std::size_t scan_counts(std::size_t* counts, std::size_t n, cudaStream_t stream, const char* what) {
  exclusive_scan(counts, n + 1, stream, what);
  std::size_t total = 0;
  check(cudaMemcpyAsync(&total, counts + n, sizeof(total), cudaMemcpyDeviceToHost, stream), what);
  check(cudaStreamSynchronize(stream), what);
  return total;
}

// The n x m graph of the pairs (i, j), j < causal_key_limit(i, n, m) when
// causal, for which rows.row(i)(j) holds. Waits for the stream once, to size
// the indices; the fill kernel is still running on the stream at return.
template <class Rows>
DeviceGraph build_rows(const Rows& rows, std::size_t n, std::size_t m, bool causal, cudaStream_t stream,
                       const char* what) {
  DeviceGraph g;
  g.queries = n;
  g.keys = m;
  g.offsets = zeroed_counts(n, stream, what);
  const unsigned blocks = grid_for(n, kRowsPerBlock);
  if (n > 0 && m > 0) {
    launch(count_rows_kernel<Rows>, blocks, kRowsPerBlock * kWarpSize, 0, stream, rows, n, m, causal, g.offsets.data());
    check(cudaGetLastError(), what);
  }
  const std::size_t total = scan_counts(g.offsets.data(), n, stream, what);
  g.indices = DeviceArray<std::uint32_t>(total, what);
  if (total > 0) {
    launch(fill_rows_kernel<Rows>, blocks, kRowsPerBlock * kWarpSize, 0, stream, rows, n, m, causal, g.offsets.data(),
           g.indices.data());
    check(cudaGetLastError(), what);
  }
  return g;
}

}  // namespace entgraph::cuda::detail
