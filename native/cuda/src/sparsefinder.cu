// Sparsefinder's predictors end to end on the GPU, from a fitted predictor's
// parameters in memory (SparsefinderHead): project, then bucket or threshold.
// The backend's kernel for Predictor::predict(Device::cuda, ...); the graphs
// equal the CPU's (see predictors.hpp).
#include <cuda_runtime.h>

#include "backend_kernels.hpp"
#include "checks.cuh"
#include "entgraph/cuda/predictors.hpp"
#include "predictors_common.cuh"

namespace entgraph::cuda {
namespace {

constexpr const char* kOp = "predict";

// q and k projected on the device (n x r and m x r).
struct Projected {
  DeviceArray<float> qp, kp;
  std::size_t n = 0, m = 0, r = 0;
};

// q and k in host memory (copied up first) or, on_device, the GPU's own
// (contiguous rows, read in place).
Projected project_both(MatrixView<const float> q, MatrixView<const float> k, const SparsefinderHead& head,
                       bool on_device) {
  detail::check_graph_size(q.rows, k.rows, kOp);  // what the GPU's graphs hold (the core checked the views)
  Projected p;
  p.n = q.rows;
  p.m = k.rows;
  p.r = head.wq.cols;
  const detail::DeviceInputs in = detail::device_inputs(q, k, on_device, kOp);
  const float *q_data = in.q.data, *k_data = in.k.data;
  const DeviceArray<float> dwq = detail::upload(head.wq, kOp), dwk = detail::upload(head.wk, kOp);
  p.qp = DeviceArray<float>(p.n * p.r, kOp);
  p.kp = DeviceArray<float>(p.m * p.r, kOp);
  // project() asks the driver whether q_data and k_data are the GPU's.
  project(q_data, p.n, q.cols, dwq.data(), p.r, p.qp.data());
  project(k_data, p.m, k.cols, dwk.data(), p.r, p.kp.data());
  return p;
}

Graph predict_distance(const Projected& p, double threshold, bool causal) {
  return distance_graph(p.qp.data(), p.n, p.kp.data(), p.m, p.r, threshold, causal).download();
}

// The CPU ignores the causal mask for k-means buckets, and so does this.
Graph predict_kmeans(const Projected& p, MatrixView<const float> centroids, std::size_t top) {
  const DeviceArray<float> dc = detail::upload(centroids, kOp);
  DeviceArray<std::uint32_t> qb(p.n * top, kOp), kb(p.m * top, kOp);
  nearest_centroids(p.qp.data(), p.n, p.r, dc.data(), centroids.rows, top, qb.data());
  nearest_centroids(p.kp.data(), p.m, p.r, dc.data(), centroids.rows, top, kb.data());
  return detail::bucket_graph_of_valid_ids(qb.data(), p.n, top, kb.data(), p.m, top, false, nullptr).download();
}

Graph predict_quantization(const Projected& p, MatrixView<const float> edges) {
  const std::size_t bins = edges.cols + 1;
  const DeviceArray<float> de = detail::upload(edges, kOp);
  DeviceArray<std::uint32_t> qb(p.n * p.r, kOp), kb(p.m * p.r, kOp);
  quantize_buckets(p.qp.data(), p.n, p.r, de.data(), bins, qb.data());
  quantize_buckets(p.kp.data(), p.m, p.r, de.data(), bins, kb.data());
  return detail::bucket_graph_of_valid_ids(qb.data(), p.n, p.r, kb.data(), p.m, p.r, false, nullptr).download();
}

}  // namespace

namespace {

Graph sparsefinder_pattern(const SparsefinderHead& head, ConstMatrix<float> q, ConstMatrix<float> k, bool causal,
                           bool on_device) {
  const Projected p = project_both(q, k, head, on_device);
  switch (head.method) {
    case SparsefinderHead::Method::distance: return predict_distance(p, head.threshold, causal);
    case SparsefinderHead::Method::kmeans: return predict_kmeans(p, head.centroids, head.top);
    case SparsefinderHead::Method::quantization: return predict_quantization(p, head.edges);
  }
  throw Error("predict: unknown Sparsefinder method on device cuda");
}

}  // namespace

Graph detail::host_sparsefinder_pattern(const SparsefinderHead& head, ConstMatrix<float> q, ConstMatrix<float> k,
                                        bool causal) {
  return sparsefinder_pattern(head, q, k, causal, false);
}

Graph detail::device_sparsefinder_pattern(const SparsefinderHead& head, ConstMatrix<float> q, ConstMatrix<float> k,
                                          bool causal) {
  // The graph comes back to the host: wait for the caller's stream to have
  // written q and k, then run to the end.
  if (const cudaStream_t stream = current_stream()) synchronize(stream);
  return sparsefinder_pattern(head, q, k, causal, true);
}

}  // namespace entgraph::cuda
