// entgraph: the gold graph of a captured head (io/capture.hpp): graphs know
// nothing of captures, a capture hands its head's rows to gold_graph.
#include "entgraph/graph.hpp"
#include "entgraph/io/capture.hpp"

namespace entgraph {

Graph gold_graph(const Capture& capture, std::size_t layer, std::size_t head, std::size_t sequence) {
  return in_head(capture, layer, head, [&] {
    return gold_graph(capture.queries_of(layer, head, sequence), capture.keys_of(layer, head, sequence),
                      capture.head(layer, head));
  });
}

}  // namespace entgraph
