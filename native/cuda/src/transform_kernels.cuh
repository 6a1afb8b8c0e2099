// The GPU transforms' kernels: the forward (a row op of transform_rows.cuh
// per row, staged or not) and the backward of the softmax and entmax family.
// Included only by transforms.cu, which launches them.
#pragma once

#include "kernel_launch.cuh"
#include "transform_rows.cuh"

namespace entgraph::cuda {
namespace {

template <bool kStaged, class Op>
__global__ void __launch_bounds__(kMaxThreads)
    forward_kernel(const float* scores, float* probs, const std::uint8_t* mask, std::size_t rows, unsigned n, Op op) {
  float* staged = dynamic_shared<float>();
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* z = scores + r * n;
    const std::uint8_t* keep = mask != nullptr ? mask + r * n : nullptr;
    if constexpr (kStaged) {
      __syncthreads();  // the previous row is done with `staged`
      for (unsigned i = threadIdx.x; i < n; i += blockDim.x) staged[i] = keep == nullptr || keep[i] != 0 ? z[i] : -kInf;
      __syncthreads();
    }
    // In place (probs == scores) is safe: every op writes p[i] only in its
    // last pass, after a block reduction, from the thread that reads z[i].
    op(RowIn<kStaged>{z, keep, staged}, probs + r * n, n);
  }
}

enum class Weight { prob, support, sqrt_prob, power };

// In double: p^(2 - alpha) overflows float for alpha > 2 and small p (1e40 at
// alpha = 10, p = 1e-5), which would turn the row's <s, dp> / sum s into NaN.
template <Weight kWeight>
__device__ double backward_weight(float p, double exponent) {
  const double x = p;
  if constexpr (kWeight == Weight::prob) return x;
  if constexpr (kWeight == Weight::support) return x > 0.0 ? 1.0 : 0.0;
  if constexpr (kWeight == Weight::sqrt_prob) return sqrt(x);
  return x > 0.0 ? pow(x, exponent) : 0.0;
}

// dz = s (dp - <s, dp> / sum s), s = weight(p). Same-index reads and writes
// per thread, after the reduction: dz may alias p or dp.
template <Weight kWeight>
__global__ void __launch_bounds__(kMaxThreads) backward_kernel(const float* probs, const float* grad_probs,
                                                               float* grad_scores, std::size_t rows, unsigned n,
                                                               double exponent) {
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* p = probs + r * n;
    const float* g = grad_probs + r * n;
    float* dz = grad_scores + r * n;
    // dz = w (dp - q), q = <w, dp> / sum w, computed as w ((dp - dp_m) - r)
    // with m the entry of the largest w and r = q - dp_m (as the CPU does):
    // for alpha > 2 one entry's w = p^(2 - alpha) can hold nearly all of
    // sum w, and dp_m - q would cancel to nothing even in double.
    WeightTop t{0.0, -1.0, 0.0f, ~0u};
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
      const double w = backward_weight<kWeight>(p[i], exponent);
      t.sum += w;
      if (w > t.top) t = {t.sum, w, g[i], i};  // i grows along a thread's loop: ties keep the first
    }
    t = block_reduce(t, WeightTopOp{});
    double rest = 0.0;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
      rest += backward_weight<kWeight>(p[i], exponent) * (static_cast<double>(g[i]) - t.pivot);
    rest = block_reduce(rest, detail::SumOp{});
    const double rq = t.sum > 0.0 ? rest / t.sum : 0.0;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
      dz[i] = static_cast<float>(backward_weight<kWeight>(p[i], exponent) *
                                 ((static_cast<double>(g[i]) - t.pivot) - rq));
  }
}

}  // namespace
}  // namespace entgraph::cuda
