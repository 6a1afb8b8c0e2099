// The row-wise transforms on the GPU: one thread block per row (grid-stride
// over rows), the row staged in shared memory when it fits. The device-memory
// entry points check their arguments with the core's checks (messages
// prefixed "cuda::"); their scan for NaN/+inf runs as its own kernel whose
// verdict the host reads before the transform is enqueued, so a bad input
// leaves every output untouched. The backend's host-memory kernels at the end
// receive arguments the core has validated.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "backend_kernels.hpp"
#include "checks.cuh"
#include "entgraph/backend.hpp"
#include "entgraph/cuda/transforms.hpp"
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
constexpr std::size_t kMaxGrid = 65535;
constexpr std::size_t kMaxCols = INT_MAX;

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

// ---------------------------------------------------------------------------
// Kernels.

template <bool kStaged, class Op>
__global__ void __launch_bounds__(kMaxThreads)
    forward_kernel(const float* scores, float* probs, const std::uint8_t* mask, std::size_t rows, unsigned n, Op op) {
  extern __shared__ float staged[];
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* z = scores + r * n;
    const std::uint8_t* keep = mask != nullptr ? mask + r * n : nullptr;
    if constexpr (kStaged) {
      __syncthreads();  // the previous row is done with `staged`
      for (unsigned i = threadIdx.x; i < n; i += blockDim.x) staged[i] = keep == nullptr || keep[i] != 0 ? z[i] : -kInf;
      __syncthreads();
    }
    // In place (probs == scores) is safe: every op writes p[i] only in its
    // last pass, after a block reduction, from the thread that reads z[i].
    op(RowIn<kStaged>{z, keep, staged}, probs + r * n, n);
  }
}

enum class Weight { prob, support, sqrt_prob, power };

// In double: p^(2 - alpha) overflows float for alpha > 2 and small p (1e40 at
// alpha = 10, p = 1e-5), which would turn the row's <s, dp> / sum s into NaN.
template <Weight kWeight>
__device__ double backward_weight(float p, double exponent) {
  const double x = p;
  if constexpr (kWeight == Weight::prob) return x;
  if constexpr (kWeight == Weight::support) return x > 0.0 ? 1.0 : 0.0;
  if constexpr (kWeight == Weight::sqrt_prob) return sqrt(x);
  return x > 0.0 ? pow(x, exponent) : 0.0;
}

// dz = s (dp - <s, dp> / sum s), s = weight(p). Same-index reads and writes
// per thread, after the reduction: dz may alias p or dp.
template <Weight kWeight>
__global__ void __launch_bounds__(kMaxThreads) backward_kernel(const float* probs, const float* grad_probs,
                                                               float* grad_scores, std::size_t rows, unsigned n,
                                                               double exponent) {
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* p = probs + r * n;
    const float* g = grad_probs + r * n;
    float* dz = grad_scores + r * n;
    // dz = w (dp - q), q = <w, dp> / sum w, computed as w ((dp - dp_m) - r)
    // with m the entry of the largest w and r = q - dp_m (as the CPU does):
    // for alpha > 2 one entry's w = p^(2 - alpha) can hold nearly all of
    // sum w, and dp_m - q would cancel to nothing even in double.
    WeightTop t{0.0, -1.0, 0.0f, ~0u};
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
      const double w = backward_weight<kWeight>(p[i], exponent);
      t.sum += w;
      if (w > t.top) t = {t.sum, w, g[i], i};  // i grows along a thread's loop: ties keep the first
    }
    t = block_reduce(t, WeightTopOp{});
    double rest = 0.0;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
      rest += backward_weight<kWeight>(p[i], exponent) * (static_cast<double>(g[i]) - t.pivot);
    rest = block_reduce(rest, detail::SumOp{});
    const double rq = t.sum > 0.0 ? rest / t.sum : 0.0;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
      dz[i] = static_cast<float>(backward_weight<kWeight>(p[i], exponent) *
                                 ((static_cast<double>(g[i]) - t.pivot) - rq));
  }
}

