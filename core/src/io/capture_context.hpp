// entgraph internal: naming the capture, layer and head in every error raised
// while working on one head of a capture (gold graphs, fitting, prediction,
// evaluation), in the library and the CLI alike:
//
//   graphs[i] = detail::in_head(capture, layer, head, [&] { return gold_graph(...); });
//
// rethrows an entgraph::Error "<what>" as "capture <source>, layer L, head H: <what>"
// ("layer L, head H: <what>" for a capture with no source, one built in memory).
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "entgraph/error.hpp"
#include "entgraph/io/capture.hpp"

namespace entgraph::detail {

// "capture caps/x, layer 1, head 0" (no "capture ..., " without a source).
inline std::string head_context(const Capture& c, std::size_t layer, std::size_t head) {
  std::string s = c.source.empty() ? std::string() : "capture " + c.source + ", ";
  return s + "layer " + std::to_string(layer) + ", head " + std::to_string(head);
}

// f(), with an entgraph::Error it throws restated as "<head_context>: <what>",
// unless its message starts with that context already (work on a head nested
// in work on the same head).
template <class F>
decltype(auto) in_head(const Capture& c, std::size_t layer, std::size_t head, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const Error& e) {
    const std::string context = head_context(c, layer, head);
    const std::string what = e.what();
    if (what.compare(0, context.size(), context) == 0) throw;
    throw Error(context + ": " + what);
  }
}

}  // namespace entgraph::detail
