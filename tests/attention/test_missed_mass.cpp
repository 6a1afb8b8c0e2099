// Fast mode's error report: graph attention's per-row bound on the missed
// mass (the weight dense attention gives to the allowed keys a graph row
// leaves out), computed by certify mode, against the true missed mass of an
// independent float64 entmax (bisection on the threshold) on random and
// clustered heads: never below it, 0 exactly on the rows certify proves
// (where the true mass is 0 too), close to it with identity bounds; the
// output error bound against the float64 outputs; what fast, exact, top-k
// and softmax report.
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
#include "entgraph/graph.hpp"
#include "entgraph/graph_attention.hpp"
#include "support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

using Pairs = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

struct Head {
  std::string name;
  Matrix<double> q, k, v;  // float-exact
  std::vector<std::uint8_t> padding;
  bool causal = false;
  double scale = 1.0;

  std::size_t n() const { return q.rows; }
  std::size_t m() const { return k.rows; }
  bool allowed(std::size_t i, std::size_t j) const {
    return (!causal || j <= i + (m() - n())) && (padding.empty() || padding[j] != 0);
  }
};

Head random_head(std::size_t n, std::size_t m, std::size_t d, bool causal, bool padded, std::uint64_t seed) {
  Head h;
  h.name = "random";
  h.q = float_exact(n, d, 1.0, seed);
  h.k = float_exact(m, d, 1.0, seed + 1);
  h.v = float_exact(m, 5, 1.0, seed + 2);
  h.causal = causal;
  h.scale = 2.0 / std::sqrt(static_cast<double>(d));
  if (padded) {
    std::mt19937_64 rng(seed + 3);
    std::bernoulli_distribution keep(0.8);
    for (std::size_t j = 0; j < m; ++j) h.padding.push_back(j == 0 || keep(rng) ? 1 : 0);
  }
  return h;
}

Head clustered_head(std::size_t n, std::size_t d, bool causal, std::uint64_t seed) {
  const Capture cap = clustered_capture(1, 1, d, {n}, 4, causal, seed);
  Head h;
  h.name = "clustered";
  h.q = Matrix<double>(n, d);
  h.k = Matrix<double>(n, d);
  for (std::size_t x = 0; x < n * d; ++x) {
    h.q.data[x] = cap.queries[x];
    h.k.data[x] = cap.keys[x];
  }
  h.v = float_exact(n, 6, 1.0, seed + 1);
  h.causal = causal;
  h.scale = 1.0 / std::sqrt(static_cast<double>(d));
  return h;
}

// alpha-entmax of one row in float64, by bisection on the score threshold
// theta (p_j = [(alpha - 1)(s_j - theta)]_+^(1/(alpha - 1)), Peters et al.
// 2019): theta lies in [max - 1/(alpha - 1), max], where the sum of the
// weights falls from >= 1 to 0. Independent of the library's transforms.
std::vector<double> entmax_reference(const std::vector<double>& s, double alpha) {
  const double a = alpha - 1.0, inv = 1.0 / a;
  const double top = *std::max_element(s.begin(), s.end());
  auto weight = [&](double x, double theta) { return x > theta ? std::pow(a * (x - theta), inv) : 0.0; };
  double lo = top - inv, hi = top;
  for (int it = 0; it < 2000; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    double f = 0.0;
    for (double x : s) f += weight(x, mid);
    (f >= 1.0 ? lo : hi) = mid;
  }
  std::vector<double> p(s.size());
  double total = 0.0;
  for (std::size_t j = 0; j < s.size(); ++j) total += p[j] = weight(s[j], lo);
  for (double& x : p) x /= total;
  return p;
}

// Dense float64 attention of a head: P (n x m, 0 where not allowed) and O.
struct Reference {
  Matrix<double> p, out;
};

Reference dense_reference(const Head& h, double alpha) {
  Reference r{Matrix<double>(h.n(), h.m()), Matrix<double>(h.n(), h.v.cols)};
  for (std::size_t i = 0; i < h.n(); ++i) {
    std::vector<double> s;
    std::vector<std::size_t> keys;
    for (std::size_t j = 0; j < h.m(); ++j) {
      if (!h.allowed(i, j)) continue;
      double acc = 0.0;
      for (std::size_t x = 0; x < h.q.cols; ++x) acc += h.q(i, x) * h.k(j, x);
      s.push_back(h.scale * acc);
      keys.push_back(j);
    }
    if (s.empty()) continue;
    const std::vector<double> p = entmax_reference(s, alpha);
    for (std::size_t e = 0; e < keys.size(); ++e) {
      r.p(i, keys[e]) = p[e];
      for (std::size_t x = 0; x < h.v.cols; ++x) r.out(i, x) += p[e] * h.v(keys[e], x);
    }
  }
  return r;
}

