// entgraph wasm: the boundary between embind and the core.
//
// Errors cross it through a slot instead of a thrown exception: a JavaScript
// exception unwinding through wasm frames would skip C++ destructors (and
// with emscripten's JS exceptions a C++ exception reaches JavaScript only as
// a pointer). Every bound function is wrapped by `guarded`, which catches
// std::exception, stores what() and returns a default value; entgraph.js
// takes the message after each call and throws an Error with it.
//
// Arrays cross as copies: typed arrays in, new typed arrays out, so no
// JavaScript object ever aliases the wasm heap (which moves when it grows).
#pragma once

#include <emscripten/val.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/matrix_view.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph::js {

using emscripten::val;

// code: the failure's kind, as error_code_name (entgraph/error.hpp) names it,
// or "out_of_memory" or "internal".
void set_error(Message message, std::string code);
// The last failed call's {message, code, parts: [{role, text}]}, then clears
// it (null if none); parts as entgraph::Message has them.
val take_error();

// What a failed call returns (val has no default constructor).
template <class R>
R failed_result() {
  if constexpr (std::is_same_v<R, val>)
    return val::undefined();
  else
    return R{};
}

template <auto F>
struct Guard;
template <class R, class... A, R (*F)(A...)>
struct Guard<F> {
  static R call(A... args) {
    try {
      return F(std::forward<A>(args)...);
    } catch (const Error& e) {
      set_error(e.message(), error_code_name(e.code()));
    } catch (const std::bad_alloc& e) {
      set_error(e.what(), "out_of_memory");
    } catch (const std::exception& e) {
      set_error(e.what(), "internal");
    } catch (...) {
      set_error("entgraph: unknown C++ exception", "internal");
    }
    if constexpr (!std::is_void_v<R>) return failed_result<R>();
  }
};
// guarded<&f> is a function with f's signature that never throws.
template <auto F>
inline constexpr auto guarded = &Guard<F>::call;

// A typed array (or array of numbers) of exactly `expected` values; the
// message names the argument otherwise.
std::vector<float> to_floats(const val& array, std::size_t expected, const char* name);
std::vector<std::uint8_t> to_bytes(const val& array, const char* name);
// Copies into a new Float32Array / Float64Array / Uint8Array.
val float_array(const float* data, std::size_t size);
val double_array(const double* data, std::size_t size);
// A matrix's rows, contiguous, as a Float32Array of rows * cols values.
val matrix_array(MatrixView<const float> matrix);
val byte_array(const std::uint8_t* data, std::size_t size);
val uint32_array(const std::uint32_t* data, std::size_t size);

// object[field] as a size (to_size), named "<name>.<field>" in messages.
std::size_t size_field(const val& object, const std::string& name, const char* field);
// An array of whole numbers that fit 32 bits (key indices, key blocks),
// named `name` in messages; `what` says what one is ("a key index").
std::vector<std::uint32_t> to_uint32s(const val& array, const std::string& name, const char* what);

// One of the transforms that need nothing but scores, by the package's name
// ("topk" for topk_softmax), with its parameter: alpha, or k (to_size).
Transform transform_named(const std::string& name, double alpha, double k);

// A graph as the plain object {queries, keys, offsets, indices} and back;
// graph_from_js validates it (sorted rows, indices < keys).
val graph_to_js(const Graph& graph);
Graph graph_from_js(const val& object, const char* name);
// GraphMetrics as {gold, predicted, hits, allowed, queries, sparsity,
// goldSparsity, recall, precision}: the counts and the core's ratios.
val metrics_to_js(const GraphMetrics& metrics);

// A JSON text from a JavaScript value, for structured arguments.
std::string json_of(const val& value);
// A number as JavaScript prints it (the shortest text that reads back: 0.1, 1e+30).
std::string js_number_text(double value);

// An unsigned integer from a JavaScript number: finite, whole, in range.
std::size_t to_size(double value, const char* name);
// The length of an array argument; the message names it when it is not one.
std::size_t length_of(const val& array, const char* name);
// a * b, or an error naming the array if it overflows.
std::size_t checked_product(std::size_t a, std::size_t b, const char* name);

}  // namespace entgraph::js
