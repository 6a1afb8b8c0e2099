// Attention on the edges of a graph, in three modes: fast, certify, and
// exact by bound and repair (see graph_attention.hpp for the semantics).
//
// Queries are processed in tiles of consecutive rows (in the order of their
// first key). Per tile: gather each row's allowed keys and score them (one
// GEMM over the tile's key union when the rows share keys). Fast mode
// transforms each row. Certify and exact mode bound the scores of every
// allowed key of a slab of rows (one GEMM, ScoreBounds, with each 64-key
// group's largest bound); certify checks the graph row's threshold against
// them and bounds the weight an unproven row misses (missed_mass_bound),
// exact mode settles each row from a guessed threshold that it proves
// (settle_from_guess) and transforms the row once its keys are known. Tiles
// run on the thread pool; each writes only its own rows, and no state crosses
// rows, so the result does not depend on the thread count.
//
// This file: the checks, the tiles and the public entry points. The state of
// a tile and of a row: attention/graph_attention_rows.hpp; certify and exact
// mode's bounds, thresholds and repair: attention/graph_attention_bounds.hpp.
#include "entgraph/graph_attention.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/score_bounds.hpp"
#include "entgraph/transforms.hpp"
#include "attention/graph_attention_bounds.hpp"
#include "attention/graph_attention_rows.hpp"
#include "attention/score_range.hpp"
#include "kernels/matmul_kernels.hpp"
#include "kernels/reference/transforms_reference.hpp"
#include "kernels/transform_kernels.hpp"
#include "runtime/backends.hpp"
#include "runtime/parallel.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {
namespace {

constexpr const char* kOp = "graph_attention_forward";

[[noreturn]] void fail(const Message& what, const char* op = kOp) { throw Error(at_op(op) + what); }

using detail::num;

void check_transform(const char* op, const Transform& t) {
  if (!detail::check_plain_transform(t, op, "options.attention.transform"))
    fail(cpp_name("options.attention.transform") + " is not supported on a graph (got " + t.name() + ", expected " +
             transform_names(takes_scores_only, " or ") + ")",
         op);
}

// The scale's name in messages, and the headroom of the score range: 16,
// since certify and exact mode's bounds add up to a few terms of that size
// (q . mu, the projected part, the residual and its rounding margin).
constexpr const char* kScaleName = "options.attention.scale";
constexpr double kScoreHeadroom = 16.0;

// values = false: q, k and v lie in a device's memory, whose kernel scans
// them (check_graph_attention_values).
template <class T>
void validate(const char* op, ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, const Graph& graph,
              const GraphAttentionOptions<T>& options, bool values = true) {
  const AttentionOptions<T>& o = options.attention;
  if (q.rows == 0) fail(cpp_name("q.rows") + " is 0 (got 0 queries, expected n >= 1)", op);
  if (k.rows == 0) fail(cpp_name("k.rows") + " is 0 (got 0 keys, expected m >= 1)", op);
  if (q.cols == 0) fail(cpp_name("q.cols") + " is 0 (got d = 0, expected d >= 1)", op);
  if (k.cols != q.cols)
    fail(cpp_name("k.cols") + " does not match " + cpp_name("q.cols") + " (got " + num(k.cols) + ", expected " + num(q.cols) + ")", op);
  if (v.rows != k.rows)
    fail(cpp_name("v.rows") + " does not match " + cpp_name("k.rows") + " (got " + num(v.rows) + ", expected " + num(k.rows) + ")", op);
  if (v.cols == 0) fail(cpp_name("v.cols") + " is 0 (got dv = 0, expected dv >= 1)", op);
  if (k.rows > std::numeric_limits<std::uint32_t>::max())
    throw Error(at_op(op) + cpp_name("k.rows") + " is too large for a graph (got " + num(k.rows) + ", expected < 2^32)",
                ErrorCode::limit);
  detail::check_view(op, "q", q);
  detail::check_view(op, "k", k);
  detail::check_view(op, "v", v);
  check_attention_scale(o.scale, op, "options.attention.scale");
  check_transform(op, o.transform);
  if (graph.queries != q.rows)
    fail(cpp_name("graph.queries") + " does not match " + cpp_name("q.rows") + " (got " + num(graph.queries) + ", expected " + num(q.rows) + ")", op);
  if (graph.keys != k.rows)
    fail(cpp_name("graph.keys") + " does not match " + cpp_name("k.rows") + " (got " + num(graph.keys) + ", expected " + num(k.rows) + ")", op);
  graph.validate((std::string(op) + ": graph").c_str());
  if (!values) return;
  detail::check_finite<T>(op, "q", q);
  detail::check_finite<T>(op, "k", k);
  detail::check_finite<T>(op, "v", v);
  detail::check_score_range<T>(op, q, k, o.scale, kScaleName, kScoreHeadroom);
  detail::check_value_range<T>(op, v);
}

template <class T>
void validate_mode(const char* op, const GraphAttentionOptions<T>& options) {
  const Transform& t = options.attention.transform;
  if (options.mode != GraphAttentionMode::fast && options.mode != GraphAttentionMode::certify &&
      options.mode != GraphAttentionMode::exact)
    fail(cpp_name("options.mode") + " is not a GraphAttentionMode (got " + num(static_cast<std::size_t>(options.mode)) + ")", op);
  if (options.mode != GraphAttentionMode::fast && !has_threshold(t))
    fail(cpp_name("options.mode") + " is " + (options.mode == GraphAttentionMode::exact ? "exact" : "certify") + " but " +
             cpp_name(t.name()) +
             " has no threshold: every allowed key gets weight > 0, so no left-out key can be proven zero "
             "(use dense attention, or a sparse transform: sparsemax, entmax15, entmax with alpha > 1, " +
             cpp_name("topk_softmax") + ")",
         op);
}

// Queries are processed in tiles of kTile rows. When their key lists overlap
// (windows, buckets of neighbours), the tile's scores are one GEMM over the
// union of its keys, gathered once, instead of one gathered dot product per
// edge; each row then takes its own scores out of the tile.
constexpr std::size_t kTile = 16;

// Transforms for which -inf scores stand exactly for "not a candidate".
bool tile_transform(const Transform& t) { return is_entmax_family(t.info()); }

// Gathers the tile's candidates and their union; computes the union's scores
// by GEMM when the rows share most keys. Returns whether it did.
template <class T>
bool gather_tile(const Shared<T>& c, TileScratch<T>& t, const std::uint32_t* ids, std::size_t rows, std::size_t tile) {
  t.cand.clear();
  t.start.assign(1, 0);
  std::size_t widest = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t lim = c.limit(ids[r]);
    for (const std::uint32_t* p = c.graph->row_begin(ids[r]); p != c.graph->row_end(ids[r]) && *p < lim; ++p)
      if (c.kept(*p)) t.cand.push_back(*p);
    t.start.push_back(t.cand.size());
    widest = std::max(widest, t.start[r + 1] - t.start[r]);
  }
  // Exact mode scores no graph key up front (settle_tile): the union is
  // wanted only for a row the graph completes.
  if (c.guessing) {
    bool any_complete = false;
    for (std::size_t r = 0; r < rows; ++r)
      any_complete = any_complete || t.start[r + 1] - t.start[r] == c.allowed(ids[r]);
    if (!any_complete) return false;
  }
  // The tile GEMM pays for |union| scores per row: worth it when the rows
  // share most of their keys (|union| <= 2 widest). Never for top-k: repaired
  // keys are scored by gather_dot, and a row scored by two kernels can break
  // a tie that dense attention keeps (top-k keeps every key tied with the
  // k-th; one ulp apart, it would not); fast and certify modes score the same
  // way as exact mode.
  if (!(std::is_same_v<T, float> && c.o->transform.kind != TransformKind::topk_softmax && rows > 1 && widest >= 8))
    return false;
  // The union: rows that are each one run of consecutive keys (windows) whose
  // runs overlap or touch give one run; else the candidates are stamped and
  // counted, and gathered (from the range they span when it is short, else
  // sorted) only when they are few enough: a learned graph's tile of 16 rows
  // shares few keys, and sorting its union was 7 % of exact mode.
  t.keys.clear();
  bool runs = !t.cand.empty();
  std::uint32_t run_lo = 0, run_hi = 0;
  for (std::size_t r = 0; r < rows && runs; ++r) {
    const std::size_t a = t.start[r], e = t.start[r + 1];
    if (a == e) continue;
    const std::uint32_t lo = t.cand[a], hi = t.cand[e - 1];
    runs = one_run(t.cand.data() + a, e - a);
    if (a == 0 || run_lo > run_hi) {
      run_lo = lo;
      run_hi = hi;
    } else {
      runs = runs && lo <= run_hi + 1 && hi + 1 >= run_lo;
      run_lo = std::min(run_lo, lo);
      run_hi = std::max(run_hi, hi);
    }
  }
  if (runs) {
    if (run_hi - run_lo + 1 > 2 * widest) return false;
    for (std::uint32_t j = run_lo; j <= run_hi; ++j) t.keys.push_back(j);
  } else if (!t.cand.empty()) {
    if (t.stamp.size() != c.m) t.stamp.assign(c.m, 0);
    std::uint32_t lo = t.cand.front(), hi = t.cand.front();
    std::size_t distinct = 0;
    for (std::uint32_t j : t.cand) {
      lo = std::min(lo, j);
      hi = std::max(hi, j);
      distinct += t.stamp[j] != tile + 1 ? 1 : 0;
      t.stamp[j] = tile + 1;
    }
    if (distinct > 2 * widest) return false;
    if (hi - lo <= 4 * t.cand.size()) {
      for (std::uint32_t j = lo; j <= hi; ++j)
        if (t.stamp[j] == tile + 1) t.keys.push_back(j);
    } else {
      t.keys = t.cand;
      std::sort(t.keys.begin(), t.keys.end());
      t.keys.erase(std::unique(t.keys.begin(), t.keys.end()), t.keys.end());
    }
  }
  if (t.pos.size() != c.m) t.pos.assign(c.m, 0);
  for (std::size_t x = 0; x < t.keys.size(); ++x) t.pos[t.keys[x]] = static_cast<std::uint32_t>(x);
  // S^T (|union| x rows) = K_union Q_tile^T: K's rows are copied whole, only
  // the small Q tile is transposed.
  const std::size_t u = t.keys.size();
  t.ku.resize(u * c.d);
  for (std::size_t x = 0; x < u; ++x) std::copy_n(c.k.row(t.keys[x]), c.d, t.ku.data() + x * c.d);
  t.qt.resize(c.d * rows);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t y = 0; y < c.d; ++y) t.qt[y * rows + r] = c.q(ids[r], y);
  t.scores.resize(u * rows);
  detail::matmul_kernels_for<T>().gemm_nn(u, rows, c.d, static_cast<T>(c.scale), t.ku.data(), c.d, t.qt.data(), rows,
                                          t.scores.data(), rows, false, false);
  return true;
}