// The weight the dense row puts on the allowed keys outside graph row i.
double true_missed(const Head& h, const Graph& g, const Reference& ref, std::size_t i) {
  double mu = 0.0;
  for (std::size_t j = 0; j < h.m(); ++j)
    if (h.allowed(i, j) && !g.contains(i, j)) mu += ref.p(i, j);
  return mu;
}

// Keys [p - w, p + w] of query i at position p = i + (m - n).
Graph window_graph(std::size_t n, std::size_t m, std::size_t w) {
  Pairs pairs;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t p = i + (m - n);
    for (std::size_t j = p > w ? p - w : 0; j <= std::min(m - 1, p + w); ++j)
      pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
  }
  return Graph::from_pairs(n, m, std::move(pairs));
}

// What a good predictor gives: each key of the dense support with
// probability `recall`, and other keys with probability 0.1.
Graph predicted_graph(const Head& h, const Reference& ref, double recall, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution hit(recall), extra(0.1);
  Pairs pairs;
  for (std::size_t i = 0; i < h.n(); ++i)
    for (std::size_t j = 0; j < h.m(); ++j)
      if (ref.p(i, j) > 0 ? hit(rng) : extra(rng))
        pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
  return Graph::from_pairs(h.n(), h.m(), std::move(pairs));
}

template <class T>
Matrix<T> run(const Head& h, const Graph& g, const Transform& t, GraphAttentionMode mode, std::size_t rank,
              GraphAttentionReport* report) {
  GraphAttentionOptions<T> o;
  o.attention.transform = t;
  o.attention.scale = h.scale;
  o.attention.causal = h.causal;
  o.attention.key_padding = h.padding.empty() ? nullptr : h.padding.data();
  o.mode = mode;
  o.bound_rank = rank;
  const Matrix<T> q = h.q.cast<T>(), k = h.k.cast<T>(), v = h.v.cast<T>();
  Matrix<T> out(h.n(), h.v.cols, T(-7));
  graph_attention_forward<T>(q.view(), k.view(), v.view(), g, out.view(), o, report);
  return out;
}

// The report's totals agree with its rows.
void check_totals(const GraphAttentionReport& r) {
  std::size_t bounded = 0;
  double sum = 0.0, largest = 0.0;
  for (double mu : r.missed_mass)
    if (!std::isnan(mu)) {
      ++bounded;
      sum += mu;
      largest = std::max(largest, mu);
    }
  CHECK(r.bounded_rows == bounded);
  if (bounded == 0) {
    CHECK(std::isnan(r.max_missed_mass));
    CHECK(std::isnan(r.mean_missed_mass));
  } else {
    CHECK(r.max_missed_mass == largest);
    CHECK(r.mean_missed_mass == doctest::Approx(sum / static_cast<double>(bounded)).epsilon(1e-12));
  }
  CHECK(std::isnan(r.output_error_bound) == (bounded < r.missed_mass.size()));
}

// Ratios bound / true missed mass over the rows that miss at least 1e-3.
struct Tightness {
  std::vector<double> ratios;
  double median() {
    if (ratios.empty()) return std::numeric_limits<double>::infinity();
    std::sort(ratios.begin(), ratios.end());
    return ratios[ratios.size() / 2];
  }
};

