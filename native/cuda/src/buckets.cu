// Bucket ids (k-means top centroids, quantization bins) and the graph of
// queries and keys that share a bucket (see predictors.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "csr_rows.cuh"
#include "entgraph/cuda/predictors.hpp"
#include "kernel_launch.cuh"
#include "predictors_common.cuh"

namespace entgraph::cuda {
namespace {

constexpr unsigned kThreads = 256;

// The CPU's sq_dist (training/kmeans.cpp): the same double operations in the
// same order, without FMA contraction.
__device__ double sq_dist(const float* a, const float* c, std::size_t dim) {
  double s = 0.0;
  for (std::size_t t = 0; t < dim; ++t) {
    const double x = __dsub_rn(static_cast<double>(a[t]), static_cast<double>(c[t]));
    s = __dadd_rn(s, __dmul_rn(x, x));
  }
  return s;
}

// (d, j) < (best_d, best_j) in the order of std::pair, which is what the
// CPU's partial_sort uses: distance first, then the lower index.
__device__ bool pair_less(double d, std::size_t j, double best_d, std::size_t best_j) {
  return d < best_d || (d == best_d && j < best_j);
}

// One thread per point; pass t picks the smallest (distance, index) pair
// above the one picked by pass t - 1, so the ids come out nearest first and
// never repeat. Distances are recomputed per pass: top is small and this
// needs no per-point scratch of `clusters` values. NaN distances count as
// +inf so that the order stays total and every id is valid.
__global__ void nearest_centroids_kernel(const float* points, std::size_t n, std::size_t dim, const float* centroids,
                                         std::size_t clusters, std::size_t top, std::uint32_t* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t p = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += stride) {
    const float* a = points + p * dim;
    double prev_d = 0.0;
    std::size_t prev_j = 0;
    for (std::size_t t = 0; t < top; ++t) {
      double best_d = 0.0;
      std::size_t best_j = clusters;  // none yet
      for (std::size_t j = 0; j < clusters; ++j) {
        double dj = sq_dist(a, centroids + j * dim, dim);
        if (isnan(dj)) dj = INFINITY;
        if (t > 0 && !pair_less(prev_d, prev_j, dj, j)) continue;  // picked by an earlier pass
        if (best_j == clusters || pair_less(dj, j, best_d, best_j)) {
          best_d = dj;
          best_j = j;
        }
      }
      out[p * top + t] = static_cast<std::uint32_t>(best_j);
      prev_d = best_d;
      prev_j = best_j;
    }
  }
}

// bin = std::upper_bound(edges of c, x) - edges of c, step for step.
__global__ void quantize_kernel(const float* points, std::size_t n, std::size_t r, const float* edges,
                                std::size_t bins, std::uint32_t* out) {
  const std::size_t total = n * r, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::size_t c = e % r;
    const float x = points[e];
    const float* lo = edges + c * (bins - 1);
    std::size_t first = 0, count = bins - 1;
    while (count > 0) {
      const std::size_t step = count / 2;
      if (!(x < lo[first + step])) {
        first += step + 1;
        count -= step + 1;
      } else {
        count = step;
      }
    }
    out[e] = static_cast<std::uint32_t>(c * bins + first);
  }
}

// The lowest flat index of an id >= num_buckets (atomicMin; stays all ones
// when there is none).
__global__ void first_bad_bucket_kernel(const std::uint32_t* ids, std::size_t count, std::size_t num_buckets,
                                        unsigned long long* first) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count; e += stride)
    if (static_cast<std::size_t>(ids[e]) >= num_buckets) atomicMin(first, static_cast<unsigned long long>(e));
}

// Query i is linked to key j iff a bucket of i's row equals one of j's.
struct BucketRows {
  const std::uint32_t* query_buckets;
  std::size_t rq;
  const std::uint32_t* key_buckets;
  std::size_t rk;

  struct Row {
    const std::uint32_t* q;
    std::size_t rq;
    const std::uint32_t* key_buckets;
    std::size_t rk;
    __device__ bool operator()(std::size_t j) const {
      const std::uint32_t* k = key_buckets + j * rk;
      for (std::size_t a = 0; a < rq; ++a) {
        const std::uint32_t b = q[a];
        for (std::size_t c = 0; c < rk; ++c)
          if (k[c] == b) return true;
      }
      return false;
    }
  };
  __device__ Row row(std::size_t i) const { return Row{query_buckets + i * rq, rq, key_buckets, rk}; }
};

