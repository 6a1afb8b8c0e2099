// entgraph: capture reader and writer (see entgraph/io/capture.hpp and
// docs/FORMATS.md for the format).
//
// The reader checks in this order, so that every size is known to be sane
// before anything is allocated from it: capture.json (size, JSON syntax and
// depth, "format", "version", keys, types and ranges, size products) -> each
// .npy file (read_npy's own checks, then dtype and shape against the JSON) ->
// the decoded data (NaN and infinity), through the same checks as
// validate_capture().
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
#include "io/json_strict.hpp"
#include "io/output_folder.hpp"
#include "runtime/numbers.hpp"

namespace entgraph {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;  // keeps the key order of files and of provenance

constexpr const char* kFormat = "entgraph-capture";
constexpr int kVersion = 1;
constexpr int kMaxJsonDepth = 64;  // levels of nested arrays and objects in provenance (one more in capture.json)
constexpr std::size_t kMaxJsonBytes = std::size_t{1} << 30;  // capture.json
constexpr const char* kKnownKeys[] = {"format", "version", "layers", "heads",  "head_dim", "lengths", "queries",
                                      "keys",   "values",  "alpha",  "causal", "scale",    "texts",   "provenance"};
constexpr const char* kKnownKeyList =
    "format, version, layers, heads, head_dim, lengths, queries, keys, values, alpha, causal, scale, texts, "
    "provenance";

// Every error goes through one of these: "<prefix><what>", where prefix is
// "validate_capture: ", "read_capture: <dir>: " or "write_capture: <dir>: ".
[[noreturn]] void fail(const std::string& prefix, const std::string& what) { throw Error(prefix + what); }

std::string str(std::size_t n) { return std::to_string(n); }

// a * b, or false if it overflows.
bool checked_mul(std::size_t a, std::size_t b, std::size_t& out) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) return false;
  out = a * b;
  return true;
}

// A JSON value as a short, printable string for error messages.
std::string shown(const Json& j) {
  const std::string text = j.dump(-1, ' ', true);
  return detail::printable(text.data(), text.size(), 60);
}

// Parses JSON text (detail::parse_json_strict): more than max_levels levels
// of nested arrays and objects, or a key repeated in any object, is an error;
// with repeated, the message of a repeated key is stored there instead, for
// read_capture to report after "format" and "version".
Json parse_json(const std::string& text, const std::string& prefix, const std::string& what, int max_levels,
                std::string* repeated = nullptr) {
  return detail::parse_json_strict<Json>(text, prefix, what, max_levels, repeated);
}

// True if s is valid UTF-8 (what JSON text must be).
bool valid_utf8(const std::string& s) { return utf8_invalid_offset(s) == s.size(); }

// The sizes derived from layers, heads, head_dim and lengths, each checked
// for overflow.
struct Sizes {
  std::size_t tokens = 0;
  std::size_t heads_total = 0;  // layers * heads
  std::size_t count = 0;        // elements of each array
};

Sizes checked_sizes(std::size_t layers, std::size_t heads, std::size_t head_dim,
                    const std::vector<std::size_t>& lengths, const std::string& prefix) {
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

// "layer 1, head 0, token 17 (sequence 0, position 17), dim 3" for element i
// of an array of the capture.
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

// n values of an array of the capture, the first at element first.
void check_finite(const Capture& c, const Sizes& s, const float* a, std::size_t n, std::size_t first, const char* name,
                  const std::string& prefix) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) {
      const char* what = std::isnan(a[i]) ? "nan" : a[i] > 0 ? "inf" : "-inf";
      fail(prefix, std::string(name) + ": non-finite value " + what + " at " + locate(c, s, first + i));
    }
  }
}

void check_finite(const Capture& c, const Sizes& s, const std::vector<float>& a, const char* name,
                  const std::string& prefix) {
  check_finite(c, s, a.data(), a.size(), 0, name, prefix);
}

std::string head_name(const Capture& c, std::size_t index) {
  return "layer " + str(index / c.heads) + ", head " + str(index % c.heads);
}

static_assert(kCaptureMaxAlpha == kMaxEntmaxAlpha, "a capture's alpha range is the entmax transform's");

// The shortest text that reads back as v: 0.1, not 0.10000000000000001.
std::string number(double v) { return detail::number_text(v); }

// Per head, the largest query and key norms bound every score and every
// partial sum of one: |scale q.k| <= scale |q| |k| (Cauchy-Schwarz), and the
// kernels accumulate q.k before scaling. Both must stay below
// kCaptureMaxScore, half the float32 maximum, so that rounding cannot push a
// score to infinity. Norms are computed in double: |q|^2 may overflow float.
// The largest norm among rows [0, rows) of a (head_dim columns), in double,
// and the row it is at (first_token + row) if larger than best.
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

