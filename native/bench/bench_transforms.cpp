// Benchmarks of every row-wise transform, forward and backward.
//
// One list of cases (kCases) drives every family, as the tests' transform list
// drives theirs:
//   BM_forward/<case>/n:<n>/threads:<t>       n in kSizes, t in thread_counts()
//   BM_backward/<case>/n:<n>/threads:<t>
//   BM_backward_params/<case>/n:<n>/threads:<t>   also dL/dalpha, dL/dspan or
//                                                 dL/dupper (optional outputs)
//   BM_isa_forward/<case>/n:4096/isa:<isa>/threads:1   cases with SIMD kernels,
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

namespace entgraph::bench {
namespace {

using Matrix = MatrixView<float>;
using CMatrix = ConstMatrix<float>;

constexpr std::size_t kSizes[] = {64, 512, 4096, 32768};
constexpr std::size_t kIsaSize = 4096;
constexpr double kSpanRamp = 32.0;

enum class Extra { none, span, upper };

// The inputs of one benchmark: rows x n scores, and the extra arrays of the
// transforms that need them.
struct Workload {
  std::size_t rows = 0;
  std::size_t n = 0;
  const float* scores = nullptr;
  // adaptive_span: every row is the query at the last position of n keys.
  // Row i sits at position query_offset + i = n - 1 + i, so span_i = n/4 + i
  // gives every row the same window: the last n/4 keys at full weight, a
  // 32-key ramp, and zero weight beyond.
  AdaptiveSpan shape;
  std::vector<float> span, grad_span;
  // constrained_*: upper bound 2/n on every entry (the bounds sum to 2).
  std::vector<float> upper, grad_upper;
  std::vector<float> grad_alpha;  // entmax: one dL/dalpha per row