// Throws, as Graph::from_buckets does, for the first id >= num_buckets:
// keys first, then queries.
void check_bucket_ids(const std::uint32_t* query_buckets, std::size_t n, std::size_t rq,
                      const std::uint32_t* key_buckets, std::size_t m, std::size_t rk, std::size_t num_buckets,
                      cudaStream_t stream, const char* op) {
  const std::size_t counts[2] = {m * rk, n * rq};
  const std::uint32_t* ids[2] = {key_buckets, query_buckets};
  const std::size_t widths[2] = {rk, rq};
  const char* names[2] = {"key_buckets", "query_buckets"};
  if (counts[0] == 0 && counts[1] == 0) return;
  DeviceArray<unsigned long long> first(2, op);
  check(cudaMemsetAsync(first.data(), 0xff, 2 * sizeof(unsigned long long), stream), op);
  for (int s = 0; s < 2; ++s) {
    if (counts[s] == 0) continue;
    launch(first_bad_bucket_kernel, detail::grid_for(counts[s], kThreads), kThreads, 0, stream, ids[s], counts[s],
           num_buckets, first.data() + s);
    check(cudaGetLastError(), op);
  }
  unsigned long long bad[2] = {0, 0};
  check(cudaMemcpyAsync(bad, first.data(), sizeof(bad), cudaMemcpyDeviceToHost, stream), op);
  check(cudaStreamSynchronize(stream), op);
  for (int s = 0; s < 2; ++s) {
    if (bad[s] == ~0ull) continue;
    std::uint32_t value = 0;
    check(cudaMemcpyAsync(&value, ids[s] + bad[s], sizeof(value), cudaMemcpyDeviceToHost, stream), op);
    check(cudaStreamSynchronize(stream), op);
    const std::size_t row = static_cast<std::size_t>(bad[s]) / widths[s], col = static_cast<std::size_t>(bad[s]) % widths[s];
    detail::argument_error(op, std::string(names[s]) + "(" + std::to_string(row) + ", " + std::to_string(col) +
                                   ") = " + std::to_string(value) + " is not below num_buckets = " +
                                   std::to_string(num_buckets));
  }
}

}  // namespace

void nearest_centroids(const float* points, std::size_t n, std::size_t dim, const float* centroids,
                       std::size_t clusters, std::size_t top, std::uint32_t* out, cudaStream_t stream) {
  constexpr const char* op = "cuda::nearest_centroids";
  if (clusters == 0) detail::argument_error(op, "clusters must be >= 1 (got 0)");
  if (clusters > (std::size_t{1} << 32))
    detail::argument_error(op, "clusters must be <= 2^32 (got " + std::to_string(clusters) + ")");
  if (top == 0 || top > clusters)
    detail::argument_error(op, "top must be in [1, clusters] (got " + std::to_string(top) + ", clusters " +
                                   std::to_string(clusters) + ")");
  detail::check_pointer(points, n * dim, op, "points");
  detail::check_pointer(centroids, clusters * dim, op, "centroids");
  detail::check_pointer(out, n * top, op, "out");
  if (n == 0) return;
  launch(nearest_centroids_kernel, detail::grid_for(n, kThreads), kThreads, 0, stream, points, n, dim, centroids,
         clusters, top, out);
  check(cudaGetLastError(), op);
}

std::vector<std::uint32_t> nearest_centroids(MatrixView<const float> points, MatrixView<const float> centroids,
                                             std::size_t top) {
  constexpr const char* op = "cuda::nearest_centroids";
  check_view(op, "points", points);
  check_view(op, "centroids", centroids);
  if (centroids.cols != points.cols)
    detail::argument_error(op, "centroids have " + std::to_string(centroids.cols) + " columns, points have " +
                                   std::to_string(points.cols) + " (expected equal)");
  if (centroids.rows == 0) detail::argument_error(op, "clusters must be >= 1 (got 0 centroids)");
  if (top == 0 || top > centroids.rows)
    detail::argument_error(op, "top must be in [1, clusters] (got " + std::to_string(top) + ", clusters " +
                                   std::to_string(centroids.rows) + ")");
  const DeviceArray<float> dp = detail::upload(points, op);
  const DeviceArray<float> dc = detail::upload(centroids, op);
  DeviceArray<std::uint32_t> out(points.rows * top, op);
  nearest_centroids(dp.data(), points.rows, points.cols, dc.data(), centroids.rows, top, out.data());
  return detail::download_vector(out);
}

