// Tests of Sparsefinder's training pieces: projection (hinge loss, Adam,
// determinism), k-means and the progress bar.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "clustered_capture.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/io/capture.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/training/kmeans.hpp"
#include "entgraph/training/progress.hpp"
#include "entgraph/training/projection.hpp"
#include "support.hpp"

namespace entgraph::test {
namespace {



std::vector<double> random_weights(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> w(n);
  for (double& x : w) x = 0.5 * detail::standard_normal(rng);
  return w;
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

TEST_CASE("random helpers are uniform and deterministic") {
  std::mt19937_64 a(5), b(5);
  std::vector<int> counts(7, 0);
  int mismatches = 0;
  for (int i = 0; i < 70000; ++i) {
    const std::uint64_t x = detail::uniform_below(a, 7);
    if (x != detail::uniform_below(b, 7) || x >= 7) {
      ++mismatches;
      continue;
    }
    ++counts[x];
  }
  CHECK(mismatches == 0);
  for (int n : counts) CHECK(std::abs(n - 10000) < 600);
  double sum = 0, sq = 0;
  for (int i = 0; i < 20000; ++i) {
    const double z = detail::standard_normal(a);
    sum += z;
    sq += z * z;
  }
  CHECK(std::abs(sum / 20000) < 0.05);
  CHECK(std::abs(sq / 20000 - 1) < 0.05);
  CHECK(detail::mix_seed(1, 2, 3) != detail::mix_seed(1, 3, 2));
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
