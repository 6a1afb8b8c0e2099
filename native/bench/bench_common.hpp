// entgraph benchmarks: shared workload definitions.
//
// Every benchmark runs on float32 scores drawn from N(0, 1) (std::mt19937_64
// with a fixed seed, std::normal_distribution<float>), so runs are comparable
// across builds on one machine. The distribution matters: the cost of the
// sparse transforms depends on how many entries end up in the support, and
// that depends on the spread of the scores relative to their number.
//
// Names follow `<family>/<transform>/<key>:<value>/.../threads:<t>`, which is
// what tools/bench_report.py parses; Google Benchmark appends `/real_time`
// because wall time is the only meaningful time with a thread pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "entgraph/runtime.hpp"

namespace entgraph::bench {

// Elements (rows x n) transformed per benchmark iteration, whatever n is.
inline constexpr std::size_t kElementsPerIteration = std::size_t{1} << 20;

// Seeds of the inputs: scores, upstream gradients, and attention's Q, K, V.
inline constexpr std::uint64_t kSeedScores = 42;
inline constexpr std::uint64_t kSeedGrad = 43;
inline constexpr std::uint64_t kSeedQuery = 44;
inline constexpr std::uint64_t kSeedKey = 45;
inline constexpr std::uint64_t kSeedValue = 46;

// count samples of N(0, 1) from seed; cached, so equal requests share storage.
const std::vector<float>& gaussian(std::size_t count, std::uint64_t seed);

// The thread counts each benchmark runs at: 1 and the library's default
// (ENTGRAPH_NUM_THREADS, else the hardware threads), without duplicates.
const std::vector<std::size_t>& thread_counts();

// The instruction set in use when the process started (cpu_isa()), which
// every benchmark but the per-ISA ones runs with.
CpuIsa default_isa();

// Sets the thread count and the ISA for one benchmark run and restores the
// defaults (default_isa(), the default thread count) when it goes out of scope.
class ScopedRuntime {
 public:
  ScopedRuntime(std::size_t threads, CpuIsa isa);
  ~ScopedRuntime();
  ScopedRuntime(const ScopedRuntime&) = delete;
  ScopedRuntime& operator=(const ScopedRuntime&) = delete;
};

// Registration, one per translation unit; bench_main.cpp calls them.
void register_transform_benchmarks();
void register_attention_benchmarks();
void register_batched_attention_benchmarks();
void register_teacher_benchmarks();
void register_graph_benchmarks();
void register_predict_benchmarks();
void register_score_bound_benchmarks();

}  // namespace entgraph::bench
