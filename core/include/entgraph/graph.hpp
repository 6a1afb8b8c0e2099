// entgraph: attention graphs — which (query, key) pairs of one head get a
// non-zero weight — and how well a predicted graph matches the gold one.
//
// A Graph is CSR over the n queries of one sequence and head: row i lists the
// keys of query i, sorted ascending, without repeats, each < m. The gold
// graph is the support of the head's transform, computed from Q and K in
// blocks of query rows so that memory stays O(block * m + |G|).
//
// Sparsity and recall follow the Sparsefinder paper: with the allowed pairs A
// (every pair, or j <= i under the causal mask: n(n+1)/2 for n = m),
//   sparsity(G)  = 1 - |G ∩ A| / |A|,
//   recall(Ĝ, G) = |Ĝ ∩ G| / |G|          (1 when G is empty),
//   precision    = |Ĝ ∩ G| / |Ĝ ∩ A|      (1 when Ĝ ∩ A is empty).
// Pairs outside A never count: a predictor may propose future keys under a
// causal mask, and they are ignored, as the attention ignores them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "entgraph/device.hpp"
#include "entgraph/heads.hpp"
#include "entgraph/matrix_view.hpp"

namespace entgraph {

struct Graph {
  std::size_t queries = 0;            // n
  std::size_t keys = 0;               // m
  std::vector<std::size_t> offsets;   // n + 1 entries, offsets[0] = 0
  std::vector<std::uint32_t> indices; // offsets[n] key indices, sorted within each row

  std::size_t edges() const { return indices.size(); }
  std::size_t degree(std::size_t query) const { return offsets[query + 1] - offsets[query]; }
  const std::uint32_t* row_begin(std::size_t query) const { return indices.data() + offsets[query]; }
  const std::uint32_t* row_end(std::size_t query) const { return indices.data() + offsets[query + 1]; }
  // Whether (query, key) is an edge (binary search of the row).
  bool contains(std::size_t query, std::size_t key) const;

  // An empty graph (no edges) of n queries and m keys.
  static Graph empty(std::size_t n, std::size_t m);
  // Every pair allowed by the mask: all n*m pairs, or j <= i + (m - n) if causal.
  static Graph full(std::size_t n, std::size_t m, bool causal);
  // The non-zero entries of a dense n x m mask (any non-zero byte is an edge).
  static Graph from_mask(MaskView mask);
  // Queries and keys that share a bucket: query i is linked to every key j
  // with a bucket in common. query_buckets is n x rq, key_buckets m x rk
  // (each row lists the buckets of one point; repeats are fine). Costs, per
  // query, the smaller of its buckets' key lists (merged) and rq bitmaps of
  // m bits (OR-ed, where all buckets' bitmaps fit in 64 MiB), plus its edges;
  // never an n x m mask.
  static Graph from_buckets(MatrixView<const std::uint32_t> query_buckets, MatrixView<const std::uint32_t> key_buckets,
                            std::size_t num_buckets);
  // Rows given as (query, key) pairs in any order, repeats allowed.
  static Graph from_pairs(std::size_t n, std::size_t m, std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs);

  // Throws entgraph::Error unless the CSR invariants hold (sizes, sorted,
  // unique, in range); what names the caller's argument.
  void validate(const char* what = "graph") const;
};

// The union of two graphs of the same shape.
Graph graph_union(const Graph& a, const Graph& b);
// The patterns every predictor can add to its own (extra_window and
// extra_global in predictors/predictor.hpp): query i is linked to the keys
// i-w..i+w (i-w..i under causal; none if w < 0) and to the first g keys, and
// a query i < g to every key. Built row by row, sorted, in O(edges).
Graph window_global_graph(std::size_t n, std::size_t m, long window, std::size_t global, bool causal);
// |a ∩ b|, optionally restricted to the causal triangle j <= i + (m - n).
std::size_t intersection_count(const Graph& a, const Graph& b, bool causal = false);
// |g ∩ A|: edges of g that the mask allows.
std::size_t allowed_edge_count(const Graph& g, bool causal);
// |A|: pairs the mask allows, n*m or the causal count.
std::size_t allowed_pair_count(std::size_t n, std::size_t m, bool causal);

// The gold graph of one head of one sequence: the support of
// entmax_alpha(scale q k^T) under the causal mask if set (alpha = 1 gives
// every allowed pair whose softmax weight is representable, i.e. > 0 in float).
Graph gold_graph(MatrixView<const float> q, MatrixView<const float> k, const HeadSettings& settings);
// (The same for a head and sequence of a capture: entgraph/io/capture.hpp.)

// How a predicted graph compares with the gold one, summed over sequences
// (add them with +=) before the ratios are taken.
struct GraphMetrics {
  std::size_t gold = 0;       // |G| (within A)
  std::size_t predicted = 0;  // |Ĝ ∩ A|
  std::size_t hits = 0;       // |Ĝ ∩ G|
  std::size_t allowed = 0;    // |A|
  std::size_t queries = 0;

  double sparsity() const;      // of the prediction: 1 - predicted / allowed
  double gold_sparsity() const; // 1 - gold / allowed
  double recall() const;        // hits / gold
  double precision() const;     // hits / predicted
  GraphMetrics& operator+=(const GraphMetrics& o);
};

GraphMetrics compare_graphs(const Graph& predicted, const Graph& gold, bool causal);
// The same on `device` (entgraph/device.hpp); both graphs are validated first.
GraphMetrics compare_graphs(Device device, const Graph& predicted, const Graph& gold, bool causal);

}  // namespace entgraph
