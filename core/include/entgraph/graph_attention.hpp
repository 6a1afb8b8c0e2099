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
// Three modes (GraphAttentionOptions::mode):
// - fast: attention on the graph's edges only. A row is known exact only when
//   it holds every allowed key (settled_by = graph); other rows are reported
//   unsettled and may differ from dense attention.
// - certify: the same output, plus a proof per row that nothing left out of
//   it has weight (settled_by = graph) or not (unsettled), and for the rows
//   it cannot prove, a bound on the weight they miss (missed_mass below).
//   Costs the bounds, and a transform per unproven row.
// - exact: bound and repair. Every row equals dense attention, to the
//   rounding of the arithmetic.
//
// Bound and repair (Peters et al. 2019 for the threshold; the bounds are
// ScoreBounds, score_bounds.hpp). For alpha-entmax (sparsemax is alpha = 2),
// p_j = [(alpha - 1) s_j - tau]_+^(1 / (alpha - 1)), so p_j = 0 iff
// (alpha - 1) s_j <= tau; tau of a subset of a row's keys never exceeds tau of
// the whole row. So a key whose score upper bound is at or below a threshold
// that some subset of the row's keys proves has weight exactly 0 in the
// dense row. For each query, exact mode guesses the threshold (the
// transform's threshold over the largest bound of each 64-key group: a
// subset of the row's bounds, so a little under the row's), scores every
// key whose bound clears the guess, and keeps the guess when the threshold
// those keys prove reaches it; otherwise the keys between the proven
// threshold and the guess join too, and the enlarged row proves its own
// (its tau can only be larger). A wrong guess costs time, never exactness.
// top-k softmax: the k-th largest score plays tau's part (a left-out key
// below it ranks after k kept ones), and the graph row's threshold is the
// guess. A row is settled by
// - graph:    no key outside the graph row has weight (the prediction alone
//             was enough; certify mode: proven without scoring),
// - repaired: keys with weight were added, not all of them,
// - dense:    every allowed key ended up scored.
// Softmax (and entmax with alpha = 1) has no threshold: every allowed key has
// weight > 0, so exact and certify modes throw for it.
//
// Cost of exact mode per query: the graph row's scores, r + 2 multiply-adds
// per allowed key for the bounds (one GEMM per slab of a tile's queries over
// all their keys; bfloat16 where ScoreBounds::uses_bf16()), the scores of the
// keys above the guess and one or two transforms on short rows. See
// docs/EXACT.md.
//
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/matrix_view.hpp"
#include "entgraph/score_bounds.hpp"

namespace entgraph {

// How a query row was settled (see the modes above).
enum class RowSettlement : std::uint8_t {
  unsettled = 0,  // fast / certify: not proven equal to dense attention
  graph = 1,      // proven by the graph row alone
  repaired = 2,   // proven after adding the keys the bounds could not exclude
  dense = 3,      // every allowed key scored
};

struct GraphAttentionReport {
  std::vector<RowSettlement> settled;  // per query
  std::size_t graph_rows = 0;          // rows settled by the graph alone
  std::size_t repaired_rows = 0;
  std::size_t dense_rows = 0;
  std::size_t graph_pairs = 0;   // allowed (query, key) pairs of the graph that were scored
  std::size_t repair_pairs = 0;  // pairs added by repair and dense rows (scored beyond the graph)
  std::size_t bound_pairs = 0;   // allowed pairs of the rows whose bounds were checked (certify, exact)
  // The kernel that computed the bounds (ScoreBounds::kernel()); automatic
  // when none ran (fast mode).
  BoundKernel bound_kernel = BoundKernel::automatic;

