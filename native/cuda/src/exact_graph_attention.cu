// Exact mode of graph attention on the GPU (GraphAttentionMode::exact on
// Device::cuda, host memory; docs/CUDA.md "Exact mode on the GPU"): the
// graph is a first guess, the output is dense attention's.
//
// Scores in the transform's units, x_ij = f (q_i . k_j) with f the float
// factor the graph kernel multiplies by (scale (α − 1)); a key has weight 0
// in its row iff x_ij <= t_i, the row's threshold over all allowed keys.
//  1. A lower bound of t_i from the graph row alone: the threshold of a
//     subset never exceeds the row's. Its scores are summed in double; t_low
//     is their threshold (predictors/theta_steps.hpp) less a margin for how
//     far the graph kernel's float scores may lie from them.
//  2. An upper bound of every allowed x_ij from byte codes: q and k rounded
//     to 8-bit codes per row (q = σ_q q̃ + e, |e_c| <= σ_q / 2), so
//       |x − f σ_q σ_k D| <= f σ_q σ_k (‖q̃‖₁ + ‖k̃‖₁ + d / 2) / 2,
//     D = q̃ · k̃ exact on the byte tensor cores (code_tiles.cuh); plus the
//     float rounding of the approximation and of the graph kernel's scores
//     (γ ‖q‖ ‖k‖).
//  3. The keys whose bound exceeds t_low (every key of the dense row's
//     support among them) form a new graph, counted and written by two
//     passes over the code tiles; the graph kernel computes the rows on it,
//     which by sparse consistency are dense attention's rows.
// A row whose graph holds no allowed key has t_low = -inf: all its allowed
// keys are scored (a dense row).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attention_common.cuh"
#include "backend_kernels.hpp"
#include "checks.cuh"
#include "code_tiles.cuh"
#include "csr_rows.cuh"
#include "entgraph/cuda/graph_attention.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/heads.hpp"
#include "head_scan.hpp"
#include "kernel_launch.cuh"
#include "predictors/theta_steps.hpp"
#include "staging.cuh"

namespace entgraph::cuda {
namespace {

using detail::argument_error;
using detail::check_graph_size;
using detail::grid_for;
using detail::kWarpSize;
using detail::make_weighting;
using detail::upload_valid;
using detail::Weighting;
using namespace detail::code_tiles;
namespace theta_steps = ::entgraph::detail::theta_steps;

constexpr const char* kOp = "graph_attention_forward";
constexpr int kBits = 8;  // codes in [-127, 127]

struct Rows {
  std::size_t n, m;
  bool causal;
  const std::uint8_t* key_padding;  // device, may be null
  __device__ std::size_t limit(std::size_t i) const { return visible_keys(i, n, m, causal); }
  __device__ bool allowed(std::size_t i, std::size_t j) const {
    return j < limit(i) && (key_padding == nullptr || key_padding[j] != 0);
  }
};

// One thread per row: t_low[i] from the allowed keys of graph row i (x
// scratch: one double per edge), -inf where there are none. gamma: the
// graph kernel's score error per unit of ‖q‖ ‖k‖.
__global__ void graph_thresholds_kernel(const float* q, const float* k, std::size_t d, const std::size_t* offsets,
                                        const std::uint32_t* indices, Rows rows, double f, double alpha, double gamma,
                                        const float* q_norm, const float* k_norm, double* x, double* t_low) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < rows.n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    double* xi = x + offsets[i];
    std::size_t count = 0;
    double top = -INFINITY, widest = 0.0;
    for (std::size_t e = offsets[i]; e < offsets[i + 1]; ++e) {
      const std::size_t j = indices[e];
      if (!rows.allowed(i, j)) continue;
      double dot = 0.0;
      for (std::size_t c = 0; c < d; ++c) dot += static_cast<double>(q[i * d + c]) * static_cast<double>(k[j * d + c]);
      xi[count] = f * dot;
      top = fmax(top, xi[count++]);
      widest = fmax(widest, static_cast<double>(k_norm[j]));
    }
    if (count == 0) {
      t_low[i] = -INFINITY;
      continue;
    }
    for (std::size_t c = 0; c < count; ++c) xi[c] -= top;
    const double theta = theta_steps::solve(xi, count, alpha) + top;
    // The float scores lie within gamma ‖q‖ ‖k‖ of these (doubled: the
    // double sums' own rounding, the norms' rounding); the solve's rounding
    // is far below 2^-36 of the row's scale.
    const double margin = 2.0 * gamma * static_cast<double>(q_norm[i]) * widest + 0x1p-36 * (1.0 + fabs(top));
    t_low[i] = theta - margin;
  }
}

