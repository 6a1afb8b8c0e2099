// Warp and block reductions shared by the CUDA kernels.
//
// Blocks are one-dimensional with blockDim.x a multiple of 32 (at most 1024).
// A block reduction must be reached by every thread of the block (uniform
// control flow) and returns the same value, bit for bit, to every thread: the
// total is combined once by thread 0 and broadcast through shared memory, so
// callers may branch on it. T is any trivially copyable type whose size is a
// multiple of 4 bytes (float, double, int, unsigned, or a small struct of
// those); Op is a functor `T operator()(T, T) const`.
#pragma once

#include <cuda_runtime.h>

#include <cstring>

namespace entgraph::cuda::detail {

inline constexpr unsigned kFullWarp = 0xffffffffu;
inline constexpr unsigned kWarpSize = 32;

struct SumOp {
  template <class T>
  __device__ T operator()(const T& a, const T& b) const {
    return a + b;
  }
};
struct MaxOp {
  template <class T>
  __device__ T operator()(const T& a, const T& b) const {
    return b > a ? b : a;
  }
};
struct MinOp {
  template <class T>
  __device__ T operator()(const T& a, const T& b) const {
    return b < a ? b : a;
  }
};

// __shfl_xor_sync of any 4-byte-multiple type, one 32-bit word at a time.
template <class T>
__device__ T shfl_xor(const T& v, int lane_mask) {
  static_assert(sizeof(T) % 4 == 0, "shfl_xor: the type's size must be a multiple of 4 bytes");
  constexpr int kWords = static_cast<int>(sizeof(T) / 4);
  unsigned w[kWords];
  memcpy(w, &v, sizeof(T));
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = __shfl_xor_sync(kFullWarp, w[i], lane_mask);
  T out;
  memcpy(&out, w, sizeof(T));
  return out;
}

// Butterfly over the 32 lanes of a full warp; every lane gets a total (equal
// across lanes for commutative ops; MaxOp/MinOp may differ in the sign of a
// zero between lanes).
template <class T, class Op>
__device__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, shfl_xor(v, offset));
  return v;
}

template <class T>
__device__ T warp_sum(T v) {
  return warp_reduce(v, SumOp{});
}
template <class T>
__device__ T warp_max(T v) {
  return warp_reduce(v, MaxOp{});
}
template <class T>
__device__ T warp_min(T v) {
  return warp_reduce(v, MinOp{});
}

// The reduction of v over the whole block, returned to every thread. Costs
// three __syncthreads; the first one makes back-to-back calls safe (the
// shared slots of the previous call may still be being read).
template <class T, class Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T partial[kWarpSize];
  __shared__ T result;
  v = warp_reduce(v, op);
  const unsigned lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    // In warp order, so the result does not depend on scheduling.
    const unsigned warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
    T acc = partial[0];
    for (unsigned w = 1; w < warps; ++w) acc = op(acc, partial[w]);
    result = acc;
  }
  __syncthreads();
  return result;
}

template <class T>
__device__ T block_sum(T v) {
  return block_reduce(v, SumOp{});
}
template <class T>
__device__ T block_max(T v) {
  return block_reduce(v, MaxOp{});
}
template <class T>
__device__ T block_min(T v) {
  return block_reduce(v, MinOp{});
}

}  // namespace entgraph::cuda::detail
