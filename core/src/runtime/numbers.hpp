// entgraph internal: numbers as text, both ways, for every message and option
// of the library and the CLI.
//
// - number_text(x): the shortest %g form that reads back as exactly x (float:
//   as a float, double: as a double): "0.1", "1e+30", "3.4028235e+38", never
//   std::to_string's "1000000000000000019884624838656.000000".
// - parse_decimal(text, x) (entgraph/text.hpp): a plain decimal number and
//   nothing else, so that "0x2", "inf", "nan", " 2" or "2abc" are rejected
//   where strtod would take them.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "entgraph/text.hpp"

namespace entgraph::detail {

// The shortest %.Ng text of v that reads back as exactly v (same(text) is
// true), N at most max_digits; a whole number below 10^plain_below is
// written out ("1000", not "1e+03").
template <class Same>
std::string shortest_text(double v, int max_digits, int plain_below, Same same) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[48];
  int digits = 1;
  for (; digits <= max_digits; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (same(buf)) break;
  }
  const char* e = std::strchr(buf, 'e');
  const int exponent = e != nullptr ? std::atoi(e + 1) : -1;
  if (exponent >= 0 && exponent < plain_below) std::snprintf(buf, sizeof buf, "%.*g", exponent + 1, v);
  return buf;
}

// The shortest %g text that strtod reads back as v (NaN and infinities as
// "nan", "inf", "-inf"): "0.1", "1e+30", "1000".
inline std::string number_text(double v) {
  return shortest_text(v, 17, 16, [v](const char* text) { return std::strtod(text, nullptr) == v; });
}

// The same for a float: the shortest text that reads back (text -> double ->
// float, the path of every reader) as v; at most 9 significant digits.
inline std::string number_text(float v) {
  return shortest_text(static_cast<double>(v), 9, 9,
                       [v](const char* text) { return static_cast<float>(std::strtod(text, nullptr)) == v; });
}

// Integers print as themselves (so that a template over the element type
// can call number_text on anything).
inline std::string number_text(long long v) { return std::to_string(v); }
inline std::string number_text(unsigned long long v) { return std::to_string(v); }
inline std::string number_text(long v) { return std::to_string(v); }
inline std::string number_text(unsigned long v) { return std::to_string(v); }
inline std::string number_text(int v) { return std::to_string(v); }
inline std::string number_text(unsigned v) { return std::to_string(v); }

// True if d is finite and stays finite when rounded to float: below
// 2^128 - 2^103, the midpoint above the largest float, which rounds to infinity.
inline bool fits_float(double d) { return std::isfinite(d) && std::fabs(d) < 0x1.ffffffp127; }

// parse_decimal is public (entgraph/text.hpp); the library's own code names
// it detail::parse_decimal.
using entgraph::parse_decimal;

}  // namespace entgraph::detail
