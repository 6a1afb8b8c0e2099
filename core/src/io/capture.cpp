// entgraph: a capture's own API and checks (see entgraph/io/capture.hpp and
// docs/FORMATS.md for the format): its sizes and views, validate_capture, and
// the checks the reader (io/capture_read.cpp) and the writers
// (io/capture_write.cpp) share (io/capture_checks.hpp).
#include "entgraph/io/capture.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/transforms.hpp"
#include "io/binary.hpp"
#include "io/capture_checks.hpp"
#include "io/json_strict.hpp"
#include "io/output_folder.hpp"
#include "runtime/numbers.hpp"

namespace entgraph {
namespace detail::capture_io {

[[noreturn]] void fail(const Message& prefix, const Message& what, ErrorCode code) {
  throw Error(prefix + what, code);
}

std::string str(std::size_t n) { return std::to_string(n); }

bool checked_mul(std::size_t a, std::size_t b, std::size_t& out) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) return false;
  out = a * b;
  return true;
}

std::string shown(const Json& j) {
  const std::string text = j.dump(-1, ' ', true);
  return detail::printable(text.data(), text.size(), 60);
}

Json parse_json(const std::string& text, const Message& prefix, const std::string& what, int max_levels,
                std::string* repeated) {
  return detail::parse_json_strict<Json>(text, prefix, what, max_levels, repeated);
}

bool valid_utf8(const std::string& s) { return utf8_invalid_offset(s) == s.size(); }

Sizes checked_sizes(std::size_t layers, std::size_t heads, std::size_t head_dim,
                    const std::vector<std::size_t>& lengths, const Message& prefix) {
  if (layers == 0) fail(prefix, "layers is 0 (expected >= 1)");
  if (heads == 0) fail(prefix, "heads is 0 (expected >= 1)");
  if (head_dim == 0) fail(prefix, "head_dim is 0 (expected >= 1)");
  if (lengths.empty()) fail(prefix, "lengths is empty (expected at least one sequence)");
  Sizes s;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] == 0) fail(prefix, "lengths[" + str(i) + "] is 0 (expected >= 1)");
    if (lengths[i] > std::numeric_limits<std::size_t>::max() - s.tokens)
      fail(prefix, "lengths add up to more than " + str(std::numeric_limits<std::size_t>::max()) + " (overflow)");
    s.tokens += lengths[i];
  }
  std::size_t rows = 0;
  if (!checked_mul(layers, heads, s.heads_total) || !checked_mul(s.heads_total, s.tokens, rows) ||
      !checked_mul(rows, head_dim, s.count) || s.count > std::numeric_limits<std::size_t>::max() / sizeof(float))
    fail(prefix, "layers * heads * tokens * head_dim overflows (" + str(layers) + " * " + str(heads) + " * " +
                     str(s.tokens) + " * " + str(head_dim) + ")");
  return s;
}

std::string locate(const Capture& c, const Sizes& s, std::size_t i) {
  const std::size_t dim = i % c.head_dim;
  const std::size_t row = i / c.head_dim;
  const std::size_t token = row % s.tokens;
  const std::size_t head = row / s.tokens % c.heads;
  const std::size_t layer = row / s.tokens / c.heads;
  std::size_t sequence = 0, first = 0;
  while (token >= first + c.lengths[sequence]) first += c.lengths[sequence++];
  return "layer " + str(layer) + ", head " + str(head) + ", token " + str(token) + " (sequence " + str(sequence) +
         ", position " + str(token - first) + "), dim " + str(dim);
}

void check_finite(const Capture& c, const Sizes& s, const float* a, std::size_t n, std::size_t first, const char* name,
                  const Message& prefix) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) {
      const char* what = std::isnan(a[i]) ? "nan" : a[i] > 0 ? "inf" : "-inf";
      fail(prefix, std::string(name) + ": non-finite value " + what + " at " + locate(c, s, first + i));
    }
  }
}

void check_finite(const Capture& c, const Sizes& s, const std::vector<float>& a, const char* name,
                  const Message& prefix) {
  check_finite(c, s, a.data(), a.size(), 0, name, prefix);
}