// The fast path of a tile: the tile's rows as one block of scores over the
// union, -inf where a key is not a row's candidate, one transform call for
// the block and one GEMM for P V_union.
template <class T>
void whole_tile(const Shared<T>& c, TileScratch<T>& t, const std::uint32_t* ids, std::size_t rows, MatrixView<T> out,
                std::vector<RowSettlement>& settled) {
  const std::size_t u = t.keys.size();
  t.block.assign(rows * u, -std::numeric_limits<T>::infinity());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t x = t.start[r]; x < t.start[r + 1]; ++x) {
      const std::size_t p = t.pos[t.cand[x]];
      t.block[r * u + p] = t.scores[p * rows + r];
    }
  t.probs.resize(rows * u);
  detail::RowParams params;
  const auto kernel = row_kernel<T>(c.o->transform, params);
  t.row_scratch.resize(detail::scratch_floats(u));
  for (std::size_t r = 0; r < rows; ++r)
    kernel(t.block.data() + r * u, t.probs.data() + r * u, u, params, t.row_scratch.data());
  t.vu.resize(u * c.dv);
  for (std::size_t x = 0; x < u; ++x) std::copy_n(c.v.row(t.keys[x]), c.dv, t.vu.data() + x * c.dv);
  t.out.resize(rows * c.dv);
  detail::matmul_kernels_for<T>().gemm_nn(rows, c.dv, u, T(1), t.probs.data(), u, t.vu.data(), c.dv, t.out.data(), c.dv,
                                          false, true);
  for (std::size_t r = 0; r < rows; ++r) {
    std::copy_n(t.out.data() + r * c.dv, c.dv, out.row(ids[r]));
    settled[ids[r]] =
        t.start[r + 1] - t.start[r] == c.allowed(ids[r]) ? RowSettlement::graph : RowSettlement::unsettled;
  }
}


