// entgraph: what one attention head is, apart from its queries and keys: how
// it turns scores into weights (HeadSettings), and the causal mask as a count
// of visible keys (causal_key_limit). Captures store one HeadSettings per
// head; gold graphs, dense and graph attention, and predictors read them.
#pragma once

#include <cstddef>

namespace entgraph {

// How the attention of one head turns scores into weights.
struct HeadSettings {
  double alpha = 1.5;   // α of the entmax transform (1 = softmax, 1.5 = entmax15, 2 = sparsemax), in [1, 1000]
  bool causal = false;  // query i of a sequence sees keys 0..i of that sequence only
  double scale = 0.0;   // scores = scale * q.k; finite and > 0 in a valid capture (Capture::make sets 1/sqrt(head_dim))
};

// The causal mask as a count: query i of n sees keys [0, limit) of m, with
// limit = i + 1 + (m - n) clamped to [0, m] (queries are the last n positions
// of the m keys, as in decoding with a cache; n = m: keys 0..i). Shared by
// dense and graph attention, graphs and predictors.
constexpr std::size_t causal_key_limit(std::size_t i, std::size_t n, std::size_t m) {
  return i + 1 + m <= n ? 0 : (i + 1 + m - n < m ? i + 1 + m - n : m);
}

}  // namespace entgraph
