// The batched attention kernel on tensor cores (see
// entgraph/cuda/batched_attention.hpp for the contract,
// batched_attention_traits.cuh for its configuration).
//
// Design. One block of 128 threads (4 warps) per (query tile of 64, query
// head, sequence): blockIdx = (tile, head, sequence); key/value head =
// head / (Hq / Hkv). The Q tile stays in shared memory; K (and V) tiles of
// 64 keys stream through two buffers filled by cp.async, the next tile's
// copies in flight while the current one is worked on. Per tile, warp w:
//   S = Q K^T   rows [16 w, 16 w + 16) x 64 keys by mma.sync.m16n8k16
//               (16-bit inputs, exact products, float32 sums), scaled and
//               masked (-inf) into shared memory in the float32 layout the
//               row phase expects;
//   row phase   attention_rows.cuh, the float32 fused kernel's own: softmax's
//               online max and sum; entmax's candidates, tau, narrowing,
//               weights (thread pairs on the same warp's rows);
//   O += P V    by mma.sync, with each weight p split into two 16-bit parts
//               (weight_split.hpp): hi V + lo V, the error of P 2^-16 of p
//               instead of 2^-8; V fragments by ldmatrix.trans.
// Every row a warp touches in S, the row phase and O is its own, so the
// warps only meet at one barrier per tile (the K/V buffers).
//
// Softmax: one sweep. Entmax: sweep 1 (K only) collects candidates and marks
// the key tiles that can hold a support key for some row of the block (a
// candidate of some row when seen; collect_running says why that covers the
// support); tau per row; narrowing sweeps for rows whose candidates
// overflowed; then the output sweep (K and V) visits the marked tiles only,
// and a warp skips P V for a tile, or a 16-key step of it, where all its
// weights are 0. The skipped work would add exact zeros: results are those
// of visiting every tile.
//
// Sequences have their own lengths (device arrays, clamped): query rows past
// n_b are written as zeros, keys past m_b are masked and their V rows are
// zero-filled (never read), causal is j < causal_key_limit(i, n_b, m_b).
// Entmax candidate lists live in one of `slots` global-memory slots, taken
// with atomicCAS when a block starts and given back when it ends: a block
// only ever waits for a block that is running, so this cannot deadlock, and
// with as many slots as resident blocks nobody waits.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "attention_common.cuh"
#include "attention_rows.cuh"
#include "batched_attention_traits.cuh"
#include "entgraph/heads.hpp"
#include "kernel_launch.cuh"
#include "mma_layout.hpp"
#include "mma_ptx.cuh"
#include "reduce.cuh"
#include "weight_split.hpp"

namespace entgraph::cuda::detail::batched {

using detail::kFullWarp;
using detail::kWarpSize;
using fused::RowBlock;
using fused::RowState;

// Keys [0, limit) are visible to query i of a sequence with n_b queries and
// m_b keys (0 for the padding rows i >= n_b).
__device__ inline int visible_keys(int i, int n_b, int m_b, bool causal) {
  if (i >= n_b) return 0;
  return causal ? static_cast<int>(causal_key_limit(static_cast<std::size_t>(i), static_cast<std::size_t>(n_b),
                                                    static_cast<std::size_t>(m_b)))
                : m_b;
}

__device__ inline int clamped_length(const std::int32_t* lengths, int b, int full) {
  if (lengths == nullptr) return full;
  return min(max(lengths[b], 0), full);
}

__device__ inline std::uint32_t load_pair(const std::uint16_t* p) { return *reinterpret_cast<const std::uint32_t*>(p); }

// Rows [row0, row0 + ROWS) of a head (COLS 16-bit columns, row stride
// row_stride) into shared memory at stride LD, asynchronously (the caller
// commits the group); rows at or past `valid` are zero-filled and not read.
template <int COLS, int ROWS, int LD>
__device__ void load_rows_async(std::uint16_t* dst, const std::uint16_t* head, std::int64_t row_stride, int row0,
                                int valid) {
  constexpr int kChunks = COLS / 8;  // 16 bytes each
  for (int idx = static_cast<int>(threadIdx.x); idx < ROWS * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    const bool ok = row0 + r < valid;
    const std::uint16_t* src = head + static_cast<std::int64_t>(ok ? row0 + r : 0) * row_stride + c;
    mma::cp_async_16(dst + r * LD + c, src, ok);
  }
}

// This warp's 16 x kBlockN scores Q K^T (unscaled) of the K tile Ks.
template <class E, int D>
__device__ void warp_scores(const std::uint16_t* Qs, const std::uint16_t* Ks, float (&s)[kBlockN / 8][4]) {
  constexpr int kLd = Layout<D>::kLd;
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const std::uint16_t* q_rows = Qs + static_cast<int>(threadIdx.x / kWarpSize) * 16 * kLd;
#pragma unroll
  for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) s[nt][i] = 0.0f;
#pragma unroll
  for (int kc = 0; kc < D; kc += 16) {
    std::uint32_t a[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // register r: elements 2r, 2r + 1, neighbours in a Q row
      const mma::Coord e = mma::a_element(lane, 2 * r);
      a[r] = load_pair(q_rows + e.row * kLd + kc + e.col);
    }
    // B(k, c) = K(key c, dim k): elements 2r, 2r + 1 of B are neighbours in a K row.
    const mma::Coord b0 = mma::b_element(lane, 0), b2 = mma::b_element(lane, 2);
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
      const std::uint16_t* keys = Ks + nt * 8 * kLd;
      E::mma(s[nt], a, load_pair(keys + b0.col * kLd + kc + b0.row), load_pair(keys + b2.col * kLd + kc + b2.row));
    }
  }
}