// The bound of head hi's scores from its largest query and key norms.
void check_head_scores(const Capture& c, std::size_t hi, double q, std::size_t qt, double k, std::size_t kt,
                       const std::string& prefix) {
  const double scale = c.settings[hi].scale;
  if (!(q * k * std::max(1.0, scale) <= kCaptureMaxScore))
    fail(prefix, "queries and keys of " + head_name(c, hi) + " make scores overflow float32: " +
                     (scale > 1.0 ? "scale * " : "") + "max |q| * max |k| = " + number(q * k * std::max(1.0, scale)) +
                     " (scale " + number(scale) + ", max |q| " + number(q) + " at token " + str(qt) + ", max |k| " +
                     number(k) + " at token " + str(kt) + "; expected at most 2^127 = " + number(kCaptureMaxScore) +
                     ")");
}

void check_score_range(const Capture& c, const Sizes& s, const std::string& prefix) {
  for (std::size_t hi = 0; hi < s.heads_total; ++hi) {
    std::size_t qt = 0, kt = 0;
    double q = 0, k = 0;
    largest_norm(c.queries.data() + hi * s.tokens * c.head_dim, s.tokens, c.head_dim, 0, q, qt);
    largest_norm(c.keys.data() + hi * s.tokens * c.head_dim, s.tokens, c.head_dim, 0, k, kt);
    check_head_scores(c, hi, q, qt, k, kt, prefix);
  }
}

Sizes validate_settings(const Capture& c, const Sizes& s, const std::string& prefix);

