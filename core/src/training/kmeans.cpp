// entgraph: k-means with greedy k-means++ initialisation, Lloyd iterations
// (with Hamerly's bounds for larger k) and restarts (see training/kmeans.hpp);
// spherical k-means on the same restarts.
//
// The loops that the compiler vectorises run across points, never inside one
// sum, and every sum has a fixed order, so no instruction set changes a bit
// of the result.
#include "entgraph/training/kmeans.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <random>
#include <string>

#include "entgraph/error.hpp"
#include "runtime/numbers.hpp"
#include "runtime/random.hpp"
#include "training/normalised_rows.hpp"

namespace entgraph {
namespace {

// Points are processed in blocks of this many (a multiple of 16), whose
// scratch stays in L1.
constexpr std::size_t kBlock = 256;
// Squared float distances stay finite below this coordinate magnitude.
constexpr float kMaxCoordinate = 1e15f;
constexpr float kInf = std::numeric_limits<float>::infinity();

// values: also check that every value is finite and at most 1e15 in magnitude.
void check_points(MatrixView<const float> points, std::size_t clusters, const char* op, bool values = true) {
  if (points.rows == 0 || points.cols == 0)
    throw Error(at_op(op) + "points is empty (got " + std::to_string(points.rows) + " x " +
                std::to_string(points.cols) + ")");
  if (clusters == 0) throw Error(at_op(op) + "clusters must be >= 1 (got 0)");
  if (!values) return;
  for (std::size_t i = 0; i < points.rows; ++i)
    for (std::size_t t = 0; t < points.cols; ++t) {
      if (!std::isfinite(points(i, t)))
        throw Error(at_op(op) + "point " + std::to_string(i) + " is not finite", ErrorCode::bad_value);
      if (std::abs(points(i, t)) > kMaxCoordinate)
        throw Error(at_op(op) + "point " + std::to_string(i) + " has a coordinate beyond 1e15 in magnitude");
    }
}

// The points as columns (dim x stride, stride = n rounded up to a multiple
// of 16, zeros after n), so that the distance loops run across points.
struct Points {
  std::size_t n = 0, dim = 0, stride = 0;
  std::vector<float> cols;

