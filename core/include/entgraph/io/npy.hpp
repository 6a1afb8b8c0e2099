// entgraph: reading and writing NumPy .npy files.
//
// The .npy format (numpy/lib/format.py, "NEP 1"): the magic "\x93NUMPY", a
// major and a minor version byte, a little-endian header length (2 bytes in
// version 1.0, 4 bytes in 2.0 and 3.0), then the header, a Python dict literal
//   {'descr': '<f4', 'fortran_order': False, 'shape': (6, 12), }
// padded with spaces and ended by '\n' (latin-1 in 1.0 and 2.0, UTF-8 in 3.0),
// then the raw elements in C (row-major) order.
//
// What is supported
// - Versions 1.0, 2.0 and 3.0.
// - Little-endian (or byte-sized) numeric dtypes: '<f2' float16, '<f4' float32,
//   '<f8' float64, '<i4' int32, '<i8' int64, '|u1' uint8, '|b1' bool.
// - Any number of dimensions up to kNpyMaxDims, including 0-D (a scalar) and
//   shapes with a zero entry (no elements).
//
// What is rejected, always with entgraph::Error whose message names the
// operation and the file and says what is wrong, e.g.
//   "read_npy: data.npy: truncated data (got 40 bytes, expected 96)":
// a wrong magic string, an unknown version, a header longer than the file, a
// header that is not a dict or misses / repeats / adds keys, big-endian,
// object, structured or unknown dtypes, 'fortran_order': True, negative shape
// entries, shapes whose element or byte count overflows std::size_t, shapes
// NumPy cannot hold (a dimension or byte count above 2^63 - 1, its signed
// npy_intp, even with no elements, e.g. (0, 2^64 - 1)), and data shorter or
// longer than the shape says. The reader checks every length
// against the size of the file or buffer before it allocates, so a hostile
// header can neither make it read out of bounds nor allocate more than the
// input holds.
//
// Arrays are stored as bytes, little-endian, exactly as in the file; the
// conversions below decode them on any host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "entgraph/matrix_view.hpp"

namespace entgraph {

// The element types a .npy file may hold here.
enum class NpyDtype { float16, float32, float64, int32, int64, uint8, boolean };

// Largest number of dimensions accepted (NumPy 2 allows 64).
inline constexpr std::size_t kNpyMaxDims = 64;

// "float16", "float32", "float64", "int32", "int64", "uint8", "bool".
const char* npy_dtype_name(NpyDtype dtype);
// The descr string written in headers: "<f2", "<f4", "<f8", "<i4", "<i8", "|u1", "|b1".
const char* npy_dtype_descr(NpyDtype dtype);
// Bytes per element: 2, 4, 8, 4, 8, 1, 1.
std::size_t npy_dtype_size(NpyDtype dtype);
// A shape as NumPy prints it: "()", "(5,)", "(6, 12)".
std::string npy_shape_string(const std::vector<std::size_t>& shape);

// A row-major rows x cols matrix that owns its elements (what NpyArray
// converts to; view() is what the transforms take).
template <class T>
struct NpyMatrix {
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<T> data;  // rows * cols elements

  MatrixView<T> view() { return {data.data(), rows, cols}; }
  MatrixView<const T> view() const { return {data.data(), rows, cols}; }
};

// An n-dimensional array as read from, or to be written to, a .npy file.
struct NpyArray {
  std::vector<std::size_t> shape;  // empty for a 0-D array (one element)
  NpyDtype dtype = NpyDtype::float32;
  std::vector<unsigned char> bytes;  // size() * npy_dtype_size(dtype) bytes, little-endian, C order

  std::size_t ndim() const { return shape.size(); }
  // Number of elements: the product of shape (1 for 0-D). Throws
  // entgraph::Error if that product overflows.
  std::size_t size() const;

  // Every element converted to T (T is float or double), in C order. float16
  // is widened exactly; int64 to float may round; bool gives 0 or 1. Throws
  // entgraph::Error if bytes does not hold size() elements.
  template <class T>
  std::vector<T> values() const;

  // The array as a rows x cols matrix of T, converted as values() does.
  // Throws entgraph::Error unless ndim() == 2, naming the shape it got.
  template <class T>
  NpyMatrix<T> to_matrix() const;

  // An array of the given shape holding a copy of data (size = product of
  // shape elements, C order). T is float, double, std::int32_t, std::int64_t
  // or std::uint8_t (written as uint8, not bool). data may be null only if
  // the shape has no elements.
  template <class T>
  static NpyArray from_data(const T* data, std::vector<std::size_t> shape);
  // An array holding a copy of a (possibly strided) matrix, shape (rows, cols).
  template <class T>
  static NpyArray from_matrix(MatrixView<const T> matrix);
};

// Reads a .npy file. Throws entgraph::Error ("read_npy: <path>: ...") if the
// file cannot be opened or read, is a directory or another non-regular file
// (a FIFO, a socket, a device), or is malformed (see above).
NpyArray read_npy(const std::string& path);

// Parses a .npy file held in memory (size bytes at data; data may be null if
// size is 0). name is used only in error messages ("read_npy: <name>: ...").
// Never reads outside [data, data + size).
NpyArray read_npy_bytes(const void* data, std::size_t size, const std::string& name = "<memory>");

// Serialises an array: magic, version, header padded so that the data starts
// at a multiple of 64 bytes, then the data. version is 1, 2 or 3 (the major
// version of the format), or 0 for the smallest that fits (1 unless the header
// exceeds 65535 bytes). Throws entgraph::Error if bytes.size() does not match
// the shape, if a dimension or the byte count exceeds 2^63 - 1 (NumPy's sizes
// are signed 64-bit: it cannot read such a file, even an empty one like
// shape (0, 2^64 - 1)), or if version is 1 and the header does not fit, or is
// not 0-3.
std::vector<unsigned char> encode_npy(const NpyArray& array, int version = 0);

// What encode_npy puts before the data of an array of that dtype and shape
// (magic, version, padded header), for writers that put the data into the
// file themselves, piece by piece (e.g. CaptureWriter). Throws
// entgraph::Error as encode_npy does for the shape and version.
std::vector<unsigned char> encode_npy_header(NpyDtype dtype, const std::vector<std::size_t>& shape, int version = 0);

// Writes an array to path (created or truncated). The whole file is encoded
// before the file is opened, so an invalid array leaves an existing file
// untouched. Throws entgraph::Error ("write_npy: <path>: ...") if the array
// is invalid or the file cannot be written.
void write_npy(const std::string& path, const NpyArray& array);
// Writes float32 / float64 data of the given shape (C order).
void write_npy(const std::string& path, const float* data, const std::vector<std::size_t>& shape);
void write_npy(const std::string& path, const double* data, const std::vector<std::size_t>& shape);
// Writes a (possibly strided) matrix as a 2-D array.
void write_npy(const std::string& path, MatrixView<const float> matrix);
void write_npy(const std::string& path, MatrixView<const double> matrix);

}  // namespace entgraph
