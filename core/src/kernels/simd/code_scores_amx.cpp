// The AMX kernels of byte_code_scores and byte_code_bounds
// (kernels/code_scores.hpp): the integer
// products of byte codes on the tile unit (tdpbusd: a 16 x 16 block of
// 32-bit sums of unsigned x signed byte products per instruction, 16 times
// the multiply-adds of an AVX-512 vpmaddubsw), then the same float epilogues
// as the vector kernels, so the same floats. Its functions carry their own
// target attribute, so this file builds with the default flags; the kernel
// is only handed out where the CPU has AMX-INT8 and Linux grants the tile
// state (arch_prctl), and ENTGRAPH_AMX is not "off".
//
// The byte layout is already the tiles': a block of 16 keys is, per quad of
// dimensions, 64 bytes (16 keys x 4), i.e. B's rows; the query rows' quads
// are A's rows. Each 64-key group is 4 C tiles, so its largest score is
// taken in registers.
#include <cstdlib>
#include <cstring>

#include "entgraph/runtime.hpp"
#include "kernels/code_scores.hpp"

#if defined(ENTGRAPH_HAVE_X86) && defined(__linux__) && defined(__GNUC__)
#define ENTGRAPH_HAVE_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "kernels/simd/byte_group_scores_avx512.hpp"
#define ENTGRAPH_AMX_TARGET __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw")))
#endif

namespace entgraph::detail {

#if defined(ENTGRAPH_HAVE_AMX)
namespace {

constexpr std::size_t kTileRows = 16;    // query rows per tile
constexpr std::size_t kChunkQuads = 16;  // quads per tile product (64 bytes)
constexpr std::size_t kGroupBlocks = kCodeGroupKeys / kCodeBlockKeys;
static_assert(kCodeBlockKeys == 16 && kGroupBlocks == 4);

// The tile configuration (palette 1): colsb bytes per row, rows per tile.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// Tiles 0-3: the group's 4 C blocks. 4 and 5: A and B of a whole chunk of
// 16 quads; 6 and 7: of the last, shorter chunk.
ENTGRAPH_AMX_TARGET void configure(std::size_t tail_quads) {
  TileConfig c;
  for (int t = 0; t < 4; ++t) {
    c.rows[t] = kTileRows;
    c.colsb[t] = 64;
  }
  c.rows[4] = kTileRows;
  c.colsb[4] = 64;
  c.rows[5] = kChunkQuads;
  c.colsb[5] = 64;
  if (tail_quads > 0) {
    c.rows[6] = kTileRows;
    c.colsb[6] = static_cast<std::uint16_t>(4 * tail_quads);
    c.rows[7] = static_cast<std::uint8_t>(tail_quads);
    c.colsb[7] = 64;
  }
  _tile_loadconfig(&c);
}

// C tile T += A x B (b: 64-byte rows); `whole`: a chunk of 16 quads (tiles
// 4 and 5), else the last chunk (6 and 7). A macro: the tile intrinsics
// take their tile numbers as literal text.
#define ENTGRAPH_AMX_PRODUCT(T, b, whole) \
  do {                                    \
    if (whole) {                          \
      _tile_loadd(5, b, 64);              \
      _tile_dpbusd(T, 4, 5);              \
    } else {                              \
      _tile_loadd(7, b, 64);              \
      _tile_dpbusd(T, 6, 7);              \
    }                                     \
  } while (false)

// C tiles 0-3 = the query tile (A, at a) times the nb blocks of keys from
// kb on, chunk by chunk. A single chunk's A tile stays loaded across groups
// (reload_a false after the first).
ENTGRAPH_AMX_TARGET void group_products(const std::uint32_t* a, std::size_t a_stride, const std::int8_t* kb,
                                        std::size_t block_bytes, std::size_t chunks, std::size_t tail_quads,
                                        std::size_t nb, bool reload_a) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (std::size_t ch = 0; ch < chunks; ++ch, kb += kChunkQuads * 64) {
    const bool whole = ch + 1 < chunks || tail_quads == 0;
    if (reload_a || chunks > 1) {
      if (whole) {
        _tile_loadd(4, a + ch * kChunkQuads, a_stride * 4);
      } else {
        _tile_loadd(6, a + ch * kChunkQuads, a_stride * 4);
      }
    }
    ENTGRAPH_AMX_PRODUCT(0, kb, whole);
    if (nb > 1) ENTGRAPH_AMX_PRODUCT(1, kb + block_bytes, whole);
    if (nb > 2) ENTGRAPH_AMX_PRODUCT(2, kb + 2 * block_bytes, whole);
    if (nb > 3) ENTGRAPH_AMX_PRODUCT(3, kb + 3 * block_bytes, whole);
  }
}

// The epilogue of one group (c: its stored C tiles) for rows i0 .. i0 + nr:
// block by block, its key vectors loaded once for the 16 rows; the rows'
// maxima (fixed bounds: in registers) reduced together.
template <class Epilogue>
ENTGRAPH_AMX_TARGET void finish_group(const std::int32_t (&c)[kGroupBlocks][kTileRows][kCodeBlockKeys],
                                      const Epilogue& epilogue, std::size_t i0, std::size_t nr, std::size_t b0,
                                      std::size_t nb, std::size_t keys, float* out, std::size_t ldo, float* group_max,
                                      std::size_t ldg) {
  __m512 top[kTileRows];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < kTileRows; ++r) top[r] = _mm512_set1_ps(-__builtin_inff());
  decltype(epilogue.keys_at(0, keys)) kv[kGroupBlocks];
  for (std::size_t t = 0; t < nb; ++t) kv[t] = epilogue.keys_at((b0 + t) * kCodeBlockKeys, keys);
#pragma GCC unroll 16
  for (std::size_t r = 0; r < kTileRows; ++r) {
    if (r >= nr) break;
    for (std::size_t t = 0; t < nb; ++t)
      top[r] = epilogue.block(_mm512_load_si512(c[t][r]), kv[t], i0 + r, out + (i0 + r) * ldo, top[r]);
  }
  alignas(64) float maxima[kTileRows];
  _mm512_store_ps(maxima, byte_group::row_maxima(top));
  for (std::size_t r = 0; r < nr; ++r) group_max[(i0 + r) * ldg + b0 / kGroupBlocks] = maxima[r];
}