struct BoundTiles {
  const std::uint32_t* q;
  const std::uint32_t* k;
  const float* q_scale;  // f σ_q
  const float* k_scale;  // σ_k
  const float* q_l1;
  const float* k_l1;
  const float* q_norm;  // ‖q‖₂, rounded up
  const float* k_norm;
  std::size_t words;
  float half_d;  // d / 2
  float gamma;   // γ (per ‖q‖ ‖k‖), rounded up
};

// Whether key j may clear t: an upper bound of x_ij above t, or no bound
// (a NaN scale: a step that is not a normal float; an overflow).
__device__ bool may_clear(const BoundTiles& b, std::size_t i, std::size_t j, int d, double t) {
  const float qs = b.q_scale[i], ks = b.k_scale[j];
  const float approx = __fmul_rn(__fmul_rn(static_cast<float>(d), qs), ks);
  const float codes = __fmul_rn(fabsf(__fmul_rn(qs, ks)), 0.5f * __fadd_rn(__fadd_rn(b.q_l1[i], b.k_l1[j]), b.half_d));
  const float rounding = __fmul_rn(__fmul_rn(b.gamma, b.q_norm[i]), b.k_norm[j]);
  // 2^-19 |approx| covers its own rounding (under 2^-20) and the final
  // sum's; the factor the roundings of the three terms; 1e-30 underflow.
  const float margin = __fmul_rn(__fadd_rn(__fadd_rn(0x1p-19f * fabsf(approx), codes), rounding), 1.0f + 0x1p-16f);
  const float upper = __fadd_rn(__fadd_rn(approx, margin), 1e-30f);
  return !(upper <= t);  // NaN: no bound
}

// One block per 64-query tile: count (indices null: counts[i] = the allowed
// keys that may clear t_low[i]) or fill (those keys, in order, from
// offsets[i]).
template <bool kFill>
__global__ void __launch_bounds__(kThreads)
    bounded_keys_kernel(BoundTiles b, Rows rows, const double* t_low, std::size_t* counts, const std::size_t* offsets,
                        std::uint32_t* indices) {
  for (std::size_t tile = blockIdx.x; tile * kTileQueries < rows.n; tile += gridDim.x) {
    const TileRows tr = tile_rows(tile);
    double t[2];
    std::size_t found[2] = {0, 0}, next[2] = {0, 0};
    for (int h = 0; h < 2; ++h) {
      t[h] = tr.row[h] < rows.n ? t_low[tr.row[h]] : INFINITY;
      if (kFill && tr.row[h] < rows.n) next[h] = offsets[tr.row[h]];
    }
    walk_keys(b.q, b.k, b.words, tr, rows.limit(last_tile_row(tile, rows.n)),
              [&](std::size_t column, const int(&d)[4]) {
                bool keep[4];
                for (int e = 0; e < 4; ++e) {
                  const int h = e / 2;
                  const std::size_t i = tr.row[h], j = column + 2 * tr.thread + e % 2;
                  keep[e] = rows.allowed(i, j) && may_clear(b, i, j, d[e], t[h]);
                  found[h] += keep[e] ? 1 : 0;
                }
                if constexpr (kFill)
                  for (int h = 0; h < 2; ++h)
                    write_kept(tr, h, keep, next[h], [&](std::size_t at, int e) {
                      indices[at] = static_cast<std::uint32_t>(column + 2 * tr.thread + e % 2);
                    });
              });
    if constexpr (!kFill)
      for (int h = 0; h < 2; ++h) {
        found[h] = quad_sum(found[h]);
        if (tr.thread == 0 && tr.row[h] < rows.n) counts[tr.row[h]] = found[h];
      }
  }
}