  CMatrix scores_view() const { return {scores, rows, n}; }
  CMatrix upper_view() const { return {upper.data(), rows, n}; }
  Matrix grad_upper_view() { return {grad_upper.data(), rows, n}; }
};

struct TransformCase {
  std::string name;  // as it appears in the benchmark name
  Extra extra = Extra::none;
  bool simd = false;  // has a kernel per ISA (constrained_* have none)
  std::function<std::string(std::size_t n)> params;
  std::function<void(Workload&, Matrix probs)> forward;
  std::function<void(Workload&, CMatrix probs, CMatrix grad_probs, Matrix grad_scores)> backward;
  // The backward that also returns the gradient of the transform's own
  // parameters (alpha, span, upper bounds); empty for transforms without any.
  std::function<void(Workload&, CMatrix probs, CMatrix grad_probs, Matrix grad_scores)> backward_params;
};

std::size_t topk_k(std::size_t n) { return std::max<std::size_t>(1, n / 8); }

std::string no_params(std::size_t) { return ""; }

// alpha_text spells alpha in the name: entmax_alpha<alpha_text>.
TransformCase entmax_case(double alpha, const std::string& alpha_text) {
  TransformCase c;
  c.name = "entmax_alpha" + alpha_text;
  c.simd = true;
  c.params = [alpha_text](std::size_t) { return "alpha=" + alpha_text; };
  c.forward = [alpha](Workload& w, Matrix p) { entmax<float>(w.scores_view(), p, alpha); };
  c.backward = [alpha](Workload&, CMatrix p, CMatrix dp, Matrix dz) { entmax_backward<float>(p, dp, dz, alpha); };
  c.backward_params = [alpha](Workload& w, CMatrix p, CMatrix dp, Matrix dz) {
    entmax_backward<float>(p, dp, dz, alpha, w.grad_alpha.data());
  };
  return c;
}

const std::vector<TransformCase>& cases() {
  static const std::vector<TransformCase> list = [] {
    std::vector<TransformCase> v;
    {
      TransformCase c;
      c.name = "softmax";
      c.simd = true;
      c.params = no_params;
      c.forward = [](Workload& w, Matrix p) { softmax<float>(w.scores_view(), p); };
      c.backward = [](Workload&, CMatrix p, CMatrix dp, Matrix dz) { softmax_backward<float>(p, dp, dz); };
      v.push_back(c);
    }
    {
      TransformCase c;
      c.name = "sparsemax";
      c.simd = true;
      c.params = no_params;
      c.forward = [](Workload& w, Matrix p) { sparsemax<float>(w.scores_view(), p); };
      c.backward = [](Workload&, CMatrix p, CMatrix dp, Matrix dz) { sparsemax_backward<float>(p, dp, dz); };
      v.push_back(c);
    }
    {
      TransformCase c;
      c.name = "entmax15";
      c.simd = true;
      c.params = no_params;
      c.forward = [](Workload& w, Matrix p) { entmax15<float>(w.scores_view(), p); };
      c.backward = [](Workload&, CMatrix p, CMatrix dp, Matrix dz) { entmax15_backward<float>(p, dp, dz); };
      v.push_back(c);
    }
    // General alpha; 1.5 through this path too, to compare it with the exact
    // entmax15 kernel. 1.25 = 1 + 1/4 and 1.5 may take special paths (integer
    // powers, square roots), so 1.4 stands for a learned alpha that has none.
    v.push_back(entmax_case(1.25, "1.25"));
    v.push_back(entmax_case(1.4, "1.4"));
    v.push_back(entmax_case(1.5, "1.5"));
    v.push_back(entmax_case(1.75, "1.75"));
    v.push_back(entmax_case(3.0, "3"));
    {
      TransformCase c;
      c.name = "topk_softmax";
      c.simd = true;
      c.params = [](std::size_t n) { return "k=n/8=" + std::to_string(topk_k(n)); };
      c.forward = [](Workload& w, Matrix p) { topk_softmax<float>(w.scores_view(), p, topk_k(w.n)); };
      c.backward = [](Workload&, CMatrix p, CMatrix dp, Matrix dz) { topk_softmax_backward<float>(p, dp, dz); };
      v.push_back(c);
      // k = 8: the selection at the other end, a handful out of the row.
      c.name = "topk_softmax_k8";
      c.params = [](std::size_t) { return std::string("k=8"); };
      c.forward = [](Workload& w, Matrix p) { topk_softmax<float>(w.scores_view(), p, 8); };
      v.push_back(c);
    }
    {
      TransformCase c;
      c.name = "adaptive_span";
      c.extra = Extra::span;
      c.simd = true;
      c.params = [](std::size_t n) { return "span=n/4=" + std::to_string(n / 4) + ",ramp=32"; };
      c.forward = [](Workload& w, Matrix p) { adaptive_span<float>(w.scores_view(), w.span.data(), w.shape, p); };
      c.backward = [](Workload& w, CMatrix p, CMatrix dp, Matrix dz) {
        adaptive_span_backward<float>(p, dp, w.span.data(), w.shape, dz);
      };
      c.backward_params = [](Workload& w, CMatrix p, CMatrix dp, Matrix dz) {
        adaptive_span_backward<float>(p, dp, w.span.data(), w.shape, dz, w.grad_span.data());
      };
      v.push_back(c);
    }
    {
      TransformCase c;
      c.name = "constrained_softmax";
      c.extra = Extra::upper;
      c.params = [](std::size_t) { return std::string("upper=2/n"); };
      c.forward = [](Workload& w, Matrix p) { constrained_softmax<float>(w.scores_view(), w.upper_view(), p); };
      c.backward = [](Workload& w, CMatrix p, CMatrix dp, Matrix dz) {
        constrained_softmax_backward<float>(p, w.upper_view(), dp, dz);
      };
      c.backward_params = [](Workload& w, CMatrix p, CMatrix dp, Matrix dz) {
        constrained_softmax_backward<float>(p, w.upper_view(), dp, dz, w.grad_upper_view());
      };
      v.push_back(c);
    }
    {
      TransformCase c;
      c.name = "constrained_sparsemax";
      c.extra = Extra::upper;
      c.params = [](std::size_t) { return std::string("upper=2/n"); };
      c.forward = [](Workload& w, Matrix p) { constrained_sparsemax<float>(w.scores_view(), w.upper_view(), p); };
      c.backward = [](Workload& w, CMatrix p, CMatrix dp, Matrix dz) {
        constrained_sparsemax_backward<float>(p, w.upper_view(), dp, dz);
      };
      c.backward_params = [](Workload& w, CMatrix p, CMatrix dp, Matrix dz) {
        constrained_sparsemax_backward<float>(p, w.upper_view(), dp, dz, w.grad_upper_view());
      };
      v.push_back(c);
    }
    return v;
  }();
  return list;
}

Workload make_workload(const TransformCase& c, std::size_t n) {
  Workload w;
  w.n = n;
  w.rows = std::max<std::size_t>(1, kElementsPerIteration / n);
  w.scores = gaussian(w.rows * n, kSeedScores).data();
  if (c.extra == Extra::span) {
    w.shape.ramp = kSpanRamp;
    w.shape.query_offset = static_cast<std::ptrdiff_t>(n) - 1;
    w.span.resize(w.rows);
    for (std::size_t i = 0; i < w.rows; ++i) w.span[i] = static_cast<float>(n / 4 + i);
    w.grad_span.resize(w.rows);
  }
  if (c.backward_params) w.grad_alpha.resize(w.rows);
  if (c.extra == Extra::upper) {
    w.upper.assign(w.rows * n, 2.0f / static_cast<float>(n));
    w.grad_upper.resize(w.rows * n);
  }
  return w;
}

void finish(benchmark::State& state, const TransformCase& c, const Workload& w) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(w.rows * w.n));
  state.SetLabel(c.params(w.n));
}

