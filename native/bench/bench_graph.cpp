// entgraph benchmarks: attention on a predicted graph against dense entmax
// attention of this library (issue 4's "speed that is real"). One head,
// d = 64, n in {1024, 4096, 16384}, 1.5-entmax, float32, one thread. The
// graph comes from a predictor at run time (its cost is included): a window
// predictor sized to a predicted sparsity of 0.9 and 0.95, and Sparsefinder
// k-means (16 clusters, r = 8) fitted beforehand on the same head (the fit is
// not timed, its predict is). Q, K and V are synthetic: rows drawn around 16
// random centres plus noise, so that entmax attention is sparse and clustered.
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/predictors/predictor.hpp"

namespace entgraph::bench {
namespace {

constexpr std::size_t kD = 64;

struct Head {
  std::size_t n;
  std::vector<float> q, k, v, out;
};

// Rows near one of 16 random unit centres (scaled by 6 / sqrt(d)) plus noise.
const Head& clustered_head(std::size_t n) {
  static std::vector<std::unique_ptr<Head>> cache;
  for (const auto& h : cache)
    if (h->n == n) return *h;
  auto h = std::make_unique<Head>();
  h->n = n;
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> centres(16 * kD);
  for (float& c : centres) c = normal(rng) * 6.0f / std::sqrt(float(kD)) * 2.0f;
  for (auto* m : {&h->q, &h->k, &h->v}) {
    m->resize(n * kD);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t c = rng() % 16;
      for (std::size_t j = 0; j < kD; ++j) (*m)[i * kD + j] = centres[c * kD + j] + 0.5f * normal(rng);
    }
  }
  h->out.resize(n * kD);
  cache.push_back(std::move(h));
  return *cache.back();
}

AttentionOptions<float> entmax_options() {
  AttentionOptions<float> o;
  o.transform = Transform::entmax15();
  return o;
}

void run_dense(benchmark::State& state, std::size_t n) {
  const ScopedRuntime runtime(1, default_isa());
  const Head& h = clustered_head(n);
  std::vector<float> out(n * kD);
  for (auto _ : state) {
    attention_forward<float>({h.q.data(), n, kD}, {h.k.data(), n, kD}, {h.v.data(), n, kD}, {out.data(), n, kD},
                             entmax_options());
    benchmark::DoNotOptimize(out.data());
  }
}

void run_graph(benchmark::State& state, std::size_t n, const Predictor& predictor, GraphAttentionMode mode) {
  const ScopedRuntime runtime(1, default_isa());
  const Head& h = clustered_head(n);
  std::vector<float> out(n * kD);
  GraphAttentionOptions<float> options;
  options.attention = entmax_options();
  options.mode = mode;
  double sparsity = 0.0;
  GraphAttentionReport report;
  for (auto _ : state) {
    const Graph g = predictor.predict({h.q.data(), n, kD}, {h.k.data(), n, kD}, 0, 0, false);
    graph_attention_forward<float>({h.q.data(), n, kD}, {h.k.data(), n, kD}, {h.v.data(), n, kD}, g,
                                   {out.data(), n, kD}, options, &report);
    benchmark::DoNotOptimize(out.data());
    sparsity = 1.0 - double(g.edges()) / double(n * n);
  }
  state.counters["sparsity"] = sparsity;
  if (mode != GraphAttentionMode::fast) state.SetLabel(std::string("bounds:") + bound_kernel_name(report.bound_kernel));
}

// Sparsefinder k-means fitted (untimed) on the head itself, as a capture of
// one layer, head and sequence: its clusters can find the 16 centres.
std::unique_ptr<Predictor> fitted_kmeans(std::size_t n) {
  const Head& h = clustered_head(n);
  Capture c = Capture::make(1, 1, kD, {n});
  c.queries = h.q;
  c.keys = h.k;
  c.settings[0].scale = 1.0 / std::sqrt(double(kD));
  auto p = make_predictor("sparsefinder-kmeans", {{"clusters", "16"}, {"r", "8"}});
  p->fit(c, {});
  return p;
}

constexpr GraphAttentionMode kModes[] = {GraphAttentionMode::fast, GraphAttentionMode::certify,
                                         GraphAttentionMode::exact};
std::string mode_suffix(GraphAttentionMode mode) {
  return mode == GraphAttentionMode::fast ? "" : mode == GraphAttentionMode::certify ? "_certified" : "_exact";
}

}  // namespace

void register_graph_benchmarks() {
  for (std::size_t n : {1024, 4096, 16384}) {
    const std::string suffix = "/n:" + std::to_string(n) + "/d:64/threads:1";
    benchmark::RegisterBenchmark(("BM_graph_attention/dense_entmax15" + suffix).c_str(),
                                 [n](benchmark::State& s) { run_dense(s, n); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    for (double sparsity : {0.9, 0.95}) {
      // A bidirectional window of w keys each side keeps about (2w + 1) / n.
      const long w = std::lround((1.0 - sparsity) * double(n) / 2.0);
      static std::vector<std::unique_ptr<Predictor>> keep;
      keep.push_back(make_predictor("window", {{"window", std::to_string(w)}}));
      const Predictor* p = keep.back().get();
      for (GraphAttentionMode mode : kModes)
        benchmark::RegisterBenchmark(("BM_graph_attention/window_sparsity:" + std::to_string(sparsity).substr(0, 4) +
                                      mode_suffix(mode) + suffix)
                                         .c_str(),
                                     [n, p, mode](benchmark::State& s) { run_graph(s, n, *p, mode); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    }
    if (n <= 4096) {  // fitting needs the gold graph of the whole head
      static std::vector<std::unique_ptr<Predictor>> fitted;
      const std::size_t index = fitted.size();
      fitted.push_back(nullptr);
      for (GraphAttentionMode mode : kModes)
        benchmark::RegisterBenchmark(("BM_graph_attention/sparsefinder_kmeans16" + mode_suffix(mode) + suffix).c_str(),
                                     [n, index, mode](benchmark::State& s) {
                                       if (!fitted[index]) fitted[index] = fitted_kmeans(n);
                                       run_graph(s, n, *fitted[index], mode);
                                     })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace entgraph::bench
