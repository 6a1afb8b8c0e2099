// entgraph: the non-learned and clustering predictors (docs/PREDICTORS.md):
//   window, global, longformer, bigbird   fixed patterns over token positions
//   reformer                              LSH by random rotations (Kitaev et al. 2020)
//   routing                               spherical k-means routing (Roy et al. 2021)
//
// Every random draw comes from runtime/random.hpp, from engines seeded by
// keyed_seed of (method, seed, layer, head, row or round), so results do not
// depend on the standard library's distributions (identical in the
// WebAssembly build, up to the last bit of libm's log/cos/sin for reformer).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "io/capture_context.hpp"
#include "predictors/parameter_json.hpp"
#include "predictors/registry.hpp"
#include "runtime/random.hpp"

namespace entgraph::detail {
namespace {

constexpr long kMaxPattern = 1L << 20;  // the bound of extra_window / extra_global too

enum : std::uint64_t { kTagBigBird = 1, kTagReformer = 2, kTagRouting = 3 };

// ---------------------------------------------------------------- helpers

std::uint64_t read_seed(SettingsReader& reader) { return static_cast<std::uint64_t>(reader.integer("seed", 0, 0, LONG_MAX)); }

// Row i of v, L2-normalised, in double (a zero row stays zero).
void normalised_row(MatrixView<const float> v, std::size_t i, double* out) {
  double s = 0.0;
  const float* r = v.row(i);
  for (std::size_t c = 0; c < v.cols; ++c) s += static_cast<double>(r[c]) * r[c];
  const bool ok = s > 0.0 && std::isfinite(s);  // a zero (or NaN) row maps to zero
  const double inv = ok ? 1.0 / std::sqrt(s) : 0.0;
  for (std::size_t c = 0; c < v.cols; ++c) out[c] = ok ? static_cast<double>(r[c]) * inv : 0.0;
}

void reject_parameters(const char* method, const nlohmann::json& parameters) {
  if (!parameters.empty())
    throw Error(std::string(method) + ": parameters: expected an empty object (the method learns nothing), got " +
                json_excerpt(parameters));
}

// ---------------------------------------------------------------- fixed patterns

// window, global, longformer and bigbird: the union of a local window
// (|i - j| <= w, only j <= i under causal), the first g tokens as global
// tokens (they attend to every key, every query attends to them) and r random
// keys per query outside the rest (allowed keys only under causal).
class FixedPatternPredictor : public Predictor {
 public:
  Graph predict_pattern(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer, std::size_t head,
                        bool causal) const override {
    const std::size_t n = q.rows, m = k.rows;
    Graph g = Graph::empty(n, m);
    std::vector<std::uint32_t> row;
    for (std::size_t i = 0; i < n; ++i) {
      if (i < global_) {  // a global query attends to every key
        for (std::size_t j = 0; j < m; ++j) g.indices.push_back(static_cast<std::uint32_t>(j));
        g.offsets[i + 1] = g.indices.size();
        continue;
      }
      const std::size_t gl = std::min(global_, m);  // keys [0, gl) are global
      // The window [lo, hi] (empty when lo > hi).
      std::size_t lo = 0, hi = 0;
      bool has_window = window_ >= 0;
      if (has_window) {
        const std::size_t w = static_cast<std::size_t>(window_);
        lo = i > w ? i - w : 0;
        hi = causal ? i : i + w;
        if (m == 0 || lo > m - 1) has_window = false;
        else hi = std::min(hi, m - 1);
      }
      row.clear();
      for (std::size_t j = 0; j < gl; ++j) row.push_back(static_cast<std::uint32_t>(j));
      if (has_window)
        for (std::size_t j = std::max(lo, gl); j <= hi; ++j) row.push_back(static_cast<std::uint32_t>(j));
      if (random_ > 0) {  // global keys and the window are already in order
        add_random(row, i, gl, has_window, lo, hi, m, causal, layer, head);
        std::sort(row.begin(), row.end());
      }
      g.indices.insert(g.indices.end(), row.begin(), row.end());
      g.offsets[i + 1] = g.indices.size();
    }
    return g;
  }