// Runs one tile up to each row's final keys, scores and weights (and its
// settlement). Returns false when the fast path wrote the tile's output itself.
template <class T>
bool settle_tile(const Shared<T>& c, TileScratch<T>& t, const std::uint32_t* ids, std::size_t rows, std::size_t tile,
                 bool fast_output, MatrixView<T> out, std::vector<RowSettlement>& settled) {
  const bool tiled = gather_tile<T>(c, t, ids, rows, tile);
  if (tiled && fast_output && c.mode == GraphAttentionMode::fast && tile_transform(c.o->transform)) {
    whole_tile<T>(c, t, ids, rows, out, settled);
    return false;
  }
  if (t.rows.size() < rows) t.rows.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    Row<T>& row = t.rows[r];
    row.graph = t.cand.data() + t.start[r];
    row.graph_keys = t.start[r + 1] - t.start[r];
    row.repaired = 0;
    const bool complete = row.graph_keys == c.allowed(ids[r]);
    row.settled = complete ? RowSettlement::graph : RowSettlement::unsettled;
    row.missed = std::numeric_limits<double>::quiet_NaN();
    row.scan = !complete && c.mode != GraphAttentionMode::fast;
    // Exact mode settles the row from its bounds (settle_by_bounds), where
    // it decides whether to score the graph's keys first.
    row.guess = row.scan && c.guessing;
    if (row.guess) {
      row.keys.clear();
      row.scores.clear();
      row.candidates = 0;
      continue;  // transformed once its keys are known
    }
    row.keys.assign(row.graph, row.graph + row.graph_keys);
    row.candidates = row.graph_keys;
    if (tiled) {
      row.scores.resize(row.keys.size());
      for (std::size_t x = 0; x < row.keys.size(); ++x) row.scores[x] = t.scores[t.pos[row.keys[x]] * rows + r];
    } else {
      score_keys<T>(c, ids[r], row, 0);
    }
    transform_row<T>(c, row);
  }
  if (c.mode != GraphAttentionMode::fast) settle_by_bounds<T>(c, t, ids, rows);
  return true;
}

