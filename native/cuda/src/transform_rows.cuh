// The row operations of the GPU transforms (transforms.cu): one thread block
// per row, the row read through RowIn (staged in shared memory or not),
// reduced in blocks; softmax, top-k softmax, sparsemax and 1.5-entmax (exact
// thresholds), and general alpha-entmax in double. Included only by
// transform_kernels.cuh.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>

#include "reduce.cuh"
#include "staging.cuh"

namespace entgraph::cuda {
namespace {

using detail::block_max;
using detail::block_reduce;
using detail::block_sum;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr unsigned kMaxThreads = 256;
// Rows up to this many entries are staged in shared memory (32 KiB, under the
// 48 KiB a block gets without opting in, next to the reductions' slots).
constexpr unsigned kMaxStagedCols = 8192;
#if defined(ENTGRAPH_CUDA_EMULATOR)
// The emulator runs every block on the CPU: a small grid keeps the test of
// the rows past the grid (the blocks' row loop) cheap there.
constexpr std::size_t kMaxGrid = 1024;
#else
constexpr std::size_t kMaxGrid = 65535;
#endif

// ---------------------------------------------------------------------------
// Row access: entry i of the current row, -inf where the mask hides it.

template <bool kStaged>
struct RowIn {
  const float* z;
  const std::uint8_t* keep;
  const float* staged;
  __device__ float operator()(unsigned i) const {
    if constexpr (kStaged) {
      return staged[i];
    } else {
      return keep == nullptr || keep[i] != 0 ? z[i] : -kInf;
    }
  }
};

__device__ void fill_zero_row(float* p, unsigned n) {
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) p[i] = 0.0f;
}

// Small structs reduced in one block_reduce (one set of barriers, not several).
struct MaxCount {
  float max;
  unsigned count;
};
struct MaxCountOp {
  __device__ MaxCount operator()(const MaxCount& a, const MaxCount& b) const {
    return {b.max > a.max ? b.max : a.max, a.count + b.count};
  }
};
struct SumPair {
  double a, b;
};
struct SumPairOp {
  __device__ SumPair operator()(const SumPair& x, const SumPair& y) const { return {x.a + y.a, x.b + y.b}; }
};
// The backward's first pass over a row: the sum of the weights, and the
// largest weight with its dp (ties: the lower index), the pivot.
struct WeightTop {
  double sum, top;
  float pivot;
  unsigned index;
};
struct WeightTopOp {
  __device__ WeightTop operator()(const WeightTop& x, const WeightTop& y) const {
    const bool take_y = y.top > x.top || (y.top == x.top && y.index < x.index);
    return {x.sum + y.sum, take_y ? y.top : x.top, take_y ? y.pivot : x.pivot, take_y ? y.index : x.index};
  }
};
// Over the support {x > t}: sum (x - t), sum (x - t)^2, min x, count.
struct Moments {
  double s1, s2;
  float min;
  unsigned count;
};
struct MomentsOp {
  __device__ Moments operator()(const Moments& a, const Moments& b) const {
    return {a.s1 + b.s1, a.s2 + b.s2, b.min < a.min ? b.min : a.min, a.count + b.count};
  }
};

template <class Row>
__device__ float row_max(const Row& z, unsigned n) {
  float m = -kInf;
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, z(i));
  return block_max(m);
}

// ---------------------------------------------------------------------------
// Softmax: p = exp(z - max) / sum; sums in double.
struct SoftmaxRow {
  template <class Row>
  __device__ void operator()(const Row& z, float* p, unsigned n) const {
    const float m = row_max(z, n);
    if (m == -kInf) return fill_zero_row(p, n);
    double s = 0.0;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) s += expf(z(i) - m);
    const float inv = static_cast<float>(1.0 / block_sum(s));
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) p[i] = expf(z(i) - m) * inv;
  }
};

// ---------------------------------------------------------------------------
// Top-k softmax: softmax over the entries >= the k-th largest (masked entries
// count as -inf, as on the CPU). The k-th largest is found exactly by a radix
// select on order-preserving 32-bit keys, 8 bits per pass.

__device__ unsigned order_key(float v) {
  const unsigned b = __float_as_uint(v == 0.0f ? 0.0f : v);  // -0 and +0 compare equal: one key
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ float key_value(unsigned key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// The k-th largest of the row's n values, 1 <= k <= n. Every thread gets it.
template <class Row>
__device__ float kth_largest(const Row& z, unsigned n, unsigned k) {
  __shared__ unsigned hist[256];
  __shared__ unsigned chosen_digit, chosen_rank;
  unsigned prefix = 0, prefix_mask = 0, rank = k;  // rank among the keys that match prefix
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
      const unsigned key = order_key(z(i));
      if ((key & prefix_mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // From the largest digit down, the bucket holding the rank-th key. The
      // matching keys number at least rank, so the loop always stops inside.
      unsigned above = 0, digit = 0;
      for (int b = 255; b >= 0; --b) {
        if (above + hist[b] >= rank) {
          digit = static_cast<unsigned>(b);
          break;
        }
        above += hist[b];
      }
      chosen_digit = digit;
      chosen_rank = rank - above;
    }
    __syncthreads();
    prefix |= chosen_digit << shift;
    prefix_mask |= 255u << shift;
    rank = chosen_rank;
  }
  return key_value(prefix);
}

struct TopkRow {
  unsigned k;  // >= 1; k >= n keeps every entry
  template <class Row>
  __device__ void operator()(const Row& z, float* p, unsigned n) const {
    const float m = row_max(z, n);
    if (m == -kInf) return fill_zero_row(p, n);
    const float kth = k < n ? kth_largest(z, n, k) : -kInf;
    double s = 0.0;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = z(i);
      if (v >= kth) s += expf(v - m);
    }
    const float inv = static_cast<float>(1.0 / block_sum(s));
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = z(i);
      p[i] = v >= kth ? expf(v - m) * inv : 0.0f;
    }
  }
};

