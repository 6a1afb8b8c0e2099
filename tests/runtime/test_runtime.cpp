// Run-time choices of the CPU path: the instruction-set list, names, parsing,
// forcing an instruction set, and the thread count.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>

#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "support.hpp"

using namespace entgraph;

namespace {

constexpr CpuIsa kAll[] = {CpuIsa::reference, CpuIsa::sse2, CpuIsa::avx2, CpuIsa::avx512, CpuIsa::simd128};

bool available(CpuIsa isa) {
  const auto v = available_cpu_isas();
  return std::find(v.begin(), v.end(), isa) != v.end();
}

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("runtime: cpu_isa_name and parse_cpu_isa are inverse") {
    CHECK(std::string(cpu_isa_name(CpuIsa::reference)) == "reference");
    CHECK(std::string(cpu_isa_name(CpuIsa::sse2)) == "sse2");
    CHECK(std::string(cpu_isa_name(CpuIsa::avx2)) == "avx2");
    CHECK(std::string(cpu_isa_name(CpuIsa::avx512)) == "avx512");
    CHECK(std::string(cpu_isa_name(CpuIsa::simd128)) == "simd128");
    for (CpuIsa isa : kAll) {
      CAPTURE(cpu_isa_name(isa));
      CHECK(parse_cpu_isa(cpu_isa_name(isa)) == isa);
    }
  }

  TEST_CASE("runtime: parse_cpu_isa rejects unknown names and names them") {
    for (const char* bad : {"", "AVX2", "avx", "avx512bw", "sse4.1", "reference ", "neon"}) {
      CAPTURE(bad);
      CHECK_THROWS_AS(parse_cpu_isa(bad), entgraph::Error);
    }
    CHECK_THROWS_WITH_AS(parse_cpu_isa("neon"), doctest::Contains("neon"), entgraph::Error);
    CHECK_THROWS_WITH_AS(parse_cpu_isa("neon"), doctest::Contains("avx2"), entgraph::Error);
  }

  TEST_CASE("runtime: available_cpu_isas holds reference, has no duplicates, and lists the best last") {
    const auto v = available_cpu_isas();
    REQUIRE(!v.empty());
    CHECK(v.front() == CpuIsa::reference);
    CHECK(std::set<CpuIsa>(v.begin(), v.end()).size() == v.size());
    // Order of preference: reference < sse2 < simd128 < avx2 < avx512.
    auto rank = [](CpuIsa isa) {
      switch (isa) {
        case CpuIsa::reference:
          return 0;
        case CpuIsa::sse2:
          return 1;
        case CpuIsa::simd128:
          return 2;
        case CpuIsa::avx2:
          return 3;
        case CpuIsa::avx512:
          return 4;
      }
      return -1;
    };
    for (std::size_t k = 1; k < v.size(); ++k) CHECK(rank(v[k - 1]) < rank(v[k]));
    // Never both the x86 kernels and the WebAssembly kernel.
    CHECK(!(available(CpuIsa::simd128) && available(CpuIsa::sse2)));
    // AVX-512 implies AVX2 implies SSE2 on x86.
    if (available(CpuIsa::avx512)) CHECK(available(CpuIsa::avx2));
    if (available(CpuIsa::avx2)) CHECK(available(CpuIsa::sse2));
  }

  TEST_CASE("runtime: set_cpu_isa forces every available instruction set and rejects the others") {
    const CpuIsa saved = cpu_isa();
    CHECK(available(saved));
    for (CpuIsa isa : kAll) {
      CAPTURE(cpu_isa_name(isa));
      if (available(isa)) {
        set_cpu_isa(isa);
        CHECK(cpu_isa() == isa);
      } else {
        set_cpu_isa(CpuIsa::reference);
        CHECK_THROWS_AS(set_cpu_isa(isa), entgraph::Error);
        CHECK(cpu_isa() == CpuIsa::reference);  // unchanged by the failed call
      }
    }
    {
      test::IsaScope scope(CpuIsa::reference);
      CHECK(cpu_isa() == CpuIsa::reference);
      CHECK(std::string(scope.name()) == "reference");
    }
    set_cpu_isa(saved);
    CHECK(cpu_isa() == saved);
  }

  TEST_CASE("runtime: the default instruction set is the best available one") {
    // Unless the environment forces one (CI runs the suite once per ISA that way).
    if (std::getenv("ENTGRAPH_CPU_ISA") == nullptr) {
      const CpuIsa saved = cpu_isa();
      CHECK(saved == available_cpu_isas().back());
    } else {
      CHECK(cpu_isa() == parse_cpu_isa(std::getenv("ENTGRAPH_CPU_ISA")));
    }
  }

  TEST_CASE("runtime: set_num_threads sets the count and 0 restores the default") {
    set_num_threads(0);
    const std::size_t def = num_threads();
    CHECK(def >= 1);
    if (std::getenv("ENTGRAPH_NUM_THREADS") == nullptr && std::thread::hardware_concurrency() > 0)
      CHECK(def == std::thread::hardware_concurrency());
    for (std::size_t n : {1, 2, 3, 7, 64}) {
      set_num_threads(n);
      CHECK(num_threads() == n);
    }
    set_num_threads(0);
    CHECK(num_threads() == def);
    {
      test::ThreadsScope scope(5);
      CHECK(num_threads() == 5);
    }
    CHECK(num_threads() == def);
  }

}  // TEST_SUITE
