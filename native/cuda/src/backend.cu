#include "entgraph/cuda/backend.hpp"

#include "entgraph/cuda/attention.hpp"
#include "entgraph/cuda/graph_attention.hpp"
#include "entgraph/cuda/predictors.hpp"
#include "entgraph/cuda/transforms.hpp"
#include "entgraph/error.hpp"

namespace entgraph {

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  throw Error("device: unknown device (got '" + name + "', expected cpu or cuda)");
}

const char* device_name(Device device) { return device == Device::cuda ? "cuda" : "cpu"; }

void transform_forward(Device device, const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs,
                       MaskView mask) {
  if (device == Device::cuda) return cuda::transform_forward(t, scores, probs, mask);
  transform_forward<float>(t, scores, probs, mask);
}

void transform_backward(Device device, const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                        MatrixView<float> grad_scores) {
  if (device == Device::cuda) return cuda::transform_backward(t, probs, grad_probs, grad_scores);
  transform_backward<float>(t, probs, grad_probs, grad_scores);
}

void attention_forward(Device device, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                       MatrixView<float> out, const AttentionOptions<float>& options) {
  if (device == Device::cuda) return cuda::attention_forward(q, k, v, out, options);
  attention_forward<float>(q, k, v, out, options);
}

void graph_attention_forward(Device device, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                             const Graph& graph, MatrixView<float> out, const GraphAttentionOptions<float>& options) {
  if (device == Device::cuda) {
    if (options.mode != GraphAttentionMode::fast)
      throw Error("graph_attention_forward: options.mode certify and exact are CPU features (use "
                  "GraphAttentionMode::fast for device cuda)");
    return cuda::graph_attention_forward(q, k, v, graph, out, options.attention);
  }
  graph_attention_forward<float>(q, k, v, graph, out, options);
}

GraphMetrics compare_graphs(Device device, const Graph& predicted, const Graph& gold, bool causal) {
  if (device == Device::cuda) return cuda::compare_graphs(predicted, gold, causal);
  return entgraph::compare_graphs(predicted, gold, causal);
}

}  // namespace entgraph
