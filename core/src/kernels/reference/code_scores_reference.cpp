// The packing of code_scores' operands, its scalar kernels (code_scores and
// code_bounds), and the choice of kernel per instruction set.
#include <algorithm>
#include <string>

#include "entgraph/error.hpp"
#include "kernels/code_scores.hpp"

namespace entgraph::detail {

namespace {

// Key codes (m x r) per block of kCodeBlockKeys keys and per group of kDims
// dimensions: the group's kDims codes of each key of the block in order;
// missing keys and dimensions are zeros (pack_code_keys: pairs of 16-bit
// codes, pack_byte_keys: quads of bytes).
template <class T, std::size_t kDims>
std::vector<T> pack_key_blocks(const std::int16_t* k, std::size_t m, std::size_t r) {
  constexpr std::size_t B = kCodeBlockKeys;
  const std::size_t groups = (r + kDims - 1) / kDims, blocks = (m + B - 1) / B;
  std::vector<T> packed(blocks * groups * kDims * B, 0);
  for (std::size_t j = 0; j < m; ++j) {
    T* block = packed.data() + (j / B) * groups * kDims * B + (j % B) * kDims;
    for (std::size_t c = 0; c < r; ++c) block[(c / kDims) * kDims * B + (c % kDims)] = static_cast<T>(k[j * r + c]);
  }
  return packed;
}

}  // namespace

std::vector<std::int16_t> pack_code_keys(const std::int16_t* k, std::size_t m, std::size_t r) {
  return pack_key_blocks<std::int16_t, 2>(k, m, r);
}

std::vector<std::int32_t> pack_code_queries(const std::int16_t* q, std::size_t rows, std::size_t r) {
  const std::size_t pairs = (r + 1) / 2;
  std::vector<std::int32_t> packed(rows * pairs, 0);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t p = 0; p < pairs; ++p) {
      const std::uint16_t lo = static_cast<std::uint16_t>(q[i * r + 2 * p]);
      const std::uint16_t hi = 2 * p + 1 < r ? static_cast<std::uint16_t>(q[i * r + 2 * p + 1]) : 0;
      packed[i * pairs + p] = static_cast<std::int32_t>(static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16));
    }
  return packed;
}

bool byte_codes_fit(std::int32_t largest) { return largest >= 0 && largest <= 90; }  // 4 · 90² < 2^15

std::size_t byte_segment_quads(std::int32_t largest) {
  // A quad adds one pair sum of magnitude <= 2 · (2 largest) · largest to
  // each 16-bit lane.
  const std::int32_t pair = 4 * largest * largest;
  return pair == 0 ? std::size_t{1} << 20 : static_cast<std::size_t>(32767 / pair);
}

std::vector<std::int8_t> pack_byte_keys(const std::int16_t* k, std::size_t m, std::size_t r) {
  return pack_key_blocks<std::int8_t, 4>(k, m, r);
}

std::vector<std::int32_t> byte_key_corrections(const std::int16_t* k, std::size_t m, std::size_t r,
                                               std::int32_t offset) {
  constexpr std::size_t B = kCodeBlockKeys;
  std::vector<std::int32_t> correction((m + B - 1) / B * B, 0);
  for (std::size_t j = 0; j < m; ++j) {
    std::int32_t sum = 0;
    for (std::size_t c = 0; c < r; ++c) sum += k[j * r + c];
    correction[j] = offset * sum;
  }
  return correction;
}

std::vector<std::uint32_t> pack_byte_queries(const std::int16_t* q, std::size_t rows, std::size_t r,
                                             std::int32_t offset) {
  const std::size_t quads = (r + 3) / 4;
  std::vector<std::uint32_t> packed(rows * quads, 0);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t c = 0; c < quads * 4; ++c) {
      const std::int32_t u = (c < r ? q[i * r + c] : 0) + offset;
      packed[i * quads + c / 4] |= static_cast<std::uint32_t>(u & 0xFF) << (8 * (c % 4));
    }
  return packed;
}

namespace {

// Each 64-key group's largest value of the rows of out.
void group_maxima(const float* out, std::size_t rows, std::size_t keys, std::size_t ldo, float* group_max,
                  std::size_t ldg) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t g = 0; g * kCodeGroupKeys < keys; ++g) {
      const float* o = out + i * ldo + g * kCodeGroupKeys;
      group_max[i * ldg + g] = *std::max_element(o, o + std::min(kCodeGroupKeys, keys - g * kCodeGroupKeys));
    }
}

// The integer sum of query row i's shifted byte codes and key j's codes
// (q as pack_byte_queries, k as pack_byte_keys), plus `start`.
std::int32_t byte_dot(const std::uint32_t* q, const std::int8_t* k, std::size_t quads, std::size_t j,
                      std::int32_t start) {
  constexpr std::size_t B = kCodeBlockKeys;
  const std::int8_t* block = k + (j / B) * quads * 4 * B + (j % B) * 4;
  std::int32_t d = start;
  for (std::size_t p = 0; p < quads; ++p)
    for (std::size_t c = 0; c < 4; ++c)
      d += static_cast<std::int32_t>((q[p] >> (8 * c)) & 0xFFu) * block[p * 4 * B + c];
  return d;
}