// The first index (row-major) of an entry that the mask keeps and that is NaN
// or +inf (or -inf too, unless allowed), atomically min-ed into *first.
__global__ void find_invalid_kernel(const float* x, const std::uint8_t* mask, unsigned long long total,
                                    bool allow_neg_inf, unsigned long long* first) {
  unsigned long long found = ~0ull;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    if (mask != nullptr && mask[i] == 0) continue;
    const float v = x[i];
    if (!(allow_neg_inf ? v < kInf : fabsf(v) < kInf)) {  // NaN fails both
      found = i;  // indices only grow along this thread's loop
      break;
    }
  }
  found = detail::warp_min(found);
  if (threadIdx.x % detail::kWarpSize == 0 && found != ~0ull) atomicMin(first, found);
}

// ---------------------------------------------------------------------------
// Host side: names, checks, launches.

unsigned threads_for(std::size_t n) {
  const std::size_t warps = (n + detail::kWarpSize - 1) / detail::kWarpSize;
  return static_cast<unsigned>(std::clamp<std::size_t>(warps * detail::kWarpSize, detail::kWarpSize, kMaxThreads));
}

unsigned grid_for(std::size_t rows) { return static_cast<unsigned>(std::min(rows, kMaxGrid)); }

bool supported(TransformKind kind) {
  return kind == TransformKind::softmax || kind == TransformKind::sparsemax || kind == TransformKind::entmax15 ||
         kind == TransformKind::entmax || kind == TransformKind::topk_softmax;
}

// "cuda::<transform>[_backward]", after checking the kind and its parameters
// with the core's check.
std::string checked_op(const Transform& t, bool backward) {
  const char* entry = backward ? "cuda::transform_backward" : "cuda::transform_forward";
  if (!supported(t.kind))
    throw Error(std::string(entry) + ": " + t.name() +
                " needs extra inputs; the CUDA backend has no kernel for it (expected softmax, sparsemax, entmax15, "
                "entmax or topk_softmax)");
  const std::string op = std::string("cuda::") + (t.kind == TransformKind::topk_softmax ? "topk_softmax"
                                                  : t.kind == TransformKind::entmax    ? "entmax"
                                                                                       : t.name()) +
                         (backward ? "_backward" : "");
  check_transform_parameters(t, op.c_str(), "t");
  return op;
}

void check_sizes(const std::string& op, const char* arg, std::size_t rows, std::size_t cols) {
  if (cols == 0) throw Error(op + ": " + arg + " rows are empty (got n = 0, expected n >= 1)");
  if (cols > kMaxCols)
    throw Error(op + ": " + arg + " rows are too long (got n = " + std::to_string(cols) +
                ", expected n <= " + std::to_string(kMaxCols) + ")");
  if (rows > std::numeric_limits<std::size_t>::max() / cols)
    throw Error(op + ": " + arg + " is too large (got " + shape_text(rows, cols) + ")");
}