// The report, as the CPU's exact mode writes it: per row, settled by the
// graph (every key it scores is a graph key), repaired (keys added), or
// dense (no allowed graph key: every allowed key scored).
void fill_report(const Graph& graph, const Graph& scored, const std::vector<double>& t_low, std::size_t bound_pairs,
                 GraphAttentionReport& r) {
  const std::size_t n = graph.queries;
  r = GraphAttentionReport{};
  r.settled.assign(n, RowSettlement::graph);
  r.missed_mass.assign(n, 0.0);
  r.bounded_rows = n;
  r.bound_pairs = bound_pairs;
  r.bound_kernel = BoundKernel::int8_mma;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t *g = graph.row_begin(i), *g_end = graph.row_end(i);
    std::size_t added = 0;
    for (const std::uint32_t* s = scored.row_begin(i); s != scored.row_end(i); ++s) {
      while (g != g_end && *g < *s) ++g;
      if (g != g_end && *g == *s)
        ++r.graph_pairs;
      else
        ++added;
    }
    r.repair_pairs += added;
    if (t_low[i] == -std::numeric_limits<double>::infinity()) {
      r.settled[i] = RowSettlement::dense;
      ++r.dense_rows;
    } else if (added > 0) {
      r.settled[i] = RowSettlement::repaired;
      ++r.repaired_rows;
    } else {
      ++r.graph_rows;
    }
  }
}

// The least float not below x (host).
float float_at_least(double x) {
  const float f = static_cast<float>(x);
  return static_cast<double>(f) < x ? std::nextafter(f, std::numeric_limits<float>::infinity()) : f;
}

// The arguments the kernels cannot take (the core has checked the rest):
// the resolved transform.
Weighting check_exact_call(std::size_t n, std::size_t m, std::size_t d, const AttentionOptions<float>& options) {
  const Weighting w = make_weighting(options.transform, options.scale, d, kOp, "options.attention.transform");
  if (w.softmax) argument_error(kOp, "exact mode needs a transform with a threshold (got softmax)");
  // Its bound of the threshold is entmax's (a mass); top-k's would be a rank.
  if (w.topk > 0)
    argument_error(kOp, "options.attention.transform is not supported on device cuda in exact mode (got " +
                            options.transform.name() + ", expected sparsemax, entmax15 or entmax: run top-k on cpu)");
  if (d > kMaxChunks * kChunk)
    argument_error(kOp, "exact mode on device cuda takes d <= 256 (got " + std::to_string(d) + ")");
  check_graph_size(n, m, kOp);
  return w;
}

