// sparsefinder-distance's graph (predictors/distance_rows.hpp) against the
// definition written out pair by pair: the float pass must settle only pairs
// it can, on every instruction set, and hand the rest to the double sum.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "entgraph/graph.hpp"
#include "entgraph/heads.hpp"
#include "entgraph/runtime.hpp"
#include "predictors/distance_rows.hpp"
#include "support.hpp"

namespace entgraph::test {
namespace {

// Edge (i, j) iff a_0 - t <= b_0 <= a_0 + t and the double sum of squares, in
// coordinate order, is at most t * t.
Graph definition(const std::vector<float>& qp, std::size_t n, const std::vector<float>& kp, std::size_t m,
                 std::size_t r, double t, bool causal) {
  Graph g = Graph::empty(n, m);
  for (std::size_t i = 0; i < n; ++i) {
    const double a0 = qp[i * r];
    for (std::size_t j = 0; j < (causal ? causal_key_limit(i, n, m) : m); ++j) {
      const double b0 = kp[j * r];
      if (!(b0 >= a0 - t && b0 <= a0 + t)) continue;
      double d2 = 0.0;
      for (std::size_t c = 0; c < r; ++c) {
        const double x = static_cast<double>(qp[i * r + c]) - static_cast<double>(kp[j * r + c]);
        d2 += x * x;
      }
      if (d2 <= t * t) g.indices.push_back(static_cast<std::uint32_t>(j));
    }
    g.offsets[i + 1] = g.indices.size();
  }
  return g;
}

// The graph on every instruction set equals the definition's; returns its edge count.
std::size_t check_definition(const std::vector<float>& qp, std::size_t n, const std::vector<float>& kp, std::size_t m,
                             std::size_t r, double t) {
  std::size_t edges = 0;
  for (bool causal : {false, true}) {
    const Graph want = definition(qp, n, kp, m, r, t, causal);
    edges += want.edges();
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      CAPTURE(scope.name());
      CAPTURE(causal);
      const Graph got = detail::distance_rows(qp.data(), n, kp.data(), m, r, t, causal);
      CHECK(got.offsets == want.offsets);
      CHECK(got.indices == want.indices);
    }
  }
  return edges;
}

std::vector<float> gaussian(std::size_t count, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> z(0.0f, scale);
  std::vector<float> v(count);
  for (float& x : v) x = z(rng);
  return v;
}

TEST_CASE("distance rows: Gaussian points, every rank and a key count that is not a multiple of 64") {
  for (std::size_t r : {1, 3, 4, 8}) {
    CAPTURE(r);
    const std::size_t n = 150, m = 203;
    const double t = std::sqrt(static_cast<double>(r)) * 0.8;
    const std::size_t edges = check_definition(gaussian(n * r, 3 + r), n, gaussian(m * r, 7 + r), m, r, t);
    CHECK(edges > 0);
    CHECK(edges < n * m);
  }
}

TEST_CASE("distance rows: grid points, where d2 == t^2 and the window's ends are met exactly") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> step(-4, 4);
  const std::size_t n = 90, m = 130, r = 2;
  std::vector<float> qp(n * r), kp(m * r);
  for (float& x : qp) x = 0.25f * static_cast<float>(step(rng));
  for (float& x : kp) x = 0.25f * static_cast<float>(step(rng));
  for (double t : {0.5, 1.0, 1.25}) {
    CAPTURE(t);
    std::size_t on_circle = 0;  // pairs exactly at distance t: edges by the definition
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < m; ++j) {
        double d2 = 0.0;
        for (std::size_t c = 0; c < r; ++c) d2 += std::pow(double(qp[i * r + c]) - kp[j * r + c], 2);
        on_circle += d2 == t * t ? 1 : 0;
      }
    CHECK(on_circle > 20);
    check_definition(qp, n, kp, m, r, t);
  }
}

TEST_CASE("distance rows: keys a few float steps either side of the sphere go to the double sum") {
  // Key j = query + t (1 + e_j) along one unit direction, e_j a few 2^-24:
  // the float sum cannot tell them apart from t^2, the double sum can.
  const std::size_t r = 4, m = 257;
  const double t = 1.5;
  const std::vector<float> qp = {0.3f, -0.2f, 0.1f, 0.7f};
  const double unit[r] = {0.5, 0.5, 0.5, 0.5};
  std::vector<float> kp(m * r);
  for (std::size_t j = 0; j < m; ++j) {
    const double e = (static_cast<double>(j) - 128.0) * 0x1p-26;
    for (std::size_t c = 0; c < r; ++c) kp[j * r + c] = static_cast<float>(qp[c] + t * (1.0 + e) * unit[c]);
  }
  const std::size_t edges = check_definition(qp, 1, kp, m, r, t);
  // The query is the last position: the causal run sees every key too.
  CHECK(edges > 20);          // some inside...
  CHECK(edges < 2 * m - 20);  // ...and some outside
}

TEST_CASE("distance rows: large points, t of 0, tiny and huge, NaN and infinity") {
  const std::size_t n = 40, m = 50, r = 2;
  std::size_t edges = 0;
  edges += check_definition(gaussian(n * r, 5, 0x1p42f), n, gaussian(m * r, 6, 0x1p42f), m, r, 0x1p42);
  edges += check_definition(gaussian(n * r, 5, 1e-12f), n, gaussian(m * r, 6, 1e-12f), m, r, 1e-12);
  edges += check_definition(gaussian(n * r, 5), n, gaussian(m * r, 6), m, r, 1e25);
  edges +=
      check_definition(gaussian(n * r, 5, 1e-30f), n, gaussian(m * r, 6, 1e-30f), m, r, 1e-30);  // subnormal squares
  // t = 0: only keys equal to the query (every tenth key copies query 0).
  std::vector<float> kz = gaussian(m * r, 10);
  const std::vector<float> qz = gaussian(n * r, 11);
  for (std::size_t j = 0; j < m; j += 10) std::copy_n(qz.begin(), r, kz.begin() + static_cast<std::ptrdiff_t>(j * r));
  const std::size_t zero_edges = check_definition(qz, n, kz, m, r, 0.0);
  CHECK(zero_edges >= m / 10);
  CHECK(edges > 0);
  std::vector<float> qp = gaussian(n * r, 8), kp = gaussian(m * r, 9);
  qp[3 * r + 1] = std::numeric_limits<float>::quiet_NaN();
  kp[4 * r] = std::numeric_limits<float>::infinity();
  kp[7 * r + 1] = -std::numeric_limits<float>::infinity();
  CHECK(check_definition(qp, n, kp, m, r, 1.5) > 0);
  const Graph g = detail::distance_rows(qp.data(), n, kp.data(), m, r, 1.5, false);
  CHECK(g.row_begin(3) == g.row_end(3));  // the NaN query has no edge
}

}  // namespace
}  // namespace entgraph::test