// Throws the CPU's message for the first entry (row-major) that the mask
// keeps and that is NaN or +inf (or -inf, unless allowed). Waits for the scan.
void check_values(const std::string& op, const char* arg, const float* x, const std::uint8_t* mask,
                  std::size_t rows, std::size_t cols, bool allow_neg_inf, cudaStream_t stream) {
  const std::string what = op + ": scanning " + arg;
  const unsigned long long total = static_cast<unsigned long long>(rows) * cols;
  // Stream-ordered allocation (cheap, no device-wide sync); plain cudaMalloc
  // where the device has no memory pools.
  unsigned long long* first = nullptr;
  bool pooled = true;
  cudaError_t status = cudaMallocAsync(reinterpret_cast<void**>(&first), sizeof(*first), stream);
  if (status == cudaErrorNotSupported) {
    cudaGetLastError();
    pooled = false;
    status = cudaMalloc(reinterpret_cast<void**>(&first), sizeof(*first));
  }
  check(status, what.c_str());
  struct Release {
    void* p;
    cudaStream_t s;
    bool pooled;
    ~Release() { pooled ? cudaFreeAsync(p, s) : cudaFree(p); }
  } release{first, stream, pooled};
  check(cudaMemsetAsync(first, 0xff, sizeof(*first), stream), what.c_str());
  const unsigned threads = kMaxThreads;
  const unsigned long long blocks = std::min<unsigned long long>((total + threads - 1) / threads, 4096);
  find_invalid_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(x, mask, total, allow_neg_inf, first);
  check(cudaGetLastError(), what.c_str());
  unsigned long long bad = 0;
  check(cudaMemcpyAsync(&bad, first, sizeof(bad), cudaMemcpyDeviceToHost, stream), what.c_str());
  check(cudaStreamSynchronize(stream), what.c_str());
  if (bad == ~0ull) return;
  float v = 0.0f;
  check(cudaMemcpyAsync(&v, x + bad, sizeof(v), cudaMemcpyDeviceToHost, stream), what.c_str());
  check(cudaStreamSynchronize(stream), what.c_str());
  throw Error(op + ": " + arg + " has a non-finite entry at (" + std::to_string(bad / cols) + ", " +
              std::to_string(bad % cols) + ") (got " + (std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf")) +
              (allow_neg_inf ? ", expected a finite number or -inf)" : ", expected a finite number)"));
}

template <class Op>
void launch_forward(const std::string& op_name, Op op, const float* scores, float* probs, const std::uint8_t* mask,
                    std::size_t rows, std::size_t cols, cudaStream_t stream) {
  const unsigned n = static_cast<unsigned>(cols), threads = threads_for(cols), grid = grid_for(rows);
  if (n <= kMaxStagedCols) {
    forward_kernel<true, Op><<<grid, threads, n * sizeof(float), stream>>>(scores, probs, mask, rows, n, op);
  } else {
    forward_kernel<false, Op><<<grid, threads, 0, stream>>>(scores, probs, mask, rows, n, op);
  }
  check(cudaGetLastError(), (op_name + ": launch").c_str());
}

template <Weight kWeight>
void launch_backward(const std::string& op_name, const float* probs, const float* grad_probs, float* grad_scores,
                     std::size_t rows, std::size_t cols, double exponent, cudaStream_t stream) {
  backward_kernel<kWeight><<<grid_for(rows), threads_for(cols), 0, stream>>>(
      probs, grad_probs, grad_scores, rows, static_cast<unsigned>(cols), exponent);
  check(cudaGetLastError(), (op_name + ": launch").c_str());
}

// The forward's launch on arguments already checked (by the device-memory
// entry points below, or by the core's op layer for the backend's kernel).
void launch_transform_forward(const std::string& op, const Transform& t, const float* scores, float* probs,
                              const std::uint8_t* mask, std::size_t rows, std::size_t cols, cudaStream_t stream) {
  if (t.kind == TransformKind::topk_softmax) {
    const unsigned k = static_cast<unsigned>(std::min<std::size_t>(t.k, cols));  // k >= cols keeps all
    return launch_forward(op, TopkRow{k}, scores, probs, mask, rows, cols, stream);
  }
  const double alpha = t.tsallis_alpha();
  if (alpha == 1.0) return launch_forward(op, SoftmaxRow{}, scores, probs, mask, rows, cols, stream);
  if (alpha == 2.0) return launch_forward(op, ExactEntmaxRow<1>{}, scores, probs, mask, rows, cols, stream);
  if (alpha == 1.5) return launch_forward(op, ExactEntmaxRow<2>{}, scores, probs, mask, rows, cols, stream);
  launch_forward(op, EntmaxRow{alpha}, scores, probs, mask, rows, cols, stream);
}

void launch_transform_backward(const std::string& op, const Transform& t, const float* probs,
                               const float* grad_probs, float* grad_scores, std::size_t rows, std::size_t cols,
                               cudaStream_t stream) {
  const double alpha = t.tsallis_alpha();  // top-k: softmax's backward on its kept entries
  if (alpha == 1.0)
    return launch_backward<Weight::prob>(op, probs, grad_probs, grad_scores, rows, cols, 0.0, stream);
  if (alpha == 2.0)
    return launch_backward<Weight::support>(op, probs, grad_probs, grad_scores, rows, cols, 0.0, stream);
  if (alpha == 1.5)
    return launch_backward<Weight::sqrt_prob>(op, probs, grad_probs, grad_scores, rows, cols, 0.0, stream);
  launch_backward<Weight::power>(op, probs, grad_probs, grad_scores, rows, cols, 2.0 - alpha, stream);
}

void run_forward(const Transform& t, const float* scores, float* probs, std::size_t rows, std::size_t cols,
                 const std::uint8_t* mask, cudaStream_t stream, bool scan) {
  const std::string op = checked_op(t, false);
  check_sizes(op, "scores", rows, cols);
  if (rows == 0) return;
  detail::check_device_pointer(scores, op.c_str(), "scores", false);
  detail::check_device_pointer(probs, op.c_str(), "probs", false);
  if (mask != nullptr) detail::check_device_pointer(mask, op.c_str(), "mask", false);
  if (scan) check_values(op, "scores", scores, mask, rows, cols, true, stream);
  launch_transform_forward(op, t, scores, probs, mask, rows, cols, stream);
}

void run_backward(const Transform& t, const float* probs, const float* grad_probs, float* grad_scores,
                  std::size_t rows, std::size_t cols, cudaStream_t stream, bool scan) {
  const std::string op = checked_op(t, true);
  check_sizes(op, "probs", rows, cols);
  if (rows == 0) return;
  detail::check_device_pointer(probs, op.c_str(), "probs", false);
  detail::check_device_pointer(grad_probs, op.c_str(), "grad_probs", false);
  detail::check_device_pointer(grad_scores, op.c_str(), "grad_scores", false);
  if (scan) check_values(op, "grad_probs", grad_probs, nullptr, rows, cols, false, stream);
  launch_transform_backward(op, t, probs, grad_probs, grad_scores, rows, cols, stream);
}

// What the device cannot do (the core has checked everything else).
void check_capacity(const char* op, const Transform& t, std::size_t cols) {
  if (!supported(t.kind))
    throw Error(std::string(op) + ": " + t.name() + " needs extra inputs; device cuda has no kernel for it");
  if (cols > kMaxCols)
    throw Error(std::string(op) + ": rows are too long for device cuda (got n = " + std::to_string(cols) +
                ", expected n <= " + std::to_string(kMaxCols) + ")");
}

}  // namespace

