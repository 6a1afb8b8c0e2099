// Sparsefinder's predictors end to end on the GPU, from their saved
// parameters: project, then bucket or threshold (see predictors.hpp).
#include <cuda_runtime.h>

#include <cmath>

#include "entgraph/cuda/predictors.hpp"
#include "predictors_common.cuh"

namespace entgraph::cuda {
namespace {

// q and k projected on the device (n x r and m x r).
struct Projected {
  DeviceArray<float> qp, kp;
  std::size_t n = 0, m = 0, r = 0;
};

Projected project_both(MatrixView<const float> q, MatrixView<const float> k, MatrixView<const float> wq,
                       MatrixView<const float> wk, const char* op) {
  detail::check_view(q, op, "q");
  detail::check_view(k, op, "k");
  detail::check_view(wq, op, "wq");
  detail::check_view(wk, op, "wk");
  if (q.cols != k.cols)
    detail::argument_error(op, "q has " + std::to_string(q.cols) + " columns, k has " + std::to_string(k.cols));
  if (wq.rows != q.cols || wk.rows != q.cols)
    detail::argument_error(op, "wq and wk must have d = " + std::to_string(q.cols) + " rows (got " +
                                   std::to_string(wq.rows) + " and " + std::to_string(wk.rows) + ")");
  if (wq.cols != wk.cols || wq.cols == 0)
    detail::argument_error(op, "wq and wk must have the same r >= 1 columns (got " + std::to_string(wq.cols) +
                                   " and " + std::to_string(wk.cols) + ")");
  detail::check_graph_size(q.rows, k.rows, op);
  Projected p;
  p.n = q.rows;
  p.m = k.rows;
  p.r = wq.cols;
  const DeviceArray<float> dq = detail::upload_matrix(q, op), dk = detail::upload_matrix(k, op);
  const DeviceArray<float> dwq = detail::upload_matrix(wq, op), dwk = detail::upload_matrix(wk, op);
  p.qp = DeviceArray<float>(p.n * p.r, op);
  p.kp = DeviceArray<float>(p.m * p.r, op);
  project(dq.data(), p.n, q.cols, dwq.data(), p.r, p.qp.data());
  project(dk.data(), p.m, k.cols, dwk.data(), p.r, p.kp.data());
  return p;
}

}  // namespace

Graph predict_distance(MatrixView<const float> q, MatrixView<const float> k, MatrixView<const float> wq,
                       MatrixView<const float> wk, double threshold, bool causal) {
  constexpr const char* op = "cuda::predict_distance";
  if (!std::isfinite(threshold) || !(threshold >= 0.0))
    detail::argument_error(op, "threshold must be finite and >= 0 (got " + std::to_string(threshold) + ")");
  const Projected p = project_both(q, k, wq, wk, op);
  return distance_graph(p.qp.data(), p.n, p.kp.data(), p.m, p.r, threshold, causal).download();
}

Graph predict_kmeans(MatrixView<const float> q, MatrixView<const float> k, MatrixView<const float> wq,
                     MatrixView<const float> wk, MatrixView<const float> centroids, std::size_t top) {
  constexpr const char* op = "cuda::predict_kmeans";
  detail::check_view(centroids, op, "centroids");
  if (centroids.cols != wq.cols)
    detail::argument_error(op, "centroids have " + std::to_string(centroids.cols) + " columns, expected r = " +
                                   std::to_string(wq.cols));
  if (top == 0 || top > centroids.rows)
    detail::argument_error(op, "top must be in [1, clusters] (got " + std::to_string(top) + ", clusters " +
                                   std::to_string(centroids.rows) + ")");
  const Projected p = project_both(q, k, wq, wk, op);
  const DeviceArray<float> dc = detail::upload_matrix(centroids, op);
  DeviceArray<std::uint32_t> qb(p.n * top, op), kb(p.m * top, op);
  nearest_centroids(p.qp.data(), p.n, p.r, dc.data(), centroids.rows, top, qb.data());
  nearest_centroids(p.kp.data(), p.m, p.r, dc.data(), centroids.rows, top, kb.data());
  return bucket_graph(qb.data(), p.n, top, kb.data(), p.m, top, centroids.rows, false).download();
}

Graph predict_quantization(MatrixView<const float> q, MatrixView<const float> k, MatrixView<const float> wq,
                           MatrixView<const float> wk, MatrixView<const float> edges) {
  constexpr const char* op = "cuda::predict_quantization";
  detail::check_bin_edges(edges, wq.cols, op);
  const std::size_t bins = edges.cols + 1;
  const Projected p = project_both(q, k, wq, wk, op);
  const DeviceArray<float> de = detail::upload_matrix(edges, op);
  DeviceArray<std::uint32_t> qb(p.n * p.r, op), kb(p.m * p.r, op);
  quantize_buckets(p.qp.data(), p.n, p.r, de.data(), bins, qb.data());
  quantize_buckets(p.kp.data(), p.m, p.r, de.data(), bins, kb.data());
  return bucket_graph(qb.data(), p.n, p.r, kb.data(), p.m, p.r, p.r * bins, false).download();
}

}  // namespace entgraph::cuda
