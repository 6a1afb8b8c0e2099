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

[[noreturn]] void fail(const std::string& what, const char* op = kOp) { throw Error(std::string(op) + ": " + what); }

using detail::num;

void check_transform(const char* op, const Transform& t) {
  if (!detail::check_plain_transform(t, op, "options.attention.transform"))
    fail("options.attention.transform is not supported on a graph (got " + t.name() +
             ", expected softmax, sparsemax, entmax15, entmax or topk_softmax)",
         op);
}

template <class T>
void validate(const char* op, ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, const Graph& graph,
              const GraphAttentionOptions<T>& options) {
  const AttentionOptions<T>& o = options.attention;
  if (q.rows == 0) fail("q.rows is 0 (got 0 queries, expected n >= 1)", op);
  if (k.rows == 0) fail("k.rows is 0 (got 0 keys, expected m >= 1)", op);
  if (q.cols == 0) fail("q.cols is 0 (got d = 0, expected d >= 1)", op);
  if (k.cols != q.cols)
    fail("k.cols does not match q.cols (got " + num(k.cols) + ", expected " + num(q.cols) + ")", op);
  if (v.rows != k.rows)
    fail("v.rows does not match k.rows (got " + num(v.rows) + ", expected " + num(k.rows) + ")", op);
  if (v.cols == 0) fail("v.cols is 0 (got dv = 0, expected dv >= 1)", op);
  if (k.rows > std::numeric_limits<std::uint32_t>::max())
    fail("k.rows is too large for a graph (got " + num(k.rows) + ", expected < 2^32)", op);
  detail::check_view(op, "q", q);
  detail::check_view(op, "k", k);
  detail::check_view(op, "v", v);
  if (!std::isfinite(o.scale))
    fail("options.attention.scale is not finite (got " + num(o.scale) + ", expected a finite number)", op);
  check_transform(op, o.transform);
  if (graph.queries != q.rows)
    fail("graph.queries does not match q.rows (got " + num(graph.queries) + ", expected " + num(q.rows) + ")", op);
  if (graph.keys != k.rows)
    fail("graph.keys does not match k.rows (got " + num(graph.keys) + ", expected " + num(k.rows) + ")", op);
  graph.validate((std::string(op) + ": graph").c_str());
  detail::check_finite<T>(op, "q", q);
  detail::check_finite<T>(op, "k", k);
  detail::check_finite<T>(op, "v", v);
  // 16: certify and exact mode's bounds add up to a few terms of that size
  // (q . mu, the projected part, the residual and its rounding margin).
  detail::check_score_range<T>(op, q, k, o.scale, "options.attention.scale", 16.0);
  detail::check_value_range<T>(op, v);
}

template <class T>
void validate_mode(const char* op, const GraphAttentionOptions<T>& options) {
  const Transform& t = options.attention.transform;
  if (options.mode != GraphAttentionMode::fast && options.mode != GraphAttentionMode::certify &&
      options.mode != GraphAttentionMode::exact)
    fail("options.mode is not a GraphAttentionMode (got " + num(static_cast<std::size_t>(options.mode)) + ")", op);
  if (options.mode != GraphAttentionMode::fast && !has_threshold(t))
    fail(std::string("options.mode is ") + (options.mode == GraphAttentionMode::exact ? "exact" : "certify") + " but " +
             t.name() +
             " has no threshold: every allowed key gets weight > 0, so no left-out key can be proven zero "
             "(use dense attention, or a sparse transform: sparsemax, entmax15, entmax with alpha > 1, topk_softmax)",
         op);
}

// alpha of the threshold rule p_j = 0 iff (alpha - 1) s_j <= tau; 0 for top-k.
double threshold_alpha(const Transform& t) {
  switch (t.kind) {
    case TransformKind::sparsemax:
      return 2.0;
    case TransformKind::entmax15:
      return 1.5;
    case TransformKind::entmax:
      return t.alpha;
    default:
      return 0.0;
  }
}

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
  std::size_t candidates = 0;  // keys from the graph (exact mode may drop some that cannot count)
  const std::uint32_t* graph = nullptr;  // the graph's keys of the row, sorted
  std::size_t graph_keys = 0;            // and their number
  std::size_t repaired = 0;              // keys scored beyond the graph's
  const T* qt = nullptr;       // the query's side of the bounds (ScoreBounds::prepare_query)
  typename ScoreBounds<T>::QuerySlack slack;  // and its share of every key's slack
  double offset = 0.0;         // and its offset,
  double lower_offset = 0.0;   // lowered (ScoreBounds::lower_offset)
  double threshold = 0.0;      // bound minus offset above which a left-out key must be scored
  std::size_t budget = 0;      // pending keys that trigger tightening during the scan
  // Left-out keys whose bound clears the threshold, not yet scored.
  std::vector<Pending<T>> pending;
  std::vector<T> scratch;  // the row kernel's
  bool scan = false;       // whether the bounds are still to be checked
  bool guess = false;      // exact mode starts from a guessed threshold (settle_from_guess)
  RowSettlement settled = RowSettlement::unsettled;
  double missed = 0.0;  // certify: the bound on the row's missed mass (NaN: none known)
};

