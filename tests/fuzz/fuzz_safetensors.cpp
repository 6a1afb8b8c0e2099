// Fuzz target: safetensors files (entgraph::read_safetensors_bytes,
// core/include/entgraph/io/safetensors.hpp).
//
// Invariants for an input that parses as file f:
// - every tensor's bytes hold exactly size() elements of its dtype, and
//   to_float() converts every one of them; the tensors fit in the input;
// - encode_safetensors(f) reads back to the same tensors (names, dtypes,
//   shapes, bytes, in the same order) and the same metadata;
// - encoding is a fixed point: encode(read(encode(f))) == encode(f).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "entgraph/io/safetensors.hpp"
#include "fuzz_check.hpp"

namespace {

bool same(const entgraph::SafetensorsFile& a, const entgraph::SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const entgraph::SafeTensor& x = a.tensors[i];
    const entgraph::SafeTensor& y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.bytes != y.bytes) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  entgraph::SafetensorsFile f;
  try {
    f = entgraph::read_safetensors_bytes(data, size, "fuzz.safetensors");
  } catch (const std::exception& e) {
    FUZZ_REJECTED(e);
    return 0;  // rejected: fine, as long as nothing crashed
  }
  std::size_t total = 0;
  for (const entgraph::SafeTensor& t : f.tensors) {
    FUZZ_CHECK(t.shape.size() <= entgraph::kSafetensorsMaxDims);
    const std::size_t n = FUZZ_MUST("size() of a parsed tensor", t.size());
    FUZZ_CHECK(t.bytes.size() == n * FUZZ_MUST("dtype of a parsed tensor", entgraph::safetensors_dtype_size(t.dtype)));
    FUZZ_CHECK(FUZZ_MUST("to_float() of a parsed tensor", t.to_float()).size() == n);
    FUZZ_CHECK(f.find(t.name) != nullptr);
    total += t.bytes.size();
  }
  FUZZ_CHECK(total <= size);

  const std::vector<unsigned char> encoded =
      FUZZ_MUST("encode_safetensors of a parsed file", entgraph::encode_safetensors(f));
  const entgraph::SafetensorsFile g = FUZZ_MUST("re-reading encode_safetensors' output",
                                                entgraph::read_safetensors_bytes(encoded.data(), encoded.size()));
  FUZZ_CHECK(same(f, g));
  FUZZ_CHECK(FUZZ_MUST("encode_safetensors of the re-read file", entgraph::encode_safetensors(g)) == encoded);
  return 0;
}
