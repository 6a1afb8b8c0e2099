// lowrank-threshold's graph on the GPU: the backend's kernel for
// Predictor::predict(Device::cuda, ...) of that method. The definition is the
// CPU's (core/src/predictors/estimated_rows.hpp): query i keeps key j iff
//   ŝ_ij > θ̂_i − margin / (α − 1),   ŝ_ij = float((double(D_ij) q_step_i) k_step_j),
// D_ij the integer dot product of the rows' codes and θ̂_i the α-entmax
// threshold of the estimated row. Steps, each on the device:
//  1. q and k projected (project(): the CPU's double sums) and each row
//     rounded to codes of `bits` bits with its own step (the CPU's rounding);
//  2. D on tensor cores (mma.sync m16n8k32, bytes in, int32 sums: exact),
//     and every decision the exact estimate's (a float approximation
//     decides where it is far from the bound, approximate() below). The
//     products are recomputed by each of up to five passes over the code tiles
//     rather than stored (n m floats): the rows' maxima, then the count and
//     the values of each row's candidates (the keys within 1 / (α − 1) of the
//     maximum, in key order), then, after the thresholds, the count and the
//     indices of the edges (with margin <= 0 every edge is a candidate, and
//     the edges are picked from the candidates' list instead);
//  3. θ̂ per row by predictors/theta_steps.hpp, the CPU's own steps.
// The graph equals the CPU's for α = 1.5 and 2; elsewhere θ̂'s last bits may
// differ (pow is not correctly rounded, and where the steps stall the CPU
// ends with its float64 transform, this with bisection), which moves an edge
// only if an estimate lies within that rounding of the cut.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend_kernels.hpp"
#include "checks.cuh"
#include "code_tiles.cuh"
#include "csr_rows.cuh"
#include "entgraph/cuda/predictors.hpp"
#include "entgraph/error.hpp"
#include "entgraph/heads.hpp"
#include "head_scan.hpp"
#include "kernel_launch.cuh"
#include "mma_ptx.cuh"
#include "predictors/estimate_range.hpp"
#include "predictors/theta_steps.hpp"
#include "predictors_common.cuh"

