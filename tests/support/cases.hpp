// THE list of transform and attention cases: every conformance test (the
// float64 reference, every CPU instruction set, CUDA, WebAssembly) and every
// transform benchmark (entgraph_bench, entgraph_transform_timing, the CUDA
// benchmarks) takes its transforms from here, so adding a transform or a
// parameter value is one line below (docs/TESTING.md).
//
// A case is a transform kind with its parameters and a name. The name is the
// benchmarks' (BM_forward/<name>/n:64/threads:1, tools/bench_report.py and
// docs/PERFORMANCE.md rely on it) and what test output shows. The conformance
// tests run every case on every target that supports it
// (support/targets.hpp); tags choose the cases of the other consumers.
//
// Only the public core API: the benchmarks, the WebAssembly test build and the
// CUDA test binary include this header too.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/matrix_view.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph::cases {

// Who takes a case besides the conformance tests (which take all of them).
enum Tag : unsigned {
  kBasic = 1u << 0,           // the transform tests' sweep: invariants, layout, threads, adversarial rows,
                              // backward, graph attention (transforms/transform_support.hpp: basic_transforms)
  kPaths = 1u << 1,           // one case per solver path, for the slower suites: attention, losses
  kExtreme = 1u << 2,         // alpha near 1 and far above 2: the backward and adversarial tests add them
  kBench = 1u << 3,           // entgraph_bench: BM_forward, BM_backward, BM_backward_params, BM_isa_*
  kBenchAttention = 1u << 4,  // entgraph_bench: BM_attention_forward, BM_attention_backward
  kTiming = 1u << 5,          // entgraph_transform_timing: native against WebAssembly (tools/bench_wasm.mjs)
  kBenchCuda = 1u << 6,       // the CUDA benchmarks (native/cuda/bench)
};

// Adaptive span and the constrained kinds take more than scores (ExtraInputs).
inline bool needs_extra_inputs(TransformKind kind) { return transform_info(kind).extra_inputs(); }

struct TransformCase {
  std::string name;
  TransformKind kind;
  double alpha = 0.0;  // entmax
  std::size_t k = 0;   // topk_softmax: k; 0 means a row's eighth, max(1, n / 8)
  unsigned tags = 0;

  bool has(unsigned tag) const { return (tags & tag) != 0; }
  bool extra_inputs() const { return needs_extra_inputs(kind); }
  bool constrained() const { return transform_info(kind).family == TransformFamily::constrained; }
  // Whether the backward can also return the gradient of the transform's own
  // parameters (entmax: dL/dalpha, adaptive span: dL/dspan, constrained: dL/dupper).
  bool param_grads() const { return transform_info(kind).parameter == TransformParameter::alpha || extra_inputs(); }
  // Whether the core has a kernel per instruction set (the constrained kinds have none).
  bool simd() const { return !constrained(); }

  // The transform on rows of n entries (n matters only to top-k with k = 0;
  // without n that case throws std::logic_error).
  Transform transform(std::size_t n = 0) const {
    if (transform_info(kind).parameter == TransformParameter::k && k == 0) {
      if (n == 0) throw std::logic_error(name + ": k depends on the row length");
      return Transform::of(kind, alpha, std::max<std::size_t>(1, n / 8));
    }
    return Transform::of(kind, alpha, k);
  }

  // Its parameters as the benchmarks label them: "alpha=1.25", "k=n/8=512",
  // "span=n/4=16,ramp=32", "upper=2/n"; "" for the kinds without any.
  std::string label(std::size_t n) const {
    char alpha_text[32];
    std::snprintf(alpha_text, sizeof alpha_text, "%g", alpha);
    const TransformInfo& row = transform_info(kind);
    switch (row.parameter) {
      case TransformParameter::alpha: return std::string("alpha=") + alpha_text;
      case TransformParameter::k: return k ? "k=" + std::to_string(k) : "k=n/8=" + std::to_string(transform(n).k);
      case TransformParameter::none: break;
    }
    switch (row.family) {
      case TransformFamily::span: return "span=n/4=" + std::to_string(n / 4) + ",ramp=32";
      case TransformFamily::constrained: return "upper=2/n";
      default: return "";
    }
  }
};

