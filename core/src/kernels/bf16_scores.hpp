// bfloat16 dot products for score bounds: q . k for a few query rows against
// every key, on AVX-512 BF16 (vdpbf16ps: two bf16 products per float lane,
// twice the multiply-adds of a float FMA per instruction). The results are
// approximate; ScoreBounds adds a proven margin (score_bounds.cpp), so they
// only ever serve as upper bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace entgraph::detail {

// Keys per block of the packed layout (one float vector of scores), and per
// group whose largest score the kernel also reports.
inline constexpr std::size_t kBf16BlockKeys = 16;
inline constexpr std::size_t kBf16GroupKeys = 64;

// x rounded to the nearest bfloat16 (ties to even); x is finite.
inline std::uint16_t to_bf16(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

// Keys (m x d floats, row stride ld) packed for bf16_scores: per block of 16
// keys and per pair of dimensions (2p, 2p + 1), 32 values k_j[2p], k_j[2p + 1]
// for the block's 16 keys j in order; missing keys and an odd d's last
// dimension are zeros. pairs = (d + 1) / 2.
std::vector<std::uint16_t> pack_bf16_keys(const float* k, std::size_t m, std::size_t d, std::size_t ld);

// out(r, j) = q_r . k_j + add[r] for rows r < rows and keys j < keys (keys
// from the first block on, out's row stride ldo), in float, and
// group_max(r, g) the largest of out(r, j) over the group's keys
// [64 g, 64 g + 64) ∩ [0, keys) (row stride ldg). q holds per row `pairs`
// 32-bit words, each two bf16 (dimension 2p low, 2p + 1 high).
using Bf16Scores = void (*)(const std::uint32_t* q, std::size_t rows, const std::uint16_t* k, std::size_t pairs,
                            std::size_t keys, const float* add, float* out, std::size_t ldo, float* group_max,
                            std::size_t ldg);

// The kernel, or nullptr unless the library runs on AVX-512 (cpu_isa()) and
// the CPU has AVX-512 BF16.
Bf16Scores bf16_scores_kernel();

}  // namespace entgraph::detail