namespace entgraph::cuda {
namespace {

using detail::kFullWarp;
using detail::kWarpSize;
namespace theta_steps = ::entgraph::detail::theta_steps;

constexpr const char* kOp = "predict";
constexpr const char* kMethod = "lowrank-threshold";
using namespace detail::code_tiles;

enum class Pass { row_max, count, fill };

struct Tiles {
  const std::uint32_t* q;  // query codes, words per row
  const std::uint32_t* k;
  const double* q_step;
  const double* k_step;
  const float* q_scale;  // Codes::scales
  const float* k_scale;
  std::size_t n, m, words;
  bool causal;
};

// The exact estimate, as QuantizedEstimate::exact (no fused operations).
__device__ float estimate(int d, double q_step, double k_step) {
  return __double2float_rn(__dmul_rn(__dmul_rn(static_cast<double>(d), q_step), k_step));
}

// Its float approximation, float(D) times the two scales in float: four
// roundings of 2^-24 from the exact value's real product, and the exact one
// rounds within 2^-24 of it, so they differ by less than 2^-21 of either
// (D is exact in float, |D| < 2^24). Where that bound does not hold (a
// scale is NaN because its step is not a normal float, the result is
// below 2^-100, so that products may have been subnormal, or above 2^100)
// the approximation is NaN and the exact estimate decides.
__device__ float approximate(int d, float q_scale, float k_scale) {
  const float a = __fmul_rn(__fmul_rn(static_cast<float>(d), q_scale), k_scale);
  return fabsf(a) >= 0x1p-100f && fabsf(a) <= 0x1p100f ? a : NAN;
}
// The approximation's slack: 2^-20 of its magnitude.
__device__ float slack_of(float approx) { return 0x1p-20f * fabsf(approx); }

// One block per 64-query tile (grid-stride), each warp 16 rows, over the
// key tiles its rows see. A thread holds, of each 8-key mma tile, keys
// 2 (lane % 4) + {0, 1} of rows lane / 4 and lane / 4 + 8 (the D fragment).
//   row_max: floor[i] a little under the row's largest estimate minus
//            reach_of_support (-inf: no key); candidates are above it;
//   count:   counts[i] = the keys with double(estimate) > above[i];
//   fill:    those keys in order from offsets[i], as indices and/or values.
template <Pass kPass>
__global__ void __launch_bounds__(kThreads)
    code_tiles_kernel(Tiles t, double reach_of_support, const double* above, double* floor, std::size_t* counts,
                      const std::size_t* offsets, std::uint32_t* indices, float* values) {
  for (std::size_t tile = blockIdx.x; tile * kTileQueries < t.n; tile += gridDim.x) {
    const TileRows tr = tile_rows(tile);
    const std::size_t(&rows)[2] = tr.row;
    const std::size_t limit[2] = {visible_keys(rows[0], t.n, t.m, t.causal), visible_keys(rows[1], t.n, t.m, t.causal)};
    const double q_step[2] = {t.q_step[rows[0]], t.q_step[rows[1]]};
    const float q_scale[2] = {t.q_scale[rows[0]], t.q_scale[rows[1]]};
    float best[2] = {-INFINITY, -INFINITY};
    std::size_t found[2] = {0, 0};
    double bound[2] = {0.0, 0.0};
    if (kPass != Pass::row_max)
      for (int h = 0; h < 2; ++h) bound[h] = rows[h] < t.n ? above[rows[h]] : INFINITY;
    std::size_t next[2] = {0, 0};
    if (kPass == Pass::fill)
      for (int h = 0; h < 2; ++h) next[h] = rows[h] < t.n ? offsets[rows[h]] : 0;
    // Up to the keys the tile's last row sees, the most any of its rows see.
    const std::size_t keys = visible_keys(last_tile_row(tile, t.n), t.n, t.m, t.causal);
    walk_keys(t.q, t.k, t.words, tr, keys, [&](std::size_t column, const int(&d)[4]) {
      bool keep[4] = {false, false, false, false};
      float value[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        const std::size_t j = column + 2 * tr.thread + e % 2;
        if (j >= limit[h]) continue;
        // The approximation decides where it is far from the decision
        // (the maxima: an approximate maximum is enough, see below).
        const float approx = approximate(d[e], q_scale[h], t.k_scale[j]);
        if (kPass == Pass::row_max) {
          best[h] = fmaxf(best[h], approx == approx ? approx : estimate(d[e], q_step[h], t.k_step[j]));
          continue;
        }
        const float slack = slack_of(approx);
        if (approx - slack > bound[h]) {
          keep[e] = true;
        } else if (!(approx + slack <= bound[h])) {  // near, or NaN: the exact estimate
          value[e] = estimate(d[e], q_step[h], t.k_step[j]);
          keep[e] = static_cast<double>(value[e]) > bound[h];
        }
        if (kPass == Pass::fill && keep[e] && values) value[e] = estimate(d[e], q_step[h], t.k_step[j]);
        if (kPass == Pass::count) found[h] += keep[e] ? 1 : 0;
      }
      if (kPass == Pass::fill)
        for (int h = 0; h < 2; ++h)
          write_kept(tr, h, keep, next[h], [&](std::size_t at, int e) {
            if (indices) indices[at] = static_cast<std::uint32_t>(column + 2 * tr.thread + e % 2);
            if (values) values[at] = value[e];
          });
    });
    for (int h = 0; h < 2; ++h) {
      if (kPass == Pass::row_max) {
        best[h] = fmaxf(best[h], __shfl_xor_sync(kFullWarp, best[h], 1));
        best[h] = fmaxf(best[h], __shfl_xor_sync(kFullWarp, best[h], 2));
      } else if (kPass == Pass::count) {
        found[h] = quad_sum(found[h]);
      }
      if (tr.thread != 0 || rows[h] >= t.n) continue;
      if (kPass == Pass::row_max) {
        // best is within 2^-21 of the row's largest exact estimate: the
        // floor below sits under every key with (α − 1)(e − max) > −1 (the
        // first step drops the others again). The exact maximum is the
        // largest candidate, found with the thresholds.
        const double top = static_cast<double>(best[h]);
        floor[rows[h]] = top - reach_of_support - 0x1p-19 * (fabs(top) + reach_of_support);
      } else if (kPass == Pass::count) {
        counts[rows[h]] = found[h];
      }
    }
  }
}

// One thread per row: θ̂ from the row's candidates (values, in key order;
// x is scratch of the same size), the cut θ̂ − reach into cut[i] (+inf for a
// row without keys).
__global__ void thresholds_kernel(const std::size_t* offsets, const float* values, double* x, std::size_t n,
                                  double alpha, double reach, double* cut) {
  const double am1 = alpha - 1.0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t begin = offsets[i], count = offsets[i + 1] - begin;
    if (count == 0) {
      cut[i] = INFINITY;
      continue;
    }
    float largest = values[begin];  // the row's largest estimate is a candidate
    for (std::size_t j = 1; j < count; ++j) largest = fmaxf(largest, values[begin + j]);
    const double top = static_cast<double>(largest);
    double* xi = x + begin;
    for (std::size_t j = 0; j < count; ++j)
      xi[j] = __dmul_rn(am1, __dsub_rn(static_cast<double>(values[begin + j]), top));
    const double theta_x = theta_steps::solve(xi, count, alpha);
    cut[i] = __dsub_rn(__dadd_rn(top, __ddiv_rn(theta_x, am1)), reach);
  }
}

// One thread per row: of the row's candidates (keys and exact values in key
// order), those above the cut. With counts set, counts[i] = how many; else
// their keys from offsets[i] into indices.
__global__ void candidate_edges_kernel(const std::size_t* candidates, const std::uint32_t* keys, const float* values,
                                       const double* cut, std::size_t n, std::size_t* counts,
                                       const std::size_t* offsets, std::uint32_t* indices) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::size_t found = 0;
    for (std::size_t c = candidates[i]; c < candidates[i + 1]; ++c)
      if (static_cast<double>(values[c]) > cut[i]) {
        if (indices) indices[offsets[i] + found] = keys[c];
        ++found;
      }
    if (counts) counts[i] = found;
  }
}