void quantize_buckets(const float* points, std::size_t n, std::size_t r, const float* edges, std::size_t bins,
                      std::uint32_t* out, cudaStream_t stream) {
  constexpr const char* op = "cuda::quantize_buckets";
  if (bins == 0) detail::argument_error(op, "bins must be >= 1 (got 0)");
  if (r > 0 && bins > (std::size_t{1} << 32) / r)
    detail::argument_error(op, "r * bins must be <= 2^32 (got r = " + std::to_string(r) + ", bins = " +
                                   std::to_string(bins) + ")");
  detail::check_pointer(points, n * r, op, "points");
  detail::check_pointer(edges, r * (bins - 1), op, "edges");
  detail::check_pointer(out, n * r, op, "out");
  if (n * r == 0) return;
  launch(quantize_kernel, detail::grid_for(n * r, kThreads), kThreads, 0, stream, points, n, r, edges, bins, out);
  check(cudaGetLastError(), op);
}

std::vector<std::uint32_t> quantize_buckets(MatrixView<const float> points, MatrixView<const float> edges) {
  constexpr const char* op = "cuda::quantize_buckets";
  check_view(op, "points", points);
  detail::check_bin_edges(edges, points.cols, op);
  const DeviceArray<float> dp = detail::upload(points, op);
  const DeviceArray<float> de = detail::upload(edges, op);
  DeviceArray<std::uint32_t> out(points.rows * points.cols, op);
  quantize_buckets(dp.data(), points.rows, points.cols, de.data(), edges.cols + 1, out.data());
  return detail::download_vector(out);
}

DeviceGraph bucket_graph(const std::uint32_t* query_buckets, std::size_t n, std::size_t rq,
                         const std::uint32_t* key_buckets, std::size_t m, std::size_t rk, std::size_t num_buckets,
                         bool causal, cudaStream_t stream) {
  constexpr const char* op = "cuda::bucket_graph";
  detail::check_pointer(query_buckets, n * rq, op, "query_buckets");
  detail::check_pointer(key_buckets, m * rk, op, "key_buckets");
  detail::check_graph_size(n, m, op);
  check_bucket_ids(query_buckets, n, rq, key_buckets, m, rk, num_buckets, stream, op);
  return detail::bucket_graph_of_valid_ids(query_buckets, n, rq, key_buckets, m, rk, causal, stream);
}

DeviceGraph detail::bucket_graph_of_valid_ids(const std::uint32_t* query_buckets, std::size_t n, std::size_t rq,
                                              const std::uint32_t* key_buckets, std::size_t m, std::size_t rk,
                                              bool causal, cudaStream_t stream) {
  return detail::build_rows(BucketRows{query_buckets, rq, key_buckets, rk}, n, m, causal, stream,
                            "cuda::bucket_graph");
}

Graph bucket_graph(MatrixView<const std::uint32_t> query_buckets, MatrixView<const std::uint32_t> key_buckets,
                   std::size_t num_buckets, bool causal) {
  constexpr const char* op = "cuda::bucket_graph";
  check_view(op, "query_buckets", query_buckets);
  check_view(op, "key_buckets", key_buckets);
  detail::check_graph_size(query_buckets.rows, key_buckets.rows, op);
  const DeviceArray<std::uint32_t> dq = detail::upload(query_buckets, op);
  const DeviceArray<std::uint32_t> dk = detail::upload(key_buckets, op);
  return bucket_graph(dq.data(), query_buckets.rows, query_buckets.cols, dk.data(), key_buckets.rows,
                      key_buckets.cols, num_buckets, causal)
      .download();
}

}  // namespace entgraph::cuda
