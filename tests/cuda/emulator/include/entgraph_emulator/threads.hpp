// The CUDA emulator's execution model: every CUDA thread of a block is a
// fiber on one host thread, and blocks run one at a time in grid order. A
// fiber runs until it reaches a barrier or a warp-collective instruction;
// such an instruction completes when every live thread it names has reached
// it, and then for all of them at once, as on the GPU. Reaching different
// collectives, a collective with exited lanes, or a barrier nobody else
// reaches is reported as the launch's error (cudaGetLastError), as are
// out-of-range launches and kernels' exceptions. See docs/CUDA.md, "The
// emulator", for what it models and what it does not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using uint3 = dim3;
struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace entgraph_emulator {

struct ThreadIds {
  dim3 thread, block, block_dim, grid_dim;
};
// The running emulated thread's indices.
const ThreadIds& ids();

// A lane's contribution to (and result of) a warp-collective instruction.
struct Record {
  alignas(8) unsigned char bytes[48];
  template <class T>
  T get(std::size_t offset = 0) const {
    T v;
    std::memcpy(&v, bytes + offset, sizeof(T));
    return v;
  }
  template <class T>
  void put(const T& v, std::size_t offset = 0) {
    static_assert(std::is_trivially_copyable_v<T>, "Record::put: trivially copyable values only");
    std::memcpy(bytes + offset, &v, sizeof(T));
  }
};
// Runs once the 32 lanes of a warp have arrived: in[l] is lane l's record,
// out[l] what lane l gets back.
using Collective = void (*)(const Record (&in)[32], Record (&out)[32]);

// The calling lane's part of the warp collective `what` (an instruction's
// name); returns its result. Every lane of the warp must be live and reach
// the same instruction.
Record warp_collective(const char* what, const Record& mine, Collective compute);
// __syncthreads and its reductions: returns how many live threads of the
// block passed a non-zero predicate.
int block_barrier(const char* what, int predicate);
// A spin-wait's pause (__nanosleep): lets the block's other threads run.
void pause();

// The launch's dynamic shared memory.
void* dynamic_shared_memory();

// Runs body on every thread of every block. A refused configuration or a
// failed block becomes the launch's error, which cudaGetLastError returns
// (and clears), as on the GPU.
void run_grid(const void* kernel, dim3 grid, dim3 block, std::size_t shared_bytes, const std::function<void()>& body);

template <class T>
inline T* dynamic_shared() {
  return static_cast<T*>(dynamic_shared_memory());
}

template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t, Args&&... args) {
  // The arguments are converted to the kernel's parameters once, as a
  // launch copies them, and every thread receives its own copy.
  std::tuple<std::decay_t<Params>...> params(static_cast<Params>(std::forward<Args>(args))...);
  run_grid(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes, [&] { std::apply(kernel, params); });
}

}  // namespace entgraph_emulator
