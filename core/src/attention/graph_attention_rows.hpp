// entgraph internal: the state of graph attention's tiles (graph_attention.cpp)
// and of the query row being settled: the arguments every tile shares, a
// row's keys, scores and weights, a tile's scratch, and the transform run on
// a row. Included only by graph_attention.cpp (its anonymous namespace: one
// translation unit instantiates these templates).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "entgraph/graph.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/score_bounds.hpp"
#include "entgraph/transforms.hpp"
#include "kernels/matmul_kernels.hpp"
#include "kernels/reference/transforms_reference.hpp"
#include "kernels/transform_kernels.hpp"
#include "transforms/row_kernel.hpp"

namespace entgraph {
namespace {

// Whether sorted keys (a graph row) are one run of consecutive keys, as a
// window's row is; an empty row is not.
inline bool one_run(const std::uint32_t* keys, std::size_t count) {
  return count > 0 && keys[count - 1] - keys[0] + 1 == count;
}

// alpha of the threshold rule p_j = 0 iff (alpha - 1) s_j <= tau; 0 for top-k.
double threshold_alpha(const Transform& t) { return is_entmax_family(t.info()) ? t.tsallis_alpha() : 0.0; }

template <class T>
struct Shared {
  std::size_t n = 0, m = 0, d = 0, dv = 0;
  double scale = 0.0;
  ConstMatrix<T> q, k, v;
  const Graph* graph = nullptr;
  const AttentionOptions<T>* o = nullptr;
  GraphAttentionMode mode = GraphAttentionMode::fast;
  std::vector<std::size_t> prefix_count;  // number of non-padding keys in [0, j)
  std::unique_ptr<ScoreBounds<T>> bounds;  // certify / exact
  bool bound_missed = false;               // certify with an alpha-entmax: bound each unproven row's missed mass
  bool guessing = false;                   // exact mode with a threshold: rows start from a guess (or their graph)
  double key_norm = 0.0;                   // and then max_j ||k_j||, for the scores' rounding

  bool kept(std::size_t j) const { return o->key_padding == nullptr || o->key_padding[j] != 0; }
  std::size_t limit(std::size_t i) const { return o->causal ? causal_key_limit(i, n, m) : m; }
  std::size_t allowed(std::size_t i) const { return prefix_count[limit(i)]; }
};

// A left-out key whose bound (minus the row's offset) clears its row's
// threshold.
template <class T>
struct Pending {
  T bound;
  std::uint32_t key;
};

// One query row of a tile: its keys (graph candidates first, then repaired
// keys), their scores and weights, and how it was settled.
template <class T>
struct Row {
  std::vector<std::uint32_t> keys;
  std::vector<T> scores, probs;
  std::size_t candidates = 0;  // keys from the graph scored first (none for a guessed row; exact mode may drop some)
  const std::uint32_t* graph = nullptr;  // the graph's keys of the row, sorted
  std::size_t graph_keys = 0;            // and their number
  std::size_t repaired = 0;              // keys scored beyond the graph's
  const T* qt = nullptr;       // the query's side of the bounds (ScoreBounds::prepare_query)
  typename ScoreBounds<T>::QuerySlack slack;  // and its share of every key's slack, once
  bool slack_known = false;                   // tighten wants it (rarely: it quantizes qt)
  double offset = 0.0;         // and its offset,
  double lower_offset = 0.0;   // lowered (ScoreBounds::lower_offset)
  double threshold = 0.0;      // bound minus offset above which a left-out key must be scored
  std::size_t budget = 0;      // pending keys that trigger tightening during the scan
  // Left-out keys whose bound clears the threshold, not yet scored.
  std::vector<Pending<T>> pending;
  std::vector<T> scratch;  // the row kernel's
  bool scan = false;       // whether the bounds are still to be checked
  bool guess = false;      // exact mode starts from a guessed threshold (settle_from_guess); its
                           // graph's keys are then bounded like any other, not scored first
  RowSettlement settled = RowSettlement::unsettled;
  double missed = 0.0;  // certify: the bound on the row's missed mass (NaN: none known)
};

// The transform's row kernel and its parameters (transforms/row_kernel.hpp):
// fast, certified and exact rows of graph attention get the same bits.
template <class T>
auto row_kernel(const Transform& t, detail::RowParams& params) {
  return detail::row_kernel<T>(t, params, "graph_attention_forward");
}

template <class T>
void transform_row(const Shared<T>& c, Row<T>& r) {
  const std::size_t cnt = r.scores.size();
  r.probs.resize(cnt);
  if (cnt == 0) return;
  detail::RowParams params;
  const auto kernel = row_kernel<T>(c.o->transform, params);
  r.scratch.resize(detail::scratch_floats(cnt));
  kernel(r.scores.data(), r.probs.data(), cnt, params, r.scratch.data());
}

// Scores of query i on keys[from, end) of the row.
template <class T>
void score_keys(const Shared<T>& c, std::size_t i, Row<T>& r, std::size_t from) {
  r.scores.resize(r.keys.size());
  detail::matmul_kernels_for<T>().gather_dot(c.q.row(i), c.k.data, c.k.stride, r.keys.data() + from,
                                             r.keys.size() - from, c.d, static_cast<T>(c.scale),
                                             r.scores.data() + from);
}

// Per thread: the tile's candidate lists, key union and scores.
template <class T>
struct TileScratch {
  std::vector<std::uint32_t> cand;       // the tile's candidate keys, row after row
  std::vector<std::size_t> start;        // rows + 1 offsets into cand
  std::vector<std::uint32_t> keys;       // the union of the tile's candidates, sorted
  std::vector<std::size_t> stamp;        // per key: 1 + the last tile that holds it
  std::vector<std::uint32_t> pos;        // per key of the union: its index in keys
  std::vector<T> ku, qt, scores;         // K of the union (|union| x d), Q^T of the tile (d x rows), S^T
  std::vector<T> block, probs, vu, out;  // fast path: scores and P (rows x |union|), V of the union, P V
  std::vector<T> row_scratch;            // the row kernel's
  std::vector<T> qb, bounds, group_max;  // bounds: the rows' query sides (rows x width), a slab of bounds
  std::vector<std::uint32_t> hits;       // keys of a block whose bound clears a row's threshold
  std::vector<std::size_t> scan_rows;    // the rows whose bounds are scanned
  std::vector<Row<T>> rows;
  Row<T> probe;  // tighten's scratch row
  std::vector<Pending<T>> rest;  // settle_from_guess's keys that wait
  std::vector<std::pair<std::uint32_t, T>> dropped;  // and its graph keys that wait
  std::size_t graph_held = 0, graph_failed = 0;      // the tile's rows whose graph's threshold held or not
  std::vector<std::uint32_t> graph_mark;             // GraphKeys' table: per key, the id of the last row
  std::uint32_t graph_mark_id = 0;                   // whose graph holds it
};

}  // namespace
}  // namespace entgraph
