// entgraph internal: reading and writing the "parameters" object of a
// learned predictor's file. Every error names the field
// ("<method>: parameters: '<field>': <what>").
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/training/projection.hpp"
#include "io/json_strict.hpp"
#include "runtime/numbers.hpp"

namespace entgraph::detail {

using json = nlohmann::json;

[[noreturn]] inline void bad_field(const std::string& method, const std::string& field, const std::string& what) {
  throw Error(method + ": parameters: '" + field + "': " + what);
}

// Throws for a key of the "parameters" object that the method does not
// read: a file of another method relabelled (a lowrank-threshold file named
// sparsefinder-distance) must not load as this one.
inline void check_keys(const json& p, const std::string& method, const std::vector<std::string>& keys) {
  for (const auto& item : p.items()) {
    bool known = false;
    for (const std::string& k : keys) known = known || item.key() == k;
    if (known) continue;
    std::string list;
    for (const std::string& k : keys) list += (list.empty() ? "" : ", ") + k;
    throw Error(method + ": parameters: unknown key " + quoted_key(item.key()) + " (" + method + " reads " + list +
                ")");
  }
}

// The largest magnitude of a learned value in projected space (a centroid,
// a bin edge) and of a projected coordinate: 2^62 / sqrt(r). Two of them
// differ by at most 2^63 / sqrt(r), so a squared distance over r
// coordinates, or a dot product of two, stays below 2^126 and finite in
// float32 (maximum about 2^128).
inline double max_projected(std::size_t rank) { return 0x1p62 / std::sqrt(static_cast<double>(rank)); }
// The largest magnitude of a projection entry: max_projected / head_dim, so
// that a query or key of entries at most 1 in magnitude projects within
// max_projected. A file beyond it would overflow the predictor's float32
// arithmetic on ordinary inputs; the fits write values many orders smaller.
inline double max_projection_entry(std::size_t dim, std::size_t rank) {
  return max_projected(rank) / static_cast<double>(dim);
}

// What a fit learned must load back: throws, naming the head, if a fitted
// value is beyond the loader's limit (a capture of extreme values or scale
// could fit one), rather than writing a file its own loader refuses.
inline void check_fitted(const std::string& method, const char* what, const std::vector<float>& values, double limit,
                         std::size_t index, std::size_t heads) {
  for (float v : values)
    if (!(std::fabs(static_cast<double>(v)) <= limit))
      throw Error(method + ": fit: " + what + " of layer " + std::to_string(index / heads) + ", head " +
                  std::to_string(index % heads) + " has a value of " + number_text(v) +
                  ", beyond the limit of " + number_text(limit) +
                  " a parameter file may hold (the capture's values or scale are too large for this method)");
}

inline std::size_t read_size(const json& p, const std::string& method, const char* key, std::size_t min, std::size_t max) {
  if (!p.contains(key)) bad_field(method, key, "missing");
  const json& v = p.at(key);
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() < min || v.get<std::uint64_t>() > max)
    bad_field(method, key,
              "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "] (got " +
                  json_excerpt(v) + ")");
  return static_cast<std::size_t>(v.get<std::uint64_t>());
}

// A number that is finite as the float it is stored in, or false: 1e39 is
// a finite double but overflows float32.
inline bool to_finite_float(const json& x, float& out) {
  if (!x.is_number()) return false;
  const double d = x.get<double>();
  if (!fits_float(d)) return false;
  out = static_cast<float>(d);
  return true;
}

// One entry of a parameter array: a number finite as a float32 and of
// magnitude at most `limit` (max_projected, max_projection_entry).
inline float read_float(const json& x, const std::string& method, const std::string& field, double limit) {
  float f = 0;
  if (!to_finite_float(x, f))
    bad_field(method, field,
              "expected a finite number within the float32 range (|x| <= 3.4028235e+38; got " + json_excerpt(x) +
                  ")");
  if (!(std::fabs(static_cast<double>(f)) <= limit))
    bad_field(method, field,
              "expected a number of magnitude at most " + number_text(limit) +
                  " (beyond it the predictor's float32 arithmetic would overflow; got " + json_excerpt(x) + ")");
  return f;
}

// A rows x cols nested array of numbers of magnitude at most limit, appended to out.
inline void read_matrix(const json& v, const std::string& method, const std::string& field, std::size_t rows,
                 std::size_t cols, double limit, std::vector<float>& out) {
  if (!v.is_array() || v.size() != rows)
    bad_field(method, field, "expected an array of " + std::to_string(rows) + " rows");
  for (std::size_t i = 0; i < rows; ++i) {
    const json& row = v[i];
    if (!row.is_array() || row.size() != cols)
      bad_field(method, field + "[" + std::to_string(i) + "]",
                "expected an array of " + std::to_string(cols) + " numbers");
    for (std::size_t j = 0; j < cols; ++j)
      out.push_back(
          read_float(row[j], method, field + "[" + std::to_string(i) + "][" + std::to_string(j) + "]", limit));
  }
}

