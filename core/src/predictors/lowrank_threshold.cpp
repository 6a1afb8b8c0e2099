// entgraph: the lowrank-threshold predictor. The gold graph of an α-entmax
// head is {j : s_ij > θ_i}, θ_i the row's own threshold; Sparsefinder's
// methods replace the row's threshold by one global distance, which is what
// caps their recall. This predictor keeps the row's threshold and only
// estimates the scores:
//
//   ŝ_ij = (q_i W_Q) · (k_j W_K),  W_Q, W_K ∈ R^{d x r},
//   edge iff ŝ_ij > θ̂_i − margin / (α − 1),
//
// θ̂_i the α-entmax threshold of the estimated row (so each query keeps as
// many keys as its estimated scores support), margin in units of the
// support's reach 1 / (α − 1) (0: the support of the estimated row).
//
// The estimate is compressed two ways: rank (r < d) and precision (`bits`:
// each projected vector rounded to signed integers of that many bits with
// its own step). Rank alone fails on rotary heads, whose score energy is
// spread over every dimension (a rank-8 fit holds 40-70 % of it on the long
// teacher); low-bit codes of all d dimensions keep it. Hence the default:
// r = d (r = 0), 6 bits (the byte kernels multiply 6-bit codes at about
// the cost of 4-bit ones, and find 0.97 of the long teacher's graph at 8192
// bytes where 4 bits find 0.86: docs/PREDICTORS.md), with r at most
// kMaxRank = 256 (the largest r the setting takes and a parameter file
// holds): on a head_dim above 256 the default is r = 256.
//
// Fit, per head, in closed form: the rank-r bilinear form closest to the
// scores in least squares over all (query, key) pairs of the capture,
//   min ‖Q A Kᵀ − Q Kᵀ‖_F over rank(A) ≤ r,
// is A = C_Q^{-1/2} U_r Σ_r V_rᵀ C_K^{-1/2}, with C_Q = QᵀQ, C_K = KᵀK and
// U Σ Vᵀ the SVD of C_Q^{1/2} C_K^{1/2} (substitute B = C_Q^{1/2} A C_K^{1/2}
// and apply Eckart–Young). No iterations, no seed: the fit is deterministic
// and takes milliseconds. The head's scale is folded into W_Q. At r = d the
// projected vectors are the queries and keys in the basis of the singular
// vectors, ordered by their share of the scores.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "entgraph/backend.hpp"
#include "entgraph/error.hpp"
#include "entgraph/heads.hpp"
#include "entgraph/training/projection.hpp"
#include "entgraph/transforms.hpp"
#include "io/capture_context.hpp"
#include "predictors/estimate_range.hpp"
#include "predictors/estimated_rows.hpp"
#include "predictors/parameter_json.hpp"
#include "predictors/registry.hpp"
#include "runtime/cpu_clones.hpp"
#include "runtime/parallel.hpp"
#include "training/symmetric_eigen.hpp"

