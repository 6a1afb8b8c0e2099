// entgraph: the Routing Transformer's predictor (Roy et al. 2021, "Efficient
// content-based sparse attention with routing transformers"): fit clusters
// the L2-normalised queries and keys of each head by spherical k-means
// (training/kmeans.hpp); predict routes each query and key to the centroids
// for which it is among the top ceil(n / c) by dot product (every centroid
// takes the same number of rows), and a query and a key routed to the same
// centroid are an edge.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/training/kmeans.hpp"
#include "io/capture_context.hpp"
#include "predictors/parameter_json.hpp"
#include "predictors/registry.hpp"
#include "runtime/random.hpp"
#include "training/normalised_rows.hpp"

namespace entgraph::detail {
namespace {

// Per (layer, head): spherical k-means (kmeans() with
// KMeansGeometry::spherical, one restart) over the queries and keys of
// every sequence.
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

  void check_fit_settings(const Capture& capture) const override { check_clusters("routing", clusters_, capture); }

  // The centroids (clusters x head_dim per head); the work, per head, is
  // k-means++ seeding (a pass over the points per centroid) and each Lloyd
  // iteration (every point against every centroid, and the new means).
  FitSize fit_size(const Capture& capture) const override {
    const double heads = static_cast<double>(capture.layers) * static_cast<double>(capture.heads);
    const double d = static_cast<double>(capture.head_dim), k = static_cast<double>(clusters_);
    const double n = static_cast<double>(cluster_points(capture));
    return {static_cast<std::uint64_t>(heads * k * d), heads * static_cast<double>(iterations_ + 2) * n * k * d};
  }

  void fit_parameters(const Capture& capture, const FitOptions&) override {
    if (capture.layers == 0 || capture.heads == 0 || capture.head_dim == 0 || capture.lengths.empty())
      throw Error("routing: fit: the capture is empty (layers, heads, head_dim and lengths must be >= 1)");
    const std::size_t d = capture.head_dim;
    KMeansOptions options;
    options.geometry = KMeansGeometry::spherical;
    options.clusters = clusters_;
    options.restarts = 1;
    options.iterations = iterations_;
    options.tolerance = 0.0;  // until no assignment changes, or `iterations`
    std::vector<std::vector<float>> centroids(capture.layers * capture.heads);
    std::vector<float> points;
    for (std::size_t layer = 0; layer < capture.layers; ++layer)
      for (std::size_t head = 0; head < capture.heads; ++head) {
        in_head(capture, layer, head, [&] {
          // The points: queries, then keys, sequence by sequence.
          points.clear();
          for (std::size_t s = 0; s < capture.sequences(); ++s)
            for (MatrixView<const float> v : {capture.queries_of(layer, head, s), capture.keys_of(layer, head, s)})
              for (std::size_t i = 0; i < v.rows; ++i) points.insert(points.end(), v.row(i), v.row(i) + d);
          const std::size_t n = points.size() / d;
          if (n == 0) throw Error("routing: fit: the capture has no tokens");
          options.engine_seed = keyed_seed(kStreamRouting, seed_, layer, head, 0);
          centroids[layer * capture.heads + head] = kmeans({points.data(), n, d}, options).centroids;
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
    if (centroids_.empty()) throw Error("routing: " + at_op("to_json") + "the predictor is not fitted (nothing to save)");
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
    check_keys(parameters, "routing", {"centroids"});
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

std::unique_ptr<Predictor> load_routing(const PredictorSettings& settings, const nlohmann::json& parameters) {
  auto p = std::make_unique<RoutingPredictor>(settings);
  p->load_parameters(parameters);
  return p;
}

}  // namespace

PredictorFactory routing_factory() { return {"routing", create_method<RoutingPredictor>, load_routing}; }

}  // namespace entgraph::detail
