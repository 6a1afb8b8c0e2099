// entgraph internal: ENTGRAPH_CPU_CLONES, for plain loops whose results do
// not depend on the instruction set (integer work, or double sums in a fixed
// order whose products are exact) outside the dispatched SIMD kernels: GCC
// compiles the function for AVX-512, AVX2 and the baseline and the loader
// picks the CPU's (target_clones; whatever --isa says, as the results are
// the same). Elsewhere it is nothing.
#pragma once

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define ENTGRAPH_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ENTGRAPH_CPU_CLONES
#endif
