// Tests of Sparsefinder's training pieces: projection (hinge loss, Adam,
// determinism), k-means and the progress bar.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "clustered_capture.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/training/kmeans.hpp"
#include "entgraph/training/progress.hpp"
#include "entgraph/training/projection.hpp"
#include "runtime/random.hpp"
#include "support.hpp"

namespace entgraph::test {
namespace {



std::vector<double> random_weights(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> w(n);
  for (double& x : w) x = 0.5 * detail::standard_normal(rng);
  return w;
}

// n x dim points from `components` Gaussians with centres in [-scale, scale]^dim.
std::vector<float> mixture_points(std::size_t n, std::size_t dim, std::size_t components, double scale,
                                  std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> centres(components * dim);
  for (double& c : centres) c = scale * (2 * detail::uniform_open01(rng) - 1);
  std::vector<float> x(n * dim);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = detail::uniform_below(rng, components);
    for (std::size_t t = 0; t < dim; ++t)
      x[i * dim + t] = static_cast<float>(centres[c * dim + t] + detail::standard_normal(rng));
  }
  return x;
}

// The nearest centroid of each point by float squared distance, ties to the lower index.
std::vector<std::uint32_t> nearest_float(const std::vector<float>& x, std::size_t dim,
                                         const std::vector<float>& centroids, std::size_t k) {
  std::vector<std::uint32_t> out(x.size() / dim);
  for (std::size_t i = 0; i < out.size(); ++i) {
    float best = std::numeric_limits<float>::infinity();
    for (std::size_t j = 0; j < k; ++j) {
      float d = 0;
      for (std::size_t t = 0; t < dim; ++t) {
        const float v = x[i * dim + t] - centroids[j * dim + t];
        d += v * v;
      }
      if (d < best) {
        best = d;
        out[i] = static_cast<std::uint32_t>(j);
      }
    }
  }
  return out;
}

// One restart of k-means as kmeans.hpp documents it, written plainly: float
// squared distances (coordinates in order), nearest with ties to the lower
// index, means of double sums in point order rounded to float. With one
// restart the tolerance changes nothing: the kept restart goes on until no
// assignment changes.
struct NaiveKMeans {
  std::vector<float> centroids;
  std::vector<std::uint32_t> assignment;
  double inertia = 0;
  std::size_t iterations = 0;
};

NaiveKMeans naive_kmeans(const std::vector<float>& x, std::size_t dim, std::size_t k, std::size_t iterations,
                         std::uint64_t seed) {
  const std::size_t n = x.size() / dim;
  NaiveKMeans r;
  r.centroids = kmeans_plus_plus({x.data(), n, dim}, k, seed);
  auto assign = [&] {
    std::vector<std::uint32_t> a = nearest_float(x, dim, r.centroids, k);
    const bool changed = a != r.assignment;
    r.assignment = std::move(a);
    return changed;
  };
  assign();
  bool changed = true;
  while (r.iterations < iterations && changed) {
    ++r.iterations;
    std::vector<double> sums(k * dim, 0.0);
    std::vector<std::size_t> counts(k, 0);
    for (std::size_t i = 0; i < n; ++i) {
      ++counts[r.assignment[i]];
      for (std::size_t t = 0; t < dim; ++t) sums[r.assignment[i] * dim + t] += x[i * dim + t];
    }
    for (std::size_t j = 0; j < k; ++j)
      if (counts[j] > 0)
        for (std::size_t t = 0; t < dim; ++t)
          r.centroids[j * dim + t] = static_cast<float>(sums[j * dim + t] / static_cast<double>(counts[j]));
    changed = assign();
  }
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t t = 0; t < dim; ++t) {
      const double v = static_cast<double>(x[i * dim + t]) - r.centroids[r.assignment[i] * dim + t];
      r.inertia += v * v;
    }
  return r;
}

}  // namespace