// The list. Names: the kind, entmax_alpha<alpha as %g>, topk_softmax_k<k>
// (topk_softmax alone: k = n / 8). The order is the benchmarks' registration
// order.
inline const std::vector<TransformCase>& transform_cases() {
  using K = TransformKind;
  static const std::vector<TransformCase> list = {
      {"softmax", K::softmax, 0, 0, kBasic | kPaths | kBench | kBenchAttention | kTiming | kBenchCuda},
      {"sparsemax", K::sparsemax, 0, 0, kBasic | kPaths | kBench | kBenchAttention | kTiming | kBenchCuda},
      {"entmax15", K::entmax15, 0, 0, kBasic | kPaths | kBench | kBenchAttention | kTiming | kBenchCuda},
      // General alpha. 1 is softmax through the entmax kind; 1 + 1/4 and 1.5
      // take the integer-power path, 1.4 and 1.75 stand for a learned alpha
      // that has none (exp/log), 2 is sparsemax through the entmax kind, and
      // above 2 the threshold is solved in double.
      {"entmax_alpha1", K::entmax, 1.0, 0, 0},
      {"entmax_alpha1.0001", K::entmax, 1.0001, 0, kBasic},
      {"entmax_alpha1.01", K::entmax, 1.01, 0, kExtreme},
      {"entmax_alpha1.1", K::entmax, 1.1, 0, kExtreme},
      {"entmax_alpha1.25", K::entmax, 1.25, 0, kBasic | kBench | kTiming | kBenchCuda},
      {"entmax_alpha1.4", K::entmax, 1.4, 0, kPaths | kBench},
      {"entmax_alpha1.5", K::entmax, 1.5, 0, kBasic | kBench},
      {"entmax_alpha1.75", K::entmax, 1.75, 0, kBench | kTiming | kBenchCuda},
      {"entmax_alpha2", K::entmax, 2.0, 0, kBasic},
      {"entmax_alpha2.5", K::entmax, 2.5, 0, kPaths},
      {"entmax_alpha3", K::entmax, 3.0, 0, kBasic | kBench | kBenchCuda},
      {"entmax_alpha6", K::entmax, 6.0, 0, kExtreme},
      {"entmax_alpha10", K::entmax, 10.0, 0, kExtreme},
      {"topk_softmax", K::topk_softmax, 0, 0, kBench},
      {"topk_softmax_k1", K::topk_softmax, 0, 1, kBasic},
      {"topk_softmax_k5", K::topk_softmax, 0, 5, kPaths},
      {"topk_softmax_k8", K::topk_softmax, 0, 8, kBasic | kBench | kBenchCuda},
      {"topk_softmax_k32", K::topk_softmax, 0, 32, kTiming},
      {"adaptive_span", K::adaptive_span, 0, 0, kPaths | kBench},
      {"constrained_softmax", K::constrained_softmax, 0, 0, kPaths | kBench},
      {"constrained_sparsemax", K::constrained_sparsemax, 0, 0, kPaths | kBench},
  };
  return list;
}

// The cases with any of `tags`, in list order.
inline std::vector<TransformCase> transform_cases(unsigned tags) {
  std::vector<TransformCase> out;
  for (const TransformCase& c : transform_cases())
    if (c.has(tags)) out.push_back(c);
  return out;
}

inline const TransformCase& transform_case(const std::string& name) {
  for (const TransformCase& c : transform_cases())
    if (name == c.name) return c;
  throw std::invalid_argument("no transform case named '" + name + "' in tests/support/cases.hpp");
}

// ---------------------------------------------------------------------------
// Running a case on the CPU, through each kind's own public function
// (softmax<T>, entmax<T>, adaptive_span<T>, ...), not transform_forward, so
// that a defect in the generic entry point cannot hide one in the direct ones.

// The extra inputs of rows x n scores, the same for tests and benchmarks:
//   adaptive_span: row i is the query at position n - 1 + i with span
//     n/4 + i and a 32-key ramp, so every row sees the same window: the last
//     n/4 keys at full weight, the ramp, and zero weight beyond;
//   constrained_*: the upper bound 2/n on every entry (the bounds sum to 2).
// Every value is exact in float.
template <class T>
struct ExtraInputs {
  std::size_t rows = 0, n = 0;
  AdaptiveSpan shape;
  std::vector<T> span;   // adaptive_span: one per row
  std::vector<T> upper;  // constrained_*: rows x n
  ConstMatrix<T> upper_view() const { return {upper.data(), rows, n}; }
};

template <class T>
ExtraInputs<T> extra_inputs(const TransformCase& c, std::size_t rows, std::size_t n) {
  ExtraInputs<T> x;
  x.rows = rows;
  x.n = n;
  if (c.kind == TransformKind::adaptive_span) {
    x.shape.ramp = 32.0;
    x.shape.query_offset = static_cast<std::ptrdiff_t>(n) - 1;
    for (std::size_t i = 0; i < rows; ++i) x.span.push_back(static_cast<T>(n / 4 + i));
  }
  // Rounded to float, so that float and float64 runs see the same bounds.
  if (c.constrained()) x.upper.assign(rows * n, static_cast<T>(static_cast<float>(2.0 / static_cast<double>(n))));
  return x;
}

// Optional outputs of the backward: the gradients of the transform's own
// parameters (TransformCase::param_grads()); null or empty: not computed.
template <class T>
struct ParamGrads {
  T* alpha = nullptr;   // entmax: one per row
  T* span = nullptr;    // adaptive_span: one per row
  MatrixView<T> upper;  // constrained_*: rows x n
};

