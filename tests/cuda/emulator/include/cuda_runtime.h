// The CUDA emulator's stand-in for <cuda_runtime.h>: the device language
// (qualifiers, built-in indices, vector types, the intrinsics entgraph's
// kernels use) and the runtime API they call, for a host compiler. Kernels
// run on the CPU (entgraph_emulator/threads.hpp); device memory is host
// memory. Only what native/cuda/src uses is here; anything else fails to
// compile rather than run wrongly.
#pragma once

#include <math.h>  // CUDA's global isnan, isinf, expf, ...

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "entgraph_emulator/threads.hpp"

#ifndef ENTGRAPH_CUDA_EMULATOR
#define ENTGRAPH_CUDA_EMULATOR 1
#endif

// ---- The device language ------------------------------------------------
#define __host__
#define __device__
#define __global__
#define __forceinline__
#define __noinline__
#define __launch_bounds__(...)
// Function-local statics: shared by the block's threads (blocks run one at a
// time), and left as the previous block wrote them, like shared memory.
#define __shared__ static

#define threadIdx (::entgraph_emulator::ids().thread)
#define blockIdx (::entgraph_emulator::ids().block)
#define blockDim (::entgraph_emulator::ids().block_dim)
#define gridDim (::entgraph_emulator::ids().grid_dim)

struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// Warp-collective and block-wide instructions (threads.hpp says how they run).
void __syncthreads();
int __syncthreads_or(int predicate);
void __syncwarp(unsigned mask = 0xffffffffu);
unsigned __ballot_sync(unsigned mask, int predicate);
int __any_sync(unsigned mask, int predicate);
namespace entgraph_emulator {
// A shuffle of up to 8 bytes: lane `arg` of the segment, or lane ^ arg.
std::uint64_t shuffle(unsigned mask, std::uint64_t bits, int arg, int width, bool by_xor, const char* what);
template <class T>
T shuffle_value(unsigned mask, T v, int arg, int width, bool by_xor, const char* what) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move values of up to 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  bits = shuffle(mask, bits, arg, width, by_xor, what);
  T out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}
}  // namespace entgraph_emulator
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return ::entgraph_emulator::shuffle_value(mask, v, lane_mask, width, true, "__shfl_xor_sync");
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return ::entgraph_emulator::shuffle_value(mask, v, src_lane, width, false, "__shfl_sync");
}
inline void __threadfence() {}
inline void __nanosleep(unsigned) { ::entgraph_emulator::pause(); }

// Atomics as the compiler's (sequentially consistent), so that
// ThreadSanitizer sees them as synchronisation (emulator.cpp, "racecheck").
template <class T>
T atomicCAS(T* address, T compare, T value) {
  __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // the old value, whether or not it was replaced
}
template <class T>
T atomicExch(T* address, T value) {
  return __atomic_exchange_n(address, value, __ATOMIC_SEQ_CST);
}
template <class T>
T atomicOr(T* address, T value) {
  return __atomic_fetch_or(address, value, __ATOMIC_SEQ_CST);
}
template <class T>
T atomicAdd(T* address, T value) {
  static_assert(std::is_integral_v<T>, "atomicAdd: the emulator models integer additions only");
  return __atomic_fetch_add(address, value, __ATOMIC_SEQ_CST);
}
template <class T>
T atomicMin(T* address, T value) {
  T old = __atomic_load_n(address, __ATOMIC_SEQ_CST);
  while (value < old && !__atomic_compare_exchange_n(address, &old, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
template <class T>
T atomicMax(T* address, T value) {
  T old = __atomic_load_n(address, __ATOMIC_SEQ_CST);
  while (old < value && !__atomic_compare_exchange_n(address, &old, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}

// CUDA's global min and max.
#define ENTGRAPH_EMULATOR_MIN_MAX(T)               \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
ENTGRAPH_EMULATOR_MIN_MAX(int)
ENTGRAPH_EMULATOR_MIN_MAX(unsigned)
ENTGRAPH_EMULATOR_MIN_MAX(long)
ENTGRAPH_EMULATOR_MIN_MAX(unsigned long)
ENTGRAPH_EMULATOR_MIN_MAX(long long)
ENTGRAPH_EMULATOR_MIN_MAX(unsigned long long)
#undef ENTGRAPH_EMULATOR_MIN_MAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

// Arithmetic with the rounding named (the emulated targets compile with
// -ffp-contract=off, so a * b + c is never fused behind these).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fma_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline float __double2float_rn(double a) { return static_cast<float>(a); }
// Towards -infinity: the nearest float, stepped down if it lies above.
inline float __double2float_rd(double a) {
  const float f = static_cast<float>(a);
  return static_cast<double>(f) > a ? std::nextafter(f, -INFINITY) : f;
}
// Towards +infinity: the nearest float, stepped up if it lies below.
inline float __double2float_ru(double a) {
  const float f = static_cast<float>(a);
  return static_cast<double>(f) < a ? std::nextafter(f, INFINITY) : f;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T>
T __ldg(const T* p) {
  return *p;
}

// ---- The runtime API ------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrPageableMemoryAccess = 88,
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};
struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
};

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
// Streams: every call runs when made, so a stream is only a name.
constexpr unsigned cudaStreamNonBlocking = 1;
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);

cudaError_t cudaMalloc(void** p, std::size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocAsync(void** p, std::size_t bytes, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream);
template <class T>
cudaError_t cudaMalloc(T** p, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
template <class T>
cudaError_t cudaMallocAsync(T** p, std::size_t bytes, cudaStream_t stream) {
  return cudaMallocAsync(reinterpret_cast<void**>(p), bytes, stream);
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* p);

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy2D(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                         std::size_t height, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* dst, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream = nullptr);

// The kernel's largest dynamic shared memory (checked at launch, as the GPU does).
cudaError_t emulator_set_max_dynamic_shared(const void* kernel, int bytes);
template <class... Params>
cudaError_t cudaFuncSetAttribute(void (*kernel)(Params...), cudaFuncAttribute attribute, int value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return emulator_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), value);
}
// The emulated device holds one block per multiprocessor.
template <class... Params>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, void (*)(Params...), int, std::size_t) {
  *blocks = 1;
  return cudaSuccess;
}
