// The targets of the conformance tests: every CPU instruction set this build
// has and this machine runs (the float kernels, forced with IsaScope), and
// each device whose backend is registered and usable (CUDA in the CUDA test
// binary on a machine with a GPU). Each target runs the cases of
// support/cases.hpp that it supports, compared with the float64 reference.
//
// ENTGRAPH_TEST_TARGETS=<name>[,<name>...] (e.g. "cuda" or "sse2,avx2")
// restricts the targets; naming one that is not available fails the tests
// instead of passing them on nothing.
//
// Only the public core API, so that the CUDA test binary and the WebAssembly
// build compile the conformance tests as they are.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/backend.hpp"
#include "entgraph/device.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/transforms.hpp"
#include "support.hpp"
#include "support/cases.hpp"

namespace entgraph::test {

struct Target {
  std::string name;  // "reference", "sse2", "avx2", "avx512", "simd128" or "cuda"
  Device device = Device::cpu;
  CpuIsa isa = CpuIsa::reference;  // Device::cpu: the instruction set of the float kernels
};

inline std::vector<Target> available_targets() {
  std::vector<Target> all;
  for (CpuIsa isa : available_cpu_isas()) all.push_back({cpu_isa_name(isa), Device::cpu, isa});
  if (device_available(Device::cuda)) all.push_back({device_name(Device::cuda), Device::cuda, CpuIsa::reference});
  return all;
}

// available_targets(), or those ENTGRAPH_TEST_TARGETS names. Throws
// std::invalid_argument for a name that is not available.
inline std::vector<Target> conformance_targets() {
  const std::vector<Target> all = available_targets();
  const char* only = std::getenv("ENTGRAPH_TEST_TARGETS");
  if (only == nullptr || *only == '\0') return all;
  std::vector<Target> out;
  const std::string list = only;
  for (std::size_t start = 0; start <= list.size();) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, comma - start);
    start = comma + 1;
    bool found = false;
    for (const Target& t : all)
      if (t.name == name) {
        out.push_back(t);
        found = true;
      }
    if (!found) {
      std::string names;
      for (const Target& t : all) names += (names.empty() ? "" : ", ") + t.name;
      std::string why;
      if (name == device_name(Device::cuda) && !device_available(Device::cuda, &why)) names += "; cuda: " + why;
      throw std::invalid_argument("ENTGRAPH_TEST_TARGETS: target '" + name +
                                  "' is not available here (available: " + names + ")");
    }
  }
  return out;
}

enum class Op { forward, backward };

// What the target runs: the CPU every case; a device what its backend says
// it supports (device_supports, entgraph/backend.hpp's BackendKernels::supports).
inline bool supports(const Target& target, const cases::TransformCase& c, Op op = Op::forward) {
  OpArguments a;
  a.transform = c.transform(64);  // the kind and its parameter; 64: top-k's k when it depends on n
  return device_supports(target.device, op == Op::forward ? BackendOp::transform_forward : BackendOp::transform_backward,
                         a);
}

inline bool supports(const Target& target, const cases::AttentionCase& c, Op op = Op::forward) {
  OpArguments a;
  a.transform = c.transform.transform(c.m);
  a.d = c.d;
  a.dv = c.dv;
  return device_supports(target.device, op == Op::forward ? BackendOp::attention_forward : BackendOp::attention_backward,
                         a);
}

// Whether the target returns what the CPU's float API adds to the device
// calls: the parameter gradients of a transform, attention's weights P, its
// block_rows option.
inline bool full_float_api(const Target& target) { return target.device == Device::cpu; }

// The float forward and backward of a case on a target. CPU: the kind's own
// float function under the target's instruction set; a device: the core's
// Device-taking call (params must then be empty).
inline void target_forward(const Target& target, const cases::TransformCase& c, const cases::ExtraInputs<float>& extra,
                           ConstMatrix<float> scores, MatrixView<float> probs, MaskView mask = {}) {
  if (target.device != Device::cpu)
    return entgraph::transform_forward(target.device, c.transform(scores.cols), scores, probs, mask);
  IsaScope scope(target.isa);
  cases::forward<float>(c, extra, scores, probs, mask);
}

inline void target_backward(const Target& target, const cases::TransformCase& c, const cases::ExtraInputs<float>& extra,
                            ConstMatrix<float> probs, ConstMatrix<float> grad_probs, MatrixView<float> grad_scores,
                            const cases::ParamGrads<float>& params = {}) {
  if (target.device != Device::cpu) {
    if (params.alpha || params.span || !params.upper.empty())
      throw std::invalid_argument("target_backward: device " + target.name + " returns no parameter gradients");
    return entgraph::transform_backward(target.device, c.transform(probs.cols), probs, grad_probs, grad_scores);
  }
  IsaScope scope(target.isa);
  cases::backward<float>(c, extra, probs, grad_probs, grad_scores, params);
}

// Dense attention on a target; probs only where full_float_api(target).
inline void target_attention_forward(const Target& target, ConstMatrix<float> q, ConstMatrix<float> k,
                                     ConstMatrix<float> v, MatrixView<float> out,
                                     const AttentionOptions<float>& options, MatrixView<float> probs = {}) {
  if (target.device != Device::cpu) {
    if (!probs.empty())
      throw std::invalid_argument("target_attention_forward: device " + target.name + " returns no weights");
    return entgraph::attention_forward(target.device, q, k, v, out, options);
  }
  IsaScope scope(target.isa);
  attention_forward<float>(q, k, v, out, options, probs);
}

inline void target_attention_backward(const Target& target, ConstMatrix<float> q, ConstMatrix<float> k,
                                      ConstMatrix<float> v, ConstMatrix<float> grad_out, MatrixView<float> grad_q,
                                      MatrixView<float> grad_k, MatrixView<float> grad_v,
                                      const AttentionOptions<float>& options,
                                      AttentionParamGrads<float>* params = nullptr) {
  if (target.device != Device::cpu) {
    if (params)
      throw std::invalid_argument("target_attention_backward: device " + target.name +
                                  " returns no parameter gradients");
    return entgraph::attention_backward(target.device, q, k, v, grad_out, grad_q, grad_k, grad_v, options);
  }
  IsaScope scope(target.isa);
  attention_backward<float>(q, k, v, grad_out, grad_q, grad_k, grad_v, options, params);
}

// Attention outputs are convex combinations of V's rows: the largest
// difference from the float64 attention allowed, relative to max(1, max |O|).
// CPU kernels: 2e-5. CUDA sums a row's weights in a different order, over
// tiles, and renormalises them (native/cuda/internal/entgraph/cuda/attention.hpp): 1e-4.
inline double attention_tolerance(const Target& target) { return target.device == Device::cpu ? 2e-5 : 1e-4; }

}  // namespace entgraph::test