void run_forward(benchmark::State& state, const TransformCase& c, std::size_t n, std::size_t threads, CpuIsa isa) {
  ScopedRuntime runtime(threads, isa);
  Workload w = make_workload(c, n);
  std::vector<float> probs(w.rows * n);
  Matrix p{probs.data(), w.rows, n};
  try {
    c.forward(w, p);  // untimed warm-up; a throwing op skips the benchmark
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    c.forward(w, p);
    benchmark::DoNotOptimize(probs.data());
    benchmark::ClobberMemory();
  }
  finish(state, c, w);
}

// with_params: time backward_params instead of backward.
void run_backward(benchmark::State& state, const TransformCase& c, std::size_t n, std::size_t threads, CpuIsa isa,
                  bool with_params = false) {
  const auto& backward = with_params ? c.backward_params : c.backward;
  ScopedRuntime runtime(threads, isa);
  Workload w = make_workload(c, n);
  std::vector<float> probs(w.rows * n), grad_scores(w.rows * n);
  Matrix p{probs.data(), w.rows, n};
  CMatrix dp{gaussian(w.rows * n, kSeedGrad).data(), w.rows, n};
  Matrix dz{grad_scores.data(), w.rows, n};
  try {
    c.forward(w, p);
    backward(w, p, dp, dz);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    backward(w, p, dp, dz);
    benchmark::DoNotOptimize(grad_scores.data());
    benchmark::ClobberMemory();
  }
  finish(state, c, w);
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
      for (const auto& c : cases()) {
        add("BM_forward/" + c.name + suffix,
            [&c, n, t](benchmark::State& s) { run_forward(s, c, n, t, default_isa()); });
        add("BM_backward/" + c.name + suffix,
            [&c, n, t](benchmark::State& s) { run_backward(s, c, n, t, default_isa()); });
        if (c.backward_params)
          add("BM_backward_params/" + c.name + suffix,
              [&c, n, t](benchmark::State& s) { run_backward(s, c, n, t, default_isa(), true); });
      }
    }
  }
  for (CpuIsa isa : available_cpu_isas()) {
    const std::string suffix =
        "/n:" + std::to_string(kIsaSize) + "/isa:" + cpu_isa_name(isa) + "/threads:1";
    for (const auto& c : cases()) {
      if (!c.simd) continue;
      add("BM_isa_forward/" + c.name + suffix,
          [&c, isa](benchmark::State& s) { run_forward(s, c, kIsaSize, 1, isa); });
      add("BM_isa_backward/" + c.name + suffix,
          [&c, isa](benchmark::State& s) { run_backward(s, c, kIsaSize, 1, isa); });
    }
  }
}

}  // namespace entgraph::bench