// ---------------------------------------------------------------------------
// Sparsemax (kPower = 1) and 1.5-entmax (kPower = 2):
//   p = (x - tau)_+^kPower,  x = (z - max) / kPower in (-inf, 0],  sum p = 1,
// with tau in [-1, 0] (the CPU's scale). f(t) = sum (x - t)_+^kPower - 1 is
// convex and decreasing, f(-1) >= 0 > f(0).
//
// Each pass at t gives, over S_t = {x > t}, the moments of x - t. When
// f(t) >= 0, the closed-form tau r of S_t (sparsemax: t + (s1 - 1) / |S|;
// 1.5-entmax: the smaller root of sum_S (x - r)^2 = 1) is exact as soon as
// r <= min_S x: then f(r) = 0, as entries outside S_t lie at or below t <= r.
// Otherwise the Newton step from t (for sparsemax it is r itself: Michelot's
// iteration) stays left of tau, since f is convex, and shrinks the bracket;
// every fourth pass bisects, so rows whose support shrinks one entry per step
// still converge geometrically. All in double: t, r and the sums.
constexpr int kExactMaxPasses = 160;
constexpr double kExactBracket = 1e-13;  // give up refining: tau = lo is this close
constexpr double kAcceptSlack = 1e-9;    // r may exceed min_S x by rounding; that entry gets ~0

template <int kPower>
struct ExactEntmaxRow {
  template <class Row>
  __device__ void operator()(const Row& z, float* p, unsigned n) const {
    const float m = row_max(z, n);
    if (m == -kInf) return fill_zero_row(p, n);
    // In float, as the CPU computes it; -inf for masked entries.
    auto x_at = [&](unsigned i) { return kPower == 1 ? z(i) - m : (z(i) - m) * 0.5f; };
    double lo = -1.0, hi = 0.0, t = -1.0, newton = -1.0;
    for (int pass = 0; pass < kExactMaxPasses; ++pass) {
      Moments s{0.0, 0.0, kInf, 0u};
      for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
        const float x = x_at(i);
        const double d = static_cast<double>(x) - t;
        if (d > 0.0) {
          s.s1 += d;
          s.s2 += d * d;
          s.min = fminf(s.min, x);
          ++s.count;
        }
      }
      s = block_reduce(s, MomentsOp{});
      // t < 0 always, so the max (x = 0) is in S_t: count >= 1 and s1 > 0.
      const double f = (kPower == 1 ? s.s1 : s.s2) - 1.0;
      if (f >= 0.0) {
        lo = t;
        const double k = static_cast<double>(s.count);
        double r;
        bool real = true;
        if (kPower == 1) {
          r = t + (s.s1 - 1.0) / k;
        } else {
          const double mean = s.s1 / k, var = s.s2 - s.s1 * mean;  // of x - t over S_t
          real = var <= 1.0;
          r = t + mean - sqrt(fmax(1.0 - var, 0.0) / k);
        }
        if (real && r <= static_cast<double>(s.min) + kAcceptSlack) {
          lo = fmax(r, t);
          break;
        }
        newton = kPower == 1 ? r : t + (s.s2 - 1.0) / (2.0 * s.s1);
      } else {
        hi = t;
      }
      if (hi - lo <= kExactBracket) break;
      t = (pass % 4 != 3 && newton > lo && newton < hi) ? newton : 0.5 * (lo + hi);
    }
    const double tau = lo;  // exact when accepted; else within kExactBracket below tau
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
      const double d = fmax(static_cast<double>(x_at(i)) - tau, 0.0);
      p[i] = static_cast<float>(kPower == 1 ? d : d * d);
    }
  }
};

