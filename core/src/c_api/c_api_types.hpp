// entgraph internal: the C API's handles shared between its files, and the
// conversions from its C structs to the C++ API's types. Each conversion
// checks what C can get wrong and C++ cannot (NULL pointers, enum values out
// of range, a stride below cols) and leaves the rest to the C++ calls, which
// check everything else once.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "c_api/c_api_errors.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/batched_attention.hpp"
#include "entgraph/device.hpp"
#include "entgraph/entgraph.h"
#include "entgraph/graph.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/matrix_view.hpp"
#include "entgraph/transforms.hpp"

struct eg_graph {
  entgraph::Graph graph;
};

struct eg_capture {
  entgraph::Capture capture;
};

namespace entgraph::c_api {

// *out = a new handle holding value. The caller has checked out; if the
// allocation throws, *out is left as it was.
template <class Handle, class Value>
void emit(Handle** out, Value&& value) {
  *out = new Handle{std::forward<Value>(value)};
}

// The int a C caller stored in an enum. C allows any int there; in C++ a
// value outside the enum's range is undefined (UBSan flags loading it as
// the enum), so the bytes are read as an int and compared with the
// enumerators.
template <class Enum>
int enum_value(const Enum& e) noexcept {
  static_assert(sizeof(Enum) == sizeof(int), "the C API's enums are int-sized");
  int value;
  std::memcpy(&value, &e, sizeof value);
  return value;
}

// An Error naming a C enum argument that holds none of its values.
[[noreturn]] void throw_bad_enum(const char* function, const char* name, int value, const char* expected);

// Enum arguments are taken by reference, so that an out-of-range value is
// never loaded as the enum (see enum_value).
Device to_device(const char* function, const eg_device& device);

// Throws what the C++ API throws for an op that has no kernel on `device`
// ("device cuda is not available (...)" or "... has no kernel for this op;
// run it on cpu"), for the calls that run on the CPU only. Returns for cpu.
void require_cpu(const char* function, const eg_device& device);

// A C matrix (eg_matrix, eg_const_matrix, eg_mask) as a view; stride 0 is
// cols. Every entry point that takes a matrix comes through here, so this is
// the one check that the rows' addresses fit in the address space: the last
// row's end, data + ((rows - 1) * stride + cols) elements, must not wrap past
// the top of memory (a wrapped row address would read unrelated memory).
template <class T, class CMatrix>
MatrixView<T> to_view(const char* function, const char* name, const CMatrix& m) {
  require(function, m.data, name);
  const std::size_t stride = m.stride == 0 ? m.cols : m.stride;
  if (stride < m.cols)
    throw Error(at_op(function) + cpp_name(std::string(name) + ".stride") + " is below its cols (got " +
                std::to_string(m.stride) + ", expected 0 or at least " + std::to_string(m.cols) + ")");
  if (m.rows > 0 && m.cols > 0) {
    const std::uintptr_t room = (UINTPTR_MAX - reinterpret_cast<std::uintptr_t>(m.data)) / sizeof(T);
    if (m.cols > room || (m.rows - 1) > (room - m.cols) / stride)
      throw Error(at_op(function) + cpp_name(name) + ": rows x stride reach past the end of the address "
                  "space (rows " + std::to_string(m.rows) + ", stride " + std::to_string(stride) +
                  ", cols " + std::to_string(m.cols) + "); the row addresses would wrap");
  }
  return {m.data, m.rows, m.cols, stride};
}
inline MatrixView<const float> to_view(const char* function, const char* name, const eg_const_matrix& m) {
  return to_view<const float>(function, name, m);
}
inline MatrixView<float> to_view(const char* function, const char* name, const eg_matrix& m) {
  return to_view<float>(function, name, m);
}

inline eg_const_matrix to_c(MatrixView<const float> v) { return {v.data, v.rows, v.cols, v.stride}; }

// name: the argument in messages ("transform", "options->transform").
Transform to_transform(const char* function, const eg_transform* transform, const char* name = "transform");
// Throws only for a value outside TransformKind.
eg_transform to_c(const Transform& transform);
// options NULL: the defaults of eg_attention_options_default().
AttentionOptions<float> to_attention_options(const char* function, const eg_attention_options* options);
// The same for graph attention (eg_graph_attention_options_default()).
GraphAttentionOptions<float> to_graph_attention_options(const char* function,
                                                        const eg_graph_attention_options* options);
// The same for batched attention (eg_batched_attention_options_default()).
BatchedAttentionOptions to_batched_options(const char* function, const eg_batched_attention_options* options);

inline const Graph& graph_of(const char* function, const eg_graph* graph, const char* name) {
  require(function, graph, name);
  return graph->graph;
}

}  // namespace entgraph::c_api