// Rows of a causal head whose limits lie in one span of this many keys may
// share a tile in certify and exact mode (tile_order).
constexpr std::size_t kLimitSpan = 64;

template <class T>
std::vector<std::uint32_t> tile_order(const Shared<T>& c) {
  // Tiles take queries in the order of their first key, then their degree
  // (stable): queries of one bucket, whose rows are equal, end up in the same
  // tiles; for windows this is the identity. Certify and exact mode bound
  // every key of a slab up to its longest row's limit, so on a causal head
  // they first keep rows of near limits together: ordered by first key
  // alone, a learned graph whose rows all start at key 0 mixed rows from the
  // whole sequence into each tile and bounded twice the causal triangle.
  std::vector<std::uint32_t> order(c.n);
  for (std::size_t i = 0; i < c.n; ++i) order[i] = static_cast<std::uint32_t>(i);
  const bool by_limit = c.o->causal && c.mode != GraphAttentionMode::fast;
  auto span = [&](std::uint32_t i) { return by_limit ? c.limit(i) / kLimitSpan : std::size_t{0}; };
  auto first_key = [&](std::uint32_t i) {
    return c.graph->degree(i) == 0 ? std::numeric_limits<std::uint32_t>::max() : *c.graph->row_begin(i);
  };
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const std::size_t sa = span(a), sb = span(b);
    if (sa != sb) return sa < sb;
    const std::uint32_t fa = first_key(a), fb = first_key(b);
    return fa != fb ? fa < fb : c.graph->degree(a) < c.graph->degree(b);
  });
  return order;
}

// Runs every tile on the thread pool; per_row(query, row) consumes each
// settled row (unless the fast path wrote the tile's output).
template <class T, class PerRow>
void run_tiles(const Shared<T>& c, bool fast_output, MatrixView<T> out, std::vector<RowSettlement>& settled,
               PerRow per_row) {
  const std::vector<std::uint32_t> order = tile_order(c);
  const std::size_t avg_degree = c.graph->edges() / c.n + 1;
  const std::size_t bound_cost = c.mode == GraphAttentionMode::fast ? 0 : c.m * (c.bounds->width() + 1);
  const std::size_t tiles = (c.n + kTile - 1) / kTile;
  detail::parallel_for(tiles, detail::grain_for(kTile * (avg_degree * (c.d + c.dv) + c.d + bound_cost)),
                       [&](std::size_t b0, std::size_t b1) {
                         TileScratch<T> t;
                         for (std::size_t b = b0; b < b1; ++b) {
                           const std::size_t i0 = b * kTile, rows = std::min(kTile, c.n - i0);
                           const std::uint32_t* ids = order.data() + i0;
                           if (!settle_tile<T>(c, t, ids, rows, b, fast_output, out, settled)) continue;
                           for (std::size_t r = 0; r < rows; ++r) {
                             settled[ids[r]] = t.rows[r].settled;
                             per_row(ids[r], t.rows[r]);
                           }
                         }
                       });
}