void transform_forward(const Transform& t, const float* scores, float* probs, std::size_t rows, std::size_t cols,
                       const std::uint8_t* mask, cudaStream_t stream) {
  run_forward(t, scores, probs, rows, cols, mask, stream, true);
}

void transform_forward_unchecked(const Transform& t, const float* scores, float* probs, std::size_t rows,
                                 std::size_t cols, const std::uint8_t* mask, cudaStream_t stream) {
  run_forward(t, scores, probs, rows, cols, mask, stream, false);
}

void transform_backward(const Transform& t, const float* probs, const float* grad_probs, float* grad_scores,
                        std::size_t rows, std::size_t cols, cudaStream_t stream) {
  run_backward(t, probs, grad_probs, grad_scores, rows, cols, stream, true);
}

void transform_backward_unchecked(const Transform& t, const float* probs, const float* grad_probs,
                                  float* grad_scores, std::size_t rows, std::size_t cols, cudaStream_t stream) {
  run_backward(t, probs, grad_probs, grad_scores, rows, cols, stream, false);
}

namespace detail {

void host_transform_forward(const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs, MaskView mask) {
  check_capacity("transform_forward", t, scores.cols);
  if (scores.rows == 0) return;
  const DeviceArray<float> d_scores = upload(scores, "transform_forward: uploading scores");
  DeviceArray<float> d_probs(scores.rows * scores.cols, "transform_forward: probs");
  DeviceArray<std::uint8_t> d_mask;
  if (!mask.empty()) d_mask = upload(mask, "transform_forward: uploading mask");
  launch_transform_forward("transform_forward", t, d_scores.data(), d_probs.data(),
                           mask.empty() ? nullptr : d_mask.data(), scores.rows, scores.cols, nullptr);
  download(d_probs, probs, "transform_forward: downloading probs");
}

void host_transform_backward(const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                             MatrixView<float> grad_scores) {
  check_capacity("transform_backward", t, probs.cols);
  if (probs.rows == 0) return;
  const DeviceArray<float> d_probs = upload(probs, "transform_backward: uploading probs");
  const DeviceArray<float> d_grad = upload(grad_probs, "transform_backward: uploading grad_probs");
  DeviceArray<float> d_out(probs.rows * probs.cols, "transform_backward: grad_scores");
  launch_transform_backward("transform_backward", t, d_probs.data(), d_grad.data(), d_out.data(), probs.rows,
                            probs.cols, nullptr);
  download(d_out, grad_scores, "transform_backward: downloading grad_scores");
}

}  // namespace detail

}  // namespace entgraph::cuda
