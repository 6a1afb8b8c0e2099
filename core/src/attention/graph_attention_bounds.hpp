// entgraph internal: certify and exact mode of graph attention, by bound and
// repair (docs/EXACT.md): a row's score threshold proven from its keys'
// scores, the left-out keys whose score bound clears it (pending), the
// repair that scores them until none is left, the threshold guessed from the
// bounds' group maxima and proven (settle_from_guess), and certify's bound on
// the weight a row misses. Included only by graph_attention.cpp, after
// graph_attention_rows.hpp.
#pragma once

#include "attention/graph_attention_rows.hpp"

namespace entgraph {
namespace {

// p^a for a weight p and a = alpha - 1, for the threshold guesses below:
// a square root for 1.5-entmax, p for sparsemax (std::pow costs as much as
// the rest of a guess).
inline double weight_power(double p, double a) { return a == 0.5 ? std::sqrt(p) : a == 1.0 ? p : std::pow(p, a); }

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
  // The largest score, the first largest weight and its score, and z_k, in
  // selects rather than branches (whether p > 0 is a coin toss per key).
  double smax = kNegInf, zk = std::numeric_limits<double>::infinity(), p_best = -1.0, s_best = 0.0;
  for (std::size_t x = 0; x < cnt; ++x) {
    const double s = static_cast<double>(r.scores[x]), p = static_cast<double>(r.probs[x]);
    smax = std::max(smax, s);
    const bool better = p > p_best;
    p_best = better ? p : p_best;
    s_best = better ? s : s_best;
    zk = std::min(zk, p > 0.0 ? s : std::numeric_limits<double>::infinity());
  }
  const double fallback = std::nextafter(smax - (1.0 + 1e-9) / a, kNegInf);
  if (!(p_best > 0.0)) return fallback;  // no support
  // F(z_k - d) >= 1, from below. For alpha 2 and 1.5 the brackets are
  // clamped at 0 without a branch (about half the keys of a repaired row
  // fall below the threshold, in no order a predictor could learn).
  auto reaches_one = [&](double d) {
    double f = 0.0;
    auto lower_at = [&](std::size_t x) {
      const double c = a * (static_cast<double>(r.scores[x]) - zk), g = c + a * d;
      return g - 8.0 * kEps * (std::abs(c) + a * d);
    };
    if (alpha == 2.0) {
      for (std::size_t x = 0; x < cnt; ++x) f += std::max(lower_at(x), 0.0);
    } else if (alpha == 1.5) {
      for (std::size_t x = 0; x < cnt; ++x) {
        const double lower = std::max(lower_at(x), 0.0);
        f += lower * lower;
      }
    } else {
      for (std::size_t x = 0; x < cnt; ++x) {
        const double lower = lower_at(x);
        if (lower > 0.0) f += std::pow(lower, inv);
      }
    }
    return f * (1.0 - static_cast<double>(cnt + 8) * kEps) >= 1.0;
  };
  const double estimate = s_best - weight_power(p_best, a) / a;
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
  if (!r.slack_known) {
    r.slack = c.bounds->query_slack(r.qt);
    r.slack_known = true;
  }
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
  std::size_t batch = std::max<std::size_t>(16, r.graph_keys);
  while (!r.pending.empty()) {
    repair_step<T>(c, i, r, batch);
    batch *= 2;
  }
}

// The rows of a tile whose bounds are computed at once are capped so that
// their buffer holds at most kBoundValues values (512 KB of floats, in L2),
// whatever the number of keys.
constexpr std::size_t kBoundValues = std::size_t{1} << 17;

// What collect_pending does when the pending list outgrows the row's budget:
// raise the threshold, keep every key, or stop (the threshold was poor).
enum class Overflow { tighten, keep, stop };

// A predictor's row whose threshold lets more left-out keys through than
// this missed much of the support (settle_from_guess): whatever the row's
// size, since a large poor row would otherwise pass with hundreds.
constexpr std::size_t kGraphMissedKeys = 64;

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
// bounds, so that the rest of the scan keeps fewer, keeps them all, or stops
// and returns false; certify mode stops at the first key unless it bounds
// the missed mass, which takes them all, raising the threshold as exact mode
// does.
template <class T>
bool collect_pending(const Shared<T>& c, TileScratch<T>& t, Row<T>& row, const RowBounds<T>& rb, Overflow overflow,
                     T ceiling = std::numeric_limits<T>::infinity()) {
  const detail::MatmulKernels<T>& mk = detail::matmul_kernels_for<T>();
  const std::uint8_t* padding = c.o->key_padding;
  // The graph's keys already scored are skipped; unscored, they are keys
  // like any other.
  const std::uint32_t* held = row.graph;
  const std::size_t nheld = row.guess ? 0 : row.graph_keys;
  // A graph row that is one run of keys (a window) is left out of the scan
  // as a range; other graph rows are skipped key by key.
  const bool run = one_run(held, nheld);
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
      if (!row.pending.empty()) return true;  // one pending key leaves the row unsettled
    } else if (row.pending.size() > row.budget && overflow == Overflow::tighten) {
      tighten<T>(c, row, t.probe);
      row.budget = std::max(row.budget, 2 * row.pending.size());
    } else if (row.pending.size() > kGraphMissedKeys && overflow == Overflow::stop) {
      return false;
    }
  }
  return true;
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
  return static_cast<double>(r.scores[best]) - weight_power(static_cast<double>(r.probs[best]), am1) / am1;
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