void byte_code_scores_reference(const std::uint32_t* q, std::size_t rows, const std::int8_t* k,
                                const std::int32_t* k_correction, std::size_t quads, std::size_t, std::size_t keys,
                                const float* q_scale, const float* k_scale, float* out, std::size_t ldo,
                                float* group_max, std::size_t ldg) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < keys; ++j)
      out[i * ldo + j] =
          static_cast<float>(byte_dot(q + i * quads, k, quads, j, -k_correction[j])) * k_scale[j] * q_scale[i];
  group_maxima(out, rows, keys, ldo, group_max, ldg);
}

void code_scores_reference(const std::int32_t* q, std::size_t rows, const std::int16_t* k, std::size_t pairs,
                           std::size_t keys, const float* q_scale, const float* k_scale, float* out,
                           std::size_t ldo, float* group_max, std::size_t ldg) {
  constexpr std::size_t B = kCodeBlockKeys;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < keys; ++j) {
      const std::int16_t* block = k + (j / B) * pairs * 2 * B + (j % B) * 2;
      std::int32_t d = 0;
      for (std::size_t p = 0; p < pairs; ++p) {
        const std::uint32_t w = static_cast<std::uint32_t>(q[i * pairs + p]);
        d += static_cast<std::int16_t>(w & 0xFFFFu) * block[p * 2 * B] +
             static_cast<std::int16_t>(w >> 16) * block[p * 2 * B + 1];
      }
      out[i * ldo + j] = static_cast<float>(d) * k_scale[j] * q_scale[i];
    }
  group_maxima(out, rows, keys, ldo, group_max, ldg);
}

// The bound of the integer sum d (margins included) for row i and key j.
float bound_of(std::int32_t d, const CodeBoundSide& row, const CodeBoundSide& key, std::size_t i, std::size_t j) {
  float b = static_cast<float>(d) * (row.scale[i] * key.scale[j]);
  if (key.resid != nullptr) b += row.resid[i] * key.resid[j];
  return b + row.round[i] * key.round[j];
}

void code_bounds_reference(const std::int32_t* q, std::size_t rows, const std::int16_t* k, std::size_t pairs,
                           std::size_t keys, const CodeBoundSide& row, const CodeBoundSide& key, float* out,
                           std::size_t ldo, float* group_max, std::size_t ldg) {
  constexpr std::size_t B = kCodeBlockKeys;
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < keys; ++j) {
      const std::int16_t* block = k + (j / B) * pairs * 2 * B + (j % B) * 2;
      std::int32_t d = row.add[i] + key.add[j];
      for (std::size_t p = 0; p < pairs; ++p) {
        const std::uint32_t w = static_cast<std::uint32_t>(q[i * pairs + p]);
        d += static_cast<std::int16_t>(w & 0xFFFFu) * block[p * 2 * B] +
             static_cast<std::int16_t>(w >> 16) * block[p * 2 * B + 1];
      }
      out[i * ldo + j] = bound_of(d, row, key, i, j);
    }
  }
  group_maxima(out, rows, keys, ldo, group_max, ldg);
}

void byte_code_bounds_reference(const std::uint32_t* q, std::size_t rows, const std::int8_t* k, std::size_t quads,
                                std::size_t, std::size_t keys, const CodeBoundSide& row, const CodeBoundSide& key,
                                float* out, std::size_t ldo, float* group_max, std::size_t ldg) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < keys; ++j)
      out[i * ldo + j] = bound_of(byte_dot(q + i * quads, k, quads, j, row.add[i] + key.add[j]), row, key, i, j);
  group_maxima(out, rows, keys, ldo, group_max, ldg);
}

}  // namespace

namespace {

const CodeKernels& code_kernels(CpuIsa isa, const char* op) {
  static const CodeKernels reference = {&code_scores_reference, &byte_code_scores_reference, &code_bounds_reference,
                                        &byte_code_bounds_reference};
  switch (isa) {
#if defined(ENTGRAPH_HAVE_X86)
    case CpuIsa::sse2:
      return kSse2CodeKernels;
    case CpuIsa::avx2:
      return kAvx2CodeKernels;
    case CpuIsa::avx512:
      return kAvx512CodeKernels;
#endif
#if defined(ENTGRAPH_HAVE_SIMD128)
    case CpuIsa::simd128:
      return kSimd128CodeKernels;
#endif
    case CpuIsa::reference:
      return reference;
    default:
      throw Error(at_op(op) + "isa '" + cpu_isa_name(isa) + "' is not compiled in");
  }
}

}  // namespace

CodeScores code_scores_kernel(CpuIsa isa) { return code_kernels(isa, "code_scores_kernel").scores; }
ByteKernels byte_kernels(CpuIsa isa) {
  const CodeKernels& kernels = code_kernels(isa, "byte_kernels");
  return {kernels.byte_scores, kernels.byte_bounds};
}
namespace {

// The fastest byte dot-product kernels that run here (AMX, AVX-512 VNNI,
// AVX-VNNI), or nulls.
ByteKernels dot_product_kernels() {
  for (const ByteKernels& fastest : {byte_amx_kernels(), byte_vnni_kernels(), byte_avx_vnni_kernels()})
    if (fastest.scores != nullptr) return fastest;
  return {};
}

}  // namespace

bool has_byte_dot_products() { return dot_product_kernels().scores != nullptr; }
ByteKernels fastest_byte_kernels() {
  const ByteKernels dot = dot_product_kernels();
  return dot.scores != nullptr ? dot : byte_kernels(cpu_isa());
}
CodeBounds code_bounds_kernel(CpuIsa isa) { return code_kernels(isa, "code_bounds_kernel").bounds; }

}  // namespace entgraph::detail
