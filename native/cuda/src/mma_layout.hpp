// Which matrix element each lane holds in the tensor-core instructions of the
// batched attention kernel (batched_attention_kernel.cuh), as (row, col):
// mma.sync.aligned.m16n8k16 with 16-bit A and B and float32 C/D (PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type"), and
// ldmatrix.sync.aligned.m8n8.x4.trans.b16 (PTX ISA, "ldmatrix"). Every index
// the kernel derives from a lane comes from here, and the host tests
// (tests/cuda/host/test_mma_layout.cpp) check that each fragment covers its
// tile exactly once, that the pairs the kernel loads as one 32-bit word are
// neighbours, and that ldmatrix.trans of a row-major V tile yields the B
// fragments of P V. Plain C++ so that those tests need no GPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ENTGRAPH_HOST_DEVICE __host__ __device__
#else
#define ENTGRAPH_HOST_DEVICE
#endif

namespace entgraph::cuda::detail::mma {

struct Coord {
  int row, col;
};

// Lanes come in 8 groups of 4: the PTX ISA's groupID and threadID_in_group.
ENTGRAPH_HOST_DEVICE constexpr int group_of(int lane) { return lane >> 2; }
ENTGRAPH_HOST_DEVICE constexpr int thread_in_group(int lane) { return lane & 3; }

// A, 16 x 16 (rows x k), row-major: element i < 8 of `lane`, held in register
// i / 2 (4 registers of two 16-bit values).
ENTGRAPH_HOST_DEVICE constexpr Coord a_element(int lane, int i) {
  return {group_of(lane) + ((i & 2) != 0 ? 8 : 0), 2 * thread_in_group(lane) + (i & 1) + ((i & 4) != 0 ? 8 : 0)};
}

// B, 16 x 8 (k x cols), "col": element i < 4 of `lane`, in register i / 2.
ENTGRAPH_HOST_DEVICE constexpr Coord b_element(int lane, int i) {
  return {2 * thread_in_group(lane) + (i & 1) + ((i & 2) != 0 ? 8 : 0), group_of(lane)};
}

// C and D, 16 x 8 float32: element i < 4 of `lane` (one register each).
ENTGRAPH_HOST_DEVICE constexpr Coord c_element(int lane, int i) {
  return {group_of(lane) + ((i & 2) != 0 ? 8 : 0), 2 * thread_in_group(lane) + (i & 1)};
}

// Two 16-bit values in one register: the element with the smaller index in
// the low half (PTX ISA: "the lower-order half contains the element with the
// smaller index").
ENTGRAPH_HOST_DEVICE constexpr std::uint32_t pack_pair(std::uint16_t first, std::uint16_t second) {
  return static_cast<std::uint32_t>(first) | (static_cast<std::uint32_t>(second) << 16);
}

// ldmatrix.m8n8.x4: lanes 8 j .. 8 j + 7 give the addresses of rows 0..7 of
// matrix j (8 contiguous 16-bit values each). With .trans, half h of
// register j of `lane` holds element (row, col) of matrix j as stored:
ENTGRAPH_HOST_DEVICE constexpr int ldmatrix_matrix(int lane) { return lane >> 3; }
ENTGRAPH_HOST_DEVICE constexpr int ldmatrix_row(int lane) { return lane & 7; }
ENTGRAPH_HOST_DEVICE constexpr Coord ldmatrix_trans_element(int lane, int h) {
  return {2 * thread_in_group(lane) + h, group_of(lane)};
}

// P V's B operand from a row-major V tile (keys x columns) with one
// ldmatrix.x4.trans per 16 keys x 16 columns: the (key, column) offset,
// within that 16 x 16 block, of the row whose address `lane` gives. Matrix j
// covers keys 8 (j % 2) .. + 7 and columns 8 (j / 2) .. + 7, so registers 0
// and 1 are the B fragment (b0 b1, b2 b3) of the block's first 8 columns and
// registers 2 and 3 that of the next 8.
ENTGRAPH_HOST_DEVICE constexpr Coord v_block_row(int lane) {
  return {ldmatrix_row(lane) + 8 * (ldmatrix_matrix(lane) & 1), 8 * (ldmatrix_matrix(lane) >> 1)};
}

}  // namespace entgraph::cuda::detail::mma