// Certify on one head and graph in T: every row's bound against the float64
// truth, the proven rows, the totals and the output error bound.
template <class T>
void check_bounds(const Head& h, const Graph& g, const Transform& t, std::size_t rank, const Reference& ref,
                  Tightness& tight, std::size_t& proven, std::size_t& missing) {
  const char* type = std::is_same_v<T, float> ? "float" : "double";
  CAPTURE(type);
  GraphAttentionReport r;
  const Matrix<T> out = run<T>(h, g, t, GraphAttentionMode::certify, rank, &r);
  REQUIRE(r.missed_mass.size() == h.n());
  CHECK(r.bounded_rows == h.n());  // alpha-entmax: every row has a bound
  check_totals(r);
  std::size_t below = 0, first_below = h.n(), wrong_zero = 0, weight_on_proven = 0;
  for (std::size_t i = 0; i < h.n(); ++i) {
    const double mu = true_missed(h, g, ref, i), bound = r.missed_mass[i];
    CHECK(bound >= 0.0);
    CHECK(bound <= 1.0);
    // Rounding of the float64 reference itself, no more.
    if (!(bound >= mu - 1e-12)) {
      ++below;
      first_below = std::min(first_below, i);
    }
    if ((r.settled[i] == RowSettlement::graph) != (bound == 0.0)) ++wrong_zero;
    if (r.settled[i] == RowSettlement::graph) {
      ++proven;
      if (mu != 0.0) ++weight_on_proven;
    } else {
      ++missing;
    }
    if (mu >= 1e-3) tight.ratios.push_back(bound / mu);
  }
  CHECK_MESSAGE(below == 0, below, " rows have a bound under their true missed mass (first: ", first_below, ")");
  CHECK(wrong_zero == 0);
  CHECK(weight_on_proven == 0);
  // The output error: exact arithmetic's bound, plus the float output's rounding.
  double scale = 0.0;
  for (double x : ref.out.data) scale = std::max(scale, std::abs(x));
  const double rounding = (std::is_same_v<T, float> ? 1e-5 : 1e-12) * std::max(1.0, scale);
  CHECK(max_abs_diff(out.template cast<double>(), ref.out) <= r.output_error_bound + rounding);
}

const std::vector<Transform> kEntmaxes = {Transform::sparsemax(), Transform::entmax15(), Transform::entmax(1.25),
                                          Transform::entmax(3.0)};

}  // namespace