// Significant digits in the text json's dump gives a double.
inline int dumped_digits(double d) {
  const std::string text = json(d).dump();
  std::string digits;
  for (char ch : text) {
    if (ch == 'e' || ch == 'E') break;
    if (ch >= '0' && ch <= '9') digits += ch;
  }
  const std::size_t first = digits.find_first_not_of('0'), last = digits.find_last_not_of('0');
  return first == std::string::npos ? 1 : static_cast<int>(last - first + 1);
}

// A double that reads back to x (text -> double -> float, the readers' path)
// and that json prints with at most 9 significant digits: JSON numbers are
// doubles, and a float widened to double would print with up to 17 digits,
// twice the text. The shortest decimal that reads back to x (number_text)
// is the first choice, but json's printer (Grisu2) does not always print
// that double shortest (0.07193161 comes out as 0.07193161000000001), so
// neighbouring decimals with as few digits are tried next.
inline double shortest_float(float x) {
  if (!std::isfinite(x)) return static_cast<double>(x);
  const double first = std::strtod(number_text(x).c_str(), nullptr);
  if (dumped_digits(first) <= 9) return first;
  for (int p = 1; p <= 9; ++p) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*e", p - 1, static_cast<double>(x));  // d.ddd e±XX: p digits
    std::string mantissa;
    const char* e = buf;
    for (; *e != 'e'; ++e)
      if (*e >= '0' && *e <= '9') mantissa += *e;
    const long long m = std::atoll(mantissa.c_str());
    const int exponent = std::atoi(e + 1) - (p - 1);
    for (long long delta : {0, -1, 1, -2, 2, -3, 3}) {
      std::snprintf(buf, sizeof buf, "%s%llde%d", x < 0 ? "-" : "", m + delta, exponent);
      const double d = std::strtod(buf, nullptr);
      if (static_cast<float>(d) == x && dumped_digits(d) <= 9) return d;
    }
  }
  return first;
}

inline json write_matrix(const float* data, std::size_t rows, std::size_t cols) {
  json m = json::array();
  for (std::size_t i = 0; i < rows; ++i) {
    json row = json::array();
    for (std::size_t j = 0; j < cols; ++j) row.push_back(shortest_float(data[i * cols + j]));
    m.push_back(std::move(row));
  }
  return m;
}

// A [layers][heads] array; calls fn(element, "field[l][h]", index).
template <class Fn>
void for_each_head(const json& p, const std::string& method, const char* key, std::size_t layers, std::size_t heads,
                   Fn fn) {
  if (!p.contains(key)) bad_field(method, key, "missing");
  const json& v = p.at(key);
  if (!v.is_array() || v.size() != layers)
    bad_field(method, key, "expected an array of " + std::to_string(layers) + " layers");
  for (std::size_t l = 0; l < layers; ++l) {
    const std::string lf = std::string(key) + "[" + std::to_string(l) + "]";
    if (!v[l].is_array() || v[l].size() != heads)
      bad_field(method, lf, "expected an array of " + std::to_string(heads) + " heads");
    for (std::size_t h = 0; h < heads; ++h) fn(v[l][h], lf + "[" + std::to_string(h) + "]", l * heads + h);
  }
}

// The sizes of a file of per-head projections ("layers", "heads",
// "head_dim", "r") and each head's projection as "wq" and "wk":
// [layers][heads][dim][rank].
inline void write_projections(json& p, const std::vector<Projection>& projections, std::size_t layers,
                              std::size_t heads, std::size_t dim, std::size_t rank) {
  p["layers"] = layers;
  p["heads"] = heads;
  p["head_dim"] = dim;
  p["r"] = rank;
  json wq = json::array(), wk = json::array();
  for (std::size_t l = 0; l < layers; ++l) {
    json lq = json::array(), lk = json::array();
    for (std::size_t h = 0; h < heads; ++h) {
      const Projection& pr = projections[l * heads + h];
      lq.push_back(write_matrix(pr.wq.data(), dim, pr.rank));
      lk.push_back(write_matrix(pr.wk.data(), dim, pr.rank));
    }
    wq.push_back(std::move(lq));
    wk.push_back(std::move(lk));
  }
  p["wq"] = std::move(wq);
  p["wk"] = std::move(wk);
}

// The layers x heads projections (dim x rank) in "wq" and "wk", each entry
// at most max_projection_entry(dim, rank) in magnitude.
inline std::vector<Projection> read_projections(const json& p, const std::string& method, std::size_t layers,
                                                std::size_t heads, std::size_t dim, std::size_t rank) {
  std::vector<Projection> projections(layers * heads);
  for (auto& pr : projections) {
    pr.dim = dim;
    pr.rank = rank;
  }
  const double limit = max_projection_entry(dim, rank);
  for_each_head(p, method, "wq", layers, heads, [&](const json& v, const std::string& f, std::size_t i) {
    read_matrix(v, method, f, dim, rank, limit, projections[i].wq);
  });
  for_each_head(p, method, "wk", layers, heads, [&](const json& v, const std::string& f, std::size_t i) {
    read_matrix(v, method, f, dim, rank, limit, projections[i].wk);
  });
  return projections;
}

}  // namespace entgraph::detail
