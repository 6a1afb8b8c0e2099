// Helpers shared by fused (dense) and graph attention: how a transform maps a
// score to a weight, the warp-wide solve of the entmax threshold, and the
// host-side checks of the attention options.
//
// Scores are kept in the scale in which the transform is cheapest:
// - softmax: x = scale * log2(e) * q.k, weight exp2(x - max);
// - alpha-entmax (Peters, Niculae & Martins 2019): x = scale * (alpha - 1) * q.k,
//   weight [x - max - tau]_+^(1 / (alpha - 1)), tau relative to the row max.
// In the entmax scale the threshold satisfies -1 <= tau < 0: at tau = -1 the
// max alone has weight 1, at tau = 0 every weight is 0. So only keys with
// x > max - 1 can be in the support, whatever the other scores are.
// - top-k softmax (all but graph attention's exact mode): softmax's scale
//   and weights on the scores x >= the row's k-th largest score (every tie
//   of it kept), that score held as the threshold (tau.hi, absolute; tau.lo
//   = 0). The fused kernels find it by entmax's sweeps (attention_rows.cuh),
//   the row kernels on the whole row (row_threshold; topk_select.cuh).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "checks.cuh"
#include "entgraph/backend.hpp"
#include "entgraph/cuda/attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/error.hpp"
#include "entgraph/matrix_view.hpp"
#include "entgraph/transforms.hpp"
#include "predictors_common.cuh"
#include "reduce.cuh"
#include "staging.cuh"
#include "topk_select.cuh"

namespace entgraph::cuda::detail {

// The transform of one attention call, resolved on the host.
struct Weighting {
  bool softmax = true;
  double scale = 0.0;   // the scores' scale, resolved (0 in the options stands for 1/sqrt(d))
  float factor = 0.0f;  // multiplies q.k: scale * log2(e) (softmax) or scale * (alpha - 1)
  float q = 1.0f;       // entmax exponent 1 / (alpha - 1)
  double q_double = 1.0;
  int q_int = 0;        // q when it is an integer in [1, 8] (products instead of powf), else 0
  bool newton = false;  // alpha <= 2: the mass is convex in tau, so Newton from below never overshoots
  int topk = 0;         // top-k softmax's k (softmax = false: it needs a threshold like entmax), else 0
};

// The entmax threshold, relative to the row max, as an unevaluated sum of two
// floats: for alpha > 2 the weights w^(1/(alpha-1)) are steep near w = 0, and
// a tau rounded to float would move the smallest weights of a row by up to
// ulp^(1/(alpha-1)).
struct Tau {
  float hi = 0.0f;
  float lo = 0.0f;
};
__host__ __device__ inline Tau split_tau(double t) {
  const float hi = static_cast<float>(t);
  return {hi, static_cast<float>(t - static_cast<double>(hi))};
}

// Resolves options.transform and the scale; throws entgraph::Error naming the
// argument for a transform the fused kernels do not implement (and, for the
// device-memory entry points, which the core never sees, with the core's
// checks of alpha and the scale).
inline Weighting make_weighting(const Transform& t, double scale, std::size_t d, const char* op, const char* name) {
  const TransformInfo* row = find_transform_info(t.kind);
  if (row == nullptr || !has_cuda_attention(*row))
    throw Error(std::string(op) + ": " + name + " is not supported on device cuda (got " + t.name() + ", expected " +
                transform_names(has_cuda_attention, " or ") + ")");
  check_transform_parameters(t, op, name);
  const double alpha = t.tsallis_alpha();
  check_attention_scale(scale, op, "options.scale");
  const double s = scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(d)) : scale;
  Weighting w;
  w.scale = s;
  const bool topk = t.kind == TransformKind::topk_softmax;
  w.softmax = alpha == 1.0 && !topk;
  if (alpha == 1.0) {
    w.factor = static_cast<float>(s * 1.4426950408889634);  // log2(e)
    if (topk) w.topk = static_cast<int>(std::min<std::size_t>(t.k, std::numeric_limits<int>::max()));
    return w;
  }
  const double am1 = alpha - 1.0;
  const double q = 1.0 / am1;
  w.factor = static_cast<float>(s * am1);
  w.q = static_cast<float>(q);
  w.q_double = q;
  const double qr = std::round(q);
  w.q_int = (qr >= 1.0 && qr <= 8.0 && std::abs(q - qr) < 1e-12) ? static_cast<int>(qr) : 0;
  w.newton = alpha <= 2.0;
  return w;
}