// Exact mode on device memory: q (n x d), k (m x d), v (m x dv) and out
// (n x dv) contiguous; options.key_padding on the device.
void exact_attention(const float* q, const float* k, const float* v, float* out, std::size_t n, std::size_t m,
                     std::size_t d, std::size_t dv, const Graph& graph, const Weighting& w,
                     const AttentionOptions<float>& host_options, const FusedAttentionOptions& options,
                     GraphAttentionReport* report) {
  const double f = static_cast<double>(w.factor), alpha = options.transform.tsallis_alpha();
  // The graph kernel's score: four float FMA chains of d / 4 terms, their
  // sum, the product by f: within (d + 4) 2^-24 ‖q‖ ‖k‖ |f| of x, with room.
  const double gamma = fabs(f) * static_cast<double>(d + 4) * 0x1p-23;
  const Codes qc = quantize_codes(q, n, d, kBits, kTileQueries, f, true, kOp);
  const Codes kc = quantize_codes(k, m, d, kBits, kTileKeys, 1.0, true, kOp);
  const Rows rows{n, m, options.causal, options.key_padding};

  // 1. The graph's lower bounds of the thresholds.
  const DeviceGraph dg = upload_valid(graph, std::string(kOp) + ": uploading graph");
  DeviceArray<double> t_low(n, kOp), scratch(dg.edges() > 0 ? dg.edges() : 1, kOp);
  launch(graph_thresholds_kernel, grid_for(n, kThreads), kThreads, 0, nullptr, q, k, d, dg.offsets.data(),
         dg.indices.data(), rows, f, alpha, gamma, qc.l2.data(), kc.l2.data(), scratch.data(), t_low.data());
  check(cudaGetLastError(), kOp);

  // 2 and 3. The keys that may clear them, then attention on those.
  const BoundTiles bounds{qc.words.data(),
                          kc.words.data(),
                          qc.scales.data(),
                          kc.scales.data(),
                          qc.l1.data(),
                          kc.l1.data(),
                          qc.l2.data(),
                          kc.l2.data(),
                          code_words(d),
                          0.5f * static_cast<float>(d),
                          float_at_least(gamma * (1.0 + 0x1p-20))};
  DeviceGraph scored;
  scored.queries = n;
  scored.keys = m;
  scored.offsets = detail::zeroed_counts(n, nullptr, kOp);
  const unsigned blocks = grid_for(n, kTileQueries);
  launch(bounded_keys_kernel<false>, blocks, kThreads, 0, nullptr, bounds, rows, t_low.data(), scored.offsets.data(),
         nullptr, nullptr);
  check(cudaGetLastError(), kOp);
  const std::size_t total = detail::scan_counts(scored.offsets.data(), n, nullptr, kOp);
  scored.indices = DeviceArray<std::uint32_t>(total, kOp);
  if (total > 0) {
    launch(bounded_keys_kernel<true>, blocks, kThreads, 0, nullptr, bounds, rows, t_low.data(), nullptr,
           scored.offsets.data(), scored.indices.data());
    check(cudaGetLastError(), kOp);
  }
  graph_attention_forward(q, k, v, scored, out, d, dv, options);
  if (report) {
    std::vector<double> lows(n);
    t_low.download(lows.data());
    std::size_t bound_pairs = 0;
    for (std::size_t i = 0; i < n; ++i) bound_pairs += host_options.causal ? causal_key_limit(i, n, m) : m;
    fill_report(graph, scored.download(), lows, bound_pairs, *report);
  }
  synchronize(nullptr);  // out is written when the call returns
}

}  // namespace

void detail::host_graph_attention_exact(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                        const Graph& graph, MatrixView<float> out,
                                        const AttentionOptions<float>& options, GraphAttentionReport* report) {
  const std::size_t n = q.rows, m = k.rows, d = q.cols, dv = v.cols;
  const Weighting w = check_exact_call(n, m, d, options);
  StagedAttention staged(q, k, v, options, kOp);
  exact_attention(staged.q.data(), staged.k.data(), staged.v.data(), staged.out.data(), n, m, d, dv, graph, w, options,
                  staged.options, report);
  staged.finish(out, kOp);
}

// On device memory: the core has checked all but q's, k's and v's values
// (the graph included); they are scanned here and judged by the core's
// check_graph_attention_values first. Only the graph is copied.
void detail::device_graph_attention_exact(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                          const Graph& graph, MatrixView<float> out,
                                          const AttentionOptions<float>& options, GraphAttentionReport* report) {
  const std::size_t n = q.rows, m = k.rows, d = q.cols, dv = v.cols;
  const Weighting w = check_exact_call(n, m, d, options);
  // The kernels here run on the default stream: the caller's stream first.
  if (const cudaStream_t stream = current_stream()) synchronize(stream);
  const std::vector<HeadScan> scans =
      detail::scan_one_head(kOp, kOp, q, k, v, out, options.key_padding, /*aligned=*/false, nullptr);
  check_graph_attention_values(kOp, q, k, v, options, scans[0], scans[1], scans[2]);
  exact_attention(q.data, k.data, v.data, out.data, n, m, d, dv, graph, w, options,
                  fused_options(options, options.key_padding), report);
}

}  // namespace entgraph::cuda
