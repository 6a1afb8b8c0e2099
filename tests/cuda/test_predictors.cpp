// The predictors' GPU hot paths against the CPU core: projections and
// distances are summed in the CPU's order, so every graph must be equal to
// the CPU's, offsets and indices, not just close.
//
// The CPU references are the core's own functions: Projection::project_*,
// entgraph::nearest_centroids, Graph::from_buckets, compare_graphs, and the
// Sparsefinder predictors themselves, loaded from parameter files with an
// identity projection when the test feeds projected points directly.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "clustered_capture.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/cuda/device_graph.hpp"
#include "entgraph/cuda/predictors.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/model.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "entgraph/training/kmeans.hpp"
#include "entgraph/training/projection.hpp"

namespace entgraph::cuda {
namespace {

using json = nlohmann::json;

const std::vector<std::size_t> kSizes = {1, 33, 256, 2000};
const std::vector<std::size_t> kRanks = {1, 4, 16};

std::vector<float> gaussian(std::size_t count, std::uint64_t seed, double sigma = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, sigma);
  std::vector<float> v(count);
  for (float& x : v) x = static_cast<float>(normal(rng));
  return v;
}

// Values on a grid of step 1/4 in [-range, range]: sums of their squares are
// exact in double, so distance ties (d2 == t^2, equal centroid distances) happen.
std::vector<float> grid_values(std::size_t count, std::uint64_t seed, int range = 2) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> step(-4 * range, 4 * range);
  std::vector<float> v(count);
  for (float& x : v) x = static_cast<float>(step(rng)) * 0.25f;
  return v;
}

std::vector<std::uint32_t> random_buckets(std::size_t count, std::size_t num_buckets, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint32_t> pick(0, static_cast<std::uint32_t>(num_buckets - 1));
  std::vector<std::uint32_t> v(count);
  for (auto& x : v) x = pick(rng);
  return v;
}

// Equal graphs; on a mismatch, the first differing row is shown.
void check_same_graph(const Graph& got, const Graph& want) {
  REQUIRE(got.queries == want.queries);
  REQUIRE(got.keys == want.keys);
  REQUIRE(got.offsets.size() == want.queries + 1);
  CHECK_NOTHROW(got.validate("GPU graph"));
  if (got.offsets == want.offsets && got.indices == want.indices) return;
  for (std::size_t i = 0; i < want.queries; ++i) {
    const std::vector<std::uint32_t> a(got.row_begin(i), got.row_end(i)), b(want.row_begin(i), want.row_end(i));
    if (a != b) {
      CAPTURE(i);
      CAPTURE(a.size());
      CAPTURE(b.size());
      FAIL_CHECK("row " << i << " differs (GPU " << a.size() << " keys, CPU " << b.size() << " keys)");
      break;
    }
  }
  CHECK(got.offsets == want.offsets);
  CHECK(got.indices == want.indices);
}

void check_same_metrics(const GraphMetrics& got, const GraphMetrics& want) {
  CHECK(got.gold == want.gold);
  CHECK(got.predicted == want.predicted);
  CHECK(got.hits == want.hits);
  CHECK(got.allowed == want.allowed);
  CHECK(got.queries == want.queries);
}

// g without the keys the causal mask hides (g itself when not causal).
Graph allowed_part(const Graph& g, bool causal) {
  if (!causal) return g;
  Graph out = Graph::empty(g.queries, g.keys);
  for (std::size_t i = 0; i < g.queries; ++i) {
    const std::size_t limit = causal_key_limit(i, g.queries, g.keys);
    for (const std::uint32_t* p = g.row_begin(i); p != g.row_end(i); ++p)
      if (*p < limit) out.indices.push_back(*p);
    out.offsets[i + 1] = out.indices.size();
  }
  return out;
}

json matrix_json(const std::vector<float>& v, std::size_t rows, std::size_t cols) {
  json m = json::array();
  for (std::size_t i = 0; i < rows; ++i) {
    json row = json::array();
    for (std::size_t j = 0; j < cols; ++j) row.push_back(static_cast<double>(v[i * cols + j]));
    m.push_back(std::move(row));
  }
  return m;
}

std::vector<float> identity(std::size_t r) {
  std::vector<float> v(r * r, 0.0f);
  for (std::size_t i = 0; i < r; ++i) v[i * r + i] = 1.0f;
  return v;
}

