// entgraph CUDA backend: the row-wise attention transforms and their backward.
//
// The same transforms as entgraph/transforms.hpp (softmax, sparsemax,
// entmax15, entmax with any alpha in [1, kMaxEntmaxAlpha], topk_softmax), for
// float32 on the GPU, one thread block per row:
// - softmax and top-k: block max and sum (top-k finds the k-th largest score
//   exactly by a four-pass radix select; every score equal to it is kept, as on
//   the CPU);
// - sparsemax and entmax15: a bracketed Newton/bisection on the threshold tau
//   (Michelot's iteration for sparsemax), ended by tau in closed form on the
//   support (sparsemax: (sum_S z - 1) / |S|, Martins & Astudillo 2016;
//   1.5-entmax: the root of sum_S (z/2 - tau)^2 = 1, Peters et al. 2019),
//   accepted only when every support entry lies above it, which makes it exact;
// - entmax (Peters, Niculae & Martins 2019): a safeguarded Newton iteration on
//   tau in double (bisection when a step leaves the bracket or stalls), then
//   renormalised. alpha = 1 runs softmax, alpha = 1.5 entmax15 and alpha = 2
//   sparsemax (their exact closed forms).
// Rows of up to 8192 entries are staged in shared memory; longer rows are read
// from global memory on every pass.
//
// Contract (as the CPU's): row-major contiguous rows x cols matrices; the
// optional mask has the same shape, 0 = masked: a masked entry gets exactly 0
// whatever its score (even NaN); -inf scores get 0; a row with nothing to
// attend to (every entry masked or -inf) gives zeros. The output may alias the
// input exactly (in place); partial overlap is not allowed. The backward needs
// only the forward output p:
//   softmax, top-k: dz = p (dp - <p, dp>)
//   sparsemax:      dz = s (dp - <s, dp> / sum s), s = [p > 0]
//   entmax alpha:   the same with s = p^(2 - alpha) on the support (sqrt(p) for 1.5).
// Sums, thresholds and backward weights are computed in double. Results match
// the CPU core within float rounding (1e-5 relative to the row's largest value
// at most, about 1e-7 typically), not bit for bit; for alpha > 2 an entry just
// above the threshold is ill-conditioned (dp/dz ~ p^(2-alpha)) and may differ
// more, as the CPU's own float path does (tests/transforms: entmax_conditioning).
// Results are deterministic: the same call gives the same bits every time.
//
// Host memory goes through the core's calls with Device::cuda
// (entgraph::transform_forward(Device::cuda, ...), after
// cuda::register_backend()); the functions here take device pointers.
//
// Errors: entgraph::Error (cuda::CudaError for CUDA failures), with the core's
// checks and messages prefixed "cuda::" (e.g. "cuda::entmax: t.alpha is out of range ..."):
// cols = 0, alpha NaN or outside [1, kMaxEntmaxAlpha], k = 0, a transform that
// needs extra inputs (adaptive span, constrained), a null or host pointer, and
// NaN or +inf in an unmasked score (NaN or +-inf in grad_probs for the
// backward). Every check happens before any output is written.
#pragma once

#include <cstddef>
#include <cstdint>

#include "entgraph/cuda/device.hpp"
#include "entgraph/matrix_view.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph::cuda {

// probs = t(scores) row by row; scores, probs and mask are device pointers
// (mask may be null). The scores are first scanned on the device for NaN/+inf
// (unmasked entries), and the host waits for that scan's verdict (one 8-byte
// copy), so a bad input throws before the transform is enqueued; the transform
// itself then runs asynchronously on `stream`. rows = 0 does nothing.
void transform_forward(const Transform& t, const float* scores, float* probs, std::size_t rows, std::size_t cols,
                       const std::uint8_t* mask = nullptr, cudaStream_t stream = nullptr);

// grad_scores = the vector-Jacobian product of t at probs (the forward's
// output) with grad_probs; device pointers. grad_probs is scanned for NaN and
// +-inf first, as above. grad_scores may alias probs or grad_probs exactly.
void transform_backward(const Transform& t, const float* probs, const float* grad_probs, float* grad_scores,
                        std::size_t rows, std::size_t cols, cudaStream_t stream = nullptr);

// The same without the scan for non-finite values: fully asynchronous (no
// host synchronisation), for inputs valid by construction. The arguments are
// still checked on the host. A NaN or +inf score then gives unspecified values
// in its row (never an out-of-bounds access or a hang).
void transform_forward_unchecked(const Transform& t, const float* scores, float* probs, std::size_t rows,
                                 std::size_t cols, const std::uint8_t* mask = nullptr, cudaStream_t stream = nullptr);
void transform_backward_unchecked(const Transform& t, const float* probs, const float* grad_probs,
                                  float* grad_scores, std::size_t rows, std::size_t cols,
                                  cudaStream_t stream = nullptr);

}  // namespace entgraph::cuda
