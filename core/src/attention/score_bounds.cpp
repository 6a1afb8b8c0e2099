// Low-rank upper bounds on attention scores (see score_bounds.hpp).
#include "entgraph/score_bounds.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>

#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "kernels/bf16_scores.hpp"
#include "kernels/matmul_kernels.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {
namespace {

constexpr const char* kOp = "ScoreBounds";

// Orthonormalises the r columns of v (d x r, row-major) in place by modified
// Gram-Schmidt, twice (the bounds need U^T U = I to rounding). A column that
// vanishes is replaced by the first coordinate axis that survives.
void orthonormalise(std::vector<double>& v, std::size_t d, std::size_t r) {
  for (std::size_t y = 0; y < r; ++y) {
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t z = 0; z < y; ++z) {
        double dot = 0.0;
        for (std::size_t x = 0; x < d; ++x) dot += v[x * r + y] * v[x * r + z];
        for (std::size_t x = 0; x < d; ++x) v[x * r + y] -= dot * v[x * r + z];
      }
    double norm = 0.0;
    for (std::size_t x = 0; x < d; ++x) norm += v[x * r + y] * v[x * r + y];
    if (norm > 1e-24) {
      for (std::size_t x = 0; x < d; ++x) v[x * r + y] /= std::sqrt(norm);
      continue;
    }
    for (std::size_t axis = 0; axis < d; ++axis) {  // degenerate: try the axes
      for (std::size_t x = 0; x < d; ++x) v[x * r + y] = x == axis ? 1.0 : 0.0;
      for (std::size_t z = 0; z < y; ++z) {
        const double dot = v[axis * r + z];
        for (std::size_t x = 0; x < d; ++x) v[x * r + y] -= dot * v[x * r + z];
      }
      norm = 0.0;
      for (std::size_t x = 0; x < d; ++x) norm += v[x * r + y] * v[x * r + y];
      if (norm > 0.25) {
        for (std::size_t x = 0; x < d; ++x) v[x * r + y] /= std::sqrt(norm);
        break;
      }
    }
  }
}

// An orthonormal basis (d x r) of the top-r eigenspace of the symmetric
// covariance c (d x d), approximately, by subspace iteration started from the
// r coordinate axes of largest variance. Any orthonormal basis gives valid
// bounds; a better one only makes them tighter, so a few iterations do:
// O(d^2 r) each, next to the O(m d^2) covariance.
std::vector<double> principal_basis(const std::vector<double>& c, std::size_t d, std::size_t r) {
  std::vector<std::size_t> axes(d);
  std::iota(axes.begin(), axes.end(), std::size_t{0});
  std::stable_sort(axes.begin(), axes.end(), [&](std::size_t a, std::size_t b) { return c[a * d + a] > c[b * d + b]; });
  std::vector<double> v(d * r, 0.0), w(d * r);
  for (std::size_t y = 0; y < r; ++y) v[axes[y] * r + y] = 1.0;
  for (int iteration = 0; iteration < 12; ++iteration) {
    std::fill(w.begin(), w.end(), 0.0);
    for (std::size_t x = 0; x < d; ++x)
      for (std::size_t z = 0; z < d; ++z) {
        const double cxz = c[x * d + z];
        for (std::size_t y = 0; y < r; ++y) w[x * r + y] += cxz * v[z * r + y];
      }
    v.swap(w);
    orthonormalise(v, d, r);
  }
  return v;
}

// x rounded away from zero by a few ulps of T, so that storing it in T never
// makes a bound term smaller.
template <class T>
T round_up(double x) {
  return static_cast<T>(x * (1.0 + 4.0 * std::numeric_limits<T>::epsilon()));
}

}  // namespace

