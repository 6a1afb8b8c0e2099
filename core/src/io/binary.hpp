// entgraph internal: byte-level helpers shared by the file formats in io/
// (.npy, safetensors, captures): little-endian codecs that do not depend on
// the host's byte order, IEEE half and bfloat16 conversions, and opening and
// reading files with errors that name the file (reading and writing whole
// files: entgraph/io/files.hpp; quoting hostile bytes: entgraph/text.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/io/files.hpp"
#include "entgraph/text.hpp"

namespace entgraph::detail {

// Public (entgraph/io/files.hpp, entgraph/text.hpp); the library's own code
// names them detail::.
using entgraph::FileBytes;
using entgraph::printable;
using entgraph::read_file_bytes;
using entgraph::write_file_bytes;
using entgraph::write_files_bytes;

// Throws entgraph::Error "<op>: <name>: <what>", the form of every error of
// the file formats (name is a path, or "<memory>" for a buffer): by default
// about the contents (bad_file); io where the system refused, limit for a
// size over a limit.
[[noreturn]] void fail(const char* op, const std::string& name, const std::string& what,
                       ErrorCode code = ErrorCode::bad_file);

// Element count of shape, or false if it overflows.
inline bool checked_count(const std::vector<std::size_t>& shape, std::size_t& count) {
  count = 1;
  for (std::size_t s : shape) {
    if (s != 0 && count > std::numeric_limits<std::size_t>::max() / s) return false;
    count *= s;
  }
  return true;
}

// The n (<= 8) bytes at p as a little-endian unsigned integer.
inline std::uint64_t load_le(const unsigned char* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// Stores the low n (<= 8) bytes of v at p, little-endian.
inline void store_le(unsigned char* p, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// IEEE binary16 -> double; exact for every value, NaN and infinities kept.
double half_to_double(std::uint16_t h);
// float -> IEEE binary16, rounded to nearest even; overflow gives infinity,
// NaN stays NaN.
std::uint16_t float_to_half(float f);
// bfloat16 (the high half of a float32) -> float; exact.
float bfloat16_to_float(std::uint16_t b);

// One little-endian element at p, bit-exact (NaN payloads and -0 kept).
inline float load_f32(const unsigned char* p) {
  const auto bits = static_cast<std::uint32_t>(load_le(p, 4));
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline double load_f64(const unsigned char* p) {
  const std::uint64_t bits = load_le(p, 8);
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}
inline double load_f16(const unsigned char* p) { return half_to_double(static_cast<std::uint16_t>(load_le(p, 2))); }
inline float load_bf16(const unsigned char* p) { return bfloat16_to_float(static_cast<std::uint16_t>(load_le(p, 2))); }
inline std::int16_t load_i16(const unsigned char* p) {
  return static_cast<std::int16_t>(static_cast<std::uint16_t>(load_le(p, 2)));
}
inline std::int32_t load_i32(const unsigned char* p) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(load_le(p, 4)));
}
inline std::int64_t load_i64(const unsigned char* p) { return static_cast<std::int64_t>(load_le(p, 8)); }

// Stores v at p, little-endian, bit-exact.
inline void store_f32(unsigned char* p, float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  store_le(p, bits, 4);
}
inline void store_f64(unsigned char* p, double v) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  store_le(p, bits, 8);
}

// strerror(err), or "unknown error" for 0.
std::string strerror_string(int err);

struct FileCloser {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// A regular file opened for reading, after the checks every reader makes
// first. Every error is an entgraph::Error "<op>: <path>: ...".
//
// Only regular files are read: a FIFO, a socket or a device (a terminal,
// /dev/zero, a pipe behind /dev/stdin) is refused, since a read from one may
// never end. The file is opened without blocking (a FIFO's open would wait
// for a writer) and checked with fstat on the opened descriptor, so what is
// checked is what is read (no check-then-open race).
class InputFile {
 public:
  // Throws "cannot open file (...)" if path does not exist or cannot be
  // opened, "is a directory, not <a_kind>" if it is a directory, "is a
  // <FIFO|socket|device>, not a regular file" for any other non-regular file.
  InputFile(const char* op, std::string path, const char* a_kind);

  std::FILE* get() const { return file_.get(); }
  // The size of the file when opened. Throws "file too large (<n> bytes)" if
  // it does not fit size_t.
  std::size_t size() const;
  // Reads exactly n bytes into out. Throws "read error in the <what> (file
  // changed or <reason>)" if fewer arrive.
  void read_exact(unsigned char* out, std::size_t n, const char* what);
  // Everything up to the end of the file, read in chunks rather than trusting
  // the size reported up front (the file may change while it is read). A file
  // larger than max_bytes is refused before any read. Throws "file too large
  // (...)" or "read error (...)".
  std::vector<unsigned char> read_all(std::size_t max_bytes = static_cast<std::size_t>(-1));

 private:
  const char* op_;
  std::string path_;
  File file_;
  unsigned long long size_ = 0;  // st_size when opened
};

}  // namespace entgraph::detail