// Which keys are the row's graph keys: a range for a run of keys (a
// window), else the keys stamped in a per-thread table (a binary search per
// key mispredicted half its steps: 10 % of exact mode with a learned graph).
template <class T>
class GraphKeys {
 public:
  GraphKeys(const Shared<T>& c, TileScratch<T>& t, const Row<T>& r) {
    if (r.graph_keys == 0) return;
    lo_ = r.graph[0];
    hi_ = r.graph[r.graph_keys - 1];
    if (one_run(r.graph, r.graph_keys)) return;
    if (t.graph_mark.size() != c.m) t.graph_mark.assign(c.m, 0);
    if (++t.graph_mark_id == 0) {  // wrapped: clear the table
      std::fill(t.graph_mark.begin(), t.graph_mark.end(), 0);
      t.graph_mark_id = 1;
    }
    for (std::size_t x = 0; x < r.graph_keys; ++x) t.graph_mark[r.graph[x]] = t.graph_mark_id;
    mark_ = t.graph_mark.data();
    id_ = t.graph_mark_id;
  }
  bool has(std::uint32_t j) const { return mark_ != nullptr ? mark_[j] == id_ : lo_ <= j && j <= hi_; }

 private:
  std::uint32_t lo_ = 1, hi_ = 0;  // empty
  const std::uint32_t* mark_ = nullptr;
  std::uint32_t id_ = 0;
};

// Whether every key of the row with weight is one of the graph's.
template <class T>
bool graph_holds_weight(const Row<T>& r, const GraphKeys<T>& g) {
  for (std::size_t x = r.candidates; x < r.keys.size(); ++x)
    if (r.probs[x] > T(0) && !g.has(r.keys[x])) return false;
  return true;
}

// The keys scored beyond the graph's: all of them where the graph's keys
// were scored first, else those outside the graph.
template <class T>
std::size_t scored_beyond_graph(const Row<T>& r, const GraphKeys<T>& g) {
  if (!r.guess) return r.repaired;
  std::size_t beyond = 0;
  for (std::uint32_t j : r.keys) beyond += g.has(j) ? 0 : 1;
  return beyond;
}

// Exact mode from a guessed threshold (bound minus offset). Scores every
// left-out key whose bound clears the guess (when they are more than the
// row's budget, only the budget / 2 of largest bound: the guess was low),
// runs the transform, and is done when the threshold the row then proves
// reaches their level: every key left out has a bound at or under it.
// Otherwise the keys between the proven threshold and that level are added
// too, and the enlarged row holds every key above a threshold it proves (its
// threshold only grew).
//
// from_graph: the guess is the threshold a predictor's row proved. When
// more keys clear it than kGraphMissedKeys, the row missed much of the
// support: the guess from the bounds' group maxima (group_guess) takes over,
// with the graph's keys kept as scored, and the call returns false.
template <class T>
bool settle_from_guess(const Shared<T>& c, TileScratch<T>& t, std::uint32_t i, Row<T>& row, const RowBounds<T>& rb,
                       double guess, bool from_graph = false) {
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
  if (!collect_pending<T>(c, t, row, rb, from_graph ? Overflow::stop : Overflow::keep)) {
    for (const auto& [key, score] : dropped) {  // the graph's keys as they were scored
      row.keys.push_back(key);
      row.scores.push_back(score);
    }
    row.candidates = row.keys.size();
    settle_from_guess<T>(c, t, i, row, rb, std::max(guess, group_guess(c, rb, t.probe)));
    return false;
  }
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
  if (row.threshold >= static_cast<double>(level)) return true;
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
    return true;
  }
  if (p.size() <= row.budget) {
    repair_step<T>(c, i, row, p.size());
  } else {
    repair_row<T>(c, i, row, t.probe);
  }
  return true;
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