  // Per query: an upper bound on the row's missed mass, the weight that dense
  // attention gives to the allowed keys the row left out; 0 for rows proven
  // equal to dense attention, NaN where no bound is known. Fast mode knows it
  // only for rows holding every allowed key; certify bounds every row of
  // alpha-entmax and sparsemax (top-k: only the rows it proves; softmax is
  // refused); exact mode's rows are all 0. The bound is on exact attention:
  // the scores' rounding is allowed for (docs/EXACT.md, "Fast mode's error").
  std::vector<double> missed_mass;
  std::size_t bounded_rows = 0;  // rows whose missed_mass is known
  double max_missed_mass = 0.0;  // largest and mean over those rows (NaN when none)
  double mean_missed_mass = 0.0;
  // An upper bound on |out - dense attention's out| over every entry, in exact
  // arithmetic (the outputs' own rounding comes on top): the largest
  // missed_mass times the widest range of a column of v (max |v| if a row
  // with no graph key misses weight); NaN unless every row has a bound.
  double output_error_bound = 0.0;

  // Rows provably equal to dense attention.
  std::size_t exact_rows() const { return graph_rows + repaired_rows + dense_rows; }
};

enum class GraphAttentionMode { fast, certify, exact };

template <class T>
struct GraphAttentionOptions {
  AttentionOptions<T> attention;  // transform, scale, causal, key_padding (block_rows, span, upper unused)
  GraphAttentionMode mode = GraphAttentionMode::fast;
  // Rank r of the score bounds (ScoreBounds; clamped to d). Larger r: tighter
  // bounds, fewer repaired keys, r + 2 multiply-adds per bounded pair. The
  // default chooses per head: 8 or 16 when the keys are that close to
  // low-rank, else d (kAutoBoundRank, score_bounds.hpp).
  std::size_t bound_rank = kAutoBoundRank;
};

// Whether exact and certify modes can use the transform: it must have a
// threshold (every kind graph attention takes but softmax and entmax with
// alpha = 1).
bool has_threshold(const Transform& t);

// O = pi(scores restricted to the graph's edges, plus repaired keys in exact
// mode) V. out is n x dv. report, if not null, is overwritten (settled has n
// entries).
template <class T>
void graph_attention_forward(ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, const Graph& graph,
                             MatrixView<T> out, const GraphAttentionOptions<T>& options,
                             GraphAttentionReport* report = nullptr);

// The same on `device` (entgraph/device.hpp), float32, checked in the core
// as above. Devices other than cpu run fast mode and, where the device has
// a kernel for it (cuda: docs/CUDA.md "Exact mode on the GPU"), exact mode,
// whose report they fill as the CPU does; certify runs on cpu only, and so
// does a report in fast mode (an error on other devices).
void graph_attention_forward(Device device, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                             const Graph& graph, MatrixView<float> out, const GraphAttentionOptions<float>& options,
                             GraphAttentionReport* report = nullptr);
// The same with q, k, v, out and options.attention.key_padding in `memory`
// (device.hpp; the graph is host memory, CSR arrays the device copies).
// Memory::device: nothing but the graph is copied; the core checks shapes,
// parameters and the graph, the device's kernel scans q, k and v (the CPU's
// messages). Device::cpu takes host memory either way.
void graph_attention_forward(Device device, Memory memory, ConstMatrix<float> q, ConstMatrix<float> k,
                             ConstMatrix<float> v, const Graph& graph, MatrixView<float> out,
                             const GraphAttentionOptions<float>& options, GraphAttentionReport* report = nullptr);

// The backward of graph_attention_forward with the same arguments: given
// dL/dO (n x dv), writes dL/dQ (n x d), dL/dK (m x d), dL/dV (m x dv) of the
// forward's output (in exact mode: of dense attention). Each row is
// recomputed as the forward computes it, and only its support (p > 0) is
// touched. Key-side sums are reduced in a fixed order: the result does not
// depend on the thread count. Transform parameters get no gradient here
// (use attention_backward for dL/dalpha). Throws what the forward throws, and
// for grad_out, grad_q, grad_k, grad_v of the wrong shape or non-finite grad_out.
template <class T>
void graph_attention_backward(ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, const Graph& graph,
                              ConstMatrix<T> grad_out, MatrixView<T> grad_q, MatrixView<T> grad_k, MatrixView<T> grad_v,
                              const GraphAttentionOptions<T>& options, GraphAttentionReport* report = nullptr);

}  // namespace entgraph
