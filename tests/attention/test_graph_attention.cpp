// graph_attention_forward / graph_attention_backward against dense attention:
// exact mode (bound and repair) equals attention_forward and
// attention_backward on random, clustered and adversarial inputs, for every
// sparse transform, in float and float64; its report is consistent, and a row
// it settles by the graph has no dense weight outside the graph row. Fast
// mode against a masked float64 oracle and finite differences, its tile path
// against its row path; certify mode; thread independence; input validation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention/attention_support.hpp"
#include "clustered_capture.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/model.hpp"
#include "entgraph/runtime.hpp"
#include "support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

using Pairs = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

// ---------------------------------------------------------------------------
// Graphs.

Graph random_graph(std::size_t n, std::size_t m, double density, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution keep(density);
  Pairs pairs;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j)
      if (keep(rng)) pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
  return Graph::from_pairs(n, m, std::move(pairs));
}

// Keys [p - before, p + after] of query i at position p = i + (m - n).
Graph window_graph(std::size_t n, std::size_t m, std::size_t before, std::size_t after) {
  Pairs pairs;
  for (std::size_t i = 0; i < n; ++i) {
    const long long p = static_cast<long long>(i + m) - static_cast<long long>(n);
    for (long long j = p - static_cast<long long>(before); j <= p + static_cast<long long>(after); ++j)
      if (j >= 0 && j < static_cast<long long>(m))
        pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
  }
  return Graph::from_pairs(n, m, std::move(pairs));
}

// ---------------------------------------------------------------------------
// A problem: float-exact inputs (so the float and float64 APIs see the same
// numbers), masks, scale and graph.

struct Case {
  std::string name;
  Matrix<double> q, k, v;
  std::vector<std::uint8_t> padding;  // empty: none
  bool causal = false;
  double scale = 0.0;
  Graph graph;

  std::size_t n() const { return q.rows; }
  std::size_t m() const { return k.rows; }
  std::size_t limit(std::size_t i) const { return causal ? causal_key_limit(i, n(), m()) : m(); }
  bool allowed(std::size_t i, std::size_t j) const { return j < limit(i) && (padding.empty() || padding[j] != 0); }
  std::size_t allowed_count(std::size_t i) const {
    std::size_t c = 0;
    for (std::size_t j = 0; j < m(); ++j) c += allowed(i, j) ? 1 : 0;
    return c;
  }
  // |graph row i ∩ allowed keys|
  std::size_t graph_count(const Graph& g, std::size_t i) const {
    std::size_t c = 0;
    for (const std::uint32_t* p = g.row_begin(i); p != g.row_end(i); ++p) c += allowed(i, *p) ? 1 : 0;
    return c;
  }
  template <class T>
  AttentionOptions<T> options(const Transform& t) const {
    AttentionOptions<T> o;
    o.transform = t;
    o.scale = scale;
    o.causal = causal;
    o.key_padding = padding.empty() ? nullptr : padding.data();
    o.block_rows = 7;
    return o;
  }
};

Case random_case(std::string name, std::size_t n, std::size_t m, std::size_t d, std::size_t dv, bool causal,
                 double density, std::uint64_t seed) {
  Case c;
  c.name = std::move(name);
  c.q = float_exact(n, d, 1.0, seed);
  c.k = float_exact(m, d, 1.0, seed + 1);
  c.v = float_exact(m, dv, 1.0, seed + 2);
  c.causal = causal;
  c.scale = 2.0 / std::sqrt(static_cast<double>(d));  // sparse enough for the sparse transforms to matter
  c.graph = random_graph(n, m, density, seed + 3);
  return c;
}

// Queries and keys of the clustered synthetic capture: keys of a query's
// cluster are spread over the sequence, so a local window misses most of them.
Case clustered_case(std::string name, std::size_t n, std::size_t d, std::size_t clusters, bool causal,
                    std::uint64_t seed) {
  const Capture cap = clustered_capture(1, 1, d, {n}, clusters, causal, seed);
  Case c;
  c.name = std::move(name);
  c.q = Matrix<double>(n, d);
  c.k = Matrix<double>(n, d);
  for (std::size_t x = 0; x < n * d; ++x) {
    c.q.data[x] = cap.queries[x];
    c.k.data[x] = cap.keys[x];
  }
  c.v = float_exact(n, 6, 1.0, seed + 1);
  c.causal = causal;
  c.scale = 1.0 / std::sqrt(static_cast<double>(d));
  c.graph = window_graph(n, n, 3, causal ? 0 : 3);
  return c;
}

// Keys whose norms vary widely (every 5th key "heavy", norm 3, the others
// norm <= 0.6): the bounds exclude light keys when the row holds the heavy ones.
Case heavy_light_case(std::string name, std::size_t n, std::size_t m, bool causal, double density, std::uint64_t seed) {
  const std::size_t d = 4;
  Case c = random_case(std::move(name), n, m, d, 3, causal, density, seed);
  std::mt19937_64 rng(seed + 5);
  std::uniform_real_distribution<double> light(0.05, 0.6);
  for (std::size_t j = 0; j < m; ++j) {
    double norm = 0;
    for (std::size_t x = 0; x < d; ++x) norm += c.k(j, x) * c.k(j, x);
    const double target = j % 5 == 0 ? 3.0 : light(rng);
    for (std::size_t x = 0; x < d; ++x) c.k(j, x) = static_cast<float>(c.k(j, x) * target / std::sqrt(norm));
  }
  for (double& x : c.q.data) x = static_cast<float>(x * 2.0 / std::sqrt(static_cast<double>(d)));
  c.scale = 1.0;
  // Each query also holds every heavy key with probability 1/2.
  std::bernoulli_distribution heavy(0.5);
  Pairs pairs;
  for (std::size_t i = 0; i < n; ++i) {
    for (const std::uint32_t* p = c.graph.row_begin(i); p != c.graph.row_end(i); ++p)
      pairs.emplace_back(static_cast<std::uint32_t>(i), *p);
    if (heavy(rng))
      for (std::size_t j = 0; j < m; j += 5)
        pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
  }
  c.graph = Graph::from_pairs(n, m, std::move(pairs));
  return c;
}

// ---------------------------------------------------------------------------
// Runs.

template <class T>
constexpr double kTol = std::is_same_v<T, float> ? 1e-5 : 1e-12;

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "float" : "double";
}

template <class T>
struct Dense {
  Matrix<T> out, probs;
};

template <class T>
Dense<T> dense_forward(const Case& c, const Transform& t) {
  const Matrix<T> q = c.q.cast<T>(), k = c.k.cast<T>(), v = c.v.cast<T>();
  Dense<T> r{Matrix<T>(c.n(), c.v.cols), Matrix<T>(c.n(), c.m())};
  attention_forward<T>(q.view(), k.view(), v.view(), r.out.view(), c.options<T>(t), r.probs.view());
  return r;
}

template <class T>
GraphAttentionOptions<T> graph_options(const Case& c, const Transform& t, GraphAttentionMode mode,
                                       std::size_t rank = 8) {
  GraphAttentionOptions<T> o;
  o.attention = c.options<T>(t);
  o.mode = mode;
  o.bound_rank = rank;
  return o;
}

template <class T>
Matrix<T> graph_forward(const Case& c, const Graph& g, const GraphAttentionOptions<T>& o,
                        GraphAttentionReport* report) {
  const Matrix<T> q = c.q.cast<T>(), k = c.k.cast<T>(), v = c.v.cast<T>();
  Matrix<T> out(c.n(), c.v.cols, T(-7));  // garbage that must be overwritten
  graph_attention_forward<T>(q.view(), k.view(), v.view(), g, out.view(), o, report);
  return out;
}

template <class T>
struct Grads {
  Matrix<T> dq, dk, dv;
};

Matrix<double> grad_out_for(const Case& c) { return float_exact(c.n(), c.v.cols, 1.0, 4242 + c.n() * 7 + c.m()); }

template <class T>
Grads<T> dense_backward(const Case& c, const Transform& t) {
  const Matrix<T> q = c.q.cast<T>(), k = c.k.cast<T>(), v = c.v.cast<T>(), go = grad_out_for(c).cast<T>();
  Grads<T> g{Matrix<T>(c.n(), c.q.cols), Matrix<T>(c.m(), c.k.cols), Matrix<T>(c.m(), c.v.cols)};
  attention_backward<T>(q.view(), k.view(), v.view(), go.view(), g.dq.view(), g.dk.view(), g.dv.view(),
                        c.options<T>(t));
  return g;
}

template <class T>
Grads<T> graph_backward(const Case& c, const Graph& graph, const GraphAttentionOptions<T>& o,
                        GraphAttentionReport* report) {
  const Matrix<T> q = c.q.cast<T>(), k = c.k.cast<T>(), v = c.v.cast<T>(), go = grad_out_for(c).cast<T>();
  Grads<T> g{Matrix<T>(c.n(), c.q.cols, T(-7)), Matrix<T>(c.m(), c.k.cols, T(-7)), Matrix<T>(c.m(), c.v.cols, T(-7))};
  graph_attention_backward<T>(q.view(), k.view(), v.view(), graph, go.view(), g.dq.view(), g.dk.view(), g.dv.view(), o,
                              report);
  return g;
}