// The transform's row kernel and its parameters. Every path of graph
// attention runs rows through it, straight: the scores come from finite Q and
// K, so transform_forward's checks and thread-pool dispatch (which dominate on
// short rows) are not needed, and fast, certified and exact rows get the same
// bits (transform_forward may batch short rows through another kernel).
template <class T>
auto row_kernel(const Transform& t, detail::RowParams& params) {
  const auto& kernels = detail::kernels_for<T>();
  params.alpha = t.alpha;
  params.k = t.k;
  switch (t.kind) {
    case TransformKind::sparsemax:
      return kernels.sparsemax;
    case TransformKind::entmax15:
      return kernels.entmax15;
    case TransformKind::entmax:
      return t.alpha == 1.0 ? kernels.softmax : kernels.entmax;
    case TransformKind::topk_softmax:
      return kernels.topk_softmax;
    default:
      return kernels.softmax;
  }
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

// A guaranteed lower bound on the score threshold theta = tau / (alpha - 1)
// of the row's alpha-entmax (p_j = [a (s_j - theta)]_+^(1/a), a = alpha - 1,
// sum p = 1): a key scoring at or below it has weight 0. F(theta) = sum_j
// [a (s_j - theta)]_+^(1/a) decreases in theta and is 1 at the threshold, so
// any theta with F(theta) >= 1 will do. F is evaluated relative to z_k, the
// smallest score of the support (p > 0), at theta = z_k - d: the brackets are
// a (s_j - z_k) + a d, sums of terms >= 0 on the support, and each is lowered
// by its rounding bound before the power, so the computed F is a lower bound
// of the true one at any alpha. (The form a s_j - tau cancels near the
// threshold, and at large alpha the power 1/a turns that rounding into
// weight: (1e-13)^(1/999) = 0.97.) The estimate d0 = z_k - (s_best -
// p_best^a / a), from the largest weight, is widened by a few of T's ulps, then
// fourfold, until F >= 1 holds; the
// fallback max s - 1/a (slightly lower) always satisfies it.
template <class T>
double entmax_score_threshold(const Row<T>& r, double alpha) {
  constexpr double kEps = std::numeric_limits<double>::epsilon(), kNegInf = -std::numeric_limits<double>::infinity();
  const double a = alpha - 1.0, inv = 1.0 / a;
  const std::size_t cnt = r.scores.size();
  std::size_t best = 0, low = cnt;  // low: the support's smallest score
  double smax = kNegInf;
  for (std::size_t x = 0; x < cnt; ++x) {
    const double s = static_cast<double>(r.scores[x]);
    smax = std::max(smax, s);
    if (r.probs[x] > r.probs[best]) best = x;
    if (r.probs[x] > 0 && (low == cnt || s < static_cast<double>(r.scores[low]))) low = x;
  }
  const double fallback = std::nextafter(smax - (1.0 + 1e-9) / a, kNegInf);
  if (low == cnt) return fallback;
  const double zk = static_cast<double>(r.scores[low]);
  auto reaches_one = [&](double d) {  // F(z_k - d) >= 1, from below
    double f = 0.0;
    for (std::size_t x = 0; x < cnt; ++x) {
      const double c = a * (static_cast<double>(r.scores[x]) - zk), g = c + a * d;
      const double lower = g - 8.0 * kEps * (std::abs(c) + a * d);
      if (lower <= 0.0) continue;
      f += alpha == 2.0 ? lower : alpha == 1.5 ? lower * lower : std::pow(lower, inv);
    }
    return f * (1.0 - static_cast<double>(cnt + 8) * kEps) >= 1.0;
  };
  const double p_best = static_cast<double>(r.probs[best]);
  const double estimate = static_cast<double>(r.scores[best]) - std::pow(p_best, a) / a;
  double d = std::max(zk - estimate, 0.0);
  const double widen = 16.0 * std::numeric_limits<T>::epsilon() * (std::abs(zk) + 1.0 / a);
  for (int tries = 0; tries < 6; ++tries) {
    const double theta = std::nextafter(zk - (d + widen), kNegInf);  // at or below it
    if (!(theta > fallback)) break;
    const double gap = zk - theta;  // overstated by at most an ulp: within the brackets' slack
    if (reaches_one(gap)) return theta;
    d = 4.0 * gap;
  }
  return fallback;
}

// The score threshold of the row's current keys: a left-out key whose score
// is at or below it has weight exactly 0 in the dense row; -inf when the row
// cannot provide one (no keys, or fewer than k for top-k).
template <class T>
double score_threshold(const Shared<T>& c, const Row<T>& r) {
  const Transform& t = c.o->transform;
  if (t.kind == TransformKind::topk_softmax) {
    if (r.scores.size() < t.k) return -std::numeric_limits<double>::infinity();
    std::vector<T> sorted(r.scores);
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(t.k - 1), sorted.end(),
                     std::greater<T>());
    // Left-out keys must rank strictly below the k-th kept score.
    return std::nextafter(static_cast<double>(sorted[t.k - 1]), -std::numeric_limits<double>::infinity());
  }
  if (r.scores.empty()) return -std::numeric_limits<double>::infinity();
  return entmax_score_threshold(r, threshold_alpha(t));
}

