// entgraph CUDA benchmarks: attention on one head, n = m, Q, K, V ~ N(0, 1),
// the default scale 1/sqrt(d) (scores about N(0, 1)), float32, d = dv.
//   cuda_attention/fused/<transform>/n:<n>/d:<d>/causal:<c>
//       the fused kernel; softmax and entmax run the same code (the target:
//       entmax15 <= 1.5x softmax at n = 4096; docs/CUDA.md has the numbers);
//   cuda_attention/cublas/<transform>/n:<n>/d:<d>
//       the unfused baseline: cublasSgemm S = Q K^T, scores_to_probs (one warp
//       per row), cublasSgemm O = P V; S is n x n in memory;
//   cuda_attention/graph/<pattern>/sparsity:<s>/n:<n>/d:64
//       entmax15 on a graph with (1 - s) n keys per query, random keys or a
//       band around the diagonal (the target: s = 0.95 faster than
//       fused/entmax15 at n >= 8192).
// Each iteration is timed with CUDA events around one call on the default
// stream (manual time); scratch is allocated once outside the timed span.
// `flops` counts the dense matrix products (4 n m d, halved under a causal
// mask; 4 |G| d for a graph). float32 only: no bf16/fp16 kernels yet.
// Without a GPU every benchmark reports an error instead of a time.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "support/cases.hpp"  // the one list of transform cases (tests/support/cases.hpp)
#include "entgraph/cuda/attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/cuda/device_graph.hpp"
#include "entgraph/cuda/graph_attention.hpp"
#include "entgraph/graph.hpp"
#include "cuda_bench.hpp"