TEST_SUITE("training") {

TEST_CASE("hinge loss gradient matches finite differences") {
  const std::size_t d = 6, r = 3;
  const Matrix<float> q = random_matrix<float>(5, d, 1.0, 3);
  const Matrix<float> k = random_matrix<float>(7, d, 1.0, 4);
  std::vector<Triplet> triplets;
  for (std::uint32_t i = 0; i < 5; ++i)
    for (std::uint32_t j = 0; j < 3; ++j) triplets.push_back({i, (i + j) % 7, (i + 2 * j + 3) % 7});
  std::vector<double> wq = random_weights(d * r, 5), wk = random_weights(d * r, 6);
  for (double margin : {0.5, 2.0}) {
    CAPTURE(margin);
    std::vector<double> gq, gk;
    const double loss = hinge_loss_gradient(q.view(), k.view(), triplets, r, wq, wk, margin, &gq, &gk);
    CHECK(loss > 0);
    REQUIRE(gq.size() == d * r);
    REQUIRE(gk.size() == d * r);
    double max_grad = 0;
    for (auto* w : {&wq, &wk}) {
      const std::vector<double>& g = w == &wq ? gq : gk;
      for (std::size_t t = 0; t < w->size(); ++t) {
        const double keep = (*w)[t], h = 1e-6;
        (*w)[t] = keep + h;
        const double up = hinge_loss_gradient(q.view(), k.view(), triplets, r, wq, wk, margin, nullptr, nullptr);
        (*w)[t] = keep - h;
        const double down = hinge_loss_gradient(q.view(), k.view(), triplets, r, wq, wk, margin, nullptr, nullptr);
        (*w)[t] = keep;
        const double numeric = (up - down) / (2 * h);
        CAPTURE(t);
        CHECK(g[t] == doctest::Approx(numeric).epsilon(1e-5).scale(1.0));
        max_grad = std::max(max_grad, std::abs(g[t]));
      }
    }
    CHECK(max_grad > 1e-3);  // the check compares something
  }
  // A margin no triplet reaches: zero loss and zero gradient.
  std::vector<double> gq, gk;
  std::vector<Triplet> same = {{0, 1, 1}};
  CHECK(hinge_loss_gradient(q.view(), k.view(), same, r, wq, wk, 0.0, &gq, &gk) == 0.0);
  for (double g : gq) CHECK(g == 0.0);
  CHECK_THROWS_AS(hinge_loss_gradient(q.view(), k.view(), {{9, 0, 0}}, r, wq, wk, 1.0, nullptr, nullptr), Error);
  CHECK_THROWS_AS(hinge_loss_gradient(q.view(), k.view(), triplets, r + 1, wq, wk, 1.0, nullptr, nullptr), Error);
}

TEST_CASE("training lowers the hinge loss within one epoch") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const Capture c = clustered_capture(1, 2, 16, {64, 48, 64, 40}, 4, causal);
    ProjectionOptions o;
    o.seed = 3;
    o.epochs = 0;
    for (std::size_t head = 0; head < 2; ++head) {
      const Projection before = train_projection(c, 0, head, o);
      const Projection same = initial_projection(16, 4, 3, 0, head);
      CHECK(before.wq == same.wq);
      ProjectionOptions trained = o;
      trained.epochs = 1;
      ProjectionStats stats;
      const Projection after = train_projection(c, 0, head, trained, &stats);
      CHECK(stats.batches >= 12);
      CHECK(stats.batches <= (216 + 15) / 16);
      CHECK(stats.triplets > 216);
      REQUIRE(stats.epoch_loss.size() == 1);
      const double l0 = evaluate_projection(c, 0, head, before, o, 99);
      const double l1 = evaluate_projection(c, 0, head, after, o, 99);
      CAPTURE(l0);
      CAPTURE(l1);
      CHECK(l1 < 0.5 * l0);
      CHECK(stats.epoch_loss[0] < l0);
    }
  }
}