// The warp's scores into its rows of Ss, times factor (rounded once, as in
// every sweep: the narrowing counts need bit-identical scores), -inf where
// key j0 + c is not visible (limit0 / limit1: this thread's two rows').
__device__ inline void store_scores(float* Ss, const float (&s)[kBlockN / 8][4], float factor, int j0, int limit0,
                                    int limit1) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  float* rows = Ss + static_cast<int>(threadIdx.x / kWarpSize) * 16 * kLdS;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const mma::Coord e = mma::c_element(lane, 2 * half);  // elements 2 half and 2 half + 1: (row, col), (row, col + 1)
    const int limit = half == 0 ? limit0 : limit1;
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
      const int c = nt * 8 + e.col;
      float2 x;
      x.x = j0 + c < limit ? __fmul_rn(s[nt][2 * half], factor) : -INFINITY;
      x.y = j0 + c + 1 < limit ? __fmul_rn(s[nt][2 * half + 1], factor) : -INFINITY;
      *reinterpret_cast<float2*>(rows + e.row * kLdS + c) = x;
    }
  }
}

// O *= the row phase's softmax rescale factors, row by row.
template <int D>
__device__ void rescale_rows(float (&o)[D / 8][4], const float* rescale) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int base = static_cast<int>(threadIdx.x / kWarpSize) * 16;
  const float s0 = rescale[base + mma::c_element(lane, 0).row], s1 = rescale[base + mma::c_element(lane, 2).row];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    o[nt][0] *= s0;
    o[nt][1] *= s0;
    o[nt][2] *= s1;
    o[nt][3] *= s1;
  }
}

// O += P V for the warp's rows: P from Ss (the row phase's weights), each
// weight times weight_scale and split into hi + lo (weight_split.hpp); V
// from the tile Vs. 16-key steps whose weights are all 0 in this warp are
// skipped (they would add exact zeros).
template <class E, int D>
__device__ void warp_pv(const float* Ss, const std::uint16_t* Vs, float weight_scale, float (&o)[D / 8][4]) {
  constexpr int kLd = Layout<D>::kLd;
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const float* p_rows = Ss + static_cast<int>(threadIdx.x / kWarpSize) * 16 * kLdS;
  const mma::Coord v_row = mma::v_block_row(lane);
#pragma unroll
  for (int kc = 0; kc < kBlockN; kc += 16) {
    float2 w[4];
    bool any = false;
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // A register r: elements 2r, 2r + 1 of P, neighbours in a row
      const mma::Coord e = mma::a_element(lane, 2 * r);
      w[r] = *reinterpret_cast<const float2*>(p_rows + e.row * kLdS + kc + e.col);
      any = any || w[r].x != 0.0f || w[r].y != 0.0f;
    }
    if (!__any_sync(kFullWarp, any)) continue;
    std::uint32_t hi[4], lo[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const WeightParts x = split_weight<E>(w[r].x * weight_scale);
      const WeightParts y = split_weight<E>(w[r].y * weight_scale);
      hi[r] = mma::pack_pair(x.hi, y.hi);
      lo[r] = mma::pack_pair(x.lo, y.lo);
    }
#pragma unroll
    for (int c = 0; c < D; c += 16) {
      std::uint32_t b[4];  // b[0], b[1]: columns c .. c + 7; b[2], b[3]: c + 8 .. c + 15
      mma::ldmatrix_x4_trans(b, Vs + (kc + v_row.row) * kLd + c + v_row.col);
      float(&o0)[4] = o[c / 8];
      float(&o1)[4] = o[c / 8 + 1];
      E::mma(o0, lo, b[0], b[1]);
      E::mma(o0, hi, b[0], b[1]);
      E::mma(o1, lo, b[2], b[3]);
      E::mma(o1, hi, b[2], b[3]);
    }
  }
}

