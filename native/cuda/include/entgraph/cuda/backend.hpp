// entgraph: choosing CPU or GPU at run time.
//
// The same host-memory calls as the core's, with a Device first: Device::cpu
// runs the core (the default everywhere), Device::cuda uploads the inputs,
// runs the CUDA kernels and downloads the result. With Device::cuda and no
// usable GPU, a call throws cuda::CudaError saying why; nothing falls back
// silently, so a benchmark or a test never measures the wrong device.
#pragma once

#include <string>

#include "entgraph/attention.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/matrix_view.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph {

enum class Device { cpu, cuda };

// "cpu" or "cuda"; anything else throws entgraph::Error naming the device.
Device parse_device(const std::string& name);
const char* device_name(Device device);

void transform_forward(Device device, const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs,
                       MaskView mask = {});
void transform_backward(Device device, const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                        MatrixView<float> grad_scores);
// Dense attention (on the GPU: the fused kernel).
void attention_forward(Device device, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                       MatrixView<float> out, const AttentionOptions<float>& options);
// Attention on a graph. The GPU computes the graph's rows only (the CPU's
// fast mode, GraphAttentionMode::fast); certify and exact modes are CPU features, so asking the
// GPU for them is an error.
void graph_attention_forward(Device device, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                             const Graph& graph, MatrixView<float> out, const GraphAttentionOptions<float>& options);
GraphMetrics compare_graphs(Device device, const Graph& predicted, const Graph& gold, bool causal);

}  // namespace entgraph