// Everything validate_capture() promises, with the given message prefix;
// without arrays, all but the arrays' sizes and values (a CaptureWriter's
// capture, whose data arrive later).
Sizes validate(const Capture& c, const std::string& prefix, bool arrays = true) {
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
Sizes validate_settings(const Capture& c, const Sizes& s, const std::string& prefix) {
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

// An error of read_npy, write_npy or the file helpers, "<op>: <path>: <what>",
// restated as "<prefix><name>: <what>" so that it names the capture folder.
[[noreturn]] void restate(const Error& e, const std::string& op, const std::string& path, const std::string& name,
                          const std::string& prefix) {
  std::string what = e.what();
  const std::string inner = op + ": " + path + ": ";
  if (what.compare(0, inner.size(), inner) == 0) what = what.substr(inner.size());
  fail(prefix, name + ": " + what);
}

[[noreturn]] void view_fail(const char* op, const std::string& what) { throw Error(std::string(op) + ": " + what); }

// Offset of the first element of (layer, head, sequence) in an array of the
// capture, after checking every argument and the array's size.
std::size_t view_start(const Capture& c, const std::vector<float>& a, const char* op, const char* name,
                       std::size_t layer, std::size_t head, std::size_t sequence, bool optional = false) {
  if (layer >= c.layers) view_fail(op, "layer out of range (got " + str(layer) + ", expected < " + str(c.layers) + ")");
  if (head >= c.heads) view_fail(op, "head out of range (got " + str(head) + ", expected < " + str(c.heads) + ")");
  if (sequence >= c.lengths.size())
    view_fail(op, "sequence out of range (got " + str(sequence) + ", expected < " + str(c.lengths.size()) + ")");
  if (a.empty() && optional) view_fail(op, "the capture has no values");
  const std::string prefix = std::string(op) + ": ";
  const Sizes s = checked_sizes(c.layers, c.heads, c.head_dim, c.lengths, prefix);
  if (a.size() != s.count)
    view_fail(op, std::string(name) + " has " + str(a.size()) + " elements (expected " + str(s.count) + ")");
  return ((layer * c.heads + head) * s.tokens + c.offset(sequence)) * c.head_dim;
}

// ---------------------------------------------------------------------------
// Reader helpers. Each takes the message prefix "read_capture: <dir>: ".

std::size_t get_size(const Json& j, const char* key, const std::string& prefix) {
  const Json& v = j.at(key);
  if (!v.is_number_unsigned())  // nlohmann parses every integer >= 0 that fits 64 bits as unsigned
    fail(prefix, std::string(key) + " is not a non-negative integer (got " + shown(v) + ")");
  const auto u = v.get<std::uint64_t>();
  if (u > std::numeric_limits<std::size_t>::max())
    fail(prefix, std::string(key) + " is too large (got " + shown(v) + ")");
  return static_cast<std::size_t>(u);
}

std::vector<std::size_t> get_lengths(const Json& j, const std::string& prefix) {
  const Json& v = j.at("lengths");
  if (!v.is_array()) fail(prefix, "lengths is not an array of integers (got " + shown(v) + ")");
  std::vector<std::size_t> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const Json& e = v[i];
    if (!e.is_number_unsigned())
      fail(prefix, "lengths[" + str(i) + "] is not a non-negative integer (got " + shown(e) + ")");
    const auto u = e.get<std::uint64_t>();
    if (u > std::numeric_limits<std::size_t>::max())
      fail(prefix, "lengths[" + str(i) + "] is too large (got " + shown(e) + ")");
    out.push_back(static_cast<std::size_t>(u));
  }
  return out;
}

// A file name inside the capture folder: no directories, nothing absolute.
std::string get_file_name(const Json& j, const char* key, const std::string& prefix) {
  const Json& v = j.at(key);
  if (!v.is_string()) fail(prefix, std::string(key) + " is not a file name string (got " + shown(v) + ")");
  const auto name = v.get<std::string>();
  const std::string quoted = "\"" + detail::printable(name.data(), name.size(), 60) + "\"";
  if (name.empty()) fail(prefix, std::string(key) + " is an empty file name");
  if (fs::path(name).is_absolute() || name.front() == '/' || name.front() == '\\')
    fail(prefix, std::string(key) + " file name " + quoted + " is absolute (expected a name inside the folder)");
  if (name.find("..") != std::string::npos)
    fail(prefix, std::string(key) + " file name " + quoted + " contains \"..\" (expected a name inside the folder)");
  if (name.find_first_of(std::string("/\\:\0", 4)) != std::string::npos)
    fail(prefix, std::string(key) + " file name " + quoted +
                     " contains a path separator (expected a plain name inside the folder)");
  return name;
}

// One value per head from a scalar or a [layers][heads] nested array; is_ok
// tests the JSON type of one entry, set stores it.
template <class IsOk, class Set>
void get_per_head(const Json& j, const char* key, const char* type_name, std::size_t layers, std::size_t heads,
                  std::vector<HeadSettings>& settings, const std::string& prefix, IsOk is_ok, Set set) {
  if (!j.contains(key)) return;
  const Json& v = j.at(key);
  const std::string k = key;
  if (!v.is_array()) {
    if (!is_ok(v))
      fail(prefix, k + " is not " + type_name + " or a [layers][heads] array of them (got " + shown(v) + ")");
    for (HeadSettings& h : settings) set(h, v);
    return;
  }
  if (v.size() != layers)
    fail(prefix, k + " has " + str(v.size()) + " rows (expected one per layer, " + str(layers) + ")");
  for (std::size_t l = 0; l < layers; ++l) {
    const Json& row = v[l];
    if (!row.is_array())
      fail(prefix, k + "[" + str(l) + "] is not an array (got " + shown(row) + ", expected " + str(heads) +
                       " entries, one per head)");
    if (row.size() != heads)
      fail(prefix,
           k + "[" + str(l) + "] has " + str(row.size()) + " entries (expected one per head, " + str(heads) + ")");
    for (std::size_t h = 0; h < heads; ++h) {
      if (!is_ok(row[h]))
        fail(prefix, k + "[" + str(l) + "][" + str(h) + "] is not " + type_name + " (got " + shown(row[h]) + ")");
      set(settings[l * heads + h], row[h]);
    }
  }
}

// Reads one array file of the capture through read_npy, restating its errors
// as "read_capture: <dir>: <name>: ...", and checks dtype and shape.
std::vector<float> read_array(const std::string& dir, const std::string& name, const char* role,
                              const std::vector<std::size_t>& expected, const Sizes& sizes, const std::string& prefix) {
  const std::string path = (fs::path(dir) / name).string();
  NpyArray a;
  try {
    a = read_npy(path);
  } catch (const Error& e) {
    restate(e, "read_npy", path, name, prefix);
  }
  if (a.dtype != NpyDtype::float16 && a.dtype != NpyDtype::float32)
    fail(prefix, name + " (" + role + ") has dtype " + npy_dtype_name(a.dtype) + " (expected float16 or float32)");
  if (a.shape != expected) {
    std::string why = "(layers, heads, tokens, head_dim) from capture.json";
    if (a.shape.size() == 4 && a.shape[0] == expected[0] && a.shape[1] == expected[1] && a.shape[3] == expected[3])
      why = "lengths add up to " + str(sizes.tokens) + " tokens, the file has " + str(a.shape[2]);
    fail(prefix, name + " (" + role + ") has shape " + npy_shape_string(a.shape) + " (expected " +
                     npy_shape_string(expected) + ": " + why + ")");
  }
  return a.values<float>();  // size checked by read_npy against the shape; float16 widens exactly
}

// ---------------------------------------------------------------------------
// Writer helpers.

bool all_same(const std::vector<HeadSettings>& s, bool (*same)(const HeadSettings&, const HeadSettings&)) {
  for (const HeadSettings& h : s)
    if (!same(h, s.front())) return false;
  return true;
}

// One value, or a [layers][heads] array when the heads differ.
template <class Get>
Json per_head_json(const Capture& c, bool (*same)(const HeadSettings&, const HeadSettings&), Get get) {
  if (all_same(c.settings, same)) return Json(get(c.settings.front()));
  Json rows = Json::array();
  for (std::size_t l = 0; l < c.layers; ++l) {
    Json row = Json::array();
    for (std::size_t h = 0; h < c.heads; ++h) row.push_back(get(c.settings[l * c.heads + h]));
    rows.push_back(std::move(row));
  }
  return rows;
}

// n values of an array of the capture, the first at element first, as
// float16 bytes at out, or an error naming the first value that rounds past
// the float16 range.
void encode_half(const Capture& c, const Sizes& s, const float* a, std::size_t n, std::size_t first, unsigned char* out,
                 const char* name, const std::string& prefix) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t h = detail::float_to_half(a[i]);
    if ((h & 0x7c00u) == 0x7c00u)  // finite input (validated) rounded to infinity
      fail(prefix, std::string(name) + ": value " + number(a[i]) + " at " + locate(c, s, first + i) +
                       " is beyond the float16 range (largest finite 65504)");
    detail::store_le(out + 2 * i, h, 2);
  }
}