 protected:
  FixedPatternPredictor(PredictorSettings settings, const char* method, bool window, bool global, bool random)
      : Predictor(std::move(settings)) {
    SettingsReader reader(method, settings_);
    if (window) window_ = reader.integer("window", 3, 0, kMaxPattern);
    if (global) global_ = static_cast<std::size_t>(reader.integer("global", 2, 0, kMaxPattern));
    if (random) {
      random_ = static_cast<std::size_t>(reader.integer("random", 2, 0, kMaxPattern));
      seed_ = read_seed(reader);
    }
    reader.finish();
  }

 private:
  // Appends r distinct keys drawn uniformly (Floyd's algorithm) from the free
  // keys of row i: [gl, M) minus the window, M = m (or i + 1 under causal).
  void add_random(std::vector<std::uint32_t>& row, std::size_t i, std::size_t gl, bool has_window, std::size_t lo,
                  std::size_t hi, std::size_t m, bool causal, std::size_t layer, std::size_t head) const {
    const std::size_t limit = causal ? std::min(m, i + 1) : m;
    if (limit <= gl) return;
    // Free keys: [a0, a1) and [b0, limit).
    std::size_t a0 = gl, a1 = gl, b0 = gl;
    if (has_window) {
      a1 = std::min(std::max(lo, gl), limit);
      b0 = std::max(hi + 1, gl);
    }
    const std::size_t na = a1 - a0, nb = b0 < limit ? limit - b0 : 0, free = na + nb;
    if (free == 0) return;
    auto key_of = [&](std::size_t t) { return static_cast<std::uint32_t>(t < na ? a0 + t : b0 + (t - na)); };
    if (random_ >= free) {
      for (std::size_t t = 0; t < free; ++t) row.push_back(key_of(t));
      return;
    }
    std::mt19937_64 rng(keyed_seed(kTagBigBird, seed_, layer, head, i));
    std::vector<std::size_t> chosen;  // sorted
    chosen.reserve(random_);
    for (std::size_t j = free - random_; j < free; ++j) {
      const std::size_t t = static_cast<std::size_t>(uniform_below_reject_low(rng, j + 1));
      auto at = std::lower_bound(chosen.begin(), chosen.end(), t);
      if (at != chosen.end() && *at == t) {
        chosen.push_back(j);  // j is above everything chosen so far
      } else {
        chosen.insert(at, t);
      }
    }
    for (std::size_t t : chosen) row.push_back(key_of(t));
  }

  long window_ = -1;  // -1: no window
  std::size_t global_ = 0;
  std::size_t random_ = 0;
  std::uint64_t seed_ = 0;
};

class WindowPredictor final : public FixedPatternPredictor {
 public:
  explicit WindowPredictor(PredictorSettings s) : FixedPatternPredictor(std::move(s), "window", true, false, false) {}
  std::string method() const override { return "window"; }
};

class GlobalPredictor final : public FixedPatternPredictor {
 public:
  explicit GlobalPredictor(PredictorSettings s) : FixedPatternPredictor(std::move(s), "global", false, true, false) {}
  std::string method() const override { return "global"; }
};

class LongformerPredictor final : public FixedPatternPredictor {
 public:
  explicit LongformerPredictor(PredictorSettings s)
      : FixedPatternPredictor(std::move(s), "longformer", true, true, false) {}
  std::string method() const override { return "longformer"; }
};

class BigBirdPredictor final : public FixedPatternPredictor {
 public:
  explicit BigBirdPredictor(PredictorSettings s) : FixedPatternPredictor(std::move(s), "bigbird", true, true, true) {}
  std::string method() const override { return "bigbird"; }
};

// ---------------------------------------------------------------- reformer

class ReformerPredictor final : public Predictor {
 public:
  explicit ReformerPredictor(PredictorSettings s) : Predictor(std::move(s)) {
    SettingsReader reader("reformer", settings_);
    const long b = reader.integer("buckets", 8, 2, 1L << 16);
    if (b % 2 != 0)
      throw Error("reformer: setting 'buckets': expected an even integer in [2, 65536], got '" + settings_.at("buckets") +
                  "'");
    buckets_ = static_cast<std::size_t>(b);
    rounds_ = static_cast<std::size_t>(reader.integer("rounds", 2, 1, 64));
    seed_ = read_seed(reader);
    reader.finish();
  }
  std::string method() const override { return "reformer"; }