  explicit Points(MatrixView<const float> p)
      : n(p.rows), dim(p.cols), stride((p.rows + 15) / 16 * 16), cols(stride * dim, 0.0f) {
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t t = 0; t < dim; ++t) cols[t * stride + i] = p(i, t);
  }
  float at(std::size_t i, std::size_t t) const { return cols[t * stride + i]; }
};

// Squared distances, in float, coordinates added in order from 0: the one
// formula every assignment uses. G coordinates at a time, G known at compile
// time, so that the loop over points vectorises with the sum in a register.
template <std::size_t G>
void add_sq_group(const float* x, std::size_t stride, std::size_t m, const float* c, bool first,
                  float* __restrict out) {
  for (std::size_t i = 0; i < m; ++i) {
    float s = first ? 0.0f : out[i];
    for (std::size_t t = 0; t < G; ++t) {
      const float v = x[t * stride + i] - c[t];
      s += v * v;
    }
    out[i] = s;
  }
}

// out[i] = |x_i - c|^2 for m points whose dim coordinates are columns `stride` apart.
void sq_dists(const float* x, std::size_t stride, std::size_t m, std::size_t dim, const float* c,
              float* __restrict out) {
  for (std::size_t t = 0; t < dim; t += 4) {
    const float* xt = x + t * stride;
    switch (std::min<std::size_t>(4, dim - t)) {
      case 1: add_sq_group<1>(xt, stride, m, c + t, t == 0, out); break;
      case 2: add_sq_group<2>(xt, stride, m, c + t, t == 0, out); break;
      case 3: add_sq_group<3>(xt, stride, m, c + t, t == 0, out); break;
      default: add_sq_group<4>(xt, stride, m, c + t, t == 0, out); break;
    }
  }
}

float sq_dist_one(const Points& p, std::size_t i, const float* c) {
  float s = 0;
  for (std::size_t t = 0; t < p.dim; ++t) {
    const float v = p.at(i, t) - c[t];
    s += v * v;
  }
  return s;
}

// The nearest (ties to the lower index) and second nearest of k centroids
// for m points. The index select is written as a mask so that it vectorises.
void nearest_two(const float* x, std::size_t stride, std::size_t m, std::size_t dim, const float* c,
                 std::size_t k, float* __restrict first, float* __restrict second, std::uint32_t* __restrict arg,
                 float* __restrict d) {
  std::fill(first, first + m, kInf);
  std::fill(second, second + m, kInf);
  std::fill(arg, arg + m, 0u);
  for (std::size_t j = 0; j < k; ++j) {
    sq_dists(x, stride, m, dim, c + j * dim, d);
    const std::uint32_t jj = static_cast<std::uint32_t>(j);
    for (std::size_t i = 0; i < m; ++i) {
      const std::uint32_t take = 0u - static_cast<std::uint32_t>(d[i] < first[i]);
      second[i] = std::min(second[i], std::max(first[i], d[i]));
      arg[i] = (arg[i] & ~take) | (jj & take);
      first[i] = std::min(first[i], d[i]);
    }
  }
}

// sum_i min(w[i], d[i]) in double over m points (m a multiple of 4), in
// four partial sums (lane l takes points l, l + 4, ...) added pairwise: a
// fixed order that leaves the additions independent.
double lane_sum_min(const float* w, const float* d, std::size_t m) {
  double lane[4] = {0, 0, 0, 0};
  for (std::size_t i = 0; i < m; i += 4)
    for (std::size_t l = 0; l < 4; ++l) lane[l] += std::min(w[i + l], d[i + l]);
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

// Greedy k-means++ (Arthur and Vassilvitskii 2007, "k-means++: the advantages
// of careful seeding", with the greedy choice of their section 5): the first
// centroid is a uniform point; each next one is the best, by the potential
// (sum over points of the squared distance to the nearest centroid) it
// leaves, of 2 + floor(ln k) points drawn with probability proportional to
// the squared distance to the nearest centroid chosen so far. A potential is
// the sum, in block order, of per-block lane sums.
std::vector<float> plus_plus(const Points& p, std::size_t k, std::mt19937_64& rng) {
  const std::size_t n = p.n, dim = p.dim, stride = p.stride, blocks = (stride + kBlock - 1) / kBlock;
  std::size_t trials = 2;
  for (double e = 2.718281828459045; e <= static_cast<double>(k); e *= 2.718281828459045) ++trials;
  std::vector<float> c(k * dim), candidates(trials * dim), d(kBlock);
  std::vector<float> closest(stride, 0.0f);  // weight 0 past n
  std::fill(closest.begin(), closest.begin() + static_cast<std::ptrdiff_t>(n), kInf);
  std::vector<double> ends(blocks), potentials(trials);  // ends: running sums of the block sums
  std::vector<std::size_t> drawn(trials);
  std::size_t pick = detail::uniform_below(rng, n);
  for (std::size_t j = 0; j < k; ++j) {
    for (std::size_t t = 0; t < dim; ++t) c[j * dim + t] = p.at(pick, t);
    if (j + 1 == k) break;
    double total = 0;
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::size_t begin = b * kBlock, m = std::min(kBlock, stride - begin);
      sq_dists(p.cols.data() + begin, stride, m, dim, c.data() + j * dim, d.data());
      float* w = closest.data() + begin;
      for (std::size_t i = 0; i < m; ++i) w[i] = std::min(w[i], d[i]);
      total += lane_sum_min(w, w, m);  // the sum of w
      ends[b] = total;
    }
    if (!(total > 0)) {  // every point is on a centroid already: uniform
      pick = detail::uniform_below(rng, n);
      continue;
    }
    for (std::size_t s = 0; s < trials; ++s) {
      // In the first block whose running sum reaches the target (it has
      // weight), the first point whose running sum does, else its last point
      // with weight (the two sums can round differently).
      const double target = detail::uniform_open01(rng) * total;
      const std::size_t b = std::min<std::size_t>(
          static_cast<std::size_t>(std::lower_bound(ends.begin(), ends.end(), target) - ends.begin()), blocks - 1);
      double run = b > 0 ? ends[b - 1] : 0.0;
      std::size_t at = b * kBlock;
      for (std::size_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
        if (!(closest[i] > 0)) continue;
        at = i;
        run += closest[i];
        if (run >= target) break;
      }
      drawn[s] = at;
      for (std::size_t t = 0; t < dim; ++t) candidates[s * dim + t] = p.at(at, t);
    }
    std::fill(potentials.begin(), potentials.end(), 0.0);
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::size_t begin = b * kBlock, m = std::min(kBlock, stride - begin);
      for (std::size_t s = 0; s < trials; ++s) {
        sq_dists(p.cols.data() + begin, stride, m, dim, candidates.data() + s * dim, d.data());
        potentials[s] += lane_sum_min(closest.data() + begin, d.data(), m);
      }
    }
    std::size_t best = 0;
    for (std::size_t s = 1; s < trials; ++s)
      if (potentials[s] < potentials[best]) best = s;
    pick = drawn[best];
  }
  return c;
}