template <class T>
Shared<T> make_shared_state(ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, const Graph& graph,
                            const GraphAttentionOptions<T>& options) {
  Shared<T> c;
  c.n = q.rows;
  c.m = k.rows;
  c.d = q.cols;
  c.dv = v.cols;
  c.q = q;
  c.k = k;
  c.v = v;
  c.graph = &graph;
  c.o = &options.attention;
  c.mode = options.mode;
  c.scale = options.attention.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(c.d)) : options.attention.scale;
  c.prefix_count.assign(c.m + 1, 0);
  for (std::size_t j = 0; j < c.m; ++j) c.prefix_count[j + 1] = c.prefix_count[j] + (c.kept(j) ? 1 : 0);
  if (c.mode != GraphAttentionMode::fast)
    c.bounds = std::make_unique<ScoreBounds<T>>(
        k, c.scale, options.bound_rank, options.attention.key_padding,
        c.mode == GraphAttentionMode::certify ? BoundPurpose::report : BoundPurpose::exclusion);
  c.bound_missed = c.mode == GraphAttentionMode::certify && threshold_alpha(options.attention.transform) > 0.0;
  c.guessing = c.mode == GraphAttentionMode::exact && options.attention.transform.kind != TransformKind::topk_softmax;
  for (std::size_t j = 0; j < c.m && c.bound_missed; ++j) {
    double kk = 0.0;
    for (std::size_t x = 0; x < c.d; ++x) kk += static_cast<double>(k(j, x)) * static_cast<double>(k(j, x));
    c.key_norm = std::max(c.key_norm, std::sqrt(kk));
  }
  return c;
}

// Pairs bounded: every allowed key of each row that was scanned.
template <class T>
std::size_t count_bound_pairs(const Shared<T>& c, const std::vector<std::size_t>& graph_keys) {
  if (c.mode == GraphAttentionMode::fast) return 0;
  std::size_t total = 0;
  for (std::size_t i = 0; i < c.n; ++i)
    if (graph_keys[i] < c.allowed(i)) total += c.limit(i);
  return total;
}

// The widest range max_j v_jx - min_j v_jx of a column of v over the kept
// keys, rounded up, and the largest |v_jx|.
template <class T>
std::pair<double, double> value_spread(const Shared<T>& c) {
  std::vector<double> lo(c.dv, std::numeric_limits<double>::infinity()), hi(c.dv, -lo[0]);
  for (std::size_t j = 0; j < c.m; ++j)
    if (c.kept(j))
      for (std::size_t x = 0; x < c.dv; ++x) {
        lo[x] = std::min(lo[x], static_cast<double>(c.v(j, x)));
        hi[x] = std::max(hi[x], static_cast<double>(c.v(j, x)));
      }
  double range = 0.0, largest = 0.0;
  for (std::size_t x = 0; x < c.dv; ++x) {
    if (lo[x] > hi[x]) continue;  // every key padded
    range = std::max(range, std::nextafter(hi[x] - lo[x], std::numeric_limits<double>::infinity()));
    largest = std::max({largest, std::abs(lo[x]), std::abs(hi[x])});
  }
  return {range, largest};
}

