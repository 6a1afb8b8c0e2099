// The CUDA emulator's stand-in for <cuda_fp16.h>: float16 as its bits, with
// the conversions entgraph's kernels use (round to nearest even, through the
// host compiler's _Float16).
#pragma once

#include <cstdint>
#include <cstring>

struct __half {
  std::uint16_t bits;
};
inline __half __float2half_rn(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  __half out;
  std::memcpy(&out.bits, &h, sizeof h);
  return out;
}
inline float __half2float(__half x) {
  _Float16 h;
  std::memcpy(&h, &x.bits, sizeof h);
  return static_cast<float>(h);
}
inline std::uint16_t __half_as_ushort(__half x) { return x.bits; }
inline __half __ushort_as_half(std::uint16_t bits) { return __half{bits}; }
