// entgraph: k-means with k-means++ initialisation and restarts (see training/kmeans.hpp).
#include "entgraph/training/kmeans.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <string>

#include "entgraph/error.hpp"
#include "entgraph/training/projection.hpp"

namespace entgraph {
namespace {

double sq_dist(const float* a, const double* c, std::size_t dim) {
  double s = 0;
  for (std::size_t t = 0; t < dim; ++t) {
    const double x = static_cast<double>(a[t]) - c[t];
    s += x * x;
  }
  return s;
}

void check_points(MatrixView<const float> points, std::size_t clusters, const char* op) {
  if (points.rows == 0 || points.cols == 0)
    throw Error(std::string(op) + ": points is empty (got " + std::to_string(points.rows) + " x " +
                std::to_string(points.cols) + ")");
  if (clusters == 0) throw Error(std::string(op) + ": clusters must be >= 1 (got 0)");
  for (std::size_t i = 0; i < points.rows; ++i)
    for (std::size_t t = 0; t < points.cols; ++t)
      if (!std::isfinite(points(i, t)))
        throw Error(std::string(op) + ": point " + std::to_string(i) + " is not finite");
}

std::vector<double> plus_plus(MatrixView<const float> points, std::size_t k, std::mt19937_64& rng) {
  const std::size_t n = points.rows, dim = points.cols;
  std::vector<double> c(k * dim);
  std::vector<double> best(n, std::numeric_limits<double>::infinity());
  std::size_t pick = detail::uniform_below(rng, n);
  for (std::size_t j = 0; j < k; ++j) {
    for (std::size_t t = 0; t < dim; ++t) c[j * dim + t] = points(pick, t);
    if (j + 1 == k) break;
    double total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      best[i] = std::min(best[i], sq_dist(points.row(i), c.data() + j * dim, dim));
      total += best[i];
    }
    if (!(total > 0)) {  // every point is on a centroid already: uniform
      pick = detail::uniform_below(rng, n);
      continue;
    }
    const double target = detail::uniform_open01(rng) * total;
    double run = 0;
    pick = n - 1;
    for (std::size_t i = 0; i < n; ++i) {
      run += best[i];
      if (run >= target && best[i] > 0) {
        pick = i;
        break;
      }
    }
    while (best[pick] == 0 && pick > 0) --pick;  // rounding at the end: last point with weight
  }
  return c;
}

// Nearest centroid of every point; returns the inertia and whether anything changed.
double assign(MatrixView<const float> points, const std::vector<double>& c, std::size_t k,
              std::vector<std::uint32_t>& assignment, bool& changed) {
  const std::size_t dim = points.cols;
  double inertia = 0;
  changed = false;
  for (std::size_t i = 0; i < points.rows; ++i) {
    std::uint32_t arg = 0;
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < k; ++j) {
      const double dd = sq_dist(points.row(i), c.data() + j * dim, dim);
      if (dd < best) {
        best = dd;
        arg = static_cast<std::uint32_t>(j);
      }
    }
    if (assignment[i] != arg) changed = true;
    assignment[i] = arg;
    inertia += best;
  }
  return inertia;
}

}  // namespace

std::vector<float> kmeans_plus_plus(MatrixView<const float> points, std::size_t clusters, std::uint64_t seed) {
  check_points(points, clusters, "kmeans_plus_plus");
  std::mt19937_64 rng(detail::mix_seed(seed, 0x6b6d, 0));
  const std::vector<double> c = plus_plus(points, clusters, rng);
  return std::vector<float>(c.begin(), c.end());
}

KMeansResult kmeans(MatrixView<const float> points, const KMeansOptions& options) {
  check_points(points, options.clusters, "kmeans");
  if (options.restarts == 0) throw Error("kmeans: restarts must be >= 1 (got 0)");
  const std::size_t n = points.rows, dim = points.cols, k = options.clusters;
  std::mt19937_64 rng(detail::mix_seed(options.seed, 0x6b6d, 0));
  KMeansResult best;
  best.inertia = std::numeric_limits<double>::infinity();
  std::vector<std::uint32_t> assignment(n);
  std::vector<double> sums(k * dim);
  std::vector<std::size_t> counts(k);
  for (std::size_t restart = 0; restart < options.restarts; ++restart) {
    std::vector<double> c = plus_plus(points, k, rng);
    std::fill(assignment.begin(), assignment.end(), std::numeric_limits<std::uint32_t>::max());
    bool changed = false;
    double inertia = assign(points, c, k, assignment, changed);
    std::size_t it = 0;
    while (it < options.iterations && changed) {
      ++it;
      std::fill(sums.begin(), sums.end(), 0.0);
      std::fill(counts.begin(), counts.end(), 0);
      for (std::size_t i = 0; i < n; ++i) {
        ++counts[assignment[i]];
        for (std::size_t t = 0; t < dim; ++t) sums[assignment[i] * dim + t] += points(i, t);
      }
      for (std::size_t j = 0; j < k; ++j)
        if (counts[j] > 0)
          for (std::size_t t = 0; t < dim; ++t) c[j * dim + t] = sums[j * dim + t] / static_cast<double>(counts[j]);
      inertia = assign(points, c, k, assignment, changed);
    }
    if (inertia < best.inertia) {
      best.clusters = k;
      best.dim = dim;
      best.centroids.assign(c.begin(), c.end());
      best.assignment = assignment;
      best.inertia = inertia;
      best.iterations = it;
    }
  }
  // The assignment and inertia of the float centroids that are returned.
  const std::vector<double> cf(best.centroids.begin(), best.centroids.end());
  bool changed = false;
  best.inertia = assign(points, cf, k, best.assignment, changed);
  return best;
}

std::vector<std::uint32_t> nearest_centroids(MatrixView<const float> points, const std::vector<float>& centroids,
                                             std::size_t clusters, std::size_t top) {
  const std::size_t dim = points.cols;
  if (clusters == 0 || centroids.size() != clusters * dim)
    throw Error("nearest_centroids: centroids must hold clusters * dim = " + std::to_string(clusters * dim) +
                " values (got " + std::to_string(centroids.size()) + ")");
  if (top == 0 || top > clusters)
    throw Error("nearest_centroids: top must be in [1, clusters] (got " + std::to_string(top) + ", clusters " +
                std::to_string(clusters) + ")");
  const std::vector<double> c(centroids.begin(), centroids.end());
  std::vector<std::uint32_t> out(points.rows * top);
  std::vector<std::pair<double, std::uint32_t>> dist(clusters);
  for (std::size_t i = 0; i < points.rows; ++i) {
    for (std::size_t j = 0; j < clusters; ++j)
      dist[j] = {sq_dist(points.row(i), c.data() + j * dim, dim), static_cast<std::uint32_t>(j)};
    std::partial_sort(dist.begin(), dist.begin() + static_cast<std::ptrdiff_t>(top), dist.end());
    for (std::size_t t = 0; t < top; ++t) out[i * top + t] = dist[t].second;
  }
  return out;
}

}  // namespace entgraph
