// Benchmarks of batched attention (batched_attention.hpp) on the CPU:
//   BM_batched_attention_forward/<transform>/dtype:<f32|bf16>/B:<B>/H:<Hq>/Hkv:<Hkv>/n:<n>/d:64/causal:<0|1>/threads:<t>
//   BM_batched_attention_backward/... (the same names; gradients of q, k and
//   v for grad_out ~ N(0, 1), at n = 1024)
//   BM_block_sparse_attention_{forward,backward}/entmax15/.../keep:0.05 (the
//   (1, 16, 16) shapes, causal, on 64 x 64 blocks: each block row keeps the
//   diagonal block and 5% of the others at random; flops count the kept
//   pairs)
// with n = m, d = dv = 64, contiguous [B, H, n, d] tensors, Q, K, V ~ N(0, 1)
// (rounded to bfloat16 for dtype:bf16) and the default scale 1/sqrt(d). The
// shapes are the GPU targets of issue 30 scaled down to a CPU: (B, H) =
// (1, 16) at n = 1024 and 4096, and (4, 32) with 8 key/value heads at
// n = 1024. float32 and bfloat16 run in the same process, so their ratio
// compares like with like. items/s counts visible (query, key) pairs over
// all heads; `flops` counts 4 d per visible pair for the forward (Q K^T and
// P V) and 10 d for the backward (it recomputes Q K^T, then dO V^T, dS K,
// dS^T Q and P^T dO).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "entgraph/batched_attention.hpp"
#include "entgraph/block_sparse_attention.hpp"

namespace entgraph::bench {
namespace {

constexpr std::size_t kHeadDim = 64;

struct Shape {
  std::size_t batch, heads, kv_heads, n;
};
constexpr Shape kShapes[] = {{1, 16, 16, 1024}, {1, 16, 16, 4096}, {4, 32, 8, 1024}};

// Q, K, V, out, grad_out and the three gradients of one shape in one dtype;
// the values are float32 samples (bench_common.hpp's gaussian), rounded for
// bfloat16.
struct Tensors {
  static constexpr int kCount = 8;  // q, k, v, out, grad_out, grad_q, grad_k, grad_v
  DType dtype;
  std::vector<float> f32[kCount];
  std::vector<std::uint16_t> b16[kCount];
  ConstBatchedTensor q, k, v, grad_out;
  BatchedTensor out, grad_q, grad_k, grad_v;

