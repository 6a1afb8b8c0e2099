// entgraph CUDA benchmarks: batched attention on tensor cores (issue 30's
// shapes), bfloat16 in and out, Q, K, V ~ N(0, 1), the default scale
// 1/sqrt(d), n = m, d = dv:
//   cuda_batched_attention/<transform>/B:<b>/H:<hq>/KV:<hkv>/n:<n>/d:<d>/causal:<c>
// for softmax and entmax15, d in {64, 128}, (B, Hq, Hkv) in {(1, 16, 16),
// (4, 32, 8)}, n in {4096, 16384}, and n = 65536 for (1, 16, 16); causal and
// not. Each iteration is one call on the default stream timed with CUDA
// events (manual time); the workspace is allocated once outside the timed
// span. The `flops` counter is 4 B Hq n m d (halved under a causal mask) per
// second: the dense products' work, whatever the kernel skips, so TFLOP/s
// compare with the chip's bf16 peak and with other kernels' on one scale.
// The gradients (batched_attention_backward, the forward recomputed inside):
//   cuda_batched_attention_backward/<transform>/B:1/H:16/KV:16/n:<n>/d:<d>/causal:1
// n in {4096, 16384}, bfloat16 gradients, grad_out ~ N(0, 1); its `flops`
// counter is 2.5 times the forward's (the five dense products of a fused
// backward against the forward's two), as FlashAttention's papers count.
// Without a GPU every benchmark reports an error instead of a time.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "entgraph/batched_attention.hpp"
#include "entgraph/cuda/batched_attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "cuda_bench.hpp"