  Graph predict_pattern(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer, std::size_t head,
                        bool) const override {
    const std::size_t d = q.cols, half = buckets_ / 2;
    std::vector<std::uint32_t> qb(q.rows * rounds_), kb(k.rows * rounds_);
    std::vector<double> rotation(d * half), x(d), y(half);
    for (std::size_t round = 0; round < rounds_; ++round) {
      // R is d x B/2, row-major, Gaussian.
      NormalPairs normal(std::mt19937_64(keyed_seed(kTagReformer, seed_, layer, head, round)));
      for (double& r : rotation) r = normal.next();
      auto hash = [&](MatrixView<const float> v, std::vector<std::uint32_t>& out) {
        for (std::size_t i = 0; i < v.rows; ++i) {
          normalised_row(v, i, x.data());
          std::fill(y.begin(), y.end(), 0.0);
          for (std::size_t c = 0; c < d; ++c) {
            const double xc = x[c];
            const double* rr = rotation.data() + c * half;
            for (std::size_t b = 0; b < half; ++b) y[b] += xc * rr[b];
          }
          // argmax of [y, -y], the first on ties.
          std::size_t best = 0;
          double best_value = y[0];
          for (std::size_t b = 1; b < half; ++b)
            if (y[b] > best_value) best_value = y[b], best = b;
          for (std::size_t b = 0; b < half; ++b)
            if (-y[b] > best_value) best_value = -y[b], best = half + b;
          out[i * rounds_ + round] = static_cast<std::uint32_t>(best + round * buckets_);
        }
      };
      hash(q, qb);
      hash(k, kb);
    }
    return Graph::from_buckets({qb.data(), q.rows, rounds_}, {kb.data(), k.rows, rounds_}, rounds_ * buckets_);
  }

 private:
  std::size_t buckets_ = 8, rounds_ = 2;
  std::uint64_t seed_ = 0;
};

// ---------------------------------------------------------------- routing

// Spherical k-means (plain Lloyd on the unit sphere, k-means++ init) over the
// L2-normalised queries and keys of every sequence, per (layer, head).
class RoutingPredictor final : public Predictor {
 public:
  explicit RoutingPredictor(PredictorSettings s) : Predictor(std::move(s)) {
    SettingsReader reader("routing", settings_);
    clusters_ = static_cast<std::size_t>(reader.integer("clusters", 4, 1, 1L << 16));
    iterations_ = static_cast<std::size_t>(reader.integer("iterations", 10, 0, 1L << 20));
    seed_ = read_seed(reader);
    reader.finish();
  }
  std::string method() const override { return "routing"; }
  bool learned() const override { return true; }

  // The centroids (clusters x head_dim per head) and Lloyd's iterations.
  FitSize fit_size(const Capture& capture) const override {
    const double heads = static_cast<double>(capture.layers) * static_cast<double>(capture.heads);
    const double d = static_cast<double>(capture.head_dim), k = static_cast<double>(clusters_);
    return {static_cast<std::uint64_t>(heads * k * d),
            heads * static_cast<double>(iterations_ + 1) * 2.0 * static_cast<double>(capture.tokens()) * k * d};
  }

