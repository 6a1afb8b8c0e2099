// entgraph: the CUDA library as the core's Device::cuda.
//
//   #include <entgraph/cuda/backend.hpp>
//   entgraph::cuda::register_backend();            // once, at startup
//   entgraph::transform_forward(entgraph::Device::cuda, entgraph::Transform::entmax15(), scores, probs);
//
// After register_backend(), the core's Device-taking calls run here on host
// memory (upload, kernels, download): transform_forward/backward,
// attention_forward (fused), graph_attention_forward (GraphAttentionMode::fast),
// compare_graphs, and Predictor::predict for the Sparsefinder methods and
// lowrank-threshold. The
// core checks their arguments first, with the CPU's messages; this library
// adds only what the GPU cannot do (head dimensions other than 32, 64 and
// 128; transforms with extra inputs). Without a usable GPU,
// device_available(Device::cuda) is false and those calls throw
// entgraph::Error saying why; nothing falls back to the CPU.
#pragma once

namespace entgraph::cuda {

// Registers this library's kernel table for Device::cuda (idempotent,
// thread-safe). Never throws for a missing GPU: the table's availability
// check reports that when an op asks.
void register_backend();

}  // namespace entgraph::cuda