TEST_CASE("training is reproducible per seed, for any thread count") {
  const Capture c = clustered_capture(2, 2, 8, {40, 30}, 3, true);
  ProjectionOptions o;
  o.seed = 17;
  o.epochs = 2;
  o.negatives = 2;
  std::vector<Projection> one, two, again;
  {
    ThreadsScope threads(1);
    one = train_projections(c, o);
  }
  {
    ThreadsScope threads(2);
    two = train_projections(c, o);
    again = train_projections(c, o);
  }
  REQUIRE(one.size() == 4);
  for (std::size_t h = 0; h < 4; ++h) {
    CAPTURE(h);
    CHECK(one[h].wq == two[h].wq);
    CHECK(one[h].wk == two[h].wk);
    CHECK(two[h].wq == again[h].wq);
    CHECK(one[h].wq == train_projection(c, h / 2, h % 2, o).wq);
  }
  CHECK(one[0].wq != one[1].wq);  // heads have their own streams
  o.seed = 18;
  CHECK(train_projections(c, o)[0].wq != one[0].wq);
}

TEST_CASE("projection options and ranges are checked") {
  const Capture c = clustered_capture(1, 1, 8, {10}, 2, false);
  auto throws_with = [&](ProjectionOptions o, const std::string& word) {
    try {
      train_projection(c, 0, 0, o);
      FAIL("no throw for " << word);
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(word) != std::string::npos);
    }
  };
  ProjectionOptions o;
  o.rank = 0;
  throws_with(o, "rank");
  o = {};
  o.batch = 0;
  throws_with(o, "batch");
  o = {};
  o.lr = -1;
  throws_with(o, "lr");
  o = {};
  o.negatives = 0;
  throws_with(o, "negatives");
  o = {};
  o.margin = std::nan("");
  throws_with(o, "margin");
  CHECK_THROWS_AS(train_projection(c, 1, 0, ProjectionOptions{}), Error);
  CHECK_THROWS_AS(train_projection(c, 0, 1, ProjectionOptions{}), Error);
  const Projection p = initial_projection(8, 4, 0, 0, 0);
  const Matrix<float> wrong = random_matrix<float>(3, 7);
  CHECK_THROWS_AS(p.project_queries(wrong.view()), Error);
  const Matrix<float> x = random_matrix<float>(3, 8);
  const std::vector<float> xp = p.project_keys(x.view());
  REQUIRE(xp.size() == 12);
  double expect = 0;
  for (std::size_t t = 0; t < 8; ++t) expect += static_cast<double>(x(2, t)) * p.wk[t * 4 + 1];
  CHECK(xp[2 * 4 + 1] == doctest::Approx(expect).epsilon(1e-6));
}