// Drops the pending keys whose bound no longer clears the row's threshold.
template <class T>
void drop_excluded(Row<T>& r) {
  const T thr = static_cast<T>(r.threshold);
  r.pending.erase(
      std::remove_if(r.pending.begin(), r.pending.end(), [&](const Pending<T>& e) { return !(e.bound > thr); }),
      r.pending.end());
}

// Sets r.threshold to the row's score threshold minus its bound offset,
// rounded down into T: a key with bound b (minus offset) <= threshold has
// offset + b <= theta, so it can be skipped.
template <class T>
void round_threshold(Row<T>& r) {
  T thr_t = static_cast<T>(r.threshold);
  if (static_cast<double>(thr_t) > r.threshold) thr_t = std::nextafter(thr_t, -std::numeric_limits<T>::infinity());
  r.threshold = static_cast<double>(thr_t);
}

template <class T>
void update_threshold(const Shared<T>& c, Row<T>& r) {
  r.threshold = score_threshold(c, r) - r.offset;
  round_threshold(r);
}

// One repair step: scores the `batch` pending keys of largest bound, runs the
// transform on the enlarged row, and drops the pending keys whose bound no
// longer clears its threshold (which never decreases). Every dropped key has
// weight 0 in the dense row.
template <class T>
void repair_step(const Shared<T>& c, std::size_t i, Row<T>& r, std::size_t batch) {
  auto higher = [](const Pending<T>& a, const Pending<T>& b) {
    return a.bound != b.bound ? a.bound > b.bound : a.key < b.key;
  };
  auto& p = r.pending;
  const std::size_t take = std::min(batch, p.size()), from = r.keys.size();
  if (take < p.size()) std::nth_element(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(take), p.end(), higher);
  for (std::size_t x = 0; x < take; ++x) r.keys.push_back(p[x].key);
  r.repaired += take;
  p.erase(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(take));
  score_keys<T>(c, i, r, from);
  transform_row<T>(c, r);
  if (p.empty()) return;
  update_threshold<T>(c, r);
  drop_excluded(r);
}

// A lower bound of the score of pending key e, rounded down into T.
template <class T>
T pending_lower(const Shared<T>& c, const Row<T>& r, const Pending<T>& e) {
  const double lower = static_cast<double>(e.bound) - 2.0 * c.bounds->slack(r.slack, e.key) + r.lower_offset;
  const T lower_t = static_cast<T>(lower);
  return static_cast<double>(lower_t) > lower ? std::nextafter(lower_t, -std::numeric_limits<T>::infinity())
                                              : lower_t;
}

// Raises the row's threshold without scoring anything: the threshold of its
// scored keys together with lower bounds of its pending keys' scores is
// valid (a threshold only grows with the scores and with the keys), and when
// the bounds are tight it is close to the dense row's. Only the pending keys
// of largest bound take part: a subset of keys still gives a valid
// threshold, and the transform then runs on a short row. probe is scratch.
template <class T>
void tighten(const Shared<T>& c, Row<T>& r, Row<T>& probe) {
  probe.scores.assign(r.scores.begin(), r.scores.end());
  const std::size_t keep = std::min(r.pending.size(), std::max<std::size_t>(32, r.scores.size()));
  if (keep < r.pending.size())
    std::nth_element(r.pending.begin(), r.pending.begin() + static_cast<std::ptrdiff_t>(keep), r.pending.end(),
                     [](const Pending<T>& a, const Pending<T>& b) { return a.bound > b.bound; });
  for (std::size_t x = 0; x < keep; ++x) probe.scores.push_back(pending_lower(c, r, r.pending[x]));
  transform_row<T>(c, probe);
  probe.offset = r.offset;
  update_threshold<T>(c, probe);
  if (!(probe.threshold > r.threshold)) return;
  r.threshold = probe.threshold;
  drop_excluded(r);
}

