// Rows rounded to signed byte codes, and the integer products of query and
// key codes on the byte tensor cores (mma.sync m16n8k32, int32 sums: exact).
// Shared by lowrank-threshold's prediction (lowrank_threshold.cu) and exact
// graph attention's score bounds (exact_graph_attention.cu).
//
// Layout: each row is `words` 32-bit words of four codes (its r codes
// rounded up to whole 32-code chunks with zeros), rows padded with zero
// codes to a whole tile. A block takes 64 query rows (16 per warp) and walks
// the key tiles of 64; a thread holds, of each 8-key mma tile, keys
// 2 (lane % 4) + {0, 1} of rows lane / 4 and lane / 4 + 8 (the D fragment).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "entgraph/cuda/device.hpp"
#include "entgraph/heads.hpp"
#include "kernel_launch.cuh"
#include "mma_ptx.cuh"
#include "predictors_common.cuh"
#include "reduce.cuh"

namespace entgraph::cuda::detail::code_tiles {

constexpr unsigned kWarps = 4, kThreads = kWarps * kWarpSize;
constexpr std::size_t kTileQueries = 16 * kWarps;  // a block's query rows: 16 per warp
constexpr std::size_t kTileKeys = 64;              // keys per step: eight 8-key mma tiles
constexpr std::size_t kChunk = 32;                 // codes per mma (k = 32)
constexpr std::size_t kMaxChunks = 8;              // at most 256 codes a row

// 32-bit words of codes per row: r rounded up to whole mma chunks.
inline std::size_t code_words(std::size_t r) { return (r + kChunk - 1) / kChunk * (kChunk / 4); }

// The codes of one side and what the bounds and estimates need per row (0
// on padding rows).
struct Codes {
  DeviceArray<std::uint32_t> words;
  DeviceArray<double> steps;  // the row's step: max |x| / levels
  DeviceArray<float> scales;  // step * factor in float where its magnitude is a normal float, else NaN
  DeviceArray<float> l1;      // with norms: the sum of |code| (an integer, exact)
  DeviceArray<float> l2;      // with norms: ‖x‖₂, rounded up
};

// round(x) half away from zero, as the CPU's round_half_away.
__device__ inline double round_half_away(double x) {
  const double t = static_cast<double>(static_cast<std::int32_t>(x));
  return t + copysign(static_cast<double>(fabs(x - t) >= 0.5), x);
}

// One warp per row of x (rows x r): step = max |x| / levels, codes
// round(x / step), as the CPU's quantize_rows; l1 and l2 may be null.
// static: one copy per translation unit that launches it.
static __global__ void quantize_rows_kernel(const float* x, std::size_t rows, std::size_t r, std::size_t words,
                                            double levels, double factor, std::uint32_t* codes, double* steps,
                                            float* scales, float* l1, float* l2) {
  const unsigned lane = threadIdx.x % kWarpSize;
  for (std::size_t i = first_warp_row(); i < rows; i += warp_row_stride()) {
    const float* row = x + i * r;
    double top = 0.0, squares = 0.0;
    for (std::size_t c = lane; c < r; c += kWarpSize) {
      const double v = static_cast<double>(row[c]);
      top = fmax(top, fabs(v));
      squares += v * v;
    }
    top = warp_max(top);
    const double step = top / levels;
    int magnitude = 0;
    for (std::size_t w = lane; w < words; w += kWarpSize) {
      std::uint32_t word = 0;
      for (std::size_t b = 0; b < 4; ++b) {
        const std::size_t c = 4 * w + b;
        // A projection that overflowed (step inf) has no codes; the caller refuses it.
        const double code =
            c < r && top > 0.0 && isfinite(step) ? round_half_away(static_cast<double>(row[c]) / step) : 0.0;
        magnitude += static_cast<int>(fabs(code));
        word |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(static_cast<std::int8_t>(code))) << (8 * b);
      }
      codes[i * words + w] = word;
    }
    magnitude = warp_sum(magnitude);
    squares = warp_sum(squares);
    if (lane == 0) {
      steps[i] = step;
      const double scaled = step * factor;
      scales[i] = fabs(scaled) >= 0x1p-126 && fabs(scaled) <= 0x1.fffffep127 ? __double2float_rn(scaled) : NAN;
      if (l1) l1[i] = static_cast<float>(magnitude);
      // sqrt of a sum with relative error below 2^-40, rounded to float and up by 2^-20.
      if (l2) l2[i] = __fmul_rn(__double2float_ru(sqrt(squares)), 1.0f + 0x1p-20f);
    }
  }
}

