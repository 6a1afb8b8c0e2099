// entgraph internal: lane-compression tables shared by the SIMD kernels
// (data only, no code: a function here would be compiled with each
// instruction set's flags and one copy kept by the linker for all).
#pragma once

#include <cstdint>

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

}  // namespace entgraph::detail::simd