namespace entgraph::cuda {
namespace {

// `count` bfloat16 values ~ N(0, 1): a block of 2^24 random values from the
// seed, repeated (copied on the device) to fill large tensors quickly.
DeviceArray<std::uint16_t> device_gaussian(std::size_t count, std::uint64_t seed) {
  const std::size_t block = std::min<std::size_t>(count, std::size_t{1} << 24);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> host(block);
  for (std::uint16_t& x : host) x = float_to_bfloat16(normal(rng));
  DeviceArray<std::uint16_t> d(count, "bench_batched_attention");
  copy_to_device(d.data(), host.data(), block * sizeof(std::uint16_t), "bench_batched_attention");
  for (std::size_t at = block; at < count; at += block)
    check(cudaMemcpy(d.data() + at, d.data(), std::min(block, count - at) * sizeof(std::uint16_t),
                     cudaMemcpyDeviceToDevice),
          "bench_batched_attention");
  return d;
}

// One shape's inputs and output, made once and kept (the largest run to
// hundreds of MB; shapes are visited in order, so only one is kept).
struct Tensors {
  std::size_t batch, heads, kv_heads, n, d;
  DeviceArray<std::uint16_t> q, k, v, out;
  Tensors(std::size_t b, std::size_t h, std::size_t kv, std::size_t rows, std::size_t dim)
      : batch(b),
        heads(h),
        kv_heads(kv),
        n(rows),
        d(dim),
        q(device_gaussian(b * h * rows * dim, 44)),
        k(device_gaussian(b * kv * rows * dim, 45)),
        v(device_gaussian(b * kv * rows * dim, 46)),
        out(b * h * rows * dim, "bench_batched_attention") {}
};

Tensors& tensors(std::size_t b, std::size_t h, std::size_t kv, std::size_t n, std::size_t d) {
  static std::unique_ptr<Tensors> kept;
  if (!kept || std::tie(kept->batch, kept->heads, kept->kv_heads, kept->n, kept->d) != std::tie(b, h, kv, n, d)) {
    kept.reset();  // free the previous shape first
    kept = std::make_unique<Tensors>(b, h, kv, n, d);
  }
  return *kept;
}

// The dense products' work of the forward: 4 B Hq n m d, halved under a causal mask.
double forward_flops(std::size_t b, std::size_t h, std::size_t n, std::size_t d, bool causal) {
  return 4.0 * static_cast<double>(b * h) * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(d) *
         (causal ? 0.5 : 1.0);
}

void BM_batched(benchmark::State& state, Transform t, std::size_t b, std::size_t h, std::size_t kv, std::size_t n,
                std::size_t d, bool causal) {
  if (skip_without_gpu(state)) return;
  try {
    Tensors& x = tensors(b, h, kv, n, d);
    const ConstBatchedTensor q = ConstBatchedTensor::bhnd(x.q.data(), DType::bfloat16, b, h, n, d);
    const ConstBatchedTensor k = ConstBatchedTensor::bhnd(x.k.data(), DType::bfloat16, b, kv, n, d);
    const ConstBatchedTensor v = ConstBatchedTensor::bhnd(x.v.data(), DType::bfloat16, b, kv, n, d);
    const BatchedTensor out = BatchedTensor::bhnd(x.out.data(), DType::bfloat16, b, h, n, d);
    BatchedAttentionOptions o;
    o.transform = t;
    o.causal = causal;
    const std::size_t bytes = batched_attention_workspace_bytes(q, k, o);
    DeviceArray<unsigned char> workspace(bytes, "bench_batched_attention (workspace)");
    run_timed(state, [&] { batched_attention_forward(q, k, v, out, o, workspace.data(), bytes); });
    state.counters["flops"] =
        benchmark::Counter(forward_flops(b, h, n, d, causal), benchmark::Counter::kIsIterationInvariantRate);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// grad_out and the three gradients of the kept shape (tensors()), made once.
struct Gradients {
  std::size_t size;
  DeviceArray<std::uint16_t> grad_out, grad_q, grad_k, grad_v;
  explicit Gradients(const Tensors& x)
      : size(x.q.size()),
        grad_out(device_gaussian(x.q.size(), 47)),
        grad_q(x.q.size(), "bench_batched_attention"),
        grad_k(x.k.size(), "bench_batched_attention"),
        grad_v(x.v.size(), "bench_batched_attention") {}
};

void BM_batched_backward(benchmark::State& state, Transform t, std::size_t b, std::size_t h, std::size_t kv,
                         std::size_t n, std::size_t d, bool causal) {
  if (skip_without_gpu(state)) return;
  try {
    Tensors& x = tensors(b, h, kv, n, d);
    static std::unique_ptr<Gradients> kept;
    if (!kept || kept->size != x.q.size()) {
      kept.reset();
      kept = std::make_unique<Gradients>(x);
    }
    const auto in = [&](const DeviceArray<std::uint16_t>& a, std::size_t heads) {
      return ConstBatchedTensor::bhnd(a.data(), DType::bfloat16, b, heads, n, d);
    };
    const auto grad = [&](DeviceArray<std::uint16_t>& a, std::size_t heads) {
      return BatchedTensor::bhnd(a.data(), DType::bfloat16, b, heads, n, d);
    };
    BatchedAttentionOptions o;
    o.transform = t;
    o.causal = causal;
    run_timed(state, [&] {
      cuda::batched_attention_backward(in(x.q, h), in(x.k, kv), in(x.v, kv), in(kept->grad_out, h),
                                       grad(kept->grad_q, h), grad(kept->grad_k, kv), grad(kept->grad_v, kv), o);
    });
    state.counters["flops"] =
        benchmark::Counter(2.5 * forward_flops(b, h, n, d, causal), benchmark::Counter::kIsIterationInvariantRate);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

const bool kRegistered = [] {
  struct Heads {
    std::size_t b, h, kv;
  };
  const std::pair<const char*, Transform> transforms[] = {{"softmax", Transform::softmax()},
                                                          {"entmax15", Transform::entmax15()}};
  for (const Heads& heads : {Heads{1, 16, 16}, Heads{4, 32, 8}})
    for (std::size_t n : {4096, 16384, 65536}) {
      if (n == 65536 && heads.b != 1) continue;  // the long sequence for one head count only
      for (std::size_t d : {64, 128})
        for (bool causal : {false, true})
          for (const auto& [tname, t] : transforms) {
            const std::string name = std::string("cuda_batched_attention/") + tname + "/B:" + std::to_string(heads.b) +
                                     "/H:" + std::to_string(heads.h) + "/KV:" + std::to_string(heads.kv) +
                                     "/n:" + std::to_string(n) + "/d:" + std::to_string(d) +
                                     "/causal:" + (causal ? "1" : "0");
            benchmark::RegisterBenchmark(name.c_str(), BM_batched, t, heads.b, heads.h, heads.kv, n, d, causal)
                ->UseManualTime()
                ->Unit(benchmark::kMillisecond);
          }
    }
  for (std::size_t n : {4096, 16384})
    for (std::size_t d : {64, 128})
      for (const auto& [tname, t] : transforms) {
        const std::string name = std::string("cuda_batched_attention_backward/") + tname +
                                 "/B:1/H:16/KV:16/n:" + std::to_string(n) + "/d:" + std::to_string(d) + "/causal:1";
        benchmark::RegisterBenchmark(name.c_str(), BM_batched_backward, t, 1, 16, 16, n, d, true)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
  return true;
}();

}  // namespace
}  // namespace entgraph::cuda
