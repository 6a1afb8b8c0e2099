// entgraph: attention computed only on the edges of a (predicted) attention
// graph, with a per-query certificate of exactness.
//
// One head, as in attention.hpp: Q is n x d, K is m x d, V is m x dv. For
// query i the candidate keys are the keys of graph row i that the masks allow
// (causal: j <= i + (m - n); key_padding: flag j non-zero). Only their scores
// s_j = scale q_i . k_j are computed; the transform runs on that gathered row
// and out_i = sum_j p_j v_j. Edges the masks forbid are ignored. A query with
// no candidate keys gets a zero output row.
//
// Certificates (sparse consistency of alpha-entmax; Peters et al. 2019,
// Treviso et al. 2022 "Sparsefinder"). With tau the threshold of the
// restricted row, p_j = [(alpha - 1) s_j - tau]_+^(1 / (alpha - 1)), a key
// left out of the row would get zero weight in the dense row iff
// (alpha - 1) s_left <= tau, and then the restricted row is the dense row.
// Every left-out score is bounded by U_i, the smaller of two cheap bounds:
// - scale ||q_i|| max ||k_j|| over the allowed keys left out of row i (key
//   norms are computed once; when the left-out key of largest norm is not
//   among the 32 largest norms, the maximum over all allowed keys is used,
//   still valid but then too loose to certify anything);
// - the bound of scale q_i . k on the coordinate-wise box of each block of 16
//   keys that holds a left-out key (boxes computed once; O(m / 16 * d) per
//   query, where dense scores cost O(m * d)).
// Query i is certified
// (report->certified[i] = 1) iff
// - its row holds every allowed key (any transform; also a query with no
//   allowed key at all), or
// - sparsemax / entmax15 / entmax with alpha > 1: (alpha - 1) U_i <= tau - margin,
// - topk_softmax(k): at least k candidates and the k-th largest candidate
//   score >= U_i + margin (every left-out key then ranks below the kept ones).
// Softmax (and entmax with alpha = 1) is certified only in the first case.
// The margin (a small multiple of the rounding error of the scores and of tau,
// plus 1e-6 |tau|) makes a certified row exact up to the rounding of the
// arithmetic: a certified row never differs from dense attention by more.
//
// recompute_uncertified: queries that cannot be certified are recomputed over
// all their allowed keys (the dense row), so the output always equals dense
// attention; they are counted in recomputed_rows and keep certified[i] = 0.
//
// Transforms: softmax, sparsemax, entmax15, entmax, topk_softmax. adaptive_span
// and the constrained transforms (which need per-key arrays in the gathered
// order) are rejected with an entgraph::Error.
//
// Errors (entgraph::Error naming the argument, thrown before anything is
// written): everything attention_forward rejects, out not n x dv, a graph whose
// queries != n or keys != m, a graph that fails Graph::validate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/matrix_view.hpp"

namespace entgraph {

struct GraphAttentionReport {
  std::vector<std::uint8_t> certified;  // per query: 1 if provably equal to dense attention
  std::size_t certified_rows = 0;       // number of certified queries
  std::size_t recomputed_rows = 0;      // queries recomputed densely (recompute_uncertified)
};

template <class T>
struct GraphAttentionOptions {
  AttentionOptions<T> attention;        // transform, scale, causal, key_padding (block_rows, span, upper unused)
  bool recompute_uncertified = false;   // true: uncertified queries are recomputed densely => always exact
  // false: skip the bounds (O(m/16 * d) per query); only rows holding every
  // allowed key are certified. The fast mode when exactness is not needed.
  bool certify = true;
};

// O = pi(scores restricted to the graph's edges) V. out is n x dv. report, if
// not null, is overwritten (certified has n entries).
template <class T>
void graph_attention_forward(ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, const Graph& graph,
                             MatrixView<T> out, const GraphAttentionOptions<T>& options,
                             GraphAttentionReport* report = nullptr);

}  // namespace entgraph