// One run of Lloyd iterations from given centroids. A step moves every
// centroid with points to their mean (rounded to float; an empty centroid
// stays), then assigns every point to its nearest centroid. The per-cluster
// sums are kept in double and updated only for the points that change
// cluster, in point order.
//
// With bounds (Hamerly, "Making k-means even faster", SDM 2010) a point keeps
// an upper bound on the distance to its centroid and a lower bound on the
// distance to every other one; while the upper bound is below the lower
// bound or half the distance from its centroid to the next one, the point
// cannot change cluster and is not rescanned. Bounds are on distances, not
// squares (triangle inequality), in float, and are kept looser than the
// float distances they bound by a relative slack far above all rounding (a
// float squared distance over dim coordinates is within about (dim + 2)
// 2^-24 of the exact one), so a point is only left in place when the plain
// step's own comparison of float distances would keep it there too: both
// give the same assignments.
class LloydRun {
 public:
  LloydRun(const Points& p, std::size_t k)
      : p_(p),
        k_(k),
        // A full scan costs about k (dim + 4) operations per point; the
        // bounds' bookkeeping about 64 (measured at dim = 4, k = 4, 8, 16).
        bounded_(k * (p.dim + 4) > 64),
        c_(k * p.dim),
        sums_(k * p.dim),
        counts_(k),
        move_(k),
        half_gap_(k),
        upper_(bounded_ ? p.n : 0),
        lower_(bounded_ ? p.n : 0),
        assignment_(p.n),
        first_(kBlock),
        second_(kBlock),
        arg_(kBlock),
        scratch_(kBlock),
        gathered_(kBlock * p.dim),
        need_(kBlock) {
    const double slack = static_cast<double>(p.dim + 16) * 0x1p-23;
    up_ = static_cast<float>(1 + 3 * slack);
    down_ = static_cast<float>(1 - 3 * slack);
  }

  // Assigns every point to the nearest of the centroids c (k x dim).
  void start(const std::vector<float>& c) {
    set_centroids(c);
    std::fill(sums_.begin(), sums_.end(), 0.0);
    std::fill(counts_.begin(), counts_.end(), 0);
    for (std::size_t begin = 0; begin < p_.n; begin += kBlock) {
      const std::size_t m = std::min(kBlock, p_.n - begin);
      scan(p_.cols.data() + begin, p_.stride, m);
      for (std::size_t q = 0; q < m; ++q) {
        const std::size_t i = begin + q;
        assignment_[i] = arg_[q];
        if (bounded_) set_bounds(i, q);
        ++counts_[arg_[q]];
        for (std::size_t t = 0; t < p_.dim; ++t) sums_[arg_[q] * p_.dim + t] += p_.at(i, t);
      }
    }
  }

  // One step; returns whether any assignment changed. shift2 is the sum of
  // the squared centroid moves.
  bool step(double& shift2) {
    shift2 = update_centroids();
    return bounded_ ? reassign_bounded() : reassign_all();
  }

  // sum_i |x_i - c_{a(i)}|^2 in double, in point order.
  double inertia() const {
    double total = 0;
    for (std::size_t i = 0; i < p_.n; ++i) {
      const float* c = c_.data() + assignment_[i] * p_.dim;
      double s = 0;
      for (std::size_t t = 0; t < p_.dim; ++t) {
        const double v = static_cast<double>(p_.at(i, t)) - c[t];
        s += v * v;
      }
      total += s;
    }
    return total;
  }

