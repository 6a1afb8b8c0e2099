#include <cuda_runtime.h>

#include "entgraph/cuda/device.hpp"
#include "kernel_launch.cuh"

namespace entgraph::cuda {
namespace {

// A trivial kernel: launching it proves this build has code for the device.
__global__ void probe_kernel(int* out) { *out = 1; }

std::string probe() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return cudaGetErrorString(status);
  }
  if (count == 0) return "no CUDA-capable device is detected";
  int* flag = nullptr;
  if ((status = cudaMalloc(&flag, sizeof(int))) != cudaSuccess) return cudaGetErrorString(status);
  launch(probe_kernel, 1, 1, 0, nullptr, flag);
  status = cudaDeviceSynchronize();
  if (status == cudaSuccess) status = cudaGetLastError();
  cudaFree(flag);
  return status == cudaSuccess ? "" : std::string("this build has no kernel for the device: ") + cudaGetErrorString(status);
}

const std::string& probe_result() {
  static const std::string reason = probe();
  return reason;
}

}  // namespace

bool available() { return probe_result().empty(); }
std::string unavailable_reason() { return probe_result(); }

void check(int status, const char* what) {
  if (status != cudaSuccess)
    throw CudaError(std::string(what) + ": " + cudaGetErrorString(static_cast<cudaError_t>(status)));
}

void synchronize(cudaStream_t stream) {
  check(cudaStreamSynchronize(stream), "cuda::synchronize");
  check(cudaGetLastError(), "cuda::synchronize (a kernel failed)");
}

DeviceInfo device_info() {
  if (!available()) throw CudaError("cuda::device_info: no usable device (" + unavailable_reason() + ")");
  int device = 0;
  check(cudaGetDevice(&device), "cuda::device_info");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cuda::device_info");
  DeviceInfo info;
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  info.memory_bytes = prop.totalGlobalMem;
  info.multiprocessors = prop.multiProcessorCount;
  return info;
}

void* device_alloc(std::size_t bytes, const char* what) {
  if (!available()) throw CudaError(std::string(what) + ": no usable CUDA device (" + unavailable_reason() + ")");
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  check(cudaMalloc(&p, bytes), what);
  return p;
}

void device_free(void* p) noexcept {
  if (p) cudaFree(p);
}

void copy_to_device(void* dst, const void* src, std::size_t bytes, const char* what) {
  if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), what);
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, const char* what) {
  if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), what);
}

void fill_zero(void* dst, std::size_t bytes, const char* what) {
  if (bytes) check(cudaMemset(dst, 0, bytes), what);
}

}  // namespace entgraph::cuda