// q or k (rows x d, device memory) projected by w and quantized, as the
// CPU's predict does.
Codes project_and_quantize(const float* x, std::size_t rows, std::size_t d, ConstMatrix<float> w, int bits,
                           std::size_t tile) {
  const DeviceArray<float> dw = detail::upload(w, kOp);
  DeviceArray<float> projected(rows * w.cols, kOp);
  project(x, rows, d, dw.data(), w.cols, projected.data());
  return quantize_codes(projected.data(), rows, w.cols, bits, tile, 1.0, false, kOp);
}

DeviceGraph lowrank_threshold_pattern(const LowRankThresholdHead& head, ConstMatrix<float> q, ConstMatrix<float> k,
                                      bool causal, bool on_device) {
  detail::check_graph_size(q.rows, k.rows, kOp);
  if (head.wq.cols > kMaxChunks * kChunk)
    detail::argument_error(
        kOp, std::string(kMethod) + ": r = " + std::to_string(head.wq.cols) + " is above the GPU kernel's 256");
  const std::size_t n = q.rows, m = k.rows, d = q.cols;
  if (n == 0 || m == 0) return detail::upload_valid(Graph::empty(n, m), kOp);
  const detail::DeviceInputs in = detail::device_inputs(q, k, on_device, kOp);
  q = in.q;
  k = in.k;
  // A NaN or infinity has no code: the CPU's message (k is scanned twice,
  // standing in for the scan's v).
  const std::vector<HeadScan> scans = detail::scan_batched_heads(kOp, detail::one_head(q), detail::one_head(k),
                                                                 detail::one_head(k), nullptr, nullptr, nullptr);
  for (int s = 0; s < 2; ++s)
    if (scans[s].bad)
      throw Error(std::string(kMethod) + ": predict: " + (s == 0 ? "q" : "k") + " has a NaN or infinite value (row " +
                      std::to_string(scans[s].bad_row) + ", column " + std::to_string(scans[s].bad_col) + ")",
                  ErrorCode::bad_value);
  const Codes qc = project_and_quantize(q.data, n, d, head.wq, head.bits, kTileQueries);
  const Codes kc = project_and_quantize(k.data, m, d, head.wk, head.bits, kTileKeys);
  // Projections too large to estimate: the CPU's errors, from the same steps.
  const std::vector<double> q_steps = detail::download_vector(qc.steps), k_steps = detail::download_vector(kc.steps);
  ::entgraph::detail::check_estimate_range(kMethod, q_steps.data(), n, k_steps.data(), m, head.wq.cols,
                                           static_cast<double>((1 << (head.bits - 1)) - 1));
  const Tiles tiles{qc.words.data(),
                    kc.words.data(),
                    qc.steps.data(),
                    kc.steps.data(),
                    qc.scales.data(),
                    kc.scales.data(),
                    n,
                    m,
                    code_words(head.wq.cols),
                    causal};
  const unsigned blocks = detail::grid_for(n, kTileQueries);
  const double reach_of_support = 1.0 / (head.alpha - 1.0), reach = head.margin * reach_of_support;

  DeviceArray<double> floor(n, kOp), cut(n, kOp);
  launch(code_tiles_kernel<Pass::row_max>, blocks, kThreads, 0, nullptr, tiles, reach_of_support, nullptr, floor.data(),
         nullptr, nullptr, nullptr, nullptr);
  check(cudaGetLastError(), kOp);
  // The candidates of each row and their estimates, then the thresholds.
  DeviceArray<std::size_t> candidates = detail::zeroed_counts(n, nullptr, kOp);
  launch(code_tiles_kernel<Pass::count>, blocks, kThreads, 0, nullptr, tiles, reach_of_support, floor.data(), nullptr,
         candidates.data(), nullptr, nullptr, nullptr);
  check(cudaGetLastError(), kOp);
  const std::size_t total = detail::scan_counts(candidates.data(), n, nullptr, kOp);
  // With margin <= 0 the cut is at or above θ̂, above every candidate's
  // floor: the edges are candidates, selected from their list.
  const bool edges_are_candidates = head.margin <= 0.0;
  DeviceArray<float> values(total, kOp);
  DeviceArray<std::uint32_t> keys(edges_are_candidates ? total : 0, kOp);
  DeviceArray<double> scratch(total, kOp);
  if (total > 0) {
    launch(code_tiles_kernel<Pass::fill>, blocks, kThreads, 0, nullptr, tiles, reach_of_support, floor.data(), nullptr,
           nullptr, candidates.data(), edges_are_candidates ? keys.data() : nullptr, values.data());
    check(cudaGetLastError(), kOp);
  }
  launch(thresholds_kernel, detail::grid_for(n, kThreads), kThreads, 0, nullptr, candidates.data(), values.data(),
         scratch.data(), n, head.alpha, reach, cut.data());
  check(cudaGetLastError(), kOp);
  // The edges: keys above each row's cut.
  DeviceGraph g;
  g.queries = n;
  g.keys = m;
  g.offsets = detail::zeroed_counts(n, nullptr, kOp);
  const unsigned row_blocks = detail::grid_for(n, kThreads);
  if (edges_are_candidates)
    launch(candidate_edges_kernel, row_blocks, kThreads, 0, nullptr, candidates.data(), keys.data(), values.data(),
           cut.data(), n, g.offsets.data(), nullptr, nullptr);
  else
    launch(code_tiles_kernel<Pass::count>, blocks, kThreads, 0, nullptr, tiles, reach_of_support, cut.data(), nullptr,
           g.offsets.data(), nullptr, nullptr, nullptr);
  check(cudaGetLastError(), kOp);
  g.indices = DeviceArray<std::uint32_t>(detail::scan_counts(g.offsets.data(), n, nullptr, kOp), kOp);
  if (g.indices.size() > 0) {
    if (edges_are_candidates)
      launch(candidate_edges_kernel, row_blocks, kThreads, 0, nullptr, candidates.data(), keys.data(), values.data(),
             cut.data(), n, nullptr, g.offsets.data(), g.indices.data());
    else
      launch(code_tiles_kernel<Pass::fill>, blocks, kThreads, 0, nullptr, tiles, reach_of_support, cut.data(), nullptr,
             nullptr, g.offsets.data(), g.indices.data(), nullptr);
    check(cudaGetLastError(), kOp);
  }
  check(cudaStreamSynchronize(nullptr), kOp);  // before the candidates' arrays are freed
  return g;
}

}  // namespace