// The format's largest finite value: float32 rounding may push an output
// (a weighted mean of V's entries) just past it, and the contract gives that
// value, not infinity.
template <class E>
__device__ inline float clamp_to_format(float x) {
  return fabsf(x) > E::kMaxFinite ? copysignf(E::kMaxFinite, x) : x;
}

// This thread's output entries: O / (row sum x weight_scale), rounded once
// (to float32, or to the 16-bit format through float32); rows without
// weight (padding rows, rows that see no key) and row_sum == null give
// zeros. Rows past the tensor's n are not written.
template <class E, int D>
__device__ void store_out(const BatchedParams& p, int b, int h, int q0, const float* row_sum, float weight_scale,
                          const float (&o)[D / 8][4]) {
  if (p.out == nullptr) return;  // the backward's run: row statistics only
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int base = static_cast<int>(threadIdx.x / kWarpSize) * 16;
  const std::int64_t head = static_cast<std::int64_t>(b) * p.o_batch + static_cast<std::int64_t>(h) * p.o_head;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const mma::Coord e = mma::c_element(lane, 2 * half);
    const int qi = q0 + base + e.row;
    if (qi >= p.n) continue;
    const float l = row_sum == nullptr ? 0.0f : row_sum[base + e.row];
    const float denom = l * weight_scale;  // exact: a power of two times l
    const std::int64_t row = head + static_cast<std::int64_t>(qi) * p.o_row;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const int c = nt * 8 + e.col;
      const float x = l > 0.0f ? o[nt][2 * half] / denom : 0.0f;
      const float y = l > 0.0f ? o[nt][2 * half + 1] / denom : 0.0f;
      if (p.out_float32) {
        *reinterpret_cast<float2*>(static_cast<float*>(p.out) + row + c) = make_float2(x, y);
      } else {
        *reinterpret_cast<std::uint32_t*>(static_cast<std::uint16_t*>(p.out) + row + c) =
            mma::pack_pair(E::to_bits(clamp_to_format<E>(x)), E::to_bits(clamp_to_format<E>(y)));
      }
    }
  }
}

// Entmax candidate slots (see the top of this file).
__device__ inline int acquire_slot(int* flags, int slots, std::uint64_t start) {
  int s = static_cast<int>(start % static_cast<std::uint64_t>(slots));
  for (int tried = 1; atomicCAS(&flags[s], 0, 1) != 0; ++tried) {
    s = s + 1 == slots ? 0 : s + 1;
    if (tried % slots == 0) __nanosleep(256);  // every slot busy: let the holders run
  }
  __threadfence();  // this block's list writes come after the previous holder's
  return s;
}
__device__ inline void release_slot(int* flags, int s) {
  __threadfence();  // every write of this block's lists lands before the slot is free
  atomicExch(&flags[s], 0);
}

// The key tiles a query tile visits, in ascending order: every tile below
// `tiles`, or those of its block row (BatchedParams::block_offsets) below
// it. A sweep walks them with first() and then after(t) for the tile t it
// is at, in order (a cursor, not a search: a search inlined into every sweep
// cost the dense kernels 40 registers).
struct KeyTiles {
  const std::int32_t* cols = nullptr;  // null: every tile
  int lo = 0, hi = 0, tiles = 0;
  int at = 0;  // listed: the index in cols of the tile the sweep is at
  __device__ int first() {
    if (cols == nullptr) return tiles > 0 ? 0 : tiles;
    at = lo;
    return current();
  }
  // The tile after t, the sweep's current tile; tiles when none is left.
  __device__ int after(int t) {
    if (cols == nullptr) return t + 1 < tiles ? t + 1 : tiles;
    ++at;
    return current();
  }

