// entgraph: Sparsefinder's learned predictors (Treviso et al. 2022, §4.3-4.5):
// a per-head projection to r dimensions (training/projection.hpp), then
//   sparsefinder-distance      edge iff ‖q' − k'‖ ≤ t
//   sparsefinder-quantization  each coordinate cut into B balanced bins (quantiles
//                              learned at fit time); edge iff same bin in some coordinate
//   sparsefinder-kmeans        k-means centroids on projected queries ∪ keys; each
//                              point goes to its `top` nearest; edge iff one is shared
// Parameters (projections, bin edges, centroids) are saved as nested arrays of
// floats, each the shortest decimal that reads back to the same float
// (parameter_json.hpp, write_matrix).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "entgraph/backend.hpp"
#include "entgraph/error.hpp"
#include "entgraph/heads.hpp"
#include "entgraph/training/kmeans.hpp"
#include "entgraph/training/progress.hpp"
#include "entgraph/training/projection.hpp"
#include "io/capture_context.hpp"
#include "predictors/distance_rows.hpp"
#include "predictors/parameter_json.hpp"
#include "predictors/registry.hpp"
#include "runtime/parallel.hpp"
#include "runtime/random.hpp"

namespace entgraph::detail {
namespace {

// The settings read_common() reads: all that the projections depend on.
constexpr const char* kCommonKeys[] = {"r", "epochs", "lr", "batch", "negatives", "margin", "seed"};

// The settings every Sparsefinder method reads (training and the projection).
struct CommonSettings {
  ProjectionOptions projection;
  bool has_seed = false;
};

CommonSettings read_common(SettingsReader& reader, const PredictorSettings& settings) {
  CommonSettings c;
  c.projection.rank = static_cast<std::size_t>(reader.integer("r", 4, 1, 256));
  c.projection.epochs = static_cast<std::size_t>(reader.integer("epochs", 1, 0, 1000));
  c.projection.lr = reader.number("lr", 0.01, 1e-12, 10.0);
  c.projection.batch = static_cast<std::size_t>(reader.integer("batch", 16, 1, 1L << 24));
  c.projection.negatives = static_cast<std::size_t>(reader.integer("negatives", 1, 1, 1000));
  c.projection.margin = reader.number("margin", 1.0, 0.0, 1e6);
  c.projection.seed = static_cast<std::uint64_t>(reader.integer("seed", 0, 0, std::numeric_limits<long>::max()));
  c.has_seed = settings.count("seed") != 0;
  return c;
}

// ---- the shared base ----

class SparsefinderBase : public Predictor {
 public:
  bool learned() const override { return true; }

  // The projections (wq and wk, head_dim x r per head) and their training,
  // plus what the method learns on them (bucket_size). Training computes
  // the gold graphs (the capture's attention: scores and the transform,
  // twice attention_operations), then each epoch takes every gold edge with
  // `negatives` negatives, a triplet costing about 6 d r (three projections
  // and their gradients). The gold edges are not known before that work, so
  // the estimate takes their most, every allowed pair: an upper bound.
  FitSize fit_size(const Capture& capture) const override {
    const ProjectionOptions& po = common_.projection;
    const double heads = static_cast<double>(capture.layers) * static_cast<double>(capture.heads);
    const double d = static_cast<double>(capture.head_dim), r = static_cast<double>(po.rank);
    FitSize size = bucket_size(capture);
    size.parameters += static_cast<std::uint64_t>(heads * 2.0 * d * r);
    size.operations += attention_operations(capture) *
                       (2.0 + static_cast<double>(po.epochs) * static_cast<double>(po.negatives) * 6.0 * r);
    return size;
  }

