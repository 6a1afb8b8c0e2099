// Integer score estimates for the lowrank-threshold predictor: the dot
// products of quantized query and key codes (16-bit integers), computed as
// integers (exact in any order, so every instruction set and WebAssembly
// find the same values) and scaled to float:
//   out(i, j) = (float(D_ij) * k_scale[j]) * q_scale[i],  D_ij = Σ_c q_ic k_jc.
// x86 and WebAssembly multiply pairs of 16-bit codes into 32-bit sums in one
// instruction (pmaddwd / i32x4.dot_i16x8_s): twice the multiply-adds of a
// float FMA per instruction, with nothing to round.
//
// |D| must stay below 2^24 so that float(D) is exact: codes of at most 8
// bits (|code| <= 127) over r <= 256 dimensions give at most 127² · 256 <
// 2^23.
//
// Small codes (the default 4 bits) also come as bytes, four dimensions a
// 32-bit word, where AVX2 and AVX-512 multiply them in one instruction
// (vpmaddubsw: unsigned x signed bytes into 16-bit pair sums): twice the
// multiply-adds of the 16-bit codes per instruction. The query's codes are
// shifted by `offset` to be unsigned and each key's offset · Σ_c k_jc is
// taken off again, so D is the same integer.
//
// code_bounds is the same product for ScoreBounds' integer bounds: wider
// codes (or bytes: byte_code_bounds), a per-row and a per-key integer added
// to D (the quantization margin), power-of-two steps, two float columns of
// margins, and each 64-key group's largest bound (docs/EXACT.md, "Integer
// bounds", holds the proof).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "entgraph/runtime.hpp"