  const std::vector<float>& centroids() const { return c_; }
  const std::vector<std::uint32_t>& assignment() const { return assignment_; }

 private:
  // Moves the centroids; returns the sum of their squared moves and sets
  // move_ to upper bounds of the moves.
  double update_centroids() {
    const std::size_t dim = p_.dim;
    std::vector<float> next = c_;
    double shift2 = 0;
    for (std::size_t j = 0; j < k_; ++j) {
      double s = 0;
      if (counts_[j] > 0)
        for (std::size_t t = 0; t < dim; ++t) {
          next[j * dim + t] = static_cast<float>(sums_[j * dim + t] / static_cast<double>(counts_[j]));
          const double x = static_cast<double>(next[j * dim + t]) - c_[j * dim + t];
          s += x * x;
        }
      shift2 += s;
      move_[j] = static_cast<float>(std::sqrt(s)) * up_;
    }
    set_centroids(next);
    return shift2;
  }

  // The centroids, and for the bounds half the distance from each to the next.
  void set_centroids(const std::vector<float>& c) {
    const std::size_t dim = p_.dim;
    c_ = c;
    if (!bounded_) return;
    for (std::size_t j = 0; j < k_; ++j) {
      double nearest = std::numeric_limits<double>::infinity();
      for (std::size_t o = 0; o < k_; ++o) {
        if (o == j) continue;
        double s = 0;
        for (std::size_t t = 0; t < dim; ++t) {
          const double x = static_cast<double>(c[j * dim + t]) - c[o * dim + t];
          s += x * x;
        }
        nearest = std::min(nearest, s);
      }
      half_gap_[j] = static_cast<float>(0.5 * std::sqrt(nearest)) * down_;
    }
  }

  void scan(const float* x, std::size_t stride, std::size_t m) {
    nearest_two(x, stride, m, p_.dim, c_.data(), k_, first_.data(), second_.data(), arg_.data(), scratch_.data());
  }

  // Fresh bounds for point i from scan slot q.
  void set_bounds(std::size_t i, std::size_t q) {
    upper_[i] = std::sqrt(first_[q]) * up_;
    lower_[i] = std::sqrt(second_[q]) * down_;
  }

  void move_point(std::size_t i, std::uint32_t from, std::uint32_t to) {
    assignment_[i] = to;
    --counts_[from];
    ++counts_[to];
    for (std::size_t t = 0; t < p_.dim; ++t) {
      sums_[from * p_.dim + t] -= p_.at(i, t);
      sums_[to * p_.dim + t] += p_.at(i, t);
    }
  }

  bool reassign_all() {
    bool changed = false;
    for (std::size_t begin = 0; begin < p_.n; begin += kBlock) {
      const std::size_t m = std::min(kBlock, p_.n - begin);
      scan(p_.cols.data() + begin, p_.stride, m);
      for (std::size_t q = 0; q < m; ++q) {
        const std::uint32_t from = assignment_[begin + q];
        if (from == arg_[q]) continue;
        changed = true;
        move_point(begin + q, from, arg_[q]);
      }
    }
    return changed;
  }