  void fit_parameters(const Capture& capture, const FitOptions& options) override {
    validate_capture(capture);
    ProjectionOptions po = common_.projection;
    if (!common_.has_seed) po.seed = options.seed;
    po.quiet = options.quiet;
    std::vector<Projection> projections = train_projections(capture, po);
    const double limit = max_projection_entry(capture.head_dim, po.rank);
    for (std::size_t h = 0; h < projections.size(); ++h) {
      check_fitted(method(), "the projection wq", projections[h].wq, limit, h, capture.heads);
      check_fitted(method(), "the projection wk", projections[h].wk, limit, h, capture.heads);
    }
    layers_ = capture.layers;
    heads_ = capture.heads;
    dim_ = capture.head_dim;
    fit_buckets(capture, projections, po.seed, options.quiet);
    projections_ = std::move(projections);
  }

  bool fitted() const { return !projections_.empty(); }

 protected:
  // The projections depend only on the common settings (read_common): a
  // change of the method's own settings alone refits its buckets on them.
  std::unique_ptr<Predictor> refit_changed(const Capture& capture, const PredictorSettings& changes,
                                           const FitOptions& options) const override {
    bool projection_changes = !fitted();
    for (const auto& [key, value] : changes)
      projection_changes = projection_changes || std::find(std::begin(kCommonKeys), std::end(kCommonKeys), key) !=
                                                     std::end(kCommonKeys);
    if (projection_changes) return Predictor::refit_changed(capture, changes, options);
    validate_capture(capture);
    if (capture.layers != layers_ || capture.heads != heads_ || capture.head_dim != dim_)
      throw Error(method() + ": refit: the capture is not the one this predictor was fitted on (other sizes)");
    PredictorSettings merged = settings_;
    for (const auto& [key, value] : changes) merged[key] = value;
    std::unique_ptr<Predictor> p = make_predictor(method(), merged);
    auto& same = static_cast<SparsefinderBase&>(*p);
    same.check_fit_size(capture);
    same.layers_ = layers_;
    same.heads_ = heads_;
    same.dim_ = dim_;
    same.fit_buckets(capture, projections_, common_.has_seed ? common_.projection.seed : options.seed, options.quiet);
    same.projections_ = projections_;
    return p;
  }

 protected:
  SparsefinderBase(const PredictorSettings& settings, SettingsReader& reader)
      : Predictor(settings), common_(read_common(reader, settings)) {}

  // The keys of the method's "parameters": the projections' and its own.
  virtual std::vector<std::string> parameter_keys() const {
    return {"layers", "heads", "head_dim", "r", "wq", "wk"};
  }
  // The size of what fit_buckets learns (nothing for distance).
  virtual FitSize bucket_size(const Capture&) const { return {}; }
  // What each method learns after the projections (nothing for distance).
  virtual void fit_buckets(const Capture&, const std::vector<Projection>&, std::uint64_t, bool) {}
  virtual void buckets_json(json&) const {}
  virtual void load_buckets(const json&) {}

  const Projection& projection_for(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer,
                                   std::size_t head) const {
    if (!fitted()) throw Error(method() + ": predict before fit (no learned parameters)");
    if (layer >= layers_ || head >= heads_)
      throw Error(method() + ": predict: layer " + std::to_string(layer) + ", head " + std::to_string(head) +
                  " out of range (fitted on " + std::to_string(layers_) + " x " + std::to_string(heads_) + ")");
    if (q.cols != dim_ || k.cols != dim_)
      throw Error(method() + ": predict: rows have " + std::to_string(q.cols) + " columns, fitted on " + cpp_name("head_dim") + " " +
                  std::to_string(dim_));
    return projections_[layer * heads_ + head];
  }

  // The head's projections; the method fills in its own part.
  bool sparsefinder_head(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer, std::size_t head,
                         SparsefinderHead& out) const override {
    const Projection& pr = projection_for(q, k, layer, head);
    out.wq = {pr.wq.data(), pr.dim, pr.rank};
    out.wk = {pr.wk.data(), pr.dim, pr.rank};
    method_head(layer * heads_ + head, out);
    return true;
  }
  virtual void method_head(std::size_t index, SparsefinderHead& out) const = 0;

  std::string parameters_json() const override {
    if (!fitted()) return "{}";
    json p;
    write_projections(p, projections_, layers_, heads_, dim_, common_.projection.rank);
    buckets_json(p);
    return p.dump();
  }