Graph lowrank_threshold_graph(const LowRankThresholdHead& head, const float* q, std::size_t n, const float* k,
                              std::size_t m, std::size_t d, bool causal) {
  return lowrank_threshold_pattern(head, ConstMatrix<float>(q, n, d), ConstMatrix<float>(k, m, d), causal, true)
      .download();
}

DeviceGraph lowrank_threshold_device_graph(const LowRankThresholdHead& head, const float* q, std::size_t n,
                                           const float* k, std::size_t m, std::size_t d, bool causal) {
  return lowrank_threshold_pattern(head, ConstMatrix<float>(q, n, d), ConstMatrix<float>(k, m, d), causal, true);
}

Graph detail::host_lowrank_threshold_pattern(const LowRankThresholdHead& head, ConstMatrix<float> q,
                                             ConstMatrix<float> k, bool causal) {
  return lowrank_threshold_pattern(head, q, k, causal, false).download();
}

Graph detail::device_lowrank_threshold_pattern(const LowRankThresholdHead& head, ConstMatrix<float> q,
                                               ConstMatrix<float> k, bool causal) {
  // The graph comes back to the host: wait for the caller's stream to have
  // written q and k, then run to the end.
  if (const cudaStream_t stream = current_stream()) synchronize(stream);
  return lowrank_threshold_pattern(head, q, k, causal, true).download();
}

}  // namespace entgraph::cuda