  Tensors(const Shape& s, DType t) : dtype(t) {
    const std::size_t query = s.batch * s.heads * s.n * kHeadDim, key = s.batch * s.kv_heads * s.n * kHeadDim;
    const std::size_t counts[kCount] = {query, key, key, query, query, query, key, key};
    // Inputs get samples (grad_out: the upstream gradients' seed); outputs start as zeros.
    const std::uint64_t seeds[kCount] = {kSeedQuery, kSeedKey, kSeedValue, 0, kSeedGrad, 0, 0, 0};
    void* data[kCount];
    for (int x = 0; x < kCount; ++x) {
      const bool input = seeds[x] != 0;
      if (t == DType::float32) {
        f32[x] = input ? gaussian(counts[x], seeds[x]) : std::vector<float>(counts[x]);
        data[x] = f32[x].data();
      } else {
        b16[x].resize(counts[x]);
        if (input) {
          const std::vector<float>& g = gaussian(counts[x], seeds[x]);
          for (std::size_t i = 0; i < counts[x]; ++i) b16[x][i] = float_to_bfloat16(g[i]);
        }
        data[x] = b16[x].data();
      }
    }
    q = ConstBatchedTensor::bhnd(data[0], t, s.batch, s.heads, s.n, kHeadDim);
    k = ConstBatchedTensor::bhnd(data[1], t, s.batch, s.kv_heads, s.n, kHeadDim);
    v = ConstBatchedTensor::bhnd(data[2], t, s.batch, s.kv_heads, s.n, kHeadDim);
    out = BatchedTensor::bhnd(data[3], t, s.batch, s.heads, s.n, kHeadDim);
    grad_out = ConstBatchedTensor::bhnd(data[4], t, s.batch, s.heads, s.n, kHeadDim);
    grad_q = BatchedTensor::bhnd(data[5], t, s.batch, s.heads, s.n, kHeadDim);
    grad_k = BatchedTensor::bhnd(data[6], t, s.batch, s.kv_heads, s.n, kHeadDim);
    grad_v = BatchedTensor::bhnd(data[7], t, s.batch, s.kv_heads, s.n, kHeadDim);
  }
};

// 64 x 64 blocks of a causal n x n head shared by every head: the diagonal
// block and a fraction `keep` of the blocks below it, drawn with a fixed seed.
BlockGraph causal_blocks(std::size_t n, double keep) {
  constexpr std::size_t kBlock = 64;
  std::mt19937_64 rng(kSeedScores);
  std::bernoulli_distribution kept(keep);
  BlockGraph g;
  g.queries = g.keys = n;
  g.query_block = g.key_block = kBlock;
  g.offsets.assign(1, 0);
  for (std::size_t row = 0; row < g.query_blocks(); ++row) {
    for (std::size_t j = 0; j < row; ++j)
      if (kept(rng)) g.blocks.push_back(static_cast<std::uint32_t>(j));
    g.blocks.push_back(static_cast<std::uint32_t>(row));
    g.offsets.push_back(g.blocks.size());
  }
  return g;
}

// Visible (query, key) pairs of one head: causal, and within the graph's
// blocks if there is one.
double visible_pairs(std::size_t n, bool causal, const BlockGraph* graph) {
  if (graph == nullptr) return causal ? double(n) * double(n + 1) / 2 : double(n) * double(n);
  double pairs = 0;
  for (std::size_t row = 0; row < graph->query_blocks(); ++row)
    for (const std::uint32_t* p = graph->row_begin(row); p != graph->row_end(row); ++p)
      for (std::size_t i = row * graph->query_block; i < std::min(n, (row + 1) * graph->query_block); ++i) {
        const std::size_t j0 = std::size_t{*p} * graph->key_block, j1 = std::min(n, j0 + graph->key_block);
        pairs += double(j1 <= i + 1 ? j1 - j0 : (i + 1 > j0 ? i + 1 - j0 : 0));
      }
  return pairs;
}

void run(benchmark::State& state, const Shape& s, const Transform& t, DType dtype, bool causal, std::size_t threads,
         bool backward, const BlockGraph* graph = nullptr) {
  ScopedRuntime runtime(threads, default_isa());
  const Tensors x(s, dtype);
  BatchedAttentionOptions options;
  options.transform = t;
  options.causal = causal;
  auto call = [&] {
    if (graph != nullptr && backward)
      block_sparse_attention_backward(x.q, x.k, x.v, *graph, x.grad_out, x.grad_q, x.grad_k, x.grad_v, options);
    else if (graph != nullptr)
      block_sparse_attention_forward(x.q, x.k, x.v, *graph, x.out, options);
    else if (backward)
      batched_attention_backward(x.q, x.k, x.v, x.grad_out, x.grad_q, x.grad_k, x.grad_v, options);
    else
      batched_attention_forward(x.q, x.k, x.v, x.out, options);
  };
  try {
    call();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    call();
    benchmark::DoNotOptimize(x.out.data);
    benchmark::DoNotOptimize(x.grad_q.data);
    benchmark::ClobberMemory();
  }
  const double per_head = visible_pairs(s.n, causal, graph);
  const double pairs = per_head * double(s.batch * s.heads);
  state.SetItemsProcessed(static_cast<std::int64_t>(double(state.iterations()) * pairs));
  state.counters["flops"] = benchmark::Counter((backward ? 10.0 : 4.0) * double(kHeadDim) * pairs,
                                               benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

void register_batched_attention_benchmarks() {
  // All threads only: the batched call exists to spread heads over them.
  const std::size_t threads = thread_counts().back();
  const struct {
    const char* name;
    Transform transform;
  } transforms[] = {{"softmax", Transform::softmax()}, {"entmax15", Transform::entmax15()}};
  for (bool backward : {false, true})
    for (const Shape& s : kShapes) {
      if (backward && s.n > 1024) continue;  // about 2.5 times the forward: n = 1024 shows the ratio
      for (const auto& tr : transforms)
        for (bool causal : {false, true})
          for (DType dtype : {DType::float32, DType::bfloat16}) {
            const std::string name = std::string(backward ? "BM_batched_attention_backward/" : "BM_batched_attention_forward/") +
                                     tr.name + "/dtype:" + (dtype == DType::float32 ? "f32" : "bf16") +
                                     "/B:" + std::to_string(s.batch) + "/H:" + std::to_string(s.heads) +
                                     "/Hkv:" + std::to_string(s.kv_heads) + "/n:" + std::to_string(s.n) +
                                     "/d:" + std::to_string(kHeadDim) + "/causal:" + (causal ? "1" : "0") +
                                     "/threads:" + std::to_string(threads);
            const Transform t = tr.transform;
            benchmark::RegisterBenchmark(name.c_str(),
                                         [s, t, dtype, causal, threads, backward](benchmark::State& st) {
                                           run(st, s, t, dtype, causal, threads, backward);
                                         })
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
          }
    }
  // Block-sparse attention at 95% block sparsity beside the dense runs above.
  static const BlockGraph graphs[] = {causal_blocks(kShapes[0].n, 0.05), causal_blocks(kShapes[1].n, 0.05)};
  for (bool backward : {false, true})
    for (std::size_t x = 0; x < 2; ++x)
      for (DType dtype : {DType::float32, DType::bfloat16}) {
        const Shape s = kShapes[x];
        const BlockGraph* g = &graphs[x];
        const std::string name = std::string(backward ? "BM_block_sparse_attention_backward" : "BM_block_sparse_attention_forward") +
                                 "/entmax15/dtype:" + (dtype == DType::float32 ? "f32" : "bf16") +
                                 "/B:1/H:" + std::to_string(s.heads) + "/Hkv:" + std::to_string(s.kv_heads) +
                                 "/n:" + std::to_string(s.n) + "/d:" + std::to_string(kHeadDim) +
                                 "/causal:1/keep:0.05/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [s, dtype, threads, backward, g](benchmark::State& st) {
                                       run(st, s, Transform::entmax15(), dtype, true, threads, backward, g);
                                     })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
}

}  // namespace entgraph::bench
