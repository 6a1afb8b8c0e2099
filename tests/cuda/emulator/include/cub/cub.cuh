// The CUDA emulator's stand-in for CUB: the one device-wide algorithm
// entgraph's kernels call, run on the host.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace cub {
struct DeviceScan {
  // out[i] = in[0] + ... + in[i - 1]; in place allowed. With temp = nullptr,
  // only says how much temporary storage to pass (one byte).
  template <class In, class Out>
  static cudaError_t ExclusiveSum(void* temp, std::size_t& temp_bytes, In in, Out out, int count,
                                  cudaStream_t = nullptr) {
    if (temp == nullptr) {
      temp_bytes = 1;
      return cudaSuccess;
    }
    if (count <= 0) return cudaSuccess;
    auto sum = in[0] - in[0];
    for (int i = 0; i < count; ++i) {
      const auto x = in[i];
      out[i] = sum;
      sum = sum + x;
    }
    return cudaSuccess;
  }
};
}  // namespace cub
