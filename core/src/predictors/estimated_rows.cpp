// The cut of lowrank-threshold on estimated rows (estimated_rows.hpp).
#include "predictors/estimated_rows.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include "entgraph/heads.hpp"
#include "entgraph/transforms.hpp"
#include "kernels/code_scores.hpp"
#include "kernels/matmul_kernels.hpp"
#include "predictors/estimate_range.hpp"
#include "predictors/row_blocks.hpp"
#include "predictors/theta_lower_bound.hpp"
#include "predictors/theta_steps.hpp"
#include "runtime/parallel.hpp"

namespace entgraph::detail {

namespace {

// Each row's largest of every 64 keys of out (rows x keys, stride ldo) into
// group_max (stride ldg), for the estimates that come without them.
void store_group_maxima(const float* out, std::size_t rows, std::size_t keys, std::size_t ldo, float* group_max,
                        std::size_t ldg) {
  const MatmulKernels<float>& mk = matmul_kernels(cpu_isa());
  constexpr std::size_t G = kCodeGroupKeys;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t g = 0; g * G < keys; ++g)
      group_max[i * ldg + g] = mk.max_value(out + i * ldo + g * G, std::min(G, keys - g * G));
}

}  // namespace

QuantizedEstimate::QuantizedEstimate(std::vector<std::int16_t> q, std::vector<std::int16_t> k,
                                     std::vector<double> q_steps, std::vector<double> k_steps, std::size_t r)
    : q_(std::move(q)), k_(std::move(k)), q_steps_(std::move(q_steps)), k_steps_(std::move(k_steps)), r_(r) {
  const std::size_t n = q_steps_.size(), m = k_steps_.size();
  std::int32_t largest = 0;
  for (const auto* codes : {&q_, &k_})
    for (std::int16_t c : *codes) largest = std::max(largest, std::abs(static_cast<std::int32_t>(c)));
  // Both forms: the instruction set is chosen per call.
  if (byte_codes_fit(largest)) {
    k_bytes_ = pack_byte_keys(k_.data(), m, r_);
    k_correction_ = byte_key_corrections(k_.data(), m, r_, largest);
    q_bytes_ = pack_byte_queries(q_.data(), n, r_, largest);
    segment_ = byte_segment_quads(largest);
  }
  k_packed_ = pack_code_keys(k_.data(), m, r_);
  q_packed_ = pack_code_queries(q_.data(), n, r_);
  q_scale_.assign(q_steps_.begin(), q_steps_.end());
  k_scale_.assign(k_steps_.begin(), k_steps_.end());
  scales_in_float_ = std::all_of(q_steps_.begin(), q_steps_.end(), step_scales_in_float) &&
                     std::all_of(k_steps_.begin(), k_steps_.end(), step_scales_in_float);
  const double most = static_cast<double>(largest);
  integers_from_approximation_ = scales_in_float_ && static_cast<double>(r_) * most * most < 0x1p20;
}

void QuantizedEstimate::approximate(std::size_t row0, std::size_t rows, std::size_t keys, float* out,
                                    std::size_t ldo, float* group_max, std::size_t ldg) const {
  if (!scales_in_float_) {  // steps whose float scales may be subnormal or overflow: the exact estimates
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < keys; ++j) out[i * ldo + j] = exact(row0 + i, j, nullptr);
    store_group_maxima(out, rows, keys, ldo, group_max, ldg);
    return;
  }
  const ByteCodeScores bytes = k_bytes_.empty() ? nullptr : fastest_byte_kernels().scores;
  if (bytes != nullptr) {
    const std::size_t quads = (r_ + 3) / 4;
    bytes(q_bytes_.data() + row0 * quads, rows, k_bytes_.data(), k_correction_.data(), quads, segment_, keys,
          q_scale_.data() + row0, k_scale_.data(), out, ldo, group_max, ldg);
    return;
  }
  const std::size_t pairs = (r_ + 1) / 2;
  code_scores_kernel(cpu_isa())(q_packed_.data() + row0 * pairs, rows, k_packed_.data(), pairs, keys,
                                q_scale_.data() + row0, k_scale_.data(), out, ldo, group_max, ldg);
}

float QuantizedEstimate::exact(std::size_t i, std::size_t j, const float* approx_row) const {
  double d = 0.0;
  if (integers_from_approximation_ && approx_row != nullptr) {
    // The approximation is fl(fl(D k_scale) q_scale), within 2^-22.9 |D| of
    // D k_scale q_scale; D is an integer under 2^20, so dividing by the
    // scales' (exact) product and rounding gives D back: the code products
    // without forming them again (r multiply-adds and a horizontal sum).
    const double unit = static_cast<double>(q_scale_[i]) * static_cast<double>(k_scale_[j]);
    d = unit > 0.0 ? nearest_integer(static_cast<double>(approx_row[j]) / unit) : 0.0;
  } else {
    d = static_cast<double>(code_dot(q_.data() + i * r_, k_.data() + j * r_, r_));
  }
  return static_cast<float>(d * q_steps_[i] * k_steps_[j]);
}