// Fills the report from the per-row settlements, the rows' key counts and
// their missed-mass bounds (NaN where none is known; rows proven exact get 0).
//
// The output error: the dense row p and the graph row p^G (a distribution on
// the graph keys) differ by missed mass mu on the left-out keys, and p^G >= p
// on the graph keys (alpha-entmax: the graph row's threshold is the lower),
// so sum |p^G - p| = 2 mu with equal positive and negative parts, and each
// output entry moves by at most mu (max_j v_jx - min_j v_jx). A row with no
// graph key outputs 0: its error is at most max |v|.
template <class T>
void fill_report(const Shared<T>& c, GraphAttentionReport* report, std::vector<RowSettlement>&& settled,
                 const std::vector<std::size_t>& graph_keys, const std::vector<std::size_t>& final_keys,
                 std::vector<double>&& missed) {
  if (report == nullptr) return;
  GraphAttentionReport r;
  double sum = 0.0, worst = 0.0;  // worst: the largest missed mass of a row with graph keys
  bool empty_row_misses = false;
  for (std::size_t i = 0; i < settled.size(); ++i) {
    r.graph_rows += settled[i] == RowSettlement::graph ? 1 : 0;
    r.repaired_rows += settled[i] == RowSettlement::repaired ? 1 : 0;
    r.dense_rows += settled[i] == RowSettlement::dense ? 1 : 0;
    r.graph_pairs += graph_keys[i];
    r.repair_pairs += final_keys[i] - graph_keys[i];
    if (settled[i] != RowSettlement::unsettled) missed[i] = 0.0;
    if (std::isnan(missed[i])) continue;
    ++r.bounded_rows;
    sum += missed[i];
    r.max_missed_mass = std::max(r.max_missed_mass, missed[i]);
    if (graph_keys[i] > 0) {
      worst = std::max(worst, missed[i]);
    } else if (missed[i] > 0.0) {
      empty_row_misses = true;
    }
  }
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  if (r.bounded_rows == 0) {
    r.max_missed_mass = r.mean_missed_mass = kNaN;
  } else {
    r.mean_missed_mass = sum / static_cast<double>(r.bounded_rows);
  }
  if (r.bounded_rows < settled.size()) {
    r.output_error_bound = kNaN;
  } else if (worst > 0.0 || empty_row_misses) {
    const auto [range, largest] = value_spread(c);
    r.output_error_bound = std::max(std::nextafter(worst * range, std::numeric_limits<double>::infinity()),
                                    empty_row_misses ? largest : 0.0);
  }
  r.bound_pairs = count_bound_pairs(c, graph_keys);
  if (c.bounds) r.bound_kernel = c.bounds->kernel();
  r.settled = std::move(settled);
  r.missed_mass = std::move(missed);
  *report = std::move(r);
}

}  // namespace

bool has_threshold(const Transform& t) {
  const TransformInfo* row = find_transform_info(t.kind);  // a corrupt kind is refused by the attention checks
  return row == nullptr || !(is_entmax_family(*row) && t.tsallis_alpha() == 1.0);
}

template <class T>
void graph_attention_forward(ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, const Graph& graph,
                             MatrixView<T> out, const GraphAttentionOptions<T>& options, GraphAttentionReport* report) {
  validate<T>(kOp, q, k, v, graph, options);
  detail::check_shape(kOp, "out", out, q.rows, v.cols);
  validate_mode<T>(kOp, options);
  const Shared<T> c = make_shared_state<T>(q, k, v, graph, options);
  std::vector<RowSettlement> settled(c.n, RowSettlement::unsettled);
  std::vector<std::size_t> graph_keys(c.n, 0), final_keys(c.n, 0);
  std::vector<double> missed(c.n, std::numeric_limits<double>::quiet_NaN());
  run_tiles<T>(c, true, out, settled, [&](std::size_t i, const Row<T>& row) {
    graph_keys[i] = row.graph_keys;
    final_keys[i] = row.graph_keys + row.repaired;
    missed[i] = row.missed;
    detail::matmul_kernels_for<T>().gather_axpy(row.probs.data(), c.v.data, c.v.stride, row.keys.data(),
                                                row.keys.size(), c.dv, out.row(i));
  });
  if (report == nullptr) return;
  // The fast path of a tile records no key counts: take them from the graph
  // (so the output never depends on whether a report is asked for).
  for (std::size_t i = 0; i < c.n; ++i)
    if (final_keys[i] == 0) {
      const std::size_t lim = c.limit(i);
      std::size_t cnt = 0;
      for (const std::uint32_t* p = graph.row_begin(i); p != graph.row_end(i) && *p < lim; ++p) cnt += c.kept(*p);
      graph_keys[i] = final_keys[i] = cnt;
    }
  fill_report(c, report, std::move(settled), graph_keys, final_keys, std::move(missed));
}

