// Helpers shared by the predictor sources: argument checks, grids and
// warp-per-row indexing.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "checks.cuh"
#include "entgraph/cuda/device.hpp"
#include "entgraph/cuda/device_graph.hpp"
#include "entgraph/view_checks.hpp"
#include "entgraph/error.hpp"
#include "entgraph/matrix_view.hpp"
#include "reduce.cuh"
#include "staging.cuh"

namespace entgraph::cuda::detail {

static_assert(sizeof(std::size_t) == sizeof(unsigned long long), "CSR offsets are 64-bit on the device");

// Blocks for a grid-stride loop over `items` with `per_block` items per
// block; capped because the loops cover the rest. Never 0 (callers skip
// empty work before launching).
inline unsigned grid_for(std::size_t items, std::size_t per_block) {
  const std::size_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<std::size_t>(blocks, 1, std::size_t{1} << 20));
}

// Row kernels run one warp per query row, kRowsPerBlock warps per block.
constexpr unsigned kRowsPerBlock = 8;

// The first row of this thread's warp and the stride between a warp's rows.
__device__ inline std::size_t first_warp_row() {
  return static_cast<std::size_t>(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
}
__device__ inline std::size_t warp_row_stride() {
  return static_cast<std::size_t>(gridDim.x) * (blockDim.x / kWarpSize);
}

// A device pointer must be set when it points at `count` > 0 values.
inline void check_pointer(const void* p, std::size_t count, const char* op, const char* name) {
  if (p == nullptr && count > 0)
    argument_error(op, std::string(name) + " is null but holds " + std::to_string(count) + " values");
}

// bucket_graph (predictors.hpp) of ids this library's kernels made, all
// below the bucket count: the same graph without the scan of the ids.
DeviceGraph bucket_graph_of_valid_ids(const std::uint32_t* query_buckets, std::size_t n, std::size_t rq,
                                      const std::uint32_t* key_buckets, std::size_t m, std::size_t rk, bool causal,
                                      cudaStream_t stream);

// Graphs index queries and keys with 32-bit integers (Graph::empty).
inline void check_graph_size(std::size_t n, std::size_t m, const char* op) {
  constexpr std::size_t kMax = std::numeric_limits<std::uint32_t>::max();
  if (n > kMax || m > kMax)
    argument_error(op, "graphs hold at most 2^32 - 1 queries and keys (got " + std::to_string(n) + " x " +
                           std::to_string(m) + ")");
}

// Sparsefinder quantization's bin edges: r x (bins - 1), each row ascending.
inline void check_bin_edges(MatrixView<const float> edges, std::size_t r, const char* op) {
  check_view(op, "edges", edges);
  if (edges.rows != r)
    argument_error(op, "edges has " + std::to_string(edges.rows) + " rows, expected one per projected coordinate (" +
                           std::to_string(r) + ")");
  for (std::size_t c = 0; c < edges.rows; ++c)
    if (!std::is_sorted(edges.row(c), edges.row(c) + edges.cols))
      argument_error(op, "edges row " + std::to_string(c) + " is not ascending");
}

// A predictor's q and k on the device: the caller's own (on_device:
// contiguous rows, read in place) or copies of host views.
struct DeviceInputs {
  DeviceArray<float> q_copy, k_copy;  // empty when read in place
  ConstMatrix<float> q, k;            // device memory, contiguous rows
};
inline DeviceInputs device_inputs(ConstMatrix<float> q, ConstMatrix<float> k, bool on_device, const char* op) {
  DeviceInputs in;
  if (on_device) {
    check_contiguous(op, "q", q);
    check_contiguous(op, "k", k);
    in.q = q;
    in.k = k;
  } else {
    in.q_copy = upload(q, op);
    in.k_copy = upload(k, op);
    in.q = ConstMatrix<float>(in.q_copy.data(), q.rows, q.cols);
    in.k = ConstMatrix<float>(in.k_copy.data(), k.rows, k.cols);
  }
  return in;
}

template <class T>
std::vector<T> download_vector(const DeviceArray<T>& a) {
  std::vector<T> out(a.size());
  a.download(out.data());
  return out;
}

}  // namespace entgraph::cuda::detail