// Repair: scores the pending keys in decreasing bound order, in batches that
// double, until none is left.
template <class T>
void repair_row(const Shared<T>& c, std::size_t i, Row<T>& r, Row<T>& probe) {
  tighten<T>(c, r, probe);
  std::size_t batch = std::max<std::size_t>(16, r.candidates);
  while (!r.pending.empty()) {
    repair_step<T>(c, i, r, batch);
    batch *= 2;
  }
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
};

// Queries are processed in tiles of kTile rows. When their key lists overlap
// (windows, buckets of neighbours), the tile's scores are one GEMM over the
// union of its keys, gathered once, instead of one gathered dot product per
// edge; each row then takes its own scores out of the tile.
constexpr std::size_t kTile = 16;

// Transforms for which -inf scores stand exactly for "not a candidate".
bool tile_transform(const Transform& t) {
  return t.kind == TransformKind::softmax || t.kind == TransformKind::sparsemax ||
         t.kind == TransformKind::entmax15 || t.kind == TransformKind::entmax;
}

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
  // The union: rows that are each one run of consecutive keys (windows) whose
  // runs overlap or touch give one run; else stamp the candidates and scan
  // the range they span when it is short, or sort them.
  t.keys.clear();
  bool runs = !t.cand.empty();
  std::uint32_t run_lo = 0, run_hi = 0;
  for (std::size_t r = 0; r < rows && runs; ++r) {
    const std::size_t a = t.start[r], e = t.start[r + 1];
    if (a == e) continue;
    const std::uint32_t lo = t.cand[a], hi = t.cand[e - 1];
    runs = hi - lo + 1 == e - a;
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
    for (std::uint32_t j = run_lo; j <= run_hi; ++j) t.keys.push_back(j);
  } else if (!t.cand.empty()) {
    if (t.stamp.size() != c.m) t.stamp.assign(c.m, 0);
    std::uint32_t lo = t.cand.front(), hi = t.cand.front();
    for (std::uint32_t j : t.cand) {
      lo = std::min(lo, j);
      hi = std::max(hi, j);
      t.stamp[j] = tile + 1;
    }
    if (hi - lo <= 4 * t.cand.size()) {
      for (std::uint32_t j = lo; j <= hi; ++j)
        if (t.stamp[j] == tile + 1) t.keys.push_back(j);
    } else {
      t.keys = t.cand;
      std::sort(t.keys.begin(), t.keys.end());
      t.keys.erase(std::unique(t.keys.begin(), t.keys.end()), t.keys.end());
    }
  }
  // The tile GEMM pays for |union| scores per row: worth it when the rows
  // share most of their keys. Never for top-k: repaired keys are scored by
  // gather_dot, and a row scored by two kernels can break a tie that dense
  // attention keeps (top-k keeps every key tied with the k-th; one ulp apart,
  // it would not); fast and certify modes score the same way as exact mode.
  const bool tiled = std::is_same_v<T, float> && c.o->transform.kind != TransformKind::topk_softmax && rows > 1 &&
                     widest >= 8 && t.keys.size() <= 2 * widest;
  if (!tiled) return false;
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

// The rows of a tile whose bounds are computed at once are capped so that
// their buffer holds at most kBoundValues values (128 KB of floats, in L2),
// whatever the number of keys.
constexpr std::size_t kBoundValues = std::size_t{1} << 15;

// What collect_pending does when the pending list outgrows the row's budget.
enum class Overflow { tighten, keep };

// The bounds of one row's allowed keys [0, lim), key j at bounds[j], and
// the largest bound of each group of ScoreBounds::kGroupKeys keys (the last
// may reach past lim).
template <class T>
struct RowBounds {
  const T* bounds;
  const T* group_max;
  std::size_t lim;
};

