// entgraph: .npy reader and writer (see entgraph/io/npy.hpp for the format).
//
// The reader validates in this order, so that nothing is allocated or read
// before the length that governs it has been checked against the input size:
// prefix (magic, version, header length) -> header dict -> element count and
// byte count -> data length.
#include "entgraph/io/npy.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "entgraph/error.hpp"
#include "io/binary.hpp"

namespace entgraph {
namespace {

using detail::checked_count;
using detail::fail;
using detail::load_le;
using detail::printable;
using detail::store_le;
using detail::strerror_string;

constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr std::size_t kAlign = 64;  // numpy aligns the data to 64 bytes

double decode_element(NpyDtype dtype, const unsigned char* p) {
  switch (dtype) {
    case NpyDtype::float16:
      return detail::load_f16(p);
    case NpyDtype::float32:
      return detail::load_f32(p);
    case NpyDtype::float64:
      return detail::load_f64(p);
    case NpyDtype::int32:
      return static_cast<double>(detail::load_i32(p));
    case NpyDtype::int64:
      return static_cast<double>(detail::load_i64(p));
    case NpyDtype::uint8:
      return p[0];
    case NpyDtype::boolean:
      return p[0] != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

// int64 -> float must not go through double (double rounding); every other
// dtype converts to double exactly, so one path serves both targets.
template <class T>
T decode_as(NpyDtype dtype, const unsigned char* p) {
  if (dtype == NpyDtype::int64) return static_cast<T>(detail::load_i64(p));
  if constexpr (std::is_same_v<T, float>) {
    if (dtype == NpyDtype::float32) return detail::load_f32(p);
  }
  return static_cast<T>(decode_element(dtype, p));
}

template <class T>
constexpr NpyDtype dtype_of() {
  if constexpr (std::is_same_v<T, float>) return NpyDtype::float32;
  if constexpr (std::is_same_v<T, double>) return NpyDtype::float64;
  if constexpr (std::is_same_v<T, std::int32_t>) return NpyDtype::int32;
  if constexpr (std::is_same_v<T, std::int64_t>) return NpyDtype::int64;
  return NpyDtype::uint8;
}

template <class T>
void encode_element(T value, unsigned char* p) {
  if constexpr (std::is_same_v<T, float>) {
    detail::store_f32(p, value);
  } else if constexpr (std::is_same_v<T, double>) {
    detail::store_f64(p, value);
  } else {
    store_le(p, static_cast<std::uint64_t>(static_cast<std::make_unsigned_t<T>>(value)), sizeof(T));
  }
}

// ---------------------------------------------------------------------------
// Header: a Python dict literal with the keys 'descr', 'fortran_order' and
// 'shape'. This parser accepts exactly the literals numpy writes (and the
// small variations Python's literal syntax allows: either quote style, any
// whitespace, a trailing comma, keys in any order, Python 2's "3L").

struct Layout {
  NpyDtype dtype = NpyDtype::float32;
  std::vector<std::size_t> shape;
  std::size_t data_offset = 0;  // from the start of the file
  std::size_t data_bytes = 0;
};

class HeaderParser {
 public:
  HeaderParser(const char* begin, std::size_t len, const std::string& name)
      : p_(begin), end_(begin + len), name_(name) {}

  void parse(Layout& layout) {
    skip_space();
    if (p_ == end_ || *p_ != '{')
      error("header is not a dict (starts with '" + printable(p_, static_cast<std::size_t>(end_ - p_), 20) + "')");
    ++p_;
    bool have_descr = false, have_order = false, have_shape = false;
    for (;;) {
      skip_space();
      if (p_ == end_) error("header dict is not closed (missing '}')");
      if (*p_ == '}') {
        ++p_;
        break;
      }
      if (*p_ != '\'' && *p_ != '"') error("header dict key is not a string (at '" + here() + "')");
      const std::string key = parse_string("key");
      skip_space();
      expect(':', "after key '" + printable(key.data(), key.size()) + "'");
      skip_space();
      if (key == "descr") {
        if (have_descr) error("duplicate key 'descr' in header");
        have_descr = true;
        layout.dtype = parse_descr();
      } else if (key == "fortran_order") {
        if (have_order) error("duplicate key 'fortran_order' in header");
        have_order = true;
        if (parse_bool()) error("Fortran-order arrays are not supported ('fortran_order': True)");
      } else if (key == "shape") {
        if (have_shape) error("duplicate key 'shape' in header");
        have_shape = true;
        layout.shape = parse_shape();
      } else {
        error("unexpected key '" + printable(key.data(), key.size()) + "' in header");
      }
      skip_space();
      if (p_ == end_) error("header dict is not closed (missing '}')");
      if (*p_ == ',') {
        ++p_;
      } else if (*p_ != '}') {
        error("expected ',' or '}' in header dict (at '" + here() + "')");
      }
    }
    skip_space();
    if (p_ != end_) error("unexpected text after the header dict ('" + here() + "')");
    if (!have_descr) error("header has no 'descr' key");
    if (!have_order) error("header has no 'fortran_order' key");
    if (!have_shape) error("header has no 'shape' key");
  }

 private:
  [[noreturn]] void error(const std::string& what) const { fail("read_npy", name_, what); }
  std::string here() const { return printable(p_, static_cast<std::size_t>(end_ - p_), 20); }

  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  void expect(char c, const std::string& where) {
    if (p_ == end_ || *p_ != c) error(std::string("expected '") + c + "' " + where + " in header");
    ++p_;
  }

  // A Python string literal in single or double quotes; backslash escapes
  // of the quote and of backslash are kept literally (no descr needs more).
  std::string parse_string(const char* what) {
    const char quote = *p_++;
    std::string out;
    for (;;) {
      if (p_ == end_ || *p_ == '\n') error(std::string("unterminated string in header ") + what);
      const char c = *p_++;
      if (c == quote) break;
      if (c == '\\') {
        if (p_ == end_) error(std::string("unterminated string in header ") + what);
        out += *p_++;
        continue;
      }
      out += c;
    }
    return out;
  }

  bool parse_bool() {
    auto match = [&](const char* word) {
      const std::size_t n = std::strlen(word);
      if (static_cast<std::size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) return false;
      p_ += n;
      return true;
    };
    if (match("True")) return true;
    if (match("False")) return false;
    error("'fortran_order' is not True or False (got '" + here() + "')");
  }

  NpyDtype parse_descr() {
    if (p_ != end_ && *p_ == '[') error("structured dtypes are not supported ('descr' is a list)");
    if (p_ == end_ || (*p_ != '\'' && *p_ != '"')) error("'descr' is not a string (got '" + here() + "')");
    const std::string d = parse_string("'descr'");
    const std::string shown = "'" + printable(d.data(), d.size()) + "'";
    if (d.find('O') != std::string::npos) error("object arrays are not supported (dtype " + shown + ")");
    if (d.size() == 3) {
      const char order = d[0];
      const std::string type = d.substr(1);
      const bool one_byte = type == "u1" || type == "b1";
      if (one_byte && (order == '|' || order == '<' || order == '>' || order == '=')) {
        return type == "u1" ? NpyDtype::uint8 : NpyDtype::boolean;
      }
      if (order == '>') error("big-endian dtype " + shown + " is not supported (expected little-endian '<')");
      if (order == '<') {
        if (type == "f2") return NpyDtype::float16;
        if (type == "f4") return NpyDtype::float32;
        if (type == "f8") return NpyDtype::float64;
        if (type == "i4") return NpyDtype::int32;
        if (type == "i8") return NpyDtype::int64;
      }
    }
    error("unsupported dtype " + shown + " (expected one of '<f2', '<f4', '<f8', '<i4', '<i8', '|u1', '|b1')");
  }

  std::vector<std::size_t> parse_shape() {
    if (p_ == end_ || *p_ != '(') error("'shape' is not a tuple (got '" + here() + "')");
    ++p_;
    std::vector<std::size_t> shape;
    for (;;) {
      skip_space();
      if (p_ == end_) error("'shape' tuple is not closed");
      if (*p_ == ')') {
        ++p_;
        break;
      }
      if (shape.size() == kNpyMaxDims)
        error("too many dimensions in 'shape' (more than " + std::to_string(kNpyMaxDims) + ")");
      shape.push_back(parse_dim());
      skip_space();
      if (p_ == end_) error("'shape' tuple is not closed");
      if (*p_ == ',') {
        ++p_;
      } else if (*p_ != ')') {
        error("expected ',' or ')' in 'shape' (at '" + here() + "')");
      }
    }
    return shape;
  }

  std::size_t parse_dim() {
    const char* start = p_;
    bool negative = false;
    if (p_ != end_ && *p_ == '-') {
      negative = true;
      ++p_;
    }
    if (p_ == end_ || *p_ < '0' || *p_ > '9') error("'shape' entry is not an integer (got '" + here() + "')");
    std::size_t v = 0;
    bool overflow = false;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
      const auto digit = static_cast<std::size_t>(*p_ - '0');
      if (v > (std::numeric_limits<std::size_t>::max() - digit) / 10) overflow = true;
      if (!overflow) v = v * 10 + digit;
      ++p_;
    }
    const std::string text = printable(start, static_cast<std::size_t>(p_ - start));
    if (p_ != end_ && (*p_ == 'L' || *p_ == 'l')) ++p_;  // Python 2 long
    if (negative && (v != 0 || overflow)) error("negative 'shape' entry " + text);
    if (overflow) error("'shape' entry " + text + " is too large (overflow)");
    return v;
  }

  const char* p_;
  const char* end_;
  const std::string& name_;
};

// The fixed-size prefix: magic, version, header length. prefix holds the
// first min(total, 12) bytes of an input of total bytes.
struct Prefix {
  int major = 1;
  std::size_t header_offset = 10;
  std::size_t header_len = 0;
};

Prefix parse_prefix(const unsigned char* prefix, std::size_t total, const std::string& name) {
  if (total == 0) fail("read_npy", name, "empty file (expected a .npy file)");
  const std::size_t have = total < 12 ? total : 12;
  const std::size_t magic_have = have < 6 ? have : 6;
  if (std::memcmp(prefix, kMagic, magic_have) != 0 || total < 6)
    fail("read_npy", name,
         "not a .npy file (wrong magic string '" + printable(reinterpret_cast<const char*>(prefix), magic_have) + "')");
  if (total < 8) fail("read_npy", name, "truncated header (file has " + std::to_string(total) + " bytes)");
  Prefix out;
  out.major = prefix[6];
  const int minor = prefix[7];
  if (out.major < 1 || out.major > 3 || minor != 0)
    fail("read_npy", name,
         "unsupported format version " + std::to_string(out.major) + "." + std::to_string(minor) +
             " (expected 1.0, 2.0 or 3.0)");
  const std::size_t len_bytes = out.major == 1 ? 2 : 4;
  out.header_offset = 8 + len_bytes;
  if (total < out.header_offset)
    fail("read_npy", name, "truncated header (file has " + std::to_string(total) + " bytes)");
  out.header_len = static_cast<std::size_t>(load_le(prefix + 8, len_bytes));
  const std::size_t room = total - out.header_offset;
  if (out.header_len > room)
    fail("read_npy", name,
         "header length " + std::to_string(out.header_len) + " exceeds the file (" + std::to_string(room) +
             " bytes after the prefix)");
  return out;
}

// NumPy's sizes are signed 64-bit (npy_intp): a larger dimension or byte
// count makes a file NumPy refuses, even an empty one such as (0, 2^64 - 1).
// Neither written nor read.
void check_numpy_limits(const char* op, const std::string& name, NpyDtype dtype, const std::vector<std::size_t>& shape,
                        std::size_t bytes) {
  constexpr std::uint64_t kNumpyMax = std::numeric_limits<std::int64_t>::max();
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (static_cast<std::uint64_t>(shape[d]) > kNumpyMax)
      fail(op, name,
           "shape " + npy_shape_string(shape) + ": dimension " + std::to_string(d) +
               " is larger than NumPy can read (2^63 - 1 = 9223372036854775807)");
  if (static_cast<std::uint64_t>(bytes) > kNumpyMax)
    fail(op, name,
         "shape " + npy_shape_string(shape) + " of " + npy_dtype_name(dtype) +
             " holds more bytes than NumPy can read (2^63 - 1)");
}

Layout parse_layout(const Prefix& prefix, const char* header, const std::string& name) {
  Layout layout;
  HeaderParser(header, prefix.header_len, name).parse(layout);
  std::size_t count = 0;
  if (!checked_count(layout.shape, count))
    fail("read_npy", name, "shape " + npy_shape_string(layout.shape) + " has too many elements (overflow)");
  const std::size_t item = npy_dtype_size(layout.dtype);
  if (count > std::numeric_limits<std::size_t>::max() / item)
    fail("read_npy", name, "shape " + npy_shape_string(layout.shape) + " has too many bytes (overflow)");
  check_numpy_limits("read_npy", name, layout.dtype, layout.shape, count * item);
  layout.data_bytes = count * item;
  layout.data_offset = prefix.header_offset + prefix.header_len;
  return layout;
}

// The data must be exactly what the shape says, no more, no less.
void check_data_size(const Layout& layout, std::size_t total, const std::string& name) {
  const std::size_t have = total - layout.data_offset;
  if (have < layout.data_bytes)
    fail("read_npy", name,
         "truncated data (got " + std::to_string(have) + " bytes, expected " + std::to_string(layout.data_bytes) + ")");
  if (have > layout.data_bytes)
    fail("read_npy", name,
         std::to_string(have - layout.data_bytes) + " unexpected bytes after the data (got " + std::to_string(have) +
             " bytes, expected " + std::to_string(layout.data_bytes) + ")");
}

// Magic, version and padded header of an array of that dtype and shape, with
// room for data_bytes more bytes (filled in by the caller).
std::vector<unsigned char> encode_header(NpyDtype dtype, const std::vector<std::size_t>& shape, int version,
                                         std::size_t data_bytes, const char* op, const std::string& name) {
  if (version < 0 || version > 3)
    fail(op, name, "unsupported format version " + std::to_string(version) + " (expected 1, 2, 3 or 0 for auto)");
  std::size_t count = 0;
  if (shape.size() > kNpyMaxDims)
    fail(op, name,
         "too many dimensions (" + std::to_string(shape.size()) + ", at most " + std::to_string(kNpyMaxDims) + ")");
  const std::size_t item = npy_dtype_size(dtype);
  if (!checked_count(shape, count) || count > std::numeric_limits<std::size_t>::max() / item)
    fail(op, name, "shape " + npy_shape_string(shape) + " has too many elements (overflow)");
  check_numpy_limits(op, name, dtype, shape, count * item);
  if (data_bytes != count * item)
    fail(op, name,
         "data size does not match the shape (got " + std::to_string(data_bytes) + " bytes, expected " +
             std::to_string(count * item) + " for " + npy_dtype_name(dtype) + " " + npy_shape_string(shape) + ")");

  std::string dict = std::string("{'descr': '") + npy_dtype_descr(dtype) +
                     "', 'fortran_order': False, 'shape': " + npy_shape_string(shape) + ", }";
  auto padded_len = [&](std::size_t offset) {
    const std::size_t unpadded = offset + dict.size() + 1;  // + '\n'
    return dict.size() + 1 + (kAlign - unpadded % kAlign) % kAlign;
  };
  if (version == 0) version = padded_len(10) <= 0xffff ? 1 : 2;
  const std::size_t offset = version == 1 ? 10 : 12;
  const std::size_t header_len = padded_len(offset);
  if (version == 1 && header_len > 0xffff)
    fail(op, name, "header of " + std::to_string(header_len) + " bytes does not fit format version 1.0");

  std::vector<unsigned char> out(offset + header_len, ' ');
  std::memcpy(out.data(), kMagic, 6);
  out[6] = static_cast<unsigned char>(version);
  out[7] = 0;
  store_le(out.data() + 8, header_len, offset - 8);
  std::memcpy(out.data() + offset, dict.data(), dict.size());
  out[offset + header_len - 1] = '\n';
  return out;
}

std::vector<unsigned char> encode(const NpyArray& array, int version, const char* op, const std::string& name) {
  std::vector<unsigned char> out = encode_header(array.dtype, array.shape, version, array.bytes.size(), op, name);
  const std::size_t header_bytes = out.size();
  // Sized once and filled in place (GCC 12 warns falsely on insert-after-reserve).
  out.resize(header_bytes + array.bytes.size());
  if (!array.bytes.empty()) std::memcpy(out.data() + header_bytes, array.bytes.data(), array.bytes.size());
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------

const char* npy_dtype_name(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::float16:
      return "float16";
    case NpyDtype::float32:
      return "float32";
    case NpyDtype::float64:
      return "float64";
    case NpyDtype::int32:
      return "int32";
    case NpyDtype::int64:
      return "int64";
    case NpyDtype::uint8:
      return "uint8";
    case NpyDtype::boolean:
      return "bool";
  }
  return "unknown";
}

const char* npy_dtype_descr(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::float16:
      return "<f2";
    case NpyDtype::float32:
      return "<f4";
    case NpyDtype::float64:
      return "<f8";
    case NpyDtype::int32:
      return "<i4";
    case NpyDtype::int64:
      return "<i8";
    case NpyDtype::uint8:
      return "|u1";
    case NpyDtype::boolean:
      return "|b1";
  }
  return "?";
}

std::size_t npy_dtype_size(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::float16:
      return 2;
    case NpyDtype::float32:
      return 4;
    case NpyDtype::float64:
      return 8;
    case NpyDtype::int32:
      return 4;
    case NpyDtype::int64:
      return 8;
    case NpyDtype::uint8:
      return 1;
    case NpyDtype::boolean:
      return 1;
  }
  return 1;
}

std::string npy_shape_string(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::size_t NpyArray::size() const {
  std::size_t count = 0;
  if (!checked_count(shape, count)) throw Error("NpyArray: shape " + npy_shape_string(shape) + " overflows");
  return count;
}

template <class T>
std::vector<T> NpyArray::values() const {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "NpyArray::values: T is float or double");
  const std::size_t count = size();
  const std::size_t item = npy_dtype_size(dtype);
  if (count > std::numeric_limits<std::size_t>::max() / item || bytes.size() != count * item)
    throw Error("NpyArray: data size does not match the shape (got " + std::to_string(bytes.size()) + " bytes for " +
                npy_dtype_name(dtype) + " " + npy_shape_string(shape) + ")");
  std::vector<T> out(count);
  const unsigned char* p = bytes.data();
  for (std::size_t i = 0; i < count; ++i, p += item) out[i] = decode_as<T>(dtype, p);
  return out;
}

template <class T>
NpyMatrix<T> NpyArray::to_matrix() const {
  if (shape.size() != 2) throw Error("NpyArray: expected a 2-D array (got shape " + npy_shape_string(shape) + ")");
  NpyMatrix<T> m;
  m.rows = shape[0];
  m.cols = shape[1];
  m.data = values<T>();
  return m;
}

template <class T>
NpyArray NpyArray::from_data(const T* data, std::vector<std::size_t> shape) {
  NpyArray a;
  a.dtype = dtype_of<T>();
  std::size_t count = 0;
  if (!checked_count(shape, count) || count > std::numeric_limits<std::size_t>::max() / sizeof(T))
    throw Error("NpyArray: shape " + npy_shape_string(shape) + " overflows");
  if (data == nullptr && count != 0) throw Error("NpyArray: null data for shape " + npy_shape_string(shape));
  a.shape = std::move(shape);
  a.bytes.resize(count * sizeof(T));
  for (std::size_t i = 0; i < count; ++i) encode_element(data[i], a.bytes.data() + i * sizeof(T));
  return a;
}

template <class T>
NpyArray NpyArray::from_matrix(MatrixView<const T> matrix) {
  NpyArray a;
  a.dtype = dtype_of<T>();
  a.shape = {matrix.rows, matrix.cols};
  std::size_t count = 0;
  if (!checked_count(a.shape, count) || count > std::numeric_limits<std::size_t>::max() / sizeof(T))
    throw Error("NpyArray: shape " + npy_shape_string(a.shape) + " overflows");
  if (matrix.data == nullptr && count != 0) throw Error("NpyArray: null data for shape " + npy_shape_string(a.shape));
  a.bytes.resize(count * sizeof(T));
  unsigned char* out = a.bytes.data();
  for (std::size_t i = 0; i < matrix.rows; ++i) {
    const T* row = matrix.row(i);
    for (std::size_t j = 0; j < matrix.cols; ++j, out += sizeof(T)) encode_element(row[j], out);
  }
  return a;
}

template std::vector<float> NpyArray::values<float>() const;
template std::vector<double> NpyArray::values<double>() const;
template NpyMatrix<float> NpyArray::to_matrix<float>() const;
template NpyMatrix<double> NpyArray::to_matrix<double>() const;
template NpyArray NpyArray::from_data<float>(const float*, std::vector<std::size_t>);
template NpyArray NpyArray::from_data<double>(const double*, std::vector<std::size_t>);
template NpyArray NpyArray::from_data<std::int32_t>(const std::int32_t*, std::vector<std::size_t>);
template NpyArray NpyArray::from_data<std::int64_t>(const std::int64_t*, std::vector<std::size_t>);
template NpyArray NpyArray::from_data<std::uint8_t>(const std::uint8_t*, std::vector<std::size_t>);
template NpyArray NpyArray::from_matrix<float>(MatrixView<const float>);
template NpyArray NpyArray::from_matrix<double>(MatrixView<const double>);

// ---------------------------------------------------------------------------

NpyArray read_npy_bytes(const void* data, std::size_t size, const std::string& name) {
  if (data == nullptr && size != 0)
    fail("read_npy", name, "null buffer of " + std::to_string(size) + " bytes", ErrorCode::bad_argument);
  const auto* bytes = static_cast<const unsigned char*>(data);
  const Prefix prefix = parse_prefix(bytes, size, name);
  const Layout layout = parse_layout(prefix, reinterpret_cast<const char*>(bytes + prefix.header_offset), name);
  check_data_size(layout, size, name);
  NpyArray a;
  a.dtype = layout.dtype;
  a.shape = layout.shape;
  a.bytes.assign(bytes + layout.data_offset, bytes + layout.data_offset + layout.data_bytes);
  return a;
}

NpyArray read_npy(const std::string& path) {
  detail::InputFile f("read_npy", path, "a .npy file");
  const std::size_t total = f.size();

  unsigned char head[12] = {};
  f.read_exact(head, total < 12 ? total : 12, "prefix");
  const Prefix prefix = parse_prefix(head, total, path);
  // The prefix already consumed up to 12 bytes; the header starts at 10 or 12.
  if (std::fseek(f.get(), static_cast<long>(prefix.header_offset), SEEK_SET) != 0)
    fail("read_npy", path, "seek failed (" + strerror_string(errno) + ")", ErrorCode::io);
  std::vector<unsigned char> header(prefix.header_len);  // <= file size, checked by parse_prefix
  f.read_exact(header.data(), header.size(), "header");
  const Layout layout = parse_layout(prefix, reinterpret_cast<const char*>(header.data()), path);
  check_data_size(layout, total, path);

  NpyArray a;
  a.dtype = layout.dtype;
  a.shape = layout.shape;
  a.bytes.resize(layout.data_bytes);  // == bytes left in the file, checked by parse_layout
  f.read_exact(a.bytes.data(), a.bytes.size(), "data");
  return a;
}

std::vector<unsigned char> encode_npy(const NpyArray& array, int version) {
  return encode(array, version, "encode_npy", "<memory>");
}

std::vector<unsigned char> encode_npy_header(NpyDtype dtype, const std::vector<std::size_t>& shape, int version) {
  std::size_t count = 0;
  const std::size_t item = npy_dtype_size(dtype);
  const bool fits = checked_count(shape, count) && count <= std::numeric_limits<std::size_t>::max() / item;
  // An overflowing shape is reported by encode_header (the byte count given here is then irrelevant).
  return encode_header(dtype, shape, version, fits ? count * item : 0, "encode_npy_header", "<memory>");
}

void write_npy(const std::string& path, const NpyArray& array) {
  const std::vector<unsigned char> bytes = encode(array, 0, "write_npy", path);
  detail::write_file_bytes("write_npy", path, bytes.data(), bytes.size());
}

void write_npy(const std::string& path, const float* data, const std::vector<std::size_t>& shape) {
  write_npy(path, NpyArray::from_data(data, shape));
}

void write_npy(const std::string& path, const double* data, const std::vector<std::size_t>& shape) {
  write_npy(path, NpyArray::from_data(data, shape));
}

void write_npy(const std::string& path, MatrixView<const float> matrix) {
  write_npy(path, NpyArray::from_matrix(matrix));
}

void write_npy(const std::string& path, MatrixView<const double> matrix) {
  write_npy(path, NpyArray::from_matrix(matrix));
}

}  // namespace entgraph