namespace entgraph::detail {
namespace {

constexpr const char* kMethod = "lowrank-threshold";
// The largest r: the setting's range, the default's cap and the file's limit.
constexpr std::size_t kMaxRank = 256;

// C^{1/2} and its pseudo-inverse C^{-1/2} (d x d) of a covariance; directions
// with eigenvalue below 1e-12 of the largest carry no data and get 0 in both.
void square_roots(const std::vector<double>& c, std::size_t d, std::vector<double>& root,
                  std::vector<double>& inverse_root) {
  const SymmetricEigen e = symmetric_eigen(c, d);
  const double floor = 1e-12 * std::max(e.values.empty() ? 0.0 : e.values[0], 0.0);
  root.assign(d * d, 0.0);
  inverse_root.assign(d * d, 0.0);
  for (std::size_t k = 0; k < d; ++k) {
    if (!(e.values[k] > floor)) continue;
    const double s = std::sqrt(e.values[k]), inv = 1.0 / s;
    for (std::size_t x = 0; x < d; ++x)
      for (std::size_t y = 0; y < d; ++y) {
        const double vv = e.vectors[x * d + k] * e.vectors[y * d + k];
        root[x * d + y] += s * vv;
        inverse_root[x * d + y] += inv * vv;
      }
  }
}

// W_Q and W_K of one head from the covariances of its scaled queries and its
// keys; W_Q then takes the scale, so that it applies to raw queries.
Projection fit_head(const std::vector<double>& cq, const std::vector<double>& ck, double scale, std::size_t d,
                    std::size_t r) {
  std::vector<double> cq_root, cq_inv, ck_root, ck_inv;
  square_roots(cq, d, cq_root, cq_inv);
  square_roots(ck, d, ck_root, ck_inv);
  std::vector<double> m(d * d, 0.0), mtm(d * d, 0.0);  // M = C_Q^{1/2} C_K^{1/2}, then MᵀM
  for (std::size_t x = 0; x < d; ++x)
    for (std::size_t z = 0; z < d; ++z)
      for (std::size_t y = 0; y < d; ++y) m[x * d + y] += cq_root[x * d + z] * ck_root[z * d + y];
  for (std::size_t x = 0; x < d; ++x)
    for (std::size_t y = 0; y < d; ++y)
      for (std::size_t z = 0; z < d; ++z) mtm[x * d + y] += m[z * d + x] * m[z * d + y];
  const SymmetricEigen e = symmetric_eigen(mtm, d);  // V and Σ²
  Projection p;
  p.dim = d;
  p.rank = r;
  p.wq.assign(d * r, 0.0f);
  p.wk.assign(d * r, 0.0f);
  std::vector<double> u(d), v(d);
  for (std::size_t c = 0; c < r && c < d; ++c) {
    const double sigma = std::sqrt(std::max(e.values[c], 0.0));
    if (!(sigma > 1e-12 * std::sqrt(std::max(e.values[0], 0.0)))) break;  // rank of the data reached
    for (std::size_t x = 0; x < d; ++x) v[x] = e.vectors[x * d + c];
    for (std::size_t x = 0; x < d; ++x) {  // u = M v / σ
      double s = 0.0;
      for (std::size_t y = 0; y < d; ++y) s += m[x * d + y] * v[y];
      u[x] = s / sigma;
    }
    const double w = std::sqrt(sigma);
    for (std::size_t x = 0; x < d; ++x) {
      double wq = 0.0, wk = 0.0;
      for (std::size_t y = 0; y < d; ++y) {
        wq += cq_inv[x * d + y] * u[y];
        wk += ck_inv[x * d + y] * v[y];
      }
      p.wq[x * r + c] = static_cast<float>(scale * wq * w);
      p.wk[x * r + c] = static_cast<float>(wk * w);
    }
  }
  return p;
}

// Whether x[0, n) is finite: its exponent bits are not all ones, in one
// integer reduction without a branch (vectorised; the caller looks for the
// culprit only when there is one).
bool row_finite(const float* x, std::size_t n) {
  std::uint32_t worst = 0;
  for (std::size_t c = 0; c < n; ++c) {
    std::uint32_t bits;
    std::memcpy(&bits, x + c, sizeof bits);
    worst |= (bits & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
  }
  return worst == 0;
}

// Each row's step: its largest |entry| / levels (v is rows x r, finite).
// The largest magnitude of floats is the largest of their bits without
// the sign (an integer maximum, vectorised), exact as a double.
ENTGRAPH_CPU_CLONES void row_steps(const float* v, std::size_t rows, std::size_t r, double levels, double* steps) {
  for (std::size_t i = 0; i < rows; ++i) {
    std::uint32_t top = 0;
    for (std::size_t c = 0; c < r; ++c) {
      std::uint32_t bits;
      std::memcpy(&bits, &v[i * r + c], sizeof bits);
      bits &= 0x7fffffffu;
      top = bits > top ? bits : top;
    }
    float largest;
    std::memcpy(&largest, &top, sizeof largest);
    steps[i] = static_cast<double>(largest) / levels;
  }
}

std::vector<double> row_steps(const std::vector<float>& v, std::size_t r, double levels) {
  const std::size_t rows = r == 0 ? 0 : v.size() / r;
  std::vector<double> steps(rows, 0.0);
  row_steps(v.data(), rows, r, levels, steps.data());
  return steps;
}

// std::round for |x| < 2^31, inlined (std::round and std::trunc are libm
// calls on the baseline x86-64 target): the cast truncates exactly, x - t
// is exact, so the comparison with 0.5 decides as std::round does. Without
// a branch (a random sign and fraction mispredict half the time: 6x slower
// per code); t + (-0.0) is t, +0.0 included.
inline double round_half_away(double x) {
  const double t = static_cast<double>(static_cast<std::int32_t>(x));
  return t + std::copysign(static_cast<double>(std::fabs(x - t) >= 0.5), x);
}

// The integer codes round(x / step) of each row x of v (rows x r), finite
// steps; rows of step 0 are zeros. Codes of at most 8 bits over r <= 256
// columns have dot products below 2^24, exact in float32 whatever the
// summation order, so every instruction set finds the same estimate. The
// division and rounding are correctly rounded IEEE operations: the same
// codes from every clone.
ENTGRAPH_CPU_CLONES void to_codes(const float* v, const double* steps, std::size_t rows, std::size_t r,
                                  std::int16_t* codes) {
  for (std::size_t i = 0; i < rows; ++i) {
    const double step = steps[i];
    if (!(step > 0.0)) continue;
    for (std::size_t c = 0; c < r; ++c)
      codes[i * r + c] = static_cast<std::int16_t>(round_half_away(static_cast<double>(v[i * r + c]) / step));
  }
}

std::vector<std::int16_t> to_codes(const std::vector<float>& v, const std::vector<double>& steps, std::size_t r) {
  std::vector<std::int16_t> codes(v.size(), 0);
  to_codes(v.data(), steps.data(), steps.size(), r, codes.data());
  return codes;
}

class LowRankThresholdPredictor final : public Predictor {
 public:
  static std::unique_ptr<Predictor> create(const PredictorSettings& s) {
    SettingsReader reader(kMethod, s);
    auto p = std::unique_ptr<LowRankThresholdPredictor>(new LowRankThresholdPredictor(s, reader));
    reader.finish();
    return p;
  }
  static std::unique_ptr<Predictor> load(const PredictorSettings& s, const json& parameters) {
    auto p = create(s);
    static_cast<LowRankThresholdPredictor&>(*p).load_parameters(parameters);
    return p;
  }

  std::string method() const override { return kMethod; }
  bool learned() const override { return true; }

  // wq and wk (head_dim x r per head) from head_dim x head_dim covariances:
  // per head, the covariances (tokens d^2 / 2 each), then three cyclic Jacobi
  // eigen-decompositions of d x d matrices (each sweep 6 d^3 multiply-adds,
  // about 10 sweeps) and a few d^3 products: measured, at most 0.5 ns per
  // estimated multiply-add at the limit. Once a d x d matrix of doubles
  // outgrows the caches (d > 256: 512 KiB) Jacobi's column walks run at
  // memory speed, several times slower per multiply-add: measured, the fit
  // time then grows as d^4, and the estimate with it.
  FitSize fit_size(const Capture& capture) const override {
    const double heads = static_cast<double>(capture.layers) * static_cast<double>(capture.heads);
    const double d = static_cast<double>(capture.head_dim);
    const double eigen = kEigenCost * d * d * d * std::max(1.0, d / 256.0);
    return {static_cast<std::uint64_t>(heads * 2.0 * d * static_cast<double>(rank_for(capture.head_dim))),
            heads * (static_cast<double>(capture.tokens()) * d * d + eigen)};
  }

  void fit_parameters(const Capture& capture, const FitOptions&) override {
    validate_capture(capture);
    const std::size_t heads = capture.layers * capture.heads, d = capture.head_dim;
    std::vector<Projection> projections(heads);
    std::vector<double> alphas(heads);
    parallel_for(heads, 1, [&](std::size_t begin, std::size_t end) {
      for (std::size_t h = begin; h < end; ++h) {
        const std::size_t layer = h / capture.heads, head = h % capture.heads;
        detail::in_head(capture, layer, head, [&] {
          const HeadSettings& hs = capture.head(layer, head);
          std::vector<double> cq(d * d, 0.0), ck(d * d, 0.0);
          for (std::size_t s = 0; s < capture.sequences(); ++s) {
            for (const auto& [x, c, scale] : {std::tuple{capture.queries_of(layer, head, s), &cq, hs.scale},
                                              std::tuple{capture.keys_of(layer, head, s), &ck, 1.0}})
              for (std::size_t i = 0; i < x.rows; ++i)
                for (std::size_t a = 0; a < d; ++a) {
                  const double xa = scale * static_cast<double>(x(i, a));
                  for (std::size_t b = a; b < d; ++b) (*c)[a * d + b] += xa * scale * static_cast<double>(x(i, b));
                }
          }
          projections[h] = fit_head(cq, ck, hs.scale, d, rank_for(d));
          const double limit = max_projection_entry(d, rank_for(d));
          check_fitted(kMethod, "the projection wq", projections[h].wq, limit, h, capture.heads);
          check_fitted(kMethod, "the projection wk", projections[h].wk, limit, h, capture.heads);
          alphas[h] = hs.alpha;
        });
      }
    });
    layers_ = capture.layers;
    heads_ = capture.heads;
    dim_ = d;
    alphas_ = std::move(alphas);
    projections_ = std::move(projections);
  }

 private:
  LowRankThresholdPredictor(const PredictorSettings& s, SettingsReader& reader) : Predictor(s) {
    rank_ = static_cast<std::size_t>(reader.integer("r", 0, 0, static_cast<long>(kMaxRank)));
    margin_ = reader.number("margin", 0.0, -100.0, 100.0);
    bits_ = static_cast<int>(reader.integer("bits", 6, 0, 8));
    if (bits_ == 1)
      throw Error(std::string(kMethod) + ": setting 'bits': expected 0 (float32) or 2 ... 8 bits, got '1'");
  }

  // The rank the projections have: r, or for r = 0 head_dim up to kMaxRank.
  std::size_t rank_for(std::size_t dim) const { return rank_ == 0 ? std::min(dim, kMaxRank) : rank_; }
  // The eigen work's multiply-adds per d^3 (fit_size): 3 decompositions of
  // about 10 sweeps of 6 d^3, and the products around them.
  static constexpr double kEigenCost = 400.0;

  bool fitted() const { return !projections_.empty(); }

  // The head's projection, after the checks every predict makes.
  const Projection& projection_for(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer,
                                   std::size_t head) const {
    if (!fitted()) throw Error(std::string(kMethod) + ": predict before fit (no learned parameters)");
    if (layer >= layers_ || head >= heads_)
      throw Error(std::string(kMethod) + ": predict: layer " + std::to_string(layer) + ", head " +
                  std::to_string(head) + " out of range (fitted on " + std::to_string(layers_) + " x " +
                  std::to_string(heads_) + ")");
    if (q.cols != dim_ || k.cols != dim_)
      throw Error(std::string(kMethod) + ": predict: rows have " + std::to_string(q.cols) +
                  " columns, fitted on head_dim " + std::to_string(dim_));
    return projections_[layer * heads_ + head];
  }

  bool lowrank_threshold_head(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer,
                              std::size_t head, LowRankThresholdHead& out) const override {
    const Projection& pr = projection_for(q, k, layer, head);
    if (bits_ == 0) return false;  // the float32 estimate's last bits are the CPU's GEMM's
    out.wq = {pr.wq.data(), pr.dim, pr.rank};
    out.wk = {pr.wk.data(), pr.dim, pr.rank};
    out.bits = bits_;
    out.alpha = alphas_[layer * heads_ + head];
    out.margin = margin_;
    return true;
  }

  Graph predict_pattern(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer, std::size_t head,
                        bool causal) const override {
    const Projection& pr = projection_for(q, k, layer, head);
    // The codes are integers: a NaN or infinity has none (and would be
    // undefined behaviour to convert).
    for (const auto& [x, name] : {std::pair{q, "q"}, std::pair{k, "k"}})
      for (std::size_t i = 0; i < x.rows; ++i) {
        if (row_finite(x.row(i), x.cols)) continue;
        for (std::size_t c = 0; c < x.cols; ++c)
          if (!std::isfinite(x(i, c)))
            throw Error(std::string(kMethod) + ": predict: " + name + " has a NaN or infinite value (row " +
                            std::to_string(i) + ", column " + std::to_string(c) + ")",
                        ErrorCode::bad_value);
      }
    const double alpha = alphas_[layer * heads_ + head];
    const std::size_t n = q.rows, m = k.rows, r = pr.rank;
    if (alpha == 1.0) return Graph::full(n, m, causal);  // softmax: every allowed key has weight
    std::vector<float> qp = pr.project_queries(q), kp = pr.project_keys(k);
    // Steps of 1 level for the float estimate: each row's largest |entry|.
    const double levels = bits_ == 0 ? 1.0 : static_cast<double>((1 << (bits_ - 1)) - 1);
    std::vector<double> q_steps = row_steps(qp, r, levels), k_steps = row_steps(kp, r, levels);
    check_estimate_range(kMethod, q_steps.data(), n, k_steps.data(), m, r, levels);
    if (bits_ == 0) return cut_estimated_rows(FloatEstimate(std::move(qp), std::move(kp), r), n, m, causal, alpha, margin_);
    std::vector<std::int16_t> q_codes = to_codes(qp, q_steps, r), k_codes = to_codes(kp, k_steps, r);
    return cut_estimated_rows(
        QuantizedEstimate(std::move(q_codes), std::move(k_codes), std::move(q_steps), std::move(k_steps), r), n, m,
        causal, alpha, margin_);
  }

  std::string parameters_json() const override {
    if (!fitted()) return "{}";
    json p;
    json alpha = json::array();
    for (std::size_t l = 0; l < layers_; ++l) {
      json la = json::array();
      for (std::size_t h = 0; h < heads_; ++h) la.push_back(alphas_[l * heads_ + h]);
      alpha.push_back(std::move(la));
    }
    p["alpha"] = std::move(alpha);
    write_projections(p, projections_, layers_, heads_, dim_, rank_for(dim_));
    return p.dump();
  }

  void load_parameters(const json& p) {
    if (p.empty()) return;  // an unfitted predictor's file
    const std::string m = kMethod;
    check_keys(p, m, {"alpha", "layers", "heads", "head_dim", "r", "wq", "wk"});
    layers_ = read_size(p, m, "layers", 1, 1 << 16);
    heads_ = read_size(p, m, "heads", 1, 1 << 16);
    dim_ = read_size(p, m, "head_dim", 1, 1 << 16);
    const std::size_t rank = read_size(p, m, "r", 1, kMaxRank);
    if (rank != rank_for(dim_))
      bad_field(m, "r", "does not match the setting r = " + std::to_string(rank_) +
                            (rank_ == 0 ? " (min(head_dim " + std::to_string(dim_) + ", " + std::to_string(kMaxRank) + "))" : ""));
    std::vector<double> alphas(layers_ * heads_);
    for_each_head(p, m, "alpha", layers_, heads_, [&](const json& v, const std::string& f, std::size_t i) {
      if (!v.is_number() || !(v.get<double>() >= 1.0) || !(v.get<double>() <= kMaxEntmaxAlpha))
        bad_field(m, f,
                  "expected a number alpha in [1, " + number_text(kMaxEntmaxAlpha) + "] (got " + json_excerpt(v) + ")");
      alphas[i] = v.get<double>();
    });
    projections_ = read_projections(p, m, layers_, heads_, dim_, rank);
    alphas_ = std::move(alphas);
  }

  std::size_t rank_ = 0;  // 0: head_dim
  double margin_ = 0.0;
  int bits_ = 6;  // 0: float32 estimate
  std::size_t layers_ = 0, heads_ = 0, dim_ = 0;
  std::vector<double> alphas_;           // per head, the transform's α at fit time
  std::vector<Projection> projections_;  // layer * heads + head; empty until fitted
};

}  // namespace

const std::vector<PredictorFactory>& score_factories() {
  static const std::vector<PredictorFactory> factories = {
      {kMethod, &LowRankThresholdPredictor::create, &LowRankThresholdPredictor::load, {"margin", "bits"}},
  };
  return factories;
}

}  // namespace entgraph::detail