// The weighting for rows of at most m keys: top-k with k >= m keeps every
// key a row sees, which is softmax (one sweep, no candidate lists).
inline Weighting for_keys(Weighting w, std::size_t m) {
  if (w.topk > 0 && static_cast<std::size_t>(w.topk) >= m) {
    w.topk = 0;
    w.softmax = true;
  }
  return w;
}

// The fused float32 kernel on one head (fused_attention.cu), its arguments
// checked by the caller (sizes, head dimensions 32, 64 or 128, pointers).
void launch_fused_attention(const float* q, const float* k, const float* v, float* out, std::size_t n, std::size_t m,
                            std::size_t d, std::size_t dv, const Weighting& w, const FusedAttentionOptions& options,
                            cudaStream_t stream);

// w^q for w > 0.
__device__ inline float entmax_pow(float w, const Weighting& e) {
  if (e.q_int > 0) {
    float r = w;
    for (int i = 1; i < e.q_int; ++i) r *= w;
    return r;
  }
  return powf(w, e.q);
}

// w^q for w > 0, in double (the solve for alpha > 2).
__device__ inline double entmax_pow(double w, const Weighting& e) {
  if (e.q_int > 0) {
    double r = w;
    for (int i = 1; i < e.q_int; ++i) r *= w;
    return r;
  }
  return e.q_double == 0.5 ? sqrt(w) : pow(w, e.q_double);
}

// The weight of a score x (in the weighting's scale) in a row with maximum
// `max` and threshold tau (entmax; top-k: its k-th largest score); 0 for
// x = -inf. Unnormalised:
// callers divide by the row's sum, which absorbs the last rounding of tau.
__device__ inline float attention_weight(float x, float max, Tau tau, const Weighting& e) {
  if (e.softmax) return exp2f(x - max);  // exp2(-inf) = 0
  if (e.topk > 0) return x >= tau.hi ? exp2f(x - max) : 0.0f;  // tau.hi: the k-th largest score, finite
  const float w = ((x - max) - tau.hi) - tau.lo;
  return w > 0.0f ? entmax_pow(w, e) : 0.0f;
}

// Stop when a step moves tau by less than this (tau lies in [-1, 0): about
// two float ulps of 1, far below what the renormalised weights can resolve
// for alpha <= 2).
inline constexpr float kTauTolerance = 2e-7f;

// The entmax threshold of the `count` values x[0..count) (any memory the warp
// can read; -inf entries are fine) of a row whose maximum is `max`: the tau in
// [lo, hi] with sum_t [x_t - max - tau]_+^q = 1. Requires mass(lo) >= 1 (lo =
// -1 always qualifies when the row's max is among the values) and
// mass(hi) < 1 (hi = 0 always qualifies). Whole warp, uniform control flow:
// the butterfly sums are bit-identical in every lane, so every lane takes the
// same branches and returns the same value.
//
// alpha <= 2: safeguarded Newton in float (the mass is convex and decreasing
// in tau, so steps from below stay below the root; a step that would leave
// the bracket bisects instead), stopped when a step moves tau by at most
// kTauTolerance. alpha > 2: bisection in double down to double resolution
// (the weights are steep near 0, see Tau). The support is never empty: tau <
// hi <= 0 and the max has x - max = 0.
//
// Stopped after max_iterations, it returns the bracket's lower end: a tau
// whose mass is >= 1, so at or below the root (a cheap lower bound).
__device__ inline Tau warp_entmax_tau(const float* x, std::size_t count, float max, const Weighting& e, double lo,
                                      double hi, int max_iterations = 200) {
  const unsigned lane = threadIdx.x % kWarpSize;
  if (!e.newton) {
    for (int it = 0; it < max_iterations; ++it) {
      const double mid = 0.5 * (lo + hi);
      if (!(mid > lo && mid < hi)) break;
      double f = 0.0;
      for (std::size_t i = lane; i < count; i += kWarpSize) {
        const double w = (static_cast<double>(x[i]) - static_cast<double>(max)) - mid;
        if (w > 0.0) f += entmax_pow(w, e);
      }
      f = warp_sum(f);
      if (f >= 1.0)
        lo = mid;
      else
        hi = mid;
    }
    return split_tau(lo);
  }
  float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
  float t = flo;
  for (int it = 0; it < max_iterations; ++it) {
    float f = 0.0f, g = 0.0f;
    for (std::size_t i = lane; i < count; i += kWarpSize) {
      const float w = (x[i] - max) - t;
      if (w > 0.0f) {
        const float p = entmax_pow(w, e);
        f += p;
        g += p / w;  // w^(q - 1): the derivative's terms
      }
    }
    f = warp_sum(f);
    g = warp_sum(g);
    if (f >= 1.0f)
      flo = t;
    else
      fhi = t;
    if (f == 1.0f) return {t, 0.0f};
    float next = 0.5f * (flo + fhi);
    if (g > 0.0f) {
      const float step = t + (f - 1.0f) / (e.q * g);
      if (step > flo && step < fhi) next = step;
    }
    if (!(next > flo && next < fhi)) break;  // the bracket holds no float strictly inside
    // Converged: the step's target is the best estimate (from either side of the root).
    if (fabsf(next - t) <= kTauTolerance) return {next, 0.0f};
    t = next;
  }
  return {flo, 0.0f};
}

