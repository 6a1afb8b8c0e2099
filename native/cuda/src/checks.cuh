// The CUDA library's own argument checks, for its device-memory entry points
// (the core's op layer validates everything that arrives through
// entgraph::*(Device::cuda, ...) before a kernel of backend.cu runs). Shapes
// and transform parameters use the core's public checks
// (entgraph/view_checks.hpp, check_transform_parameters); what is left here
// is what only a GPU has: whether a pointer is device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "entgraph/cuda/device.hpp"
#include "entgraph/error.hpp"

namespace entgraph::cuda::detail {

[[noreturn]] inline void argument_error(const char* op, const std::string& what) {
  throw Error(std::string(op) + ": " + what);
}

// Device memory is read as rows x cols, contiguous: a view with a wider row
// stride is refused as unsupported (the core accepts it, the GPU kernels do
// not).
template <class View>
void check_contiguous(const char* op, const char* arg, const View& view) {
  if (view.rows > 1 && view.stride != view.cols)
    throw Error(std::string(op) + ": " + arg + " in device memory must have contiguous rows on device cuda (got stride " +
                    std::to_string(view.stride) + ", expected " + std::to_string(view.cols) + ")",
                ErrorCode::unsupported);
}

// Whether a pointer suits 16-byte vector loads.
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Throws unless p is set and the GPU can read it: device, managed or pinned
// host memory, or pageable host memory on a system where the GPU can access
// it. Any other host pointer would fault inside a kernel and poison the
// context, so it is caught here. With `aligned`, p must also be 16-byte
// aligned (kernels that read rows as float4; cudaMalloc's pointers are).
inline void check_device_pointer(const void* p, const char* op, const char* name, bool aligned = true) {
  if (p == nullptr) argument_error(op, std::string(name) + " has no data (got nullptr, expected a device pointer)");
  cudaPointerAttributes attr{};
  const cudaError_t status = cudaPointerGetAttributes(&attr, p);
  if (status != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it
    argument_error(op, std::string(name) + " is not a device pointer (" + cudaGetErrorString(status) + ")");
  }
  if (attr.type == cudaMemoryTypeUnregistered) {
    int device = 0, pageable = 0;
    check(cudaGetDevice(&device), op);
    check(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device), op);
    if (!pageable)
      argument_error(op, std::string(name) +
                             " is not a device pointer: not device memory (got pageable host memory; host memory "
                             "goes through entgraph's Device::cuda calls)");
  }
  if (aligned && !aligned16(p))
    argument_error(op, std::string(name) + " is not 16-byte aligned (got address " +
                           std::to_string(reinterpret_cast<std::uintptr_t>(p)) + ", expected a multiple of 16)");
}

}  // namespace entgraph::cuda::detail
