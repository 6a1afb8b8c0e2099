// entgraph_bench: Google Benchmark driver. Records the run's configuration in
// the JSON context (ISA, thread counts, workload) and registers the suites.
#include <benchmark/benchmark.h>

#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.hpp"
#include "entgraph/score_bounds.hpp"

namespace entgraph::bench {

const std::vector<float>& gaussian(std::size_t count, std::uint64_t seed) {
  static std::map<std::pair<std::size_t, std::uint64_t>, std::vector<float>> cache;
  auto& values = cache[{count, seed}];
  if (values.size() != count) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    values.resize(count);
    for (auto& x : values) x = dist(rng);
  }
  return values;
}

const std::vector<std::size_t>& thread_counts() {
  static const std::vector<std::size_t> counts = [] {
    set_num_threads(0);
    const std::size_t all = num_threads();
    std::vector<std::size_t> c{1};
    if (all > 1) c.push_back(all);
    return c;
  }();
  return counts;
}

CpuIsa default_isa() {
  static const CpuIsa isa = cpu_isa();
  return isa;
}

ScopedRuntime::ScopedRuntime(std::size_t threads, CpuIsa isa) {
  set_num_threads(threads);
  set_cpu_isa(isa);
}

ScopedRuntime::~ScopedRuntime() {
  set_num_threads(0);
  set_cpu_isa(default_isa());
}

}  // namespace entgraph::bench

int main(int argc, char** argv) {
  namespace eb = entgraph::bench;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  // Fix the defaults before any benchmark changes them.
  const entgraph::CpuIsa isa = eb::default_isa();
  const auto& threads = eb::thread_counts();
  std::string isas;
  for (auto i : entgraph::available_cpu_isas()) isas += std::string(isas.empty() ? "" : ",") + entgraph::cpu_isa_name(i);
  benchmark::AddCustomContext("entgraph_cpu_isa", entgraph::cpu_isa_name(isa));
  benchmark::AddCustomContext("entgraph_available_isas", isas);
  benchmark::AddCustomContext("entgraph_threads_all", std::to_string(threads.back()));
  benchmark::AddCustomContext("entgraph_scores", "float32 N(0,1), std::mt19937_64 seed " +
                                                     std::to_string(eb::kSeedScores) +
                                                     ", std::normal_distribution<float>");
  benchmark::AddCustomContext("entgraph_elements_per_iteration", std::to_string(eb::kElementsPerIteration));
  // The kernel exact graph attention's float bounds run here: identity
  // bounds (rank d, as on rotary heads), then low-rank ones.
  {
    const std::vector<float> keys(64 * 16, 1.0f);
    const entgraph::ScoreBounds<float> identity({keys.data(), 64, 16}, 1.0, 16), low({keys.data(), 64, 16}, 1.0, 4);
    benchmark::AddCustomContext("entgraph_bound_kernel", std::string(entgraph::bound_kernel_name(identity.kernel())) +
                                                             " (low rank: " +
                                                             entgraph::bound_kernel_name(low.kernel()) + ")");
  }

  eb::register_transform_benchmarks();
  eb::register_attention_benchmarks();
  eb::register_batched_attention_benchmarks();
  eb::register_teacher_benchmarks();
  eb::register_graph_benchmarks();
  eb::register_predict_benchmarks();
  eb::register_score_bound_benchmarks();

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
