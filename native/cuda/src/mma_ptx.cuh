// The sm_80+ instructions of the batched attention kernel, as inline PTX:
// the tensor-core product mma.sync.m16n8k16 (bfloat16 or float16 in, float32
// accumulators), ldmatrix.x4.trans, and cp.async with its groups; and the
// byte product mma.sync.m16n8k32 of lowrank-threshold's codes. Operand
// layouts are mma_layout.hpp's; the conversions of weights and outputs to the
// 16-bit formats are the policies below (round to nearest even).
// tests/cuda/ptx_check.sh fails the build's tests if these instructions
// disappear from the compiled PTX. Under the CUDA emulator
// (ENTGRAPH_CUDA_EMULATOR, tests/cuda/emulator) each instruction is the
// emulator's warp-collective model of it instead.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "weight_split.hpp"

#if defined(ENTGRAPH_CUDA_EMULATOR)
#include "entgraph_emulator/instructions.hpp"
#endif

namespace entgraph::cuda::detail::mma {

// The 16-bit element types: the weights' scale before their split, the
// largest finite value, the rounding (weight_split.hpp's policy) and the
// tensor-core product.
struct Bfloat16 {
  static constexpr float kWeightScale = kWeightScaleBfloat16;
  static constexpr float kMaxFinite = 3.38953139e38f;  // 0x7f7f
  __device__ static std::uint16_t to_bits(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
  __device__ static float to_float(std::uint16_t bits) { return __bfloat162float(__ushort_as_bfloat16(bits)); }
  // d += a b (16 x 8 += 16 x 16 times 16 x 8).
  __device__ static void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
#if defined(ENTGRAPH_CUDA_EMULATOR)
    ::entgraph_emulator::mma_m16n8k16(::entgraph_emulator::Half::bfloat16, d, a, b0, b1);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
};

struct Float16 {
  static constexpr float kWeightScale = kWeightScaleFloat16;
  static constexpr float kMaxFinite = 65504.0f;
  __device__ static std::uint16_t to_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }
  __device__ static float to_float(std::uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
  __device__ static void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
#if defined(ENTGRAPH_CUDA_EMULATOR)
    ::entgraph_emulator::mma_m16n8k16(::entgraph_emulator::Half::float16, d, a, b0, b1);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
};

// d += a b on signed bytes, 16 x 8 += 16 x 32 times 32 x 8, int32 sums
// (exact while they fit). Fragments: a[0] holds bytes (groupID, 4
// threadID_in_group .. + 3) of A, a[1] rows + 8, a[2] columns + 16, a[3]
// both; b0 bytes (4 threadID_in_group .. + 3, groupID) of B, b1 rows + 16; d
// as the float mma's.
__device__ inline void mma_s8(int (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
#if defined(ENTGRAPH_CUDA_EMULATOR)
  ::entgraph_emulator::mma_m16n8k32_s8(d, a, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

#if !defined(ENTGRAPH_CUDA_EMULATOR)
__device__ inline std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// Four 8 x 8 matrices of 16-bit values, transposed (mma_layout.hpp says which
// lane gives which row address and receives which elements).
__device__ inline void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row) {
#if defined(ENTGRAPH_CUDA_EMULATOR)
  ::entgraph_emulator::ldmatrix_x4_trans(r, row);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row))
               : "memory");
#endif
}

// 16 bytes from global to shared memory, asynchronously; with valid = false
// the 16 bytes are zero-filled and nothing is read (src must still be a
// global address).
__device__ inline void cp_async_16(void* dst, const void* src, bool valid) {
#if defined(ENTGRAPH_CUDA_EMULATOR)
  ::entgraph_emulator::cp_async_16(dst, src, valid);
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
#endif
}
#if defined(ENTGRAPH_CUDA_EMULATOR)
__device__ inline void cp_async_commit() {}
#else
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
#endif
// Waits until every group this thread committed has landed (its own copies
// only: a __syncthreads after it makes the whole tile visible).
#if defined(ENTGRAPH_CUDA_EMULATOR)
__device__ inline void cp_async_wait_all() { ::entgraph_emulator::cp_async_wait_all(); }
#else
__device__ inline void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
#endif

}  // namespace entgraph::cuda::detail::mma