// Sets the row's pending list to its left-out keys whose bound clears its
// threshold, in increasing key order, skipping the graph's keys of the row,
// the keys whose bound is above the ceiling, and every group whose largest
// bound does not clear the threshold. When the list outgrows the budget,
// exact mode either raises the threshold from the pending keys' lower
// bounds, so that the rest of the scan keeps fewer, or keeps them all;
// certify mode stops at the first key unless it bounds the missed mass,
// which takes them all, raising the threshold as exact mode does.
template <class T>
void collect_pending(const Shared<T>& c, TileScratch<T>& t, Row<T>& row, const RowBounds<T>& rb, Overflow overflow,
                     T ceiling = std::numeric_limits<T>::infinity()) {
  const detail::MatmulKernels<T>& mk = detail::matmul_kernels_for<T>();
  const std::uint8_t* padding = c.o->key_padding;
  const std::uint32_t* held = row.graph;
  const std::size_t nheld = row.graph_keys;
  // A graph row that is one run of keys (a window) is left out of the scan
  // as a range; other graph rows are skipped key by key.
  const bool run = nheld > 0 && held[nheld - 1] - held[0] + 1 == nheld;
  const std::size_t run_lo = run ? held[0] : rb.lim, run_hi = run ? held[nheld - 1] + 1 : rb.lim;
  std::size_t cursor = 0;
  row.pending.clear();
  // Chunks of 16 groups: one kernel call each, and the budget (or certify's
  // first key) checked between them.
  constexpr std::size_t kChunk = 16 * ScoreBounds<T>::kGroupKeys;
  static_assert(ScoreBounds<T>::kGroupKeys == detail::kSelectGroup);
  t.hits.resize(kChunk);
  for (std::size_t c0 = 0; c0 < rb.lim; c0 += kChunk) {
    const T threshold = static_cast<T>(row.threshold);
    const std::size_t c1 = std::min(rb.lim, c0 + kChunk);
    // The chunk less the run: [c0, a) and [b, c1).
    const std::size_t a = std::max(c0, std::min(c1, run_lo)), b = std::min(c1, std::max(c0, run_hi));
    std::size_t hits = mk.select_above(rb.bounds, rb.group_max, c0, a, threshold, ceiling, t.hits.data());
    if (b < c1) hits += mk.select_above(rb.bounds, rb.group_max, b, c1, threshold, ceiling, t.hits.data() + hits);
    // Written in place (a push_back of a temporary stalls on store forwarding).
    std::size_t at = row.pending.size();
    row.pending.resize(at + hits);
    for (std::size_t h = 0; h < hits; ++h) {
      const std::uint32_t j = t.hits[h];
      if (padding != nullptr && padding[j] == 0) continue;
      if (!run) {
        while (cursor < nheld && held[cursor] < j) ++cursor;
        if (cursor < nheld && held[cursor] == j) continue;
      }
      row.pending[at].bound = rb.bounds[j];
      row.pending[at++].key = j;
    }
    row.pending.resize(at);
    if (c.mode == GraphAttentionMode::certify && !c.bound_missed) {
      if (!row.pending.empty()) return;  // one pending key leaves the row unsettled
    } else if (row.pending.size() > row.budget && overflow == Overflow::tighten) {
      tighten<T>(c, row, t.probe);
      row.budget = std::max(row.budget, 2 * row.pending.size());
    }
  }
}

// The score threshold of a row after its transform, estimated from its
// largest weight (p = [(alpha - 1) (s - theta)]^(1/(alpha - 1))): only a
// guess, proven before use.
template <class T>
double threshold_estimate(const Shared<T>& c, const Row<T>& r) {
  const double am1 = threshold_alpha(c.o->transform) - 1.0;
  std::size_t best = 0;
  for (std::size_t x = 1; x < r.probs.size(); ++x)
    if (r.probs[x] > r.probs[best]) best = x;
  if (r.probs.empty() || !(r.probs[best] > T(0))) return -std::numeric_limits<double>::infinity();
  return static_cast<double>(r.scores[best]) - std::pow(static_cast<double>(r.probs[best]), am1) / am1;
}

// A guess of the row's threshold (bound minus offset): the transform's
// threshold over the largest bound of each 64-key group. Those are a subset
// of the row's bounds, so the guess tends to lie a little under the row's
// threshold (more keys only raise it), and settle_from_guess proves it.
template <class T>
double group_guess(const Shared<T>& c, const RowBounds<T>& rb, Row<T>& probe) {
  constexpr std::size_t kGroup = ScoreBounds<T>::kGroupKeys;
  const std::size_t full = rb.lim / kGroup;
  probe.scores.assign(rb.group_max, rb.group_max + full);
  if (full * kGroup < rb.lim)  // the last group's maximum may come from keys past lim
    probe.scores.push_back(
        detail::matmul_kernels_for<T>().max_value(rb.bounds + full * kGroup, rb.lim - full * kGroup));
  transform_row<T>(c, probe);
  return threshold_estimate(c, probe);
}