// Whether exact mode scores a row's graph keys first (settle_by_bounds): a
// predictor's row, not a window's (a window's keys are mostly under the
// guess), of at most kGraphMissedKeys keys (a wider row costs more to score
// than the guess's keys, about 40 a row on the long teacher), and not in a
// tile whose rows so far fell back from their graph's threshold more often
// than it held (a poor predictor then costs one row of each tile; the count
// is per tile, so the choice does not depend on the threads).
template <class T>
bool graph_first(const Row<T>& r, const TileScratch<T>& t) {
  const bool window = r.graph_keys == 0 || one_run(r.graph, r.graph_keys);
  return !window && r.graph_keys <= kGraphMissedKeys && t.graph_failed <= t.graph_held;
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
  t.graph_held = t.graph_failed = 0;
  t.qb.resize(active * w);
  for (std::size_t a = 0; a < active; ++a) {
    Row<T>& row = t.rows[scan_rows[a]];
    row.qt = t.qb.data() + a * w;
    row.offset = b.prepare_query(c.q.row(ids[scan_rows[a]]), t.qb.data() + a * w);
    row.slack_known = false;  // tighten computes it if the row needs it
    row.lower_offset = b.lower_offset(row.offset);
    row.budget = std::max<std::size_t>(64, 2 * row.graph_keys);
  }
  const bool exact = c.mode == GraphAttentionMode::exact;
  // Slabs of a multiple of 4 rows: the bfloat16 kernel takes rows 4 at a time.
  const std::size_t slab = std::min(active, std::max<std::size_t>(4, kBoundValues / end / 4 * 4));
  const std::size_t groups = (end + ScoreBounds<T>::kGroupKeys - 1) / ScoreBounds<T>::kGroupKeys;
  for (std::size_t a0 = 0; a0 < active; a0 += slab) {
    const std::size_t a1 = std::min(active, a0 + slab);
    // Grown, never shrunk: a resize that grows zero-fills, half a MB a slab.
    if (t.bounds.size() < (a1 - a0) * end) t.bounds.resize((a1 - a0) * end);
    if (t.group_max.size() < (a1 - a0) * groups) t.group_max.resize((a1 - a0) * groups);
    b.bound_block(t.qb.data() + a0 * w, a1 - a0, w, 0, end, t.bounds.data(), end, t.group_max.data(), groups);
    for (std::size_t a = a0; a < a1; ++a) {
      Row<T>& row = t.rows[scan_rows[a]];
      const std::uint32_t i = ids[scan_rows[a]];
      const RowBounds<T> rb{t.bounds.data() + (a - a0) * end, t.group_max.data() + (a - a0) * groups, c.limit(i)};
      if (row.guess && graph_first(row, t)) {
        // A predictor's row: its keys scored first, and the threshold they
        // prove is the guess, unless the row proves a poor one.
        row.guess = false;
        row.keys.assign(row.graph, row.graph + row.graph_keys);
        row.candidates = row.graph_keys;
        score_keys<T>(c, i, row, 0);
        transform_row<T>(c, row);
        update_threshold<T>(c, row);
        ++(settle_from_guess<T>(c, t, i, row, rb, row.threshold, true) ? t.graph_held : t.graph_failed);
      } else if (row.guess) {
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
      const GraphKeys<T> graph_keys(c, t, row);
      row.repaired = scored_beyond_graph(row, graph_keys);
      if (row.pending.empty() && graph_holds_weight(row, graph_keys)) {
        row.settled = RowSettlement::graph;
      } else if (exact) {
        row.settled = row.graph_keys + row.repaired == c.allowed(i) ? RowSettlement::dense : RowSettlement::repaired;
      }  // certify: unsettled, the graph row stays as it is
    }
  }
}

}  // namespace
}  // namespace entgraph
