// The CUDA emulator's models of the sm_80 instructions that
// native/cuda/src/mma_ptx.cuh issues as inline PTX. The fragment layouts are
// written here from the PTX ISA's tables, independently of
// native/cuda/src/mma_layout.hpp (whose own host test checks it against the
// same tables), so that a kernel whose indices disagree with the hardware's
// computes wrong results here too.
#pragma once

#include <cstddef>
#include <cstdint>

namespace entgraph_emulator {

enum class Half { bfloat16, float16 };

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32, d += a b:
// a warp collective. Products are exact in float32 (8- or 11-bit
// significands); the sum runs in float32 from c in k order (the GPU's order
// and internal width are unspecified; its error is of the same order).
void mma_m16n8k16(Half type, float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1);

// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32, d += a b: exact int32
// sums (wrapping as two's complement if they overflow, which the PTX ISA
// leaves to the hardware).
void mma_m16n8k32_s8(int (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1);

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: `row` is the address of the
// row this lane names; all 32 rows are read when the warp completes it.
void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row);

// cp.async.cg.shared.global of 16 bytes: the source is read now, the
// destination written when this thread waits (cp_async_wait_all), the
// latest the PTX ISA allows, so that a kernel reading a tile before its wait
// reads stale data here. valid = false zero-fills and reads nothing.
void cp_async_16(void* dst, const void* src, bool valid);
void cp_async_wait_all();

}  // namespace entgraph_emulator
