// Sparsefinder's projection y = x w (see predictors.hpp).
#include <cuda_runtime.h>

#include "entgraph/cuda/predictors.hpp"
#include "kernel_launch.cuh"
#include "predictors_common.cuh"

namespace entgraph::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kTileT = 32;  // the slice of the d dimension staged per step

// Block shape: `cols` output columns (a power of two <= 8, so that r = 1..4
// wastes few threads) by kThreads / cols rows.
unsigned block_cols(std::size_t r) { return r >= 8 ? 8 : r >= 4 ? 4 : r >= 2 ? 2 : 1; }

// One thread per output; x and w are staged in shared memory kTileT columns
// of x at a time. Each output is summed over t = 0..d-1 in order, in double,
// with round-to-nearest adds and products (no FMA), and rounded once to
// float: Projection::project_queries does exactly this, so the bits agree.
__global__ void project_kernel(const float* x, std::size_t n, std::size_t d, const float* w, std::size_t r,
                               float* y) {
  float* smem = dynamic_shared<float>();
  const unsigned cols = blockDim.x, rows = blockDim.y, threads = cols * rows;
  float* xs = smem;                        // rows x (kTileT + 1): the pad avoids bank conflicts
  float* ws = smem + rows * (kTileT + 1);  // kTileT x cols
  const unsigned tid = threadIdx.y * cols + threadIdx.x;
  const std::size_t i0 = static_cast<std::size_t>(blockIdx.x) * rows;
  const std::size_t c0 = static_cast<std::size_t>(blockIdx.y) * cols;
  double acc = 0.0;
  for (std::size_t t0 = 0; t0 < d; t0 += kTileT) {
    const unsigned tn = static_cast<unsigned>(d - t0 < kTileT ? d - t0 : kTileT);
    for (unsigned e = tid; e < rows * kTileT; e += threads) {
      const unsigned rr = e / kTileT, tt = e % kTileT;
      xs[rr * (kTileT + 1) + tt] = (i0 + rr < n && tt < tn) ? x[(i0 + rr) * d + t0 + tt] : 0.0f;
    }
    for (unsigned e = tid; e < kTileT * cols; e += threads) {
      const unsigned tt = e / cols, cc = e % cols;
      ws[tt * cols + cc] = (tt < tn && c0 + cc < r) ? w[(t0 + tt) * r + c0 + cc] : 0.0f;
    }
    __syncthreads();
    for (unsigned tt = 0; tt < tn; ++tt)
      acc = __dadd_rn(acc, __dmul_rn(static_cast<double>(xs[threadIdx.y * (kTileT + 1) + tt]),
                                     static_cast<double>(ws[tt * cols + threadIdx.x])));
    __syncthreads();
  }
  const std::size_t i = i0 + threadIdx.y, c = c0 + threadIdx.x;
  if (i < n && c < r) y[i * r + c] = __double2float_rn(acc);
}

}  // namespace

void project(const float* x, std::size_t n, std::size_t d, const float* w, std::size_t r, float* y,
             cudaStream_t stream) {
  constexpr const char* op = "cuda::project";
  if (r == 0) detail::argument_error(op, "r must be >= 1 (got 0)");
  detail::check_pointer(x, n * d, op, "x");
  detail::check_pointer(w, d * r, op, "w");
  detail::check_pointer(y, n * r, op, "y");
  if (n == 0) return;
  const unsigned cols = block_cols(r), rows = kThreads / cols;
  const std::size_t row_blocks = (n + rows - 1) / rows, col_blocks = (r + cols - 1) / cols;
  if (row_blocks > 0x7fffffffu) detail::argument_error(op, "too many rows (got " + std::to_string(n) + ")");
  if (col_blocks > 0xffffu) detail::argument_error(op, "too many columns (got r = " + std::to_string(r) + ")");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(col_blocks));
  const dim3 block(cols, rows);
  const std::size_t shared = (rows * (kTileT + 1) + kTileT * cols) * sizeof(float);
  launch(project_kernel, grid, block, shared, stream, x, n, d, w, r, y);
  check(cudaGetLastError(), op);
}

std::vector<float> project(MatrixView<const float> x, MatrixView<const float> w) {
  constexpr const char* op = "cuda::project";
  check_view(op, "x", x);
  check_view(op, "w", w);
  if (x.cols != w.rows)
    detail::argument_error(op, "x has " + std::to_string(x.cols) + " columns but w has " + std::to_string(w.rows) +
                                   " rows (expected equal)");
  if (w.cols == 0) detail::argument_error(op, "w must have r >= 1 columns (got 0)");
  const DeviceArray<float> dx = detail::upload(x, op);
  const DeviceArray<float> dw = detail::upload(w, op);
  DeviceArray<float> dy(x.rows * w.cols, op);
  project(dx.data(), x.rows, x.cols, dw.data(), w.cols, dy.data());
  return detail::download_vector(dy);
}

}  // namespace entgraph::cuda
