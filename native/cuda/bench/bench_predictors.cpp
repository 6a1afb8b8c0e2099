// entgraph CUDA benchmarks: the predictors' hot paths on one head, d = 64,
// r = 4, n = m in {4096, 16384}, k-means with 8 or 16 centroids. Q and K are
// N(0, 1), the projections N(0, 1/d) (so projected points are about
// N(0, 1)), centroids N(0, 1), the distance threshold t = 1 (a few percent of
// the pairs). Each iteration is timed with CUDA events around one call on the
// default stream (manual time): the graph builders include their one
// host round trip for the edge count and their allocations. Without a GPU
// every benchmark reports an error instead of a time.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "entgraph/cuda/device.hpp"
#include "entgraph/cuda/device_graph.hpp"
#include "entgraph/cuda/predictors.hpp"
#include "cuda_bench.hpp"

namespace entgraph::cuda {
namespace {

constexpr std::size_t kDim = 64, kRank = 4;
constexpr double kThreshold = 1.0;

DeviceArray<float> device_gaussian(std::size_t count, std::uint64_t seed, float sigma) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return DeviceArray<float>(v.data(), v.size(), "bench_predictors");
}

// One head's inputs on the device, projected once for the later stages.
struct Inputs {
  std::size_t n;
  DeviceArray<float> q, k, wq, wk, qp, kp;
  explicit Inputs(std::size_t rows)
      : n(rows),
        q(device_gaussian(rows * kDim, 1, 1.0f)),
        k(device_gaussian(rows * kDim, 2, 1.0f)),
        wq(device_gaussian(kDim * kRank, 3, 0.125f)),  // 1 / sqrt(64)
        wk(device_gaussian(kDim * kRank, 4, 0.125f)),
        qp(rows * kRank, "bench_predictors"),
        kp(rows * kRank, "bench_predictors") {
    project(q.data(), n, kDim, wq.data(), kRank, qp.data());
    project(k.data(), n, kDim, wk.data(), kRank, kp.data());
    synchronize();
  }
};


void BM_project(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  Inputs in(n);
  run_timed(state, [&] {
    project(in.q.data(), n, kDim, in.wq.data(), kRank, in.qp.data());
    return 0;
  });
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}

void BM_nearest_centroids(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0)), clusters = static_cast<std::size_t>(state.range(1));
  const auto top = static_cast<std::size_t>(state.range(2));
  Inputs in(n);
  const DeviceArray<float> centroids = device_gaussian(clusters * kRank, 5, 1.0f);
  DeviceArray<std::uint32_t> ids(n * top, "bench_predictors");
  run_timed(state, [&] {
    nearest_centroids(in.qp.data(), n, kRank, centroids.data(), clusters, top, ids.data());
    return 0;
  });
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}

void BM_bucket_graph(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0)), clusters = static_cast<std::size_t>(state.range(1));
  Inputs in(n);
  const DeviceArray<float> centroids = device_gaussian(clusters * kRank, 5, 1.0f);
  DeviceArray<std::uint32_t> qb(n, "bench_predictors"), kb(n, "bench_predictors");
  nearest_centroids(in.qp.data(), n, kRank, centroids.data(), clusters, 1, qb.data());
  nearest_centroids(in.kp.data(), n, kRank, centroids.data(), clusters, 1, kb.data());
  std::size_t edges = 0;
  run_timed(state, [&] {
    DeviceGraph g = bucket_graph(qb.data(), n, 1, kb.data(), n, 1, clusters);
    edges = g.edges();
    return g;
  });
  state.counters["edges"] = static_cast<double>(edges);
  state.counters["density"] = static_cast<double>(edges) / (static_cast<double>(n) * static_cast<double>(n));
}

void BM_distance_graph(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool causal = state.range(1) != 0;
  Inputs in(n);
  std::size_t edges = 0;
  run_timed(state, [&] {
    DeviceGraph g = distance_graph(in.qp.data(), n, in.kp.data(), n, kRank, kThreshold, causal);
    edges = g.edges();
    return g;
  });
  state.counters["edges"] = static_cast<double>(edges);
  state.counters["density"] = static_cast<double>(edges) / (static_cast<double>(n) * static_cast<double>(n));
}