// The tiles of both kernels: the raw sums of the shifted query bytes times
// the key bytes, finished by the epilogue (byte_group::Scores or Bounds).
// Software-pipelined: a group's products are issued before the previous
// group's epilogue runs, so the tile unit works while the vector units
// finish; its tiles are stored (which waits for them) only after.
template <class Epilogue>
ENTGRAPH_AMX_TARGET void byte_tiles_amx(const std::uint32_t* q, std::size_t rows, const std::int8_t* k,
                                        std::size_t quads, std::size_t keys, const Epilogue& epilogue, float* out,
                                        std::size_t ldo, float* group_max, std::size_t ldg) {
  if (rows == 0 || keys == 0) return;
  const std::size_t chunks = (quads + kChunkQuads - 1) / kChunkQuads, tail_quads = quads % kChunkQuads;
  const std::size_t blocks = (keys + kCodeBlockKeys - 1) / kCodeBlockKeys, block_bytes = quads * 4 * kCodeBlockKeys;
  configure(tail_quads);
  // A: the tile's query rows, padded with zero rows (their sums are not used).
  const std::size_t a_stride = chunks * kChunkQuads;  // words
  std::vector<std::uint32_t> a_rows(kTileRows * a_stride);
  std::uint32_t* a = a_rows.data();
  alignas(64) std::int32_t c[kGroupBlocks][kTileRows][kCodeBlockKeys];
  for (std::size_t i0 = 0; i0 < rows; i0 += kTileRows) {
    const std::size_t nr = std::min(kTileRows, rows - i0);
    std::memset(a, 0, kTileRows * a_stride * 4);
    for (std::size_t r = 0; r < nr; ++r) std::memcpy(a + r * a_stride, q + (i0 + r) * quads, quads * 4);
    for (std::size_t b0 = 0; b0 < blocks; b0 += kGroupBlocks) {
      group_products(a, a_stride, k + b0 * block_bytes, block_bytes, chunks, tail_quads,
                     std::min(kGroupBlocks, blocks - b0), b0 == 0);
      if (b0 > 0) finish_group(c, epilogue, i0, nr, b0 - kGroupBlocks, kGroupBlocks, keys, out, ldo, group_max, ldg);
      _tile_stored(0, c[0], 64);
      _tile_stored(1, c[1], 64);
      _tile_stored(2, c[2], 64);
      _tile_stored(3, c[3], 64);
    }
    const std::size_t last = (blocks - 1) / kGroupBlocks * kGroupBlocks;
    finish_group(c, epilogue, i0, nr, last, blocks - last, keys, out, ldo, group_max, ldg);
  }
  _tile_release();
}
#undef ENTGRAPH_AMX_PRODUCT

ENTGRAPH_AMX_TARGET void byte_code_scores_amx(const std::uint32_t* q, std::size_t rows, const std::int8_t* k,
                                              const std::int32_t* k_correction, std::size_t quads, std::size_t,
                                              std::size_t keys, const float* q_scale, const float* k_scale, float* out,
                                              std::size_t ldo, float* group_max, std::size_t ldg) {
  byte_tiles_amx(q, rows, k, quads, keys, byte_group::Scores{k_correction, q_scale, k_scale}, out, ldo, group_max, ldg);
}

ENTGRAPH_AMX_TARGET void byte_code_bounds_amx(const std::uint32_t* q, std::size_t rows, const std::int8_t* k,
                                              std::size_t quads, std::size_t, std::size_t keys,
                                              const CodeBoundSide& row, const CodeBoundSide& key, float* out,
                                              std::size_t ldo, float* group_max, std::size_t ldg) {
  byte_tiles_amx(q, rows, k, quads, keys, byte_group::Bounds{row, key}, out, ldo, group_max, ldg);
}

// AMX-INT8 on the CPU (CPUID.7.0:EDX bits 24 and 25) and the tile state
// granted to this process by Linux.
bool amx_granted() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if (!((edx >> 24) & 1u) || !((edx >> 25) & 1u)) return false;
  constexpr long kReqXcompPerm = 0x1023, kXfeatureTileData = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTileData) == 0;
}

// Checked once: ENTGRAPH_AMX, then the CPU and Linux.
bool amx_available() {
  static const bool available = [] {
    const char* env = std::getenv("ENTGRAPH_AMX");
    if (env != nullptr && (std::strcmp(env, "off") == 0 || std::strcmp(env, "0") == 0)) return false;
    return amx_granted();
  }();
  return available;
}

}  // namespace

ByteKernels byte_amx_kernels() {
  if (cpu_isa() != CpuIsa::avx512 || !amx_available()) return {};
  return {&byte_code_scores_amx, &byte_code_bounds_amx};
}
#else
ByteKernels byte_amx_kernels() { return {}; }
#endif

}  // namespace entgraph::detail