// A one-head Sparsefinder predictor whose projection is the identity on r
// dimensions: the CPU's own graph of already projected points (x * 1 + 0s
// summed in double is x again).
std::unique_ptr<Predictor> identity_predictor(const std::string& method, PredictorSettings settings, std::size_t r,
                                              const json& buckets) {
  settings["r"] = std::to_string(r);
  json p = buckets;
  p["layers"] = 1;
  p["heads"] = 1;
  p["head_dim"] = r;
  p["r"] = r;
  p["wq"] = json::array({json::array({matrix_json(identity(r), r, r)})});
  p["wk"] = p["wq"];
  json file = {{"format", "entgraph-predictor"}, {"version", 1}, {"method", method}, {"settings", settings},
               {"parameters", p}};
  return load_predictor(file.dump(), method + " (identity projection)");
}

template <class T>
std::vector<T> downloaded(const DeviceArray<T>& a) {
  std::vector<T> v(a.size());
  a.download(v.data());
  return v;
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("a DeviceGraph round-trips a graph and refuses an invalid one") {
    const std::vector<std::uint32_t> qb = random_buckets(50 * 2, 6, 1), kb = random_buckets(70, 6, 2);
    const Graph g = Graph::from_buckets({qb.data(), 50, 2}, {kb.data(), 70, 1}, 6);
    check_same_graph(DeviceGraph::upload(g).download(), g);
    check_same_graph(DeviceGraph::upload(Graph::empty(3, 0)).download(), Graph::empty(3, 0));
    check_same_graph(DeviceGraph::upload(Graph::empty(0, 5)).download(), Graph::empty(0, 5));
    Graph bad = g;
    bad.indices[0] = 70;  // not below keys
    CHECK_THROWS_WITH_AS(DeviceGraph::upload(bad), doctest::Contains("DeviceGraph::upload"), Error);
  }

  TEST_CASE("projection: equals Projection::project_queries bit for bit") {
    for (std::size_t n : kSizes)
      for (std::size_t d : {1, 16, 64, 70})  // 70: a partial tile of the d loop
        for (std::size_t r : {1, 3, 4, 16}) {
          CAPTURE(n);
          CAPTURE(d);
          CAPTURE(r);
          Projection pr;
          pr.dim = d;
          pr.rank = r;
          pr.wq = gaussian(d * r, 7 + r, 1.0 / std::sqrt(static_cast<double>(d)));
          // Rows of x with a stride wider than d, to check the packing.
          const std::size_t stride = d + 3;
          const std::vector<float> x = gaussian(n * stride, 100 + n + d);
          const MatrixView<const float> xv(x.data(), n, d, stride);
          const std::vector<float> want = pr.project_queries(xv);
          const std::vector<float> got = project(xv, {pr.wq.data(), d, r});
          REQUIRE(got.size() == want.size());
          std::size_t far = 0, different = 0;
          for (std::size_t e = 0; e < want.size(); ++e) {
            if (std::abs(got[e] - want[e]) > 1e-5f * std::max(1.0f, std::abs(want[e]))) ++far;
            if (got[e] != want[e]) ++different;
          }
          CHECK(far == 0);        // the contract: within 1e-5
          CHECK(different == 0);  // and in fact the same double sums, rounded once
        }
  }

  TEST_CASE("projection: bad shapes throw before any work") {
    const std::vector<float> x(12, 1.0f), w(8, 1.0f);
    CHECK_THROWS_WITH_AS(project({x.data(), 3, 4}, {w.data(), 2, 4}), doctest::Contains("cuda::project"), Error);
    CHECK_THROWS_WITH_AS(project({x.data(), 3, 4}, {w.data(), 4, 0}), doctest::Contains("r >= 1"), Error);
    CHECK_THROWS_WITH_AS(project(x.data(), 3, 4, w.data(), 0, nullptr), doctest::Contains("r must be >= 1"), Error);
  }

  TEST_CASE("k-means assignment: the top nearest centroids equal the CPU's, ties to the lower index") {
    for (std::size_t n : kSizes)
      for (std::size_t r : kRanks)
        for (std::size_t clusters : {1, 5, 16})
          for (bool grid : {false, true}) {
            // On the grid, many points are equally far from several
            // centroids, and centroid 1 repeats centroid 0.
            std::vector<float> points = grid ? grid_values(n * r, 3 + n) : gaussian(n * r, 3 + n);
            std::vector<float> c = grid ? grid_values(clusters * r, 5 + r, 1) : gaussian(clusters * r, 5 + r);
            if (clusters > 1) std::copy(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(r), c.begin() + static_cast<std::ptrdiff_t>(r));
            for (std::size_t top : {std::size_t{1}, std::size_t{2}, clusters}) {
              if (top > clusters) continue;
              CAPTURE(n);
              CAPTURE(r);
              CAPTURE(clusters);
              CAPTURE(grid);
              CAPTURE(top);
              const std::vector<std::uint32_t> want =
                  entgraph::nearest_centroids({points.data(), n, r}, c, clusters, top);
              const std::vector<std::uint32_t> got = nearest_centroids({points.data(), n, r}, {c.data(), clusters, r}, top);
              CHECK(got == want);
            }
          }
    const std::vector<float> p(8, 0.0f), c(8, 0.0f);
    CHECK_THROWS_WITH_AS(nearest_centroids({p.data(), 2, 4}, {c.data(), 2, 4}, 3), doctest::Contains("top"), Error);
    CHECK_THROWS_WITH_AS(nearest_centroids({p.data(), 2, 4}, {c.data(), 4, 2}, 1), doctest::Contains("columns"), Error);
  }

  TEST_CASE("quantization buckets: c * bins + the number of edges <= x") {
    for (std::size_t n : kSizes)
      for (std::size_t r : kRanks)
        for (std::size_t bins : {1, 2, 5}) {
          CAPTURE(n);
          CAPTURE(r);
          CAPTURE(bins);
          // Grid points and edges, so that points equal to an edge occur.
          const std::vector<float> points = grid_values(n * r, 11 + n);
          std::vector<float> edges = grid_values(r * (bins - 1), 13 + r, 1);
          for (std::size_t c = 0; c < r; ++c)
            std::sort(edges.begin() + static_cast<std::ptrdiff_t>(c * (bins - 1)),
                      edges.begin() + static_cast<std::ptrdiff_t>((c + 1) * (bins - 1)));
          std::vector<std::uint32_t> want(n * r);
          for (std::size_t e = 0; e < n * r; ++e) {
            const std::size_t c = e % r;
            const float* lo = edges.data() + c * (bins - 1);
            want[e] = static_cast<std::uint32_t>(c * bins + static_cast<std::size_t>(
                                                                 std::upper_bound(lo, lo + (bins - 1), points[e]) - lo));
          }
          CHECK(quantize_buckets({points.data(), n, r}, {edges.data(), r, bins - 1}) == want);
        }
    const std::vector<float> p(4, 0.0f), e = {1.0f, 0.0f};
    CHECK_THROWS_WITH_AS(quantize_buckets({p.data(), 2, 2}, {e.data(), 1, 2}), doctest::Contains("rows"), Error);
    CHECK_THROWS_WITH_AS(quantize_buckets({p.data(), 4, 1}, {e.data(), 1, 2}), doctest::Contains("ascending"), Error);
  }

  TEST_CASE("bucket graph: equals Graph::from_buckets (causal: without the hidden keys)") {
    const std::vector<std::pair<std::size_t, std::size_t>> widths = {{1, 1}, {2, 3}, {3, 2}};
    for (std::size_t n : kSizes)
      for (std::size_t m : kSizes)
        for (const auto& [rq, rk] : widths)
          for (std::size_t buckets : {1, 7, 64}) {
            // Rows may repeat a bucket (rq, rk > 1 with 1 or 7 buckets).
            const std::vector<std::uint32_t> qb = random_buckets(n * rq, buckets, 17 + n + rq);
            const std::vector<std::uint32_t> kb = random_buckets(m * rk, buckets, 19 + m + rk);
            const Graph cpu = Graph::from_buckets({qb.data(), n, rq}, {kb.data(), m, rk}, buckets);
            for (bool causal : {false, true}) {
              CAPTURE(n);
              CAPTURE(m);
              CAPTURE(rq);
              CAPTURE(rk);
              CAPTURE(buckets);
              CAPTURE(causal);
              check_same_graph(bucket_graph({qb.data(), n, rq}, {kb.data(), m, rk}, buckets, causal),
                               allowed_part(cpu, causal));
            }
          }
  }

  TEST_CASE("bucket graph: an id out of range throws naming it, keys first") {
    std::vector<std::uint32_t> qb = {0, 1, 2, 3, 9, 1}, kb = {2, 0, 1, 3, 1, 8};
    CHECK_THROWS_WITH_AS(bucket_graph({qb.data(), 3, 2}, {kb.data(), 3, 2}, 4),
                         doctest::Contains("key_buckets(2, 1) = 8 is not below num_buckets = 4"), Error);
    kb[5] = 0;
    CHECK_THROWS_WITH_AS(bucket_graph({qb.data(), 3, 2}, {kb.data(), 3, 2}, 4),
                         doctest::Contains("query_buckets(2, 0) = 9 is not below num_buckets = 4"), Error);
    CHECK_THROWS_AS(Graph::from_buckets({qb.data(), 3, 2}, {kb.data(), 3, 2}, 4), Error);  // as the CPU does
  }

  TEST_CASE("distance graph: equals sparsefinder-distance's graph") {
    std::size_t edges = 0;
    for (std::size_t n : kSizes)
      for (std::size_t m : kSizes)
        for (std::size_t r : kRanks)
          for (bool grid : {false, true}) {
            // Gaussian points, with t^2 about r (a few percent of the pairs),
            // or grid points with t = 0.5 where d2 == t^2 is frequent.
            const std::vector<float> qp = grid ? grid_values(n * r, 23 + n, 1) : gaussian(n * r, 23 + n);
            const std::vector<float> kp = grid ? grid_values(m * r, 29 + m, 1) : gaussian(m * r, 29 + m);
            const std::string t = grid ? "0.5" : (r == 1 ? "0.25" : r == 4 ? "1.5" : "3.5");
            const auto cpu = identity_predictor("sparsefinder-distance", {{"t", t}}, r, json::object());
            for (bool causal : {false, true}) {
              CAPTURE(n);
              CAPTURE(m);
              CAPTURE(r);
              CAPTURE(grid);
              CAPTURE(causal);
              const Graph want = cpu->predict({qp.data(), n, r}, {kp.data(), m, r}, 0, 0, causal);
              check_same_graph(distance_graph({qp.data(), n, r}, {kp.data(), m, r}, std::stod(t), causal), want);
              edges += want.edges();
            }
          }
    CHECK(edges > 0);
    const std::vector<float> p(4, 0.0f);
    CHECK_THROWS_WITH_AS(distance_graph({p.data(), 2, 2}, {p.data(), 2, 2}, -1.0, false),
                         doctest::Contains("threshold"), Error);
    CHECK_THROWS_WITH_AS(distance_graph({p.data(), 2, 2}, {p.data(), 4, 1}, 1.0, false),
                         doctest::Contains("columns"), Error);
  }

  TEST_CASE("k-means and quantization graphs: equal the CPU predictors' on projected points") {
    for (std::size_t n : kSizes)
      for (std::size_t r : kRanks) {
        const std::size_t m = n == 1 ? 33 : n;
        const std::vector<float> qp = gaussian(n * r, 31 + n), kp = gaussian(m * r, 37 + n);
        for (std::size_t clusters : {3, 8})
          for (std::size_t top : {1, 2}) {
            CAPTURE(n);
            CAPTURE(r);
            CAPTURE(clusters);
            CAPTURE(top);
            const std::vector<float> c = gaussian(clusters * r, 41 + clusters);
            const auto cpu = identity_predictor(
                "sparsefinder-kmeans", {{"clusters", std::to_string(clusters)}, {"top", std::to_string(top)}}, r,
                {{"clusters", clusters}, {"centroids", json::array({json::array({matrix_json(c, clusters, r)})})}});
            const std::vector<std::uint32_t> qb = nearest_centroids({qp.data(), n, r}, {c.data(), clusters, r}, top);
            const std::vector<std::uint32_t> kb = nearest_centroids({kp.data(), m, r}, {c.data(), clusters, r}, top);
            check_same_graph(bucket_graph({qb.data(), n, top}, {kb.data(), m, top}, clusters),
                             cpu->predict({qp.data(), n, r}, {kp.data(), m, r}, 0, 0, false));
          }
        for (std::size_t bins : {2, 4}) {
          CAPTURE(n);
          CAPTURE(r);
          CAPTURE(bins);
          std::vector<float> e = gaussian(r * (bins - 1), 43 + bins);
          for (std::size_t c = 0; c < r; ++c)
            std::sort(e.begin() + static_cast<std::ptrdiff_t>(c * (bins - 1)),
                      e.begin() + static_cast<std::ptrdiff_t>((c + 1) * (bins - 1)));
          const auto cpu = identity_predictor("sparsefinder-quantization", {{"buckets", std::to_string(bins)}}, r,
                                              {{"buckets", bins}, {"edges", json::array({json::array({matrix_json(e, r, bins - 1)})})}});
          const std::vector<std::uint32_t> qb = quantize_buckets({qp.data(), n, r}, {e.data(), r, bins - 1});
          const std::vector<std::uint32_t> kb = quantize_buckets({kp.data(), m, r}, {e.data(), r, bins - 1});
          check_same_graph(bucket_graph({qb.data(), n, r}, {kb.data(), m, r}, r * bins),
                           cpu->predict({qp.data(), n, r}, {kp.data(), m, r}, 0, 0, false));
        }
      }
  }

  TEST_CASE("metrics: equal compare_graphs") {
    for (std::size_t n : kSizes)
      for (std::size_t m : kSizes) {
        const std::vector<std::uint32_t> qb = random_buckets(n * 2, 9, 47 + n), kb = random_buckets(m, 9, 53 + m);
        const Graph predicted = Graph::from_buckets({qb.data(), n, 2}, {kb.data(), m, 1}, 9);
        std::vector<std::uint8_t> mask(n * m);
        std::mt19937_64 rng(59 + n * m);
        for (auto& x : mask) x = (rng() % 5 == 0) ? 1 : 0;
        const Graph gold = Graph::from_mask({mask.data(), n, m});
        for (bool causal : {false, true}) {
          CAPTURE(n);
          CAPTURE(m);
          CAPTURE(causal);
          check_same_metrics(entgraph::compare_graphs(Device::cuda, predicted, gold, causal), entgraph::compare_graphs(predicted, gold, causal));
          check_same_metrics(entgraph::compare_graphs(Device::cuda, gold, predicted, causal), entgraph::compare_graphs(gold, predicted, causal));
          check_same_metrics(entgraph::compare_graphs(Device::cuda, gold, gold, causal), entgraph::compare_graphs(gold, gold, causal));
          const Graph none = Graph::empty(n, m);
          check_same_metrics(entgraph::compare_graphs(Device::cuda, none, gold, causal), entgraph::compare_graphs(none, gold, causal));
        }
      }
    CHECK_THROWS_WITH_AS(entgraph::compare_graphs(Device::cuda, Graph::empty(2, 3), Graph::empty(3, 3), false),
                         doctest::Contains("different shapes"), Error);
  }

  TEST_CASE("the device-pointer functions on a stream of their own agree with the host overloads") {
    cudaStream_t stream = nullptr;
    REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
    const std::size_t n = 300, m = 257, r = 4, clusters = 8, top = 2;
    const std::vector<float> q = gaussian(n * 16, 61), k = gaussian(m * 16, 67), w = gaussian(16 * r, 71, 0.25);
    const std::vector<float> c = gaussian(clusters * r, 73);
    const DeviceArray<float> dq(q.data(), q.size()), dk(k.data(), k.size()), dw(w.data(), w.size()),
        dc(c.data(), c.size());
    DeviceArray<float> qp(n * r), kp(m * r);
    DeviceArray<std::uint32_t> qb(n * top), kb(m * top);
    project(dq.data(), n, 16, dw.data(), r, qp.data(), stream);
    project(dk.data(), m, 16, dw.data(), r, kp.data(), stream);
    nearest_centroids(qp.data(), n, r, dc.data(), clusters, top, qb.data(), stream);
    nearest_centroids(kp.data(), m, r, dc.data(), clusters, top, kb.data(), stream);
    const DeviceGraph buckets = bucket_graph(qb.data(), n, top, kb.data(), m, top, clusters, false, stream);
    const DeviceGraph near = distance_graph(qp.data(), n, kp.data(), m, r, 1.5, true, stream);
    const GraphMetrics metrics = cuda::compare_graphs(buckets, near, true, stream);
    synchronize(stream);

    const std::vector<float> hqp = project({q.data(), n, 16}, {w.data(), 16, r});
    const std::vector<float> hkp = project({k.data(), m, 16}, {w.data(), 16, r});
    CHECK(downloaded(qp) == hqp);
    CHECK(downloaded(kp) == hkp);
    const std::vector<std::uint32_t> hqb = nearest_centroids({hqp.data(), n, r}, {c.data(), clusters, r}, top);
    const std::vector<std::uint32_t> hkb = nearest_centroids({hkp.data(), m, r}, {c.data(), clusters, r}, top);
    const Graph hb = bucket_graph({hqb.data(), n, top}, {hkb.data(), m, top}, clusters);
    const Graph hd = distance_graph({hqp.data(), n, r}, {hkp.data(), m, r}, 1.5, true);
    check_same_graph(buckets.download(), hb);
    check_same_graph(near.download(), hd);
    check_same_metrics(metrics, entgraph::compare_graphs(hb, hd, true));
    CHECK(cudaStreamDestroy(stream) == cudaSuccess);
  }

  TEST_CASE("fitted Sparsefinder predictors: Predictor::predict on Device::cuda gives the CPU's graph") {
    for (bool causal : {false, true}) {
      const Capture capture = test::clustered_capture(1, 2, 16, {64, 48}, 4, causal);
      const std::vector<std::pair<std::string, PredictorSettings>> methods = {
          {"sparsefinder-distance", {{"t", "1.5"}, {"seed", "3"}}},
          {"sparsefinder-kmeans", {{"clusters", "4"}, {"top", "1"}, {"seed", "3"}}},
          {"sparsefinder-kmeans", {{"clusters", "6"}, {"top", "2"}, {"seed", "3"}}},
          {"sparsefinder-quantization", {{"buckets", "4"}, {"seed", "3"}}},
          {"sparsefinder-distance", {{"t", "1.5"}, {"seed", "3"}, {"extra_window", "2"}, {"extra_global", "1"}}}};
      for (const auto& [method, settings] : methods) {
        auto cpu = make_predictor(method, settings);
        cpu->fit(capture, {});
        // The same parameters after a round trip through the parameter file.
        const auto loaded = load_predictor(cpu->to_json());
        GraphMetrics cpu_total, gpu_total;
        for (std::size_t s = 0; s < capture.sequences(); ++s) {
          CAPTURE(method);
          CAPTURE(causal);
          CAPTURE(s);
          const MatrixView<const float> q = capture.queries_of(0, 1, s), k = capture.keys_of(0, 1, s);
          const Graph want = cpu->predict(q, k, 0, 1, causal);
          const Graph got = cpu->predict(Device::cuda, q, k, 0, 1, causal);
          check_same_graph(got, want);
          check_same_graph(loaded->predict(Device::cuda, q, k, 0, 1, causal), want);
          // q and k already on the GPU: read in place, the same graph.
          const auto on_gpu = [](MatrixView<const float> x) {
            std::vector<float> rows(x.rows * x.cols);
            for (std::size_t i = 0; i < x.rows; ++i)
              for (std::size_t c = 0; c < x.cols; ++c) rows[i * x.cols + c] = x(i, c);
            return DeviceArray<float>(rows.data(), rows.size());
          };
          const DeviceArray<float> dq = on_gpu(q), dk = on_gpu(k);
          check_same_graph(cpu->predict(Device::cuda, Memory::device, ConstMatrix<float>(dq.data(), q.rows, q.cols),
                                        ConstMatrix<float>(dk.data(), k.rows, k.cols), 0, 1, causal),
                           want);
          const Graph gold = gold_graph(capture, 0, 1, s);
          const GraphMetrics gm = entgraph::compare_graphs(Device::cuda, got, gold, causal),
                             cm = entgraph::compare_graphs(want, gold, causal);
          check_same_metrics(gm, cm);
          cpu_total += cm;
          gpu_total += gm;
        }
        MESSAGE(method << std::string(causal ? " causal" : "") << ": recall " << gpu_total.recall() << ", sparsity "
                       << gpu_total.sparsity());
        CHECK(cpu_total.predicted > 0);
      }
    }
  }

  // lowrank-threshold on the GPU (lowrank_threshold.cu): codes multiplied on
  // tensor cores, the thresholds by the CPU's own steps. α = 1.5 and 2 must
  // give the CPU's graph exactly; the other α too on these inputs (no
  // estimate lies within rounding of a cut).
  TEST_CASE("lowrank-threshold: Predictor::predict on Device::cuda gives the CPU's graph") {
    const auto on_gpu = [](MatrixView<const float> x) {
      std::vector<float> rows(x.rows * x.cols);
      for (std::size_t i = 0; i < x.rows; ++i)
        for (std::size_t c = 0; c < x.cols; ++c) rows[i * x.cols + c] = x(i, c);
      return DeviceArray<float>(rows.data(), rows.size());
    };
    struct Case {
      std::size_t dim;
      std::vector<double> alphas;  // per head
      PredictorSettings settings;
    };
    const std::vector<Case> cases = {
        {16, {1.5, 2.0}, {}},
        {16, {1.5, 2.0}, {{"bits", "2"}}},
        {16, {1.5, 2.0}, {{"bits", "8"}, {"margin", "0.5"}}},
        {16, {1.5, 1.5}, {{"margin", "-0.3"}, {"r", "8"}}},
        {48, {1.5, 2.0}, {{"r", "40"}, {"bits", "6"}}},  // two 32-code chunks, the second padded
        {16, {1.25, 3.0}, {}},
    };
    for (const Case& tc : cases)
      for (bool causal : {false, true}) {
        Capture capture = test::clustered_capture(1, 2, tc.dim, {150, 70}, 4, causal);
        for (std::size_t h = 0; h < 2; ++h) capture.head(0, h).alpha = tc.alphas[h];
        auto cpu = make_predictor("lowrank-threshold", tc.settings);
        cpu->fit(capture, {});
        for (std::size_t h = 0; h < 2; ++h) {
          const MatrixView<const float> q = capture.queries_of(0, h, 0), k = capture.keys_of(0, h, 0);
          // n = m, fewer queries than keys (the last queries of the keys when
          // causal), and a short key side.
          const auto rows = [](MatrixView<const float> x, std::size_t begin, std::size_t end) {
            return MatrixView<const float>(x.row(begin), end - begin, x.cols, x.stride);
          };
          const std::vector<std::pair<MatrixView<const float>, MatrixView<const float>>> shapes = {
              {q, k}, {rows(q, 90, 150), k}, {rows(q, 0, 20), rows(k, 0, 70)}};
          for (const auto& [qs, ks] : shapes) {
            CAPTURE(tc.dim);
            CAPTURE(tc.alphas[h]);
            CAPTURE(causal);
            CAPTURE(qs.rows);
            CAPTURE(ks.rows);
            const Graph want = cpu->predict(qs, ks, 0, h, causal);
            CHECK(want.edges() > qs.rows);  // more than one key a row: the cut is exercised
            check_same_graph(cpu->predict(Device::cuda, qs, ks, 0, h, causal), want);
            const DeviceArray<float> dq = on_gpu(qs), dk = on_gpu(ks);
            check_same_graph(cpu->predict(Device::cuda, Memory::device, ConstMatrix<float>(dq.data(), qs.rows, qs.cols),
                                          ConstMatrix<float>(dk.data(), ks.rows, ks.cols), 0, h, causal),
                             want);
          }
        }
      }
  }

  // The shipped teachers' own heads (rotary and not, causal and masked):
  // every head's graph at 4 bits, fitted on one text and predicted on
  // another of up to 1000 bytes.
  TEST_CASE("lowrank-threshold: the GPU's graphs of the shipped teachers' heads are the CPU's") {
    std::ifstream file(std::string(ENTGRAPH_SOURCE_DIR) + "/data/heldout-long.txt", std::ios::binary);
    REQUIRE(file.good());
    std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    REQUIRE(text.size() >= 2000);
    for (const std::string name : {"teacher-causal", "teacher-masked", "teacher-long"}) {
      const Teacher teacher = Teacher::load(std::string(ENTGRAPH_SOURCE_DIR) + "/data/" + name);
      // At most the teacher's context; not a multiple of the 64-query tile.
      const std::size_t bytes = std::min<std::size_t>(teacher.config().context, 1000);
      const Capture fit = teacher.capture({text.substr(0, 256)}), held = teacher.capture({text.substr(1000, bytes)});
      auto p = make_predictor("lowrank-threshold", {});
      p->fit(fit, {});
      std::size_t edges = 0;
      for (std::size_t layer = 0; layer < held.layers; ++layer)
        for (std::size_t h = 0; h < held.heads; ++h) {
          CAPTURE(name);
          CAPTURE(layer);
          CAPTURE(h);
          const bool causal = held.head(layer, h).causal;
          const MatrixView<const float> q = held.queries_of(layer, h, 0), k = held.keys_of(layer, h, 0);
          const Graph want = p->predict(q, k, layer, h, causal);
          check_same_graph(p->predict(Device::cuda, q, k, layer, h, causal), want);
          edges += want.edges();
        }
      MESSAGE(name << ": " << edges << " edges over " << held.layers * held.heads << " heads of " << bytes
                   << " queries");
      CHECK(edges > held.layers * held.heads * bytes);
    }
  }

  // Queries so small that their steps are below float's normal range (and
  // keys large enough to bring the estimates back to O(1)), or so large that
  // their scales leave the range where float products are close: the
  // kernel's float approximations stand aside for the exact estimates, and
  // the graph is still the CPU's.
  TEST_CASE("lowrank-threshold on Device::cuda: tiny queries (subnormal float steps) give the CPU's graph") {
    const Capture capture = test::clustered_capture(1, 1, 16, {100}, 4, true);
    auto p = make_predictor("lowrank-threshold", {});
    p->fit(capture, {});
    const MatrixView<const float> q0 = capture.queries_of(0, 0, 0), k0 = capture.keys_of(0, 0, 0);
    for (const auto& [q_factor, k_factor] : {std::pair{1e-38f, 1.0f}, {1e-43f, 1.0f}, {2e-40f, 1e37f}, {1e30f, 1e-30f}}) {
      CAPTURE(q_factor);
      CAPTURE(k_factor);
      std::vector<float> q(q0.data, q0.data + 100 * 16), k(k0.data, k0.data + 100 * 16);
      for (float& x : q) x *= q_factor;
      for (float& x : k) x *= k_factor;
      const MatrixView<const float> qs(q.data(), 100, 16), ks(k.data(), 100, 16);
      const Graph want = p->predict(qs, ks, 0, 0, true);
      CHECK(want.edges() >= 100);
      check_same_graph(p->predict(Device::cuda, qs, ks, 0, 0, true), want);
    }
  }

  TEST_CASE("lowrank-threshold on Device::cuda: NaN and infinity refused as on the CPU; float32 estimates run on cpu") {
    const Capture capture = test::clustered_capture(1, 1, 16, {40}, 4, false);
    auto p = make_predictor("lowrank-threshold", {});
    p->fit(capture, {});
    std::vector<float> q(capture.queries_of(0, 0, 0).data, capture.queries_of(0, 0, 0).data + 40 * 16);
    q[7 * 16 + 3] = std::numeric_limits<float>::quiet_NaN();
    const MatrixView<const float> bad(q.data(), 40, 16), k = capture.keys_of(0, 0, 0);
    std::string cpu_message;
    try {
      p->predict(bad, k, 0, 0, false);
    } catch (const Error& e) {
      cpu_message = e.what();
    }
    REQUIRE(cpu_message.find("row 7, column 3") != std::string::npos);
    CHECK_THROWS_WITH_AS(p->predict(Device::cuda, bad, k, 0, 0, false), cpu_message.c_str(), Error);
    CHECK_THROWS_WITH_AS(p->predict(Device::cuda, k, bad, 0, 0, false),
                         doctest::Contains("k has a NaN or infinite value (row 7, column 3)"), Error);
    // Finite q and k whose projections or estimates overflow float32: the CPU's errors.
    std::vector<float> huge(k.data, k.data + 40 * 16), large(k.data, k.data + 40 * 16);
    // Rows 9 on of 3e38 with random signs: some row's projection overflows.
    std::mt19937_64 signs(7);
    for (std::size_t x = 9 * 16; x < 40 * 16; ++x) huge[x] = signs() % 2 ? 3.0e38f : -3.0e38f;
    for (float& x : large) x *= 1e20f;
    const MatrixView<const float> huge_k(huge.data(), 40, 16), large_qk(large.data(), 40, 16);
    for (const auto& [qx, kx, words] : {std::tuple{k, huge_k, "k's projection overflows float32 at row "},
                                        std::tuple{large_qk, large_qk, "may overflow float32"}}) {
      std::string message;
      try {
        p->predict(qx, kx, 0, 0, false);
      } catch (const Error& e) {
        message = e.what();
      }
      CAPTURE(message);
      CHECK(message.find(words) != std::string::npos);
      CHECK_THROWS_WITH_AS(p->predict(Device::cuda, qx, kx, 0, 0, false), message.c_str(), Error);
    }
    auto float_estimate = make_predictor("lowrank-threshold", {{"bits", "0"}});
    float_estimate->fit(capture, {});
    CHECK_THROWS_WITH_AS(float_estimate->predict(Device::cuda, k, k, 0, 0, false), doctest::Contains("run it on cpu"),
                         Error);
    // No queries or no keys: an empty graph of that shape.
    const Graph none = p->predict(Device::cuda, MatrixView<const float>(q.data(), 0, 16), k, 0, 0, true);
    CHECK(none.queries == 0);
    CHECK(none.keys == 40);
  }

  TEST_CASE("predictors without a CUDA kernel say so; a head out of range is refused as on the CPU") {
    const Capture capture = test::clustered_capture(1, 2, 16, {32}, 4, false);
    const MatrixView<const float> q = capture.queries_of(0, 0, 0), k = capture.keys_of(0, 0, 0);
    const auto window = make_predictor("window", {{"window", "4"}});
    CHECK_THROWS_WITH_AS(window->predict(Device::cuda, q, k, 0, 0, false), doctest::Contains("run it on cpu"), Error);
    auto sf = make_predictor("sparsefinder-distance", {{"t", "1"}});
    CHECK_THROWS_WITH_AS(sf->predict(Device::cuda, q, k, 0, 0, false), doctest::Contains("predict before fit"), Error);
    sf->fit(capture, {});
    CHECK_THROWS_WITH_AS(sf->predict(Device::cuda, q, k, 0, 5, false), doctest::Contains("out of range"), Error);
  }
}

}  // namespace entgraph::cuda