 private:
  __device__ int current() const { return at < hi && cols[at] < tiles ? cols[at] : tiles; }
};

// Query tile `tile` of head h of sequence b, whose causal and length limits
// allow key tiles [0, tiles). kListed: the block-sparse instance, which
// reads its block row; the dense one never does, and the compiler drops the
// list's code (kept as a run-time branch, it cost the dense kernels 40
// registers and the entmax ones spills).
template <bool kListed>
__device__ inline KeyTiles key_tiles(const BatchedParams& p, int b, int h, int tile, int tiles) {
  KeyTiles kt;
  kt.tiles = tiles;
  if constexpr (kListed) {
    const int query_tiles = (p.n + kBlockM - 1) / kBlockM;
    const std::int64_t r =
        (static_cast<std::int64_t>(p.block_batch == 1 ? 0 : b) * p.block_heads + (p.block_heads == 1 ? 0 : h)) *
            query_tiles +
        tile;
    kt.cols = p.block_cols;
    kt.lo = p.block_offsets[r];
    kt.hi = p.block_offsets[r + 1];
  }
  return kt;
}

// The first tile from u on (u from kt.first() or kt.after) that the entmax
// output sweep visits: marked by sweep 1, or past the tiles sweep 1 keeps
// marks for.
__device__ inline int next_marked(const unsigned* mask, KeyTiles& kt, int u) {
  for (; u < kt.tiles; u = kt.after(u))
    if (u >= kMaxSkipTiles || ((mask[u / 32] >> (u % 32)) & 1u) != 0) return u;
  return kt.tiles;
}

// A sweep over the key tiles first, next(first), ... (< tiles): tile t's K
// (and V) rows land in buffer t's turn while the previous tile is worked on;
// work(t, K tile, V tile) runs when the whole tile is in shared memory. Every
// thread calls it (uniform control flow).
template <int D, bool kWithV, class Next, class Work>
__device__ void sweep(const BatchedParams& p, const std::uint16_t* k_head, const std::uint16_t* v_head, int m_b,
                      std::uint16_t* Ks, std::uint16_t* Vs, int first, int tiles, Next next, Work work) {
  using L = Layout<D>;
  if (first >= tiles) return;
  const auto issue = [&](int t, int buf) {
    load_rows_async<D, kBlockN, L::kLd>(Ks + buf * L::kTile, k_head, p.k_row, t * kBlockN, m_b);
    if constexpr (kWithV) load_rows_async<D, kBlockN, L::kLd>(Vs + buf * L::kTile, v_head, p.v_row, t * kBlockN, m_b);
    mma::cp_async_commit();
  };
  __syncthreads();  // what ran before is done with the buffers (and the narrowing scratch in V's)
  issue(first, 0);
  int buf = 0;
  for (int t = first; t < tiles;) {
    const int after = next(t);
    mma::cp_async_wait_all();
    __syncthreads();  // tile t is in buffer buf for everyone, and everyone is done with buffer buf ^ 1
    if (after < tiles) issue(after, buf ^ 1);
    work(t, Ks + buf * L::kTile, Vs + buf * L::kTile);
    buf ^= 1;
    t = after;
  }
}

