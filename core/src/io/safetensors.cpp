// entgraph: safetensors reader and writer (see entgraph/io/safetensors.hpp
// for the format).
//
// The reader validates in this order, so that nothing is allocated or read
// before the length that governs it has been checked against the input size:
// header size N (against the cap and the input) -> header JSON, parsed by a
// SAX handler that accepts only the expected structure -> each tensor's dtype,
// shape and offsets (against the data buffer) -> the tiling of the buffer ->
// the tensor bytes.
//
// nlohmann::json's DOM parser keeps the last of duplicate keys and builds a
// tree of any depth; the SAX handler instead sees every key (so duplicates
// are caught) and throws at the first value that is not where the format
// puts one, so a hostile header cannot nest deeply or smuggle extra data.
#include "entgraph/io/safetensors.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "io/binary.hpp"
#include "io/json_strict.hpp"

namespace entgraph {
namespace {

using detail::checked_count;
using detail::fail;
using detail::load_le;
using detail::printable;
using detail::store_le;
using json = nlohmann::json;

constexpr const char* kRead = "read_safetensors";
constexpr const char* kMetadataKey = "__metadata__";
constexpr std::size_t kPrefixSize = 8;  // the header size N, u64 little-endian

struct DtypeInfo {
  const char* name;
  std::size_t size;
};
constexpr DtypeInfo kDtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                 {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};

// Bytes per element of dtype, or 0 if it is not one of kDtypes.
std::size_t dtype_size_or_zero(const std::string& dtype) {
  for (const DtypeInfo& d : kDtypes)
    if (dtype == d.name) return d.size;
  return 0;
}

// "unknown dtype 'F8_E4M3' (expected one of F64, F32, ...)".
std::string unknown_dtype(const std::string& dtype) {
  std::string s = "unknown dtype '" + printable(dtype.data(), dtype.size()) + "' (expected one of ";
  for (std::size_t i = 0; i < std::size(kDtypes); ++i) s += (i > 0 ? ", " : "") + std::string(kDtypes[i].name);
  return s + ")";
}

// A tensor name or key as it appears in messages: quoted, hostile bytes escaped.
std::string quote_name(const std::string& s) { return "'" + printable(s.data(), s.size(), 160) + "'"; }
std::string tensor_label(const std::string& name) { return "tensor " + quote_name(name); }

std::string shape_string(const std::vector<std::size_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string offsets_string(std::size_t begin, std::size_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// ---------------------------------------------------------------------------
// Header: a SAX handler that accepts exactly
//   { "__metadata__": { string: string, ... },   (optional, at most once)
//     name: { "dtype": string, "shape": [uint, ...], "data_offsets": [uint, uint] }, ... }
// and fills one Entry per tensor, in header order.

struct Entry {
  SafeTensor tensor;  // name, dtype and shape; bytes are filled last
  std::size_t begin = 0;
  std::size_t end = 0;
};

class HeaderSax : public nlohmann::json_sax<json> {
 public:
  HeaderSax(const std::string& name, std::vector<Entry>& entries,
            std::vector<std::pair<std::string, std::string>>& metadata)
      : name_(name), entries_(entries), metadata_(metadata) {}

  bool null() override { return value("null"); }
  bool boolean(bool v) override { return value(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override {
    if (v < 0) {
      if (state_ == State::shape) error(where() + "negative 'shape' entry " + std::to_string(v));
      if (state_ == State::offsets) error(where() + "negative 'data_offsets' entry " + std::to_string(v));
      return value("a number");
    }
    return number_unsigned(static_cast<number_unsigned_t>(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (state_ != State::shape && state_ != State::offsets) return value("a number");
    const char* field = state_ == State::shape ? "'shape'" : "'data_offsets'";
    if (v > std::numeric_limits<std::size_t>::max())
      error(where() + field + " entry " + std::to_string(v) + " is too large (overflow)");
    const auto n = static_cast<std::size_t>(v);
    Entry& e = entries_.back();
    if (state_ == State::shape) {
      if (e.tensor.shape.size() == kSafetensorsMaxDims)
        error(where() + "too many dimensions in 'shape' (more than " + std::to_string(kSafetensorsMaxDims) + ")");
      e.tensor.shape.push_back(n);
    } else {
      if (offsets_seen_ == 2) error(where() + "'data_offsets' must hold exactly 2 entries, [begin, end] (got more)");
      (offsets_seen_++ == 0 ? e.begin : e.end) = n;
    }
    return true;
  }
  bool number_float(number_float_t, const string_t& text) override {
    if (state_ == State::shape || state_ == State::offsets)
      error(where() + (state_ == State::shape ? "'shape'" : "'data_offsets'") + " entry " +
            printable(text.data(), text.size()) + " is not a non-negative integer");
    return value("a number");
  }
  bool string(string_t& s) override {
    if (state_ == State::metadata) {
      metadata_.emplace_back(std::move(key_), std::move(s));
      return true;
    }
    if (state_ == State::tensor && field_ == Field::dtype) {
      entries_.back().tensor.dtype = std::move(s);
      return true;
    }
    return value("a string");
  }
  bool binary(binary_t&) override { return value("binary data"); }

  bool start_object(std::size_t) override {
    if (state_ == State::start) {
      state_ = State::top;
      return true;
    }
    if (state_ == State::top) {
      if (key_ == kMetadataKey) {
        if (seen_metadata_) error("duplicate key '__metadata__' in header");
        seen_metadata_ = true;
        state_ = State::metadata;
      } else {
        entries_.emplace_back();
        entries_.back().tensor.name = std::move(key_);
        have_dtype_ = have_shape_ = have_offsets_ = false;
        state_ = State::tensor;
      }
      return true;
    }
    return value("an object");
  }
  bool end_object() override {
    if (state_ == State::tensor) {
      if (!have_dtype_) error(where() + "missing 'dtype'");
      if (!have_shape_) error(where() + "missing 'shape'");
      if (!have_offsets_) error(where() + "missing 'data_offsets'");
      state_ = State::top;
    } else if (state_ == State::metadata) {
      state_ = State::top;
    } else {
      state_ = State::done;  // the top-level object; the parser rejects anything after it
    }
    return true;
  }
  bool start_array(std::size_t) override {
    if (state_ == State::tensor && field_ == Field::shape) {
      state_ = State::shape;
      return true;
    }
    if (state_ == State::tensor && field_ == Field::offsets) {
      state_ = State::offsets;
      offsets_seen_ = 0;
      return true;
    }
    return value("an array");
  }
  bool end_array() override {
    if (state_ == State::offsets && offsets_seen_ != 2)
      error(where() + "'data_offsets' must hold exactly 2 entries, [begin, end] (got " + std::to_string(offsets_seen_) +
            ")");
    state_ = State::tensor;  // only shape and offsets arrays get this far
    return true;
  }

  bool key(string_t& k) override {
    if (state_ == State::tensor) {
      if (k == "dtype") {
        field_ = Field::dtype;
        mark(have_dtype_, k);
      } else if (k == "shape") {
        field_ = Field::shape;
        mark(have_shape_, k);
      } else if (k == "data_offsets") {
        field_ = Field::offsets;
        mark(have_offsets_, k);
      } else {
        error(where() + "unexpected key " + quote_name(k) + " (expected 'dtype', 'shape' and 'data_offsets')");
      }
      return true;
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    // "[json.exception.parse_error.101] parse error at line 1, column 7: ..."
    std::string what = ex.what();
    what.erase(0, detail::json_library_tag_length(what));
    error("header is not valid JSON (" + printable(what.data(), what.size(), 300) + ")");
  }

 private:
  enum class State { start, top, metadata, tensor, shape, offsets, done };
  enum class Field { dtype, shape, offsets };

  [[noreturn]] void error(const std::string& what) const { fail(kRead, name_, what); }

  // "tensor 'x': " while inside a tensor entry.
  std::string where() const { return tensor_label(entries_.back().tensor.name) + ": "; }

  void mark(bool& have, const std::string& k) {
    if (have) error(where() + "duplicate key " + quote_name(k));
    have = true;
  }

  // Any value not consumed above is out of place; say where and what it is.
  bool value(const char* got) {
    switch (state_) {
      case State::start:
        error(std::string("header is not a JSON object (got ") + got + ")");
      case State::top:
        if (key_ == kMetadataKey) error(std::string("'__metadata__' is not an object (got ") + got + ")");
        error(tensor_label(key_) + ": entry is not an object (got " + got + ")");
      case State::metadata:
        error("'__metadata__' value of key " + quote_name(key_) + " is not a string (got " + got + ")");
      case State::tensor:
        if (field_ == Field::dtype) error(where() + "'dtype' is not a string (got " + got + ")");
        error(where() + (field_ == Field::shape ? "'shape'" : "'data_offsets'") + " is not an array (got " + got + ")");
      case State::shape:
        error(where() + "'shape' entry is not a non-negative integer (got " + got + ")");
      case State::offsets:
        error(where() + "'data_offsets' entry is not a non-negative integer (got " + got + ")");
      case State::done:
        break;
    }
    error(std::string("unexpected ") + got + " after the header object");
  }

  const std::string& name_;
  std::vector<Entry>& entries_;
  std::vector<std::pair<std::string, std::string>>& metadata_;
  State state_ = State::start;
  Field field_ = Field::dtype;
  std::string key_;  // the last key of the top-level or metadata object
  bool seen_metadata_ = false;
  bool have_dtype_ = false, have_shape_ = false, have_offsets_ = false;
  std::size_t offsets_seen_ = 0;
};

// The smallest name (name_of(item)) that more than one of items has, or
// nullptr if they are all different.
template <class Item, class NameOf>
const std::string* repeated_name(const std::vector<Item>& items, NameOf name_of) {
  std::vector<const std::string*> names;
  names.reserve(items.size());
  for (const Item& item : items) names.push_back(&name_of(item));
  std::sort(names.begin(), names.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  for (std::size_t i = 1; i < names.size(); ++i)
    if (*names[i] == *names[i - 1]) return names[i];
  return nullptr;
}

const std::string& name_of_entry(const Entry& e) { return e.tensor.name; }
const std::string& name_of_tensor(const SafeTensor& t) { return t.name; }
const std::string& key_of(const std::pair<std::string, std::string>& kv) { return kv.first; }

// The header size N from the first min(total, 8) bytes of an input of total
// bytes, checked against the cap and against the input.
std::size_t parse_prefix(const unsigned char* prefix, std::size_t total, const std::string& name) {
  if (total < kPrefixSize)
    fail(kRead, name,
         "file too short (" + std::to_string(total) + " bytes; a safetensors file starts with an 8-byte header size)");
  const std::uint64_t n = load_le(prefix, kPrefixSize);
  if (n > kSafetensorsMaxHeaderSize)
    fail(kRead, name,
         "header size " + std::to_string(n) + " exceeds the limit of " + std::to_string(kSafetensorsMaxHeaderSize) +
             " bytes");
  if (n > total - kPrefixSize)
    fail(kRead, name,
         "header size " + std::to_string(n) + " exceeds the file (" + std::to_string(total - kPrefixSize) +
             " bytes after the size field)");
  return static_cast<std::size_t>(n);
}

// A parsed and fully validated header: the tensors (without bytes) in the
// order of their offsets, which tile [0, buffer_size) exactly.
struct Layout {
  std::vector<Entry> entries;
  std::vector<std::pair<std::string, std::string>> metadata;
};

Layout parse_layout(const unsigned char* header, std::size_t header_size, std::size_t buffer_size,
                    const std::string& name) {
  if (header_size == 0) fail(kRead, name, "header is not a JSON object (it is empty)");
  if (header[0] != '{')
    fail(kRead, name,
         "header is not a JSON object (does not start with '{'; starts with '" +
             printable(reinterpret_cast<const char*>(header), header_size, 20) + "')");
  Layout layout;
  HeaderSax sax(name, layout.entries, layout.metadata);
  const auto* text = reinterpret_cast<const char*>(header);
  json::sax_parse(text, text + header_size, &sax);  // throws Error on any problem

  // Duplicates: tensor names, then metadata keys (sorted in place, the order
  // they are returned in, so equal keys are neighbours).
  if (const std::string* repeated = repeated_name(layout.entries, name_of_entry))
    fail(kRead, name, "duplicate tensor name " + quote_name(*repeated));
  std::sort(layout.metadata.begin(), layout.metadata.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 1; i < layout.metadata.size(); ++i)
    if (layout.metadata[i].first == layout.metadata[i - 1].first)
      fail(kRead, name, "duplicate '__metadata__' key " + quote_name(layout.metadata[i].first));

  // Each tensor on its own: dtype, element and byte counts, offsets.
  for (const Entry& e : layout.entries) {
    const SafeTensor& t = e.tensor;
    const std::string where = tensor_label(t.name) + ": ";
    const std::size_t item = dtype_size_or_zero(t.dtype);
    if (item == 0) fail(kRead, name, where + unknown_dtype(t.dtype));
    std::size_t count = 0;
    if (!checked_count(t.shape, count))
      fail(kRead, name, where + "shape " + shape_string(t.shape) + " has too many elements (overflow)");
    if (count > std::numeric_limits<std::size_t>::max() / item)
      fail(kRead, name, where + "shape " + shape_string(t.shape) + " has too many bytes (overflow)");
    const std::string offsets = "data_offsets " + offsets_string(e.begin, e.end);
    if (e.begin > e.end) fail(kRead, name, where + offsets + " are reversed (begin > end)");
    if (e.end > buffer_size)
      fail(kRead, name,
           where + offsets + " lie past the end of the data buffer (" + std::to_string(buffer_size) + " bytes)");
    if (e.end - e.begin != count * item)
      fail(kRead, name,
           where + offsets + " hold " + std::to_string(e.end - e.begin) + " bytes but shape " + shape_string(t.shape) +
               " of " + t.dtype + " needs " + std::to_string(count * item));
  }

  // Together: sorted by offsets (ties keep header order), each tensor must
  // begin where the previous one ended, and the last end where the buffer does.
  std::stable_sort(layout.entries.begin(), layout.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::size_t expected = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : layout.entries) {
    if (e.begin < expected)  // then previous->begin <= e.begin < previous->end
      fail(kRead, name,
           tensor_label(e.tensor.name) + ": data_offsets " + offsets_string(e.begin, e.end) + " overlap " +
               tensor_label(previous->tensor.name) + " (data_offsets " +
               offsets_string(previous->begin, previous->end) + ")");
    if (e.begin > expected) {
      const std::string hole = "hole of " + std::to_string(e.begin - expected) + " bytes in the data buffer ";
      if (previous == nullptr)
        fail(kRead, name,
             hole + "before the first tensor (" + tensor_label(e.tensor.name) + " begins at " +
                 std::to_string(e.begin) + ")");
      fail(kRead, name,
           hole + "between " + tensor_label(previous->tensor.name) + " (ends at " + std::to_string(expected) +
               ") and " + tensor_label(e.tensor.name) + " (begins at " + std::to_string(e.begin) + ")");
    }
    expected = e.end;
    previous = &e;
  }
  if (expected != buffer_size && previous == nullptr)
    fail(kRead, name, std::to_string(buffer_size) + " trailing bytes in the data buffer (the header lists no tensors)");
  if (expected != buffer_size)
    fail(kRead, name,
         std::to_string(buffer_size - expected) + " trailing bytes after the last tensor (the tensors end at " +
             std::to_string(expected) + ", the data buffer has " + std::to_string(buffer_size) + " bytes)");
  return layout;
}

SafetensorsFile to_file(Layout& layout) {
  SafetensorsFile file;
  file.metadata = std::move(layout.metadata);
  file.tensors.reserve(layout.entries.size());
  for (Entry& e : layout.entries) file.tensors.push_back(std::move(e.tensor));
  return file;
}

// ---------------------------------------------------------------------------
// Writing.

// s as a JSON string literal. Throws entgraph::Error naming what if s is not
// valid UTF-8 (JSON text must be).
std::string json_string(const std::string& s, const char* op, const std::string& name, const std::string& what) {
  try {
    return json(s).dump();
  } catch (const json::exception&) {
    fail(op, name, what + " " + quote_name(s) + " is not valid UTF-8");
  }
}

std::vector<unsigned char> encode(const SafetensorsFile& file, const char* op, const std::string& name) {
  std::string header = "{";
  auto add_key = [&](const std::string& key_json) {
    if (header.size() > 1) header += ',';
    header += key_json;
    header += ':';
  };

  if (const std::string* repeated = repeated_name(file.metadata, key_of))
    fail(op, name, "duplicate '__metadata__' key " + quote_name(*repeated));
  if (!file.metadata.empty()) {
    add_key(json_string(kMetadataKey, op, name, "key"));
    header += '{';
    for (std::size_t i = 0; i < file.metadata.size(); ++i) {
      if (i > 0) header += ',';
      header += json_string(file.metadata[i].first, op, name, "'__metadata__' key");
      header += ':';
      header += json_string(file.metadata[i].second, op, name, "'__metadata__' value");
    }
    header += '}';
  }

  if (const std::string* repeated = repeated_name(file.tensors, name_of_tensor))
    fail(op, name, "duplicate tensor name " + quote_name(*repeated));

  std::size_t offset = 0;
  for (const SafeTensor& t : file.tensors) {
    const std::string where = tensor_label(t.name) + ": ";
    if (t.name == kMetadataKey) fail(op, name, "a tensor may not be named '__metadata__'");
    const std::size_t item = dtype_size_or_zero(t.dtype);
    if (item == 0) fail(op, name, where + unknown_dtype(t.dtype));
    if (t.shape.size() > kSafetensorsMaxDims)
      fail(op, name,
           where + "too many dimensions (" + std::to_string(t.shape.size()) + ", at most " +
               std::to_string(kSafetensorsMaxDims) + ")");
    std::size_t count = 0;
    if (!checked_count(t.shape, count) || count > std::numeric_limits<std::size_t>::max() / item)
      fail(op, name, where + "shape " + shape_string(t.shape) + " has too many elements (overflow)");
    if (t.bytes.size() != count * item)
      fail(op, name,
           where + "data size does not match the shape (got " + std::to_string(t.bytes.size()) + " bytes, expected " +
               std::to_string(count * item) + " for " + t.dtype + " " + shape_string(t.shape) + ")");
    const std::size_t end = offset + t.bytes.size();  // cannot wrap: every tensor is in memory
    add_key(json_string(t.name, op, name, "tensor name"));
    header += "{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) header += (i > 0 ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');  // data starts at a multiple of 8
  if (header.size() > kSafetensorsMaxHeaderSize)
    fail(op, name,
         "header of " + std::to_string(header.size()) + " bytes exceeds the limit of " +
             std::to_string(kSafetensorsMaxHeaderSize) + " bytes");

  // Sized once and filled in place.
  std::vector<unsigned char> out(kPrefixSize + header.size() + offset);
  store_le(out.data(), header.size(), kPrefixSize);
  std::memcpy(out.data() + kPrefixSize, header.data(), header.size());
  unsigned char* p = out.data() + kPrefixSize + header.size();
  for (const SafeTensor& t : file.tensors) {
    if (!t.bytes.empty()) std::memcpy(p, t.bytes.data(), t.bytes.size());
    p += t.bytes.size();
  }
  return out;
}

float decode_float(const std::string& dtype, const unsigned char* p) {
  if (dtype == "F32") return detail::load_f32(p);
  if (dtype == "F16") return static_cast<float>(detail::load_f16(p));
  if (dtype == "BF16") return detail::load_bf16(p);
  if (dtype == "F64") return static_cast<float>(detail::load_f64(p));
  if (dtype == "I64") return static_cast<float>(detail::load_i64(p));
  if (dtype == "I32") return static_cast<float>(detail::load_i32(p));
  if (dtype == "I16") return static_cast<float>(detail::load_i16(p));
  if (dtype == "I8") return static_cast<float>(static_cast<std::int8_t>(p[0]));
  if (dtype == "U8") return static_cast<float>(p[0]);
  return p[0] != 0 ? 1.0f : 0.0f;  // BOOL
}

}  // namespace

// ---------------------------------------------------------------------------

std::size_t safetensors_dtype_size(const std::string& dtype) {
  const std::size_t size = dtype_size_or_zero(dtype);
  if (size == 0) throw Error(at_op("safetensors_dtype_size") + unknown_dtype(dtype));
  return size;
}

std::size_t SafeTensor::size() const {
  std::size_t count = 0;
  if (!checked_count(shape, count))
    throw Error("SafeTensor: " + tensor_label(name) + ": shape " + shape_string(shape) + " overflows");
  return count;
}

std::vector<float> SafeTensor::to_float() const {
  const std::size_t item = dtype_size_or_zero(dtype);
  if (item == 0) throw Error("SafeTensor: " + tensor_label(name) + ": " + unknown_dtype(dtype));
  const std::size_t count = size();
  if (count > std::numeric_limits<std::size_t>::max() / item || bytes.size() != count * item)
    throw Error("SafeTensor: " + tensor_label(name) + ": data size does not match the shape (got " +
                std::to_string(bytes.size()) + " bytes for " + dtype + " " + shape_string(shape) + ")");
  std::vector<float> out(count);
  const unsigned char* p = bytes.data();
  for (std::size_t i = 0; i < count; ++i, p += item) out[i] = decode_float(dtype, p);
  return out;
}

const SafeTensor* SafetensorsFile::find(const std::string& name) const {
  for (const SafeTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const SafeTensor& SafetensorsFile::at(const std::string& name) const {
  const SafeTensor* t = find(name);
  if (t == nullptr) throw Error("safetensors: no tensor named " + quote_name(name));
  return *t;
}

SafeTensor make_f32_tensor(std::string name, const float* data, std::vector<std::size_t> shape) {
  SafeTensor t;
  t.name = std::move(name);
  t.dtype = "F32";
  std::size_t count = 0;
  if (!checked_count(shape, count) || count > std::numeric_limits<std::size_t>::max() / 4)
    throw Error(at_op("make_f32_tensor") + tensor_label(t.name) + ": shape " + shape_string(shape) + " overflows");
  if (data == nullptr && count != 0)
    throw Error(at_op("make_f32_tensor") + tensor_label(t.name) + ": null data for shape " + shape_string(shape));
  t.shape = std::move(shape);
  t.bytes.resize(count * 4);
  for (std::size_t i = 0; i < count; ++i) detail::store_f32(t.bytes.data() + 4 * i, data[i]);
  return t;
}

SafetensorsFile read_safetensors_bytes(const void* data, std::size_t size, const std::string& name) {
  if (data == nullptr && size != 0) fail(kRead, name, "null buffer of " + std::to_string(size) + " bytes");
  const auto* bytes = static_cast<const unsigned char*>(data);
  const std::size_t header_size = parse_prefix(bytes, size, name);
  const std::size_t data_offset = kPrefixSize + header_size;  // <= size, checked by parse_prefix
  Layout layout = parse_layout(bytes + kPrefixSize, header_size, size - data_offset, name);
  for (Entry& e : layout.entries)  // within the buffer, checked by parse_layout
    e.tensor.bytes.assign(bytes + data_offset + e.begin, bytes + data_offset + e.end);
  return to_file(layout);
}

SafetensorsFile read_safetensors(const std::string& path) {
  detail::InputFile f(kRead, path, "a safetensors file");
  const std::size_t total = f.size();

  unsigned char prefix[kPrefixSize] = {};
  f.read_exact(prefix, total < kPrefixSize ? total : kPrefixSize, "header size");
  const std::size_t header_size = parse_prefix(prefix, total, path);
  std::vector<unsigned char> header(header_size);  // <= file size, checked by parse_prefix
  f.read_exact(header.data(), header.size(), "header");
  Layout layout = parse_layout(header.data(), header.size(), total - kPrefixSize - header_size, path);
  // The tensors tile the rest of the file in this order: read them straight in.
  for (Entry& e : layout.entries) {
    e.tensor.bytes.resize(e.end - e.begin);  // within the file, checked by parse_layout
    f.read_exact(e.tensor.bytes.data(), e.tensor.bytes.size(), "data");
  }
  return to_file(layout);
}

std::vector<unsigned char> encode_safetensors(const SafetensorsFile& file) {
  return encode(file, "encode_safetensors", "<memory>");
}

void write_safetensors(const std::string& path, const SafetensorsFile& file) {
  const std::vector<unsigned char> bytes = encode(file, "write_safetensors", path);
  detail::write_file_bytes("write_safetensors", path, bytes.data(), bytes.size());
}

}  // namespace entgraph