std::string head_name(const Capture& c, std::size_t index) {
  return "layer " + str(index / c.heads) + ", head " + str(index % c.heads);
}

static_assert(kCaptureMaxAlpha == kMaxEntmaxAlpha, "a capture's alpha range is the entmax transform's");

std::string number(double v) { return detail::number_text(v); }

// Per head, the largest query and key norms bound every score and every
// partial sum of one: |scale q.k| <= scale |q| |k| (Cauchy-Schwarz), and the
// kernels accumulate q.k before scaling. Both must stay below
// kCaptureMaxScore, half the float32 maximum, so that rounding cannot push a
// score to infinity. Norms are computed in double: |q|^2 may overflow float.
void largest_norm(const float* a, std::size_t rows, std::size_t head_dim, std::size_t first_token, double& best,
                  std::size_t& token) {
  for (std::size_t t = 0; t < rows; ++t) {
    const float* row = a + t * head_dim;
    double n2 = 0;
    for (std::size_t d = 0; d < head_dim; ++d) n2 += static_cast<double>(row[d]) * row[d];
    if (std::sqrt(n2) > best) {
      best = std::sqrt(n2);
      token = first_token + t;
    }
  }
}

void check_head_scores(const Capture& c, std::size_t hi, double q, std::size_t qt, double k, std::size_t kt,
                       const Message& prefix) {
  const double scale = c.settings[hi].scale;
  if (!(q * k * std::max(1.0, scale) <= kCaptureMaxScore))
    fail(prefix, "queries and keys of " + head_name(c, hi) + " make scores overflow float32: " +
                     (scale > 1.0 ? "scale * " : "") + "max |q| * max |k| = " + number(q * k * std::max(1.0, scale)) +
                     " (scale " + number(scale) + ", max |q| " + number(q) + " at token " + str(qt) + ", max |k| " +
                     number(k) + " at token " + str(kt) + "; expected at most 2^127 = " + number(kCaptureMaxScore) +
                     ")");
}

void check_score_range(const Capture& c, const Sizes& s, const Message& prefix) {
  for (std::size_t hi = 0; hi < s.heads_total; ++hi) {
    std::size_t qt = 0, kt = 0;
    double q = 0, k = 0;
    largest_norm(c.queries.data() + hi * s.tokens * c.head_dim, s.tokens, c.head_dim, 0, q, qt);
    largest_norm(c.keys.data() + hi * s.tokens * c.head_dim, s.tokens, c.head_dim, 0, k, kt);
    check_head_scores(c, hi, q, qt, k, kt, prefix);
  }
}

Sizes validate_settings(const Capture& c, const Sizes& s, const Message& prefix);

Sizes validate(const Capture& c, const Message& prefix, bool arrays) {
  const Sizes s = checked_sizes(c.layers, c.heads, c.head_dim, c.lengths, prefix);
  if (!arrays) return validate_settings(c, s, prefix);
  auto check_size = [&](const std::vector<float>& a, const char* name) {
    if (a.size() != s.count)
      fail(prefix, std::string(name) + " has " + str(a.size()) + " elements (expected layers * heads * tokens * " +
                       "head_dim = " + str(c.layers) + " * " + str(c.heads) + " * " + str(s.tokens) + " * " +
                       str(c.head_dim) + " = " + str(s.count) + ")");
  };
  check_size(c.queries, "queries");
  check_size(c.keys, "keys");
  if (!c.values.empty()) check_size(c.values, "values");
  validate_settings(c, s, prefix);
  check_finite(c, s, c.queries, "queries", prefix);
  check_finite(c, s, c.keys, "keys", prefix);
  check_finite(c, s, c.values, "values", prefix);
  check_score_range(c, s, prefix);
  return s;
}