// The backward's run (entmax): each query row's weighting state into
// p.stats. Not inlined: inlined, its reads of the row state at the kernel's
// end cost the kernels up to 37 registers throughout (ptxas, sm_90).
__device__ __noinline__ inline void write_stats(const BatchedParams& p, const RowState& rs, int b, int h, int q0, int n_b) {
  const int i = q0 + static_cast<int>(threadIdx.x);
  if (threadIdx.x >= kBlockM || i >= p.n) return;
  const int r = static_cast<int>(threadIdx.x);
  p.stats[(static_cast<std::int64_t>(b) * gridDim.y + h) * p.n + i] =
      i < n_b && rs.status[r] == fused::kSolved ? make_float4(rs.max[r], rs.sum[r], rs.tau_hi[r], rs.tau_lo[r])
                                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

template <class E, int D, bool kSoftmax, bool kListed>
__global__ void __launch_bounds__(kThreads) batched_attention_kernel(const BatchedParams p) {
  using L = Layout<D>;
  float4* smem_vec = dynamic_shared<float4>();
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem_vec);
  std::uint16_t* Qs = reinterpret_cast<std::uint16_t*>(smem + L::kQ);
  std::uint16_t* Ks = reinterpret_cast<std::uint16_t*>(smem + L::kK);
  std::uint16_t* Vs = reinterpret_cast<std::uint16_t*>(smem + L::kV);
  float* Ss = reinterpret_cast<float*>(smem + L::kS);
  const RowState rs = fused::row_state(reinterpret_cast<float*>(smem + L::kRows));
  unsigned* tile_mask = reinterpret_cast<unsigned*>(smem + L::kTileMask);
  int* slot_shared = reinterpret_cast<int*>(smem + L::kSlot);
  double* mass = reinterpret_cast<double*>(smem + L::kMass);
  int* count_above = reinterpret_cast<int*>(smem + L::kCount);

  const int b = static_cast<int>(blockIdx.z), h = static_cast<int>(blockIdx.y);
  // Causal: the last query tiles see the most keys; start them first.
  const int tile = p.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  const int q0 = tile * kBlockM;
  const int n_b = clamped_length(p.query_lengths, b, p.n);
  const int m_b = clamped_length(p.key_lengths, b, p.m);
  const int kv = h / p.group;
  const std::uint16_t* q_head = p.q + b * p.q_batch + h * p.q_head;
  const std::uint16_t* k_head = p.k + b * p.k_batch + kv * p.k_head;
  const std::uint16_t* v_head = p.v + b * p.v_batch + kv * p.v_head;
  const float weight_scale = E::kWeightScale;

  float o[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[nt][i] = 0.0f;

  // Key tiles of the block: up to its last valid query's limit.
  const int key_end = q0 < n_b ? visible_keys(min(q0 + kBlockM, n_b) - 1, n_b, m_b, p.causal) : 0;
  KeyTiles kt = key_tiles<kListed>(p, b, h, tile, (key_end + kBlockN - 1) / kBlockN);
  const int tiles = kt.tiles;
  if (kt.first() >= tiles) {  // padding rows, rows that see no key, or no block: zeros
    store_out<E, D>(p, b, h, q0, nullptr, weight_scale, o);
    const int i = q0 + static_cast<int>(threadIdx.x);
    if (!kSoftmax && p.stats != nullptr && threadIdx.x < kBlockM && i < p.n)
      p.stats[(static_cast<std::int64_t>(b) * gridDim.y + h) * p.n + i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return;
  }

  // This thread's two rows in the mma layouts (c_element rows 0-7 and 8-15).
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int base = static_cast<int>(threadIdx.x / kWarpSize) * 16;
  const int limit0 = visible_keys(q0 + base + mma::c_element(lane, 0).row, n_b, m_b, p.causal);
  const int limit1 = visible_keys(q0 + base + mma::c_element(lane, 2).row, n_b, m_b, p.causal);

  load_rows_async<D, kBlockM, L::kLd>(Qs, q_head, p.q_row, q0, n_b);
  mma::cp_async_commit();  // waited for with the first K tile
  fused::init_rows(rs);
  if constexpr (!kSoftmax) {
    if (threadIdx.x == 0) {
      const std::uint64_t id =
          (static_cast<std::uint64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
      *slot_shared = acquire_slot(p.slot_flags, p.slots, id);
    }
    for (int i = static_cast<int>(threadIdx.x); i < kMaxSkipTiles / 32; i += kThreads) tile_mask[i] = 0u;
  }
  __syncthreads();
  const int slot = kSoftmax ? 0 : *slot_shared;
  const RowBlock rb{kSoftmax ? nullptr : p.cand + static_cast<std::size_t>(slot) * kBlockM * p.cap, p.cap,
                    min(kBlockM, n_b - q0), p.w};
  const auto every_tile = [&](int t) { return kt.after(t); };
  const auto tile_scores = [&](int t, const std::uint16_t* K) {
    float s[kBlockN / 8][4];
    warp_scores<E, D>(Qs, K, s);
    store_scores(Ss, s, p.w.factor, t * kBlockN, limit0, limit1);
    __syncwarp();  // the row phase reads the warp's rows across lanes
  };

  if constexpr (kSoftmax) {
    sweep<D, true>(p, k_head, v_head, m_b, Ks, Vs, kt.first(), tiles, every_tile,
                   [&](int t, const std::uint16_t* K, const std::uint16_t* V) {
                     tile_scores(t, K);
                     fused::softmax_rows<kBlockN, kLdS>(Ss, rs);
                     __syncwarp();
                     rescale_rows<D>(o, rs.rescale);
                     warp_pv<E, D>(Ss, V, weight_scale, o);
                   });
  } else {
    // 1. Max, candidates, and the tiles that can hold a support key.
    sweep<D, false>(p, k_head, v_head, m_b, Ks, Vs, kt.first(), tiles, every_tile,
                    [&](int t, const std::uint16_t* K, const std::uint16_t*) {
                      tile_scores(t, K);
                      const bool needed = fused::collect_running<kBlockN, kLdS>(Ss, rs, rb);
                      if (__any_sync(kFullWarp, needed) && lane == 0 && t < kMaxSkipTiles)
                        atomicOr(&tile_mask[t / 32], 1u << (t % 32));
                    });
    __syncthreads();
    // 2. tau from the candidates.
    fused::solve_after_collect(rs, mass, count_above, rb);
    // 3. Overflowed queries: narrowing sweeps over every tile, then one collecting sweep each.
    for (int round = 0;; ++round) {
      __syncthreads();
      const int st = threadIdx.x < kBlockM ? rs.status[threadIdx.x] : fused::kSolved;
      if (!__syncthreads_or(st == fused::kNarrowing || st == fused::kCollectAbove)) break;
      sweep<D, false>(p, k_head, v_head, m_b, Ks, Vs, kt.first(), tiles, every_tile,
                      [&](int t, const std::uint16_t* K, const std::uint16_t*) {
                        tile_scores(t, K);
                        fused::narrow_rows<kBlockN, kLdS>(Ss, rs, mass, count_above, rb);
                      });
      __syncthreads();
      fused::after_narrowing(rs, mass, count_above, rb, round);
    }
    // 4. Weights and P V over the marked tiles.
    const auto marked = [&](int t) { return next_marked(tile_mask, kt, kt.after(t)); };
    sweep<D, true>(p, k_head, v_head, m_b, Ks, Vs, next_marked(tile_mask, kt, kt.first()), tiles, marked,
                   [&](int t, const std::uint16_t* K, const std::uint16_t* V) {
                     tile_scores(t, K);
                     const float part = fused::entmax_weight_rows<kBlockN, kLdS>(Ss, rs, rb);
                     __syncwarp();
                     if (__any_sync(kFullWarp, part > 0.0f)) warp_pv<E, D>(Ss, V, weight_scale, o);
                   });
  }
  __syncthreads();  // the last row sums are written; the candidate lists are no longer read
  if constexpr (!kSoftmax) {
    if (threadIdx.x == 0) release_slot(p.slot_flags, slot);
  }
  store_out<E, D>(p, b, h, q0, rs.sum, weight_scale, o);
  if constexpr (!kSoftmax) {
    if (p.stats != nullptr) write_stats(p, rs, b, h, q0, n_b);
  }
}

template <class E, int D, bool kSoftmax>
void launch_batched(const BatchedParams& p, unsigned query_tiles, unsigned heads, unsigned batch, cudaStream_t stream) {
  constexpr std::size_t bytes = Layout<D>::kBytes;
  const auto kernel = p.block_offsets != nullptr ? batched_attention_kernel<E, D, kSoftmax, true>
                                                 : batched_attention_kernel<E, D, kSoftmax, false>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "cuda::batched_attention_forward (shared memory size)");
  launch(kernel, dim3(query_tiles, heads, batch), kThreads, bytes, stream, p);
  check(cudaGetLastError(), "cuda::batched_attention_forward (launch)");
}

template <class E, int D, bool kSoftmax>
int resident_blocks() {
  constexpr std::size_t bytes = Layout<D>::kBytes;
  // The dense instance's: a block-sparse launch may hold fewer or more
  // blocks at once; with fewer slots than blocks a block waits for a running
  // one to finish, which cannot deadlock (see acquire_slot).
  const auto kernel = batched_attention_kernel<E, D, kSoftmax, false>;
  const char* what = "cuda::batched_attention_workspace_bytes (occupancy)";
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), what);
  int per_sm = 0, device = 0, sms = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, bytes), what);
  check(cudaGetDevice(&device), what);
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), what);
  return std::max(1, per_sm * sms);
}

}  // namespace entgraph::cuda::detail::batched
