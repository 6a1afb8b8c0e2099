// The range of lowrank-threshold's estimated scores (estimated_rows.hpp):
// the check every backend makes on the projections before it estimates, so
// that hostile but finite q and k get one clear error everywhere, and the
// range in which float scales approximate the exact estimates closely.
// Header-only: the CUDA backend (native/cuda/src/lowrank_threshold.cu)
// compiles the same decisions.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>

#include "entgraph/error.hpp"
#include "runtime/numbers.hpp"

namespace entgraph::detail {

// Estimates stay below this magnitude: finite floats with room to spare
// (a float GEMM of r products, or float(D q_step k_step), cannot overflow).
inline constexpr double kEstimateLimit = 0x1p126;

// Throws entgraph::Error (bad_value), naming `method`, when a projected row
// overflowed float32 (its step is not finite: "q's projection overflows
// float32 at row i") or when an estimate may not be a finite float:
// r * (max q step * levels) * (max k step * levels) >= kEstimateLimit, the
// bound of |D q_step k_step| over all pairs (|codes| <= levels). Steps are
// each projected row's largest |entry| / levels (levels = 1: the entries'
// largest magnitude itself, for the float estimate).
inline void check_estimate_range(const char* method, const double* q_steps, std::size_t n, const double* k_steps,
                                 std::size_t m, std::size_t r, double levels) {
  double top[2] = {0.0, 0.0};
  for (int s = 0; s < 2; ++s) {
    const double* steps = s == 0 ? q_steps : k_steps;
    for (std::size_t i = 0; i < (s == 0 ? n : m); ++i) {
      if (!std::isfinite(steps[i]))
        throw Error(std::string(method) + ": predict: " + (s == 0 ? "q" : "k") +
                        "'s projection overflows float32 at row " + std::to_string(i) + "; scale it down",
                    ErrorCode::bad_value);
      top[s] = std::fmax(top[s], steps[i] * levels);
    }
  }
  const double bound = static_cast<double>(r) * top[0] * top[1];
  if (!(bound < kEstimateLimit))
    throw Error(std::string(method) + ": predict: the estimated scores of q and k may overflow float32 (up to " +
                    number_text(bound) + " = r x largest |projected q| x largest |projected k|, limit 2^126); scale " +
                    "q or k down",
                ErrorCode::bad_value);
}

// Whether a float scale of this step keeps the approximation
// float(D) * k_scale * q_scale within 2^-21 of the exact estimate (relative)
// for |D| < 2^22: 0 (its codes are 0, and so are both values) or in
// [2^-60, 2^40], so that the scales and every partial product of two such
// steps are normal floats. Outside it the exact estimate must decide.
inline bool step_scales_in_float(double step) { return step == 0.0 || (step >= 0x1p-60 && step <= 0x1p40); }

}  // namespace entgraph::detail