// `x` may be empty for the kinds without extra inputs.
template <class T>
void forward(const Transform& t, const ExtraInputs<T>& x, ConstMatrix<T> scores, MatrixView<T> probs,
             MaskView mask = {}) {
  switch (t.kind) {
    case TransformKind::softmax:
      return softmax<T>(scores, probs, mask);
    case TransformKind::sparsemax:
      return sparsemax<T>(scores, probs, mask);
    case TransformKind::entmax15:
      return entmax15<T>(scores, probs, mask);
    case TransformKind::entmax:
      return entmax<T>(scores, probs, t.alpha, mask);
    case TransformKind::topk_softmax:
      return topk_softmax<T>(scores, probs, t.k, mask);
    case TransformKind::adaptive_span:
      return adaptive_span<T>(scores, x.span.data(), x.shape, probs, mask);
    case TransformKind::constrained_softmax:
      return constrained_softmax<T>(scores, x.upper_view(), probs, mask);
    case TransformKind::constrained_sparsemax:
      return constrained_sparsemax<T>(scores, x.upper_view(), probs, mask);
  }
}

template <class T>
void backward(const Transform& t, const ExtraInputs<T>& x, ConstMatrix<T> probs, ConstMatrix<T> grad_probs,
              MatrixView<T> grad_scores, const ParamGrads<T>& params = {}) {
  switch (t.kind) {
    case TransformKind::softmax:
      return softmax_backward<T>(probs, grad_probs, grad_scores);
    case TransformKind::sparsemax:
      return sparsemax_backward<T>(probs, grad_probs, grad_scores);
    case TransformKind::entmax15:
      return entmax15_backward<T>(probs, grad_probs, grad_scores);
    case TransformKind::entmax:
      return entmax_backward<T>(probs, grad_probs, grad_scores, t.alpha, params.alpha);
    case TransformKind::topk_softmax:
      return topk_softmax_backward<T>(probs, grad_probs, grad_scores);
    case TransformKind::adaptive_span:
      return adaptive_span_backward<T>(probs, grad_probs, x.span.data(), x.shape, grad_scores, params.span);
    case TransformKind::constrained_softmax:
      return constrained_softmax_backward<T>(probs, x.upper_view(), grad_probs, grad_scores, params.upper);
    case TransformKind::constrained_sparsemax:
      return constrained_sparsemax_backward<T>(probs, x.upper_view(), grad_probs, grad_scores, params.upper);
  }
}

template <class T>
void forward(const TransformCase& c, const ExtraInputs<T>& x, ConstMatrix<T> scores, MatrixView<T> probs,
             MaskView mask = {}) {
  forward<T>(c.transform(scores.cols), x, scores, probs, mask);
}

template <class T>
void backward(const TransformCase& c, const ExtraInputs<T>& x, ConstMatrix<T> probs, ConstMatrix<T> grad_probs,
              MatrixView<T> grad_scores, const ParamGrads<T>& params = {}) {
  backward<T>(c.transform(probs.cols), x, probs, grad_probs, grad_scores, params);
}

// ---------------------------------------------------------------------------
// Attention: a transform case on one head of n queries and m keys (head
// dimension d, value dimension dv), with or without the causal mask and key
// padding. The tests build the inputs (attention/attention_support.hpp's
// make_problem: spans, bounds and padding of their own).

struct AttentionCase {
  std::string name;  // "<transform>/<causal|full>/<padded|unpadded>/n:<n>/m:<m>/d:<d>/dv:<dv>"
  TransformCase transform;
  bool causal = false, padded = false;
  std::size_t n = 0, m = 0, d = 0, dv = 0;
};

// The kPaths transforms x causal x key padding x four shapes: d = 40 with
// dv = 37 and 21 exercises full SIMD tiles, single batches and scalar column
// tails on every instruction set; the two with d and dv in {32, 64, 128} are
// the head dimensions the CUDA kernels take, with m over two 64-key tiles;
// n > m leaves causal queries with no visible key.
inline const std::vector<AttentionCase>& attention_cases() {
  static const std::vector<AttentionCase> list = [] {
    struct Shape {
      std::size_t n, m, d, dv;
    };
    const Shape shapes[] = {{37, 53, 40, 37}, {53, 37, 40, 21}, {45, 130, 64, 32}, {130, 45, 32, 128}};
    std::vector<AttentionCase> v;
    for (const Shape& s : shapes)
      for (const TransformCase& t : transform_cases(kPaths))
        for (bool causal : {false, true})
          for (bool padded : {false, true}) {
            std::string name = t.name + (causal ? "/causal" : "/full") + (padded ? "/padded" : "/unpadded") +
                               "/n:" + std::to_string(s.n) + "/m:" + std::to_string(s.m) + "/d:" + std::to_string(s.d) +
                               "/dv:" + std::to_string(s.dv);
            v.push_back({std::move(name), t, causal, padded, s.n, s.m, s.d, s.dv});
          }
    return v;
  }();
  return list;
}

}  // namespace entgraph::cases
