// Run-time choices of the CPU path: the instruction-set list, names, parsing,
// forcing an instruction set, and the thread count.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>
#include <thread>

#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/transforms.hpp"
#include "runtime/numbers.hpp"
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

  TEST_CASE("runtime: number_text is the shortest text that reads back; parse_decimal takes plain decimals only") {
    using entgraph::detail::number_text;
    CHECK(number_text(0.1) == "0.1");
    CHECK(number_text(1e30) == "1e+30");
    CHECK(number_text(1.0 / 3.0) == "0.3333333333333333");
    CHECK(number_text(1000.0) == "1000");
    CHECK(number_text(-2.5) == "-2.5");
    CHECK(number_text(0.0) == "0");
    CHECK(number_text(0.1f) == "0.1");
    CHECK(number_text(1e39) == "1e+39");
    CHECK(number_text(std::numeric_limits<float>::max()) == "3.4028235e+38");
    CHECK(number_text(std::numeric_limits<double>::max()) == "1.7976931348623157e+308");
    CHECK(number_text(std::numeric_limits<double>::quiet_NaN()) == "nan");
    CHECK(number_text(-std::numeric_limits<float>::infinity()) == "-inf");
    for (double x : {0.1, 1e-300, 123456.789, 6.02214076e23, 5e-324}) {
      CAPTURE(x);
      CHECK(std::strtod(number_text(x).c_str(), nullptr) == x);
    }
    for (float x : {0.1f, 1e-40f, 16777217.0f, 3.14159265f}) {
      CAPTURE(x);
      CHECK(static_cast<float>(std::strtod(number_text(x).c_str(), nullptr)) == x);
    }

    using entgraph::detail::parse_decimal;
    for (const char* ok : {"1.5", "-2", "+.5", "5.", "1e3", "1E-3", "0", "1000", "3.4e38", "1e-400"}) {
      CAPTURE(ok);
      double x = -7;
      CHECK(parse_decimal(ok, x));
      CHECK(x == std::strtod(ok, nullptr));
    }
    for (const char* bad : {"", "0x2", "0X1p3", "inf", "-inf", "nan", "infinity", " 2", "2 ", "2x", "1e", "e5", ".",
                            "+", "1,5", "1e999", "--1", "1.2.3", "\t1"}) {
      CAPTURE(bad);
      double x = -7;
      CHECK_FALSE(parse_decimal(bad, x));
      CHECK(x == -7);  // untouched
    }
    CHECK(entgraph::detail::fits_float(3.4028235e38));
    CHECK_FALSE(entgraph::detail::fits_float(1e39));
    CHECK_FALSE(entgraph::detail::fits_float(0x1.ffffffp127));  // rounds to infinity
  }

  TEST_CASE("runtime: messages print numbers in their shortest form, not with %f") {
    std::vector<float> row = {1.0f, 2.0f}, out(2);
    try {
      entmax<float>({row.data(), 1, 2}, {out.data(), 1, 2}, 1e30);
      FAIL("expected an error");
    } catch (const Error& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.find("got 1e+30") != std::string::npos);
      CHECK(what.find("1000000000000000019884624838656") == std::string::npos);
      CHECK(what.find("expected 1 <= alpha <= 1000;") != std::string::npos);
    }
  }
}  // TEST_SUITE
