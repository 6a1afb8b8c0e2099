// entgraph: text the library reads from people and quotes back to them: the
// one form of a decimal number that every numeric setting and option
// accepts, and how error messages quote untrusted bytes.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <string>

namespace entgraph {

// True if text is a decimal number, [+-]digits[.digits][(e|E)[+-]digits]
// (digits on at least one side of the point), whose value is finite as a
// double; stores it in out. Rejects empty text, spaces, hexadecimal, "inf",
// "nan" and anything trailing.
inline bool parse_decimal(const std::string& text, double& out) {
  std::size_t i = 0;
  const std::size_t n = text.size();
  auto digits = [&]() {
    const std::size_t start = i;
    while (i < n && text[i] >= '0' && text[i] <= '9') ++i;
    return i - start;
  };
  if (i < n && (text[i] == '+' || text[i] == '-')) ++i;
  std::size_t mantissa = digits();
  if (i < n && text[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (i < n && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < n && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  if (i != n) return false;
  const double v = std::strtod(text.c_str(), nullptr);
  if (!std::isfinite(v)) return false;  // beyond the double range
  out = v;
  return true;
}

// Up to max_len bytes of s with anything non-printable escaped as \xNN (and
// "..." after a cut), so that an error message quoting a hostile file or
// argument stays one readable line.
std::string printable(const char* s, std::size_t len, std::size_t max_len = 40);

}  // namespace entgraph