// Attention restricted to the graph's allowed edges, in float64, from the
// whole score matrix and the transform under a mask (the oracle of fast mode).
Dense<double> restricted_forward(const Case& c, const Graph& g, const Transform& t) {
  const std::size_t n = c.n(), m = c.m();
  const double scale = c.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(c.q.cols)) : c.scale;
  Matrix<double> s(n, m);
  Matrix<std::uint8_t> mask(n, m, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double acc = 0;
      for (std::size_t x = 0; x < c.q.cols; ++x) acc += c.q(i, x) * c.k(j, x);
      s(i, j) = scale * acc;
      mask(i, j) = c.allowed(i, j) && g.contains(i, j) ? 1 : 0;
    }
  Dense<double> r{Matrix<double>(n, c.v.cols), Matrix<double>(n, m)};
  transform_forward<double>(t, s.view(), r.probs.view(), mask.view());
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t x = 0; x < c.v.cols; ++x) {
      double acc = 0;
      for (std::size_t j = 0; j < m; ++j) acc += r.probs(i, j) * c.v(j, x);
      r.out(i, x) = acc;
    }
  return r;
}

template <class T>
double row_diff(const Matrix<T>& a, const Matrix<T>& b, std::size_t i) {
  double d = 0;
  for (std::size_t x = 0; x < a.cols; ++x)
    d = std::max(d, std::abs(static_cast<double>(a(i, x)) - static_cast<double>(b(i, x))));
  return d;
}

// How the rows of the exact runs were settled, summed over a test.
struct Tally {
  std::size_t rows = 0, graph = 0, repaired = 0, dense = 0, incomplete_graph = 0;
  std::size_t graph_pairs = 0, repair_pairs = 0, allowed_pairs = 0;
};

// The report of an exact run: n settlements, none unsettled, counts that add
// up, pair counts consistent with the graph; a row settled by the graph has
// no dense weight outside the graph row (every excluded key is exactly 0 in
// dense attention), and repair added at least every key of the dense support
// that the graph lacks.
template <class T>
void check_exact_report(const Case& c, const Graph& g, const GraphAttentionReport& r, const Matrix<T>& probs,
                        Tally& tally) {
  const std::size_t n = c.n();
  REQUIRE(r.settled.size() == n);
  std::size_t graph = 0, repaired = 0, dense = 0, pairs = 0, lo = 0, hi = 0, bound_lo = 0, unsettled = 0;
  std::size_t wrong_empty = 0, wrong_complete = 0, weight_outside = 0, first_outside = n;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t a = c.allowed_count(i), gi = c.graph_count(g, i);
    pairs += gi;
    tally.allowed_pairs += a;
    std::size_t outside = 0;  // dense support outside the graph row
    for (std::size_t j = 0; j < c.m(); ++j)
      if (c.allowed(i, j) && !g.contains(i, j) && probs(i, j) != T(0)) ++outside;
    const RowSettlement s = r.settled[i];
    if (gi == a && s != RowSettlement::graph) ++wrong_complete;
    if (gi == 0 && a > 0 && s == RowSettlement::graph) ++wrong_empty;
    if (gi < a) bound_lo += a - gi;
    switch (s) {
      case RowSettlement::graph:
        ++graph;
        if (outside > 0) {
          ++weight_outside;
          first_outside = std::min(first_outside, i);
        }
        if (gi < a) ++tally.incomplete_graph;
        hi += a - gi;  // exact mode may score keys that then get weight 0
        break;
      case RowSettlement::repaired:
        ++repaired;
        CHECK(gi < a);
        lo += std::max<std::size_t>(outside, 1);
        hi += a - gi - (a > gi ? 1 : 0);
        break;
      case RowSettlement::dense:
        ++dense;
        lo += a - gi;
        hi += a - gi;
        break;
      default:
        ++unsettled;
    }
  }
  CHECK(unsettled == 0);
  CHECK(wrong_complete == 0);
  CHECK(wrong_empty == 0);
  CHECK_MESSAGE(weight_outside == 0, weight_outside,
                " rows settled by the graph have dense weight outside it (first: ", first_outside, ")");
  CHECK(r.graph_rows == graph);
  CHECK(r.repaired_rows == repaired);
  CHECK(r.dense_rows == dense);
  CHECK(r.graph_rows + r.repaired_rows + r.dense_rows == n);
  CHECK(r.exact_rows() == n);
  CHECK(r.graph_pairs == pairs);
  CHECK(r.repair_pairs >= lo);
  CHECK(r.repair_pairs <= hi);
  CHECK(r.bound_pairs >= bound_lo);
  tally.rows += n;
  tally.graph += graph;
  tally.repaired += repaired;
  tally.dense += dense;
  tally.graph_pairs += r.graph_pairs;
  tally.repair_pairs += r.repair_pairs;
}

// got against dense attention_backward in T. The gradients go through more
// rounding than the output (and the backward of entmax with alpha > 2
// divides by p^(alpha - 2)): the tolerance is 4 times the output's (4e-5 in
// float, 4e-12 in double, where alpha = 1.0001's forward alone is good to
// about 1e-12) of the largest gradient, or in float 4 times dense
// attention's own error (against float64) if that is larger. A missing or
// extra key changes a gradient by far more.
template <class T>
void check_grads(const Case& c, const Transform& t, const Grads<T>& got) {
  const Grads<T> want = dense_backward<T>(c, t);
  const double scale = std::max({1.0, max_abs(want.dq), max_abs(want.dk), max_abs(want.dv)});
  double tq = 4 * kTol<T> * scale, tk = tq, tv = tq;
  if constexpr (std::is_same_v<T, float>) {
    const Grads<double> ref = dense_backward<double>(c, t);
    tq = std::max(tq, 4 * max_abs_diff(want.dq.template cast<double>(), ref.dq));
    tk = std::max(tk, 4 * max_abs_diff(want.dk.template cast<double>(), ref.dk));
    tv = std::max(tv, 4 * max_abs_diff(want.dv.template cast<double>(), ref.dv));
  }
  CHECK(max_abs_diff(got.dq, want.dq) <= tq);
  CHECK(max_abs_diff(got.dk, want.dk) <= tk);
  CHECK(max_abs_diff(got.dv, want.dv) <= tv);
}

// Exact mode, forward and backward, against dense attention in one type.
template <class T>
void check_exact_in(const Case& c, const Graph& g, const Transform& t, std::size_t rank, Tally& tally) {
  const std::string type = type_name<T>();
  CAPTURE(type);
  const Dense<T> dense = dense_forward<T>(c, t);
  const GraphAttentionOptions<T> o = graph_options<T>(c, t, GraphAttentionMode::exact, rank);
  GraphAttentionReport report;
  report.graph_rows = 12345;  // overwritten
  const Matrix<T> out = graph_forward<T>(c, g, o, &report);
  // 1e-5 of the largest output in float (1e-12 in float64), or twice dense
  // attention's own float error if that is larger: the graph's scores are
  // gathered dot products, dense attention's a GEMM, and the two may round a
  // score an ulp apart; at large alpha that moves weights by up to
  // ulp / (alpha - 1) / gap between nearly tied scores.
  double tol = kTol<T> * std::max(1.0, max_abs(dense.out));
  if constexpr (std::is_same_v<T, float>)
    tol = std::max(tol, 2 * max_abs_diff(dense.out.template cast<double>(), dense_forward<double>(c, t).out));
  const double diff = max_abs_diff(out, dense.out);
  CHECK(diff <= tol);
  check_exact_report<T>(c, g, report, dense.probs, tally);
  // Without a report: the same rows, bit for bit.
  CHECK(bit_identical(graph_forward<T>(c, g, o, nullptr), out));

  GraphAttentionReport back;
  const Grads<T> got = graph_backward<T>(c, g, o, &back);
  check_grads<T>(c, t, got);
  CHECK(back.settled == report.settled);
  CHECK(back.repair_pairs == report.repair_pairs);
}

void check_exact(const Case& c, const Transform& t, Tally& tally, std::size_t rank = 8, const Graph* graph = nullptr) {
  CAPTURE(c.name);
  CAPTURE(describe(t));
  CAPTURE(c.causal);
  CAPTURE(c.n());
  CAPTURE(c.m());
  CAPTURE(rank);
  const Graph& g = graph ? *graph : c.graph;
  check_exact_in<float>(c, g, t, rank, tally);
  check_exact_in<double>(c, g, t, rank, tally);
}

// The transforms with a threshold (exact and certify modes accept them)
// among the kBasic and kPaths cases of support/cases.hpp.
std::vector<Transform> sparse_transforms() {
  std::vector<Transform> ts;
  for (const cases::TransformCase& c : cases::transform_cases(cases::kBasic | cases::kPaths))
    if (!c.extra_inputs() && has_threshold(c.transform())) ts.push_back(c.transform());
  return ts;
}

void message_tally(const std::string& what, const Tally& t) {
  MESSAGE(what << ": " << t.rows << " rows: " << t.graph << " settled by the graph (" << t.incomplete_graph
               << " of them on an incomplete graph row), " << t.repaired << " repaired, " << t.dense << " dense; "
               << t.graph_pairs << " graph pairs, " << t.repair_pairs << " repaired pairs of " << t.allowed_pairs
               << " allowed");
}