// A host-memory attention call's inputs on the device (q, k, v, the key
// padding) and its output buffer, with the options of the device API: what
// the backend's kernels (dense and graph attention) share.
// The core's options as the fused kernels' (key_padding: where the kernel
// reads the flags).
inline FusedAttentionOptions fused_options(const AttentionOptions<float>& o, const std::uint8_t* key_padding) {
  FusedAttentionOptions fo;
  fo.transform = o.transform;
  fo.scale = o.scale;
  fo.causal = o.causal;
  fo.key_padding = key_padding;
  return fo;
}

struct StagedAttention {
  DeviceArray<float> q, k, v, out;
  DeviceArray<std::uint8_t> padding;
  FusedAttentionOptions options;

  StagedAttention(ConstMatrix<float> hq, ConstMatrix<float> hk, ConstMatrix<float> hv,
                  const AttentionOptions<float>& o, const std::string& op)
      : q(upload(hq, op + ": uploading q")),
        k(upload(hk, op + ": uploading k")),
        v(upload(hv, op + ": uploading v")),
        out(hq.rows * hv.cols, (op + ": out").c_str()) {
    if (o.key_padding) padding = DeviceArray<std::uint8_t>(o.key_padding, hk.rows, (op + ": key_padding").c_str());
    options = fused_options(o, o.key_padding ? padding.data() : nullptr);
  }
  // Waits for the default stream's work, then copies the output into `to`.
  void finish(MatrixView<float> to, const std::string& op) {
    synchronize(nullptr);
    download(out, to, op + ": downloading out");
  }
};

// An attention call's scratch of `bytes`: the caller's workspace (options.
// workspace) when given, checked to be large enough, else stream-ordered
// memory that is freed, on the same stream, when this goes out of scope.
class AttentionScratch {
 public:
  AttentionScratch(void* workspace, std::size_t workspace_bytes, std::size_t bytes, cudaStream_t stream,
                   const char* op, const char* what)
      : stream_(stream) {
    if (workspace) {
      if (workspace_bytes < bytes)
        argument_error(op, "options.workspace_bytes is too small (got " + std::to_string(workspace_bytes) +
                               ", expected at least " + std::to_string(bytes) + ")");
      check_device_pointer(workspace, op, "options.workspace", false);
      data_ = static_cast<float*>(workspace);
    } else if (bytes > 0) {
      check(cudaMallocAsync(&owned_, bytes, stream), what);
      data_ = static_cast<float*>(owned_);
    }
  }
  AttentionScratch(const AttentionScratch&) = delete;
  AttentionScratch& operator=(const AttentionScratch&) = delete;
  ~AttentionScratch() {
    if (owned_) cudaFreeAsync(owned_, stream_);
  }
  float* data() const { return data_; }

 private:
  cudaStream_t stream_;
  void* owned_ = nullptr;
  float* data_ = nullptr;
};

// The threshold of a whole row held in memory (count values, -inf where a
// key is not visible; the row's max is `max` > -inf), whole warp: entmax's
// tau, or top-k's k-th largest value (the smallest when the row holds fewer
// than k; -inf entries weigh 0 whatever the threshold). Softmax has none.
__device__ inline Tau row_threshold(const float* row, std::size_t count, float max, const Weighting& w) {
  if (w.softmax) return {};
  if (w.topk > 0) return {topk::threshold(row, static_cast<int>(count), w.topk), 0.0f};
  return warp_entmax_tau(row, count, max, w, -1.0, 0.0);
}

}  // namespace entgraph::cuda::detail
