// The float epilogues shared by the AVX-512 byte-code kernels that keep a
// whole 64-key group of one row at a time (the AMX and the VNNI kernels of
// byte_code_scores and byte_code_bounds, kernels/code_scores.hpp): the same
// operations as the vector kernels' epilogues (code_scores_simd.hpp), so the
// same floats. The kernels hand them each block's raw sums of shifted query
// bytes times key bytes; the epilogue adds what the integer starts from.
// Included only by files whose functions carry an AVX-512 target attribute.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/code_scores.hpp"

#define ENTGRAPH_BYTE_GROUP_TARGET __attribute__((target("avx512f,avx512bw")))

namespace entgraph::detail::byte_group {

// The lanes of the 16 keys from j on that are keys (< keys).
ENTGRAPH_BYTE_GROUP_TARGET inline __mmask16 key_lanes(std::size_t j, std::size_t keys) {
  const std::size_t valid = std::min(kCodeBlockKeys, keys - j);
  return static_cast<__mmask16>((1u << valid) - 1u);
}

// byte_code_scores: out(j) = (float(D_j) * k_scale[j]) * q_scale[i] with
// D = sum - k_correction.
struct Scores {
  const std::int32_t* k_correction;
  const float* q_scale;
  const float* k_scale;

  // Stores one block of row i (the 16 keys from j on; keys past `keys` are
  // neither read nor written) at out_row + j; returns top raised to their
  // largest. By value: the callers' accumulators stay in registers.
  ENTGRAPH_BYTE_GROUP_TARGET __m512 block(__m512i sum, std::size_t i, std::size_t j, std::size_t keys, float* out_row,
                                          __m512 top) const {
    const __mmask16 lanes = key_lanes(j, keys);
    const __m512i d = _mm512_sub_epi32(sum, _mm512_maskz_loadu_epi32(lanes, k_correction + j));
    const __m512 score = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_maskz_loadu_ps(lanes, k_scale + j)),
                                       _mm512_set1_ps(q_scale[i]));
    _mm512_mask_storeu_ps(out_row + j, lanes, score);
    return _mm512_mask_max_ps(top, lanes, top, score);
  }
};

// byte_code_bounds: N = sum + row.add[i] + key.add[j] and
// out(j) = fma(float(N), row.scale[i] * key.scale[j], extra), extra the
// rounding column's product, plus the residual's (fused) where key.resid is
// set.
struct Bounds {
  CodeBoundSide row;
  CodeBoundSide key;

  ENTGRAPH_BYTE_GROUP_TARGET __m512 block(__m512i sum, std::size_t i, std::size_t j, std::size_t keys, float* out_row,
                                          __m512 top) const {
    const __mmask16 lanes = key_lanes(j, keys);
    const __m512i d = _mm512_add_epi32(_mm512_add_epi32(sum, _mm512_set1_epi32(row.add[i])),
                                       _mm512_maskz_loadu_epi32(lanes, key.add + j));
    __m512 extra = _mm512_mul_ps(_mm512_set1_ps(row.round[i]), _mm512_maskz_loadu_ps(lanes, key.round + j));
    if (key.resid != nullptr)
      extra = _mm512_fmadd_ps(_mm512_set1_ps(row.resid[i]), _mm512_maskz_loadu_ps(lanes, key.resid + j), extra);
    const __m512 step = _mm512_mul_ps(_mm512_set1_ps(row.scale[i]), _mm512_maskz_loadu_ps(lanes, key.scale + j));
    const __m512 bound = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), step, extra);
    _mm512_mask_storeu_ps(out_row + j, lanes, bound);
    return _mm512_mask_max_ps(top, lanes, top, bound);
  }
};

}  // namespace entgraph::detail::byte_group
