// Benchmarks of dense single-head attention, forward and backward:
//   BM_attention_forward/<transform>/n:<n>/d:64/threads:<t>
//   BM_attention_backward/<transform>/n:<n>/d:64/threads:<t>
// with n = m (self-attention, no mask), d = dv = 64, Q, K, V ~ N(0, 1) and the
// default scale 1/sqrt(d), so the scores are again roughly N(0, 1).
// items/s counts score entries (n * m); `flops` counts the matrix products
// (forward 4nmd; backward 10nmd: it recomputes S, then dP, dV, dQ, dK).
#include <benchmark/benchmark.h>

#include <exception>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "entgraph/attention.hpp"
#include "support/cases.hpp"

namespace entgraph::bench {
namespace {

using Matrix = MatrixView<float>;
using CMatrix = ConstMatrix<float>;

constexpr std::size_t kSizes[] = {512, 2048, 8192};
constexpr std::size_t kHeadDim = 64;

struct Head {
  std::size_t n, d;
  CMatrix q, k, v;
  explicit Head(std::size_t size)
      : n(size),
        d(kHeadDim),
        q(gaussian(size * kHeadDim, kSeedQuery).data(), size, kHeadDim),
        k(gaussian(size * kHeadDim, kSeedKey).data(), size, kHeadDim),
        v(gaussian(size * kHeadDim, kSeedValue).data(), size, kHeadDim) {}
};

void finish(benchmark::State& state, const Head& h, double flops_per_iteration) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(h.n * h.n));
  state.counters["flops"] = benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

void run_forward(benchmark::State& state, const Transform& t, std::size_t n, std::size_t threads) {
  ScopedRuntime runtime(threads, default_isa());
  const Head h(n);
  std::vector<float> out_data(n * h.d);
  Matrix out{out_data.data(), n, h.d};
  AttentionOptions<float> options;
  options.transform = t;
  try {
    attention_forward<float>(h.q, h.k, h.v, out, options);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    attention_forward<float>(h.q, h.k, h.v, out, options);
    benchmark::DoNotOptimize(out_data.data());
    benchmark::ClobberMemory();
  }
  finish(state, h, 4.0 * double(n) * double(n) * double(h.d));
}

void run_backward(benchmark::State& state, const Transform& t, std::size_t n, std::size_t threads) {
  ScopedRuntime runtime(threads, default_isa());
  const Head h(n);
  CMatrix grad_out{gaussian(n * h.d, kSeedGrad).data(), n, h.d};
  std::vector<float> gq(n * h.d), gk(n * h.d), gv(n * h.d);
  Matrix grad_q{gq.data(), n, h.d}, grad_k{gk.data(), n, h.d}, grad_v{gv.data(), n, h.d};
  AttentionOptions<float> options;
  options.transform = t;
  try {
    attention_backward<float>(h.q, h.k, h.v, grad_out, grad_q, grad_k, grad_v, options);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    attention_backward<float>(h.q, h.k, h.v, grad_out, grad_q, grad_k, grad_v, options);
    benchmark::DoNotOptimize(gq.data());
    benchmark::DoNotOptimize(gk.data());
    benchmark::DoNotOptimize(gv.data());
    benchmark::ClobberMemory();
  }
  finish(state, h, 10.0 * double(n) * double(n) * double(h.d));
}

}  // namespace

void register_attention_benchmarks() {
  for (std::size_t n : kSizes) {
    for (std::size_t t : thread_counts()) {
      const std::string suffix =
          "/n:" + std::to_string(n) + "/d:" + std::to_string(kHeadDim) + "/threads:" + std::to_string(t);
      // The kBenchAttention cases of tests/support/cases.hpp.
      for (const cases::TransformCase& c : cases::transform_cases(cases::kBenchAttention)) {
        const Transform tr = c.transform(n);
        benchmark::RegisterBenchmark(("BM_attention_forward/" + std::string(c.name) + suffix).c_str(),
                                     [tr, n, t](benchmark::State& s) { run_forward(s, tr, n, t); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("BM_attention_backward/" + std::string(c.name) + suffix).c_str(),
                                     [tr, n, t](benchmark::State& s) { run_backward(s, tr, n, t); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace entgraph::bench