TEST_SUITE("attention") {
  // -------------------------------------------------------------------------
  // Exact mode: forward and backward equal dense attention.

  TEST_CASE("graph attention: exact mode equals dense attention on random inputs and graphs") {
    struct Shape {
      std::size_t n, m;
    };
    Tally tally;
    std::uint64_t seed = 100;
    for (const Transform& t : sparse_transforms())
      for (bool causal : {false, true})
        for (Shape shape : {Shape{20, 20}, Shape{12, 30}, Shape{30, 12}})
          for (double density : {0.0, 0.1, 0.4, 1.0}) {
            CAPTURE(density);
            Case c = random_case("random", shape.n, shape.m, 8, 5, causal, density, ++seed);
            if (seed % 3 == 0) c.scale = -c.scale;  // a negative scale flips the scores
            check_exact(c, t, tally);
          }
    message_tally("random", tally);
    CHECK(tally.repaired > 0);
    CHECK(tally.dense > 0);
    CHECK(tally.incomplete_graph > 0);
  }

  TEST_CASE(
      "graph attention: exact mode equals dense attention on clustered inputs where the graph misses true edges") {
    Tally tally;
    std::size_t missed = 0;
    for (const Transform& t : sparse_transforms())
      for (bool causal : {false, true}) {
        const Case c = clustered_case("clustered", 48, 16, 4, causal, 7);
        // The window misses keys of the query's cluster: fast mode is wrong there.
        const Dense<double> dense = dense_forward<double>(c, t);
        const Matrix<double> fast =
            graph_forward<double>(c, c.graph, graph_options<double>(c, t, GraphAttentionMode::fast), nullptr);
        for (std::size_t i = 0; i < c.n(); ++i) missed += row_diff(fast, dense.out, i) > 1e-3 ? 1 : 0;
        check_exact(c, t, tally);
        // A random graph, and the window plus a random graph.
        const Graph r = random_graph(c.n(), c.m(), 0.15, 8);
        check_exact(c, t, tally, 8, &r);
        const Graph u = graph_union(c.graph, r);
        check_exact(c, t, tally, 4, &u);
      }
    message_tally("clustered", tally);
    MESSAGE("fast-mode rows that differ from dense: " << missed);
    CHECK(missed > 0);
    CHECK(tally.repaired > 0);
    CHECK(tally.incomplete_graph > 0);
  }

  TEST_CASE("graph attention: exact mode is exact for every bound rank (0, 1, d, above d)") {
    Tally tally;
    for (const Transform& t : {Transform::sparsemax(), Transform::entmax15(), Transform::topk_softmax(3)})
      for (std::size_t rank : {0u, 1u, 8u, 40u}) {
        const Case c = random_case("random", 24, 28, 8, 4, rank % 2 == 0, 0.3, 300 + rank);
        check_exact(c, t, tally, rank);
        const Case h = heavy_light_case("heavy and light keys", 24, 30, rank % 2 == 1, 0.3, 310 + rank);
        check_exact(h, t, tally, rank);
      }
    message_tally("ranks", tally);
    CHECK(tally.incomplete_graph > 0);
  }

  TEST_CASE("graph attention: exact mode equals dense attention on adversarial keys (offset, tiny next to big)") {
    Tally tally;
    for (const Transform& t : sparse_transforms())
      for (bool causal : {false, true}) {
        // A huge common offset of the keys: every score is dominated by q . mu.
        Case off = random_case("keys offset by 30", 16, 22, 6, 3, causal, 0.3, 400);
        for (double& x : off.k.data) x += 30.0;
        off.scale = 0.05;
        check_exact(off, t, tally);
        // Tiny-norm keys next to big ones, and queries along some keys.
        Case mix = random_case("tiny keys next to big ones", 18, 24, 6, 3, causal, 0.25, 410);
        for (std::size_t j = 0; j < mix.m(); ++j)
          for (std::size_t x = 0; x < mix.k.cols; ++x)
            mix.k(j, x) = static_cast<float>(mix.k(j, x) * (j % 4 == 0 ? 4.0 : 1e-5));
        for (std::size_t i = 0; i < mix.n(); i += 3)
          for (std::size_t x = 0; x < mix.q.cols; ++x) mix.q(i, x) = mix.k((i * 5) % mix.m(), x);
        check_exact(mix, t, tally);
        // d = 1.
        const Case one = random_case("d = 1", 14, 17, 1, 2, causal, 0.3, 420);
        check_exact(one, t, tally, 1);
        check_exact(heavy_light_case("heavy and light keys", 20, 25, causal, 0.2, 430), t, tally);
      }
    message_tally("adversarial", tally);
  }

  TEST_CASE("graph attention: exact mode equals dense attention when scores tie (repeated keys, equal scores)") {
    Tally tally;
    for (const Transform& t : sparse_transforms())
      for (bool causal : {false, true}) {
        // Keys in equal pairs (2j, 2j + 1) with different values; the graph
        // holds only even keys: each left-out key ties with a kept one.
        Case pairs = random_case("repeated keys", 16, 24, 6, 4, causal, 0.0, 500);
        for (std::size_t j = 1; j < pairs.m(); j += 2)
          for (std::size_t x = 0; x < pairs.k.cols; ++x) pairs.k(j, x) = pairs.k(j - 1, x);
        Pairs even;
        for (std::size_t i = 0; i < pairs.n(); ++i)
          for (std::size_t j = 0; j < pairs.m(); j += 2)
            if ((i + j) % 3 != 0) even.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
        pairs.graph = Graph::from_pairs(pairs.n(), pairs.m(), std::move(even));
        check_exact(pairs, t, tally);
        // Every key equal: every score of a row ties, every key has weight.
        Case same = random_case("all keys equal", 12, 15, 5, 3, causal, 0.5, 510);
        for (std::size_t j = 1; j < same.m(); ++j)
          for (std::size_t x = 0; x < same.k.cols; ++x) same.k(j, x) = same.k(0, x);
        GraphAttentionReport report;
        check_exact(same, t, tally);
        graph_forward<float>(same, same.graph, graph_options<float>(same, t, GraphAttentionMode::exact), &report);
        // No left-out key can be excluded: every incomplete row is scored whole.
        for (std::size_t i = 0; i < same.n(); ++i) {
          CAPTURE(i);
          if (same.graph_count(same.graph, i) < same.allowed_count(i)) CHECK(report.settled[i] == RowSettlement::dense);
        }
      }
    message_tally("ties", tally);
  }

  TEST_CASE(
      "graph attention: exact top-k keeps every key that ties with the k-th score (graph keys scored by the tile "
      "GEMM)") {
    // The smallest case: 9 equal keys, graph rows {0..7} (8 keys in a tile of
    // 2 rows: scored by one GEMM), key 8 left out and repaired. Dense top-1
    // keeps all 9 tied keys; so must exact mode, whichever kernel scored them.
    std::size_t wrong = 0;
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
      Case c = random_case("nine equal keys", 2, 9, 4, 1, false, 0.0, 1600 + seed);
      // Quarters: every product and sum is exact in float, so the nine scores
      // tie in every kernel and summation order (on any instruction set).
      auto quarter = [](double x) { return std::round(4.0 * x) / 4.0; };
      for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t x = 0; x < 4; ++x) c.q(i, x) = quarter(c.q(i, x));
      for (std::size_t j = 0; j < 9; ++j) {
        for (std::size_t x = 0; x < 4; ++x) c.k(j, x) = quarter(c.k(0, x));
        c.v(j, 0) = static_cast<double>(j);
      }
      c.scale = 1.0;
      Pairs pairs;
      for (std::uint32_t i = 0; i < 2; ++i)
        for (std::uint32_t j = 0; j < 8; ++j) pairs.emplace_back(i, j);
      c.graph = Graph::from_pairs(2, 9, std::move(pairs));
      const Transform t = Transform::topk_softmax(1);
      const Matrix<float> dense = dense_forward<float>(c, t).out;
      CHECK(dense(0, 0) == doctest::Approx(4.0));  // the mean of 0..8: every key kept
      const Matrix<float> out =
          graph_forward<float>(c, c.graph, graph_options<float>(c, t, GraphAttentionMode::exact), nullptr);
      wrong += max_abs_diff(out, dense) > 1e-5 ? 1 : 0;
    }
    CHECK_MESSAGE(wrong == 0, wrong, " of 20 random queries get a different top-1 set than dense attention");
  }

  TEST_CASE("graph attention: exact mode equals dense attention when a left-out key lands exactly at the threshold") {
    // d = 3 with the queries' and keys' scores set through one coordinate:
    // q = (c, 5, -3), k = (x, 0, 0), scale 1: s = c x exactly. Key 0 has
    // s = 1/(alpha - 1) and key 1 s = 0: the row {0, 1} has threshold tau = 0
    // (p_0 = 1, p_1 = 0 with weight at the threshold); left-out keys sit at
    // the threshold (x = 0), just above it (1e-3), below it, and tie with key 0.
    Tally tally;
    for (const Transform& t : sparse_transforms()) {
      const double alpha = t.kind == TransformKind::topk_softmax ? 2.0
                           : t.kind == TransformKind::sparsemax  ? 2.0
                           : t.kind == TransformKind::entmax15   ? 1.5
                                                                 : t.alpha;
      const std::vector<double> xs = {1.0 / (alpha - 1.0), 0.0, 0.0, 1e-3, -1.0, 0.0, 1.0 / (alpha - 1.0), -1e-3, 0.0};
      const std::vector<double> cs = {1.0, 2.0, 0.5, -1.0, 1e-3};
      for (bool causal : {false, true}) {
        Case c;
        c.name = "keys at the threshold";
        c.causal = causal;
        c.scale = 1.0;
        const std::size_t m = xs.size(), n = cs.size() * 2;
        c.k = Matrix<double>(m, 3);
        for (std::size_t j = 0; j < m; ++j) c.k(j, 0) = static_cast<float>(xs[j]);
        c.q = Matrix<double>(n, 3);
        for (std::size_t i = 0; i < n; ++i) {
          c.q(i, 0) = cs[i % cs.size()];
          c.q(i, 1) = 5.0;
          c.q(i, 2) = -3.0;
        }
        c.v = float_exact(m, 3, 1.0, 600);
        // Rows hold keys 0 and 1 only (under causal, later queries see more keys).
        Pairs pairs;
        for (std::size_t i = 0; i < n; ++i) {
          pairs.emplace_back(static_cast<std::uint32_t>(i), 0u);
          pairs.emplace_back(static_cast<std::uint32_t>(i), 1u);
        }
        c.graph = Graph::from_pairs(n, m, std::move(pairs));
        for (std::size_t rank : {0u, 1u, 3u}) check_exact(c, t, tally, rank);
        // A left-out key tying with the top score is always repaired (it has weight).
        GraphAttentionReport report;
        graph_forward<double>(c, c.graph, graph_options<double>(c, t, GraphAttentionMode::exact), &report);
        for (std::size_t i = 0; i < n; ++i) {
          CAPTURE(i);
          if (c.allowed(i, 6) && cs[i % cs.size()] > 0) CHECK(report.settled[i] != RowSettlement::graph);
        }
      }
    }
    message_tally("threshold", tally);
    CHECK(tally.repaired > 0);
  }

  TEST_CASE(
      "graph attention: exact mode equals dense attention with key padding, fully padded rows and causal n != m") {
    Tally tally;
    for (const Transform& t : sparse_transforms())
      for (bool causal : {false, true}) {
        // Padding that also hits keys of the graph (they are ignored).
        Case pad = random_case("key padding", 18, 26, 6, 4, causal, 0.3, 700);
        std::mt19937_64 rng(701);
        for (std::size_t j = 0; j < pad.m(); ++j) pad.padding.push_back(rng() % 4 == 0 ? 0 : 1);
        for (std::size_t j = 0; j < pad.m(); ++j)  // padded keys are outliers that would win every row
          if (!pad.padding[j])
            for (std::size_t x = 0; x < pad.k.cols; ++x) pad.k(j, x) = static_cast<float>(pad.k(j, x) * 20.0);
        check_exact(pad, t, tally);
        // Every key padded: every output row is 0, as in dense attention.
        Case none = random_case("every key padded", 9, 11, 4, 3, causal, 0.4, 710);
        none.padding.assign(none.m(), 0);
        check_exact(none, t, tally);
        const Matrix<float> out =
            graph_forward<float>(none, none.graph, graph_options<float>(none, t, GraphAttentionMode::exact), nullptr);
        CHECK(max_abs(out) == 0.0);
        // Only the last keys kept: under causal the first queries see none.
        Case last = random_case("only the last keys kept", 10, 10, 4, 3, causal, 0.3, 720);
        last.padding.assign(last.m(), 0);
        last.padding[7] = last.padding[9] = 1;
        check_exact(last, t, tally);
        // n != m both ways, with a window graph and with an empty graph.
        for (const auto& nm : {std::pair<std::size_t, std::size_t>{10, 25}, {25, 10}, {1, 13}, {13, 1}}) {
          Case c = random_case("n != m", nm.first, nm.second, 5, 3, causal, 0.0, 730 + nm.first);
          c.graph = window_graph(c.n(), c.m(), 2, 2);
          check_exact(c, t, tally);
          const Graph empty = Graph::empty(c.n(), c.m());
          check_exact(c, t, tally, 3, &empty);
        }
      }
    message_tally("masks", tally);
  }

  TEST_CASE("graph attention: exact mode settles empty graph rows and future-only rows by repair alone") {
    for (const Transform& t : {Transform::sparsemax(), Transform::entmax(1.25), Transform::topk_softmax(2)})
      for (bool causal : {false, true}) {
        CAPTURE(describe(t));
        CAPTURE(causal);
        Tally tally;
        // An empty graph: no row with an allowed key is settled by the graph;
        // repair scores what the bounds cannot exclude (at most every key).
        Case c = random_case("empty graph", 14, 9, 4, 3, causal, 0.0, 800);
        check_exact(c, t, tally);
        GraphAttentionReport report;
        graph_forward<float>(c, c.graph, graph_options<float>(c, t, GraphAttentionMode::exact), &report);
        std::size_t with_keys = 0, allowed = 0;
        for (std::size_t i = 0; i < c.n(); ++i) {
          const std::size_t a = c.allowed_count(i);
          with_keys += a > 0 ? 1 : 0;
          allowed += a;
          if (a > 0)
            CHECK((report.settled[i] == RowSettlement::dense || report.settled[i] == RowSettlement::repaired));
          else
            CHECK(report.settled[i] == RowSettlement::graph);
        }
        CHECK(report.dense_rows + report.repaired_rows == with_keys);
        CHECK(report.graph_pairs == 0);
        CHECK(report.repair_pairs <= allowed);
        CHECK(report.repair_pairs > 0);
        // A graph of future keys only (ignored under causal): the same.
        if (causal) {
          Pairs future;
          for (std::size_t i = 0; i < c.n(); ++i)
            for (std::size_t j = c.limit(i); j < c.m(); ++j)
              future.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
          const Graph g = Graph::from_pairs(c.n(), c.m(), std::move(future));
          REQUIRE(g.edges() > 0);
          check_exact(c, t, tally, 8, &g);
          GraphAttentionReport fr;
          graph_forward<float>(c, g, graph_options<float>(c, t, GraphAttentionMode::exact), &fr);
          CHECK(fr.settled == report.settled);
          CHECK(fr.graph_pairs == 0);
          CHECK(fr.repair_pairs == report.repair_pairs);
        }
        // The complete graph: every row settled by the graph, nothing repaired.
        const Graph full = Graph::full(c.n(), c.m(), causal);
        check_exact(c, t, tally, 8, &full);
        graph_forward<float>(c, full, graph_options<float>(c, t, GraphAttentionMode::exact), &report);
        CHECK(report.graph_rows == c.n());
        CHECK(report.repair_pairs == 0);
        CHECK(report.graph_pairs == allowed);
      }
  }

  TEST_CASE("graph attention: exact mode equals dense attention on every CPU instruction set") {
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      Tally tally;
      for (const Transform& t : {Transform::entmax15(), Transform::sparsemax(), Transform::topk_softmax(4)}) {
        const Case c = clustered_case("clustered", 40, 24, 3, true, 900);
        check_exact(c, t, tally);
        const Case h = heavy_light_case("heavy and light keys", 24, 40, false, 0.3, 910);
        check_exact(h, t, tally);
      }
    }
  }

  TEST_CASE("graph attention: exact mode equals dense attention with every bound kernel on every instruction set") {
    // float32, int16, int8 and (where the CPU has it) bf16 bounds, ranks 1, 8 and d;
    // the report names the kernel that ran (float64 for double bounds).
    for (BoundKernel kernel : forcible_bound_kernels())
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope scope(isa);
        if (kernel == BoundKernel::bf16 && isa != CpuIsa::avx512) continue;
        const BoundKernelScope bounds(kernel);
        const std::string isa_name = scope.name(), kernel_name = bound_kernel_name(kernel);
        CAPTURE(isa_name);
        CAPTURE(kernel_name);
        Tally tally;
        for (std::size_t rank : {1u, 8u, 12u}) {
          const Case c = clustered_case("clustered", 40, 12, 3, true, 920 + rank);
          check_exact(c, Transform::entmax15(), tally, rank);
          const Case h = heavy_light_case("heavy and light keys", 24, 40, false, 0.3, 930 + rank);
          check_exact(h, Transform::sparsemax(), tally, rank);
          // bf16 off the identity gives way to the automatic choice: float32 below rank 16.
          const BoundKernel expect = kernel == BoundKernel::bf16 && rank < c.q.cols ? BoundKernel::float32 : kernel;
          GraphAttentionReport fr, dr;
          graph_forward<float>(c, c.graph, graph_options<float>(c, Transform::entmax15(), GraphAttentionMode::exact, rank),
                               &fr);
          graph_forward<double>(c, c.graph,
                                graph_options<double>(c, Transform::entmax15(), GraphAttentionMode::exact, rank), &dr);
          CHECK(fr.bound_kernel == expect);
          CHECK(dr.bound_kernel == BoundKernel::float64);
        }
        CHECK(tally.repaired > 0);
      }
    GraphAttentionReport fast;
    const Case c = clustered_case("clustered", 20, 8, 3, false, 940);
    graph_forward<float>(c, c.graph, graph_options<float>(c, Transform::entmax15(), GraphAttentionMode::fast), &fast);
    CHECK(fast.bound_kernel == BoundKernel::automatic);
  }

  TEST_CASE("graph attention: a row missing a gold edge is never settled by the graph; supersets of gold are exact") {
    struct Shape {
      std::size_t n, m;
    };
    std::size_t gold_rows_settled = 0, rows = 0;
    for (double alpha : {1.5, 1.25, 2.0})
      for (bool causal : {false, true})
        for (Shape shape : {Shape{24, 24}, Shape{16, 40}}) {
          CAPTURE(alpha);
          CAPTURE(causal);
          CAPTURE(shape.n);
          CAPTURE(shape.m);
          const std::size_t d = 8;
          const std::uint64_t seed = 11 + static_cast<std::uint64_t>(alpha * 100) + (causal ? 1000 : 0) + shape.m;
          Case c = random_case("gold", shape.n, shape.m, d, 5, causal, 0.0, seed);
          const Matrix<float> qf = c.q.cast<float>(), kf = c.k.cast<float>();
          HeadSettings settings;
          settings.alpha = alpha;
          settings.causal = causal;
          settings.scale = c.scale;
          const Graph gold = gold_graph(qf.view(), kf.view(), settings);
          REQUIRE(allowed_edge_count(gold, causal) < allowed_pair_count(shape.n, shape.m, causal));  // really sparse
          const Transform t = alpha == 1.5   ? Transform::entmax15()
                              : alpha == 2.0 ? Transform::sparsemax()
                                             : Transform::entmax(alpha);
          const Dense<float> dense = dense_forward<float>(c, t);
          for (double extra : {0.0, 0.15}) {
            CAPTURE(extra);
            const Graph g = extra == 0.0 ? gold : graph_union(gold, random_graph(shape.n, shape.m, extra, seed + 3));
            // Fast mode on a superset of the support already equals dense attention.
            const Matrix<float> fast =
                graph_forward<float>(c, g, graph_options<float>(c, t, GraphAttentionMode::fast), nullptr);
            CHECK(max_abs_diff(fast, dense.out) <= 1e-5);
            Tally tally;
            check_exact(c, t, tally, 8, &g);
            gold_rows_settled += tally.graph / 2;
            rows += shape.n;
          }
          // Dropping the heaviest gold edge of a row with several changes that
          // row in fast mode; exact mode repairs it.
          for (std::size_t i = 0; i < shape.n; ++i) {
            if (gold.degree(i) < 2) continue;
            std::uint32_t heaviest = *gold.row_begin(i);
            for (const std::uint32_t* p = gold.row_begin(i); p != gold.row_end(i); ++p)
              if (dense.probs(i, *p) > dense.probs(i, heaviest)) heaviest = *p;
            Pairs pairs;
            for (std::size_t r = 0; r < shape.n; ++r)
              for (const std::uint32_t* p = gold.row_begin(r); p != gold.row_end(r); ++p)
                if (!(r == i && *p == heaviest)) pairs.emplace_back(static_cast<std::uint32_t>(r), *p);
            const Graph missing = Graph::from_pairs(shape.n, shape.m, std::move(pairs));
            const Matrix<float> fast =
                graph_forward<float>(c, missing, graph_options<float>(c, t, GraphAttentionMode::fast), nullptr);
            CHECK(row_diff(fast, dense.out, i) > 1e-4);
            for (GraphAttentionMode mode : {GraphAttentionMode::certify, GraphAttentionMode::exact}) {
              GraphAttentionReport report;
              const Matrix<float> out = graph_forward<float>(c, missing, graph_options<float>(c, t, mode), &report);
              CHECK(report.settled[i] != RowSettlement::graph);
              if (mode == GraphAttentionMode::exact) CHECK(row_diff(out, dense.out, i) <= 1e-5);
            }
            break;
          }
        }
    MESSAGE("gold-superset rows settled by the graph: " << gold_rows_settled << " of " << rows);
    CHECK(gold_rows_settled > 0);
  }

  TEST_CASE(
      "graph attention: exact mode from a predictor's rows, whose own threshold holds or falls back to the guess") {
    // Rows of several hundred keys, so that a poor graph row's threshold lets
    // more keys through than the row's budget (64) and exact mode falls back
    // to the bounds' guess; the gold graph and its noisy supersets hold.
    Tally held, poor;
    for (const Transform& t : {Transform::entmax15(), Transform::sparsemax(), Transform::entmax(1.25)})
      for (bool causal : {false, true}) {
        CAPTURE(causal);
        const std::uint64_t seed = 31 + (causal ? 1 : 0);
        const Case c = random_case("predicted", 40, 700, 8, 5, causal, 0.0, seed);
        HeadSettings settings;
        settings.alpha = t.tsallis_alpha();
        settings.causal = causal;
        settings.scale = c.scale;
        const Graph gold = gold_graph(c.q.cast<float>().view(), c.k.cast<float>().view(), settings);
        check_exact(c, t, held, 8, &gold);
        const Graph noisy = graph_union(gold, random_graph(c.n(), c.m(), 0.02, seed + 1));
        check_exact(c, t, held, 8, &noisy);
        const Graph sparse = random_graph(c.n(), c.m(), 0.01, seed + 2);
        check_exact(c, t, poor, 8, &sparse);
      }
    message_tally("gold and noisy graphs", held);
    message_tally("random graphs", poor);
    CHECK(held.graph > 0);
    CHECK(poor.repaired > 0);
  }

  TEST_CASE("graph attention: exact mode equals dense attention on the causal teacher's heads with local windows") {
    const Teacher teacher = Teacher::load(std::string(ENTGRAPH_SOURCE_DIR) + "/data/teacher-causal");
    const TeacherOutput fwd = teacher.forward(
        "And God remembered Noah, and every living thing, and all the cattle that was with him in the ark: and God "
        "made a wind to pass over the earth, and the waters asswaged;");
    const std::size_t n = fwd.tokens;
    const Transform t =
        Transform::for_alpha(teacher.config().alpha);
    Tally tally;
    std::size_t beyond_trivial = 0;
    for (const auto& shape : {std::pair<std::size_t, bool>{16, false}, {64, true}}) {
      const std::size_t window = shape.first;
      const bool sink = shape.second;
      Pairs pairs;
      for (std::size_t i = 0; i < n; ++i) {
        if (sink) pairs.emplace_back(static_cast<std::uint32_t>(i), 0u);
        for (std::size_t j = i + 1 > window ? i + 1 - window : 0; j <= i; ++j)
          pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
      }
      const std::size_t trivial = std::min(n, window + (sink ? 1 : 0));
      const Graph g = Graph::from_pairs(n, n, std::move(pairs));
      for (std::size_t layer = 0; layer < fwd.layers; ++layer)
        for (std::size_t head = 0; head < fwd.heads; ++head) {
          CAPTURE(window);
          CAPTURE(layer);
          CAPTURE(head);
          Case c;
          c.name = "teacher";
          const auto copy = [](MatrixView<const float> a) {
            Matrix<double> m(a.rows, a.cols);
            for (std::size_t i = 0; i < a.rows; ++i)
              for (std::size_t x = 0; x < a.cols; ++x) m(i, x) = a(i, x);
            return m;
          };
          c.q = copy(fwd.queries_of(layer, head));
          c.k = copy(fwd.keys_of(layer, head));
          c.v = copy(fwd.values_of(layer, head));
          c.causal = true;
          c.graph = g;
          const std::size_t before = tally.graph;
          check_exact(c, t, tally);
          beyond_trivial += (tally.graph - before) / 2 - trivial;
        }
    }
    message_tally("teacher", tally);
    MESSAGE("teacher rows settled by the window beyond the complete ones: " << beyond_trivial);
    CHECK(beyond_trivial > 0);
  }

  // -------------------------------------------------------------------------
  // Fast mode.

  TEST_CASE("graph attention: fast mode equals attention restricted to the graph (float64 oracle)") {
    for (const Transform& t : {Transform::softmax(), Transform::sparsemax(), Transform::entmax15(),
                               Transform::entmax(1.25), Transform::entmax(1.0), Transform::topk_softmax(3)})
      for (bool causal : {false, true})
        for (double density : {0.0, 0.2, 0.7}) {
          CAPTURE(describe(t));
          CAPTURE(causal);
          CAPTURE(density);
          Case c =
              random_case("random", 17, 23, 6, 4, causal, density, 1000 + static_cast<std::uint64_t>(density * 10));
          c.padding.assign(c.m(), 1);
          c.padding[3] = c.padding[11] = 0;
          const Dense<double> want = restricted_forward(c, c.graph, t);
          for (bool with_report : {false, true}) {
            CAPTURE(with_report);
            GraphAttentionReport storage;
            GraphAttentionReport* report = with_report ? &storage : nullptr;
            const Matrix<double> d =
                graph_forward<double>(c, c.graph, graph_options<double>(c, t, GraphAttentionMode::fast), report);
            CHECK(max_abs_diff(d, want.out) <= 1e-12);
            const Matrix<float> f =
                graph_forward<float>(c, c.graph, graph_options<float>(c, t, GraphAttentionMode::fast), report);
            CHECK(max_abs_diff(f.cast<double>(), want.out) <= 1e-5);
            if (!with_report) continue;
            // Fast mode settles exactly the complete rows and bounds nothing.
            REQUIRE(storage.settled.size() == c.n());
            std::size_t complete = 0;
            for (std::size_t i = 0; i < c.n(); ++i) {
              const bool full = c.graph_count(c.graph, i) == c.allowed_count(i);
              complete += full ? 1 : 0;
              CHECK(storage.settled[i] == (full ? RowSettlement::graph : RowSettlement::unsettled));
            }
            CHECK(storage.graph_rows == complete);
            CHECK(storage.repaired_rows == 0);
            CHECK(storage.dense_rows == 0);
            CHECK(storage.repair_pairs == 0);
            CHECK(storage.bound_pairs == 0);
          }
        }
  }

  TEST_CASE("graph attention: fast-mode backward matches finite differences of the fast-mode forward") {
    std::size_t checked = 0;
    for (const Transform& t : {Transform::softmax(), Transform::sparsemax(), Transform::entmax15(),
                               Transform::entmax(1.25), Transform::topk_softmax(3)})
      for (bool causal : {false, true}) {
        CAPTURE(describe(t));
        CAPTURE(causal);
        Case c = random_case("fd", 7, 9, 4, 3, causal, 0.5, 1100 + (causal ? 1 : 0));
        c.scale = 1.3;
        const Matrix<double> go = grad_out_for(c);
        const GraphAttentionOptions<double> o = graph_options<double>(c, t, GraphAttentionMode::fast);
        const Grads<double> an = graph_backward<double>(c, c.graph, o, nullptr);
        auto loss = [&](const Case& x) {
          const Matrix<double> out = graph_forward<double>(x, x.graph, o, nullptr);
          double l = 0;
          for (std::size_t e = 0; e < out.data.size(); ++e) l += go.data[e] * out.data[e];
          return l;
        };
        auto support = [&](const Case& x) {
          std::vector<bool> s;
          for (double p : restricted_forward(x, x.graph, t).probs.data) s.push_back(p > 0);
          return s;
        };
        const std::vector<bool> s0 = support(c);
        std::mt19937_64 rng(1200);
        const double h = 1e-6;
        for (int which = 0; which < 3; ++which) {
          Matrix<double> Case::*field = which == 0 ? &Case::q : which == 1 ? &Case::k : &Case::v;
          const Matrix<double>& grad = which == 0 ? an.dq : which == 1 ? an.dk : an.dv;
          for (int sample = 0; sample < 6; ++sample) {
            const std::size_t e = static_cast<std::size_t>(rng() % (c.*field).data.size());
            Case plus = c, minus = c;
            (plus.*field).data[e] += h;
            (minus.*field).data[e] -= h;
            if (support(plus) != s0 || support(minus) != s0) continue;  // a kink: no derivative
            const double fd = (loss(plus) - loss(minus)) / (2 * h);
            CAPTURE(which);
            CAPTURE(e);
            CHECK(std::abs(fd - grad.data[e]) <= 1e-6 * std::max(1.0, std::abs(fd)));
            ++checked;
          }
        }
      }
    CHECK(checked > 60);
  }

  TEST_CASE("graph attention: fast-mode backward on the complete graph equals attention_backward") {
    for (const Transform& t : {Transform::softmax(), Transform::sparsemax(), Transform::entmax15(),
                               Transform::entmax(2.5), Transform::topk_softmax(4)})
      for (bool causal : {false, true}) {
        CAPTURE(describe(t));
        CAPTURE(causal);
        Case c = random_case("complete", 19, 13, 6, 5, causal, 0.0, 1300);
        c.padding.assign(c.m(), 1);
        c.padding[5] = 0;
        // The full graph, and one with future keys too (ignored under causal).
        for (bool future : {false, true}) {
          c.graph = Graph::full(c.n(), c.m(), causal && !future);
          GraphAttentionReport report;
          check_grads<float>(
              c, t, graph_backward<float>(c, c.graph, graph_options<float>(c, t, GraphAttentionMode::fast), &report));
          CHECK(report.graph_rows == c.n());
          check_grads<double>(
              c, t, graph_backward<double>(c, c.graph, graph_options<double>(c, t, GraphAttentionMode::fast), nullptr));
          const Matrix<float> out =
              graph_forward<float>(c, c.graph, graph_options<float>(c, t, GraphAttentionMode::fast), nullptr);
          CHECK(max_abs_diff(out, dense_forward<float>(c, t).out) <= 1e-5);
        }
      }
  }

  TEST_CASE("graph attention: fast tiles on window graphs match the row-by-row path and dense on full windows") {
    const std::size_t n = 100, d = 8;
    Case c = random_case("windows", n, n, d, 5, false, 0.0, 21);
    for (bool causal : {false, true})
      for (std::size_t w : {4u, 12u, 200u}) {
        CAPTURE(causal);
        CAPTURE(w);
        c.causal = causal;
        const Graph g = window_graph(n, n, w, w);
        for (const Transform& t : {Transform::entmax15(), Transform::softmax(), Transform::sparsemax()}) {
          CAPTURE(describe(t));
          const GraphAttentionOptions<float> o = graph_options<float>(c, t, GraphAttentionMode::fast);
          GraphAttentionReport report;
          const Matrix<float> rows = graph_forward<float>(c, g, o, &report);  // a report: the row path
          const Matrix<float> tiles = graph_forward<float>(c, g, o, nullptr);
          CHECK(max_abs_diff(rows, tiles) <= 1e-6);
          if (w >= n) {
            CHECK(max_abs_diff(tiles, dense_forward<float>(c, t).out) <= 1e-5);
            CHECK(report.graph_rows == n);
          }
        }
      }
  }

  TEST_CASE("graph attention: bucket graphs (queries regrouped into tiles) match the row path; one bucket is dense") {
    const std::size_t n = 90, d = 8;
    Case c = random_case("buckets", n, n, d, 5, false, 0.0, 31);
    std::mt19937_64 rng(34);
    for (std::size_t buckets : {1u, 3u, 7u})
      for (bool causal : {false, true}) {
        CAPTURE(buckets);
        CAPTURE(causal);
        c.causal = causal;
        Matrix<std::uint32_t> qb(n, 1), kb(n, 1);
        for (auto& b : qb.data) b = static_cast<std::uint32_t>(rng() % buckets);
        for (auto& b : kb.data) b = static_cast<std::uint32_t>(rng() % buckets);
        const Graph g = Graph::from_buckets(qb.view(), kb.view(), buckets);
        const GraphAttentionOptions<float> o = graph_options<float>(c, Transform::entmax15(), GraphAttentionMode::fast);
        GraphAttentionReport report;
        const Matrix<float> rows = graph_forward<float>(c, g, o, &report);
        const Matrix<float> tiles = graph_forward<float>(c, g, o, nullptr);
        CHECK(max_abs_diff(rows, tiles) <= 1e-6);
        if (buckets == 1) {
          CHECK(max_abs_diff(tiles, dense_forward<float>(c, Transform::entmax15()).out) <= 1e-5);
          CHECK(report.graph_rows == n);
        }
        Tally tally;
        check_exact(c, Transform::entmax15(), tally, 8, &g);
      }
  }

  TEST_CASE("graph attention: softmax on the complete graph is dense softmax; a missing key leaves the row unsettled") {
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      Case c = random_case("softmax", 10, 14, 6, 4, causal, 0.0, 21);
      const Transform t = Transform::softmax();
      const GraphAttentionOptions<float> o = graph_options<float>(c, t, GraphAttentionMode::fast);
      const Dense<float> dense = dense_forward<float>(c, t);
      GraphAttentionReport report;
      Matrix<float> out = graph_forward<float>(c, Graph::full(10, 14, causal), o, &report);
      CHECK(max_abs_diff(out, dense.out) <= 1e-6);
      CHECK(report.graph_rows == 10);
      // Future keys in the graph are ignored under the causal mask.
      out = graph_forward<float>(c, Graph::full(10, 14, false), o, &report);
      CHECK(max_abs_diff(out, dense.out) <= 1e-6);
      CHECK(report.graph_rows == 10);
      // Query 7 loses key 2 (visible to it causal or not).
      Pairs pairs;
      const Graph full = Graph::full(10, 14, causal);
      for (std::size_t i = 0; i < 10; ++i)
        for (const std::uint32_t* p = full.row_begin(i); p != full.row_end(i); ++p)
          if (!(i == 7 && *p == 2)) pairs.emplace_back(static_cast<std::uint32_t>(i), *p);
      out = graph_forward<float>(c, Graph::from_pairs(10, 14, std::move(pairs)), o, &report);
      CHECK(report.settled[7] == RowSettlement::unsettled);
      CHECK(report.graph_rows == 9);
      CHECK(row_diff(out, dense.out, 7) > 1e-4);
      for (std::size_t i = 0; i < 10; ++i)
        if (i != 7) CHECK(row_diff(out, dense.out, i) <= 1e-6);
    }
  }

  TEST_CASE("graph attention: queries without candidate keys get zero rows") {
    // Causal with n > m: queries 0..2 see no key at all (settled), the others see some.
    Case c = random_case("no keys", 8, 5, 4, 2, true, 0.0, 31);
    const Transform t = Transform::sparsemax();
    GraphAttentionReport report;
    const Matrix<float> out =
        graph_forward<float>(c, c.graph, graph_options<float>(c, t, GraphAttentionMode::fast), &report);
    CHECK(max_abs(out) == 0.0);
    for (std::size_t i = 0; i < 8; ++i)
      CHECK(report.settled[i] == (i < 3 ? RowSettlement::graph : RowSettlement::unsettled));
    const Matrix<float> exact =
        graph_forward<float>(c, c.graph, graph_options<float>(c, t, GraphAttentionMode::exact), &report);
    CHECK(max_abs_diff(exact, dense_forward<float>(c, t).out) <= 1e-6);
    CHECK(report.dense_rows + report.repaired_rows == 5);
    CHECK(report.graph_rows == 3);
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t x = 0; x < 2; ++x) CHECK(exact(i, x) == 0.0f);
  }

  // -------------------------------------------------------------------------
  // Certify mode.

  TEST_CASE("graph attention: certify mode has fast mode's output and proves only rows equal to dense attention") {
    std::size_t proven = 0, proven_incomplete = 0, unproven = 0, unproven_wrong = 0;
    for (const Transform& t : sparse_transforms())
      for (bool causal : {false, true})
        for (int which = 0; which < 3; ++which) {
          const Case c = which == 0   ? heavy_light_case("heavy and light keys", 20, 30, causal, 0.25, 1400)
                         : which == 1 ? clustered_case("clustered", 40, 16, 4, causal, 1410)
                                      : random_case("random", 18, 22, 6, 4, causal, 0.5, 1420);
          CAPTURE(c.name);
          CAPTURE(describe(t));
          CAPTURE(causal);
          const GraphAttentionOptions<float> fo = graph_options<float>(c, t, GraphAttentionMode::fast),
                                             co = graph_options<float>(c, t, GraphAttentionMode::certify),
                                             eo = graph_options<float>(c, t, GraphAttentionMode::exact);
          GraphAttentionReport fast_report, cert, exact;
          const Matrix<float> fast = graph_forward<float>(c, c.graph, fo, &fast_report);
          const Matrix<float> fast_tiles = graph_forward<float>(c, c.graph, fo, nullptr);
          const Matrix<float> certified = graph_forward<float>(c, c.graph, co, &cert);
          CHECK(bit_identical(certified, fast));
          CHECK(bit_identical(graph_forward<float>(c, c.graph, co, nullptr), fast));
          CHECK(max_abs_diff(certified, fast_tiles) <= 1e-6);
          graph_forward<float>(c, c.graph, eo, &exact);
          const Dense<float> dense = dense_forward<float>(c, t);
          const double tol = 1e-5 * std::max(1.0, max_abs(dense.out));
          REQUIRE(cert.settled.size() == c.n());
          CHECK(cert.repaired_rows == 0);
          CHECK(cert.dense_rows == 0);
          CHECK(cert.repair_pairs == 0);
          CHECK(cert.graph_pairs == fast_report.graph_pairs);
          std::size_t graph_rows = 0;
          for (std::size_t i = 0; i < c.n(); ++i) {
            CAPTURE(i);
            const bool complete = c.graph_count(c.graph, i) == c.allowed_count(i);
            // A row certify proves has no weight outside the graph, which is
            // what exact mode calls settled by the graph.
            if (cert.settled[i] == RowSettlement::graph) CHECK(exact.settled[i] == RowSettlement::graph);
            if (complete) CHECK(cert.settled[i] == RowSettlement::graph);
            if (cert.settled[i] == RowSettlement::graph) {
              ++graph_rows;
              ++proven;
              proven_incomplete += complete ? 0 : 1;
              CHECK(row_diff(certified, dense.out, i) <= tol);
              for (std::size_t j = 0; j < c.m(); ++j)
                if (c.allowed(i, j) && !c.graph.contains(i, j)) CHECK(dense.probs(i, j) == 0.0f);
            } else {
              CHECK(cert.settled[i] == RowSettlement::unsettled);
              ++unproven;
              unproven_wrong += row_diff(certified, dense.out, i) > tol ? 1 : 0;
            }
          }
          CHECK(cert.graph_rows == graph_rows);
        }
    MESSAGE("certify: " << proven << " rows proven (" << proven_incomplete << " on incomplete graph rows), " << unproven
                        << " not, " << unproven_wrong << " of them differ from dense");
    CHECK(proven_incomplete > 0);
    CHECK(unproven_wrong > 0);  // the graphs really miss weight: the proof matters
  }

  // -------------------------------------------------------------------------
  // Threads.

  TEST_CASE("graph attention: exact forward and backward are bit-identical for 1, 2 and 3 threads") {
    const Case clustered = clustered_case("clustered", 256, 16, 6, true, 1500);
    Case random = random_case("random", 200, 230, 12, 8, false, 0.05, 1510);
    random.padding.assign(random.m(), 1);
    for (std::size_t j = 0; j < random.m(); j += 7) random.padding[j] = 0;
    for (const Case* c : {&clustered, static_cast<const Case*>(&random)})
      for (const Transform& t : {Transform::entmax15(), Transform::topk_softmax(6)}) {
        CAPTURE(c->name);
        CAPTURE(describe(t));
        Matrix<float> out1;
        Grads<float> g1;
        Matrix<double> outd1;
        Grads<double> gd1;
        GraphAttentionReport r1;
        for (std::size_t threads : {1, 2, 3}) {
          CAPTURE(threads);
          ThreadsScope ts(threads);
          GraphAttentionReport r;
          const GraphAttentionOptions<float> o = graph_options<float>(*c, t, GraphAttentionMode::exact);
          const GraphAttentionOptions<double> od = graph_options<double>(*c, t, GraphAttentionMode::exact);
          const Matrix<float> out = graph_forward<float>(*c, c->graph, o, &r);
          const Grads<float> g = graph_backward<float>(*c, c->graph, o, nullptr);
          const Matrix<double> outd = graph_forward<double>(*c, c->graph, od, nullptr);
          const Grads<double> gd = graph_backward<double>(*c, c->graph, od, nullptr);
          if (threads == 1) {
            out1 = out;
            g1 = g;
            outd1 = outd;
            gd1 = gd;
            r1 = r;
            CHECK(r.repaired_rows > 0);
            continue;
          }
          CHECK(bit_identical(out, out1));
          CHECK(bit_identical(g.dq, g1.dq));
          CHECK(bit_identical(g.dk, g1.dk));
          CHECK(bit_identical(g.dv, g1.dv));
          CHECK(bit_identical(outd, outd1));
          CHECK(bit_identical(gd.dq, gd1.dq));
          CHECK(bit_identical(gd.dk, gd1.dk));
          CHECK(bit_identical(gd.dv, gd1.dv));
          CHECK(r.settled == r1.settled);
          CHECK(r.repair_pairs == r1.repair_pairs);
        }
      }
  }

  // -------------------------------------------------------------------------
  // Errors.

  TEST_CASE("graph attention: exact mode at alpha = 1000 equals dense attention, near-ties included") {
    // At alpha = 1000 a threshold tau lies within far less than double's
    // resolution of a score near a tie; the transform and exact mode's proven
    // thresholds work relative to the support. Random and clustered inputs,
    // and keys built so that scores nearly tie (key j = key 0 scaled by
    // 1 - j 1e-4: the weights are spread over several keys).
    Tally tally;
    const Transform t = Transform::entmax(1000.0);
    std::uint64_t seed = 900;
    for (bool causal : {false, true}) {
      for (double density : {0.1, 0.4})
        check_exact(random_case("random", 24, 30, 8, 5, causal, density, ++seed), t, tally);
      check_exact(clustered_case("clustered", 48, 16, 4, causal, ++seed), t, tally);
      Case c = random_case("near-ties", 12, 40, 4, 3, causal, 0.2, ++seed);
      for (std::size_t j = 1; j < c.m(); ++j)
        for (std::size_t x = 0; x < c.k.cols; ++x)
          c.k(j, x) = static_cast<float>(c.k(0, x) * (1.0 - static_cast<double>(j % 8) * 1e-4));
      check_exact(c, t, tally);
    }
    message_tally("alpha 1000", tally);
    CHECK(tally.repaired > 0);
  }

  TEST_CASE("graph attention refuses inputs whose scores may overflow, naming q, k and the scale") {
    // Entries near 1e38 are finite, but their products are not: exact mode
    // must not report rows exact on infinite scores, and no mode may compute on them.
    for (GraphAttentionMode mode : {GraphAttentionMode::fast, GraphAttentionMode::certify, GraphAttentionMode::exact}) {
      Matrix<float> q = random_matrix<float>(6, 4, 1.0, 51), k = random_matrix<float>(7, 4, 1.0, 52);
      const Matrix<float> v = random_matrix<float>(7, 3, 1.0, 53);
      q(3, 2) = std::numeric_limits<float>::max();
      k(5, 1) = -3e38f;
      GraphAttentionOptions<float> o;
      o.mode = mode;
      o.attention.transform = Transform::entmax(1000.0);
      Matrix<float> out(6, 3, 7.0f);
      const Graph g = random_graph(6, 7, 0.5, 54);
      const std::string msg = error_message([&] { graph_attention_forward<float>(q.view(), k.view(), v.view(), g, out.view(), o); });
      CAPTURE(msg);
      CHECK(msg.rfind("graph_attention_forward: the scores options.attention.scale * q . k may overflow float", 0) == 0);
      CHECK(msg.find("q row 3") != std::string::npos);
      CHECK(msg.find("k row 5") != std::string::npos);
      CHECK(out(0, 0) == 7.0f);  // nothing written
      // The same inputs scaled into range compute, and exact mode equals dense there.
      q(3, 2) = 1e15f;
      k(5, 1) = -3e15f;
      o.attention.scale = 1e-3;
      GraphAttentionReport report;
      graph_attention_forward<float>(q.view(), k.view(), v.view(), g, out.view(), o, &report);
      for (std::size_t i = 0; i < out.rows; ++i)
        for (std::size_t j = 0; j < out.cols; ++j) CHECK(std::isfinite(out(i, j)));
    }
  }

  TEST_CASE("graph attention refuses values that may make the output overflow, in every mode") {
    // issue 29: values at FLT_MAX gave infinite outputs that exact mode counted as exact rows.
    for (GraphAttentionMode mode : {GraphAttentionMode::fast, GraphAttentionMode::certify, GraphAttentionMode::exact}) {
      const Matrix<float> q = random_matrix<float>(6, 4, 1.0, 61), k = random_matrix<float>(7, 4, 1.0, 62);
      Matrix<float> v = random_matrix<float>(7, 3, 1.0, 63);
      v(4, 2) = -std::numeric_limits<float>::max();
      GraphAttentionOptions<float> o;
      o.mode = mode;
      o.attention.transform = Transform::entmax(1.5);
      Matrix<float> out(6, 3, 7.0f);
      const Graph g = random_graph(6, 7, 0.5, 64);
      const std::string msg = error_message([&] { graph_attention_forward<float>(q.view(), k.view(), v.view(), g, out.view(), o); });
      CAPTURE(msg);
      CHECK(msg.rfind("graph_attention_forward: v may make the output overflow float: |v[4][2]|", 0) == 0);
      CHECK(out(0, 0) == 7.0f);
    }
  }

  TEST_CASE("graph attention rejects bad arguments by name and writes nothing") {
    const Matrix<float> q = random_matrix<float>(6, 4, 1.0, 41);
    const Matrix<float> k = random_matrix<float>(7, 4, 1.0, 42);
    const Matrix<float> v = random_matrix<float>(7, 3, 1.0, 43);
    const Matrix<float> k_bad = random_matrix<float>(7, 5, 1.0, 44);
    const Matrix<float> v_bad = random_matrix<float>(8, 3, 1.0, 45);
    Matrix<float> q_nan = q;
    q_nan(2, 1) = std::nanf("");
    const Graph g = random_graph(6, 7, 0.5, 46);
    Graph unsorted = Graph::full(6, 7, false);
    std::swap(unsorted.indices[0], unsorted.indices[1]);
    Graph out_of_range = Graph::full(6, 7, false);
    out_of_range.indices.back() = 9;
    GraphAttentionOptions<float> o;
    GraphAttentionOptions<float> span = o, csoft = o, csparse = o, bad_alpha = o, bad_k = o, bad_scale = o;
    span.attention.transform = Transform{TransformKind::adaptive_span, 1.0, 0};
    csoft.attention.transform = Transform{TransformKind::constrained_softmax, 1.0, 0};
    csparse.attention.transform = Transform{TransformKind::constrained_sparsemax, 2.0, 0};
    bad_alpha.attention.transform = Transform::entmax(0.5);
    bad_k.attention.transform = Transform::topk_softmax(0);
    bad_scale.attention.scale = std::numeric_limits<double>::infinity();
    std::vector<GraphAttentionOptions<float>> no_threshold;
    for (GraphAttentionMode mode : {GraphAttentionMode::exact, GraphAttentionMode::certify})
      for (const Transform& t : {Transform::softmax(), Transform::entmax(1.0)}) {
        GraphAttentionOptions<float> x = o;
        x.mode = mode;
        x.attention.transform = t;
        no_threshold.push_back(x);
      }

    struct Case {
      const char* name;
      const Matrix<float>* q;
      const Matrix<float>* k;
      const Matrix<float>* v;
      const Graph* g;
      std::size_t out_rows, out_cols;
      const GraphAttentionOptions<float>* o;
      const char* expect;
    };
    const Graph wrong_queries = Graph::empty(5, 7), wrong_keys = Graph::empty(6, 8);
    std::vector<Case> cases = {
        {"k cols", &q, &k_bad, &v, &g, 6, 3, &o, "k.cols"},
        {"v rows", &q, &k, &v_bad, &g, 6, 3, &o, "v.rows"},
        {"out rows", &q, &k, &v, &g, 5, 3, &o, "out"},
        {"out cols", &q, &k, &v, &g, 6, 2, &o, "out"},
        {"graph queries", &q, &k, &v, &wrong_queries, 6, 3, &o, "graph.queries"},
        {"graph keys", &q, &k, &v, &wrong_keys, 6, 3, &o, "graph.keys"},
        {"unsorted graph", &q, &k, &v, &unsorted, 6, 3, &o, "not sorted"},
        {"graph key out of range", &q, &k, &v, &out_of_range, 6, 3, &o, "graph"},
        {"adaptive span", &q, &k, &v, &g, 6, 3, &span, "options.attention.transform"},
        {"constrained softmax", &q, &k, &v, &g, 6, 3, &csoft, "options.attention.transform"},
        {"constrained sparsemax", &q, &k, &v, &g, 6, 3, &csparse, "options.attention.transform"},
        {"alpha", &q, &k, &v, &g, 6, 3, &bad_alpha, "options.attention.transform.alpha"},
        {"top-k 0", &q, &k, &v, &g, 6, 3, &bad_k, "options.attention.transform.k"},
        {"scale", &q, &k, &v, &g, 6, 3, &bad_scale, "options.attention.scale"},
        {"nan q", &q_nan, &k, &v, &g, 6, 3, &o, "q"},
    };
    for (const GraphAttentionOptions<float>& x : no_threshold)
      cases.push_back({"no threshold", &q, &k, &v, &g, 6, 3, &x, "no threshold"});
    // Every mode rejects the transforms a graph cannot run.
    std::vector<GraphAttentionOptions<float>> modes;
    for (GraphAttentionMode mode : {GraphAttentionMode::certify, GraphAttentionMode::exact})
      for (const GraphAttentionOptions<float>* x : {&span, &csoft, &csparse}) {
        modes.push_back(*x);
        modes.back().mode = mode;
      }
    for (const GraphAttentionOptions<float>& x : modes)
      cases.push_back(
          {"unsupported transform in certify/exact", &q, &k, &v, &g, 6, 3, &x, "options.attention.transform"});

    for (const Case& c : cases) {
      CAPTURE(c.name);
      CAPTURE(static_cast<int>(c.o->mode));
      Matrix<float> out(c.out_rows, c.out_cols, 5.0f);
      GraphAttentionReport report;
      report.graph_rows = 99;
      const std::string msg = error_message([&] {
        graph_attention_forward<float>(c.q->view(), c.k->view(), c.v->view(), *c.g, out.view(), *c.o, &report);
      });
      CAPTURE(msg);
      CHECK(msg.rfind("graph_attention_forward: ", 0) == 0);
      CHECK(msg.find(c.expect) != std::string::npos);
      CHECK(std::all_of(out.data.begin(), out.data.end(), [](float x) { return x == 5.0f; }));
      CHECK(report.graph_rows == 99);
      CHECK(report.settled.empty());
      // The backward rejects the same arguments (with a well-shaped output).
      if (c.out_rows == 6 && c.out_cols == 3) {
        const Matrix<float> go = random_matrix<float>(6, 3, 1.0, 47);
        Matrix<float> dq(6, c.q->cols, 5.0f), dk(c.k->rows, c.k->cols, 5.0f), dv(c.v->rows, c.v->cols, 5.0f);
        const std::string bmsg = error_message([&] {
          graph_attention_backward<float>(c.q->view(), c.k->view(), c.v->view(), *c.g, go.view(), dq.view(), dk.view(),
                                          dv.view(), *c.o, &report);
        });
        CAPTURE(bmsg);
        CHECK(bmsg.rfind("graph_attention_backward: ", 0) == 0);
        CHECK(bmsg.find(c.expect) != std::string::npos);
        for (const Matrix<float>* m : {&dq, &dk, &dv})
          CHECK(std::all_of(m->data.begin(), m->data.end(), [](float x) { return x == 5.0f; }));
        CHECK(report.graph_rows == 99);
      }
    }
    // The no-threshold message names the transform.
    Matrix<float> out(6, 3);
    CHECK(error_message([&] {
            graph_attention_forward<float>(q.view(), k.view(), v.view(), g, out.view(), no_threshold[0]);
          }).find("softmax") != std::string::npos);
  }

  TEST_CASE("graph attention backward rejects grad_* of the wrong shape and a non-finite grad_out by name") {
    const Matrix<float> q = random_matrix<float>(6, 4, 1.0, 51), k = random_matrix<float>(7, 4, 1.0, 52),
                        v = random_matrix<float>(7, 3, 1.0, 53), go = random_matrix<float>(6, 3, 1.0, 54);
    const Graph g = random_graph(6, 7, 0.5, 55);
    Matrix<float> go_nan = go, go_inf = go;
    go_nan(3, 2) = std::nanf("");
    go_inf(0, 0) = std::numeric_limits<float>::infinity();
    struct Shapes {
      const char* name;
      const Matrix<float>* go;
      std::size_t go_rows, go_cols, dq_rows, dq_cols, dk_rows, dk_cols, dv_rows, dv_cols;
      const char* expect;
    };
    for (GraphAttentionMode mode : {GraphAttentionMode::fast, GraphAttentionMode::certify, GraphAttentionMode::exact})
      for (const Shapes& s : {Shapes{"grad_out rows", nullptr, 5, 3, 6, 4, 7, 4, 7, 3, "grad_out"},
                              Shapes{"grad_out cols", nullptr, 6, 4, 6, 4, 7, 4, 7, 3, "grad_out"},
                              Shapes{"grad_q rows", &go, 6, 3, 7, 4, 7, 4, 7, 3, "grad_q"},
                              Shapes{"grad_q cols", &go, 6, 3, 6, 3, 7, 4, 7, 3, "grad_q"},
                              Shapes{"grad_k rows", &go, 6, 3, 6, 4, 6, 4, 7, 3, "grad_k"},
                              Shapes{"grad_k cols", &go, 6, 3, 6, 4, 7, 5, 7, 3, "grad_k"},
                              Shapes{"grad_v rows", &go, 6, 3, 6, 4, 7, 4, 8, 3, "grad_v"},
                              Shapes{"grad_v cols", &go, 6, 3, 6, 4, 7, 4, 7, 2, "grad_v"},
                              Shapes{"NaN grad_out", &go_nan, 6, 3, 6, 4, 7, 4, 7, 3, "grad_out"},
                              Shapes{"inf grad_out", &go_inf, 6, 3, 6, 4, 7, 4, 7, 3, "grad_out"}}) {
        CAPTURE(s.name);
        CAPTURE(static_cast<int>(mode));
        const Matrix<float> go_shape = s.go ? *s.go : random_matrix<float>(s.go_rows, s.go_cols, 1.0, 56);
        Matrix<float> dq(s.dq_rows, s.dq_cols, 5.0f), dk(s.dk_rows, s.dk_cols, 5.0f), dv(s.dv_rows, s.dv_cols, 5.0f);
        GraphAttentionOptions<float> o;
        o.mode = mode;
        GraphAttentionReport report;
        report.dense_rows = 77;
        const std::string msg = error_message([&] {
          graph_attention_backward<float>(q.view(), k.view(), v.view(), g, go_shape.view(), dq.view(), dk.view(),
                                          dv.view(), o, &report);
        });
        CAPTURE(msg);
        CHECK(msg.rfind("graph_attention_backward: ", 0) == 0);
        CHECK(msg.find(s.expect) != std::string::npos);
        for (const Matrix<float>* m : {&dq, &dk, &dv})
          CHECK(std::all_of(m->data.begin(), m->data.end(), [](float x) { return x == 5.0f; }));
        CHECK(report.dense_rows == 77);
      }
  }
}

}  // namespace
