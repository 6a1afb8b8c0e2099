// Kernel launches and the dynamic shared-memory buffer go through these two
// helpers, so that the CUDA emulator (tests/cuda/emulator, docs/CUDA.md "The
// emulator") can compile the same kernels as plain C++ and run them on the
// CPU: it supplies its own launch() and dynamic_shared().
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#if defined(ENTGRAPH_CUDA_EMULATOR)
namespace entgraph::cuda {
using ::entgraph_emulator::dynamic_shared;
using ::entgraph_emulator::launch;
}  // namespace entgraph::cuda
#else
namespace entgraph::cuda {

// kernel<<<grid, block, shared_bytes, stream>>>(args...).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream,
            Args&&... args) {
  // clang-format would split the closing chevrons.
  // clang-format off
  kernel<<<grid, block, shared_bytes, stream>>>(static_cast<Args&&>(args)...);
  // clang-format on
}

// The block's dynamic shared memory (the launch's shared_bytes), 16-byte aligned.
template <class T>
__device__ inline T* dynamic_shared() {
  extern __shared__ float4 dynamic_shared_memory[];
  return reinterpret_cast<T*>(dynamic_shared_memory);
}

}  // namespace entgraph::cuda
#endif
