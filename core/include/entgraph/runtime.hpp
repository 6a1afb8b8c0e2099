// entgraph: run-time choices of the CPU path: instruction set and threads.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace entgraph {

// The kernels the float32 path can run. `reference` is the scalar float64
// oracle (float rows are widened, transformed, rounded back); the others are
// xsimd kernels compiled for that instruction set (simd128 is WebAssembly SIMD,
// reached through xsimd's SSE4.1 code in the Emscripten build).
enum class CpuIsa { reference, sse2, avx2, avx512, simd128 };

// "reference", "sse2", "avx2", "avx512", "simd128".
const char* cpu_isa_name(CpuIsa isa);
// Inverse of cpu_isa_name; throws entgraph::Error for unknown names.
CpuIsa parse_cpu_isa(const std::string& name);

// Instruction sets that were compiled in and that this CPU supports, best last.
// Always contains `reference`.
std::vector<CpuIsa> available_cpu_isas();

// The instruction set used now. Defaults to the best available one, or to
// $ENTGRAPH_CPU_ISA when that names an available one (an unavailable or
// unknown name there is an error at first use, not a silent fallback).
CpuIsa cpu_isa();
// Forces an instruction set (tests run every path this way); throws if it is
// not available. Not thread-safe with respect to running kernels.
void set_cpu_isa(CpuIsa isa);

// Threads used for large inputs. Defaults to $ENTGRAPH_NUM_THREADS, else the
// number of hardware threads. set_num_threads(0) restores that default.
// Results never depend on the thread count.
std::size_t num_threads();
void set_num_threads(std::size_t n);

}  // namespace entgraph
