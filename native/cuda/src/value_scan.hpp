// The scan of a device array for NaN and infinity that the GPU transforms
// run before their kernels (value_scan.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace entgraph::cuda::detail {

// Throws the CPU's message for the first entry (row-major) of x (rows x
// cols, device memory) that the mask keeps and that is NaN or +inf (or
// -inf, unless allowed); waits for the scan on `stream`.
void check_device_values(const std::string& op, const char* arg, const float* x, const std::uint8_t* mask,
                         std::size_t rows, std::size_t cols, bool allow_neg_inf, cudaStream_t stream);

}  // namespace entgraph::cuda::detail