TEST_CASE("k-means recovers well-separated blobs") {
  const std::vector<std::pair<float, float>> centers = {{0, 0}, {10, 0}, {0, 10}, {-10, -10}};
  std::mt19937_64 rng(1);
  std::vector<float> pts;
  std::vector<std::size_t> truth;
  for (std::size_t i = 0; i < 200; ++i) {
    const std::size_t c = i % 4;
    pts.push_back(centers[c].first + static_cast<float>(0.5 * detail::standard_normal(rng)));
    pts.push_back(centers[c].second + static_cast<float>(0.5 * detail::standard_normal(rng)));
    truth.push_back(c);
  }
  const MatrixView<const float> view{pts.data(), 200, 2};
  for (std::uint64_t seed : {0u, 1u, 2u, 3u}) {
    CAPTURE(seed);
    KMeansOptions o;
    o.clusters = 4;
    o.seed = seed;
    const KMeansResult r = kmeans(view, o);
    REQUIRE(r.centroids.size() == 8);
    REQUIRE(r.assignment.size() == 200);
    // Each blob maps to one cluster, and distinct blobs to distinct clusters.
    std::vector<std::uint32_t> of(4);
    for (std::size_t c = 0; c < 4; ++c) of[c] = r.assignment[c];
    for (std::size_t i = 0; i < 200; ++i) CHECK(r.assignment[i] == of[truth[i]]);
    for (std::size_t a = 0; a < 4; ++a)
      for (std::size_t b = a + 1; b < 4; ++b) CHECK(of[a] != of[b]);
    for (std::size_t c = 0; c < 4; ++c) {
      CHECK(std::abs(r.centroids[of[c] * 2] - centers[c].first) < 0.3);
      CHECK(std::abs(r.centroids[of[c] * 2 + 1] - centers[c].second) < 0.3);
    }
    CHECK(r.inertia < 200 * 0.5 * 2 * 2);
    const KMeansResult again = kmeans(view, o);
    CHECK(again.centroids == r.centroids);
  }
  // k-means++ spreads its picks over the blobs and is deterministic per seed.
  for (std::uint64_t seed : {0u, 1u, 2u}) {
    const std::vector<float> c = kmeans_plus_plus(view, 4, seed);
    CHECK(c == kmeans_plus_plus(view, 4, seed));
    std::vector<int> hit(4, 0);
    for (std::size_t j = 0; j < 4; ++j)
      for (std::size_t b = 0; b < 4; ++b)
        if (std::abs(c[j * 2] - centers[b].first) < 3 && std::abs(c[j * 2 + 1] - centers[b].second) < 3) ++hit[b];
    for (int h : hit) CHECK(h == 1);
  }
  CHECK(kmeans_plus_plus(view, 4, 0) != kmeans_plus_plus(view, 4, 1));
  // nearest_centroids: nearest first.
  const std::vector<float> cents = {0, 0, 10, 0, 0, 10};
  const std::vector<float> p = {1, 0, 9, 1};
  const std::vector<std::uint32_t> near = nearest_centroids({p.data(), 2, 2}, cents, 3, 2);
  CHECK(near == std::vector<std::uint32_t>{0, 1, 1, 0});
  CHECK_THROWS_AS(nearest_centroids({p.data(), 2, 2}, cents, 3, 4), Error);
  CHECK_THROWS_AS(nearest_centroids({p.data(), 2, 2}, cents, 2, 1), Error);
}

TEST_CASE("k-means edge cases") {
  const std::vector<float> same = {1, 1, 1, 1, 1, 1};
  KMeansOptions o;
  o.clusters = 2;
  const KMeansResult r = kmeans({same.data(), 3, 2}, o);
  CHECK(r.inertia == 0);
  for (float v : r.centroids) CHECK(v == 1.0f);
  o.clusters = 0;
  CHECK_THROWS_AS(kmeans({same.data(), 3, 2}, o), Error);
  o.clusters = 2;
  o.restarts = 0;
  CHECK_THROWS_AS(kmeans({same.data(), 3, 2}, o), Error);
  o.restarts = 1;
  CHECK_THROWS_AS(kmeans({same.data(), 0, 2}, o), Error);
  const std::vector<float> bad = {1, std::nanf("")};
  CHECK_THROWS_AS(kmeans({bad.data(), 1, 2}, o), Error);
  CHECK_THROWS_AS(kmeans_plus_plus({bad.data(), 1, 2}, 1, 0), Error);
  const std::vector<float> huge = {1, 2e15f};
  CHECK_THROWS_AS(kmeans({huge.data(), 1, 2}, o), Error);
  // More clusters than points: centroids repeat, nothing is left unassigned.
  const std::vector<float> two = {0, 0, 3, 4};
  o.clusters = 5;
  const KMeansResult more = kmeans({two.data(), 2, 2}, o);
  CHECK(more.inertia == 0);
  CHECK(more.centroids.size() == 10);
}

