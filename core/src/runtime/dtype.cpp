// Element types of batched tensors (entgraph/batched_attention.hpp): names,
// sizes, and the float32 <-> bfloat16 / float16 conversions (their bit
// manipulation is in runtime/dtype_bits.hpp).
#include <cstdint>
#include <string>

#include "entgraph/batched_attention.hpp"
#include "entgraph/error.hpp"
#include "entgraph/text.hpp"
#include "runtime/dtype_bits.hpp"

namespace entgraph {
namespace {

[[noreturn]] void bad_dtype(const char* op, DType dtype) {
  throw Error(at_op(op) + "dtype is not a DType (got " + std::to_string(static_cast<unsigned>(dtype)) +
              ", expected float32, bfloat16 or float16)");
}

}  // namespace

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return "float32";
    case DType::bfloat16:
      return "bfloat16";
    case DType::float16:
      return "float16";
  }
  bad_dtype("dtype_name", dtype);
}

DType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "f32" || name == "fp32") return DType::float32;
  if (name == "bfloat16" || name == "bf16") return DType::bfloat16;
  if (name == "float16" || name == "f16" || name == "fp16") return DType::float16;
  throw Error("dtype: unknown dtype (got '" + printable(name.data(), name.size()) +
              "', expected float32, bfloat16 or float16, or f32, fp32, bf16, f16, fp16)");
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return 4;
    case DType::bfloat16:
    case DType::float16:
      return 2;
  }
  bad_dtype("dtype_size", dtype);
}

float bfloat16_to_float(std::uint16_t bits) { return detail::widen_bfloat16(bits); }
std::uint16_t float_to_bfloat16(float x) { return detail::round_to_bfloat16(x); }
float float16_to_float(std::uint16_t bits) { return detail::widen_float16(bits); }
std::uint16_t float_to_float16(float x) { return detail::round_to_float16(x); }

}  // namespace entgraph
