// The batched tensor-core attention kernel's configuration: block shape,
// shared-memory layout and the parameters of one launch. The algorithm is in
// batched_attention_kernel.cuh; batched_attention.cu checks and launches it,
// and batched_attention_hdim<d>.cu compile its instances, one file per head
// dimension.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "attention_common.cuh"
#include "attention_rows.cuh"

namespace entgraph::cuda::detail::batched {

using fused::kBlockM;
using fused::kThreads;

constexpr int kBlockN = 64;        // keys per tile: 4 k-steps of P V, and a power of two as the row phase needs
constexpr int kLdS = kBlockN + 8;  // floats per score row: 8 mod 32, as HalfRow's bank rotation assumes
// Key tiles whose "can hold a support key" bit sweep 1 keeps (entmax); later
// tiles are always visited by the output sweep.
constexpr int kMaxSkipTiles = 4096;
constexpr std::size_t kDefaultCapacity = 1024;  // candidates per query (entmax)

// Shared memory, in bytes. Q, K and V tiles hold 16-bit values at a row
// stride of D + 8 (16-byte aligned rows, 4 banks apart: the 32-bit fragment
// loads and ldmatrix's 8 row reads hit distinct banks); K and V are double
// buffered. The entmax narrowing scratch (fused::kNarrowingFloats) lives in
// the V buffers, which only the output sweep, after narrowing, loads.
template <int D>
struct Layout {
  static constexpr int kLd = D + 8;
  static constexpr int kTile = kBlockN * kLd;  // 16-bit values per K or V buffer
  static constexpr std::size_t kQ = 0;
  static constexpr std::size_t kK = kQ + std::size_t{kBlockM} * kLd * 2;
  static constexpr std::size_t kV = kK + std::size_t{2} * kTile * 2;
  static constexpr std::size_t kS = kV + std::size_t{2} * kTile * 2;
  static constexpr std::size_t kRows = kS + std::size_t{kBlockM} * kLdS * 4;
  static constexpr std::size_t kTileMask = kRows + std::size_t{fused::kRowSlots} * kBlockM * 4;
  static constexpr std::size_t kSlot = kTileMask + kMaxSkipTiles / 8;
  static constexpr std::size_t kBytes = kSlot + 16;
  static constexpr std::size_t kMass = kV;  // kBlockM x kTrials doubles, then as many ints
  static constexpr std::size_t kCount = kMass + std::size_t{kBlockM} * fused::kTrials * 8;
  static_assert(D % 16 == 0, "head dimensions are whole mma k-steps");
  static_assert(kK % 16 == 0 && kV % 16 == 0 && kS % 16 == 0 && kRows % 16 == 0 && kTileMask % 16 == 0 &&
                    kSlot % 16 == 0,
                "every region starts 16-byte aligned (cp.async, ldmatrix, doubles)");
  static_assert(std::size_t{2} * kTile * 2 >= std::size_t{fused::kNarrowingFloats} * 4,
                "the narrowing scratch fits in the V buffers");
};

struct BatchedParams {
  const std::uint16_t* q;  // 16-bit values (bfloat16 or float16 bit patterns)
  const std::uint16_t* k;
  const std::uint16_t* v;
  void* out;  // 16-bit like the inputs, or float32 (out_float32)
  // Strides in elements: sequence, head, row.
  std::int64_t q_batch, q_head, q_row;
  std::int64_t k_batch, k_head, k_row;
  std::int64_t v_batch, v_head, v_row;
  std::int64_t o_batch, o_head, o_row;
  int group;                          // query heads per key/value head (Hq / Hkv)
  int n, m;                           // rows of Q and of K, V (padded lengths)
  const std::int32_t* query_lengths;  // device, batch values or null (clamped to [0, n])
  const std::int32_t* key_lengths;    // device, batch values or null (clamped to [0, m])
  bool causal;
  bool out_float32;
  Weighting w;
  // Entmax: candidate lists of kBlockM x cap floats per slot; a block holds
  // a slot (flag 1) while it runs, so the scratch scales with the blocks the
  // GPU can hold at once, not with batch x heads x n.
  float* cand;
  int cap;
  int* slot_flags;  // slots ints, 0 before the launch
  int slots;
  // The backward's run of the entmax forward: each query row's weighting
  // state {max, sum, tau_hi, tau_lo} into stats[(b Hq + h) n + i] (sum = 0
  // for a row without weights), and out = null (not written). The weights
  // are then p = attention_weight(x, max, tau) / sum (attention_common.cuh).
  // (Softmax's state, {max, sum}, the backward's query kernel finds itself.)
  float4* stats;
  // Block-sparse attention (null: every key tile): the key tiles of query
  // tile I of graph (b', h') are block_cols[block_offsets[r] ..
  // block_offsets[r + 1]), ascending, r = (b' block_heads + h') query_tiles
  // + I, where b' = b and h' = h, or 0 for a graph shared by every sequence
  // (block_batch 1) or head (block_heads 1). Blocks are 64 x 64: a query
  // tile by a key tile.
  const std::int32_t* block_offsets;
  const std::int32_t* block_cols;
  int block_batch, block_heads;
};
// The backward's kernels (batched_attention_backward_kernel.cuh).
struct BackwardParams {
  BatchedParams f;  // q, k, v with their strides, group, n, m, lengths, causal, weighting
  const std::uint16_t* dout;
  std::int64_t do_batch, do_head, do_row;
  // Gradients: E's 16-bit format or float32 (the *_float32 flags).
  void* dq;
  void* dk;
  void* dv;
  bool dq_float32, dk_float32, dv_float32;
  std::int64_t dq_batch, dq_head, dq_row;
  std::int64_t dk_batch, dk_head, dk_row;
  std::int64_t dv_batch, dv_head, dv_row;
  // Block-sparse attention: the transposed block rows (null: every query
  // tile): the query tiles that list key tile J of graph (b', h') are
  // query_rows[key_offsets[c] .. key_offsets[c + 1]), ascending,
  // c = (b' block_heads + h') key_tiles + J (f.block_* as above).
  const std::int32_t* key_offsets;
  const std::int32_t* query_rows;
  float4* stats;  // the rows' states, (B, Hq, n): entmax's from the forward, softmax's from the query kernel
  float* delta;         // (B, Hq, n), written by the query kernel
  float scale;          // the scores' scale: d(score)/d(q.k)
  int q_heads;
  int batch;
};

// Launches the query kernel, then the key kernel, for element type E and
// head dimension D = dv (instantiated in batched_attention_hdim<D>.cu).
template <class E, int D>
void launch_batched_backward(const BackwardParams& bp, cudaStream_t stream);

// Launches the kernel for element type E (mma::Bfloat16 or mma::Float16),
// head dimension D (= dv) and transform family on a grid of query_tiles x
// heads x batch blocks (instantiated in batched_attention_hdim<D>.cu).
template <class E, int D, bool kSoftmax>
void launch_batched(const BatchedParams& p, unsigned query_tiles, unsigned heads, unsigned batch, cudaStream_t stream);

// How many blocks of that kernel the current device runs at once (at least
// 1): the candidate slots an entmax launch needs so that no block waits.
template <class E, int D, bool kSoftmax>
int resident_blocks();

}  // namespace entgraph::cuda::detail::batched
