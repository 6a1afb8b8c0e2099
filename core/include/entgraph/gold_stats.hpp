// entgraph: statistics of a capture's gold attention graph.
//
// The gold graph of a head is the support of its transform: the pairs
// (query i, key j) of a sequence with entmax_alpha(scale q_i . k_j) > 0, among
// the allowed pairs (j <= i under the causal mask). It is recomputed from Q
// and K, in blocks of query rows so that memory stays O(block * n), and only
// counted here (the graph itself is graph.hpp's business).
#pragma once

#include <cstddef>

#include "entgraph/io/capture.hpp"

namespace entgraph {

struct GoldStats {
  std::size_t edges = 0;    // |G|: pairs with non-zero attention, over all sequences
  std::size_t allowed = 0;  // pairs the mask allows: n(n+1)/2 per causal sequence, n*n otherwise
  std::size_t queries = 0;  // tokens

  // 1 - |G| / allowed.
  double sparsity() const { return allowed == 0 ? 0.0 : 1.0 - static_cast<double>(edges) / static_cast<double>(allowed); }
  // Mean number of keys each query attends to.
  double mean_support() const { return queries == 0 ? 0.0 : static_cast<double>(edges) / static_cast<double>(queries); }
  GoldStats& operator+=(const GoldStats& o) {
    edges += o.edges;
    allowed += o.allowed;
    queries += o.queries;
    return *this;
  }
};

// Gold-graph counts of one head over every sequence of the capture (entmax
// with the head's alpha, scale and causal flag; alpha = 1 is softmax, whose
// graph is every allowed pair). Throws entgraph::Error for an out-of-range
// layer or head.
GoldStats gold_stats(const Capture& capture, std::size_t layer, std::size_t head);

}  // namespace entgraph