 public:
  void load_parameters(const json& p) {
    if (p.empty()) return;  // an unfitted predictor's file
    const std::string m = method();
    const std::size_t r = common_.projection.rank;
    check_keys(p, m, parameter_keys());
    layers_ = read_size(p, m, "layers", 1, 1 << 16);
    heads_ = read_size(p, m, "heads", 1, 1 << 16);
    dim_ = read_size(p, m, "head_dim", 1, 1 << 16);
    if (read_size(p, m, "r", 1, 256) != r)
      bad_field(m, "r", "does not match the setting r = " + std::to_string(r));
    std::vector<Projection> projections = read_projections(p, m, layers_, heads_, dim_, r);
    load_buckets(p);
    projections_ = std::move(projections);
  }

 protected:
  CommonSettings common_;
  std::size_t layers_ = 0, heads_ = 0, dim_ = 0;
  std::vector<Projection> projections_;  // layer * heads + head; empty until fitted
};

// ---- sparsefinder-distance ----

class DistancePredictor final : public SparsefinderBase {
 public:
  static std::unique_ptr<Predictor> create(const PredictorSettings& s) {
    SettingsReader reader("sparsefinder-distance", s);
    auto p = std::unique_ptr<DistancePredictor>(new DistancePredictor(s, reader));
    reader.finish();
    return p;
  }
  static std::unique_ptr<Predictor> load(const PredictorSettings& s, const json& parameters) {
    SettingsReader reader("sparsefinder-distance", s);
    auto p = std::unique_ptr<DistancePredictor>(new DistancePredictor(s, reader));
    reader.finish();
    p->load_parameters(parameters);
    return p;
  }
  std::string method() const override { return "sparsefinder-distance"; }

 private:
  DistancePredictor(const PredictorSettings& s, SettingsReader& reader) : SparsefinderBase(s, reader) {
    threshold_ = reader.number("t", 1.0, 0.0, 1e30);
  }

  // Sparsefinder scans, per query, the keys whose first coordinate lies
  // within t of its own; distance_rows keeps that window as part of the
  // definition and finds the same graph with a float pass over the keys.
  Graph predict_pattern(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer, std::size_t head,
                        bool causal) const override {
    const Projection& pr = projection_for(q, k, layer, head);
    const std::vector<float> qp = pr.project_queries(q), kp = pr.project_keys(k);
    return distance_rows(qp.data(), q.rows, kp.data(), k.rows, pr.rank, threshold_, causal);
  }

  void method_head(std::size_t, SparsefinderHead& out) const override {
    out.method = SparsefinderHead::Method::distance;
    out.threshold = threshold_;
  }

  double threshold_ = 1.0;
};

// ---- sparsefinder-quantization ----

class QuantizationPredictor final : public SparsefinderBase {
 public:
  static std::unique_ptr<Predictor> create(const PredictorSettings& s) {
    SettingsReader reader("sparsefinder-quantization", s);
    auto p = std::unique_ptr<QuantizationPredictor>(new QuantizationPredictor(s, reader));
    reader.finish();
    return p;
  }
  static std::unique_ptr<Predictor> load(const PredictorSettings& s, const json& parameters) {
    SettingsReader reader("sparsefinder-quantization", s);
    auto p = std::unique_ptr<QuantizationPredictor>(new QuantizationPredictor(s, reader));
    reader.finish();
    p->load_parameters(parameters);
    return p;
  }
  std::string method() const override { return "sparsefinder-quantization"; }
  std::vector<std::string> parameter_keys() const override {
    return {"layers", "heads", "head_dim", "r", "wq", "wk", "buckets", "edges"};
  }

 private:
  QuantizationPredictor(const PredictorSettings& s, SettingsReader& reader) : SparsefinderBase(s, reader) {
    bins_ = static_cast<std::size_t>(reader.integer("buckets", 4, 1, 1 << 16));
  }