template <class T>
ScoreBounds<T>::ScoreBounds(ConstMatrix<T> k, double scale, std::size_t rank, const std::uint8_t* key_padding)
    : m_(k.rows), d_(k.cols), rank_(std::min(rank, k.cols)), scale_(scale) {
  if (k.rows == 0 || k.cols == 0)
    throw Error(std::string(kOp) + ": k is empty (got " + detail::num(k.rows) + " x " + detail::num(k.cols) +
                ", expected m >= 1 keys of d >= 1)");
  detail::check_view(kOp, "k", k);
  detail::check_finite<T>(kOp, "k", k);
  if (!std::isfinite(scale) || scale == 0.0)
    throw Error(std::string(kOp) + ": scale is not a finite non-zero number (got " + detail::num(scale) + ")");
  const std::size_t d = d_, requested = rank_;  // min(rank, d); auto decides below
  auto kept = [&](std::size_t j) { return key_padding == nullptr || key_padding[j] != 0; };

  mean_.assign(d, 0.0);
  std::size_t count = 0;
  for (std::size_t j = 0; j < m_; ++j) {
    if (!kept(j)) continue;
    ++count;
    for (std::size_t x = 0; x < d; ++x) mean_[x] += static_cast<double>(k(j, x));
  }
  if (count > 0)
    for (double& x : mean_) x /= static_cast<double>(count);
  if (requested > 0 && count > 0) {
    // Covariance of the centred keys, C = Kc^T Kc, as one GEMM on the
    // library's kernels: the basis only needs to be good, not exact.
    std::vector<T> centred(count * d), cov_t(d * d);
    for (std::size_t j = 0, row = 0; j < m_; ++j) {
      if (!kept(j)) continue;
      for (std::size_t x = 0; x < d; ++x)
        centred[row * d + x] = static_cast<T>(static_cast<double>(k(j, x)) - mean_[x]);
      ++row;
    }
    detail::matmul_kernels_for<T>().gemm_tn(d, d, count, T(1), centred.data(), d, centred.data(), d, cov_t.data(), d,
                                            false, false);
    const std::vector<double> cov(cov_t.begin(), cov_t.end());
    if (rank == kAutoBoundRank) {
      // The smallest of 8 and 16 directions holding enough of the variance
      // (trace of U^T C U over trace of C), else every dimension.
      double total = 0.0;
      for (std::size_t x = 0; x < d; ++x) total += cov[x * d + x];
      rank_ = d;
      for (std::size_t trial : {std::size_t{8}, std::size_t{16}}) {
        if (trial >= d) break;
        std::vector<double> u = principal_basis(cov, d, trial);
        double held = 0.0;
        for (std::size_t y = 0; y < trial; ++y)
          for (std::size_t x = 0; x < d; ++x) {
            double cu = 0.0;
            for (std::size_t z = 0; z < d; ++z) cu += cov[x * d + z] * u[z * trial + y];
            held += u[x * trial + y] * cu;
          }
        if (held >= kAutoRankVariance * total) {
          rank_ = trial;
          basis_ = std::move(u);
          break;
        }
      }
      if (rank_ == d) {  // the identity: bounds are the centred scores themselves
        basis_.assign(d * d, 0.0);
        for (std::size_t x = 0; x < d; ++x) basis_[x * d + x] = 1.0;
      }
    } else if (requested == d) {  // every direction: the identity is as tight and costs O(d) per query
      basis_.assign(d * d, 0.0);
      for (std::size_t x = 0; x < d; ++x) basis_[x * d + x] = 1.0;
    } else {
      basis_ = principal_basis(cov, d, requested);
    }
  } else {
    rank_ = rank == kAutoBoundRank ? 0 : requested;
    basis_.assign(d * rank_, 0.0);
    if (rank_ == d)
      for (std::size_t x = 0; x < d; ++x) basis_[x * d + x] = 1.0;
  }
  margin_ = 4.0 * static_cast<double>(d + 3 * rank_ + 16) * std::numeric_limits<T>::epsilon();
  identity_ = rank_ == d;
  for (std::size_t x = 0; x < d && identity_; ++x)
    for (std::size_t y = 0; y < d && identity_; ++y) identity_ = basis_[x * d + y] == (x == y ? 1.0 : 0.0);
  // The keys' side, one row per bound column, so a tile's bounds are qt times it.
  const std::size_t r = rank_;
  kt_.assign(width() * m_, T(0));
  std::vector<double> c(d), proj(r);
  for (std::size_t j = 0; j < m_; ++j) {
    double norm2 = 0.0, centred2 = 0.0;
    for (std::size_t x = 0; x < d; ++x) {
      c[x] = static_cast<double>(k(j, x)) - mean_[x];
      norm2 += static_cast<double>(k(j, x)) * static_cast<double>(k(j, x));
      centred2 += c[x] * c[x];
    }
    if (identity_) {
      std::copy(c.begin(), c.end(), proj.begin());
    } else {
      std::fill(proj.begin(), proj.end(), 0.0);
      for (std::size_t x = 0; x < d; ++x)
        for (std::size_t y = 0; y < r; ++y) proj[y] += basis_[x * r + y] * c[x];
    }
    double resid2 = 0.0;  // 0 for the identity, whose projection is the whole key
    for (std::size_t x = 0; x < d && !identity_; ++x) {
      double e = c[x];
      for (std::size_t y = 0; y < r; ++y) e -= basis_[x * r + y] * proj[y];
      resid2 += e * e;
    }
    for (std::size_t y = 0; y < r; ++y) kt_[y * m_ + j] = static_cast<T>(proj[y]);
    kt_[r * m_ + j] = round_up<T>(std::sqrt(resid2));
    // The rounding term scales with the larger of the score's terms (||k||)
    // and the bound's terms (||k - mu||).
    kt_[(r + 1) * m_ + j] = round_up<T>(std::sqrt(norm2) + std::sqrt(centred2));
  }
  if constexpr (std::is_same_v<T, float>) {
    if (identity_ && detail::bf16_scores_kernel() != nullptr) {
      std::vector<float> centred(m_ * d);
      for (std::size_t j = 0; j < m_; ++j) {
        double norm2 = 0.0;
        for (std::size_t x = 0; x < d; ++x) {
          centred[j * d + x] = kt_[x * m_ + j];
          norm2 += static_cast<double>(centred[j * d + x]) * static_cast<double>(centred[j * d + x]);
        }
        kmax_ = std::max(kmax_, std::sqrt(norm2));
        round_max_ = std::max(round_max_, static_cast<double>(kt_[(d + 1) * m_ + j]));
      }
      kbf_ = detail::pack_bf16_keys(centred.data(), m_, d, d);
    }
  }
}