// A whole array as float16 bytes.
std::vector<unsigned char> encode_half(const Capture& c, const Sizes& s, const std::vector<float>& a, const char* name,
                                       const std::string& prefix) {
  std::vector<unsigned char> bytes(a.size() * 2);
  encode_half(c, s, a.data(), a.size(), 0, bytes.data(), name, prefix);
  return bytes;
}

// capture.json of a capture (its arrays in queries.npy, keys.npy and, if
// has_values, values.npy, or the names `files` gives them: see OutputFolder):
// one key per line, each value on one line, which reads well and diffs well.
// The capture has passed validate().
std::string capture_json_text(const Capture& c, bool has_values, const std::string& prefix,
                              const detail::OutputFolder::Names& files = {}) {
  auto file = [&](const std::string& name) {
    const auto it = files.find(name);
    return it == files.end() ? name : it->second;
  };
  Json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["layers"] = c.layers;
  j["heads"] = c.heads;
  j["head_dim"] = c.head_dim;
  j["lengths"] = c.lengths;
  j["queries"] = file("queries.npy");
  j["keys"] = file("keys.npy");
  if (has_values) j["values"] = file("values.npy");
  j["alpha"] = per_head_json(
      c, [](const HeadSettings& a, const HeadSettings& b) { return a.alpha == b.alpha; },
      [](const HeadSettings& h) { return h.alpha; });
  j["causal"] = per_head_json(
      c, [](const HeadSettings& a, const HeadSettings& b) { return a.causal == b.causal; },
      [](const HeadSettings& h) { return h.causal; });
  j["scale"] = per_head_json(
      c, [](const HeadSettings& a, const HeadSettings& b) { return a.scale == b.scale; },
      [](const HeadSettings& h) { return h.scale; });
  if (!c.texts.empty()) j["texts"] = c.texts;
  j["provenance"] = parse_json(c.provenance, prefix, "provenance", kMaxJsonDepth);
  std::string text = "{\n";
  bool first = true;
  for (const auto& item : j.items()) {
    if (!first) text += ",\n";
    first = false;
    text += "  " + Json(item.key()).dump() + ": " + item.value().dump(-1, ' ', false);
  }
  return text + "\n}\n";
}

// The arrays of a capture, staged under these names; capture.json, their
// manifest, is written at commit with the names they get (OutputFolder).
std::vector<std::string> capture_file_names(bool with_values) {
  std::vector<std::string> names = {"queries.npy", "keys.npy"};
  if (with_values) names.push_back("values.npy");
  return names;
}

// Moves a staged capture into place, capture.json (naming the arrays as
// committed) its commit point.
void commit_capture(detail::OutputFolder& out, const Capture& meta, bool with_values, const std::string& prefix) {
  out.commit(capture_file_names(with_values), "capture.json", [&](const detail::OutputFolder::Names& names) {
    return capture_json_text(meta, with_values, prefix, names);
  });
}

// Refuses an output larger than the free space of the file system it goes to.
void check_free_space(const detail::OutputFolder& out, std::uint64_t bytes, const std::string& prefix) {
  const unsigned long long available = detail::free_bytes_at(out.staging());
  if (bytes > available)
    fail(prefix, "the capture needs " + str(bytes) + " bytes but its file system has " + str(available) + " free");
}

}  // namespace

// ---------------------------------------------------------------------------

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
    if (n > std::numeric_limits<std::size_t>::max() - total) throw Error("Capture::tokens: lengths overflow");
    total += n;
  }
  return total;
}

std::size_t Capture::offset(std::size_t sequence) const {
  if (sequence >= lengths.size())
    throw Error("Capture::offset: sequence out of range (got " + str(sequence) + ", expected < " + str(lengths.size()) +
                ")");
  std::size_t first = 0;
  for (std::size_t i = 0; i < sequence; ++i) {
    if (lengths[i] > std::numeric_limits<std::size_t>::max() - first) throw Error("Capture::offset: lengths overflow");
    first += lengths[i];
  }
  return first;
}