  FitSize bucket_size(const Capture& capture) const override {
    const double heads = static_cast<double>(capture.layers) * static_cast<double>(capture.heads);
    const double r = static_cast<double>(common_.projection.rank);
    // The edges, and a sort of every projected coordinate.
    return {static_cast<std::uint64_t>(heads * r * static_cast<double>(bins_ - 1)),
            heads * r * 2.0 * static_cast<double>(capture.tokens()) * 32.0};
  }

  // Per head, r x (B - 1) edges: the j/B quantiles (j = 1..B-1) of the
  // projected queries and keys of every sequence, one coordinate at a time.
  void fit_buckets(const Capture& capture, const std::vector<Projection>& projections, std::uint64_t,
                   bool quiet) override {
    const std::size_t heads = capture.layers * capture.heads, r = common_.projection.rank, B = bins_;
    std::vector<std::vector<float>> edges(heads);
    ProgressBar bar("sparsefinder-quantization: bins", heads, quiet);
    parallel_for(heads, 1, [&](std::size_t begin, std::size_t end) {
      for (std::size_t h = begin; h < end; ++h) {
        const std::size_t layer = h / capture.heads, head = h % capture.heads;
        detail::in_head(capture, layer, head, [&] {
          std::vector<std::vector<float>> coords(r);
          for (std::size_t s = 0; s < capture.sequences(); ++s) {
            const std::vector<float> qp = projections[h].project_queries(capture.queries_of(layer, head, s));
            const std::vector<float> kp = projections[h].project_keys(capture.keys_of(layer, head, s));
            for (const auto* v : {&qp, &kp})
              for (std::size_t i = 0; i < v->size(); ++i) coords[i % r].push_back((*v)[i]);
          }
          std::vector<float>& e = edges[h];
          e.resize(r * (B - 1));
          for (std::size_t c = 0; c < r; ++c) {
            std::vector<float>& v = coords[c];
            std::sort(v.begin(), v.end());
            for (std::size_t b = 1; b < B; ++b) e[c * (B - 1) + b - 1] = v[std::min(v.size() - 1, b * v.size() / B)];
          }
          check_fitted(method(), "the bin edges", e, max_projected(r), h, capture.heads);
        });
        bar.advance();
      }
    });
    bar.finish();
    edges_ = std::move(edges);
  }

  void buckets_json(json& p) const override {
    p["buckets"] = bins_;
    json all = json::array();
    for (std::size_t l = 0; l < layers_; ++l) {
      json layer = json::array();
      for (std::size_t h = 0; h < heads_; ++h)
        layer.push_back(write_matrix(edges_[l * heads_ + h].data(), common_.projection.rank, bins_ - 1));
      all.push_back(std::move(layer));
    }
    p["edges"] = std::move(all);
  }

  void load_buckets(const json& p) override {
    const std::string m = method();
    if (read_size(p, m, "buckets", 1, 1 << 16) != bins_)
      bad_field(m, "buckets", "does not match the setting buckets = " + std::to_string(bins_));
    std::vector<std::vector<float>> edges(layers_ * heads_);
    for_each_head(p, m, "edges", layers_, heads_, [&](const json& v, const std::string& f, std::size_t i) {
      read_matrix(v, m, f, common_.projection.rank, bins_ - 1, max_projected(common_.projection.rank), edges[i]);
      for (std::size_t c = 0; c < common_.projection.rank; ++c)
        if (!std::is_sorted(edges[i].begin() + static_cast<std::ptrdiff_t>(c * (bins_ - 1)),
                            edges[i].begin() + static_cast<std::ptrdiff_t>((c + 1) * (bins_ - 1))))
          bad_field(m, f + "[" + std::to_string(c) + "]", "bin edges must be ascending");
    });
    edges_ = std::move(edges);
  }

  // Bucket c * B + bin of each coordinate c; bin = number of edges <= x.
  std::vector<std::uint32_t> bucket_ids(const std::vector<float>& points, const std::vector<float>& e) const {
    const std::size_t r = common_.projection.rank, B = bins_;
    std::vector<std::uint32_t> ids(points.size());
    for (std::size_t i = 0; i < points.size(); ++i) {
      const std::size_t c = i % r;
      const float* lo = e.data() + c * (B - 1);
      const auto bin = static_cast<std::size_t>(std::upper_bound(lo, lo + (B - 1), points[i]) - lo);
      ids[i] = static_cast<std::uint32_t>(c * B + bin);
    }
    return ids;
  }