  bool reassign_bounded() {
    const std::size_t dim = p_.dim, n = p_.n;
    // Every lower bound drops by the largest move of another centroid.
    float far_move = 0, other_move = 0;
    std::size_t far = 0;
    for (std::size_t j = 0; j < k_; ++j) {
      if (move_[j] > far_move) {
        other_move = far_move;
        far_move = move_[j];
        far = j;
      } else if (move_[j] > other_move) {
        other_move = move_[j];
      }
    }
    // Float bounds rounded outwards after each update.
    const float grow = 1 + 0x1p-22f, shrink = 1 - 0x1p-22f;
    bool changed = false;
    for (std::size_t begin = 0; begin < n; begin += kBlock) {
      const std::size_t m = std::min(kBlock, n - begin);
      std::size_t loose = 0;
      for (std::size_t i = begin; i < begin + m; ++i) {
        const std::uint32_t a = assignment_[i];
        upper_[i] = (upper_[i] + move_[a]) * grow;
        lower_[i] = (lower_[i] - (a == far ? other_move : far_move)) * shrink;
        need_[loose] = static_cast<std::uint32_t>(i);
        loose += !(upper_[i] < std::max(half_gap_[a], lower_[i]));
      }
      // Tighten the upper bound to the distance itself; rescan if still loose.
      std::size_t rescan = 0;
      for (std::size_t q = 0; q < loose; ++q) {
        const std::size_t i = need_[q];
        const std::uint32_t a = assignment_[i];
        upper_[i] = std::sqrt(sq_dist_one(p_, i, c_.data() + a * dim)) * up_;
        need_[rescan] = static_cast<std::uint32_t>(i);
        rescan += !(upper_[i] < std::max(half_gap_[a], lower_[i]));
      }
      if (rescan == 0) continue;
      for (std::size_t t = 0; t < dim; ++t)
        for (std::size_t q = 0; q < rescan; ++q) gathered_[t * kBlock + q] = p_.at(need_[q], t);
      scan(gathered_.data(), kBlock, rescan);
      for (std::size_t q = 0; q < rescan; ++q) {
        const std::size_t i = need_[q];
        const std::uint32_t from = assignment_[i];
        set_bounds(i, q);
        if (from == arg_[q]) continue;
        changed = true;
        move_point(i, from, arg_[q]);
      }
    }
    return changed;
  }

  const Points& p_;
  std::size_t k_;
  bool bounded_;
  float up_ = 1, down_ = 1;  // a computed distance times these is an upper / lower bound
  std::vector<float> c_;
  std::vector<double> sums_;
  std::vector<std::size_t> counts_;
  std::vector<float> move_, half_gap_, upper_, lower_;
  std::vector<std::uint32_t> assignment_;
  std::vector<float> first_, second_;  // scan results of one block
  std::vector<std::uint32_t> arg_;
  std::vector<float> scratch_, gathered_;  // gathered_: the points to rescan, as columns kBlock apart
  std::vector<std::uint32_t> need_;
};

// ---------------------------------------------------------------- spherical

// The rows scaled to unit length (KMeansGeometry::spherical), row-major.
struct UnitPoints {
  std::size_t n = 0, dim = 0;
  std::vector<double> x;

  explicit UnitPoints(MatrixView<const float> p) : n(p.rows), dim(p.cols), x(p.rows * p.cols) {
    for (std::size_t i = 0; i < n; ++i) detail::normalised_row(p, i, x.data() + i * dim);
  }
  const double* row(std::size_t i) const { return x.data() + i * dim; }
  double at(std::size_t i, std::size_t t) const { return x[i * dim + t]; }
};

double dot(const double* a, const double* b, std::size_t dim) {
  double s = 0.0;
  for (std::size_t t = 0; t < dim; ++t) s += a[t] * b[t];
  return s;
}

// Plain k-means++ on the unit rows, on squared distances: the first centroid
// and any drawn while every point sits on a centroid are uniform points; the
// others are drawn by a linear scan of the distances. The draws are the
// routing predictor's own (uniform_below_reject_low, uniform01), so its
// parameter files stay what they were.
std::vector<double> spherical_plus_plus(const UnitPoints& p, std::size_t k, std::mt19937_64& rng) {
  const std::size_t n = p.n, dim = p.dim;
  std::vector<double> c(k * dim), dist(n, std::numeric_limits<double>::infinity());
  for (std::size_t j = 0; j < k; ++j) {
    double total = 0.0;
    if (j > 0)
      for (double v : dist) total += v;
    std::size_t pick = n - 1;
    if (!(total > 0.0)) {
      pick = static_cast<std::size_t>(detail::uniform_below_reject_low(rng, n));
    } else {
      double u = detail::uniform01(rng) * total;
      for (std::size_t i = 0; i < n; ++i) {
        if (u < dist[i]) {
          pick = i;
          break;
        }
        u -= dist[i];
      }
    }
    std::copy(p.row(pick), p.row(pick) + dim, c.begin() + static_cast<std::ptrdiff_t>(j * dim));
    const double* cj = c.data() + j * dim;
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0.0;
      for (std::size_t t = 0; t < dim; ++t) s += (p.row(i)[t] - cj[t]) * (p.row(i)[t] - cj[t]);
      dist[i] = std::min(dist[i], s);
    }
  }
  return c;
}