TEST_CASE("k-means equals plain Lloyd iterations, with and without Hamerly's bounds") {
  struct Case {
    std::size_t n, dim, k, components;
    double scale;
  };
  // k (dim + 4) > 64 takes the bounded path: (dim, k) = (4, 16), (3, 20), (9, 6), (4, 12);
  // dim = 9 and 17 leave a remainder after the groups of 4 coordinates.
  const std::vector<Case> cases = {{400, 2, 1, 3, 5},     {1500, 2, 3, 5, 5},   {3000, 4, 4, 16, 10},
                                   {3000, 4, 8, 16, 10},  {3000, 4, 16, 16, 10}, {2000, 3, 20, 6, 3},
                                   {1200, 9, 6, 4, 2},    {800, 17, 3, 3, 1},    {2500, 4, 12, 12, 0.5}};
  for (const Case& c : cases)
    for (std::uint64_t seed : {1u, 2u}) {
      CAPTURE(c.dim);
      CAPTURE(c.k);
      CAPTURE(seed);
      const std::vector<float> x = mixture_points(c.n, c.dim, c.components, c.scale, seed + 10 * c.k);
      for (std::size_t iterations : {std::size_t{2}, std::size_t{200}})
        for (double tolerance : {0.0, 1e-4}) {  // one restart: the tolerance only defers to the kept restart
          KMeansOptions o;
          o.clusters = c.k;
          o.restarts = 1;
          o.iterations = iterations;
          o.tolerance = tolerance;
          o.seed = seed;
          const KMeansResult r = kmeans({x.data(), c.n, c.dim}, o);
          const NaiveKMeans want = naive_kmeans(x, c.dim, c.k, iterations, seed);
          CHECK(r.assignment == want.assignment);
          CHECK(r.iterations == want.iterations);
          CHECK(r.total_iterations == want.iterations);
          CHECK(std::abs(r.inertia - want.inertia) <= 1e-9 * want.inertia);
          REQUIRE(r.centroids.size() == want.centroids.size());
          for (std::size_t i = 0; i < r.centroids.size(); ++i)
            CHECK(std::abs(r.centroids[i] - want.centroids[i]) <= 1e-6f * (1 + std::abs(want.centroids[i])));
        }
    }
  // Points on an integer grid: many exact distance ties, all to the lower index.
  std::vector<float> grid;
  for (int a = 0; a < 6; ++a)
    for (int b = 0; b < 6; ++b)
      for (int rep = 0; rep < 3; ++rep) {
        grid.push_back(static_cast<float>(a));
        grid.push_back(static_cast<float>(b));
        grid.push_back(static_cast<float>((a + b) % 2));
      }
  for (std::size_t k : {5u, 21u}) {
    CAPTURE(k);
    KMeansOptions o;
    o.clusters = k;
    o.restarts = 1;
    o.iterations = 100;
    o.seed = 3;
    const KMeansResult r = kmeans({grid.data(), grid.size() / 3, 3}, o);
    const NaiveKMeans want = naive_kmeans(grid, 3, k, 100, 3);
    CHECK(r.assignment == want.assignment);
    CHECK(r.iterations == want.iterations);
    CHECK(r.inertia == doctest::Approx(want.inertia).epsilon(1e-12));
  }
}

TEST_CASE("k-means tolerance cuts restarts short, and the kept one still converges") {
  const std::size_t n = 4000, dim = 4;
  const std::vector<float> x = mixture_points(n, dim, 12, 4, 7);
  KMeansOptions o;
  o.clusters = 8;
  o.restarts = 5;
  o.iterations = 300;
  o.seed = 11;
  o.tolerance = 0;
  const KMeansResult exact = kmeans({x.data(), n, dim}, o);
  o.tolerance = 1e-2;
  const KMeansResult loose = kmeans({x.data(), n, dim}, o);
  MESSAGE("k-means iterations over 5 restarts: " << exact.total_iterations << " at tolerance 0, "
          << loose.total_iterations << " at 1e-2");
  CHECK(loose.total_iterations < exact.total_iterations);
  CHECK(exact.iterations < o.iterations);
  // Both end with every point on its nearest centroid (the kept restart ran
  // on until no assignment changed), the tolerance costing little inertia.
  for (const KMeansResult* r : {&exact, &loose}) {
    CHECK(nearest_float(x, dim, r->centroids, o.clusters) == r->assignment);
    CHECK(r->inertia <= exact.inertia * (1 + 1e-3));
  }
  const KMeansResult again = kmeans({x.data(), n, dim}, o);
  CHECK(again.centroids == loose.centroids);
  CHECK(again.assignment == loose.assignment);
  for (double bad : {-1e-4, std::nan(""), std::numeric_limits<double>::infinity()}) {
    o.tolerance = bad;
    CHECK_THROWS_AS(kmeans({x.data(), n, dim}, o), Error);
  }
}

