// The AVX-512 BF16 kernel of bf16_scores.hpp. Its functions carry their own
// target attribute, so this file builds with the default flags and the
// kernel is only called when the CPU has the instructions.
#include "kernels/bf16_scores.hpp"

#include "entgraph/runtime.hpp"

#if defined(ENTGRAPH_HAVE_X86)
#include <immintrin.h>
#define ENTGRAPH_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#endif

namespace entgraph::detail {

std::vector<std::uint16_t> pack_bf16_keys(const float* k, std::size_t m, std::size_t d, std::size_t ld) {
  const std::size_t pairs = (d + 1) / 2, blocks = (m + kBf16BlockKeys - 1) / kBf16BlockKeys;
  std::vector<std::uint16_t> packed(blocks * pairs * 2 * kBf16BlockKeys, 0);
  for (std::size_t j = 0; j < m; ++j)
    for (std::size_t x = 0; x < d; ++x) {
      const std::size_t b = j / kBf16BlockKeys, l = j % kBf16BlockKeys, p = x / 2;
      packed[(b * pairs + p) * 2 * kBf16BlockKeys + 2 * l + x % 2] = to_bf16(k[j * ld + x]);
    }
  return packed;
}

#if defined(ENTGRAPH_HAVE_X86)
namespace {

// R rows against NB consecutive blocks of 16 keys (one group, NB <= 4): R x NB
// accumulators stay in registers over all pairs; `valid` keys of the last
// block are stored, and each row's largest score goes to group_max.
template <int R, int NB>
ENTGRAPH_BF16_TARGET void bf16_tile(const std::uint32_t* q, std::size_t pairs, const std::uint16_t* k,
                                    const float* add, float* out, std::size_t ldo, std::size_t valid,
                                    float* group_max, std::size_t ldg) {
  __m512 acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_set1_ps(add[r]);
  const std::size_t block_stride = pairs * 2 * kBf16BlockKeys;
  for (std::size_t p = 0; p < pairs; ++p) {
    __m512bh kv[NB];
    for (int b = 0; b < NB; ++b)
      kv[b] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(k + static_cast<std::size_t>(b) * block_stride + p * 32));
    for (int r = 0; r < R; ++r) {
      const __m512bh qv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(q[r * pairs + p])));
      for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_dpbf16_ps(acc[r][b], qv, kv[b]);
    }
  }
  const __mmask16 last = valid == kBf16BlockKeys ? static_cast<__mmask16>(0xffff)
                                                 : static_cast<__mmask16>((1u << valid) - 1u);
  for (int r = 0; r < R; ++r) {
    __m512 top = _mm512_set1_ps(-__builtin_inff());
    for (int b = 0; b < NB; ++b) {
      float* o = out + r * ldo + static_cast<std::size_t>(b) * kBf16BlockKeys;
      const __mmask16 keep = b + 1 < NB ? static_cast<__mmask16>(0xffff) : last;
      _mm512_mask_storeu_ps(o, keep, acc[r][b]);
      top = _mm512_mask_max_ps(top, keep, top, acc[r][b]);
    }
    group_max[r * ldg] = _mm512_reduce_max_ps(top);
  }
}

template <int R>
ENTGRAPH_BF16_TARGET void bf16_rows(const std::uint32_t* q, std::size_t pairs, const std::uint16_t* k,
                                    std::size_t keys, const float* add, float* out, std::size_t ldo,
                                    float* group_max, std::size_t ldg) {
  constexpr std::size_t kBlocks = kBf16GroupKeys / kBf16BlockKeys;
  const std::size_t block_stride = pairs * 2 * kBf16BlockKeys;
  const std::size_t blocks = (keys + kBf16BlockKeys - 1) / kBf16BlockKeys;
  const std::size_t last = keys - (blocks - 1) * kBf16BlockKeys;  // keys of the last block
  std::size_t b = 0;
  for (; b + kBlocks <= blocks; b += kBlocks)
    bf16_tile<R, 4>(q, pairs, k + b * block_stride, add, out + b * kBf16BlockKeys, ldo,
                    b + kBlocks == blocks ? last : kBf16BlockKeys, group_max + b / kBlocks, ldg);
  const std::size_t tail = blocks - b;
  const std::uint16_t* kb = k + b * block_stride;
  float* ob = out + b * kBf16BlockKeys;
  float* gb = group_max + b / kBlocks;
  if (tail == 3) bf16_tile<R, 3>(q, pairs, kb, add, ob, ldo, last, gb, ldg);
  if (tail == 2) bf16_tile<R, 2>(q, pairs, kb, add, ob, ldo, last, gb, ldg);
  if (tail == 1) bf16_tile<R, 1>(q, pairs, kb, add, ob, ldo, last, gb, ldg);
}

void bf16_scores(const std::uint32_t* q, std::size_t rows, const std::uint16_t* k, std::size_t pairs,
                 std::size_t keys, const float* add, float* out, std::size_t ldo, float* group_max, std::size_t ldg) {
  if (keys == 0) return;
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    bf16_rows<4>(q + r * pairs, pairs, k, keys, add + r, out + r * ldo, ldo, group_max + r * ldg, ldg);
  const std::size_t tail = rows - r;
  const std::uint32_t* qr = q + r * pairs;
  float* o = out + r * ldo;
  float* g = group_max + r * ldg;
  if (tail == 3) bf16_rows<3>(qr, pairs, k, keys, add + r, o, ldo, g, ldg);
  if (tail == 2) bf16_rows<2>(qr, pairs, k, keys, add + r, o, ldo, g, ldg);
  if (tail == 1) bf16_rows<1>(qr, pairs, k, keys, add + r, o, ldo, g, ldg);
}

}  // namespace

Bf16Scores bf16_scores_kernel() {
  static const bool available = __builtin_cpu_supports("avx512bf16");
  return available && cpu_isa() == CpuIsa::avx512 ? &bf16_scores : nullptr;
}
#else
Bf16Scores bf16_scores_kernel() { return nullptr; }
#endif

}  // namespace entgraph::detail