const HeadSettings& Capture::head(std::size_t layer, std::size_t head) const {
  if (layer >= layers)
    throw Error("Capture::head: layer out of range (got " + str(layer) + ", expected < " + str(layers) + ")");
  if (head >= heads)
    throw Error("Capture::head: head out of range (got " + str(head) + ", expected < " + str(heads) + ")");
  std::size_t total = 0;
  if (!checked_mul(layers, heads, total) || settings.size() != total)
    throw Error("Capture::head: settings has " + str(settings.size()) +
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

void write_capture(const std::string& dir, const Capture& c, NpyDtype dtype) {
  const std::string prefix = "write_capture: " + dir + ": ";
  if (dtype != NpyDtype::float32 && dtype != NpyDtype::float16)
    fail(prefix, std::string("unsupported dtype ") + npy_dtype_name(dtype) + " (expected float32 or float16)");
  const Sizes s = validate(c, prefix);

  // Everything that can fail on the data is checked before the first file is
  // written: float16 arrays are encoded up front (float32 ones cannot fail).
  const std::vector<std::size_t> shape = {c.layers, c.heads, s.tokens, c.head_dim};
  struct Out {
    const char* role;
    const std::vector<float>* data;
    NpyArray half;
  };
  std::vector<Out> arrays = {{"queries", &c.queries, {}}, {"keys", &c.keys, {}}};
  if (c.has_values()) arrays.push_back({"values", &c.values, {}});
  if (dtype == NpyDtype::float16) {
    for (Out& a : arrays) {
      a.half.dtype = NpyDtype::float16;
      a.half.shape = shape;
      a.half.bytes = encode_half(c, s, *a.data, a.role, prefix);
    }
  }

  const std::string text = capture_json_text(c, c.has_values(), prefix);

  // Written into a staged folder and moved into place whole (OutputFolder).
  detail::OutputFolder out("write_capture", dir);
  std::vector<std::string> targets = capture_file_names(c.has_values());
  targets.push_back("capture.json");
  out.check_targets(targets);
  const std::uint64_t per_file = encode_npy_header(dtype, shape).size() + std::uint64_t{s.count} * npy_dtype_size(dtype);
  const std::uint64_t total = text.size() + per_file * arrays.size();
  check_free_space(out, total, prefix);
  for (const Out& a : arrays) {
    const std::string name = std::string(a.role) + ".npy";
    const std::string path = out.path(name);
    try {
      if (dtype == NpyDtype::float16)
        write_npy(path, a.half);
      else
        write_npy(path, a.data->data(), shape);
    } catch (const Error& e) {
      restate(e, "write_npy", path, name, prefix);
    }
  }
  commit_capture(out, c, c.has_values(), prefix);
}

// ---------------------------------------------------------------------------
// CaptureWriter: write_capture's checks and bytes, one sequence at a time.

struct CaptureWriter::State {
  struct Array {
    const char* role;  // "queries", "keys", "values"
    std::string name, path;
    detail::File file;
  };
  std::string dir, prefix;
  Capture meta;  // sizes, settings, texts and provenance; no arrays
  Sizes sizes;
  bool with_values = false;
  NpyDtype dtype = NpyDtype::float32;
  std::size_t item = 4;         // bytes per element in the files
  std::size_t data_start = 0;   // the .npy header's size: where element 0 is
  std::size_t array_bytes = 0;  // the elements of one array
  std::uint64_t total_bytes = 0;  // every file
  std::string json;             // capture.json, written by finish()
  std::unique_ptr<detail::OutputFolder> out;  // the staged folder
  std::vector<Array> arrays;
  std::vector<std::size_t> offsets;  // first token of each sequence
  std::vector<bool> written;
  std::size_t written_count = 0;
  // Per head, the largest query and key norms so far and their tokens
  // (validate_capture's score bound, checked as the sequences arrive).
  std::vector<double> max_q, max_k;
  std::vector<std::size_t> max_q_token, max_k_token;
  bool failed = false, finished = false;
  std::vector<unsigned char> buffer;  // one encoded (layer, head) slice

  [[noreturn]] void write_failed(const Array& a, const std::string& what) {
    failed = true;
    fail(prefix, a.name + ": " + what + " (" + detail::strerror_string(errno) + ")");
  }

  // Encodes n values (element first of the array) into buffer; for float16
  // fails on a value beyond its range.
  void encode(const float* src, std::size_t n, std::size_t first, const char* role) {
    buffer.resize(n * item);
    if (dtype == NpyDtype::float16) {
      encode_half(meta, sizes, src, n, first, buffer.data(), role, prefix);
    } else {
      for (std::size_t i = 0; i < n; ++i) detail::store_f32(buffer.data() + 4 * i, src[i]);
    }
  }
};

namespace {
// The checks and sizes of a capture to be written, before any file exists:
// everything CaptureWriter's constructor and capture_file_bytes share.
void plan(CaptureWriter::State& w, const std::string& prefix, std::size_t layers, std::size_t heads,
          std::size_t head_dim, std::vector<std::size_t> lengths, bool with_values, std::vector<HeadSettings> settings,
          std::vector<std::string> texts, std::string provenance, NpyDtype dtype) {
  w.prefix = prefix;
  if (dtype != NpyDtype::float32 && dtype != NpyDtype::float16)
    fail(w.prefix, std::string("unsupported dtype ") + npy_dtype_name(dtype) + " (expected float32 or float16)");
  w.meta.layers = layers;
  w.meta.heads = heads;
  w.meta.head_dim = head_dim;
  w.meta.lengths = std::move(lengths);
  w.meta.settings = std::move(settings);
  w.meta.texts = std::move(texts);
  w.meta.provenance = std::move(provenance);
  w.sizes = validate(w.meta, w.prefix, /*arrays=*/false);
  w.with_values = with_values;
  w.dtype = dtype;
  w.item = npy_dtype_size(dtype);
  w.json = capture_json_text(w.meta, with_values, w.prefix);
  if (!checked_mul(w.sizes.count, w.item, w.array_bytes)) fail(w.prefix, "the arrays' byte count overflows");
  w.data_start = encode_npy_header(dtype, {layers, heads, w.sizes.tokens, head_dim}).size();
  if (w.array_bytes > static_cast<std::size_t>(std::numeric_limits<long>::max()) - w.data_start)
    fail(w.prefix, "the arrays are too large for this platform's file offsets");
  const std::uint64_t per_file = static_cast<std::uint64_t>(w.data_start) + w.array_bytes;
  w.total_bytes = per_file * (with_values ? 3 : 2) + w.json.size();
}
}  // namespace

std::uint64_t capture_file_bytes(std::size_t layers, std::size_t heads, std::size_t head_dim,
                                 std::vector<std::size_t> lengths, bool with_values, std::vector<HeadSettings> settings,
                                 std::vector<std::string> texts, std::string provenance, NpyDtype dtype) {
  CaptureWriter::State w;
  plan(w, "capture_file_bytes: ", layers, heads, head_dim, std::move(lengths), with_values, std::move(settings),
       std::move(texts), std::move(provenance), dtype);
  return w.total_bytes;
}

CaptureWriter::CaptureWriter(const std::string& dir, std::size_t layers, std::size_t heads, std::size_t head_dim,
                             std::vector<std::size_t> lengths, bool with_values, std::vector<HeadSettings> settings,
                             std::vector<std::string> texts, std::string provenance, NpyDtype dtype)
    : state_(std::make_unique<State>()) {
  State& w = *state_;
  w.dir = dir;
  plan(w, "CaptureWriter: " + dir + ": ", layers, heads, head_dim, std::move(lengths), with_values, std::move(settings),
       std::move(texts), std::move(provenance), dtype);
  std::size_t first = 0;
  for (std::size_t n : w.meta.lengths) {
    w.offsets.push_back(first);
    first += n;  // no overflow: checked_sizes
  }
  w.written.assign(w.meta.lengths.size(), false);
  w.max_q.assign(w.sizes.heads_total, 0.0);
  w.max_k.assign(w.sizes.heads_total, 0.0);
  w.max_q_token.assign(w.sizes.heads_total, 0);
  w.max_k_token.assign(w.sizes.heads_total, 0);

  // Nothing in dir changes before finish(): the files are staged (OutputFolder).
  w.out = std::make_unique<detail::OutputFolder>("CaptureWriter", dir);
  std::vector<std::string> targets = capture_file_names(with_values);
  targets.push_back("capture.json");
  w.out->check_targets(targets);
  check_free_space(*w.out, w.total_bytes, w.prefix);
  const std::vector<unsigned char> header = encode_npy_header(dtype, {layers, heads, w.sizes.tokens, head_dim});
  std::vector<const char*> roles = {"queries", "keys"};
  if (with_values) roles.push_back("values");
  for (const char* role : roles) {
    State::Array a;
    a.role = role;
    a.name = std::string(role) + ".npy";
    a.path = w.out->path(a.name);
    errno = 0;
    a.file.reset(std::fopen(a.path.c_str(), "wb"));
    if (!a.file) w.write_failed(a, "cannot open file for writing");
    if (std::fwrite(header.data(), 1, header.size(), a.file.get()) != header.size() ||
        std::fflush(a.file.get()) != 0)
      w.write_failed(a, "write failed");
    // The file at its final size from the start; the sequences fill it in.
    std::error_code ec;
    fs::resize_file(a.path, w.data_start + w.array_bytes, ec);
    if (ec) {
      fail(w.prefix, a.name + ": cannot extend the file to " + str(w.data_start + w.array_bytes) + " bytes (" +
                         ec.message() + ")");
    }
    w.arrays.push_back(std::move(a));
  }
}

CaptureWriter::CaptureWriter(CaptureWriter&&) noexcept = default;
CaptureWriter& CaptureWriter::operator=(CaptureWriter&&) noexcept = default;
CaptureWriter::~CaptureWriter() = default;

std::size_t CaptureWriter::sequences() const { return state_ ? state_->meta.lengths.size() : 0; }
std::size_t CaptureWriter::sequences_written() const { return state_ ? state_->written_count : 0; }

void CaptureWriter::write_sequence(std::size_t sequence, const std::vector<float>& queries,
                                   const std::vector<float>& keys, const std::vector<float>& values) {
  if (!state_) throw Error("CaptureWriter::write_sequence: the writer was moved from");
  State& w = *state_;
  const std::string& prefix = w.prefix;
  if (w.finished) fail(prefix, "write_sequence after finish()");
  if (w.failed) fail(prefix, "an earlier write failed; the capture cannot be completed");
  const Capture& c = w.meta;
  if (sequence >= c.lengths.size())
    fail(prefix, "sequence out of range (got " + str(sequence) + ", expected < " + str(c.lengths.size()) + ")");
  if (w.written[sequence]) fail(prefix, "sequence " + str(sequence) + " was written already");
  const std::size_t n = c.lengths[sequence];
  const std::size_t slice = n * c.head_dim;
  const std::size_t expected = w.sizes.heads_total * slice;  // <= sizes.count: no overflow
  if (w.with_values && values.empty()) fail(prefix, "values: missing (the capture has values)");
  if (!w.with_values && !values.empty()) fail(prefix, "values: given, but the capture has no values");
  const std::vector<float>* given[3] = {&queries, &keys, &values};  // in the order of w.arrays
  for (std::size_t i = 0; i < w.arrays.size(); ++i) {
    const State::Array& a = w.arrays[i];
    const std::vector<float>& data = *given[i];
    if (data.size() != expected)
      fail(prefix, std::string(a.role) + " of sequence " + str(sequence) + " has " + str(data.size()) +
                       " elements (expected layers * heads * lengths[" + str(sequence) + "] * head_dim = " +
                       str(c.layers) + " * " + str(c.heads) + " * " + str(n) + " * " + str(c.head_dim) + " = " +
                       str(expected) + ")");
  }
  // Element (head index hi, row 0) of this sequence in a whole array.
  auto first_of = [&](std::size_t hi) { return (hi * w.sizes.tokens + w.offsets[sequence]) * c.head_dim; };
  // Everything that can fail on the data, before any of it is written.
  for (std::size_t i = 0; i < w.arrays.size(); ++i) {
    const State::Array& a = w.arrays[i];
    const std::vector<float>& data = *given[i];
    for (std::size_t hi = 0; hi < w.sizes.heads_total; ++hi) {
      check_finite(c, w.sizes, data.data() + hi * slice, slice, first_of(hi), a.role, prefix);
      if (w.dtype == NpyDtype::float16) w.encode(data.data() + hi * slice, slice, first_of(hi), a.role);
    }
  }
  std::vector<double> max_q = w.max_q, max_k = w.max_k;
  std::vector<std::size_t> max_q_token = w.max_q_token, max_k_token = w.max_k_token;
  for (std::size_t hi = 0; hi < w.sizes.heads_total; ++hi) {
    largest_norm(queries.data() + hi * slice, n, c.head_dim, w.offsets[sequence], max_q[hi], max_q_token[hi]);
    largest_norm(keys.data() + hi * slice, n, c.head_dim, w.offsets[sequence], max_k[hi], max_k_token[hi]);
    check_head_scores(c, hi, max_q[hi], max_q_token[hi], max_k[hi], max_k_token[hi], prefix);
  }
  for (std::size_t i = 0; i < w.arrays.size(); ++i) {
    State::Array& a = w.arrays[i];
    const std::vector<float>& data = *given[i];
    for (std::size_t hi = 0; hi < w.sizes.heads_total; ++hi) {
      w.encode(data.data() + hi * slice, slice, first_of(hi), a.role);
      const std::size_t at = w.data_start + first_of(hi) * w.item;  // < file size, checked to fit long
      errno = 0;
      if (std::fseek(a.file.get(), static_cast<long>(at), SEEK_SET) != 0) w.write_failed(a, "seek failed");
      if (std::fwrite(w.buffer.data(), 1, w.buffer.size(), a.file.get()) != w.buffer.size())
        w.write_failed(a, "write failed");
    }
  }
  w.written[sequence] = true;
  ++w.written_count;
  w.max_q = std::move(max_q);
  w.max_k = std::move(max_k);
  w.max_q_token = std::move(max_q_token);
  w.max_k_token = std::move(max_k_token);
}

void CaptureWriter::finish() {
  if (!state_) throw Error("CaptureWriter::finish: the writer was moved from");
  State& w = *state_;
  if (w.finished) fail(w.prefix, "finish() called twice");
  if (w.failed) fail(w.prefix, "an earlier write failed; the capture cannot be completed");
  for (std::size_t s = 0; s < w.written.size(); ++s)
    if (!w.written[s])
      fail(w.prefix, "sequence " + str(s) + " was never written (" + str(w.written_count) + " of " +
                         str(w.written.size()) + " written)");
  for (State::Array& a : w.arrays) {
    errno = 0;
    if (std::fflush(a.file.get()) != 0) w.write_failed(a, "write failed");
    if (std::fclose(a.file.release()) != 0) w.write_failed(a, "write failed");
  }
  commit_capture(*w.out, w.meta, w.with_values, w.prefix);
  w.finished = true;
}

Capture read_capture(const std::string& dir) {
  const std::string prefix = "read_capture: " + dir + ": ";
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (ec || !fs::exists(status))
    fail(prefix, "cannot open the folder (" + (ec ? ec.message() : std::string("No such file or directory")) + ")");
  if (!fs::is_directory(status)) fail(prefix, "is not a folder (a capture is a folder holding capture.json)");
  // No writer commits into the folder while capture.json and its arrays are read.
  const detail::FolderReadLock lock(dir);

  const std::string json_path = (fs::path(dir) / "capture.json").string();
  std::vector<unsigned char> bytes;
  try {
    bytes = detail::read_file_bytes("read_capture", json_path, kMaxJsonBytes);
  } catch (const Error& e) {
    restate(e, "read_capture", json_path, "capture.json", prefix);
  }
  std::string repeated;
  const Json j =
      parse_json(std::string(bytes.begin(), bytes.end()), prefix, "capture.json", kMaxJsonDepth + 1, &repeated);
  if (!j.is_object()) fail(prefix, "capture.json is not a JSON object (got " + shown(j) + ")");

  // "format" and "version" first: a file of another kind or version gets that
  // said, not a complaint about its keys.
  if (!j.contains("format")) fail(prefix, "missing required key \"format\" (expected \"entgraph-capture\")");
  if (j.at("format") != kFormat)
    fail(prefix, "\"format\" is " + shown(j.at("format")) + " (expected \"entgraph-capture\")");
  if (!j.contains("version")) fail(prefix, "missing required key \"version\" (expected 1)");
  const Json& version = j.at("version");
  if (!version.is_number_integer()) fail(prefix, "\"version\" is not an integer (got " + shown(version) + ")");
  if (version != kVersion) fail(prefix, "unsupported version " + shown(version) + " (expected 1)");
  if (!repeated.empty()) fail(prefix, repeated);
  for (const auto& item : j.items()) {
    bool known = false;
    for (const char* k : kKnownKeys) known = known || item.key() == k;
    if (!known)
      fail(prefix, "unknown key \"" + detail::printable(item.key().data(), item.key().size()) +
                       "\" in capture.json (expected one of " + kKnownKeyList + ")");
  }
  for (const char* k : {"layers", "heads", "head_dim", "lengths", "queries", "keys"})
    if (!j.contains(k)) fail(prefix, std::string("missing required key \"") + k + "\"");

  Capture c;
  c.layers = get_size(j, "layers", prefix);
  c.heads = get_size(j, "heads", prefix);
  c.head_dim = get_size(j, "head_dim", prefix);
  c.lengths = get_lengths(j, prefix);
  const Sizes s = checked_sizes(c.layers, c.heads, c.head_dim, c.lengths, prefix);
  const std::string queries_file = get_file_name(j, "queries", prefix);
  const std::string keys_file = get_file_name(j, "keys", prefix);
  const std::string values_file = j.contains("values") ? get_file_name(j, "values", prefix) : std::string();

  // One setting per head is allocated below, before the arrays are read: a
  // capture.json claiming more heads than its queries file can hold
  // (2 bytes an element at least) is refused first when that would be large
  // (smaller mismatches get read_npy's more specific message).
  if (s.heads_total > (std::size_t{1} << 16)) {
    std::error_code ec;
    const std::uintmax_t bytes = fs::file_size(fs::path(dir) / queries_file, ec);
    if (ec || bytes / 2 < s.count)
      fail(prefix, queries_file + ": " + (ec ? "cannot open file (" + ec.message() + ")" : str(bytes) + " bytes") +
                       ", too few for layers * heads * tokens * head_dim = " + str(s.count) + " values");
  }
  HeadSettings defaults;
  defaults.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  c.settings.assign(s.heads_total, defaults);
  auto is_number = [](const Json& v) { return v.is_number(); };
  get_per_head(j, "alpha", "a number", c.layers, c.heads, c.settings, prefix, is_number,
               [](HeadSettings& h, const Json& v) { h.alpha = v.get<double>(); });
  get_per_head(
      j, "causal", "a boolean", c.layers, c.heads, c.settings, prefix, [](const Json& v) { return v.is_boolean(); },
      [](HeadSettings& h, const Json& v) { h.causal = v.get<bool>(); });
  get_per_head(j, "scale", "a number", c.layers, c.heads, c.settings, prefix, is_number,
               [](HeadSettings& h, const Json& v) { h.scale = v.get<double>(); });

  if (j.contains("texts")) {
    const Json& t = j.at("texts");
    if (!t.is_array()) fail(prefix, "texts is not an array of strings (got " + shown(t) + ")");
    if (t.size() != c.lengths.size())
      fail(prefix,
           "texts has " + str(t.size()) + " entries (expected one per sequence, " + str(c.lengths.size()) + ")");
    for (std::size_t i = 0; i < t.size(); ++i) {
      if (!t[i].is_string()) fail(prefix, "texts[" + str(i) + "] is not a string (got " + shown(t[i]) + ")");
      c.texts.push_back(t[i].get<std::string>());
    }
  }
  if (j.contains("provenance")) {
    const Json& p = j.at("provenance");
    if (!p.is_object()) fail(prefix, "provenance is not a JSON object (got " + shown(p) + ")");
    c.provenance = p.dump(-1, ' ', false);
  }

  const std::vector<std::size_t> shape = {c.layers, c.heads, s.tokens, c.head_dim};
  c.queries = read_array(dir, queries_file, "queries", shape, s, prefix);
  c.keys = read_array(dir, keys_file, "keys", shape, s, prefix);
  if (!values_file.empty()) c.values = read_array(dir, values_file, "values", shape, s, prefix);
  validate(c, prefix);  // ranges of alpha and scale, NaN and infinity in the data, score range
  c.source = dir;
  return c;
}

std::string head_context(const Capture& capture, std::size_t layer, std::size_t head) {
  const std::string source = capture.source.empty() ? std::string() : "capture " + capture.source + ", ";
  return source + "layer " + std::to_string(layer) + ", head " + std::to_string(head);
}

}  // namespace entgraph
