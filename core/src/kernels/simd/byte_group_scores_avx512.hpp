// The float epilogues shared by the AVX-512 byte-code kernels that keep a
// whole 64-key group of several rows at a time (the AMX and the VNNI kernels
// of byte_code_scores and byte_code_bounds, kernels/code_scores.hpp): the
// same operations as the vector kernels' epilogues (code_scores_simd.hpp), so
// the same floats. The kernels hand them each block's raw sums of shifted
// query bytes times key bytes; the epilogue adds what the integer starts
// from. A block's key-side vectors (`Keys`) are loaded once for all the rows
// of a tile, and the rows' group maxima are reduced together
// (row_maxima): per pair, the epilogue is then a handful of instructions.
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

  // The 16 keys from j on (keys past `keys` are neither read nor written).
  struct Keys {
    __mmask16 lanes;
    std::size_t j;
    __m512i correction;
    __m512 scale;
  };
  ENTGRAPH_BYTE_GROUP_TARGET Keys keys_at(std::size_t j, std::size_t keys) const {
    const __mmask16 lanes = key_lanes(j, keys);
    return {lanes, j, _mm512_maskz_loadu_epi32(lanes, k_correction + j), _mm512_maskz_loadu_ps(lanes, k_scale + j)};
  }

  // Stores row i's block at out_row + j; returns top raised to its largest.
  // By value: the callers' accumulators stay in registers.
  ENTGRAPH_BYTE_GROUP_TARGET __m512 block(__m512i sum, const Keys& k, std::size_t i, float* out_row, __m512 top) const {
    const __m512i d = _mm512_sub_epi32(sum, k.correction);
    const __m512 score = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(d), k.scale), _mm512_set1_ps(q_scale[i]));
    _mm512_mask_storeu_ps(out_row + k.j, k.lanes, score);
    return _mm512_mask_max_ps(top, k.lanes, top, score);
  }
};

// byte_code_bounds: N = sum + row.add[i] + key.add[j] and
// out(j) = fma(float(N), row.scale[i] * key.scale[j], extra), extra the
// rounding column's product, plus the residual's (fused) where key.resid is
// set.
struct Bounds {
  CodeBoundSide row;
  CodeBoundSide key;

  struct Keys {
    __mmask16 lanes;
    std::size_t j;
    __m512i add;
    __m512 scale, round, resid;
  };
  ENTGRAPH_BYTE_GROUP_TARGET Keys keys_at(std::size_t j, std::size_t keys) const {
    const __mmask16 lanes = key_lanes(j, keys);
    return {lanes,
            j,
            _mm512_maskz_loadu_epi32(lanes, key.add + j),
            _mm512_maskz_loadu_ps(lanes, key.scale + j),
            _mm512_maskz_loadu_ps(lanes, key.round + j),
            key.resid != nullptr ? _mm512_maskz_loadu_ps(lanes, key.resid + j) : _mm512_setzero_ps()};
  }

  ENTGRAPH_BYTE_GROUP_TARGET __m512 block(__m512i sum, const Keys& k, std::size_t i, float* out_row, __m512 top) const {
    const __m512i d = _mm512_add_epi32(_mm512_add_epi32(sum, _mm512_set1_epi32(row.add[i])), k.add);
    __m512 extra = _mm512_mul_ps(_mm512_set1_ps(row.round[i]), k.round);
    if (key.resid != nullptr) extra = _mm512_fmadd_ps(_mm512_set1_ps(row.resid[i]), k.resid, extra);
    const __m512 step = _mm512_mul_ps(_mm512_set1_ps(row.scale[i]), k.scale);
    const __m512 bound = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), step, extra);
    _mm512_mask_storeu_ps(out_row + k.j, k.lanes, bound);
    return _mm512_mask_max_ps(top, k.lanes, top, bound);
  }
};

// The largest lane of each of 16 vectors, lane r of the result for top[r]:
// a transposing tree (15 maxima and 30 shuffles for the 16 rows, where a
// reduction per row takes 4 dependent shuffle-max steps each). Every level
// halves the lanes each row keeps: 16 -> 8 (256-bit halves), 4 (128-bit
// lanes), 2, 1; the last leaves row k + 4 s at lane 4 k + s.
ENTGRAPH_BYTE_GROUP_TARGET inline __m512 row_maxima(const __m512 (&top)[16]) {
  __m512 w[8], x[4], y[2];
  for (int p = 0; p < 8; ++p)
    w[p] = _mm512_max_ps(_mm512_shuffle_f32x4(top[2 * p], top[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(top[2 * p], top[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int p = 0; p < 4; ++p)
    x[p] = _mm512_max_ps(_mm512_shuffle_f32x4(w[2 * p], w[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[2 * p], w[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int p = 0; p < 2; ++p)
    y[p] = _mm512_max_ps(_mm512_shuffle_ps(x[2 * p], x[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(x[2 * p], x[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 z = _mm512_max_ps(_mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), z);
}

}  // namespace entgraph::detail::byte_group
