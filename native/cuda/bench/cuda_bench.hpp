// What the GPU benchmarks share: skipping without a GPU, and timing a call
// per iteration with CUDA events (the GPU's own clock, so host-side launch
// overhead between iterations is not counted).
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "entgraph/cuda/device.hpp"

namespace entgraph::cuda {

// Marks the benchmark skipped, saying why, when no CUDA device can be used.
inline bool skip_without_gpu(benchmark::State& state) {
  if (available()) return false;
  state.SkipWithError(("no usable CUDA device: " + unavailable_reason()).c_str());
  return true;
}

// Times fn() per iteration on the default stream, after one untimed call
// (first-launch costs, the shared-memory carve-out, the allocator's pool).
// What fn returns (e.g. a DeviceGraph) is freed after the stop event, outside
// the timed span.
template <class Fn>
void run_timed(benchmark::State& state, Fn fn) {
  if constexpr (std::is_void_v<decltype(fn())>) {
    fn();
  } else {
    auto warm = fn();
    benchmark::DoNotOptimize(warm);
  }
  check(cudaDeviceSynchronize(), "bench: warm-up");
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "bench: cudaEventCreate");
  check(cudaEventCreate(&stop), "bench: cudaEventCreate");
  auto stop_and_wait = [&] {
    check(cudaEventRecord(stop), "bench: cudaEventRecord");
    check(cudaEventSynchronize(stop), "bench: cudaEventSynchronize");
  };
  for (auto _ : state) {
    check(cudaEventRecord(start), "bench: cudaEventRecord");
    if constexpr (std::is_void_v<decltype(fn())>) {
      fn();
      stop_and_wait();
    } else {
      auto result = fn();
      stop_and_wait();
      benchmark::DoNotOptimize(result);
    }
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, start, stop), "bench: cudaEventElapsedTime");
    state.SetIterationTime(static_cast<double>(ms) / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace entgraph::cuda
