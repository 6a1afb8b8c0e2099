// entgraph internal: lane-compression tables shared by the SIMD kernels.
// The functions here have internal linkage (static): each translation unit
// keeps its own copy, compiled with its own flags (an inline function would
// be one copy for all, kept by the linker from any of them).
#pragma once

#include <cstdint>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace entgraph::detail::simd {

// Per 8-bit lane mask, the indices of the kept lanes in order, 4 bits each
// (lowest first): AVX2 permutes a vector by it to move the kept lanes to the
// front.
struct Compress8 {
  std::uint32_t packed[256];
  constexpr Compress8() : packed() {
    for (unsigned m = 0; m < 256; ++m) {
      unsigned c = 0;
      for (unsigned l = 0; l < 8; ++l)
        if ((m >> l) & 1u) packed[m] |= l << (4 * c++);
    }
  }
};
inline constexpr Compress8 kCompress8{};

#if defined(__AVX2__)
// The permutation that moves the lanes of an 8-lane mask (movemask bits) to
// the front, in order (_mm256_permutevar8x32_*).
static inline __m256i compress8_lanes(int bits) {
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(kCompress8.packed[bits])),
                                            _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                          _mm256_set1_epi32(7));
}
#endif

}  // namespace entgraph::detail::simd
