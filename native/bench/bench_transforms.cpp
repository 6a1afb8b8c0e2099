// Benchmarks of every row-wise transform, forward and backward.
//
// The kBench cases of the one list of transform cases (tests/support/cases.hpp,
// which also drives the conformance tests) drive every family:
//   BM_forward/<case>/n:<n>/threads:<t>       n in kSizes, t in thread_counts()
//   BM_backward/<case>/n:<n>/threads:<t>
//   BM_backward_params/<case>/n:<n>/threads:<t>   also dL/dalpha, dL/dspan or
//                                                 dL/dupper (optional outputs)
//   BM_isa_forward/<case>/n:4096/isa:<isa>/threads:1   cases with SIMD kernels (simd()),
//   BM_isa_backward/...                                every available ISA
// Each iteration transforms kElementsPerIteration elements (rows = 2^20 / n
// rows of n scores); items/s counts elements. Backward benchmarks time the
// backward alone, on p = forward(scores) and dp ~ N(0, 1).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "entgraph/transforms.hpp"
#include "support/cases.hpp"

namespace entgraph::bench {
namespace {

using Matrix = MatrixView<float>;
using CMatrix = ConstMatrix<float>;
using Case = cases::TransformCase;

constexpr std::size_t kSizes[] = {64, 512, 4096, 32768};
constexpr std::size_t kIsaSize = 4096;

// The inputs of one benchmark: rows x n scores, the extra arrays of the
// transforms that need them (support/cases.hpp's ExtraInputs: adaptive span
// with span n/4 + i and a 32-key ramp, constrained with bounds 2/n), and the
// optional parameter gradients.
struct Workload {
  std::size_t rows = 0;
  std::size_t n = 0;
  const float* scores = nullptr;
  cases::ExtraInputs<float> extra;
  std::vector<float> grad_alpha, grad_span, grad_upper;
  cases::ParamGrads<float> params;

  CMatrix scores_view() const { return {scores, rows, n}; }
};

Workload make_workload(const Case& c, std::size_t n) {
  Workload w;
  w.n = n;
  w.rows = std::max<std::size_t>(1, kElementsPerIteration / n);
  w.scores = gaussian(w.rows * n, kSeedScores).data();
  w.extra = cases::extra_inputs<float>(c, w.rows, n);
  if (c.param_grads()) {
    w.grad_alpha.resize(w.rows);
    w.grad_span.resize(w.rows);
    if (c.constrained()) w.grad_upper.resize(w.rows * n);
    w.params = {w.grad_alpha.data(), w.grad_span.data(), {}};
    if (c.constrained()) w.params.upper = {w.grad_upper.data(), w.rows, n};
  }
  return w;
}

void finish(benchmark::State& state, const Case& c, const Workload& w) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(w.rows * w.n));
  state.SetLabel(c.label(w.n));
}

void forward(const Case& c, Workload& w, Matrix p) { cases::forward<float>(c, w.extra, w.scores_view(), p); }

void run_forward(benchmark::State& state, const Case& c, std::size_t n, std::size_t threads, CpuIsa isa) {
  ScopedRuntime runtime(threads, isa);
  Workload w = make_workload(c, n);
  std::vector<float> probs(w.rows * n);
  Matrix p{probs.data(), w.rows, n};
  try {
    forward(c, w, p);  // untimed warm-up; a throwing op skips the benchmark
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    forward(c, w, p);
    benchmark::DoNotOptimize(probs.data());
    benchmark::ClobberMemory();
  }
  finish(state, c, w);
}

// with_params: also the gradients of the transform's own parameters.
void run_backward(benchmark::State& state, const Case& c, std::size_t n, std::size_t threads, CpuIsa isa,
                  bool with_params = false) {
  ScopedRuntime runtime(threads, isa);
  Workload w = make_workload(c, n);
  std::vector<float> probs(w.rows * n), grad_scores(w.rows * n);
  Matrix p{probs.data(), w.rows, n};
  CMatrix dp{gaussian(w.rows * n, kSeedGrad).data(), w.rows, n};
  Matrix dz{grad_scores.data(), w.rows, n};
  const cases::ParamGrads<float> params = with_params ? w.params : cases::ParamGrads<float>{};
  auto backward = [&] { cases::backward<float>(c, w.extra, p, dp, dz, params); };
  try {
    forward(c, w, p);
    backward();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    backward();
    benchmark::DoNotOptimize(grad_scores.data());
    benchmark::ClobberMemory();
  }
  finish(state, c, w);
}

// The cases this suite times; static, since the benchmarks keep references.
const std::vector<Case>& bench_cases() {
  static const std::vector<Case> list = cases::transform_cases(cases::kBench);
  return list;
}

void add(const std::string& name, std::function<void(benchmark::State&)> fn) {
  benchmark::RegisterBenchmark(name.c_str(), [fn](benchmark::State& state) { fn(state); })
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace

void register_transform_benchmarks() {
  // Grouped by (n, threads) so that each transform runs close in time to the
  // softmax forward it is compared with.
  for (std::size_t n : kSizes) {
    for (std::size_t t : thread_counts()) {
      const std::string suffix = "/n:" + std::to_string(n) + "/threads:" + std::to_string(t);
      for (const Case& c : bench_cases()) {
        add("BM_forward/" + std::string(c.name) + suffix,
            [&c, n, t](benchmark::State& s) { run_forward(s, c, n, t, default_isa()); });
        add("BM_backward/" + std::string(c.name) + suffix,
            [&c, n, t](benchmark::State& s) { run_backward(s, c, n, t, default_isa()); });
        if (c.param_grads())
          add("BM_backward_params/" + std::string(c.name) + suffix,
              [&c, n, t](benchmark::State& s) { run_backward(s, c, n, t, default_isa(), true); });
      }
    }
  }
  for (CpuIsa isa : available_cpu_isas()) {
    const std::string suffix =
        "/n:" + std::to_string(kIsaSize) + "/isa:" + cpu_isa_name(isa) + "/threads:1";
    for (const Case& c : bench_cases()) {
      if (!c.simd()) continue;
      add("BM_isa_forward/" + std::string(c.name) + suffix,
          [&c, isa](benchmark::State& s) { run_forward(s, c, kIsaSize, 1, isa); });
      add("BM_isa_backward/" + std::string(c.name) + suffix,
          [&c, isa](benchmark::State& s) { run_backward(s, c, kIsaSize, 1, isa); });
    }
  }
}

}  // namespace entgraph::bench