// Predicted: the k-means bucket graph; gold: the distance graph (any two
// graphs of realistic size do: the cost is the per-row lookups).
void BM_compare_graphs(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0)), clusters = static_cast<std::size_t>(state.range(1));
  Inputs in(n);
  const DeviceArray<float> centroids = device_gaussian(clusters * kRank, 5, 1.0f);
  DeviceArray<std::uint32_t> qb(n, "bench_predictors"), kb(n, "bench_predictors");
  nearest_centroids(in.qp.data(), n, kRank, centroids.data(), clusters, 1, qb.data());
  nearest_centroids(in.kp.data(), n, kRank, centroids.data(), clusters, 1, kb.data());
  const DeviceGraph predicted = bucket_graph(qb.data(), n, 1, kb.data(), n, 1, clusters);
  const DeviceGraph gold = distance_graph(in.qp.data(), n, in.kp.data(), n, kRank, kThreshold, false);
  synchronize();
  double recall = 0.0;
  run_timed(state, [&] {
    const GraphMetrics m = compare_graphs(predicted, gold, false);
    recall = m.recall();
    return m.hits;
  });
  state.counters["recall"] = recall;
}

// The whole sparsefinder-kmeans prediction of one head from device Q and K:
// two projections, two assignments, the bucket graph.
void BM_kmeans_predict(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0)), clusters = static_cast<std::size_t>(state.range(1));
  Inputs in(n);
  const DeviceArray<float> centroids = device_gaussian(clusters * kRank, 5, 1.0f);
  DeviceArray<std::uint32_t> qb(n, "bench_predictors"), kb(n, "bench_predictors");
  run_timed(state, [&] {
    project(in.q.data(), n, kDim, in.wq.data(), kRank, in.qp.data());
    project(in.k.data(), n, kDim, in.wk.data(), kRank, in.kp.data());
    nearest_centroids(in.qp.data(), n, kRank, centroids.data(), clusters, 1, qb.data());
    nearest_centroids(in.kp.data(), n, kRank, centroids.data(), clusters, 1, kb.data());
    return bucket_graph(qb.data(), n, 1, kb.data(), n, 1, clusters);
  });
}

// The whole lowrank-threshold prediction of one head from device Q and K
// (d = 64, r = 64, 4-bit codes, α = 1.5, causal): projections, codes, the
// three passes (margin 0) of byte products on tensor cores, the thresholds, the graph
// downloaded to the host. W ~ N(0, 1/d), so the estimates have a standard
// deviation of about √r = 8 and a row keeps a few dozen keys. Compare with
// BM_fused/entmax15/d:64 of bench_attention in the same run.
void BM_lowrank_threshold_predict(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t r = kDim;
  const DeviceArray<float> q = device_gaussian(n * kDim, 1, 1.0f), k = device_gaussian(n * kDim, 2, 1.0f);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f / 8.0f);
  std::vector<float> wq(kDim * r), wk(kDim * r);
  for (float& x : wq) x = normal(rng);
  for (float& x : wk) x = normal(rng);
  LowRankThresholdHead head;
  head.wq = {wq.data(), kDim, r};
  head.wk = {wk.data(), kDim, r};
  std::size_t edges = 0;
  run_timed(state, [&] {
    const Graph g = lowrank_threshold_graph(head, q.data(), n, k.data(), n, kDim, true);
    edges = g.edges();
    return edges;
  });
  state.counters["keys_per_query"] = static_cast<double>(edges) / static_cast<double>(n);
}

BENCHMARK(BM_project)->ArgNames({"n"})->Arg(4096)->Arg(16384)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_nearest_centroids)
    ->ArgNames({"n", "clusters", "top"})
    ->ArgsProduct({{4096, 16384}, {8, 16}, {1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_bucket_graph)
    ->ArgNames({"n", "clusters"})
    ->ArgsProduct({{4096, 16384}, {8, 16}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_distance_graph)
    ->ArgNames({"n", "causal"})
    ->ArgsProduct({{4096, 16384}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_compare_graphs)
    ->ArgNames({"n", "clusters"})
    ->ArgsProduct({{4096, 16384}, {8, 16}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_kmeans_predict)
    ->ArgNames({"n", "clusters"})
    ->ArgsProduct({{4096, 16384}, {8, 16}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_lowrank_threshold_predict)
    ->ArgNames({"n"})
    ->Arg(4096)
    ->Arg(16384)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace entgraph::cuda
