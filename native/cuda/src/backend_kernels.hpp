// The CUDA library's kernels for the core's op layer (BackendKernels,
// entgraph/backend.hpp): host memory in and out, arguments already validated
// by the core. Each lives in the .cu of its concept; backend.cu registers
// them as Device::cuda's table. What they still refuse is what the GPU
// cannot do (a head dimension, a transform with extra inputs).
#pragma once

#include "entgraph/backend.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/device.hpp"

namespace entgraph::cuda::detail {

// The calling thread's stream for Device::cuda (set_device_stream,
// entgraph/device.hpp; null: the default stream), where the kernels on
// device memory enqueue their work.
inline cudaStream_t current_stream() { return static_cast<cudaStream_t>(device_stream(Device::cuda)); }
// The end of a kernel on device memory: without a stream of the caller's,
// wait until the outputs are written (with one, the caller's stream orders
// what follows).
inline void finish_on_device(cudaStream_t stream) {
  if (stream == nullptr) synchronize(nullptr);
}

// The head dimensions (d and dv) the fused attention kernels are built for: 32, 64, 128.
bool supported_head_dim(std::size_t d);

void host_transform_forward(const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs, MaskView mask);
void host_transform_backward(const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                             MatrixView<float> grad_scores);
// The same on device memory (Memory::device): no copies; the values are
// scanned here (the core does not read device memory); rows must be
// contiguous (stride == cols).
void device_transform_forward(const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs, MaskView mask);
void device_transform_backward(const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                               MatrixView<float> grad_scores);
void host_attention_forward(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v, MatrixView<float> out,
                            const AttentionOptions<float>& options);
// The same on device memory (Memory::device): q, k, v, out and key_padding
// there, rows contiguous; the values are scanned here.
void device_attention_forward(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v, MatrixView<float> out,
                              const AttentionOptions<float>& options);
void host_batched_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                   BatchedTensor out, const BatchedAttentionOptions& options);
// The same on device memory (Memory::device), lengths included: no copies;
// the lengths are read and the values scanned here.
void device_batched_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                      BatchedTensor out, const BatchedAttentionOptions& options);
// Its gradients on host tensors (16-bit dtypes; float32 is refused).
void host_batched_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                     ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                     BatchedTensor grad_v, const BatchedAttentionOptions& options);
// The same on device memory (Memory::device), lengths included: no copies;
// the lengths are read and the values (grad_out's too) scanned here.
void device_batched_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                       ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                       BatchedTensor grad_v, const BatchedAttentionOptions& options);
// Block-sparse attention on host tensors and graph (16-bit, 64 x 64 blocks).
void host_block_sparse_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                         const BlockGraph& graph, BatchedTensor out,
                                         const BatchedAttentionOptions& options);
void host_block_sparse_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                          const BlockGraph& graph, ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                          BatchedTensor grad_k, BatchedTensor grad_v,
                                          const BatchedAttentionOptions& options);
void host_graph_attention_forward(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                  const Graph& graph, MatrixView<float> out, const AttentionOptions<float>& options);
// The same on device memory (Memory::device): q, k, v, out and key_padding
// there, rows contiguous; the graph is copied, the values scanned here.
void device_graph_attention_forward(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                    const Graph& graph, MatrixView<float> out, const AttentionOptions<float>& options);
// Exact mode on host memory (exact_graph_attention.cu).
void host_graph_attention_exact(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v, const Graph& graph,
                                MatrixView<float> out, const AttentionOptions<float>& options,
                                GraphAttentionReport* report);
// The same on device memory: q, k, v, out and key_padding there, rows
// contiguous; the values are scanned here, the graph copied.
void device_graph_attention_exact(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                  const Graph& graph, MatrixView<float> out, const AttentionOptions<float>& options,
                                  GraphAttentionReport* report);
GraphMetrics host_compare_graphs(const Graph& predicted, const Graph& gold, bool causal);
Graph host_sparsefinder_pattern(const SparsefinderHead& head, ConstMatrix<float> q, ConstMatrix<float> k,
                                bool causal);
// The same with q and k in device memory (contiguous rows), not copied.
Graph device_sparsefinder_pattern(const SparsefinderHead& head, ConstMatrix<float> q, ConstMatrix<float> k,
                                  bool causal);
// lowrank-threshold's graph (lowrank_threshold.cu), q and k in host memory
// or, on_device, the GPU's own (contiguous rows).
Graph host_lowrank_threshold_pattern(const LowRankThresholdHead& head, ConstMatrix<float> q, ConstMatrix<float> k,
                                     bool causal);
Graph device_lowrank_threshold_pattern(const LowRankThresholdHead& head, ConstMatrix<float> q, ConstMatrix<float> k,
                                       bool causal);

}  // namespace entgraph::cuda::detail