// One run of spherical Lloyd iterations, with LloydRun's interface. A step
// moves every centroid to its points' sum scaled to unit length (the sums
// redone in point order), then assigns every point to the centroid of
// largest dot product.
class SphericalRun {
 public:
  SphericalRun(const UnitPoints& p, std::size_t k)
      : p_(p), k_(k), c_(k * p.dim), sums_(k * p.dim), counts_(k), assignment_(p.n) {}

  void start(const std::vector<double>& c) {
    c_ = c;
    assign();
  }

  bool step(double& shift2) {
    shift2 = update_centroids();
    return assign();
  }

  double inertia() const {
    double total = 0;
    for (std::size_t i = 0; i < p_.n; ++i) {
      const double* c = c_.data() + assignment_[i] * p_.dim;
      double s = 0;
      for (std::size_t t = 0; t < p_.dim; ++t) s += (p_.at(i, t) - c[t]) * (p_.at(i, t) - c[t]);
      total += s;
    }
    return total;
  }

  std::vector<float> centroids() const { return std::vector<float>(c_.begin(), c_.end()); }
  const std::vector<std::uint32_t>& assignment() const { return assignment_; }

 private:
  bool assign() {
    const std::size_t dim = p_.dim;
    bool changed = false;
    for (std::size_t i = 0; i < p_.n; ++i) {
      std::uint32_t best = 0;
      double best_value = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < k_; ++j) {
        const double v = dot(p_.row(i), c_.data() + j * dim, dim);
        if (v > best_value) best_value = v, best = static_cast<std::uint32_t>(j);
      }
      if (assignment_[i] != best) assignment_[i] = best, changed = true;
    }
    return changed;
  }

  // Returns the sum of the centroids' squared moves.
  double update_centroids() {
    const std::size_t dim = p_.dim;
    std::fill(sums_.begin(), sums_.end(), 0.0);
    std::fill(counts_.begin(), counts_.end(), 0);
    for (std::size_t i = 0; i < p_.n; ++i) {
      ++counts_[assignment_[i]];
      for (std::size_t t = 0; t < dim; ++t) sums_[assignment_[i] * dim + t] += p_.at(i, t);
    }
    double shift2 = 0;
    for (std::size_t j = 0; j < k_; ++j) {
      const double* sum = sums_.data() + j * dim;
      const double norm = std::sqrt(dot(sum, sum, dim));
      if (counts_[j] == 0 || !(norm > 0.0)) continue;
      for (std::size_t t = 0; t < dim; ++t) {
        const double next = sum[t] / norm, move = next - c_[j * dim + t];
        shift2 += move * move;
        c_[j * dim + t] = next;
      }
    }
    return shift2;
  }

  const UnitPoints& p_;
  std::size_t k_;
  std::vector<double> c_, sums_;
  std::vector<std::size_t> counts_;
  std::vector<std::uint32_t> assignment_;
};

// ---------------------------------------------------------------- restarts

// Mean over coordinates of the points' variance (two passes, in point order).
template <class P>
double mean_variance(const P& p) {
  double total = 0;
  for (std::size_t t = 0; t < p.dim; ++t) {
    double mean = 0, var = 0;
    for (std::size_t i = 0; i < p.n; ++i) mean += p.at(i, t);
    mean /= static_cast<double>(p.n);
    for (std::size_t i = 0; i < p.n; ++i) var += (p.at(i, t) - mean) * (p.at(i, t) - mean);
    total += var / static_cast<double>(p.n);
  }
  return total / static_cast<double>(p.dim);
}