// ---------------------------------------------------------------------------
// General alpha-entmax, alpha in (1, kMaxEntmaxAlpha], in double throughout:
//   p = (x - t)_+^beta,  x = a (z - max) <= 0,  a = alpha - 1,  beta = 1 / a,
// with t in [-1, -nf^-a] (nf finite entries; the CPU reference's bracket).
// f(t) = sum p - 1 decreases; f' = -beta sum p / (x - t). Safeguarded Newton
// (Numerical Recipes' rtsafe): a bisection whenever the step leaves the
// bracket or is not half the one before. Convex f for alpha <= 2: start at the
// left end, where Newton never overshoots. Concave for alpha > 2: start at
// the right end; that end can sit decades closer to 0 than the root (nf^-a is
// 1e-28 at alpha = 10), so the distance -t is first bisected geometrically to
// within a factor of 2. Double keeps (x - t) accurate to 1e-16 relative, so
// the power loses at most beta * 1e-16 (1e-12 at alpha = 1.0001). The weights
// are renormalised at the end.
constexpr int kNewtonMaxPasses = 100;
constexpr double kNewtonTolerance = 4e-16;  // relative to |t|: a couple of ulps
constexpr double kMassTolerance = 1e-10;    // |sum p - 1| well above the sums' rounding

struct EntmaxRow {
  double alpha;
  template <class Row>
  __device__ void operator()(const Row& z, float* p, unsigned n) const {
    MaxCount mc{-kInf, 0u};
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = z(i);
      mc.max = fmaxf(mc.max, v);
      mc.count += v > -kInf ? 1u : 0u;
    }
    mc = block_reduce(mc, MaxCountOp{});
    if (mc.max == -kInf) return fill_zero_row(p, n);
    const double a = alpha - 1.0, beta = 1.0 / a, m = mc.max;
    auto x_at = [&](unsigned i) { return a * (static_cast<double>(z(i)) - m); };  // -inf when masked
    auto evaluate = [&](double t, double& f, double& df) {
      SumPair s{0.0, 0.0};
      for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
        const double d = x_at(i) - t;
        if (d > 0.0) {
          const double q = pow(d, beta);
          s.a += q;
          s.b += q / d;
        }
      }
      s = block_reduce(s, SumPairOp{});
      f = s.a - 1.0;
      df = -beta * s.b;
    };
    double lo = -1.0, hi = -exp(-a * log(static_cast<double>(mc.count)));
    double t = lo, f = 0.0, df = 0.0;
    if (alpha <= 2.0) {
      // (1 + a y)^(1/a) <= e^y, so softmax's normaliser bounds the root from
      // the right: t <= -1 + a log sum exp(z - max). The bracket becomes tight
      // as alpha -> 1, where Newton from -1 alone would take many short steps.
      double e = 0.0;
      for (unsigned i = threadIdx.x; i < n; i += blockDim.x) e += exp(static_cast<double>(z(i)) - m);
      hi = fmin(hi, -1.0 + a * log(block_sum(e)));
    } else {
      // Clamped: nf^-a underflows for huge alpha. If the clamp breaks the
      // bracket, only the entries tied at the max have x > t for any t in
      // range (others sit >= a * 1e-45 below), and renormalising at
      // t = -d_lo gives them 1/ties each: the right answer.
      double d_lo = fmax(-hi, 1e-300), d_hi = 1.0;
      for (int it = 0; it < 64 && d_hi > 2.0 * d_lo; ++it) {
        const double d = sqrt(d_lo) * sqrt(d_hi);  // the product would underflow
        evaluate(-d, f, df);
        (f > 0.0 ? d_hi : d_lo) = d;
      }
      lo = -d_hi;
      hi = -d_lo;
      t = hi;
    }
    evaluate(t, f, df);
    double step_old = hi - lo, step = step_old;
    double best_t = t, best_f = fabs(f);  // the answer: the evaluated t with the smallest |f|
    int polish = 0;
    for (int it = 0; it < kNewtonMaxPasses && f != 0.0; ++it) {
      (f > 0.0 ? lo : hi) = t;
      const double next = t - f / df;
      // Converged: a Newton step within rounding while f is small (where a
      // threshold makes the slope huge, a tiny step alone proves nothing).
      if (df < 0.0 && fabs(next - t) <= kNewtonTolerance * fabs(t) && fabs(f) <= kMassTolerance) {
        best_t = next;
        break;
      }
      // Once |f| is small, Newton needs one or two passes to reach the noise
      // floor of the sums, below which steps only chase rounding.
      if (fabs(f) <= kMassTolerance && ++polish > 2) break;
      const bool newton = df < 0.0 && next > lo && next < hi && fabs(2.0 * f) <= fabs(step_old * df);
      step_old = step;
      if (newton) {
        step = next - t;
        t = next;
      } else {
        step = 0.5 * (hi - lo);
        t = lo + step;
      }
      if (fabs(step) <= kNewtonTolerance * fabs(t)) break;  // the bracket is a few ulps wide
      evaluate(t, f, df);
      if (fabs(f) < best_f) {
        best_f = fabs(f);
        best_t = t;
      }
    }
    t = best_t;
    double s = 0.0;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
      const double d = x_at(i) - t;
      if (d > 0.0) s += pow(d, beta);
    }
    const double inv = 1.0 / block_sum(s);  // s >= (-t)^beta > 0: the max has x = 0 > t
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
      const double d = x_at(i) - t;
      p[i] = d > 0.0 ? static_cast<float>(pow(d, beta) * inv) : 0.0f;
    }
  }
};


}  // namespace
}  // namespace entgraph::cuda