template <class T>
double ScoreBounds<T>::prepare_query(const T* q, T* qt) const {
  const std::size_t d = d_, r = rank_;
  double offset = 0.0, norm2 = 0.0, resid2 = 0.0;
  if (identity_) {  // q^ = scale q: O(d), not O(d^2)
    for (std::size_t x = 0; x < d; ++x) {
      const double qx = scale_ * static_cast<double>(q[x]);
      offset += qx * mean_[x];
      norm2 += qx * qx;
      qt[x] = static_cast<T>(qx);
    }
    qt[d] = T(0);
    qt[d + 1] = round_up<T>(margin_ * std::sqrt(norm2));
    return offset + margin_ * std::abs(offset);
  }
  std::vector<double> p(r, 0.0);
  for (std::size_t x = 0; x < d; ++x) {
    const double qx = scale_ * static_cast<double>(q[x]);
    offset += qx * mean_[x];
    norm2 += qx * qx;
    for (std::size_t y = 0; y < r; ++y) p[y] += basis_[x * r + y] * qx;
  }
  for (std::size_t x = 0; x < d; ++x) {
    double e = scale_ * static_cast<double>(q[x]);
    for (std::size_t y = 0; y < r; ++y) e -= basis_[x * r + y] * p[y];
    resid2 += e * e;
  }
  for (std::size_t y = 0; y < r; ++y) qt[y] = static_cast<T>(p[y]);
  qt[r] = round_up<T>(std::sqrt(resid2));
  // The rounding term, plus what the offset's own rounding may hide.
  qt[r + 1] = round_up<T>(margin_ * std::sqrt(norm2));
  return offset + margin_ * std::abs(offset);
}