namespace entgraph::detail {

// Keys per block of the packed layout.
inline constexpr std::size_t kCodeBlockKeys = 16;

// Key codes (m x r, row-major) packed for code_scores: per block of 16 keys
// and per pair of dimensions (2p, 2p + 1), 32 codes k_j[2p], k_j[2p + 1] for
// the block's keys j in order; missing keys and an odd r's last dimension
// are zeros. pairs = (r + 1) / 2.
std::vector<std::int16_t> pack_code_keys(const std::int16_t* k, std::size_t m, std::size_t r);
// Query codes (rows x r) as 32-bit words of two codes each (dimension 2p in
// the low half), rows x pairs.
std::vector<std::int32_t> pack_code_queries(const std::int16_t* q, std::size_t rows, std::size_t r);

// out(i, j) as above for i < rows and j < keys (out's row stride ldo >=
// keys); k_scale holds at least `keys` values. group_max(i, g) is the
// largest out(i, j) over the keys [64 g, 64 g + 64) ∩ [0, keys) (row stride
// ldg >= the number of groups).
using CodeScores = void (*)(const std::int32_t* q, std::size_t rows, const std::int16_t* k, std::size_t pairs,
                            std::size_t keys, const float* q_scale, const float* k_scale, float* out, std::size_t ldo,
                            float* group_max, std::size_t ldg);

// Byte codes: whether codes of magnitude at most `largest` over r dimensions
// can take the byte path (the query's shifted codes and the keys' fit in a
// byte, and a 16-bit pair sum cannot saturate).
bool byte_codes_fit(std::int32_t largest);
// The byte form of codes (m x r, |code| <= largest): per block of 16 keys
// and per quad of dimensions (4p ... 4p + 3), 64 bytes k_j[4p ... 4p + 3]
// for the block's keys j in order; missing keys and dimensions are zeros.
// quads = (r + 3) / 4.
std::vector<std::int8_t> pack_byte_keys(const std::int16_t* k, std::size_t m, std::size_t r);
// Each key's offset · Σ_c k_jc, padded with zeros to whole blocks.
std::vector<std::int32_t> byte_key_corrections(const std::int16_t* k, std::size_t m, std::size_t r,
                                               std::int32_t offset);
// Query codes shifted by offset, as 32-bit words of four bytes each
// (dimension 4p in the lowest byte; missing dimensions are `offset`, which
// meets key codes of 0), rows x quads.
std::vector<std::uint32_t> pack_byte_queries(const std::int16_t* q, std::size_t rows, std::size_t r,
                                             std::int32_t offset);
// The number of quads whose 16-bit pair sums may be added before one
// overflows, for codes of magnitude at most `largest` (byte_codes_fit).
std::size_t byte_segment_quads(std::int32_t largest);

// out and group_max as CodeScores, from byte codes; `segment` quads are
// summed in 16 bits before widening (byte_segment_quads); k_correction as
// byte_key_corrections.
using ByteCodeScores = void (*)(const std::uint32_t* q, std::size_t rows, const std::int8_t* k,
                                const std::int32_t* k_correction, std::size_t quads, std::size_t segment,
                                std::size_t keys, const float* q_scale, const float* k_scale, float* out,
                                std::size_t ldo, float* group_max, std::size_t ldg);

// The kernel of an instruction set (reference: the scalar loop); throws
// entgraph::Error if that set is not compiled in.
CodeScores code_scores_kernel(CpuIsa isa);

// ScoreBounds' integer bounds, for rows i < rows and keys j < keys:
//   out(i, j) = float(D_ij + row.add[i] + key.add[j]) * (row.scale[i] * key.scale[j])
//               + row.resid[i] * key.resid[j] + row.round[i] * key.round[j]
// (the last three products fused or not: either rounding is covered), with
// D_ij as above; group_max(i, g) is the largest out(i, j) over the keys
// [64 g, 64 g + 64) ∩ [0, keys) (row stride ldg). The integer sum must stay
// below 2^31 in magnitude in any order. Per-key arrays hold a multiple of
// kCodeBlockKeys values (whole blocks are read); key.resid may be null (a
// column of zeros: identity bounds have no residual).
struct CodeBoundSide {
  const std::int32_t* add;
  const float* scale;
  const float* resid;
  const float* round;
};
inline constexpr std::size_t kCodeGroupKeys = 64;
using CodeBounds = void (*)(const std::int32_t* q, std::size_t rows, const std::int16_t* k, std::size_t pairs,
                            std::size_t keys, const CodeBoundSide& row, const CodeBoundSide& key, float* out,
                            std::size_t ldo, float* group_max, std::size_t ldg);

// The kernel of an instruction set, as code_scores_kernel.
CodeBounds code_bounds_kernel(CpuIsa isa);

// code_bounds on byte codes (ScoreBounds' int8 bounds): q and k as
// pack_byte_queries and pack_byte_keys (queries shifted by the offset), and
// key.add already less each key's offset correction (byte_key_corrections),
// so that the integer is again D_ij + row.add[i] + key.add[j]; `segment` as
// for ByteCodeScores. The same floats as code_bounds on the same integers.
using ByteCodeBounds = void (*)(const std::uint32_t* q, std::size_t rows, const std::int8_t* k, std::size_t quads,
                                std::size_t segment, std::size_t keys, const CodeBoundSide& row,
                                const CodeBoundSide& key, float* out, std::size_t ldo, float* group_max,
                                std::size_t ldg);

// The byte kernels of one kind of hardware: estimates and bounds, both null
// where it has no byte multiply.
struct ByteKernels {
  ByteCodeScores scores = nullptr;
  ByteCodeBounds bounds = nullptr;
};
// An instruction set's (null on SSE2 and WebAssembly SIMD128: use the 16-bit
// codes there); throws entgraph::Error if that set is not compiled in.
ByteKernels byte_kernels(CpuIsa isa);
// On AMX (kernels/simd/code_scores_amx.cpp): the same floats from the tile
// unit's integer products. Null unless the library runs on avx512
// (cpu_isa()), the CPU has AMX-INT8, Linux grants the tile state and the
// environment variable ENTGRAPH_AMX is not "off" (or "0").
ByteKernels byte_amx_kernels();
// On AVX-512 VNNI (kernels/simd/code_scores_vnni.cpp): the same floats. Null
// unless the library runs on avx512 and the CPU has AVX-512 VNNI.
ByteKernels byte_vnni_kernels();
// On AVX-VNNI (kernels/simd/code_scores_avx_vnni.cpp): the avx2 tiles with
// vpdpbusd's VEX form, the same floats. Null unless the library runs on
// avx2 and the CPU has AVX-VNNI.
ByteKernels byte_avx_vnni_kernels();
// The fastest of those that can run here (AMX, AVX-512 VNNI, AVX-VNNI, the
// instruction set's), or nulls.
ByteKernels fastest_byte_kernels();
// Whether one of the byte dot-product kernels runs here (AMX, AVX-512 VNNI,
// AVX-VNNI): four byte products into a 32-bit lane in one instruction, with
// no 16-bit sum to widen, whatever the codes' range.
bool has_byte_dot_products();

// The integer nearest v (|v| < 2^51), whatever the rounding mode: adding
// and taking away 1.5 * 2^52 leaves an integer next to v, and the two
// comparisons move it to the nearest. No branch and no library call
// (std::nearbyint is one on the baseline x86-64 target, without roundsd).
inline double nearest_integer(double v) {
  constexpr double kRound = 0x1.8p52;
  const double n = (v + kRound) - kRound;
  return n + (static_cast<double>(v - n > 0.5) - static_cast<double>(n - v > 0.5));
}

// The exact integer dot product of one query's and one key's codes (r each).
inline std::int32_t code_dot(const std::int16_t* q, const std::int16_t* k, std::size_t r) {
  std::int32_t s = 0;
  for (std::size_t c = 0; c < r; ++c) s += static_cast<std::int32_t>(q[c]) * static_cast<std::int32_t>(k[c]);
  return s;
}

// Per-ISA kernels, defined in kernels/simd/code_scores_<isa>.cpp.
struct CodeKernels {
  CodeScores scores;
  ByteCodeScores byte_scores;  // null: no byte multiply
  CodeBounds bounds;
  ByteCodeBounds byte_bounds;  // null: no byte multiply
};
extern const CodeKernels kSse2CodeKernels;
extern const CodeKernels kAvx2CodeKernels;
extern const CodeKernels kAvx512CodeKernels;
extern const CodeKernels kSimd128CodeKernels;

}  // namespace entgraph::detail