// x (rows x r, device memory) quantized to codes of `bits` bits, rows padded
// to a multiple of `tile`; scales are steps times `factor`; norms: l1 and l2.
inline Codes quantize_codes(const float* x, std::size_t rows, std::size_t r, int bits, std::size_t tile, double factor,
                            bool norms, const char* op) {
  const std::size_t words = code_words(r), padded = (rows + tile - 1) / tile * tile;
  Codes codes{DeviceArray<std::uint32_t>(padded * words, op), DeviceArray<double>(padded, op),
              DeviceArray<float>(padded, op), DeviceArray<float>(norms ? padded : 0, op),
              DeviceArray<float>(norms ? padded : 0, op)};
  check(cudaMemset(codes.words.data(), 0, padded * words * sizeof(std::uint32_t)), op);
  check(cudaMemset(codes.steps.data(), 0, padded * sizeof(double)), op);
  check(cudaMemset(codes.scales.data(), 0, padded * sizeof(float)), op);
  if (norms) {
    check(cudaMemset(codes.l1.data(), 0, padded * sizeof(float)), op);
    check(cudaMemset(codes.l2.data(), 0, padded * sizeof(float)), op);
  }
  const double levels = static_cast<double>((1 << (bits - 1)) - 1);
  if (rows > 0) {
    launch(quantize_rows_kernel, grid_for(rows, kRowsPerBlock), kRowsPerBlock * kWarpSize, 0, nullptr, x, rows, r,
           words, levels, factor, codes.words.data(), codes.steps.data(), codes.scales.data(),
           norms ? codes.l1.data() : nullptr, norms ? codes.l2.data() : nullptr);
    check(cudaGetLastError(), op);
  }
  return codes;
}

// The keys query i sees: none past the last query; causal: those up to
// causal_key_limit.
__device__ inline std::size_t visible_keys(std::size_t i, std::size_t n, std::size_t m, bool causal) {
  if (i >= n) return 0;
  return causal ? causal_key_limit(i, n, m) : m;
}
// The last query of a tile (of n), whose keys are the most any of its rows see.
__device__ inline std::size_t last_tile_row(std::size_t tile, std::size_t n) {
  const std::size_t last = tile * kTileQueries + kTileQueries - 1;
  return last < n ? last : n - 1;
}

// This thread's two rows of a block's query tile.
struct TileRows {
  std::size_t row[2];
  unsigned lane, group, thread;
};
__device__ inline TileRows tile_rows(std::size_t tile) {
  const unsigned lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const std::size_t first = tile * kTileQueries + 16 * warp + lane / 4;
  return {{first, first + 8}, lane, lane / 4, lane % 4};
}

// The products of the tile's query codes with keys [0, keys) (keys a
// multiple of 8 past the last one the caller wants, within the padded
// rows): visit(column, d) for each 8-key mma tile in order, d its D fragment.
// Every lane of the block must call it with the same keys (the mma is a
// warp collective).
template <class Visit>
__device__ void walk_keys(const std::uint32_t* q, const std::uint32_t* k, std::size_t words, const TileRows& t,
                          std::size_t keys, Visit&& visit) {
  const std::size_t chunks = words * 4 / kChunk;
  std::uint32_t a[kMaxChunks][4];
#pragma unroll
  for (std::size_t c = 0; c < kMaxChunks; ++c)
    if (c < chunks)
      for (int reg = 0; reg < 4; ++reg)
        a[c][reg] = q[t.row[reg % 2] * words + c * (kChunk / 4) + t.thread + (reg / 2) * 4];
  for (std::size_t column = 0; column < keys; column += 8) {
    int d[4] = {0, 0, 0, 0};
#pragma unroll
    for (std::size_t c = 0; c < kMaxChunks; ++c)
      if (c < chunks) {
        const std::uint32_t* key = k + (column + t.group) * words + c * (kChunk / 4) + t.thread;
        mma::mma_s8(d, a[c], key[0], key[4]);
      }
    visit(column, d);
  }
}

// The quad's kept keys of row half h (entries 2h and 2h + 1 of its D
// fragment; the quad's four threads hold the 8-key tile's keys in order):
// write(at, e) for each, each thread after the hits of the threads before
// it, at from next; next then moves past the quad's hits. Every lane of the
// warp must call it (a shuffle).
template <class Write>
__device__ void write_kept(const TileRows& t, int h, const bool (&keep)[4], std::size_t& next, Write&& write) {
  const int hits = (keep[2 * h] ? 1 : 0) + (keep[2 * h + 1] ? 1 : 0);
  int before = 0, total = 0;
  for (unsigned other = 0; other < 4; ++other) {
    const int theirs = __shfl_sync(kFullWarp, hits, static_cast<int>((t.lane & ~3u) + other));
    before += other < t.thread ? theirs : 0;
    total += theirs;
  }
  std::size_t at = next + static_cast<std::size_t>(before);
  for (int e = 2 * h; e < 2 * h + 2; ++e)
    if (keep[e]) write(at++, e);
  next += static_cast<std::size_t>(total);
}

// The sum of a value over the quad of this thread (lanes 4 g .. 4 g + 3).
__device__ inline std::size_t quad_sum(std::size_t x) {
  x += __shfl_xor_sync(kFullWarp, x, 1);
  return x + __shfl_xor_sync(kFullWarp, x, 2);
}

}  // namespace entgraph::cuda::detail::code_tiles
