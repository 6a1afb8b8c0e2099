// entgraph: reading and writing safetensors files.
//
// The safetensors format (Hugging Face, github.com/huggingface/safetensors):
// an 8-byte little-endian unsigned integer N, then N bytes of a UTF-8 JSON
// object (the header, possibly padded at the end with spaces), then the data
// buffer, which holds every tensor's bytes back to back:
//   {"__metadata__": {"format": "pt"},
//    "layers.0.q.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
// data_offsets are [begin, end) in bytes, relative to the start of the data
// buffer; the elements are little-endian, in C (row-major) order.
//
// What is supported
// - The dtypes "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8"
//   and "BOOL" (one byte, 0 or 1).
// - Any number of dimensions up to kSafetensorsMaxDims, including none (a
//   scalar) and shapes with a zero entry (no elements, begin == end).
// - An optional "__metadata__" object mapping strings to strings.
// - Trailing JSON whitespace after the header object (writers pad with
//   spaces so that the data starts at a multiple of 8 bytes).
//
// What is rejected, always with entgraph::Error whose message names the
// operation, the file and the tensor, and says what is wrong, e.g.
//   "read_safetensors: w.safetensors: tensor 'layers.0.q.weight':
//    data_offsets [0, 12] hold 12 bytes but shape [2, 3] of F32 needs 24":
// a file shorter than 8 bytes; a header size N beyond the file or above
// kSafetensorsMaxHeaderSize; a header that does not start with '{', is not
// valid JSON (or not valid UTF-8), or is not an object; an entry that is not
// an object, misses or repeats "dtype", "shape" or "data_offsets", or has any
// other key; unknown dtypes; shape entries that are negative, not integers or
// too many; element or byte counts that overflow std::size_t; data_offsets
// that are not two non-negative integers, are reversed, lie past the end of
// the buffer or do not hold exactly the shape's bytes; tensors that overlap,
// leave a hole between them, or leave bytes unused at the end of the buffer
// (together the tensors must tile the buffer exactly); duplicate tensor names
// or metadata keys (which most JSON readers silently merge); and
// "__metadata__" that is not an object of strings. The reader checks every
// length against the size of the file or buffer before it allocates, so a
// hostile file can neither make it read out of bounds nor allocate more than
// the input holds (the parsed header takes memory proportional to its size,
// which the cap bounds).
//
// Tensors are stored as bytes, little-endian, exactly as in the file; the
// conversion below decodes them on any host.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace entgraph {

// Largest header size N accepted: 100,000,000 bytes, the limit of the
// reference implementation (huggingface/safetensors, MAX_HEADER_SIZE). A file
// claiming more is rejected before anything is allocated for its header.
inline constexpr std::size_t kSafetensorsMaxHeaderSize = 100000000;

// Largest number of dimensions accepted in a shape (as kNpyMaxDims).
inline constexpr std::size_t kSafetensorsMaxDims = 64;

// One named tensor of a safetensors file.
struct SafeTensor {
  std::string name;
  std::string dtype;                 // "F32", "F16", "BF16", ... as in the file
  std::vector<std::size_t> shape;    // empty for a scalar (one element)
  std::vector<unsigned char> bytes;  // size() * safetensors_dtype_size(dtype) bytes, little-endian, C order

  // Number of elements: the product of shape (1 for a scalar). Throws
  // entgraph::Error if that product overflows.
  std::size_t size() const;

  // Every element converted to float, in C order. F16 and BF16 are widened
  // exactly; F64, I64 and I32 round to the nearest float; I16, I8 and U8 are
  // exact; BOOL gives 0 or 1 (any non-zero byte is true). Throws
  // entgraph::Error for an unknown dtype or if bytes does not hold size()
  // elements.
  std::vector<float> to_float() const;
};

// The content of a safetensors file.
struct SafetensorsFile {
  // In the order of their data offsets (empty tensors at the same offset keep
  // the order of the header). Writing lays them out in this order, so a file
  // written here reads back in the same order.
  std::vector<SafeTensor> tensors;
  // The "__metadata__" entries, sorted by key (empty if the file has none).
  std::vector<std::pair<std::string, std::string>> metadata;

  // The tensor with this name, or nullptr if there is none.
  const SafeTensor* find(const std::string& name) const;
  // The tensor with this name. Throws entgraph::Error
  // "safetensors: no tensor named '<name>'" if there is none.
  const SafeTensor& at(const std::string& name) const;
};

// Bytes per element: 8 for F64 and I64, 4 for F32 and I32, 2 for F16, BF16
// and I16, 1 for I8, U8 and BOOL. Throws entgraph::Error for any other string.
std::size_t safetensors_dtype_size(const std::string& dtype);

// Reads a safetensors file. Throws entgraph::Error
// ("read_safetensors: <path>: ...") if the file cannot be opened or read, is
// a directory or another non-regular file (a FIFO, a socket, a device), or is
// malformed (see above). The file is read piece by piece straight into the
// tensors, so it is never held twice in memory.
SafetensorsFile read_safetensors(const std::string& path);

// Parses a safetensors file held in memory (size bytes at data; data may be
// null if size is 0). name is used only in error messages
// ("read_safetensors: <name>: ..."). Never reads outside [data, data + size).
SafetensorsFile read_safetensors_bytes(const void* data, std::size_t size, const std::string& name = "<memory>");

// Serialises a file: the header lists "__metadata__" first (only if there is
// metadata), then the tensors in vector order, laid out back to back in that
// order; it is padded with spaces so that the data starts at a multiple of 8
// bytes. Validates first and throws entgraph::Error
// ("encode_safetensors: <memory>: ...") for an unknown dtype, a shape with
// more than kSafetensorsMaxDims dimensions or whose byte count overflows,
// bytes whose size does not match the shape, a duplicate tensor name, a
// tensor named "__metadata__", a duplicate metadata
// key, a name, key or value that is not valid UTF-8, or a header larger than
// kSafetensorsMaxHeaderSize. Whatever it returns, read_safetensors_bytes
// accepts and gives back unchanged.
std::vector<unsigned char> encode_safetensors(const SafetensorsFile& file);

// Writes a file to path (created or truncated). The whole file is encoded
// before the file is opened, so an invalid SafetensorsFile leaves an existing
// file untouched. Throws entgraph::Error ("write_safetensors: <path>: ...")
// if the content is invalid (as encode_safetensors) or the file cannot be
// written.
void write_safetensors(const std::string& path, const SafetensorsFile& file);

// A float32 ("F32") tensor of the given shape holding a copy of data
// (product of shape elements, C order). data may be null only if the shape
// has no elements. Throws entgraph::Error if the element count overflows.
SafeTensor make_f32_tensor(std::string name, const float* data, std::vector<std::size_t> shape);

}  // namespace entgraph