// The settings, texts and provenance of a capture of sizes s.
Sizes validate_settings(const Capture& c, const Sizes& s, const Message& prefix) {
  if (c.settings.size() != s.heads_total)
    fail(prefix,
         "settings has " + str(c.settings.size()) + " entries (expected layers * heads = " + str(s.heads_total) + ")");
  for (std::size_t i = 0; i < c.settings.size(); ++i) {
    const HeadSettings& h = c.settings[i];
    if (!(h.alpha >= 1.0 && h.alpha <= kCaptureMaxAlpha))
      fail(prefix, "alpha of " + head_name(c, i) + " is " + number(h.alpha) + " (expected a value in [1, " +
                       number(kCaptureMaxAlpha) + "], the range of the entmax transform)");
    if (!(std::isfinite(h.scale) && h.scale > 0.0))
      fail(prefix, "scale of " + head_name(c, i) + " is " + number(h.scale) + " (expected a finite value > 0)");
    if (!detail::fits_float(h.scale))  // scores are computed in float32
      fail(prefix, "scale of " + head_name(c, i) + " is " + number(h.scale) +
                       " (expected at most the float32 maximum, 3.4028235e+38: scores are float32)");
  }
  if (!c.texts.empty() && c.texts.size() != c.lengths.size())
    fail(prefix, "texts has " + str(c.texts.size()) + " entries (expected 0 or one per sequence, " +
                     str(c.lengths.size()) + ")");
  for (std::size_t i = 0; i < c.texts.size(); ++i)
    if (const std::size_t at = utf8_invalid_offset(c.texts[i]); at != c.texts[i].size())
      fail(prefix, "texts[" + str(i) + "] is not valid UTF-8 (at byte " + str(at) + ")");
  if (!valid_utf8(c.provenance)) fail(prefix, "provenance is not valid UTF-8");
  if (!parse_json(c.provenance, prefix, "provenance", kMaxJsonDepth).is_object())
    fail(prefix,
         "provenance is not a JSON object (got '" + detail::printable(c.provenance.data(), c.provenance.size()) + "')");
  return s;
}


[[noreturn]] void restate(const Error& e, const std::string& op, const std::string& path, const std::string& name,
                          const Message& prefix) {
  // The inner reader's own location (its op and the path) gives way to the capture's and the file's name.
  const Message inner = at_op(op) + path + ": ";
  fail(prefix, name + ": " + e.message().without_prefix(inner), e.code());
}

}  // namespace detail::capture_io

namespace {

using namespace detail::capture_io;


[[noreturn]] void view_fail(const char* op, const std::string& what) { throw Error(at_op(op) + what); }

// Offset of the first element of (layer, head, sequence) in an array of the
// capture, after checking every argument and the array's size.
std::size_t view_start(const Capture& c, const std::vector<float>& a, const char* op, const char* name,
                       std::size_t layer, std::size_t head, std::size_t sequence, bool optional = false) {
  if (layer >= c.layers) view_fail(op, "layer out of range (got " + str(layer) + ", expected < " + str(c.layers) + ")");
  if (head >= c.heads) view_fail(op, "head out of range (got " + str(head) + ", expected < " + str(c.heads) + ")");
  if (sequence >= c.lengths.size())
    view_fail(op, "sequence out of range (got " + str(sequence) + ", expected < " + str(c.lengths.size()) + ")");
  if (a.empty() && optional) view_fail(op, "the capture has no values");
  const Message prefix = at_op(op);
  const Sizes s = checked_sizes(c.layers, c.heads, c.head_dim, c.lengths, prefix);
  if (a.size() != s.count)
    view_fail(op, std::string(name) + " has " + str(a.size()) + " elements (expected " + str(s.count) + ")");
  return ((layer * c.heads + head) * s.tokens + c.offset(sequence)) * c.head_dim;
}

}  // namespace

Capture Capture::make(std::size_t layers, std::size_t heads, std::size_t head_dim, std::vector<std::size_t> lengths,
                      bool with_values) {
  const Sizes s = checked_sizes(layers, heads, head_dim, lengths, "Capture::make: ");
  Capture c;
  c.layers = layers;
  c.heads = heads;
  c.head_dim = head_dim;
  c.lengths = std::move(lengths);
  c.queries.assign(s.count, 0.0f);
  c.keys.assign(s.count, 0.0f);
  if (with_values) c.values.assign(s.count, 0.0f);
  HeadSettings settings;
  settings.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  c.settings.assign(s.heads_total, settings);
  return c;
}

