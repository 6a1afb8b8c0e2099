// entgraph CUDA backend: fused dense attention with softmax, sparsemax,
// alpha-entmax and top-k softmax, in the style of FlashAttention (Dao et al. 2022): the n x m
// score matrix is never stored.
//
// One head, as in entgraph/attention.hpp: Q is n x d, K is m x d, V is m x dv,
//   S = scale Q K^T,   P = pi(S) row by row,   O = P V  (n x dv),
// with pi one of softmax, sparsemax, entmax15, entmax(alpha) (alpha-entmax,
// Peters, Niculae & Martins 2019; alpha = 1 is softmax, 2 is sparsemax) or
// topk_softmax(k) (its threshold, the k-th largest score, found by entmax's
// sweeps: attention_rows.cuh, topk_select.cuh; k >= m is softmax).
// Masks as on the CPU: causal (query i sees keys [0, causal_key_limit(i, n,
// m)), i.e. the queries are the last n positions of the m keys) and an
// optional key padding (m flags, 0 = a key no query may see). A query that
// sees no key gets a zero output row.
//
// Algorithm (details at the top of fused_attention.cu): blocks of 64 queries
// stream tiles of K and V through shared memory. Softmax takes one sweep with
// the online max/sum rescaling of FlashAttention. Entmax takes two: sweep 1
// finds each query's max and keeps, in a per-query candidate buffer, the
// scores that can still be in the support (within 1 / (alpha - 1) of the
// running max); tau is solved from the candidates; sweep 2 accumulates
// [(alpha - 1) s - tau]_+^(1 / (alpha - 1)) v. A query whose candidates
// overflow the buffer gets extra sweeps that narrow tau down (exact, slower).
//
// Precision: float32 (no tensor cores; the threshold of alpha > 2 is solved
// in double). The weights are renormalised to sum to 1; outputs are meant to
// match the CPU's float64 attention_forward within about 1e-5 of the largest
// |v| (the tests allow 1e-4), not bit for bit. Accuracy degrades as alpha
// approaches 1 from above (exponents 1 / (alpha - 1) in the thousands);
// alpha = 1 exactly is softmax.
//
// Errors (entgraph::Error naming the argument, cuda::CudaError for CUDA
// failures; all checks happen before anything is launched): n, m = 0, d or dv
// not 32, 64 or 128, a null or misaligned (not 16-byte) pointer, a
// non-finite scale, a transform other than the five above (adaptive span
// and the constrained transforms are CPU-only), a workspace that is too
// small.
#pragma once

#include <cstddef>
#include <cstdint>

#include "entgraph/attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/matrix_view.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph::cuda {

struct FusedAttentionOptions {
  Transform transform = Transform::entmax15();  // softmax, sparsemax, entmax15 or entmax(alpha)
  double scale = 0.0;                           // 0 means 1 / sqrt(d)
  bool causal = false;
  const std::uint8_t* key_padding = nullptr;    // device pointer to m flags, optional

  // Entmax only: scores kept per query in sweep 1. 0 picks min(m, 1024). A
  // query with more live candidates than this is still exact but costs about
  // one extra sweep over K per 16x narrowing of tau (at most 13). Small values
  // are for tests of that path.
  std::size_t candidate_capacity = 0;

  // Entmax only: device scratch of at least attention_workspace_bytes(...)
  // bytes (n * capacity floats). Null: allocated and freed on the stream
  // (cudaMallocAsync) by every call.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

// Bytes of scratch attention_forward needs (0 for softmax).
std::size_t attention_workspace_bytes(std::size_t n, std::size_t m, const FusedAttentionOptions& options);

// out = pi(scale q k^T) v on device pointers: q n x d, k m x d, v m x dv, out
// n x dv, row-major, contiguous, 16-byte aligned (cudaMalloc's are). d and dv
// are 32, 64 or 128. Asynchronous on `stream`; out is fully overwritten.
void attention_forward(const float* q, const float* k, const float* v, float* out, std::size_t n, std::size_t m,
                       std::size_t d, std::size_t dv, const FusedAttentionOptions& options,
                       cudaStream_t stream = nullptr);

// Host memory: entgraph::attention_forward(Device::cuda, ...) (entgraph/attention.hpp).

// The unfused middle step (the GEMM + transform + GEMM baseline, and a way to
// get P): scores holds the raw products Q K^T (n x m, row-major, device); it
// is overwritten with P = pi(scale * scores) under options' masks (masked
// entries exactly 0; a row with nothing visible is all 0). d is the head
// dimension, for the default scale 1 / sqrt(d). One warp per row; the
// threshold is solved on the whole row. options.candidate_capacity and
// workspace are unused. The scores are not checked for NaN or inf. Top-k is
// refused (run transform_forward on the scaled scores instead).
void scores_to_probs(float* scores, std::size_t n, std::size_t m, std::size_t d, const FusedAttentionOptions& options,
                     cudaStream_t stream = nullptr);

}  // namespace entgraph::cuda
