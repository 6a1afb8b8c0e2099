// sparsefinder-distance's graph on projected points (see predictors.hpp).
#include <cuda_runtime.h>

#include <cmath>

#include "csr_rows.cuh"
#include "entgraph/cuda/predictors.hpp"
#include "predictors_common.cuh"

namespace entgraph::cuda {
namespace {

// The CPU (DistancePredictor::predict_pattern) scans, for query i, the keys
// whose first coordinate lies in [lo, hi] = [a0 - t, a0 + t] (in double) and
// keeps those with d2 <= t * t. Rounding makes that window a condition of its
// own, not a consequence of d2 <= t^2, so it is tested here too. Every double
// operation is the CPU's, in its order, without FMA contraction.
struct DistanceRows {
  const float* qp;
  const float* kp;
  std::size_t r;
  double t, t2;

  struct Row {
    const float* a;
    const float* kp;
    std::size_t r;
    double lo, hi, t2;
    __device__ bool operator()(std::size_t j) const {
      const float* b = kp + j * r;
      const double b0 = static_cast<double>(b[0]);
      if (!(b0 >= lo && b0 <= hi)) return false;
      double d2 = 0.0;
      for (std::size_t c = 0; c < r; ++c) {
        const double x = __dsub_rn(static_cast<double>(a[c]), static_cast<double>(b[c]));
        d2 = __dadd_rn(d2, __dmul_rn(x, x));
      }
      return d2 <= t2;
    }
  };
  __device__ Row row(std::size_t i) const {
    const float* a = qp + i * r;
    const double a0 = static_cast<double>(a[0]);
    return Row{a, kp, r, __dsub_rn(a0, t), __dadd_rn(a0, t), t2};
  }
};

}  // namespace

DeviceGraph distance_graph(const float* qp, std::size_t n, const float* kp, std::size_t m, std::size_t r,
                           double threshold, bool causal, cudaStream_t stream) {
  constexpr const char* op = "cuda::distance_graph";
  if (r == 0) detail::argument_error(op, "r must be >= 1 (got 0)");
  if (!std::isfinite(threshold) || !(threshold >= 0.0))
    detail::argument_error(op, "threshold must be finite and >= 0 (got " + std::to_string(threshold) + ")");
  detail::check_pointer(qp, n * r, op, "qp");
  detail::check_pointer(kp, m * r, op, "kp");
  detail::check_graph_size(n, m, op);
  const double t2 = threshold * threshold;  // on the host, as the CPU computes it
  return detail::build_rows(DistanceRows{qp, kp, r, threshold, t2}, n, m, causal, stream, op);
}

Graph distance_graph(MatrixView<const float> qp, MatrixView<const float> kp, double threshold, bool causal) {
  constexpr const char* op = "cuda::distance_graph";
  check_view(op, "qp", qp);
  check_view(op, "kp", kp);
  if (qp.cols != kp.cols)
    detail::argument_error(op, "qp has " + std::to_string(qp.cols) + " columns, kp has " + std::to_string(kp.cols) +
                                   " (expected equal)");
  if (qp.cols == 0) detail::argument_error(op, "r must be >= 1 (got 0 columns)");
  if (!std::isfinite(threshold) || !(threshold >= 0.0))
    detail::argument_error(op, "threshold must be finite and >= 0 (got " + std::to_string(threshold) + ")");
  detail::check_graph_size(qp.rows, kp.rows, op);
  const DeviceArray<float> dq = detail::upload(qp, op);
  const DeviceArray<float> dk = detail::upload(kp, op);
  return distance_graph(dq.data(), qp.rows, dk.data(), kp.rows, qp.cols, threshold, causal).download();
}

}  // namespace entgraph::cuda