TEST_CASE("spherical k-means clusters directions, whatever the rows' lengths") {
  // Three directions in 3-d, each row at a random length; some zero rows.
  const float dirs[3][3] = {{1, 0, 0}, {0, 1, 0}, {-0.6f, -0.8f, 0}};
  std::mt19937_64 rng(4);
  std::vector<float> pts, scaled_pts;
  std::vector<std::size_t> truth;
  for (std::size_t i = 0; i < 150; ++i) {
    const std::size_t c = i % 3;
    const double length = i % 25 == 24 ? 0.0 : 0.1 + 100 * detail::uniform_open01(rng);
    for (std::size_t t = 0; t < 3; ++t)
      pts.push_back(static_cast<float>(length * (dirs[c][t] + 0.05 * detail::standard_normal(rng))));
    truth.push_back(length > 0 ? c : 3);
  }
  for (float x : pts) scaled_pts.push_back(0x1p70f * x);  // beyond the euclidean 1e15 bound
  KMeansOptions o;
  o.geometry = KMeansGeometry::spherical;
  o.clusters = 3;
  const KMeansResult r = kmeans({pts.data(), 150, 3}, o);
  std::uint32_t of[3] = {r.assignment[0], r.assignment[1], r.assignment[2]};
  CHECK(of[0] != of[1]);
  CHECK(of[1] != of[2]);
  CHECK(of[0] != of[2]);
  for (std::size_t i = 0; i < 150; ++i)
    if (truth[i] < 3) CHECK(r.assignment[i] == of[truth[i]]);
  for (std::size_t j = 0; j < 3; ++j) {
    double norm = 0;
    for (std::size_t t = 0; t < 3; ++t) norm += static_cast<double>(r.centroids[j * 3 + t]) * r.centroids[j * 3 + t];
    CHECK(norm == doctest::Approx(1.0).epsilon(1e-6));
  }
  // Rows scaled by a power of two normalise to the same bits.
  const KMeansResult scaled = kmeans({scaled_pts.data(), 150, 3}, o);
  CHECK(scaled.centroids == r.centroids);
  CHECK(scaled.assignment == r.assignment);
  o.geometry = KMeansGeometry::euclidean;
  CHECK_THROWS_WITH(kmeans({scaled_pts.data(), 150, 3}, o), doctest::Contains("beyond 1e15"));
  // engine_seed replaces the seed's own stream.
  o.geometry = KMeansGeometry::spherical;
  o.engine_seed = 123;
  o.seed = 1;
  const KMeansResult a = kmeans({pts.data(), 150, 3}, o);
  o.seed = 2;
  CHECK(kmeans({pts.data(), 150, 3}, o).centroids == a.centroids);
}

TEST_CASE("progress bar format and silence") {
  const std::string line = ProgressBar::format("fit", 3, 12, 1.5);
  CHECK(line.find("fit [") == 0);
  CHECK(line.find("3/12") != std::string::npos);
  CHECK(line.find("25.0%") != std::string::npos);
  CHECK(line.find("2.0/s") != std::string::npos);
  CHECK(line.find("ETA 4s") != std::string::npos);
  CHECK(ProgressBar::format("x", 12, 12, 2.0).find("ETA") == std::string::npos);
  ProgressBar quiet("quiet", 10, true);
  CHECK_FALSE(quiet.enabled());
  quiet.advance(4);
  CHECK(quiet.done() == 4);
  quiet.finish();
}

}  // TEST_SUITE

}  // namespace entgraph::test