std::size_t Capture::tokens() const {
  std::size_t total = 0;
  for (std::size_t n : lengths) {
    if (n > std::numeric_limits<std::size_t>::max() - total) throw Error(at_op("Capture::tokens") + "lengths overflow");
    total += n;
  }
  return total;
}

std::size_t Capture::offset(std::size_t sequence) const {
  if (sequence >= lengths.size())
    throw Error(at_op("Capture::offset") + "sequence out of range (got " + str(sequence) + ", expected < " + str(lengths.size()) +
                ")");
  std::size_t first = 0;
  for (std::size_t i = 0; i < sequence; ++i) {
    if (lengths[i] > std::numeric_limits<std::size_t>::max() - first) throw Error(at_op("Capture::offset") + "lengths overflow");
    first += lengths[i];
  }
  return first;
}

const HeadSettings& Capture::head(std::size_t layer, std::size_t head) const {
  if (layer >= layers)
    throw Error(at_op("Capture::head") + "layer out of range (got " + str(layer) + ", expected < " + str(layers) + ")");
  if (head >= heads)
    throw Error(at_op("Capture::head") + "head out of range (got " + str(head) + ", expected < " + str(heads) + ")");
  std::size_t total = 0;
  if (!checked_mul(layers, heads, total) || settings.size() != total)
    throw Error(at_op("Capture::head") + "settings has " + str(settings.size()) +
                " entries (expected layers * heads = " + str(layers) + " * " + str(heads) + ")");
  return settings[layer * heads + head];
}

HeadSettings& Capture::head(std::size_t layer, std::size_t head) {
  return const_cast<HeadSettings&>(static_cast<const Capture&>(*this).head(layer, head));
}

MatrixView<const float> Capture::queries_of(std::size_t layer, std::size_t head, std::size_t sequence) const {
  return {queries.data() + view_start(*this, queries, "Capture::queries_of", "queries", layer, head, sequence),
          lengths[sequence], head_dim};
}
MatrixView<const float> Capture::keys_of(std::size_t layer, std::size_t head, std::size_t sequence) const {
  return {keys.data() + view_start(*this, keys, "Capture::keys_of", "keys", layer, head, sequence), lengths[sequence],
          head_dim};
}
MatrixView<const float> Capture::values_of(std::size_t layer, std::size_t head, std::size_t sequence) const {
  return {values.data() + view_start(*this, values, "Capture::values_of", "values", layer, head, sequence, true),
          lengths[sequence], head_dim};
}
MatrixView<float> Capture::queries_of(std::size_t layer, std::size_t head, std::size_t sequence) {
  return {queries.data() + view_start(*this, queries, "Capture::queries_of", "queries", layer, head, sequence),
          lengths[sequence], head_dim};
}
MatrixView<float> Capture::keys_of(std::size_t layer, std::size_t head, std::size_t sequence) {
  return {keys.data() + view_start(*this, keys, "Capture::keys_of", "keys", layer, head, sequence), lengths[sequence],
          head_dim};
}
MatrixView<float> Capture::values_of(std::size_t layer, std::size_t head, std::size_t sequence) {
  return {values.data() + view_start(*this, values, "Capture::values_of", "values", layer, head, sequence, true),
          lengths[sequence], head_dim};
}

void validate_capture(const Capture& capture) {
  const std::string source = capture.source.empty() ? std::string() : "capture " + capture.source + ": ";
  validate(capture, "validate_capture: " + source);
}

std::size_t utf8_invalid_offset(std::string_view s) {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len;
    std::uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1fu;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0fu;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07u;
    } else {
      return i;
    }
    if (n - i < len) return i;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    // Overlong forms, surrogates and code points past U+10FFFF.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return i;
    i += len;
  }
  return n;
}

std::string head_context(const Capture& capture, std::size_t layer, std::size_t head) {
  const std::string source = capture.source.empty() ? std::string() : "capture " + capture.source + ", ";
  return source + "layer " + std::to_string(layer) + ", head " + std::to_string(head);
}

}  // namespace entgraph