// Whether every key of the row with weight is one of the graph's.
template <class T>
bool graph_holds_weight(const Row<T>& r) {
  for (std::size_t x = r.candidates; x < r.keys.size(); ++x)
    if (r.probs[x] > T(0) && !std::binary_search(r.graph, r.graph + r.graph_keys, r.keys[x])) return false;
  return true;
}

// Exact mode from a guessed threshold (bound minus offset). Scores every
// left-out key whose bound clears the guess (when they are more than the
// row's budget, only the budget / 2 of largest bound: the guess was low),
// runs the transform, and is done when the threshold the row then proves
// reaches their level: every key left out has a bound at or under it.
// Otherwise the keys between the proven threshold and that level are added
// too, and the enlarged row holds every key above a threshold it proves (its
// threshold only grew).
template <class T>
void settle_from_guess(const Shared<T>& c, TileScratch<T>& t, std::uint32_t i, Row<T>& row, const RowBounds<T>& rb,
                       double guess) {
  row.threshold = guess;
  round_threshold<T>(row);
  const T floor = static_cast<T>(row.threshold);  // every key above it is collected
  T level = floor;
  // Graph keys scoring at or under the guess wait too: the transform then
  // runs on a shorter row, and unless the guess fails they have weight 0.
  std::vector<std::pair<std::uint32_t, T>>& dropped = t.dropped;
  dropped.clear();
  {
    const double at = static_cast<double>(level) + row.offset;
    const double cut = at - 1e-9 * (1.0 + std::abs(at));
    std::size_t kept = 0;
    for (std::size_t x = 0; x < row.candidates; ++x) {
      if (static_cast<double>(row.scores[x]) > cut) {
        row.keys[kept] = row.keys[x];
        row.scores[kept++] = row.scores[x];
      } else {
        dropped.emplace_back(row.keys[x], row.scores[x]);
      }
    }
    row.candidates = kept;
    row.keys.resize(kept);
    row.scores.resize(kept);
  }
  collect_pending<T>(c, t, row, rb, Overflow::keep);
  std::vector<Pending<T>>& p = row.pending;
  std::vector<Pending<T>>& rest = t.rest;  // collected keys at or under the level wait here
  rest.clear();
  if (p.size() > row.budget) {
    const std::size_t keep = row.budget / 2;
    std::nth_element(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep - 1), p.end(),
                     [](const Pending<T>& a, const Pending<T>& b) { return a.bound > b.bound; });
    level = p[keep - 1].bound;
    const auto split = std::partition(p.begin(), p.end(), [&](const Pending<T>& e) { return e.bound > level; });
    rest.assign(split, p.end());
    p.erase(split, p.end());
  }
  if (!p.empty()) {
    repair_step<T>(c, i, row, p.size());  // scores them all and transforms the row
  } else {
    transform_row<T>(c, row);
  }
  update_threshold<T>(c, row);
  if (row.threshold >= static_cast<double>(level)) return;
  // The band under the level: the waiting graph keys above the proven
  // threshold (with a little to spare: a key of weight 0 does no harm),
  const double back = row.threshold + row.offset - 1e-6 * (1.0 + std::abs(row.threshold) + std::abs(row.offset));
  const std::size_t before = row.keys.size();
  for (const auto& [key, score] : dropped)
    if (static_cast<double>(score) > back) {
      row.keys.push_back(key);
      row.scores.push_back(score);
    }
  // and the left-out keys whose bound lies between the threshold and the level.
  if (row.threshold >= static_cast<double>(floor)) {
    const T above = static_cast<T>(row.threshold);
    for (const Pending<T>& e : rest)
      if (e.bound > above) p.push_back(e);
  } else {
    collect_pending<T>(c, t, row, rb, Overflow::tighten, level);
  }
  if (p.empty()) {
    if (row.keys.size() > before) transform_row<T>(c, row);
    return;
  }
  if (p.size() <= row.budget) {
    repair_step<T>(c, i, row, p.size());
  } else {
    repair_row<T>(c, i, row, t.probe);
  }
}

// Pending keys of largest bound that missed_mass_bound's threshold sees (at
// least; twice the graph keys when more).
constexpr std::size_t kMissedProbeKeys = 64;

