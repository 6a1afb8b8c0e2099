// entgraph: the capture writers, write_capture and CaptureWriter (see
// entgraph/io/capture.hpp and docs/FORMATS.md for the format). Both stage the
// files in an output folder and move them into place only once every check
// has passed.
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
                 const char* name, const Message& prefix) {
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
                                       const Message& prefix) {
  std::vector<unsigned char> bytes(a.size() * 2);
  encode_half(c, s, a.data(), a.size(), 0, bytes.data(), name, prefix);
  return bytes;
}

// capture.json of a capture (its arrays in queries.npy, keys.npy and, if
// has_values, values.npy, or the names `files` gives them: see OutputFolder):
// one key per line, each value on one line, which reads well and diffs well.
// The capture has passed validate().
std::string capture_json_text(const Capture& c, bool has_values, const Message& prefix,
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
void commit_capture(detail::OutputFolder& out, const Capture& meta, bool with_values, const Message& prefix) {
  out.commit(capture_file_names(with_values), "capture.json", [&](const detail::OutputFolder::Names& names) {
    return capture_json_text(meta, with_values, prefix, names);
  });
}

// Refuses an output larger than the free space of the file system it goes to.
void check_free_space(const detail::OutputFolder& out, std::uint64_t bytes, const Message& prefix) {
  const unsigned long long available = detail::free_bytes_at(out.staging());
  if (bytes > available)
    fail(prefix, "the capture needs " + str(bytes) + " bytes but its file system has " + str(available) + " free");
}

}  // namespace

void write_capture(const std::string& dir, const Capture& c, NpyDtype dtype) {
  const Message prefix = at_op("write_capture") + dir + ": ";
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
  std::string dir;
  Message prefix;
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
void plan(CaptureWriter::State& w, const Message& prefix, std::size_t layers, std::size_t heads,
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
    fail(w.prefix, "the arrays are too large for this platform's file offsets", ErrorCode::limit);
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
  if (!state_) throw Error(at_op("CaptureWriter::write_sequence") + "the writer was moved from");
  State& w = *state_;
  const Message& prefix = w.prefix;
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
  if (!state_) throw Error(at_op("CaptureWriter::finish") + "the writer was moved from");
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


}  // namespace entgraph