  Graph predict_pattern(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer, std::size_t head,
                        bool) const override {
    const Projection& pr = projection_for(q, k, layer, head);
    const std::size_t r = pr.rank;
    const std::vector<float>& e = edges_[layer * heads_ + head];
    const std::vector<std::uint32_t> qb = bucket_ids(pr.project_queries(q), e);
    const std::vector<std::uint32_t> kb = bucket_ids(pr.project_keys(k), e);
    return Graph::from_buckets({qb.data(), q.rows, r}, {kb.data(), k.rows, r}, r * bins_);
  }

  std::size_t bins_ = 4;
  void method_head(std::size_t index, SparsefinderHead& out) const override {
    out.method = SparsefinderHead::Method::quantization;
    out.edges = {edges_[index].data(), common_.projection.rank, bins_ - 1};
  }

  std::vector<std::vector<float>> edges_;  // per head, r x (B - 1)
};

// ---- sparsefinder-kmeans ----

class KMeansPredictor final : public SparsefinderBase {
 public:
  static std::unique_ptr<Predictor> create(const PredictorSettings& s) {
    SettingsReader reader("sparsefinder-kmeans", s);
    auto p = std::unique_ptr<KMeansPredictor>(new KMeansPredictor(s, reader));
    reader.finish();
    return p;
  }
  static std::unique_ptr<Predictor> load(const PredictorSettings& s, const json& parameters) {
    SettingsReader reader("sparsefinder-kmeans", s);
    auto p = std::unique_ptr<KMeansPredictor>(new KMeansPredictor(s, reader));
    reader.finish();
    p->load_parameters(parameters);
    return p;
  }
  std::string method() const override { return "sparsefinder-kmeans"; }
  std::vector<std::string> parameter_keys() const override {
    return {"layers", "heads", "head_dim", "r", "wq", "wk", "clusters", "centroids"};
  }

 private:
  KMeansPredictor(const PredictorSettings& s, SettingsReader& reader) : SparsefinderBase(s, reader) {
    clusters_ = static_cast<std::size_t>(reader.integer("clusters", 4, 1, 1 << 16));
    top_ = static_cast<std::size_t>(reader.integer("top", 1, 1, 1 << 16));
    restarts_ = static_cast<std::size_t>(reader.integer("restarts", 3, 1, 1000));
    iterations_ = static_cast<std::size_t>(reader.integer("iterations", 20, 0, 100000));
    if (top_ > clusters_)
      throw Error("sparsefinder-kmeans: setting 'top': must be <= clusters (got " + std::to_string(top_) +
                  ", clusters " + std::to_string(clusters_) + ")");
  }

  void check_fit_settings(const Capture& capture) const override {
    check_clusters(method(), clusters_, capture);
  }

  // The centroids; per head and restart, greedy k-means++ (2 + ln k trial
  // passes over the points per centroid) and Lloyd's iterations (every point
  // against every centroid, and with Hamerly's bounds every centroid against
  // every other, k^2 <= k n), over the projected queries and keys.
  FitSize bucket_size(const Capture& capture) const override {
    const double heads = static_cast<double>(capture.layers) * static_cast<double>(capture.heads);
    const double r = static_cast<double>(common_.projection.rank), k = static_cast<double>(clusters_);
    const double n = static_cast<double>(cluster_points(capture));
    const double seeding = 3.0 + std::log(k), lloyd = 2.0 * static_cast<double>(iterations_ + 1);
    return {static_cast<std::uint64_t>(heads * k * r),
            heads * static_cast<double>(restarts_) * n * k * (r + 4.0) * (seeding + lloyd)};
  }

