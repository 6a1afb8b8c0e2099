// The cut of lowrank-threshold (lowrank_threshold.cpp): each query keeps the
// keys whose estimated score clears its estimated row's own α-entmax
// threshold θ̂ minus a margin,
//   edge (i, j) iff ŝ_ij > θ̂_i − reach,   θ̂_i = ŝ_max − p_max^(α−1) / (α − 1),
// where p_max is the largest α-entmax weight of the estimated row.
//
// Without forming every exact estimate. The estimates come in two
// precisions: approximate ones for whole rows (integer code products scaled
// in float, kernels/code_scores.hpp, within `relative_error` of the exact
// value), and exact ones per pair. θ̂ only depends on the keys within
// 1 / (α − 1) of the row's largest estimate (every other key has weight 0),
// so only those candidates are formed exactly and the threshold is solved in
// double on them; the cut then reads the approximate row in SIMD and forms
// the exact estimate only where the approximation is too close to the cut to
// decide. The exact estimates are the same on every instruction set and in
// WebAssembly (integer products, then IEEE double operations in a fixed
// order), so the graphs are too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "entgraph/graph.hpp"

namespace entgraph::detail {

// A head's estimated scores ŝ_ij, n queries x m keys.
class EstimatedScores {
 public:
  virtual ~EstimatedScores() = default;
  // Approximate estimates of rows [row0, row0 + rows) for keys [0, keys)
  // into out (row stride ldo), and each row's largest of every 64 keys
  // [64 g, 64 g + 64) ∩ [0, keys) into group_max (row stride ldg).
  virtual void approximate(std::size_t row0, std::size_t rows, std::size_t keys, float* out, std::size_t ldo,
                           float* group_max, std::size_t ldg) const = 0;
  // The exact estimate of (i, j); `approx_row` is row i of approximate().
  virtual float exact(std::size_t i, std::size_t j, const float* approx_row) const = 0;
  // exact(i, idx[c], approx_row) for c < count into out, and their largest
  // (-inf for none): one call a row.
  virtual double exact_many(std::size_t i, const std::uint32_t* idx, std::size_t count, const float* approx_row,
                            double* out) const {
    double top = -std::numeric_limits<double>::infinity();
    for (std::size_t c = 0; c < count; ++c) {
      out[c] = exact(i, idx[c], approx_row);
      top = out[c] > top ? out[c] : top;
    }
    return top;
  }
  // A bound on |approximate - exact| relative to |exact| (0: they are equal).
  virtual double relative_error() const = 0;
};

// Quantized codes: ŝ_ij = float((double(D_ij) q_step_i) k_step_j), D_ij the
// integer dot product of the codes (q n x r, k m x r). The approximation
// multiplies byte codes where the instruction set can and the codes fit
// (kernels/code_scores.hpp), else 16-bit codes: the same integers. Where a
// step's float scale would not be close (step_scales_in_float,
// estimate_range.hpp: hostile inputs), the approximation is the exact
// estimate itself, slow but right.
class QuantizedEstimate final : public EstimatedScores {
 public:
  QuantizedEstimate(std::vector<std::int16_t> q, std::vector<std::int16_t> k, std::vector<double> q_steps,
                    std::vector<double> k_steps, std::size_t r);
  void approximate(std::size_t row0, std::size_t rows, std::size_t keys, float* out, std::size_t ldo,
                   float* group_max, std::size_t ldg) const override;
  float exact(std::size_t i, std::size_t j, const float* approx_row) const override;
  double exact_many(std::size_t i, const std::uint32_t* idx, std::size_t count, const float* approx_row,
                    double* out) const override;
  double relative_error() const override;

 private:
  std::vector<std::int16_t> q_, k_, k_packed_;
  std::vector<std::int32_t> q_packed_;
  // The byte form (empty where unused).
  std::vector<std::int8_t> k_bytes_;
  std::vector<std::uint32_t> q_bytes_;
  std::vector<std::int32_t> k_correction_;
  std::size_t segment_ = 0;
  std::vector<double> q_steps_, k_steps_;
  std::vector<float> q_scale_, k_scale_;
  bool scales_in_float_ = true;  // every step's scale approximates within relative_error (estimate_range.hpp)
  // and every product of codes is under 2^20 in magnitude: exact() reads it
  // back from the approximation when given one (estimated_rows.cpp)
  bool integers_from_approximation_ = false;
  std::size_t r_;
};

// Float projections: ŝ = the float GEMM of q (n x r) and k (m x r), whose
// value is the approximate one (the summation order of the instruction set
// in use decides its last bits).
class FloatEstimate final : public EstimatedScores {
 public:
  FloatEstimate(std::vector<float> q, std::vector<float> k, std::size_t r);
  void approximate(std::size_t row0, std::size_t rows, std::size_t keys, float* out, std::size_t ldo,
                   float* group_max, std::size_t ldg) const override;
  float exact(std::size_t, std::size_t j, const float* approx_row) const override { return approx_row[j]; }
  double relative_error() const override { return 0.0; }

 private:
  std::vector<float> q_, kt_;  // kt_: r x m
  std::size_t r_, m_;
};

// Rows per block of the cut: one approximate() call each (a float
// estimate's last bits may depend on the block's shape). 16 rows of 8192
// keys keep the block's estimates in a 512 KiB cache.
inline constexpr std::size_t kCutBlockRows = 16;

// The graph above for α > 1 (α = 1 has no threshold: the caller keeps every
// allowed key). margin in units of 1 / (α − 1). Rows run on the thread pool
// in blocks; the graph does not depend on the thread count.
Graph cut_estimated_rows(const EstimatedScores& estimate, std::size_t n, std::size_t m, bool causal, double alpha,
                         double margin);

}  // namespace entgraph::detail