double QuantizedEstimate::exact_many(std::size_t i, const std::uint32_t* idx, std::size_t count,
                                     const float* approx_row, double* out) const {
  double top = -std::numeric_limits<double>::infinity();
  for (std::size_t c = 0; c < count; ++c) {
    out[c] = QuantizedEstimate::exact(i, idx[c], approx_row);  // a direct call, not a virtual one
    top = std::max(top, out[c]);
  }
  return top;
}

// float(D) is exact (|D| < 2^24); the approximation then rounds the two
// steps to float and multiplies twice in float (4 roundings of 2^-24), the
// exact value rounds once: within 5 · 2^-24 of each other, relative. 2^-20
// leaves room.
double QuantizedEstimate::relative_error() const { return std::ldexp(1.0, -20); }

FloatEstimate::FloatEstimate(std::vector<float> q, std::vector<float> k, std::size_t r)
    : q_(std::move(q)), r_(r), m_(r == 0 ? 0 : k.size() / r) {
  kt_.resize(r_ * m_);  // Kᵀ: each block of rows is one GEMM
  for (std::size_t j = 0; j < m_; ++j)
    for (std::size_t c = 0; c < r_; ++c) kt_[c * m_ + j] = k[j * r_ + c];
}

void FloatEstimate::approximate(std::size_t row0, std::size_t rows, std::size_t keys, float* out,
                                std::size_t ldo, float* group_max, std::size_t ldg) const {
  const MatmulKernels<float>& mk = matmul_kernels(cpu_isa());
  mk.gemm_nn(rows, keys, r_, 1.0f, q_.data() + row0 * r_, r_, kt_.data(), m_, out, ldo, false, false);
  store_group_maxima(out, rows, keys, ldo, group_max, ldg);
}

namespace {

// The largest float not above x.
float float_at_most(double x) {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) > x) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return f;
}

// θ of α-entmax over the estimates `values` (score units: p_j = [(α − 1)(e_j − θ)]₊^(1/(α−1))),
// holding at least every key within 1 / (α − 1) of the largest, top; x and
// e are scratch. floor: a known lower bound of θ (-inf: none), where the
// steps start. With `exact` false a lower bound of θ will do: for α = 1.5
// and sparsemax theta_lower_bound's, without the exact steps.
double entmax_theta(const std::vector<double>& values, double top, double alpha, const Transform& transform,
                    std::vector<double>& x, std::vector<double>& e, std::vector<double>& probs, double floor,
                    bool exact) {
  const double am1 = alpha - 1.0;
  double tau = std::max(-1.0, am1 * (floor - top));
  if (alpha <= 2.0) {  // the steps work on x = (α − 1)(e − max e)
    x.resize(values.size());
    for (std::size_t j = 0; j < values.size(); ++j) x[j] = am1 * (values[j] - top);
    tau = theta_lower_bound(x.data(), x.size(), alpha, tau);
    if (!exact && theta_lower_bound_applies(alpha)) return top + tau / am1;
    const theta_steps::Result r = theta_steps::steps(x.data(), x.size(), alpha, tau);
    if (r.solved) return top + r.tau / am1;
    tau = r.tau;
  }
  // Other α: the keys above the last bound through the float64 transform,
  // θ from the largest weight (p = ((α − 1)(e − θ))^(1/(α−1))).
  e.clear();
  for (double v : values)
    if (am1 * (v - top) > tau) e.push_back(v);
  probs.resize(e.size());
  transform_forward<double>(transform, {e.data(), 1, e.size()}, {probs.data(), 1, e.size()});
  const std::size_t best = static_cast<std::size_t>(std::max_element(probs.begin(), probs.end()) - probs.begin());
  return e[best] - std::pow(probs[best], am1) / am1;
}

}  // namespace

