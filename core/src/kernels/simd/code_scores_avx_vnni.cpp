// The AVX-VNNI kernels of byte_code_scores and byte_code_bounds
// (kernels/code_scores.hpp): the avx2 tiles of code_scores_simd.hpp (4 rows
// x 16 keys, the same epilogues, so the same floats) with vpdpbusd's VEX
// form adding four unsigned x signed byte products into each 32-bit lane,
// where vpmaddubsw needs a 16-bit sum and a widening after every quad at a
// code range of 90. Built with -mavx2 -mfma -mavxvnni on x86 (core's
// CMakeLists.txt); handed out only where the library runs on avx2 and the
// CPU has AVX-VNNI (Alder Lake, Sapphire Rapids, Sierra Forest, Zen 5 and
// later), and elsewhere null.
#include "entgraph/runtime.hpp"
#include "kernels/code_scores.hpp"

#if defined(__AVXVNNI__) && defined(__AVX2__)
#include "kernels/simd/code_scores_simd.hpp"
#endif

namespace entgraph::detail {

#if defined(__AVXVNNI__) && defined(__AVX2__)
ByteKernels byte_avx_vnni_kernels() {
  static const bool available = __builtin_cpu_supports("avxvnni");
  if (!available || cpu_isa() != CpuIsa::avx2) return {};
  return {code_simd::kByteCodeScores, code_simd::kByteCodeBounds};
}
#else
ByteKernels byte_avx_vnni_kernels() { return {}; }
#endif

}  // namespace entgraph::detail