TEST_SUITE("attention") {
  TEST_CASE("missed mass: certify's bound is never under dense float64 attention's weight outside the graph row") {
    std::size_t proven = 0, missing = 0;
    Tightness low_rank, identity;
    for (const Transform& t : kEntmaxes)
      for (bool causal : {false, true})
        for (int which = 0; which < 3; ++which) {
          const Head h = which == 0   ? random_head(48, 64, 8, causal, false, 3100)
                         : which == 1 ? random_head(40, 40, 6, causal, true, 3200)
                                      : clustered_head(96, 16, causal, 3300);
          const Reference ref = dense_reference(h, t.alpha);
          for (int graph = 0; graph < 2; ++graph) {
            const Graph g = graph == 0 ? window_graph(h.n(), h.m(), 3) : predicted_graph(h, ref, 0.8, 3400 + which);
            CAPTURE(h.name);
            CAPTURE(describe(t));
            CAPTURE(causal);
            CAPTURE(graph);
            for (std::size_t rank : {std::size_t{4}, h.q.cols}) {
              CAPTURE(rank);
              Tightness& tight = rank == h.q.cols ? identity : low_rank;
              check_bounds<float>(h, g, t, rank, ref, tight, proven, missing);
              check_bounds<double>(h, g, t, rank, ref, tight, proven, missing);
            }
          }
        }
    const double low_median = low_rank.median(), identity_median = identity.median();
    MESSAGE("missed mass: " << proven << " rows proven exact, " << missing << " not; bound / true missed mass "
                            << "(rows missing >= 1e-3): median " << low_median << " with rank-4 bounds ("
                            << low_rank.ratios.size() << " rows), " << identity_median << " with identity bounds ("
                            << identity.ratios.size() << " rows)");
    CHECK(proven > 0);
    CHECK(missing > 0);
    // Not vacuous: with identity bounds the bound is the missed mass of a row
    // whose left-out keys score a hair above their scores.
    CHECK(identity_median <= 1.05);
    CHECK(identity.ratios.size() > 100);
  }

  TEST_CASE("missed mass: a graph with no keys misses everything, and its output error is bounded by max |v|") {
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      const Head h = random_head(20, 24, 4, causal, false, 3500);
      const Graph empty = Graph::from_pairs(h.n(), h.m(), {});
      const Reference ref = dense_reference(h, 1.5);
      GraphAttentionReport r;
      const Matrix<float> out = run<float>(h, empty, Transform::entmax15(), GraphAttentionMode::certify, 4, &r);
      REQUIRE(r.missed_mass.size() == h.n());
      for (std::size_t i = 0; i < h.n(); ++i) CHECK(r.missed_mass[i] == 1.0);
      double largest = 0.0, scale = 0.0;
      for (double x : h.v.data) largest = std::max(largest, std::abs(x));
      for (double x : ref.out.data) scale = std::max(scale, std::abs(x));
      CHECK(r.output_error_bound == largest);
      CHECK(max_abs_diff(out.cast<double>(), ref.out) <= r.output_error_bound);
      CHECK(max_abs_diff(out.cast<double>(), ref.out) >= 0.5 * scale);  // the zero rows are far off
    }
  }

  TEST_CASE("missed mass: fast mode knows only complete rows, exact mode's rows are 0, top-k and softmax") {
    const Head h = clustered_head(64, 8, true, 3600);
    const Graph g = window_graph(h.n(), h.m(), 2);
    std::vector<std::pair<std::uint32_t, std::uint32_t>> all;
    for (std::uint32_t i = 0; i < h.n(); ++i)
      for (std::uint32_t j = 0; j <= i; ++j) all.emplace_back(i, j);
    const Graph full = Graph::from_pairs(h.n(), h.m(), std::move(all));
    for (const Transform& t : {Transform::entmax15(), Transform::softmax(), Transform::topk_softmax(3)}) {
      CAPTURE(describe(t));
      GraphAttentionReport fast;
      run<float>(h, g, t, GraphAttentionMode::fast, 4, &fast);
      REQUIRE(fast.missed_mass.size() == h.n());
      check_totals(fast);
      CHECK(fast.bounded_rows == fast.graph_rows);
      CHECK(fast.bounded_rows > 0);  // the first rows hold every key they may see
      CHECK(fast.bounded_rows < h.n());
      for (std::size_t i = 0; i < h.n(); ++i)
        CHECK((fast.settled[i] == RowSettlement::graph ? fast.missed_mass[i] == 0.0 : std::isnan(fast.missed_mass[i])));
      CHECK(std::isnan(fast.output_error_bound));
      GraphAttentionReport whole;
      run<float>(h, full, t, GraphAttentionMode::fast, 4, &whole);
      CHECK(whole.bounded_rows == h.n());
      CHECK(whole.max_missed_mass == 0.0);
      CHECK(whole.output_error_bound == 0.0);
      if (!has_threshold(t)) continue;
      GraphAttentionReport exact;
      run<float>(h, g, t, GraphAttentionMode::exact, 4, &exact);
      check_totals(exact);
      CHECK(exact.bounded_rows == h.n());
      CHECK(exact.max_missed_mass == 0.0);
      CHECK(exact.output_error_bound == 0.0);
      GraphAttentionReport cert;
      run<float>(h, g, t, GraphAttentionMode::certify, 4, &cert);
      check_totals(cert);
      if (t.kind == TransformKind::topk_softmax) {
        // No bound is known for top-k's unproven rows.
        CHECK(cert.bounded_rows == cert.graph_rows);
        CHECK(cert.bounded_rows < h.n());
      } else {
        CHECK(cert.bounded_rows == h.n());
        CHECK(cert.max_missed_mass > 0.0);
      }
    }
  }

  // Named "... 1, 2 and 3 threads" as the thread tests are, which the
  // WebAssembly suite (no pthreads) leaves out by that name.
  TEST_CASE("missed mass: the same bounds from the backward, and with 1, 2 and 3 threads") {
    const Head h = random_head(300, 300, 8, true, false, 3700);
    const Graph g = window_graph(h.n(), h.m(), 8);
    GraphAttentionReport one;
    {
      ThreadsScope ts(1);
      run<float>(h, g, Transform::entmax15(), GraphAttentionMode::certify, 4, &one);
    }
    for (std::size_t threads : {2, 3}) {
      CAPTURE(threads);
      ThreadsScope ts(threads);
      GraphAttentionReport more;
      run<float>(h, g, Transform::entmax15(), GraphAttentionMode::certify, 4, &more);
      CHECK(one.missed_mass == more.missed_mass);
    }
    REQUIRE(one.missed_mass.size() == h.n());
    GraphAttentionOptions<float> o;
    o.attention.transform = Transform::entmax15();
    o.attention.scale = h.scale;
    o.attention.causal = true;
    o.mode = GraphAttentionMode::certify;
    o.bound_rank = 4;
    const Matrix<float> q = h.q.cast<float>(), k = h.k.cast<float>(), v = h.v.cast<float>();
    Matrix<float> go(h.n(), h.v.cols, 1.0f), dq(h.n(), q.cols), dk(h.m(), k.cols), dv(h.m(), v.cols);
    GraphAttentionReport back;
    graph_attention_backward<float>(q.view(), k.view(), v.view(), g, go.view(), dq.view(), dk.view(), dv.view(), o,
                                    &back);
    CHECK(back.missed_mass == one.missed_mass);
    CHECK(back.output_error_bound == one.output_error_bound);
  }
}