  void fit_parameters(const Capture& capture, const FitOptions&) override {
    if (capture.layers == 0 || capture.heads == 0 || capture.head_dim == 0 || capture.lengths.empty())
      throw Error("routing: fit: the capture is empty (layers, heads, head_dim and lengths must be >= 1)");
    const std::size_t d = capture.head_dim, c = clusters_;
    std::vector<std::vector<float>> centroids(capture.layers * capture.heads);
    std::vector<double> points, cent, sums;
    std::vector<std::size_t> assign, counts;
    for (std::size_t layer = 0; layer < capture.layers; ++layer)
      for (std::size_t head = 0; head < capture.heads; ++head) {
        in_head(capture, layer, head, [&] {
          // The points: normalised queries, then keys, sequence by sequence.
          points.clear();
          for (std::size_t s = 0; s < capture.sequences(); ++s)
            for (MatrixView<const float> v : {capture.queries_of(layer, head, s), capture.keys_of(layer, head, s)})
              for (std::size_t i = 0; i < v.rows; ++i) {
                points.resize(points.size() + d);
                normalised_row(v, i, points.data() + points.size() - d);
              }
          const std::size_t N = points.size() / d;
          if (N == 0) throw Error("routing: fit: the capture has no tokens");
          auto point = [&](std::size_t p) { return points.data() + p * d; };
          auto dot = [&](const double* a, const double* b) {
            double s = 0.0;
            for (std::size_t t = 0; t < d; ++t) s += a[t] * b[t];
            return s;
          };
          // k-means++ on squared distances between unit vectors.
          std::mt19937_64 rng(keyed_seed(kTagRouting, seed_, layer, head, 0));
          cent.assign(c * d, 0.0);
          std::vector<double> dist(N, std::numeric_limits<double>::infinity());
          for (std::size_t ci = 0; ci < c; ++ci) {
            std::size_t pick = 0;
            if (ci == 0) {
              pick = static_cast<std::size_t>(uniform_below_reject_low(rng, N));
            } else {
              double total = 0.0;
              for (double v : dist) total += v;
              if (!(total > 0.0)) {
                pick = static_cast<std::size_t>(uniform_below_reject_low(rng, N));
              } else {
                double u = uniform01(rng) * total;
                pick = N - 1;
                for (std::size_t p = 0; p < N; ++p) {
                  if (u < dist[p]) {
                    pick = p;
                    break;
                  }
                  u -= dist[p];
                }
              }
            }
            std::copy(point(pick), point(pick) + d, cent.begin() + static_cast<std::ptrdiff_t>(ci * d));
            const double* cc = cent.data() + ci * d;
            for (std::size_t p = 0; p < N; ++p) {
              double s = 0.0;
              for (std::size_t t = 0; t < d; ++t) s += (point(p)[t] - cc[t]) * (point(p)[t] - cc[t]);
              dist[p] = std::min(dist[p], s);
            }
          }
          // Lloyd: assign to the nearest centroid (largest dot product), move each
          // centroid to its members' normalised mean (an empty cluster stays).
          assign.assign(N, SIZE_MAX);
          for (std::size_t it = 0; it < iterations_; ++it) {
            bool changed = false;
            for (std::size_t p = 0; p < N; ++p) {
              std::size_t best = 0;
              double best_value = -std::numeric_limits<double>::infinity();
              for (std::size_t ci = 0; ci < c; ++ci) {
                const double v = dot(point(p), cent.data() + ci * d);
                if (v > best_value) best_value = v, best = ci;
              }
              if (assign[p] != best) assign[p] = best, changed = true;
            }
            if (!changed) break;
            sums.assign(c * d, 0.0);
            counts.assign(c, 0);
            for (std::size_t p = 0; p < N; ++p) {
              ++counts[assign[p]];
              for (std::size_t t = 0; t < d; ++t) sums[assign[p] * d + t] += point(p)[t];
            }
            for (std::size_t ci = 0; ci < c; ++ci) {
              const double norm = std::sqrt(dot(sums.data() + ci * d, sums.data() + ci * d));
              if (counts[ci] == 0 || !(norm > 0.0)) continue;
              for (std::size_t t = 0; t < d; ++t) cent[ci * d + t] = sums[ci * d + t] / norm;
            }
          }
          std::vector<float>& out = centroids[layer * capture.heads + head];
          out.resize(c * d);
          for (std::size_t t = 0; t < c * d; ++t) out[t] = static_cast<float>(cent[t]);
        });
      }
    layers_ = capture.layers;
    heads_ = capture.heads;
    dim_ = d;
    centroids_ = std::move(centroids);
  }

