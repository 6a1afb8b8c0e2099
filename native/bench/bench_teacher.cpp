// entgraph benchmarks: the shipped teachers' forward pass (what the browser
// demo reruns on every keystroke): 256 bytes of held-out text, and a short
// 64-byte prompt, one thread and all threads. The target is <= 20 ms for 256
// bytes on one core. heads_only: the page's forward (weights recorded, logits
// skipped).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "entgraph/model.hpp"

namespace entgraph::bench {
namespace {

std::string heldout_text(std::size_t bytes) {
  std::ifstream f(std::string(ENTGRAPH_SOURCE_DIR) + "/data/heldout.txt", std::ios::binary);
  std::string text(std::istreambuf_iterator<char>(f), {});
  return text.substr(0, bytes);
}

void run_forward(benchmark::State& state, const Teacher& teacher, std::size_t bytes, std::size_t threads,
                 const ForwardOptions& options) {
  const ScopedRuntime runtime(threads, default_isa());
  const std::string text = heldout_text(bytes);
  if (text.size() != bytes) {
    state.SkipWithError("data/heldout.txt is shorter than the benchmark's text");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(teacher.forward(text, options).queries.data());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

}  // namespace

void register_teacher_benchmarks() {
  for (const char* kind : {"causal", "masked"}) {
    const std::string dir = std::string(ENTGRAPH_SOURCE_DIR) + "/data/teacher-" + kind;
    // Loaded once and kept for the process: benchmarks run after registration.
    static std::vector<std::unique_ptr<Teacher>> teachers;
    try {
      teachers.push_back(std::make_unique<Teacher>(Teacher::load(dir)));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "entgraph_bench: teacher benchmarks skipped: %s\n", e.what());
      continue;
    }
    const Teacher* teacher = teachers.back().get();
    for (std::size_t bytes : {64, 256})
      for (std::size_t t : thread_counts())
        benchmark::RegisterBenchmark(("BM_teacher_forward/" + std::string(kind) + "/bytes:" + std::to_string(bytes) +
                                      "/threads:" + std::to_string(t))
                                         .c_str(),
                                     [teacher, bytes, t](benchmark::State& s) { run_forward(s, *teacher, bytes, t, {}); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    // What the demo page runs on a keystroke: every head's weights, no logits.
    ForwardOptions heads;
    heads.attention_probs = true;
    heads.logits = false;
    for (std::size_t t : thread_counts())
      benchmark::RegisterBenchmark(
          ("BM_teacher_forward/" + std::string(kind) + "/bytes:256/threads:" + std::to_string(t) + "/heads_only").c_str(),
          [teacher, heads, t](benchmark::State& s) { run_forward(s, *teacher, 256, t, heads); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace entgraph::bench
