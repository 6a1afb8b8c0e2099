// entgraph CUDA backend: the hot paths of the graph predictors.
//
// Sparsefinder (Treviso et al. 2022, "Predicting Attention Sparsity in
// Transformers"): a learned projection to r dimensions, then
//   distance      edge iff ‖q' − k'‖ ≤ t,
//   quantization  edge iff q' and k' fall in the same bin of some coordinate,
//   k-means       edge iff q' and k' share one of their `top` nearest centroids.
// Reformer (Kitaev et al. 2020) and the Routing Transformer (Roy et al. 2021)
// also end in a bucket graph.
//
// Every function mirrors its CPU counterpart exactly, so that GPU and CPU
// graphs are equal, not just close:
//   project            Projection::project_queries / project_keys (training/projection.hpp)
//   nearest_centroids  entgraph::nearest_centroids (training/kmeans.hpp)
//   quantize_buckets   the bucket ids of sparsefinder-quantization
//   bucket_graph       Graph::from_buckets (graph.hpp)
//   distance_graph     the graph of sparsefinder-distance
//   compare_graphs     entgraph::compare_graphs (graph.hpp)
// and Predictor::predict(Device::cuda, ...) runs Sparsefinder's methods with them.
// Double-precision sums run in the CPU's order with explicit round-to-nearest
// operations (no fused multiply-add), so projections and distances are
// bit-identical to the CPU's.
//
// Conventions (see device.hpp): device pointers to row-major contiguous
// matrices; work runs on `stream`; functions returning a DeviceGraph wait for
// the stream once (to learn the number of edges) and leave the fill running.
// Host overloads taking MatrixView (any stride) upload, run and download.
// Arguments are checked before any kernel runs: misuse throws entgraph::Error
// "cuda::<op>: ..." naming the argument, device failures throw CudaError.
// Inputs must be finite (not checked, as on the CPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "entgraph/cuda/device.hpp"
#include "entgraph/cuda/device_graph.hpp"
#include "entgraph/backend.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/matrix_view.hpp"

namespace entgraph::cuda {

// ---- projection ----

// y = x w: x is n x d, w is d x r (1 <= r), y is n x r. Each output is a
// double sum over t = 0..d-1 rounded once to float, as on the CPU.
// Throws if r is 0 or a pointer is null while its size is not.
void project(const float* x, std::size_t n, std::size_t d, const float* w, std::size_t r, float* y,
             cudaStream_t stream = nullptr);
// The same from host memory: returns x.rows x w.cols values. Throws unless
// x.cols == w.rows.
std::vector<float> project(MatrixView<const float> x, MatrixView<const float> w);

// ---- bucket ids ----

// The `top` nearest centroids of each point (n x top, nearest first): points
// is n x dim, centroids is clusters x dim. Squared Euclidean distance in
// double; ties go to the lower centroid index. Throws unless
// 1 <= top <= clusters.
void nearest_centroids(const float* points, std::size_t n, std::size_t dim, const float* centroids,
                       std::size_t clusters, std::size_t top, std::uint32_t* out, cudaStream_t stream = nullptr);
// The same from host memory; centroids is clusters x points.cols.
std::vector<std::uint32_t> nearest_centroids(MatrixView<const float> points, MatrixView<const float> centroids,
                                             std::size_t top);

// Sparsefinder quantization: for points n x r and per-coordinate bin edges
// r x (bins - 1) (ascending in each row), out(i, c) = c * bins + (number of
// edges of row c that are <= points(i, c)), a bucket id below r * bins.
// Throws if bins is 0 or r * bins does not fit in 32 bits.
void quantize_buckets(const float* points, std::size_t n, std::size_t r, const float* edges, std::size_t bins,
                      std::uint32_t* out, cudaStream_t stream = nullptr);
// The same from host memory; bins = edges.cols + 1. Throws unless
// edges.rows == points.cols and each row of edges is ascending.
std::vector<std::uint32_t> quantize_buckets(MatrixView<const float> points, MatrixView<const float> edges);

// ---- graphs ----

// Graph::from_buckets: query i is linked to every key j with which it shares
// a bucket. query_buckets is n x rq, key_buckets m x rk (repeats are fine).
// With causal set, keys j >= causal_key_limit(i, n, m) are left out (the CPU
// function has no causal flag: false gives its graph). Throws
// "cuda::bucket_graph: key_buckets(j, c) = b is not below num_buckets = B"
// (keys are checked first, as on the CPU), or if n or m exceeds 2^32 - 1.
// Every pair (i, j) is tested, O(n m rq rk) work: with a few buckets per
// point a dense scan beats building and sorting bucket lists on a GPU.
DeviceGraph bucket_graph(const std::uint32_t* query_buckets, std::size_t n, std::size_t rq,
                         const std::uint32_t* key_buckets, std::size_t m, std::size_t rk, std::size_t num_buckets,
                         bool causal = false, cudaStream_t stream = nullptr);
Graph bucket_graph(MatrixView<const std::uint32_t> query_buckets, MatrixView<const std::uint32_t> key_buckets,
                   std::size_t num_buckets, bool causal = false);

// sparsefinder-distance on projected points: qp is n x r, kp is m x r
// (r >= 1). Key j is an edge of query i iff j < causal_key_limit(i, n, m)
// when causal, kp(j, 0) lies in [qp(i, 0) - t, qp(i, 0) + t] (rounded in
// double, the CPU's sorted-scan window) and the squared distance, summed in
// double, is <= t * t. Throws unless t is finite and >= 0.
DeviceGraph distance_graph(const float* qp, std::size_t n, const float* kp, std::size_t m, std::size_t r,
                           double threshold, bool causal, cudaStream_t stream = nullptr);
Graph distance_graph(MatrixView<const float> qp, MatrixView<const float> kp, double threshold, bool causal);

// ---- lowrank-threshold ----
// The whole lowrank-threshold prediction of one head (lowrank_threshold.cu;
// Predictor::predict(Device::cuda, ...) runs it): q is n x d and k m x d on
// the device (contiguous rows), head's projections and settings on the host.
// Throws the CPU's message for a NaN or infinity in q or k, and for r > 256.
Graph lowrank_threshold_graph(const LowRankThresholdHead& head, const float* q, std::size_t n, const float* k,
                              std::size_t m, std::size_t d, bool causal);
// The same graph left in device memory (for block_cover and block-sparse
// attention on the GPU without a round trip through the host).
DeviceGraph lowrank_threshold_device_graph(const LowRankThresholdHead& head, const float* q, std::size_t n,
                                           const float* k, std::size_t m, std::size_t d, bool causal);

// ---- metrics ----

// entgraph::compare_graphs: gold, predicted and hits counted within the
// allowed pairs (j < causal_key_limit(i, n, m) when causal), allowed and
// queries from the shape. Throws if the shapes differ. Waits for the stream.
GraphMetrics compare_graphs(const DeviceGraph& predicted, const DeviceGraph& gold, bool causal,
                            cudaStream_t stream = nullptr);
// Host graphs: entgraph::compare_graphs(Device::cuda, ...) (entgraph/graph.hpp).

// ---- whole predictors ----
// A fitted Sparsefinder predictor runs here from its parameters in memory
// through Predictor::predict(Device::cuda, ...) (entgraph/predictors/predictor.hpp).

}  // namespace entgraph::cuda