// Runs options.restarts restarts of Run (LloydRun or SphericalRun) from the
// seeding's centroids, each until no assignment changes, the centroids moved
// less than the tolerance allows, or options.iterations; keeps the one of
// lowest inertia and lets it go on until no assignment changes.
template <class Run, class P, class Seeding>
KMeansResult lloyd_restarts(const P& p, const KMeansOptions& options, Seeding seeding) {
  const std::size_t k = options.clusters;
  const double tolerance = options.tolerance * mean_variance(p);
  std::mt19937_64 rng(options.engine_seed ? *options.engine_seed : detail::mix_seed(options.seed, 0x6b6d, 0));
  KMeansResult best;
  best.clusters = k;
  best.dim = p.dim;
  best.inertia = std::numeric_limits<double>::infinity();
  // run: the current restart; kept: the best so far, whose iterations go on
  // after the last restart until no assignment changes.
  auto run = std::make_unique<Run>(p, k), kept = std::make_unique<Run>(p, k);
  bool kept_changed = false;
  for (std::size_t restart = 0; restart < options.restarts; ++restart) {
    run->start(seeding(p, k, rng));
    std::size_t it = 0;
    bool changed = true;  // from no assignment at all
    while (it < options.iterations && changed) {
      ++it;
      double shift2 = 0;
      changed = run->step(shift2);
      if (shift2 <= tolerance) break;
    }
    best.total_iterations += it;
    const double inertia = run->inertia();
    if (inertia < best.inertia) {
      std::swap(run, kept);
      kept_changed = changed;
      best.inertia = inertia;
      best.iterations = it;
    }
  }
  while (best.iterations < options.iterations && kept_changed) {
    ++best.iterations;
    ++best.total_iterations;
    double shift2 = 0;
    kept_changed = kept->step(shift2);
  }
  best.centroids = kept->centroids();
  best.assignment = kept->assignment();
  best.inertia = kept->inertia();
  return best;
}

}  // namespace

std::vector<float> kmeans_plus_plus(MatrixView<const float> points, std::size_t clusters, std::uint64_t seed) {
  check_points(points, clusters, "kmeans_plus_plus");
  std::mt19937_64 rng(detail::mix_seed(seed, 0x6b6d, 0));
  return plus_plus(Points(points), clusters, rng);
}

KMeansResult kmeans(MatrixView<const float> points, const KMeansOptions& options) {
  const bool spherical = options.geometry == KMeansGeometry::spherical;
  check_points(points, options.clusters, "kmeans", !spherical);
  if (options.restarts == 0) throw Error("kmeans: restarts must be >= 1 (got 0)");
  if (!(options.tolerance >= 0) || !std::isfinite(options.tolerance))
    throw Error("kmeans: tolerance must be finite and >= 0 (got " + detail::number_text(options.tolerance) + ")");
  if (spherical) return lloyd_restarts<SphericalRun>(UnitPoints(points), options, spherical_plus_plus);
  return lloyd_restarts<LloydRun>(Points(points), options, plus_plus);
}

std::vector<std::uint32_t> nearest_centroids(MatrixView<const float> points, const std::vector<float>& centroids,
                                             std::size_t clusters, std::size_t top) {
  const std::size_t dim = points.cols;
  if (clusters == 0 || centroids.size() != clusters * dim)
    throw Error(at_op("nearest_centroids") + "centroids must hold clusters * dim = " + std::to_string(clusters * dim) +
                " values (got " + std::to_string(centroids.size()) + ")");
  if (top == 0 || top > clusters)
    throw Error(at_op("nearest_centroids") + "top must be in [1, clusters] (got " + std::to_string(top) + ", clusters " +
                std::to_string(clusters) + ")");
  std::vector<std::uint32_t> out(points.rows * top);
  std::vector<std::pair<double, std::uint32_t>> dist(clusters);
  for (std::size_t i = 0; i < points.rows; ++i) {
    for (std::size_t j = 0; j < clusters; ++j) {
      double s = 0;
      for (std::size_t t = 0; t < dim; ++t) {
        const double x = static_cast<double>(points(i, t)) - centroids[j * dim + t];
        s += x * x;
      }
      dist[j] = {s, static_cast<std::uint32_t>(j)};
    }
    std::partial_sort(dist.begin(), dist.begin() + static_cast<std::ptrdiff_t>(top), dist.end());
    for (std::size_t t = 0; t < top; ++t) out[i * top + t] = dist[t].second;
  }
  return out;
}

}  // namespace entgraph