template <class T>
void ScoreBounds<T>::bound_block(const T* qt, std::size_t rows, std::size_t ldq, std::size_t j0, std::size_t j1,
                                 T* bounds, std::size_t ldb, T* group_max, std::size_t ldg) const {
  const std::size_t groups = (j1 - j0 + kGroupKeys - 1) / kGroupKeys;
  if constexpr (std::is_same_v<T, float>) {
    static_assert(kGroupKeys == detail::kBf16GroupKeys);
    if (uses_bf16() && j0 % detail::kBf16BlockKeys == 0) {
      const std::size_t pairs = (d_ + 1) / 2;
      std::vector<std::uint32_t> q(rows * pairs);
      std::vector<float> margin(rows);
      for (std::size_t r = 0; r < rows; ++r) {
        const T* row = qt + r * ldq;
        for (std::size_t p = 0; p < pairs; ++p) {
          const std::uint32_t lo = detail::to_bf16(row[2 * p]);
          const std::uint32_t hi = 2 * p + 1 < d_ ? detail::to_bf16(row[2 * p + 1]) : 0u;
          q[r * pairs + p] = lo | (hi << 16);
        }
        margin[r] = round_up<float>(bf16_margin(row));
      }
      std::vector<float> unused;  // the kernel always reports group maxima
      if (group_max == nullptr) {
        unused.resize(rows * groups);
        group_max = unused.data();
        ldg = groups;
      }
      detail::bf16_scores_kernel()(q.data(), rows,
                                   kbf_.data() + (j0 / detail::kBf16BlockKeys) * pairs * 2 * detail::kBf16BlockKeys,
                                   pairs, j1 - j0, margin.data(), bounds, ldb, group_max, ldg);
      return;
    }
  }
  // bounds = qt (rows x w) * kt[:, j0:j1] (w x (j1 - j0)), kt's rows m apart.
  const detail::MatmulKernels<T>& mk = detail::matmul_kernels_for<T>();
  mk.gemm_nn(rows, j1 - j0, width(), T(1), qt, ldq, kt_.data() + j0, m_, bounds, ldb, false, false);
  if (group_max == nullptr) return;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t g = 0; g < groups; ++g) {
      const std::size_t a = g * kGroupKeys;
      group_max[r * ldg + g] = mk.max_value(bounds + r * ldb + a, std::min(kGroupKeys, j1 - j0 - a));
    }
}

// The margin of a bfloat16 bound for the query side qt. With u = 2^-8 (bf16
// rounding) each product q^_x k^_x is within (2u + u^2) |q_x k_x| of q_x k_x, and
// the float accumulation of d + 1 terms adds gamma_(d+1) of their absolute sum;
// sum_x |q_x k_x| <= ||q|| ||k_j - mu|| <= ||q|| kmax. The rounding column's
// largest entry keeps the float bound's own term (the scores the library
// computes), and the 1e-5 covers the accumulation of the margin itself and
// flushed subnormals.
template <class T>
double ScoreBounds<T>::bf16_margin(const T* qt) const {
  const double u = std::ldexp(1.0, -8), gamma = static_cast<double>(d_ + 1) * std::numeric_limits<float>::epsilon();
  const double eps = 2.0 * u + u * u + gamma * (1.0 + u) * (1.0 + u);
  double q2 = 0.0;
  for (std::size_t x = 0; x < d_; ++x) q2 += static_cast<double>(qt[x]) * static_cast<double>(qt[x]);
  return (eps * std::sqrt(q2) * kmax_ + static_cast<double>(qt[d_ + 1]) * round_max_) * (1.0 + 1e-5) + 1e-30;
}

template <class T>
double ScoreBounds<T>::slack(const T* qt, std::size_t j) const {
  if (uses_bf16()) return bf16_margin(qt);
  const double s = static_cast<double>(qt[rank_]) * static_cast<double>(kt_[rank_ * m_ + j]) +
                   static_cast<double>(qt[rank_ + 1]) * static_cast<double>(kt_[(rank_ + 1) * m_ + j]);
  return s * (1.0 + 4.0 * std::numeric_limits<double>::epsilon());
}

template <class T>
std::vector<double> ScoreBounds<T>::bound_all(const T* q) const {
  std::vector<T> qt(width()), b(m_);
  const double offset = prepare_query(q, qt.data());
  bound_block(qt.data(), 1, width(), 0, m_, b.data(), m_);
  std::vector<double> out(m_);
  for (std::size_t j = 0; j < m_; ++j) out[j] = offset + static_cast<double>(b[j]);
  return out;
}

template class ScoreBounds<float>;
template class ScoreBounds<double>;

}  // namespace entgraph
