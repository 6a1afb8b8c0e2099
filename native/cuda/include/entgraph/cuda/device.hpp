// entgraph CUDA backend: the device, its errors, and device memory.
//
// Everything in entgraph::cuda works on device pointers (rows x cols,
// row-major, contiguous) and runs on the given stream (0: the default one).
// Host-memory entry points that pick CPU or GPU at run time are in
// backend.hpp. Errors throw entgraph::cuda::CudaError (an entgraph::Error)
// naming the operation and CUDA's message; argument checks happen before any
// kernel runs, so a call that throws leaves its outputs untouched.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "entgraph/error.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace entgraph::cuda {

class CudaError : public Error {
 public:
  explicit CudaError(const std::string& message) : Error(message) {}
};

// Whether a CUDA device can be used (driver, device, and a kernel of this
// build for its architecture). Never throws.
bool available();
// Why not, when available() is false ("" otherwise), e.g. "no CUDA-capable device is detected".
std::string unavailable_reason();

struct DeviceInfo {
  std::string name;               // e.g. "NVIDIA H200"
  int major = 0, minor = 0;       // compute capability
  std::size_t memory_bytes = 0;
  int multiprocessors = 0;
};
// The current device; throws CudaError if none is available.
DeviceInfo device_info();

// Throws CudaError("<what>: <CUDA's message>") if status is not success.
void check(int status, const char* what);
// Waits for the stream's work; throws the first asynchronous error.
void synchronize(cudaStream_t stream = nullptr);

// Raw device allocation (throws CudaError when out of memory).
void* device_alloc(std::size_t bytes, const char* what);
void device_free(void* p) noexcept;
void copy_to_device(void* dst, const void* src, std::size_t bytes, const char* what);
void copy_to_host(void* dst, const void* src, std::size_t bytes, const char* what);
void fill_zero(void* dst, std::size_t bytes, const char* what);

// Device memory for n values of T, freed on destruction; move-only.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(std::size_t n, const char* what = "DeviceArray")
      : data_(static_cast<T*>(device_alloc(n * sizeof(T), what))), size_(n) {}
  // A copy of n host values.
  DeviceArray(const T* host, std::size_t n, const char* what = "DeviceArray") : DeviceArray(n, what) {
    copy_to_device(data_, host, n * sizeof(T), what);
  }
  DeviceArray(DeviceArray&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      device_free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { device_free(data_); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  // Copies all values to host memory of size() values.
  void download(T* host) const { copy_to_host(host, data_, size_ * sizeof(T), "DeviceArray::download"); }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace entgraph::cuda
