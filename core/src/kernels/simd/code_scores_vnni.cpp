// The AVX-512 VNNI kernels of byte_code_scores and byte_code_bounds
// (kernels/code_scores.hpp):
// vpdpbusd adds four unsigned x signed byte products into each 32-bit lane
// in one instruction, where vpmaddubsw needs a 16-bit sum, an add and a
// widening every few quads. A tile of 4 query rows x one 64-key group (16
// accumulators) stays in registers over all quads, and each row's group
// maximum is taken there. The epilogues are the vector kernels' (the same
// floats). Its functions carry their own target attribute, so this file
// builds with the default flags; the kernel is only handed out where the
// library runs on avx512 and the CPU has AVX-512 VNNI (Cascade Lake, Ice
// Lake, Zen 4 and later); where AMX is granted its kernel comes first.
#include "entgraph/runtime.hpp"
#include "kernels/code_scores.hpp"

#if defined(ENTGRAPH_HAVE_X86) && defined(__GNUC__)
#define ENTGRAPH_HAVE_VNNI 1
#include <immintrin.h>

#include <algorithm>

#include "kernels/simd/byte_group_scores_avx512.hpp"
#define ENTGRAPH_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))
#endif

namespace entgraph::detail {

#if defined(ENTGRAPH_HAVE_VNNI)
namespace {

constexpr std::size_t kRows = 4;
constexpr std::size_t kGroupBlocks = kCodeGroupKeys / kCodeBlockKeys;
static_assert(kCodeBlockKeys == 16 && kGroupBlocks == 4);

// The tiles of both kernels: the raw sums of the shifted query bytes times
// the key bytes, finished by the epilogue (byte_group::Scores or Bounds).
template <class Epilogue>
ENTGRAPH_VNNI_TARGET void byte_tiles_vnni(const std::uint32_t* q, std::size_t rows, const std::int8_t* k,
                                          std::size_t quads, std::size_t keys, const Epilogue& epilogue, float* out,
                                          std::size_t ldo, float* group_max, std::size_t ldg) {
  const std::size_t blocks = (keys + kCodeBlockKeys - 1) / kCodeBlockKeys, block_bytes = quads * 4 * kCodeBlockKeys;
  for (std::size_t b0 = 0; b0 < blocks; b0 += kGroupBlocks) {  // a group's codes stay in L1 over the rows
    const std::size_t nb = std::min(kGroupBlocks, blocks - b0);
    // Blocks past the keys' last repeat it: computed, never stored.
    const std::int8_t* kb[kGroupBlocks];
    for (std::size_t t = 0; t < kGroupBlocks; ++t) kb[t] = k + (b0 + std::min(t, nb - 1)) * block_bytes;
    for (std::size_t i0 = 0; i0 < rows; i0 += kRows) {
      const std::size_t nr = std::min(kRows, rows - i0);
      const std::uint32_t* qr[kRows];  // rows past nr repeat the last one: computed, never stored
      for (std::size_t r = 0; r < kRows; ++r) qr[r] = q + (i0 + std::min(r, nr - 1)) * quads;
      __m512i acc[kRows][kGroupBlocks];
#pragma GCC unroll 4
      for (std::size_t r = 0; r < kRows; ++r)
#pragma GCC unroll 4
        for (std::size_t t = 0; t < kGroupBlocks; ++t) acc[r][t] = _mm512_setzero_si512();
      for (std::size_t p = 0; p < quads; ++p) {
        __m512i kv[kGroupBlocks];
#pragma GCC unroll 4
        for (std::size_t t = 0; t < kGroupBlocks; ++t) kv[t] = _mm512_loadu_si512(kb[t] + p * 64);
#pragma GCC unroll 4
        for (std::size_t r = 0; r < kRows; ++r) {
          const __m512i qv = _mm512_set1_epi32(static_cast<int>(qr[r][p]));
#pragma GCC unroll 4
          for (std::size_t t = 0; t < kGroupBlocks; ++t) acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], qv, kv[t]);
        }
      }
      // Block by block, its key vectors loaded once for the rows (fixed
      // bounds: the accumulators stay in registers).
      __m512 top[kRows];
#pragma GCC unroll 4
      for (std::size_t r = 0; r < kRows; ++r) top[r] = _mm512_set1_ps(-__builtin_inff());
#pragma GCC unroll 4
      for (std::size_t t = 0; t < kGroupBlocks; ++t) {
        if (t >= nb) break;
        const auto kv = epilogue.keys_at((b0 + t) * kCodeBlockKeys, keys);
#pragma GCC unroll 4
        for (std::size_t r = 0; r < kRows; ++r) {
          if (r >= nr) break;
          top[r] = epilogue.block(acc[r][t], kv, i0 + r, out + (i0 + r) * ldo, top[r]);
        }
      }
#pragma GCC unroll 4
      for (std::size_t r = 0; r < kRows; ++r) {
        if (r >= nr) break;
        group_max[(i0 + r) * ldg + b0 / kGroupBlocks] = _mm512_reduce_max_ps(top[r]);
      }
    }
  }
}

ENTGRAPH_VNNI_TARGET void byte_code_scores_vnni(const std::uint32_t* q, std::size_t rows, const std::int8_t* k,
                                                const std::int32_t* k_correction, std::size_t quads, std::size_t,
                                                std::size_t keys, const float* q_scale, const float* k_scale,
                                                float* out, std::size_t ldo, float* group_max, std::size_t ldg) {
  byte_tiles_vnni(q, rows, k, quads, keys, byte_group::Scores{k_correction, q_scale, k_scale}, out, ldo, group_max,
                  ldg);
}

ENTGRAPH_VNNI_TARGET void byte_code_bounds_vnni(const std::uint32_t* q, std::size_t rows, const std::int8_t* k,
                                                std::size_t quads, std::size_t, std::size_t keys,
                                                const CodeBoundSide& row, const CodeBoundSide& key, float* out,
                                                std::size_t ldo, float* group_max, std::size_t ldg) {
  byte_tiles_vnni(q, rows, k, quads, keys, byte_group::Bounds{row, key}, out, ldo, group_max, ldg);
}

}  // namespace

ByteKernels byte_vnni_kernels() {
  static const bool available = __builtin_cpu_supports("avx512vnni");
  if (!available || cpu_isa() != CpuIsa::avx512) return {};
  return {&byte_code_scores_vnni, &byte_code_bounds_vnni};
}
#else
ByteKernels byte_vnni_kernels() { return {}; }
#endif

}  // namespace entgraph::detail