  void fit_buckets(const Capture& capture, const std::vector<Projection>& projections, std::uint64_t seed,
                   bool quiet) override {
    const std::size_t heads = capture.layers * capture.heads, r = common_.projection.rank;
    std::vector<std::vector<float>> centroids(heads);
    ProgressBar bar("sparsefinder-kmeans: clusters", heads, quiet);
    parallel_for(heads, 1, [&](std::size_t begin, std::size_t end) {
      for (std::size_t h = begin; h < end; ++h) {
        const std::size_t layer = h / capture.heads, head = h % capture.heads;
        detail::in_head(capture, layer, head, [&] {
          std::vector<float> points;
          for (std::size_t s = 0; s < capture.sequences(); ++s) {
            const std::vector<float> qp = projections[h].project_queries(capture.queries_of(layer, head, s));
            const std::vector<float> kp = projections[h].project_keys(capture.keys_of(layer, head, s));
            points.insert(points.end(), qp.begin(), qp.end());
            points.insert(points.end(), kp.begin(), kp.end());
          }
          KMeansOptions ko;
          ko.clusters = clusters_;
          ko.restarts = restarts_;
          ko.iterations = iterations_;
          ko.seed = mix_seed(seed, layer, head);
          centroids[h] = kmeans({points.data(), points.size() / r, r}, ko).centroids;
          check_fitted(method(), "the centroids", centroids[h], max_projected(r), h, capture.heads);
        });
        bar.advance();
      }
    });
    bar.finish();
    centroids_ = std::move(centroids);
  }

  void buckets_json(json& p) const override {
    p["clusters"] = clusters_;
    json all = json::array();
    for (std::size_t l = 0; l < layers_; ++l) {
      json layer = json::array();
      for (std::size_t h = 0; h < heads_; ++h)
        layer.push_back(write_matrix(centroids_[l * heads_ + h].data(), clusters_, common_.projection.rank));
      all.push_back(std::move(layer));
    }
    p["centroids"] = std::move(all);
  }

  void load_buckets(const json& p) override {
    const std::string m = method();
    if (read_size(p, m, "clusters", 1, 1 << 16) != clusters_)
      bad_field(m, "clusters", "does not match the setting clusters = " + std::to_string(clusters_));
    std::vector<std::vector<float>> centroids(layers_ * heads_);
    for_each_head(p, m, "centroids", layers_, heads_, [&](const json& v, const std::string& f, std::size_t i) {
      read_matrix(v, m, f, clusters_, common_.projection.rank, max_projected(common_.projection.rank), centroids[i]);
    });
    centroids_ = std::move(centroids);
  }

  Graph predict_pattern(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer, std::size_t head,
                        bool) const override {
    const Projection& pr = projection_for(q, k, layer, head);
    const std::size_t r = pr.rank;
    const std::vector<float>& c = centroids_[layer * heads_ + head];
    const std::vector<float> qp = pr.project_queries(q), kp = pr.project_keys(k);
    const std::vector<std::uint32_t> qb = nearest_centroids({qp.data(), q.rows, r}, c, clusters_, top_);
    const std::vector<std::uint32_t> kb = nearest_centroids({kp.data(), k.rows, r}, c, clusters_, top_);
    return Graph::from_buckets({qb.data(), q.rows, top_}, {kb.data(), k.rows, top_}, clusters_);
  }

  std::size_t clusters_ = 4, top_ = 1, restarts_ = 3, iterations_ = 20;
  void method_head(std::size_t index, SparsefinderHead& out) const override {
    out.method = SparsefinderHead::Method::kmeans;
    out.centroids = {centroids_[index].data(), clusters_, common_.projection.rank};
    out.top = top_;
  }

  std::vector<std::vector<float>> centroids_;  // per head, clusters x r
};

}  // namespace

const std::vector<PredictorFactory>& learned_factories() {
  static const std::vector<PredictorFactory> factories = {
      {"sparsefinder-distance", &DistancePredictor::create, &DistancePredictor::load, {"t"}},
      {"sparsefinder-quantization", &QuantizationPredictor::create, &QuantizationPredictor::load},
      {"sparsefinder-kmeans", &KMeansPredictor::create, &KMeansPredictor::load, {"top"}},
  };
  return factories;
}

}  // namespace entgraph::detail
