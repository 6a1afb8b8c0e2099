// entgraph fuzzing: what every target shares (tests/fuzz, docs/FUZZING.md).
//
// A target parses its input in a try block: an exception derived from
// std::exception (entgraph::Error for every malformed file) is an expected
// rejection and the target returns 0 (FUZZ_REJECTED) -- except std::bad_alloc
// and std::length_error: a reader that runs out of memory has tried to
// allocate more than its input can justify (under libFuzzer, the
// -malloc_limit_mb check usually reports that first). Once an input has
// parsed, everything the target does with the result must work and agree:
// FUZZ_CHECK aborts with a message when an invariant fails, and FUZZ_MUST
// turns an exception thrown on that path into such a failure, so libFuzzer
// (or the replay driver) reports the input.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace fuzz {

[[noreturn]] inline void fail(const char* what, const char* detail, const char* file, int line) {
  std::fprintf(stderr, "\nfuzz: invariant failed at %s:%d: %s%s%s\n", file, line, what, detail[0] ? ": " : "", detail);
  std::fflush(stderr);
  std::abort();
}

// Runs f(); an exception from it is an invariant failure named by what.
template <class F>
auto must(const char* what, F&& f, const char* file, int line) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    fail(what, e.what(), file, line);
  }
}

// The catch block of the parse: returns normally for an expected rejection.
inline void rejected(const std::exception& e, const char* file, int line) {
  if (dynamic_cast<const std::bad_alloc*>(&e) || dynamic_cast<const std::length_error*>(&e))
    fail("the reader ran out of memory (an allocation the input does not justify)", e.what(), file, line);
}

}  // namespace fuzz

#define FUZZ_CHECK(cond)                                      \
  do {                                                        \
    if (!(cond)) ::fuzz::fail(#cond, "", __FILE__, __LINE__); \
  } while (0)

#define FUZZ_REJECTED(e) ::fuzz::rejected(e, __FILE__, __LINE__)

#define FUZZ_MUST(what, expr) ::fuzz::must(what, [&] { return expr; }, __FILE__, __LINE__)