  Graph predict_pattern(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer, std::size_t head,
                        bool) const override {
    if (centroids_.empty()) throw Error("routing: predict: the predictor is not fitted (call fit or load a file)");
    if (layer >= layers_ || head >= heads_)
      throw Error("routing: predict: layer " + std::to_string(layer) + ", head " + std::to_string(head) +
                  " is outside the fitted " + std::to_string(layers_) + " layers x " + std::to_string(heads_) +
                  " heads");
    if (q.cols != dim_)
      throw Error("routing: predict: q has " + std::to_string(q.cols) + " columns, the centroids " +
                  std::to_string(dim_));
    const std::vector<float>& cent = centroids_[layer * heads_ + head];
    const std::size_t c = clusters_;
    // Each centroid takes its top-ceil(rows / c) points by dot product with
    // the normalised point (ties: the lower index); returns per-point lists.
    auto route = [&](MatrixView<const float> v, std::uint32_t pad, std::vector<std::uint32_t>& table) {
      const std::size_t rows = v.rows, take = (rows + c - 1) / c;
      std::vector<double> scores(rows * c), x(dim_);
      for (std::size_t i = 0; i < rows; ++i) {
        normalised_row(v, i, x.data());
        for (std::size_t ci = 0; ci < c; ++ci) {
          double s = 0.0;
          for (std::size_t t = 0; t < dim_; ++t) s += x[t] * static_cast<double>(cent[ci * dim_ + t]);
          scores[i * c + ci] = std::isnan(s) ? -std::numeric_limits<double>::infinity() : s;
        }
      }
      std::vector<std::vector<std::uint32_t>> lists(rows);
      std::vector<std::uint32_t> order(rows);
      for (std::size_t ci = 0; ci < c && take > 0; ++ci) {
        for (std::size_t i = 0; i < rows; ++i) order[i] = static_cast<std::uint32_t>(i);
        auto better = [&](std::uint32_t a, std::uint32_t b) {
          const double sa = scores[a * c + ci], sb = scores[b * c + ci];
          return sa > sb || (sa == sb && a < b);
        };
        std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take - 1), order.end(), better);
        for (std::size_t t = 0; t < take; ++t) lists[order[t]].push_back(static_cast<std::uint32_t>(ci));
      }
      std::size_t width = 1;
      for (const auto& l : lists) width = std::max(width, l.size());
      table.assign(rows * width, pad);
      for (std::size_t i = 0; i < rows; ++i) std::copy(lists[i].begin(), lists[i].end(), table.begin() + i * width);
      return width;
    };
    std::vector<std::uint32_t> qt, kt;
    const std::size_t qw = route(q, static_cast<std::uint32_t>(c), qt);
    const std::size_t kw = route(k, static_cast<std::uint32_t>(c + 1), kt);
    return Graph::from_buckets({qt.data(), q.rows, qw}, {kt.data(), k.rows, kw}, c + 2);
  }

  std::string parameters_json() const override {
    if (centroids_.empty()) throw Error("routing: to_json: the predictor is not fitted (nothing to save)");
    nlohmann::json layers = nlohmann::json::array();
    for (std::size_t l = 0; l < layers_; ++l) {
      nlohmann::json heads = nlohmann::json::array();
      for (std::size_t h = 0; h < heads_; ++h) {
        heads.push_back(write_matrix(centroids_[l * heads_ + h].data(), clusters_, dim_));
      }
      layers.push_back(std::move(heads));
    }
    nlohmann::json j;
    j["centroids"] = std::move(layers);
    return j.dump();
  }

