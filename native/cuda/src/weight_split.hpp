// The weights of P V as two 16-bit parts, so that tensor cores multiply them
// by V almost exactly (batched_attention_kernel.cuh).
//
// A weight p (in [0, 1]: exp2(x - max) for softmax, [x - max - tau]_+^q
// for entmax) rounded once to bfloat16 is off by up to 2^-8 of itself, about
// 4e-3 of an output; that alone breaks exactness. So p becomes hi = round(p)
// and lo = round(p - hi): p - hi is exact in float32 (hi is p's nearest
// 16-bit neighbour, so within a factor 2 of p, Sterbenz), and the two
// roundings leave |p - hi - lo| <= 2^-16 p for bfloat16 (8-bit significands:
// 2^-8 of 2^-8). Both products hi v and lo v are exact on tensor cores and
// summed in float32. For float16 (11-bit significands, but exponents down to
// 2^-24 only) p is scaled by 2^15 first, so that small weights stay normal:
// the error is then at most 2^-22 of the scaled weight or 2^-25 absolute
// (2^-40 of an unscaled weight of 1), and the kernel divides the output by
// the same power of two, exactly.
//
// Plain C++ over a rounding policy so that the host tests
// (tests/cuda/host/test_weight_split.cpp) check the bounds above with an
// exhaustive reference rounding; the kernel's policies use CUDA's
// round-to-nearest-even conversions.
#pragma once

#include <cstdint>

#include "mma_layout.hpp"  // ENTGRAPH_HOST_DEVICE

namespace entgraph::cuda::detail {

// What the weights are multiplied by before the split (a power of two).
inline constexpr float kWeightScaleBfloat16 = 1.0f;
inline constexpr float kWeightScaleFloat16 = 32768.0f;  // 2^15: weights <= 1 stay below 65504

struct WeightParts {
  std::uint16_t hi, lo;  // bit patterns of the 16-bit format
};

// Round provides to_bits(float) (round to nearest even, either sign) and
// to_float(uint16) (exact widening). p: an already scaled weight.
template <class Round>
ENTGRAPH_HOST_DEVICE inline WeightParts split_weight(float p) {
  const std::uint16_t hi = Round::to_bits(p);
  const float rest = p - Round::to_float(hi);  // exact (see above)
  return {hi, Round::to_bits(rest)};
}

}  // namespace entgraph::cuda::detail
