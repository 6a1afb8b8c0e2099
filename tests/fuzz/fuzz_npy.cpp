// Fuzz target: .npy files (entgraph::read_npy_bytes, core/include/entgraph/io/npy.hpp).
//
// Invariants for an input that parses as array a:
// - a's bytes hold exactly size() elements of its dtype, and values<double>()
//   converts every one of them;
// - encode_npy(a) (and the same at format versions 2 and 3) reads back to
//   the same shape, dtype and bytes;
// - encoding is a fixed point: encode(read(encode(a))) == encode(a).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "entgraph/io/npy.hpp"
#include "fuzz_check.hpp"

namespace {

bool same(const entgraph::NpyArray& a, const entgraph::NpyArray& b) {
  return a.shape == b.shape && a.dtype == b.dtype && a.bytes == b.bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  entgraph::NpyArray a;
  try {
    a = entgraph::read_npy_bytes(data, size, "fuzz.npy");
  } catch (const std::exception& e) {
    FUZZ_REJECTED(e);
    return 0;  // rejected: fine, as long as nothing crashed
  }
  const std::size_t n = FUZZ_MUST("size() of a parsed array", a.size());
  FUZZ_CHECK(a.ndim() <= entgraph::kNpyMaxDims);
  FUZZ_CHECK(a.bytes.size() == n * entgraph::npy_dtype_size(a.dtype));
  FUZZ_CHECK(a.bytes.size() <= size);
  FUZZ_CHECK(FUZZ_MUST("values<double>() of a parsed array", a.values<double>()).size() == n);

  const std::vector<unsigned char> encoded = FUZZ_MUST("encode_npy of a parsed array", entgraph::encode_npy(a));
  const entgraph::NpyArray b =
      FUZZ_MUST("re-reading encode_npy's output", entgraph::read_npy_bytes(encoded.data(), encoded.size()));
  FUZZ_CHECK(same(a, b));
  FUZZ_CHECK(FUZZ_MUST("encode_npy of the re-read array", entgraph::encode_npy(b)) == encoded);
  for (int version : {2, 3}) {
    const std::vector<unsigned char> v = FUZZ_MUST("encode_npy at version 2 / 3", entgraph::encode_npy(a, version));
    FUZZ_CHECK(same(a, FUZZ_MUST("re-reading version 2 / 3", entgraph::read_npy_bytes(v.data(), v.size()))));
  }
  return 0;
}
