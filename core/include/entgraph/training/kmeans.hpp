// entgraph: k-means for Sparsefinder's clustering predictor (small, low-
// dimensional points: r = 4 projected queries and keys).
//
// Greedy k-means++ initialisation (Arthur and Vassilvitskii 2007, "k-means++:
// the advantages of careful seeding", section 5: the first centroid is a
// uniform point; each next one is the best, by the inertia it leaves, of
// 2 + floor(ln k) points drawn with probability proportional to the squared
// distance to the nearest centroid chosen so far), then Lloyd iterations:
// each moves every centroid to the mean of its points (an empty cluster keeps
// its centroid) and assigns every point to its nearest centroid (ties to the
// lower index). `restarts` independent runs; each stops when no assignment
// changes, when the centroids moved less than `tolerance` allows, or after
// `iterations`; the one with the lowest inertia (sum of squared distances to
// the assigned centroids) is kept and, if it stopped on the tolerance, goes
// on until no assignment changes (`iterations` in all at most).
//
// Arithmetic, fixed so that results are the same on every platform and
// instruction set: a squared distance is computed in float, coordinates
// added in order from the first, between the point and the centroid rounded
// to float (centroids are returned as these floats); the per-cluster sums
// behind the means and the inertia are in double. For k (dim + 4) > 64 the
// iterations skip, with Hamerly's bounds (G. Hamerly, "Making k-means even
// faster", SDM 2010), the points that provably keep their centroid; the
// assignments are the same as without. Seeded with std::mt19937_64 and the
// library's own uniform helpers.
//
// KMeansGeometry::spherical clusters directions instead (the Routing
// Transformer's clustering of queries and keys), with the same restarts,
// iterations and tolerance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "entgraph/matrix_view.hpp"

namespace entgraph {

enum class KMeansGeometry {
  // Squared Euclidean distances in float, greedy k-means++, means: all of the
  // above.
  euclidean,
  // Spherical k-means (Dhillon and Modha 2001, "Concept decompositions for
  // large sparse text data using clustering") as the Routing Transformer
  // (Roy et al. 2021) clusters queries and keys. Every row is scaled to unit
  // length in double (a row whose squared norm is 0 or not finite becomes the
  // zero vector; values are not checked otherwise) and all arithmetic is in
  // double on these unit rows, coordinates added in order; centroids are
  // rounded to float only when returned. Plain k-means++ seeding (one draw
  // per centroid, with probability proportional to the squared distance to
  // the nearest centroid so far; uniform while all are 0); each point goes to
  // the centroid of largest dot product (ties to the lower index); a centroid
  // moves to the sum of its points scaled to unit length (an empty cluster,
  // or a zero sum, keeps it). Inertia and tolerance are measured on the unit
  // rows.
  spherical,
};

struct KMeansOptions {
  std::size_t clusters = 4;     // k >= 1
  std::size_t restarts = 3;     // >= 1
  std::size_t iterations = 20;  // Lloyd iterations per restart at most (0: k-means++ only)
  std::uint64_t seed = 0;
  // A restart also stops once the centroids' squared moves in one iteration
  // sum to at most tolerance times the points' mean per-coordinate variance
  // (scikit-learn's KMeans `tol`: same definition and default). This only
  // cuts short the restarts that are not kept; 0: every restart runs until
  // no assignment changes. Finite, >= 0.
  double tolerance = 1e-4;
  KMeansGeometry geometry = KMeansGeometry::euclidean;
  // The random engine's seed as is, for a caller that keys its own streams
  // (the routing predictor: per seed, layer and head); unset, the engine's
  // seed is derived from `seed`.
  std::optional<std::uint64_t> engine_seed;
};

struct KMeansResult {
  std::size_t clusters = 0;
  std::size_t dim = 0;
  std::vector<float> centroids;           // clusters x dim, row-major
  std::vector<std::uint32_t> assignment;  // nearest centroid of each point
  double inertia = 0;                     // sum of squared distances to the assigned centroids (double)
  std::size_t iterations = 0;             // Lloyd iterations (centroid moves) of the kept restart
  std::size_t total_iterations = 0;       // Lloyd iterations of all restarts together
};

// Clusters the rows of points (n x dim). Throws entgraph::Error
// ("kmeans: ...") if points is empty, clusters or restarts is 0, a value is
// not finite or beyond 1e15 in magnitude (euclidean only), or tolerance is
// negative or not finite. With fewer distinct points than clusters, some
// centroids repeat.
KMeansResult kmeans(MatrixView<const float> points, const KMeansOptions& options);

// Only the k-means++ initialisation (clusters x dim centroids): the first
// restart of kmeans() (euclidean, no engine_seed) with the same seed starts
// from these. For tests.
std::vector<float> kmeans_plus_plus(MatrixView<const float> points, std::size_t clusters, std::uint64_t seed);

// The `top` nearest centroids of each point (n x top, nearest first; ties to
// the lower index). centroids is clusters x points.cols. Throws
// entgraph::Error unless 1 <= top <= clusters and the sizes agree.
std::vector<std::uint32_t> nearest_centroids(MatrixView<const float> points, const std::vector<float>& centroids,
                                             std::size_t clusters, std::size_t top);

}  // namespace entgraph
