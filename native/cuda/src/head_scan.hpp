// The scan of batched attention's heads in device memory
// (head_scan.cu): what the core's check_batched_attention_values
// (entgraph/backend.hpp) decides from, found on the GPU so that nothing but
// one small record per head crosses to the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "entgraph/backend.hpp"

namespace entgraph::cuda::detail {

// One HeadScan per head of q, k and v in the core's order (q's
// (b, h), k's (b, g), v's (b, g)), over each head's valid rows: the first
// query_lengths[b] / key_lengths[b] (host copies, clamped to [0, rows];
// null: all), then, given grad_out (q's dtype, v's width), one per head of
// grad_out ((b, h), its first query_lengths[b] rows) as the backward's
// check wants. The tensors are device memory, shapes checked by the core.
// Waits for the scan on `stream`.
std::vector<HeadScan> scan_batched_heads(const char* op, ConstBatchedTensor q, ConstBatchedTensor k,
                                         ConstBatchedTensor v, const std::int32_t* query_lengths,
                                         const std::int32_t* key_lengths, cudaStream_t stream,
                                         const ConstBatchedTensor* grad_out = nullptr);

// A float32 matrix with contiguous rows as a (1, 1, rows, cols) tensor.
inline ConstBatchedTensor one_head(ConstMatrix<float> x) {
  return ConstBatchedTensor{x.data, DType::float32, 1, 1, x.rows, x.cols, x.rows * x.cols, x.rows * x.cols, x.cols};
}

// A one-head attention call on device memory (dense or graph attention):
// throws unless q, k, v, out and key_padding (if set) are the GPU's
// (`aligned`: 16-byte aligned too; messages name `pointer_op`) and q, k, v
// and out have contiguous rows (unsupported); then scans q, k and v on
// `stream` (and waits for the scan).
std::vector<HeadScan> scan_one_head(const char* op, const char* pointer_op, ConstMatrix<float> q,
                                    ConstMatrix<float> k, ConstMatrix<float> v, MatrixView<float> out,
                                    const std::uint8_t* key_padding, bool aligned, cudaStream_t stream);

}  // namespace entgraph::cuda::detail
