#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "io/binary.hpp"
#include "kernels/transform_kernels.hpp"

#if defined(ENTGRAPH_HAVE_X86)
#include <xsimd/xsimd.hpp>
#endif

namespace entgraph {
namespace {

constexpr const char* kNames[] = {"reference", "sse2", "avx2", "avx512", "simd128"};

bool compiled_and_supported(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::reference:
      return true;
#if defined(ENTGRAPH_HAVE_X86)
    case CpuIsa::sse2:
      return xsimd::available_architectures().sse2;
    case CpuIsa::avx2:
      return xsimd::available_architectures().avx2 && xsimd::available_architectures().fma3_avx2;
    case CpuIsa::avx512:
      return xsimd::available_architectures().avx512bw;
#endif
#if defined(ENTGRAPH_HAVE_SIMD128)
    case CpuIsa::simd128:
      return true;
#endif
    default:
      return false;
  }
}

CpuIsa initial_isa() {
  if (const char* env = std::getenv("ENTGRAPH_CPU_ISA")) {
    const std::string name = detail::printable(env, std::strlen(env));
    CpuIsa isa;
    try {
      isa = parse_cpu_isa(env);
    } catch (const Error&) {
      throw Error("ENTGRAPH_CPU_ISA: unknown instruction set (got '" + name +
                  "', expected reference, sse2, avx2, avx512 or simd128)");
    }
    if (!compiled_and_supported(isa))
      throw Error("ENTGRAPH_CPU_ISA: '" + name + "' is not available on this machine or build");
    return isa;
  }
  return available_cpu_isas().back();
}

// -1: not chosen yet.
std::atomic<int> g_isa{-1};

}  // namespace

const char* cpu_isa_name(CpuIsa isa) { return kNames[static_cast<int>(isa)]; }

CpuIsa parse_cpu_isa(const std::string& name) {
  for (int i = 0; i < 5; ++i)
    if (name == kNames[i]) return static_cast<CpuIsa>(i);
  throw Error(at_op("parse_cpu_isa") + "unknown instruction set (got '" + name +
              "', expected reference, sse2, avx2, avx512 or simd128)");
}

std::vector<CpuIsa> available_cpu_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::reference, CpuIsa::sse2, CpuIsa::simd128, CpuIsa::avx2, CpuIsa::avx512})
    if (compiled_and_supported(isa)) out.push_back(isa);
  return out;
}

CpuIsa cpu_isa() {
  int v = g_isa.load(std::memory_order_acquire);
  if (v < 0) {
    v = static_cast<int>(initial_isa());
    g_isa.store(v, std::memory_order_release);
  }
  return static_cast<CpuIsa>(v);
}

void set_cpu_isa(CpuIsa isa) {
  if (!compiled_and_supported(isa))
    throw Error(at_op("set_cpu_isa") + "isa '" + cpu_isa_name(isa) + "' is not available on this machine or build");
  g_isa.store(static_cast<int>(isa), std::memory_order_release);
}

namespace detail {

const TransformKernels& transform_kernels(CpuIsa isa) {
  switch (isa) {
#if defined(ENTGRAPH_HAVE_X86)
    case CpuIsa::sse2:
      return kSse2Kernels;
    case CpuIsa::avx2:
      return kAvx2Kernels;
    case CpuIsa::avx512:
      return kAvx512Kernels;
#endif
#if defined(ENTGRAPH_HAVE_SIMD128)
    case CpuIsa::simd128:
      return kSimd128Kernels;
#endif
    case CpuIsa::reference:
      return kReferenceKernels;
    default:
      throw Error(at_op("transform_kernels") + "isa '" + cpu_isa_name(isa) + "' is not compiled in");
  }
}

}  // namespace detail
}  // namespace entgraph