template <class T>
void graph_attention_backward(ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, const Graph& graph,
                              ConstMatrix<T> grad_out, MatrixView<T> grad_q, MatrixView<T> grad_k, MatrixView<T> grad_v,
                              const GraphAttentionOptions<T>& options, GraphAttentionReport* report) {
  constexpr const char* op = "graph_attention_backward";
  validate<T>(op, q, k, v, graph, options);
  validate_mode<T>(op, options);
  detail::check_shape(op, "grad_out", grad_out, q.rows, v.cols);
  detail::check_shape(op, "grad_q", grad_q, q.rows, q.cols);
  detail::check_shape(op, "grad_k", grad_k, k.rows, k.cols);
  detail::check_shape(op, "grad_v", grad_v, v.rows, v.cols);
  detail::check_finite<T>(op, "grad_out", grad_out);
  const Shared<T> c = make_shared_state<T>(q, k, v, graph, options);
  // Per row: its support (p > 0), the weights and dL/dscores there.
  struct Support {
    std::vector<std::uint32_t> keys;
    std::vector<T> p, dz;
  };
  std::vector<Support> rows(c.n);
  std::vector<RowSettlement> settled(c.n, RowSettlement::unsettled);
  std::vector<std::size_t> graph_keys(c.n, 0), final_keys(c.n, 0);
  std::vector<double> missed(c.n, std::numeric_limits<double>::quiet_NaN());
  run_tiles<T>(c, false, MatrixView<T>{}, settled, [&](std::size_t i, const Row<T>& row) {
    graph_keys[i] = row.graph_keys;
    final_keys[i] = row.graph_keys + row.repaired;
    missed[i] = row.missed;
    Support& s = rows[i];
    for (std::size_t x = 0; x < row.keys.size(); ++x)
      if (row.probs[x] > T(0)) {
        s.keys.push_back(row.keys[x]);
        s.p.push_back(row.probs[x]);
      }
    const std::size_t cnt = s.keys.size();
    std::vector<T> dp(cnt);
    s.dz.resize(cnt);
    T* gq = grad_q.row(i);
    if (cnt == 0) {
      std::fill(gq, gq + c.d, T(0));
      return;
    }
    // dp_j = g_i . v_j on the support, then the transform's backward there.
    detail::matmul_kernels_for<T>().gather_dot(grad_out.row(i), c.v.data, c.v.stride, s.keys.data(), cnt, c.dv, T(1),
                                               dp.data());
    transform_backward<T>(c.o->transform, ConstMatrix<T>{s.p.data(), 1, cnt}, ConstMatrix<T>{dp.data(), 1, cnt},
                          MatrixView<T>{s.dz.data(), 1, cnt});
    // dQ_i = scale sum_j dz_j k_j, summed in double like the key side: the dz
    // sum to ~0, so keys far from the origin cancel in float.
    std::vector<double> acc(c.d, 0.0);
    for (std::size_t e = 0; e < cnt; ++e) {
      const T* kj = c.k.row(s.keys[e]);
      const double dz = static_cast<double>(s.dz[e]);
      for (std::size_t x = 0; x < c.d; ++x) acc[x] += dz * static_cast<double>(kj[x]);
    }
    for (std::size_t x = 0; x < c.d; ++x) gq[x] = static_cast<T>(c.scale * acc[x]);
  });
  // Key side: the supports transposed (rows in increasing order per key),
  // then per key dK_j = scale sum_i dz_ij q_i and dV_j = sum_i p_ij g_i.
  std::vector<std::size_t> start(c.m + 1, 0);
  for (const Support& s : rows)
    for (std::uint32_t j : s.keys) ++start[j + 1];
  for (std::size_t j = 0; j < c.m; ++j) start[j + 1] += start[j];
  std::vector<std::uint32_t> who(start[c.m]);
  std::vector<T> pw(start[c.m]), dzw(start[c.m]);
  {
    std::vector<std::size_t> fill(start.begin(), start.end() - 1);
    for (std::size_t i = 0; i < c.n; ++i)
      for (std::size_t x = 0; x < rows[i].keys.size(); ++x) {
        const std::size_t at = fill[rows[i].keys[x]]++;
        who[at] = static_cast<std::uint32_t>(i);
        pw[at] = rows[i].p[x];
        dzw[at] = rows[i].dz[x];
      }
  }
  detail::parallel_for(c.m, detail::grain_for((start[c.m] / c.m + 1) * (c.d + c.dv)),
                       [&](std::size_t j0, std::size_t j1) {
                         std::vector<double> gk(c.d), gv(c.dv);
                         for (std::size_t j = j0; j < j1; ++j) {
                           std::fill(gk.begin(), gk.end(), 0.0);
                           std::fill(gv.begin(), gv.end(), 0.0);
                           for (std::size_t e = start[j]; e < start[j + 1]; ++e) {
                             const T* qi = c.q.row(who[e]);
                             const T* gi = grad_out.row(who[e]);
                             const double dz = static_cast<double>(dzw[e]), p = static_cast<double>(pw[e]);
                             for (std::size_t x = 0; x < c.d; ++x) gk[x] += dz * static_cast<double>(qi[x]);
                             for (std::size_t x = 0; x < c.dv; ++x) gv[x] += p * static_cast<double>(gi[x]);
                           }
                           for (std::size_t x = 0; x < c.d; ++x) grad_k(j, x) = static_cast<T>(c.scale * gk[x]);
                           for (std::size_t x = 0; x < c.dv; ++x) grad_v(j, x) = static_cast<T>(gv[x]);
                         }
                       });
  fill_report(c, report, std::move(settled), graph_keys, final_keys, std::move(missed));
}

