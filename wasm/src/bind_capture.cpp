// entgraph wasm: captures (docs/FORMATS.md) from and to the files of a
// capture folder, handed over as bytes.
#include <emscripten/bind.h>

#include <memory>
#include <string>

#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/io/capture.hpp"
#include "js_interop.hpp"
#include "memfs_folder.hpp"

namespace entgraph::js {
namespace {

std::unique_ptr<Capture> capture_from_files(const val& files) {
  const MemfsFolder folder;
  folder.write(files, "files");
  try {
    return std::make_unique<Capture>(read_capture(folder.path()));
  } catch (const Error& e) {
    throw Error(e.message().replaced(folder.path(), "files"), e.code());
  } catch (const std::exception& e) {  // std::filesystem's: the in-memory folder refused
    throw Error(Message(e.what()).replaced(folder.path(), "files"), ErrorCode::io);
  }
}

val capture_to_files(const Capture& c, const std::string& dtype) {
  NpyDtype type;
  if (dtype == "float32")
    type = NpyDtype::float32;
  else if (dtype == "float16")
    type = NpyDtype::float16;
  else
    throw Error("dtype: expected float32 or float16 (got '" + dtype + "')");
  const MemfsFolder folder;
  try {
    write_capture(folder.path(), c, type);
  } catch (const Error& e) {
    throw Error(e.message().replaced(folder.path(), "capture"), e.code());
  } catch (const std::exception& e) {  // std::filesystem's: the in-memory folder refused
    throw Error(Message(e.what()).replaced(folder.path(), "capture"), ErrorCode::io);
  }
  return folder.read();
}

double capture_layers(const Capture& c) { return static_cast<double>(c.layers); }
double capture_heads(const Capture& c) { return static_cast<double>(c.heads); }
double capture_head_dim(const Capture& c) { return static_cast<double>(c.head_dim); }

val capture_lengths(const Capture& c) {
  val lengths = val::array();
  for (std::size_t n : c.lengths) lengths.call<void>("push", static_cast<double>(n));
  return lengths;
}

val capture_texts(const Capture& c) {
  val texts = val::array();
  for (const std::string& t : c.texts) texts.call<void>("push", t);
  return texts;
}

val capture_head(const Capture& c, double l, double h) {
  const HeadSettings& s = c.head(to_size(l, "layer"), to_size(h, "head"));
  val head = val::object();
  head.set("alpha", s.alpha);
  head.set("causal", s.causal);
  head.set("scale", s.scale);
  return head;
}

val capture_queries(const Capture& c, double l, double h, double s) {
  return matrix_array(c.queries_of(to_size(l, "layer"), to_size(h, "head"), to_size(s, "sequence")));
}
val capture_keys(const Capture& c, double l, double h, double s) {
  return matrix_array(c.keys_of(to_size(l, "layer"), to_size(h, "head"), to_size(s, "sequence")));
}
val capture_values(const Capture& c, double l, double h, double s) {
  return matrix_array(c.values_of(to_size(l, "layer"), to_size(h, "head"), to_size(s, "sequence")));
}
val capture_gold_graph(const Capture& c, double l, double h, double s) {
  return graph_to_js(gold_graph(c, to_size(l, "layer"), to_size(h, "head"), to_size(s, "sequence")));
}

}  // namespace

EMSCRIPTEN_BINDINGS(entgraph_capture) {
  emscripten::class_<Capture>("Capture")
      .class_function("fromFiles", guarded<&capture_from_files>)
      .function("toFiles", guarded<&capture_to_files>)
      .function("layers", guarded<&capture_layers>)
      .function("heads", guarded<&capture_heads>)
      .function("headDim", guarded<&capture_head_dim>)
      .function("lengths", guarded<&capture_lengths>)
      .function("texts", guarded<&capture_texts>)
      .function("head", guarded<&capture_head>)
      .function("queries", guarded<&capture_queries>)
      .function("keys", guarded<&capture_keys>)
      .function("values", guarded<&capture_values>)
      .function("goldGraph", guarded<&capture_gold_graph>);
}

}  // namespace entgraph::js
