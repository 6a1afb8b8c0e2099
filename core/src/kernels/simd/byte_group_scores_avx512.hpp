// The float epilogue shared by the AVX-512 byte-code kernels that keep a
// whole 64-key group of one row at a time (the AMX and the VNNI kernels of
// byte_code_scores, kernels/code_scores.hpp): the same operations as the
// vector kernels' epilogue (code_scores_simd.hpp), so the same floats.
// Included only by files whose functions carry an AVX-512 target attribute.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/code_scores.hpp"

namespace entgraph::detail::byte_group {

// One block of one row: out(j) = (float(D_j) * k_scale[j]) * q_scale for
// the 16 keys from j on (d: their integer sums D, corrections taken off;
// keys past `keys` are neither read nor written), stored at out_row + j;
// returns top raised to their largest. By value: the callers' accumulators
// stay in registers.
__attribute__((target("avx512f,avx512bw"))) inline __m512 store_block(__m512i d, std::size_t j, std::size_t keys,
                                                                      const float* k_scale, __m512 q_scale,
                                                                      float* out_row, __m512 top) {
  const std::size_t valid = std::min(kCodeBlockKeys, keys - j);
  const __mmask16 lanes = static_cast<__mmask16>((1u << valid) - 1u);
  const __m512 score =
      _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_maskz_loadu_ps(lanes, k_scale + j)), q_scale);
  _mm512_mask_storeu_ps(out_row + j, lanes, score);
  return _mm512_mask_max_ps(top, lanes, top, score);
}

}  // namespace entgraph::detail::byte_group