Graph cut_estimated_rows(const EstimatedScores& estimate, std::size_t n, std::size_t m, bool causal, double alpha,
                         double margin) {
  const double reach_of_support = 1.0 / (alpha - 1.0), reach = margin * reach_of_support;
  // How far an approximate estimate may be from the exact one (with an
  // absolute floor below which relative bounds fail: subnormals).
  const double rel = estimate.relative_error(), floor = rel > 0.0 ? 1e-30 : 0.0;
  auto slack = [&](double x) { return 4.0 * rel * std::fabs(x) + floor; };
  const Transform transform = Transform::for_alpha(alpha);
  const MatmulKernels<float>& mk = matmul_kernels(cpu_isa());
  constexpr std::size_t kBlock = kCutBlockRows, G = kSelectGroup;
  static_assert(G == kCodeGroupKeys);
  const std::size_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<std::vector<std::uint32_t>> block_edges(blocks);
  std::vector<std::size_t> degree(n, 0);
  parallel_for(blocks, 1, [&](std::size_t b0, std::size_t b1) {
    std::vector<float> approx, block_max, group_max;
    std::vector<std::uint32_t> idx;
    std::vector<double> values, scaled, transform_in, probs, bound_values;
    for (std::size_t b = b0; b < b1; ++b) {
      const std::size_t r0 = b * kBlock, rows = std::min(kBlock, n - r0);
      const std::size_t keys = causal ? causal_key_limit(r0 + rows - 1, n, m) : m;
      if (keys == 0) continue;
      const std::size_t groups = (keys + G - 1) / G;
      approx.resize(rows * keys);
      block_max.resize(rows * groups);
      estimate.approximate(r0, rows, keys, approx.data(), keys, block_max.data(), groups);
      std::vector<std::uint32_t>& edges = block_edges[b];
      for (std::size_t i = 0; i < rows; ++i) {
        const std::size_t row = r0 + i, visible = causal ? causal_key_limit(row, n, m) : m;
        if (visible == 0) continue;
        const std::size_t row_start = edges.size();
        const float* a = approx.data() + i * keys;
        // The groups of the row's visible keys; a causal row may end inside
        // its last group.
        group_max.assign(block_max.begin() + i * groups, block_max.begin() + i * groups + (visible + G - 1) / G);
        if (visible % G != 0 && visible < keys)
          group_max.back() = mk.max_value(a + visible / G * G, visible % G);
        // Candidates: keys whose exact estimate can clear a lower bound of θ,
        // the threshold of the groups' maxima lowered by the approximation's
        // error (a subset's threshold, with lower values, is below the
        // row's), lowered again by the approximation's error and the solve's
        // rounding (relative to the largest estimate: θ may be near 0).
        bound_values.resize(group_max.size());
        double top = 0.0, top_bound = -std::numeric_limits<double>::infinity();
        for (std::size_t g = 0; g < group_max.size(); ++g) {
          bound_values[g] = static_cast<double>(group_max[g]) - slack(group_max[g]);
          top = std::max(top, std::fabs(static_cast<double>(group_max[g])));
          top_bound = std::max(top_bound, bound_values[g]);
        }
        const double subset_theta = entmax_theta(bound_values, top_bound, alpha, transform, scaled, transform_in, probs,
                                                 -std::numeric_limits<double>::infinity(), false);
        const double floor_theta = subset_theta - slack(std::max(std::fabs(subset_theta), top)) - 1e-12 * top;
        const float floor_candidates = float_at_most(floor_theta);
        idx.resize(visible);
        const std::size_t count = mk.select_above(a, group_max.data(), 0, visible, floor_candidates,
                                                  std::numeric_limits<float>::infinity(), idx.data());
        values.resize(count);
        const double top_value = estimate.exact_many(row, idx.data(), count, a, values.data());
        const double theta =
            entmax_theta(values, top_value, alpha, transform, scaled, transform_in, probs, floor_theta, true);
        const double cut = theta - reach, sure = cut + slack(cut);
        // The keys near or above the cut: among the candidates when the cut is
        // above their floor (margin >= 0), else a new scan.
        const float floor_cut = float_at_most(cut - slack(cut));
        // The approximation decides far from the cut, the exact estimate near
        // it (the candidates' are in values).
        if (floor_cut >= floor_candidates) {  // without a branch: a candidate is an edge or not at random
          edges.resize(row_start + count);
          std::uint32_t* kept = edges.data() + row_start;
          std::size_t n_kept = 0;
          for (std::size_t c = 0; c < count; ++c) {
            const std::uint32_t j = idx[c];
            const bool edge = (a[j] > floor_cut) & ((static_cast<double>(a[j]) > sure) | (values[c] > cut));
            kept[n_kept] = j;
            n_kept += edge ? 1 : 0;
          }
          edges.resize(row_start + n_kept);
        } else {
          const std::size_t near = mk.select_above(a, group_max.data(), 0, visible, floor_cut,
                                                   std::numeric_limits<float>::infinity(), idx.data());
          for (std::size_t c = 0; c < near; ++c) {
            const std::uint32_t j = idx[c];
            if (static_cast<double>(a[j]) > sure || static_cast<double>(estimate.exact(row, j, a)) > cut)
              edges.push_back(j);
          }
        }
        degree[row] = edges.size() - row_start;
      }
    }
  });
  return join_row_blocks(n, m, degree, block_edges);
}

}  // namespace entgraph::detail
