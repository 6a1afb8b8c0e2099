// entgraph internal: refuses attention inputs whose scores or outputs could overflow.
//
// Dense and graph attention compute s_ij = scale * q_i . k_j in T. An
// overflowing score is +-inf (or NaN): the transforms would take -inf for a
// masked key and the output would be silently wrong, and exact mode's bounds
// would prove nothing. Every score, and every partial sum of its dot product,
// is at most max(1, |scale|) |q_i| |k_j| in magnitude (Cauchy-Schwarz), so
// checking the largest row norms up front (O((n + m) d), beside the O(n m d)
// products) rules overflow out; inputs within `headroom` of T's maximum are
// refused with an error naming q, k and the scale.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "entgraph/backend.hpp"
#include "entgraph/error.hpp"
#include "entgraph/matrix_view.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph::detail {

// The largest Euclidean row norm of x, in double without overflow, and its
// row. A float's square cannot overflow or underflow double (2^256 and
// 2^-298 are in range), so float rows are summed directly; double rows are
// scaled by their largest entry first.
template <class T>
double largest_row_norm(ConstMatrix<T> x, std::size_t& row) {
  double best = 0.0;
  row = 0;
  for (std::size_t i = 0; i < x.rows; ++i) {
    const T* r = x.row(i);
    double norm = 0.0;
    if constexpr (std::is_same_v<T, float>) {
      double ss = 0.0;
      for (std::size_t j = 0; j < x.cols; ++j) ss += static_cast<double>(r[j]) * static_cast<double>(r[j]);
      norm = std::sqrt(ss);
    } else {
      double big = 0.0;
      for (std::size_t j = 0; j < x.cols; ++j) big = std::max(big, std::abs(static_cast<double>(r[j])));
      if (big == 0.0) continue;
      double ss = 0.0;
      for (std::size_t j = 0; j < x.cols; ++j) {
        const double y = static_cast<double>(r[j]) / big;
        ss += y * y;
      }
      norm = big * std::sqrt(ss);
    }
    if (norm > best) {
      best = norm;
      row = i;
    }
  }
  return best;
}

// Throws unless headroom * max(1, |scale|) * qn * kn fits in T, where qn and
// kn are the largest row norms of q and k (rows qi and kj), as
// largest_row_norm computes them.
template <class T>
void check_score_norms(const char* op, double qn, std::size_t qi, double kn, std::size_t kj, double scale,
                       const char* scale_name, double headroom) {
  const double bound = std::max(1.0, std::abs(scale)) * qn * kn;  // inf in double: certainly too large
  const double limit = static_cast<double>(std::numeric_limits<T>::max()) / headroom;
  if (bound <= limit) return;
  throw Error(at_op(op) + "the scores " + scale_name + " * q . k may overflow " +
              (std::is_same_v<T, float> ? "float" : "double") + ": q row " + num(qi) + " has norm " + num(qn) +
              ", k row " + num(kj) + " has norm " + num(kn) + " and " + scale_name + " is " + num(scale) +
              ", so max(1, |scale|) |q| |k| = " + num(bound) + " (expected at most " + num(limit) +
              "); scale q, k or " + scale_name + " down",
              ErrorCode::bad_value);
}

// Throws unless headroom * max(1, |scale|) * max_i |q_i| * max_j |k_j| fits in T.
template <class T>
void check_score_range(const char* op, ConstMatrix<T> q, ConstMatrix<T> k, double scale, const char* scale_name,
                       double headroom) {
  std::size_t qi = 0, kj = 0;
  const double qn = largest_row_norm<T>(q, qi), kn = largest_row_norm<T>(k, kj);
  check_score_norms<T>(op, qn, qi, kn, kj, scale, scale_name, headroom);
}

// Throws if an output row sum_j p_j v_j could overflow T. With weights summing
// to 1 within rounding, any summation order gives |o| <= max |v| (1 + 4 m u)
// for m keys and unit roundoff u, so only values within that factor of T's
// maximum are refused (issue 29: values at FLT_MAX gave infinite outputs that
// exact mode still counted as exact rows). `big` is the largest |v| over
// `keys` rows, first found at (row, col).
template <class T>
void check_value_largest(const char* op, double big, std::size_t row, std::size_t col, std::size_t keys) {
  const double u = std::numeric_limits<T>::epsilon() / 2;
  const double limit = static_cast<double>(std::numeric_limits<T>::max()) / (1.0 + 4.0 * static_cast<double>(keys) * u);
  if (big <= limit) return;
  throw Error(at_op(op) + "v may make the output overflow " +
              (std::is_same_v<T, float> ? "float" : "double") + ": |v[" + num(row) + "][" + num(col) + "]| = " +
              num(big) + " (expected at most " + num(limit) + " for " + num(keys) + " keys); scale v down",
              ErrorCode::bad_value);
}

template <class T>
void check_value_range(const char* op, ConstMatrix<T> v) {
  std::size_t row = 0, col = 0;
  double big = 0.0;
  for (std::size_t i = 0; i < v.rows; ++i)
    for (std::size_t j = 0; j < v.cols; ++j)
      if (std::abs(static_cast<double>(v.row(i)[j])) > big) {
        big = std::abs(static_cast<double>(v.row(i)[j]));
        row = i;
        col = j;
      }
  check_value_largest<T>(op, big, row, col, v.rows);
}

// A device's scans of one head's q, k and v (HeadScan, entgraph/backend.hpp)
// judged as the CPU judges the arrays: q, k, v finite, the score range with
// `headroom`, the value range over v's `keys` rows.
inline void judge_attention_scans(const char* op, std::size_t keys, double scale, const char* scale_name,
                                  double headroom, const HeadScan& q, const HeadScan& k, const HeadScan& v) {
  const std::pair<const char*, const HeadScan*> scans[] = {{"q", &q}, {"k", &k}, {"v", &v}};
  for (const auto& [name, s] : scans)
    if (s->bad) throw_non_finite(op, name, s->bad_row, s->bad_col, static_cast<double>(s->bad_value), false);
  check_score_norms<float>(op, q.norm, q.norm_row, k.norm, k.norm_row, scale, scale_name, headroom);
  check_value_largest<float>(op, static_cast<double>(v.largest), v.largest_row, v.largest_col, keys);
}

}  // namespace entgraph::detail
