// entgraph internal: byte-level helpers shared by the file formats in io/
// (.npy, safetensors, captures): little-endian codecs that do not depend on
// the host's byte order, IEEE half and bfloat16 conversions, whole-file
// reading and writing with errors that name the file, and quoting of hostile
// bytes in error messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace entgraph::detail {

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

// Up to max_len bytes of s with anything non-printable escaped as \xNN, so
// that an error message quoting a hostile file stays one readable line.
std::string printable(const char* s, std::size_t len, std::size_t max_len = 40);

// strerror(err), or "unknown error" for 0.
std::string strerror_string(int err);

struct FileCloser {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// The whole content of a regular file. Throws entgraph::Error
// "<op>: <path>: ..." if it does not exist, is a directory, cannot be read or
// is larger than max_bytes.
std::vector<unsigned char> read_file_bytes(const char* op, const std::string& path,
                                           std::size_t max_bytes = static_cast<std::size_t>(-1));

// Writes bytes to path (created or truncated). Throws entgraph::Error
// "<op>: <path>: ..." on failure.
void write_file_bytes(const char* op, const std::string& path, const void* data, std::size_t size);

}  // namespace entgraph::detail