namespace entgraph::cuda {
namespace {

DeviceArray<float> device_gaussian(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return DeviceArray<float>(v.data(), v.size(), "bench_attention");
}

// One head's inputs and output, made once per (n, d) and kept.
struct Head {
  std::size_t n, d;
  DeviceArray<float> q, k, v, out;
  Head(std::size_t rows, std::size_t dim)
      : n(rows),
        d(dim),
        q(device_gaussian(rows * dim, 44)),
        k(device_gaussian(rows * dim, 45)),
        v(device_gaussian(rows * dim, 46)),
        out(rows * dim, "bench_attention") {}
};

Head& head(std::size_t n, std::size_t d) {
  static std::map<std::pair<std::size_t, std::size_t>, std::unique_ptr<Head>> heads;
  auto& h = heads[{n, d}];
  if (!h) h = std::make_unique<Head>(n, d);
  return *h;
}


void set_flops(benchmark::State& state, double flops) {
  state.counters["flops"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

// The transforms of the attention benchmarks, from the one case list.
std::vector<cases::TransformCase> attention_cases() { return cases::transform_cases(cases::kBenchAttention); }

void BM_fused(benchmark::State& state, Transform t, std::size_t n, std::size_t d, bool causal) {
  if (skip_without_gpu(state)) return;
  try {
    Head& h = head(n, d);
    FusedAttentionOptions o;
    o.transform = t;
    o.causal = causal;
    DeviceArray<float> workspace(attention_workspace_bytes(n, n, o) / sizeof(float), "bench_attention (workspace)");
    o.workspace = workspace.data();
    o.workspace_bytes = workspace.size() * sizeof(float);
    run_timed(state, [&] { attention_forward(h.q.data(), h.k.data(), h.v.data(), h.out.data(), n, n, d, d, o); });
    set_flops(state, 4.0 * n * n * d * (causal ? 0.5 : 1.0));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

cublasHandle_t cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw CudaError("bench: cublasCreate failed");
    return h;
  }();
  return handle;
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) throw CudaError(std::string(what) + ": cuBLAS status " + std::to_string(status));
}

void BM_cublas(benchmark::State& state, Transform t, std::size_t n, std::size_t d) {
  if (skip_without_gpu(state)) return;
  try {
    Head& h = head(n, d);
    DeviceArray<float> s(n * n, "bench_attention (scores)");
    FusedAttentionOptions o;
    o.transform = t;
    const float one = 1.0f, zero = 0.0f;
    const int ni = static_cast<int>(n), di = static_cast<int>(d);
    cublasHandle_t handle = cublas();
    run_timed(state, [&] {
      // Row-major S (n x n) is column-major S^T = K Q^T; row-major O = P V is
      // column-major O^T = V^T P^T.
      check_cublas(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, ni, ni, di, &one, h.k.data(), di, h.q.data(), di,
                               &zero, s.data(), ni),
                   "bench: S = Q K^T");
      scores_to_probs(s.data(), n, n, d, o);
      check_cublas(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, di, ni, ni, &one, h.v.data(), di, s.data(), ni,
                               &zero, h.out.data(), di),
                   "bench: O = P V");
    });
    set_flops(state, 4.0 * n * n * d);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// (1 - sparsity) n keys per query, sorted: uniformly random distinct keys
// (always including the query's own position), or the band of that width
// centred on the diagonal. Kept, since building the large ones takes a while.
const Graph& bench_graph(bool random, double sparsity, std::size_t n) {
  static std::map<std::tuple<bool, double, std::size_t>, Graph> graphs;
  auto it = graphs.find({random, sparsity, n});
  if (it != graphs.end()) return it->second;
  const std::size_t degree = std::max<std::size_t>(1, static_cast<std::size_t>((1.0 - sparsity) * n + 0.5));
  Graph g;
  g.queries = n;
  g.keys = n;
  g.offsets.assign(n + 1, 0);
  g.indices.reserve(n * degree);
  std::mt19937_64 rng(47);
  std::vector<std::uint8_t> taken(n, 0);
  std::vector<std::uint32_t> row;
  for (std::size_t i = 0; i < n; ++i) {
    row.clear();
    if (random) {
      row.push_back(static_cast<std::uint32_t>(i));
      taken[i] = 1;
      std::uniform_int_distribution<std::size_t> pick(0, n - 1);
      while (row.size() < degree) {
        const std::size_t j = pick(rng);
        if (!taken[j]) {
          taken[j] = 1;
          row.push_back(static_cast<std::uint32_t>(j));
        }
      }
      for (std::uint32_t j : row) taken[j] = 0;
      std::sort(row.begin(), row.end());
    } else {
      const std::size_t lo = std::min(i > degree / 2 ? i - degree / 2 : 0, n - degree);
      for (std::size_t j = lo; j < lo + degree; ++j) row.push_back(static_cast<std::uint32_t>(j));
    }
    g.indices.insert(g.indices.end(), row.begin(), row.end());
    g.offsets[i + 1] = g.indices.size();
  }
  return graphs.emplace(std::make_tuple(random, sparsity, n), std::move(g)).first->second;
}

void BM_graph(benchmark::State& state, bool random, double sparsity, std::size_t n, std::size_t d) {
  if (skip_without_gpu(state)) return;
  try {
    Head& h = head(n, d);
    const Graph& g = bench_graph(random, sparsity, n);
    const DeviceGraph dg = DeviceGraph::upload(g);
    DeviceArray<float> workspace(g.edges(), "bench_attention (graph scratch)");
    FusedAttentionOptions o;
    o.transform = Transform::entmax15();
    o.workspace = workspace.data();
    o.workspace_bytes = graph_attention_workspace_bytes(g.edges());
    run_timed(state, [&] { graph_attention_forward(h.q.data(), h.k.data(), h.v.data(), dg, h.out.data(), d, d, o); });
    set_flops(state, 4.0 * static_cast<double>(g.edges()) * d);
    state.counters["edges"] = static_cast<double>(g.edges());
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

const bool kRegistered = [] {
  for (const cases::TransformCase& t : attention_cases())
    for (std::size_t n : {1024, 4096, 8192, 16384})
      for (std::size_t d : {64, 128})
        for (bool causal : {false, true}) {
          if (n == 8192 && (d != 64 || causal)) continue;  // 8192: only the graph targets' baseline
          const std::string name = std::string("cuda_attention/fused/") + t.name + "/n:" + std::to_string(n) +
                                   "/d:" + std::to_string(d) + "/causal:" + (causal ? "1" : "0");
          benchmark::RegisterBenchmark(name.c_str(), BM_fused, t.transform(), n, d, causal)
              ->UseManualTime()
              ->Unit(benchmark::kMillisecond);
        }
  for (const cases::TransformCase& t : attention_cases()) {
    if (t.name == "sparsemax") continue;
    for (std::size_t n : {1024, 4096, 16384})
      for (std::size_t d : {64, 128}) {
        const std::string name = std::string("cuda_attention/cublas/") + t.name + "/n:" + std::to_string(n) +
                                 "/d:" + std::to_string(d);
        benchmark::RegisterBenchmark(name.c_str(), BM_cublas, t.transform(), n, d)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
  }
  for (bool random : {true, false})
    for (double sparsity : {0.9, 0.95})
      for (std::size_t n : {4096, 8192, 16384}) {
        const std::string name = std::string("cuda_attention/graph/") + (random ? "random" : "band") +
                                 "/sparsity:" + (sparsity == 0.9 ? "0.90" : "0.95") + "/n:" + std::to_string(n) +
                                 "/d:64";
        benchmark::RegisterBenchmark(name.c_str(), BM_graph, random, sparsity, n, std::size_t{64})
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
  return true;
}();

}  // namespace
}  // namespace entgraph::cuda