  // Reads "centroids": [layers][heads][clusters][head_dim] of finite numbers.
  void load_parameters(const nlohmann::json& parameters) {
    const std::string where = "routing: parameters: ";
    for (const auto& [key, value] : parameters.items())
      if (key != "centroids") throw Error(where + "unknown key '" + key + "' (expected centroids)");
    if (!parameters.contains("centroids")) throw Error(where + "missing 'centroids'");
    const nlohmann::json& all = parameters["centroids"];
    if (!all.is_array() || all.empty()) throw Error(where + "'centroids' must be a non-empty [layers][heads][clusters][head_dim] array");
    std::size_t heads = 0, dim = 0;
    std::vector<std::vector<float>> centroids;
    for (std::size_t l = 0; l < all.size(); ++l) {
      const nlohmann::json& hs = all[l];
      const std::string at = "centroids[" + std::to_string(l) + "]";
      if (!hs.is_array() || hs.empty()) throw Error(where + at + " must be a non-empty array of heads");
      if (l == 0) heads = hs.size();
      if (hs.size() != heads)
        throw Error(where + at + " has " + std::to_string(hs.size()) + " heads, expected " + std::to_string(heads));
      for (std::size_t h = 0; h < hs.size(); ++h) {
        const nlohmann::json& cs = hs[h];
        const std::string ath = at + "[" + std::to_string(h) + "]";
        if (!cs.is_array() || cs.size() != clusters_)
          throw Error(where + ath + " must hold clusters = " + std::to_string(clusters_) + " centroids (got " +
                      (cs.is_array() ? std::to_string(cs.size()) : std::string("a non-array")) + ")");
        std::vector<float> flat;
        for (std::size_t ci = 0; ci < cs.size(); ++ci) {
          const nlohmann::json& v = cs[ci];
          const std::string atc = ath + "[" + std::to_string(ci) + "]";
          if (!v.is_array() || v.empty()) throw Error(where + atc + " must be a non-empty array of numbers");
          if (dim == 0) dim = v.size();
          if (v.size() != dim)
            throw Error(where + atc + " has " + std::to_string(v.size()) + " entries, expected head_dim " +
                        std::to_string(dim));
          for (std::size_t e = 0; e < v.size(); ++e) {
            float x = 0;
            if (!to_finite_float(v[e], x))
              throw Error(where + atc + "[" + std::to_string(e) +
                          "] is not a finite number within the float32 range (got " + json_excerpt(v[e]) + ")");
            flat.push_back(x);
          }
        }
        centroids.push_back(std::move(flat));
      }
    }
    layers_ = all.size();
    heads_ = heads;
    dim_ = dim;
    centroids_ = std::move(centroids);
  }

 private:
  std::size_t clusters_ = 4, iterations_ = 10;
  std::uint64_t seed_ = 0;
  std::size_t layers_ = 0, heads_ = 0, dim_ = 0;
  std::vector<std::vector<float>> centroids_;  // [layer * heads + head]: clusters x dim, row-major
};

// ---------------------------------------------------------------- factories

template <class P>
std::unique_ptr<Predictor> create(const PredictorSettings& settings) {
  return std::make_unique<P>(settings);
}

template <class P>
std::unique_ptr<Predictor> load_fixed(const PredictorSettings& settings, const nlohmann::json& parameters) {
  auto p = std::make_unique<P>(settings);
  reject_parameters(p->method().c_str(), parameters);
  return p;
}

std::unique_ptr<Predictor> load_routing(const PredictorSettings& settings, const nlohmann::json& parameters) {
  auto p = std::make_unique<RoutingPredictor>(settings);
  p->load_parameters(parameters);
  return p;
}

}  // namespace

const std::vector<PredictorFactory>& pattern_factories() {
  static const std::vector<PredictorFactory> factories = {
      {"window", create<WindowPredictor>, load_fixed<WindowPredictor>},
      {"global", create<GlobalPredictor>, load_fixed<GlobalPredictor>},
      {"longformer", create<LongformerPredictor>, load_fixed<LongformerPredictor>},
      {"bigbird", create<BigBirdPredictor>, load_fixed<BigBirdPredictor>},
      {"reformer", create<ReformerPredictor>, load_fixed<ReformerPredictor>},
      {"routing", create<RoutingPredictor>, load_routing},
  };
  return factories;
}

}  // namespace entgraph::detail
