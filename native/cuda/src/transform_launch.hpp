// The GPU transforms' launches on arguments already checked, shared by the
// device-memory entry points (transforms.cu) and the backend's host-memory
// kernels (transforms_backend.cu).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "entgraph/transforms.hpp"

namespace entgraph::cuda::detail {

// The longest row a kernel takes (its index is an int).
inline constexpr std::size_t kMaxTransformCols = INT_MAX;

// Whether the GPU has a kernel for the kind (its row of transform_list.hpp says kCudaTransform).
bool transform_supported(TransformKind kind);

void launch_transform_forward(const std::string& op, const Transform& t, const float* scores, float* probs,
                              const std::uint8_t* mask, std::size_t rows, std::size_t cols, cudaStream_t stream);
void launch_transform_backward(const std::string& op, const Transform& t, const float* probs,
                               const float* grad_probs, float* grad_scores, std::size_t rows, std::size_t cols,
                               cudaStream_t stream);

}  // namespace entgraph::cuda::detail