void graph_attention_forward(Device device, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                             const Graph& graph, MatrixView<float> out, const GraphAttentionOptions<float>& options,
                             GraphAttentionReport* report) {
  graph_attention_forward(device, Memory::host, q, k, v, graph, out, options, report);
}

void check_graph_attention_values(const char* op, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                  const AttentionOptions<float>& options, const HeadScan& q_scan,
                                  const HeadScan& k_scan, const HeadScan& v_scan) {
  (void)q, (void)k;
  detail::judge_attention_scans(op, v.rows, options.scale, kScaleName, kScoreHeadroom, q_scan, k_scan, v_scan);
}

void graph_attention_forward(Device device, Memory memory, ConstMatrix<float> q, ConstMatrix<float> k,
                             ConstMatrix<float> v, const Graph& graph, MatrixView<float> out,
                             const GraphAttentionOptions<float>& options, GraphAttentionReport* report) {
  if (device == Device::cpu) return graph_attention_forward<float>(q, k, v, graph, out, options, report);
  // The mode's kernel first (a device without one says so before any check).
  const bool exact = options.mode == GraphAttentionMode::exact;
  const auto exact_kernel = exact ? detail::backend_kernel(device, kOp, memory, &BackendKernels::graph_attention_exact,
                                                           &BackendKernels::graph_attention_exact_on_device)
                                  : nullptr;
  const auto kernel = exact ? nullptr
                            : detail::backend_kernel(device, kOp, memory, &BackendKernels::graph_attention_forward,
                                                     &BackendKernels::graph_attention_forward_on_device);
  validate<float>(kOp, q, k, v, graph, options, /*values=*/memory == Memory::host);
  detail::check_shape(kOp, "out", out, q.rows, v.cols);
  validate_mode<float>(kOp, options);
  if (exact) return exact_kernel(q, k, v, graph, out, options.attention, report);
  if (options.mode == GraphAttentionMode::certify)
    fail(cpp_name("options.mode") + " is certify but device " + device_name(device) +
             " runs fast and exact mode only; certify runs on cpu",
         kOp);
  if (report != nullptr)
    fail(std::string("report is not null but device ") + device_name(device) +
             " reports exact mode only (fast mode's report comes from cpu or certify)",
         kOp);
  kernel(q, k, v, graph, out, options.attention);
}

#define ENTGRAPH_GRAPH_ATTENTION(T)                                                                                \
  template void graph_attention_forward<T>(ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, const Graph&,           \
                                           MatrixView<T>, const GraphAttentionOptions<T>&, GraphAttentionReport*); \
  template void graph_attention_backward<T>(ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, const Graph&,          \
                                            ConstMatrix<T>, MatrixView<T>, MatrixView<T>, MatrixView<T>,           \
                                            const GraphAttentionOptions<T>&, GraphAttentionReport*);
ENTGRAPH_GRAPH_ATTENTION(float)
ENTGRAPH_GRAPH_ATTENTION(double)
#undef ENTGRAPH_GRAPH_ATTENTION

}  // namespace entgraph
