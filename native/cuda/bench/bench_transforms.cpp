// GPU benchmarks of the row-wise transforms, forward and backward:
//   cuda_transform_forward/<case>/n:<n>     rows = 4096 rows of n scores
//   cuda_transform_backward/<case>/n:<n>    on p = forward(scores), dp ~ N(0, 1)
//   cuda_transform_forward_checked/<case>/n:<n>   with the NaN/+inf scan and
//                                                 its host round trip
// Each iteration is timed with CUDA events around the launch (manual time);
// the unchecked entry points keep host synchronisation out of the timed
// region. The "rows/s" counter is computed from the event times. Without a
// usable GPU every benchmark is skipped with the reason.
#include <benchmark/benchmark.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/cases.hpp"  // the one list of transform cases (tests/support/cases.hpp)
#include "entgraph/cuda/device.hpp"
#include "entgraph/cuda/transforms.hpp"

namespace entgraph::cuda {
namespace {

constexpr std::size_t kRows = 4096;

enum class Mode { forward, forward_checked, backward };

std::vector<float> gaussian(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// Events created once per benchmark run, destroyed on every exit path.
struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    check(cudaEventCreate(&start), "bench: cudaEventCreate");
    check(cudaEventCreate(&stop), "bench: cudaEventCreate");
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

void run_case(benchmark::State& state, Transform t, Mode mode) {
  if (!available()) {
    state.SkipWithError(("no usable CUDA device: " + unavailable_reason()).c_str());
    return;
  }
  const std::size_t n = static_cast<std::size_t>(state.range(0)), count = kRows * n;
  try {
    const std::vector<float> host_scores = gaussian(count, 1), host_grad = gaussian(count, 2);
    DeviceArray<float> scores(host_scores.data(), count, "bench: scores");
    DeviceArray<float> grad(host_grad.data(), count, "bench: grad");
    DeviceArray<float> probs(count, "bench: probs"), out(count, "bench: out");
    transform_forward(t, scores.data(), probs.data(), kRows, n);
    synchronize();
    Events events;
    double seconds = 0.0;
    for (auto _ : state) {
      check(cudaEventRecord(events.start), "bench: cudaEventRecord");
      switch (mode) {
        case Mode::forward: transform_forward_unchecked(t, scores.data(), out.data(), kRows, n); break;
        case Mode::forward_checked: transform_forward(t, scores.data(), out.data(), kRows, n); break;
        case Mode::backward: transform_backward_unchecked(t, probs.data(), grad.data(), out.data(), kRows, n); break;
      }
      check(cudaEventRecord(events.stop), "bench: cudaEventRecord");
      check(cudaEventSynchronize(events.stop), "bench: cudaEventSynchronize");
      float ms = 0.0f;
      check(cudaEventElapsedTime(&ms, events.start, events.stop), "bench: cudaEventElapsedTime");
      state.SetIterationTime(ms * 1e-3);
      seconds += ms * 1e-3;
    }
    synchronize();
    const double rows_done = static_cast<double>(kRows) * static_cast<double>(state.iterations());
    state.counters["rows/s"] = seconds > 0 ? rows_done / seconds : 0.0;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

const bool kRegistered = [] {
  const std::pair<Mode, const char*> modes[] = {{Mode::forward, "cuda_transform_forward"},
                                                {Mode::backward, "cuda_transform_backward"},
                                                {Mode::forward_checked, "cuda_transform_forward_checked"}};
  for (const auto& [mode, prefix] : modes) {
    for (const cases::TransformCase& c : cases::transform_cases(cases::kBenchCuda)) {
      const Transform t = c.transform();
      const Mode m = mode;
      benchmark::RegisterBenchmark((std::string(prefix) + "/" + c.name).c_str(),
                                   [t, m](benchmark::State& state) { run_case(state, t, m); })
          ->ArgName("n")
          ->Arg(512)
          ->Arg(4096)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  return true;
}();

}  // namespace
}  // namespace entgraph::cuda
