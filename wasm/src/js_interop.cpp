#include "js_interop.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "entgraph/error.hpp"

namespace entgraph::js {
namespace {
// The last failure's message (in parts) and code (error_code_name, "out_of_memory" or "internal").
struct ErrorSlot {
  Message message;
  std::string code;
};
ErrorSlot& error_slot() {
  static ErrorSlot slot;
  return slot;
}
}  // namespace

std::size_t length_of(const val& array, const char* name) {
  if (array.isUndefined() || array.isNull()) throw Error(std::string(name) + ": missing (expected an array)");
  const val length = array["length"];
  if (!length.isNumber()) throw Error(std::string(name) + ": not an array (it has no length)");
  return to_size(length.as<double>(), name);
}

void set_error(Message message, std::string code) { error_slot() = {std::move(message), std::move(code)}; }

val take_error() {
  ErrorSlot slot;
  std::swap(slot, error_slot());
  if (slot.message.parts().empty()) return val::null();
  val error = val::object();
  error.set("message", slot.message.text());
  error.set("code", slot.code);
  // The parts, for entgraph.js to word the message for JavaScript without reading it.
  val parts = val::array();
  for (const MessagePart& part : slot.message.parts()) {
    val item = val::object();
    item.set("role", std::string(message_role_name(part.role)));
    item.set("text", part.text);
    parts.call<void>("push", item);
  }
  error.set("parts", parts);
  return error;
}

std::vector<float> to_floats(const val& array, std::size_t expected, const char* name) {
  const std::size_t n = length_of(array, name);
  if (n != expected)
    throw Error(std::string(name) + ": expected " + std::to_string(expected) + " values, got " + std::to_string(n));
  return emscripten::convertJSArrayToNumberVector<float>(array);
}

std::vector<std::uint8_t> to_bytes(const val& array, const char* name) {
  length_of(array, name);
  return emscripten::convertJSArrayToNumberVector<std::uint8_t>(array);
}

namespace {
// A JavaScript copy of wasm memory: a view of the heap, sliced. (V8 copies a
// typed array into `new Float32Array(view)` element by element, 15 times
// slower than slice(), which is a memcpy: 0.4 against 0.03 ms for one head's
// 256 x 256 weights.)
template <typename T>
val copied_array(const T* data, std::size_t size) {
  return val(emscripten::typed_memory_view(size, data)).call<val>("slice");
}
}  // namespace

val float_array(const float* data, std::size_t size) { return copied_array(data, size); }

val double_array(const double* data, std::size_t size) { return copied_array(data, size); }

val matrix_array(MatrixView<const float> matrix) {
  if (matrix.stride == matrix.cols) return float_array(matrix.data, matrix.rows * matrix.cols);
  std::vector<float> rows(matrix.rows * matrix.cols);
  for (std::size_t i = 0; i < matrix.rows; ++i)
    std::copy(matrix.row(i), matrix.row(i) + matrix.cols, rows.begin() + static_cast<std::ptrdiff_t>(i * matrix.cols));
  return float_array(rows.data(), rows.size());
}

val byte_array(const std::uint8_t* data, std::size_t size) { return copied_array(data, size); }

val uint32_array(const std::uint32_t* data, std::size_t size) { return copied_array(data, size); }

std::size_t size_field(const val& object, const std::string& name, const char* field) {
  const val value = object[field];
  return to_size(value.isNumber() ? value.as<double>() : -1.0, (name + "." + field).c_str());
}

std::vector<std::uint32_t> to_uint32s(const val& array, const std::string& name, const char* what) {
  length_of(array, name.c_str());
  const std::vector<double> numbers = emscripten::convertJSArrayToNumberVector<double>(array);
  std::vector<std::uint32_t> out;
  out.reserve(numbers.size());
  for (double x : numbers) {
    if (!(x >= 0 && x < 4294967296.0) || x != std::floor(x))
      throw Error(name + ": not " + what + " (got " + js_number_text(x) + ")");
    out.push_back(static_cast<std::uint32_t>(x));
  }
  return out;
}

// The transforms that need nothing but scores (the others take spans or
// upper bounds, which this package does not expose).
Transform transform_named(const std::string& name, double alpha, double k) {
  const TransformInfo& row = transform_info(parse_transform_kind(name));
  if (row.extra_inputs())
    throw Error(at_op("transform") + name + " needs extra inputs and is not in the JavaScript package");
  return Transform::of(row.kind, alpha, row.parameter == TransformParameter::k ? to_size(k, "k") : 0);
}

val graph_to_js(const Graph& g) {
  std::vector<std::uint32_t> offsets(g.offsets.begin(), g.offsets.end());
  val object = val::object();
  object.set("queries", static_cast<double>(g.queries));
  object.set("keys", static_cast<double>(g.keys));
  object.set("offsets", copied_array(offsets.data(), offsets.size()));
  object.set("indices", copied_array(g.indices.data(), g.indices.size()));
  return object;
}

val metrics_to_js(const GraphMetrics& r) {
  val m = val::object();
  m.set("gold", static_cast<double>(r.gold));
  m.set("predicted", static_cast<double>(r.predicted));
  m.set("hits", static_cast<double>(r.hits));
  m.set("allowed", static_cast<double>(r.allowed));
  m.set("queries", static_cast<double>(r.queries));
  m.set("sparsity", r.sparsity());
  m.set("goldSparsity", r.gold_sparsity());
  m.set("recall", r.recall());
  m.set("precision", r.precision());
  return m;
}

Graph graph_from_js(const val& object, const char* name) {
  if (object.isNull() || object.isUndefined() || object.typeOf().as<std::string>() != "object")
    throw Error(std::string(name) + ": not a graph (expected {queries, keys, offsets, indices})");
  const std::string field = name;
  Graph g;
  g.queries = size_field(object, field, "queries");
  g.keys = size_field(object, field, "keys");
  const std::string offsets_name = field + ".offsets";
  const std::size_t n_offsets = length_of(object["offsets"], offsets_name.c_str());
  if (n_offsets != g.queries + 1)
    throw Error(offsets_name + ": expected " + std::to_string(g.queries + 1) + " values, got " + std::to_string(n_offsets));
  const std::vector<double> offsets = emscripten::convertJSArrayToNumberVector<double>(object["offsets"]);
  g.offsets.reserve(offsets.size());
  for (double o : offsets) g.offsets.push_back(to_size(o, offsets_name.c_str()));
  g.indices = to_uint32s(object["indices"], field + ".indices", "a key index");
  g.validate(name);
  return g;
}

std::string js_number_text(double value) { return val(value).call<std::string>("toString"); }

std::string json_of(const val& value) { return val::global("JSON").call<std::string>("stringify", value); }

std::size_t to_size(double value, const char* name) {
  if (!std::isfinite(value) || value < 0 || value != std::floor(value) || value > static_cast<double>(std::numeric_limits<std::size_t>::max()))
    throw Error(std::string(name) + ": expected a whole number >= 0 (got " + js_number_text(value) + ")");
  return static_cast<std::size_t>(value);
}

std::size_t checked_product(std::size_t a, std::size_t b, const char* name) {
  if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b) throw Error(std::string(name) + ": sizes overflow");
  return a * b;
}

}  // namespace entgraph::js
