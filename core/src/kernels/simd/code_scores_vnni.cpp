// The AVX-512 VNNI kernel of byte_code_scores (kernels/code_scores.hpp):
// vpdpbusd adds four unsigned x signed byte products into each 32-bit lane
// in one instruction, where vpmaddubsw needs a 16-bit sum, an add and a
// widening every few quads. A tile of 4 query rows x one 64-key group (16
// accumulators) stays in registers over all quads, and each row's group
// maximum is taken there. The epilogue is the vector kernels' (the same
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

ENTGRAPH_VNNI_TARGET void byte_code_scores_vnni(const std::uint32_t* q, std::size_t rows, const std::int8_t* k,
                                                const std::int32_t* k_correction, std::size_t quads, std::size_t,
                                                std::size_t keys, const float* q_scale, const float* k_scale,
                                                float* out, std::size_t ldo, float* group_max, std::size_t ldg) {
  const std::size_t blocks = (keys + kCodeBlockKeys - 1) / kCodeBlockKeys, block_bytes = quads * 4 * kCodeBlockKeys;
  for (std::size_t b0 = 0; b0 < blocks; b0 += kGroupBlocks) {  // a group's codes stay in L1 over the rows
    const std::size_t nb = std::min(kGroupBlocks, blocks - b0);
    // Blocks past the keys' last repeat it: computed, never stored.
    const std::int8_t* kb[kGroupBlocks];
    const std::int32_t* kc[kGroupBlocks];
    for (std::size_t t = 0; t < kGroupBlocks; ++t) {
      const std::size_t b = b0 + std::min(t, nb - 1);
      kb[t] = k + b * block_bytes;
      kc[t] = k_correction + b * kCodeBlockKeys;
    }
    for (std::size_t i0 = 0; i0 < rows; i0 += kRows) {
      const std::size_t nr = std::min(kRows, rows - i0);
      const std::uint32_t* qr[kRows];  // rows past nr repeat the last one: computed, never stored
      for (std::size_t r = 0; r < kRows; ++r) qr[r] = q + (i0 + std::min(r, nr - 1)) * quads;
      __m512i acc[kRows][kGroupBlocks];
#pragma GCC unroll 4
      for (std::size_t t = 0; t < kGroupBlocks; ++t) {
        const __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(kc[t]));
#pragma GCC unroll 4
        for (std::size_t r = 0; r < kRows; ++r) acc[r][t] = start;
      }
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
#pragma GCC unroll 4
      for (std::size_t r = 0; r < kRows; ++r) {  // fixed bounds: the accumulators stay in registers
        if (r >= nr) break;
        const std::size_t i = i0 + r;
        const __m512 qs = _mm512_set1_ps(q_scale[i]);
        __m512 top = _mm512_set1_ps(-__builtin_inff());
#pragma GCC unroll 4
        for (std::size_t t = 0; t < kGroupBlocks; ++t)
          if (t < nb)
            top = byte_group::store_block(acc[r][t], (b0 + t) * kCodeBlockKeys, keys, k_scale, qs, out + i * ldo, top);
        group_max[i * ldg + b0 / kGroupBlocks] = _mm512_reduce_max_ps(top);
      }
    }
  }
}

}  // namespace

ByteCodeScores byte_code_scores_vnni_kernel() {
  static const bool available = __builtin_cpu_supports("avx512vnni");
  return available && cpu_isa() == CpuIsa::avx512 ? &byte_code_scores_vnni : nullptr;
}
#else
ByteCodeScores byte_code_scores_vnni_kernel() { return nullptr; }
#endif

}  // namespace entgraph::detail
