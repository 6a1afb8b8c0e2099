// entgraph: k-means for Sparsefinder's clustering predictor (small, low-
// dimensional points: r = 4 projected queries and keys).
//
// k-means++ initialisation (first centroid uniform, each next one drawn with
// probability proportional to the squared distance to the nearest chosen
// one), then Lloyd iterations until no assignment changes or `iterations`
// are done; `restarts` independent runs, the one with the lowest inertia
// (sum of squared distances to the assigned centroid) is kept. Seeded with
// std::mt19937_64 and the library's own uniform helpers, so the result is the
// same on every platform. An empty cluster keeps its previous centroid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "entgraph/matrix_view.hpp"

namespace entgraph {

struct KMeansOptions {
  std::size_t clusters = 4;     // k >= 1
  std::size_t restarts = 3;     // >= 1
  std::size_t iterations = 20;  // Lloyd iterations at most (0: k-means++ only)
  std::uint64_t seed = 0;
};

struct KMeansResult {
  std::size_t clusters = 0;
  std::size_t dim = 0;
  std::vector<float> centroids;         // clusters x dim, row-major
  std::vector<std::uint32_t> assignment;  // nearest centroid of each point
  double inertia = 0;                   // sum of squared distances to the assigned centroids
  std::size_t iterations = 0;           // Lloyd iterations run by the kept restart
};

// Clusters the rows of points (n x dim). Throws entgraph::Error
// ("kmeans: ...") if points is empty, clusters or restarts is 0, or a value is
// not finite. With fewer distinct points than clusters, some centroids repeat.
KMeansResult kmeans(MatrixView<const float> points, const KMeansOptions& options);

// Only the k-means++ initialisation (clusters x dim centroids), for tests.
std::vector<float> kmeans_plus_plus(MatrixView<const float> points, std::size_t clusters, std::uint64_t seed);

// The `top` nearest centroids of each point (n x top, nearest first; ties to
// the lower index). centroids is clusters x points.cols. Throws
// entgraph::Error unless 1 <= top <= clusters and the sizes agree.
std::vector<std::uint32_t> nearest_centroids(MatrixView<const float> points, const std::vector<float>& centroids,
                                             std::size_t clusters, std::size_t top);

}  // namespace entgraph
