// entgraph: the capture reader (see entgraph/io/capture.hpp and
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
#include "io/capture_checks.hpp"
#include "io/json_strict.hpp"
#include "io/output_folder.hpp"
#include "runtime/numbers.hpp"

namespace entgraph {

using namespace detail::capture_io;

namespace {

namespace fs = std::filesystem;

// Reader helpers. Each takes the message prefix "read_capture: <dir>: ".

std::size_t get_size(const Json& j, const char* key, const Message& prefix) {
  const Json& v = j.at(key);
  if (!v.is_number_unsigned())  // nlohmann parses every integer >= 0 that fits 64 bits as unsigned
    fail(prefix, std::string(key) + " is not a non-negative integer (got " + shown(v) + ")");
  const auto u = v.get<std::uint64_t>();
  if (u > std::numeric_limits<std::size_t>::max())
    fail(prefix, std::string(key) + " is too large (got " + shown(v) + ")");
  return static_cast<std::size_t>(u);
}

std::vector<std::size_t> get_lengths(const Json& j, const Message& prefix) {
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
std::string get_file_name(const Json& j, const char* key, const Message& prefix) {
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
                  std::vector<HeadSettings>& settings, const Message& prefix, IsOk is_ok, Set set) {
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
                              const std::vector<std::size_t>& expected, const Sizes& sizes, const Message& prefix) {
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


Capture read_capture_folder(const std::string& dir) {
  const Message prefix = at_op("read_capture") + dir + ": ";
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (ec || !fs::exists(status))
    fail(prefix, "cannot open the folder (" + (ec ? ec.message() : std::string("No such file or directory")) + ")",
         ErrorCode::io);
  if (!fs::is_directory(status))
    fail(prefix, "is not a folder (a capture is a folder holding capture.json)", ErrorCode::io);
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

}  // namespace

Capture read_capture(const std::string& dir) {
  // What it finds wrong is the folder's fault: ErrorCode::bad_file.
  return reading_file([&] { return read_capture_folder(dir); });
}

}  // namespace entgraph
