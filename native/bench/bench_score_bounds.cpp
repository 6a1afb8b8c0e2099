// entgraph benchmarks: the bound GEMM of exact graph attention on each bound
// kernel (ScoreBounds::bound_block, score_bounds.hpp), as exact mode calls it:
// slabs of 16 query rows against every key, with each 64-key group's largest
// bound. N(0, 1) queries and keys, m = 8192 keys, one thread.
//   BM_score_bounds/<kernel>/r:<r>/d:<d>/m:8192/threads:1
// r = d is the identity (the long teacher's rotary heads), r = 8 a low-rank
// basis. ns per bounded pair: real time / (rows * m); items/s counts pairs.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "bench_common.hpp"
#include "entgraph/error.hpp"
#include "entgraph/score_bounds.hpp"

namespace entgraph::bench {
namespace {

constexpr std::size_t kKeys = 8192, kRows = 256, kSlab = 16;

void run_bounds(benchmark::State& state, BoundKernel kernel, std::size_t rank, std::size_t d) {
  const ScopedRuntime runtime(1, default_isa());
  const BoundKernel saved = bound_kernel();
  try {
    set_bound_kernel(kernel);
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  const std::vector<float>& k = gaussian(kKeys * d, kSeedKey);
  const std::vector<float>& q = gaussian(kRows * d, kSeedQuery);
  const ScoreBounds<float> b({k.data(), kKeys, d}, 1.0 / 8.0, rank);
  set_bound_kernel(saved);
  if (b.kernel() != kernel) {
    state.SkipWithError((std::string("runs ") + bound_kernel_name(b.kernel()) + " at this rank").c_str());
    return;
  }
  const std::size_t w = b.width(), groups = (kKeys + ScoreBounds<float>::kGroupKeys - 1) / ScoreBounds<float>::kGroupKeys;
  std::vector<float> qt(kRows * w), out(kSlab * kKeys), group_max(kSlab * groups);
  for (std::size_t i = 0; i < kRows; ++i) b.prepare_query(q.data() + i * d, qt.data() + i * w);
  for (auto _ : state) {
    for (std::size_t i = 0; i < kRows; i += kSlab)
      b.bound_block(qt.data() + i * w, kSlab, w, 0, kKeys, out.data(), kKeys, group_max.data(), groups);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kRows * kKeys));
}

}  // namespace

void register_score_bound_benchmarks() {
  for (BoundKernel kernel : {BoundKernel::float32, BoundKernel::int16, BoundKernel::int8, BoundKernel::bf16})
    for (auto [rank, d] : {std::pair<std::size_t, std::size_t>{32, 32}, {64, 64}, {8, 64}, {16, 64}})
      benchmark::RegisterBenchmark((std::string("BM_score_bounds/") + bound_kernel_name(kernel) + "/r:" +
                                    std::to_string(rank) + "/d:" + std::to_string(d) + "/m:8192/threads:1")
                                       .c_str(),
                                   [=](benchmark::State& s) { run_bounds(s, kernel, rank, d); })
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
}

}  // namespace entgraph::bench