// An upper bound on the weight that the dense alpha-entmax row gives to the
// keys the row leaves out (certify; docs/EXACT.md, "Fast mode's error"). Let
// every pending key score its bound u_j: that row's threshold theta* is at
// least the dense row's (a threshold only grows with the scores), so there
// the graph keys weigh at most what they weigh in the dense row, and the
// pending keys at least the dense row's missed mass. Their weight at theta*
// grows when theta* is replaced by a proven lower bound of it; the keys that
// are not pending have u_j at or under the graph row's threshold and add 0.
// The lower bound comes from the graph keys and the largest bounds only (the
// threshold of a subset never exceeds the row's): a transform over thousands
// of pending keys, as a short window leaves, would cost more than the bounds.
// The graph keys' computed scores are within delta of the exact ones, which
// moves theta* by at most delta: theta* - delta keeps the bound valid for
// the exact scores. Reorders the row's pending keys.
template <class T>
double missed_mass_bound(const Shared<T>& c, std::size_t i, Row<T>& r, Row<T>& probe) {
  constexpr double kEps = std::numeric_limits<double>::epsilon(), kInf = std::numeric_limits<double>::infinity();
  const double alpha = threshold_alpha(c.o->transform), a = alpha - 1.0, inv = 1.0 / a;
  const std::size_t g = r.scores.size();
  std::vector<Pending<T>>& p = r.pending;
  const std::size_t keep = std::min(p.size(), std::max<std::size_t>(kMissedProbeKeys, 2 * g));
  if (keep < p.size())
    std::nth_element(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep), p.end(),
                     [](const Pending<T>& x, const Pending<T>& y) { return x.bound > y.bound; });
  probe.scores.assign(r.scores.begin(), r.scores.end());
  for (std::size_t x = 0; x < keep; ++x) {  // u_j rounded up into T
    const double u = std::nextafter(static_cast<double>(p[x].bound) + r.offset, kInf);
    const T ut = static_cast<T>(u);
    probe.scores.push_back(static_cast<double>(ut) < u ? std::nextafter(ut, std::numeric_limits<T>::infinity()) : ut);
  }
  transform_row<T>(c, probe);
  // |computed - exact| <= gamma_(d+1) |scale| ||q|| ||k|| in any summation order (doubled for the norms' rounding).
  double qq = 0.0;
  for (std::size_t x = 0; x < c.d; ++x) qq += static_cast<double>(c.q(i, x)) * static_cast<double>(c.q(i, x));
  const double delta = 2.0 * static_cast<double>(c.d + 2) * std::numeric_limits<T>::epsilon() * std::abs(c.scale) *
                       std::sqrt(qq) * c.key_norm;
  const double theta =
      std::max(entmax_score_threshold(probe, alpha), std::nextafter(r.threshold + r.offset, -kInf)) - delta;
  // u_j - theta = bound_j - (theta - offset), the latter rounded down; each
  // bracket is then rounded up (two roundings) before its power.
  const double below = std::nextafter(theta - r.offset, -kInf);
  double sum = 0.0;
  for (const Pending<T>& e : p) {
    const double base = a * (static_cast<double>(e.bound) - below) * (1.0 + 4.0 * kEps);
    if (base > 0.0) sum += alpha == 2.0 ? base : alpha == 1.5 ? base * base : std::pow(base, inv);
  }
  return std::min(1.0, sum * (1.0 + 4.0 * static_cast<double>(p.size() + 8) * kEps));
}

