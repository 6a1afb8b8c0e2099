// The α-entmax threshold steps of lowrank-threshold's cut
// (estimated_rows.cpp), shared with the CUDA backend's kernel
// (native/cuda/src/lowrank_threshold.cu), so that both solve a row's
// threshold with the same operations in the same order: every rounding is
// an explicit round-to-nearest operation (no fused multiply-add on either
// side), and the sums run in key order.
//
// On x_j = (α − 1)(e_j − max e), the estimates of one row in key order:
// starting from a lower bound tau of the threshold (in x units; -1 at the
// least, which every weight-bearing key clears), each step drops the keys at
// or below tau and either proves the closed form of the keys left (α = 1.5,
// sparsemax) or moves tau up by a Newton step on the convex mass
// Σ (x_j − tau)₊^(1/(α−1)) − 1. For other α, or when rounding stalls the
// steps, the caller finishes from the returned tau.
#pragma once

#include <cmath>
#include <cstddef>

#if defined(__CUDACC__) || defined(ENTGRAPH_CUDA_EMULATOR)
#include <cuda_runtime.h>
#define ENTGRAPH_THETA_STEPS_HD __host__ __device__
#else
#define ENTGRAPH_THETA_STEPS_HD
#endif

namespace entgraph::detail::theta_steps {

// Round-to-nearest double operations, never fused (nvcc contracts a * b + c
// into an FMA unless told not to; the host build targets have no FMA).
ENTGRAPH_THETA_STEPS_HD inline double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
ENTGRAPH_THETA_STEPS_HD inline double sub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
ENTGRAPH_THETA_STEPS_HD inline double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
ENTGRAPH_THETA_STEPS_HD inline double root(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
// Not correctly rounded on either side: for α other than 1.5 and 2 the two
// may differ in the last bits.
ENTGRAPH_THETA_STEPS_HD inline double power(double a, double b) {
#if defined(__CUDA_ARCH__)
  return ::pow(a, b);
#else
  return std::pow(a, b);
#endif
}

struct Result {
  bool solved = false;    // theta_x is the closed form on the keys left
  double tau = -1.0;      // solved: the threshold in x units; else the last lower bound
  std::size_t count = 0;  // the keys left at the front of x, in their order
};

// The steps on x[0 .. count), compacted in place (at most 200 steps).
ENTGRAPH_THETA_STEPS_HD inline Result steps(double* x, std::size_t count, double alpha, double tau) {
  const double am1 = alpha - 1.0;
  for (int step = 0; step < 200 && alpha <= 2.0; ++step) {
    std::size_t kept = 0;
    for (std::size_t j = 0; j < count; ++j) {  // without a branch: half the keys go either way
      const double v = x[j];
      x[kept] = v;
      kept += v > tau ? 1 : 0;
    }
    count = kept;
    const double k = static_cast<double>(count);
    double s1 = 0.0, s2 = 0.0, low = 0.0;
    for (std::size_t j = 0; j < count; ++j) {
      const double v = x[j];
      s1 = add(s1, v);
      s2 = add(s2, mul(v, v));
      low = v < low ? v : low;
    }
    // The closed form on the keys above τ is the threshold when every one of
    // them stays above it (then the mass there is the whole row's mass).
    double closed = tau;
    bool has_closed = false;
    if (alpha == 2.0) {
      closed = sub(s1, 1.0) / k;
      has_closed = true;
    } else if (alpha == 1.5) {
      const double mean = s1 / k, spread = sub(s2, mul(s1, mean));
      const double disc = sub(1.0, spread > 0.0 ? spread : 0.0) / k;
      has_closed = disc >= 0.0;
      if (has_closed) closed = sub(mean, root(disc));
    }
    if (has_closed && closed >= tau && low > closed) return {true, closed, count};
    // Sparsemax: the mean rule on a superset of the support is a lower bound
    // (Michelot). Otherwise a Newton step on the convex mass from below.
    double next = closed;
    if (alpha != 2.0) {
      const double beta = 1.0 / am1;
      double f = -1.0, slope = 0.0;
      for (std::size_t j = 0; j < count; ++j) {
        const double gap = sub(x[j], tau);
        f = add(f, alpha == 1.5 ? mul(gap, gap) : power(gap, beta));
        slope = add(slope, alpha == 1.5 ? mul(2.0, gap) : mul(beta, power(gap, beta - 1.0)));
      }
      next = slope > 0.0 ? add(tau, f / slope) : tau;
    }
    if (!(next > tau)) break;
    tau = next;
  }
  return {false, tau, count};
}

// Where the steps end without a closed form: the threshold by bisection
// on the mass of x[0 .. count) above it, from tau (below the threshold) and
// 0 (at or above it, x <= 0); returns the lower end of the last bracket,
// so a threshold never above the true one, to rounding of the mass. The
// CUDA kernels use it; the CPU ends with its float64 transform instead.
ENTGRAPH_THETA_STEPS_HD inline double bisect(const double* x, std::size_t count, double alpha, double tau) {
  const double beta = 1.0 / (alpha - 1.0);
  double low = tau, high = 0.0;
  for (int it = 0; it < 200 && low < high; ++it) {
    const double mid = 0.5 * (low + high);
    if (!(mid > low && mid < high)) break;
    double mass = 0.0;
    for (std::size_t j = 0; j < count; ++j)
      if (x[j] > mid) mass += power(x[j] - mid, beta);
    (mass >= 1.0 ? low : high) = mid;
  }
  return low;
}

// The threshold of x[0 .. count) (x = (α − 1)(e − max e), so the largest
// is 0), in x units: the steps' closed form or, failing that, bisection.
// x is reordered.
ENTGRAPH_THETA_STEPS_HD inline double solve(double* x, std::size_t count, double alpha) {
  if (alpha <= 2.0) {
    const Result r = steps(x, count, alpha, -1.0);
    return r.solved ? r.tau : bisect(x, r.count, alpha, r.tau);
  }
  return bisect(x, count, alpha, -1.0);
}

}  // namespace entgraph::detail::theta_steps

#undef ENTGRAPH_THETA_STEPS_HD
