// Helpers shared by the io tests (test_npy.cpp, test_safetensors.cpp,
// test_capture.cpp): a temporary folder, whole files as bytes or text, the
// message and code of a thrown entgraph::Error, and the loops that feed corrupt inputs
// to a reader (a table of named cases, every truncation, random byte flips).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "entgraph/error.hpp"

namespace entgraph::test {

using Bytes = std::vector<unsigned char>;

// A fresh directory under the system's temp folder, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ =
        std::filesystem::temp_directory_path() / ("entgraph_io_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline Bytes zeros(std::size_t n) { return Bytes(n, 0); }

// Whole files, created or truncated on writing.
inline void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
inline Bytes read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}
inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}
inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The names in a folder (hidden ones too), sorted.
inline std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The message of the entgraph::Error that f throws, or "(no error)".
template <class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The code of the entgraph::Error that f throws (FAIL when it throws none).
template <class F>
ErrorCode error_code_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  FAIL("expected an entgraph::Error");
  return ErrorCode::bad_argument;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

inline bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// A corrupt input for a reader, and a part of the message it must give.
struct CorruptInput {
  const char* what;
  Bytes bytes;
  const char* expected;
};

// Each case's bytes through read(bytes), which must throw entgraph::Error
// whose message starts with prefix (the reader and the name it was given) and
// contains the case's expected part.
template <class Read>
void check_corrupt_inputs(const std::vector<CorruptInput>& cases, const std::string& prefix, Read&& read) {
  for (const CorruptInput& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    const std::string message = thrown([&] { (void)read(c.bytes); });
    CAPTURE(message);
    CHECK(starts_with(message, prefix));
    CHECK(contains(message, c.expected));
  }
}

// Calls check(cut) with every proper prefix cut of good (a copy of exactly
// that length), shortest first.
template <class Seq, class Check>
void for_each_truncation(const Seq& good, Check&& check) {
  for (std::size_t n = 0; n < good.size(); ++n) {
    CAPTURE(n);
    check(Seq(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
  }
}

// Calls check(bad) with trials copies of good, in each of which 1 to 3
// elements (the number drawn from rng) are changed by flip(bad).
template <class Seq, class Rng, class Flip, class Check>
void for_each_corruption(const Seq& good, Rng& rng, int trials, Flip&& flip, Check&& check) {
  for (int trial = 0; trial < trials; ++trial) {
    Seq bad = good;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) flip(bad);
    CAPTURE(trial);
    check(bad);
  }
}

// How many of the corruptions of good (as for_each_corruption makes them)
// read(bad) accepts: returns from, rather than throwing entgraph::Error.
template <class Seq, class Rng, class Flip, class Read>
std::size_t count_accepted_corruptions(const Seq& good, Rng& rng, int trials, Flip&& flip, Read&& read) {
  std::size_t accepted = 0;
  for_each_corruption(good, rng, trials, flip, [&](const Seq& bad) {
    try {
      read(bad);
      ++accepted;
    } catch (const Error&) {
    }
  });
  return accepted;
}

}  // namespace entgraph::test

// Checks that expr throws entgraph::Error whose message contains needle.
#define CHECK_ERROR_CONTAINS(expr, needle)                                        \
  do {                                                                            \
    const std::string message_ = ::entgraph::test::thrown([&] { (void)(expr); }); \
    CAPTURE(message_);                                                            \
    CHECK(::entgraph::test::contains(message_, needle));                          \
  } while (0)