// Settles the tile's rows that the graph does not: bounds every allowed key
// (one GEMM per slab of rows over all their keys), collects each row's
// pending keys, and in exact mode repairs the row.
//
// Exact mode with a threshold transform first guesses the threshold from
// the row's group maxima (group_guess), which saves the transform of the
// graph's keys alone and keeps the pending list short from the start;
// settle_from_guess proves it.
template <class T>
void settle_by_bounds(const Shared<T>& c, TileScratch<T>& t, const std::uint32_t* ids, std::size_t rows) {
  const ScoreBounds<T>& b = *c.bounds;
  const std::size_t w = b.width();
  std::vector<std::size_t>& scan_rows = t.scan_rows;
  scan_rows.clear();
  std::size_t end = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    if (!t.rows[r].scan) continue;
    scan_rows.push_back(r);
    end = std::max(end, c.limit(ids[r]));
  }
  const std::size_t active = scan_rows.size();
  if (active == 0) return;
  t.qb.resize(active * w);
  for (std::size_t a = 0; a < active; ++a) {
    Row<T>& row = t.rows[scan_rows[a]];
    row.qt = t.qb.data() + a * w;
    row.offset = b.prepare_query(c.q.row(ids[scan_rows[a]]), t.qb.data() + a * w);
    row.slack = b.query_slack(row.qt);
    row.lower_offset = b.lower_offset(row.offset);
    row.budget = std::max<std::size_t>(64, 2 * row.candidates);
  }
  const bool exact = c.mode == GraphAttentionMode::exact;
  // Slabs of a multiple of 4 rows: the bfloat16 kernel takes rows 4 at a time.
  const std::size_t slab = std::min(active, std::max<std::size_t>(4, kBoundValues / end / 4 * 4));
  const std::size_t groups = (end + ScoreBounds<T>::kGroupKeys - 1) / ScoreBounds<T>::kGroupKeys;
  for (std::size_t a0 = 0; a0 < active; a0 += slab) {
    const std::size_t a1 = std::min(active, a0 + slab);
    t.bounds.resize((a1 - a0) * end);
    t.group_max.resize((a1 - a0) * groups);
    b.bound_block(t.qb.data() + a0 * w, a1 - a0, w, 0, end, t.bounds.data(), end, t.group_max.data(), groups);
    for (std::size_t a = a0; a < a1; ++a) {
      Row<T>& row = t.rows[scan_rows[a]];
      const std::uint32_t i = ids[scan_rows[a]];
      const RowBounds<T> rb{t.bounds.data() + (a - a0) * end, t.group_max.data() + (a - a0) * groups, c.limit(i)};
      if (row.guess) {
        settle_from_guess<T>(c, t, i, row, rb, group_guess(c, rb, t.probe));
      } else {
        // No guess (top-k, certify): the graph's own threshold, which is
        // proven, in exact mode as a guess that cannot fail.
        update_threshold<T>(c, row);
        if (exact) {
          settle_from_guess<T>(c, t, i, row, rb, row.threshold);
        } else {
          collect_pending<T>(c, t, row, rb, Overflow::tighten);
          if (c.bound_missed && !row.pending.empty()) row.missed = missed_mass_bound<T>(c, i, row, t.probe);
        }
      }
      if (row.pending.empty() && graph_holds_weight(row)) {
        row.settled = RowSettlement::graph;
      } else if (exact) {
        row.settled = row.graph_keys + row.repaired == c.allowed(i) ? RowSettlement::dense : RowSettlement::repaired;
      }  // certify: unsettled, the graph row stays as it is
    }
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
  const bool guessing = c.mode == GraphAttentionMode::exact && c.o->transform.kind != TransformKind::topk_softmax;
  if (t.rows.size() < rows) t.rows.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    Row<T>& row = t.rows[r];
    row.keys.assign(t.cand.begin() + static_cast<std::ptrdiff_t>(t.start[r]),
                    t.cand.begin() + static_cast<std::ptrdiff_t>(t.start[r + 1]));
    row.candidates = row.keys.size();
    row.graph = t.cand.data() + t.start[r];
    row.graph_keys = row.candidates;
    row.repaired = 0;
    if (tiled) {
      row.scores.resize(row.keys.size());
      for (std::size_t x = 0; x < row.keys.size(); ++x) row.scores[x] = t.scores[t.pos[row.keys[x]] * rows + r];
    } else {
      score_keys<T>(c, ids[r], row, 0);
    }
    const bool complete = row.keys.size() == c.allowed(ids[r]);
    row.settled = complete ? RowSettlement::graph : RowSettlement::unsettled;
    row.missed = std::numeric_limits<double>::quiet_NaN();
    row.scan = !complete && c.mode != GraphAttentionMode::fast;
    row.guess = row.scan && guessing;
    if (!row.guess) transform_row<T>(c, row);  // a guessed row is transformed once its keys are known
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
    c.bounds = std::make_unique<ScoreBounds<T>>(k, c.scale, options.bound_rank, options.attention.key_padding);
  c.bound_missed = c.mode == GraphAttentionMode::certify && threshold_alpha(options.attention.transform) > 0.0;
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
  return t.kind != TransformKind::softmax && !(t.kind == TransformKind::entmax && t.alpha == 1.0);
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
                             const Graph& graph, MatrixView<float> out, const GraphAttentionOptions<float>& options) {
  if (device == Device::cpu) return graph_attention_forward<float>(q, k, v, graph, out, options);
  const auto kernel = detail::backend_kernel(device, kOp, &BackendKernels::graph_attention_forward);
  validate<float>(kOp, q, k, v, graph, options);
  detail::check_shape(kOp, "out", out, q.rows, v.cols);
  validate_mode<float>(kOp, options);
  if (options.mode != GraphAttentionMode::fast)
    fail(std::string("options.mode is ") + (options.mode == GraphAttentionMode::exact ? "exact" : "certify") +
             " but device " + device_name(device) +
             " computes the graph's rows only (GraphAttentionMode::fast); certify and exact run on cpu",
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
