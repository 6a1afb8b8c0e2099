// Constrained softmax (Martins & Kreutzer 2017) and constrained sparsemax
// (Malaviya et al. 2018): p <= u elementwise on the simplex.
//
// Both are solved exactly by sorting breakpoints (O(n log n) per row). They are
// not hot paths of attention, so there is one templated implementation for
// float and double, accumulating in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/transforms.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {
namespace {

// Scores may hold -inf for masked entries (they get p = 0). p may alias z or
// u, so nothing is written before everything is read.
//
// p = min(u, c e) with e = exp(z - max): start with no entry saturated and
// c = 1 / sum e; saturate every entry with c e_i >= u_i and recompute
// c = (1 - sum_sat u) / sum_free e. Each round removes mass from the free set
// more slowly than it removes bound, so c only grows and saturated entries
// stay saturated: at most n rounds, usually two or three, each one pass.
template <class T>
void csoftmax_row(const T* z, const T* u, T* p, std::size_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < n; ++i) m = std::max<double>(m, z[i]);
  if (m == -std::numeric_limits<double>::infinity()) return std::fill(p, p + n, T(0));
  thread_local std::vector<double> e, bound;
  thread_local std::vector<unsigned char> saturated;
  e.assign(n, 0.0);
  bound.assign(u, u + n);
  saturated.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i)
    if (z[i] != -std::numeric_limits<T>::infinity()) e[i] = std::exp(static_cast<double>(z[i]) - m);
  double c = 0;
  for (bool changed = true; changed;) {
    double bound_mass = 0, free_mass = 0;  // summed afresh: no drift from updates
    for (std::size_t i = 0; i < n; ++i) {
      if (saturated[i]) bound_mass += bound[i];
      else free_mass += e[i];
    }
    c = free_mass > 0 ? (1.0 - bound_mass) / free_mass : 0.0;
    changed = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (saturated[i] || e[i] == 0 || c * e[i] < bound[i]) continue;
      saturated[i] = 1;
      changed = true;
    }
  }
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(saturated[i] ? bound[i] : c * e[i]);
}

// g(tau) = sum clamp(z_i - tau, 0, u_i) is piecewise linear and decreasing:
// sweep its breakpoints (z_i where i turns free, z_i - u_i where it saturates)
// from the top until g reaches 1, then solve the linear piece. p may alias z
// or u: the row is read whole before it is written.
template <class T>
void csparsemax_row(const T* z, const T* u, T* p, std::size_t n) {
  std::vector<std::pair<double, int>> events;  // (tau, slope change as tau decreases)
  for (std::size_t i = 0; i < n; ++i) {
    if (z[i] == -std::numeric_limits<T>::infinity()) continue;
    events.emplace_back(static_cast<double>(z[i]), +1);
    events.emplace_back(static_cast<double>(z[i]) - static_cast<double>(u[i]), -1);
  }
  if (events.empty()) return std::fill(p, p + n, T(0));
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  double g = 0, tau = events[0].first;
  long slope = 0;
  for (std::size_t e = 0; e < events.size(); ++e) {
    const double next = events[e].first;
    const double g_next = g + static_cast<double>(slope) * (tau - next);
    if (slope > 0 && g_next >= 1.0) {
      tau -= (1.0 - g) / static_cast<double>(slope);
      g = 1.0;
      break;
    }
    g = g_next;
    tau = next;
    slope += events[e].second;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const T zi = z[i], ui = u[i];
    p[i] = zi == -std::numeric_limits<T>::infinity()
               ? T(0)
               : static_cast<T>(std::clamp(static_cast<double>(zi) - tau, 0.0, static_cast<double>(ui)));
  }
}

// Bounds must be finite and >= 0 where unmasked, and sum to >= 1 over the
// entries that can take mass (unmasked, score > -inf), unless there are none.
template <class T>
void check_upper(const char* op, ConstMatrix<T> scores, ConstMatrix<T> upper, MaskView mask) {
  detail::check_shape(op, "upper", upper, scores.rows, scores.cols);
  for (std::size_t r = 0; r < scores.rows; ++r) {
    double total = 0;
    bool any = false;
    for (std::size_t j = 0; j < scores.cols; ++j) {
      if (!mask.empty() && !mask(r, j)) continue;
      const T b = upper(r, j);
      if (!(std::isfinite(b) && b >= 0))
        throw Error(std::string(op) + ": upper must be finite and >= 0 (got " + detail::number_text(b) +
                    " at row " + std::to_string(r) + ", column " + std::to_string(j) + ")");
      if (scores(r, j) == -std::numeric_limits<T>::infinity()) continue;
      total += b;
      any = true;
    }
    if (any && total < 1.0 - 1e-6)
      throw Error(std::string(op) + ": upper bounds of row " + std::to_string(r) + " sum to " +
                  detail::number_text(total) + " (expected >= 1: no distribution satisfies them)");
  }
}

template <class T, class Row>
void constrained_forward(const char* op, ConstMatrix<T> scores, ConstMatrix<T> upper, MatrixView<T> probs,
                         MaskView mask, Row row_fn) {
  if (!mask.empty()) detail::check_shape(op, "mask", mask, scores.rows, scores.cols);
  check_upper<T>(op, scores, upper, mask);
  // The row kernel needs its row's bounds: the row index travels in query_pos.
  detail::forward_rows<T>(op, scores, probs, mask,
                          [&](const T* z, T* p, std::size_t n, const detail::RowParams& params, T*) {
                            row_fn(z, upper.row(static_cast<std::size_t>(params.query_pos)), p, n);
                          },
                          [](std::size_t r) {
                            detail::RowParams params;
                            params.query_pos = static_cast<std::ptrdiff_t>(r);
                            return params;
                          });
}

// Shared backward: free entries pass gradient to z through `weight`, saturated
// ones to u. q is the mean of dp over free entries weighted by `weight`.
template <class T, class Free, class Weight>
void constrained_backward(const char* op, ConstMatrix<T> probs, ConstMatrix<T> upper, ConstMatrix<T> grad_probs,
                          MatrixView<T> grad_scores, MatrixView<T> grad_upper, Free is_free, Weight weight) {
  detail::check_shape(op, "upper", upper, probs.rows, probs.cols);
  detail::check_shape(op, "grad_probs", grad_probs, probs.rows, probs.cols);
  detail::check_shape(op, "grad_scores", grad_scores, probs.rows, probs.cols);
  if (!grad_upper.empty()) detail::check_shape(op, "grad_upper", grad_upper, probs.rows, probs.cols);
  detail::check_nonempty(op, "probs", probs);
  detail::check_finite<T>(op, "grad_probs", grad_probs);
  const std::size_t n = probs.cols;
  detail::parallel_for(probs.rows, detail::grain_for(n), [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      const T *p = probs.row(r), *u = upper.row(r), *g = grad_probs.row(r);
      // Gradients scaled by 2^-k, the power of two of the largest |g|, so
      // that neither the sum nor g - q overflows whatever their size (exact:
      // a power of two); only the final product can, where the exact one does.
      double big = 0;
      for (std::size_t j = 0; j < n; ++j) big = std::max(big, std::abs(static_cast<double>(g[j])));
      const int k = big > 0 ? std::ilogb(big) : 0;
      double wsum = 0, wg = 0;
      for (std::size_t j = 0; j < n; ++j) {
        if (!is_free(p[j], u[j])) continue;
        const double w = weight(p[j]);
        wsum += w;
        wg += w * std::ldexp(static_cast<double>(g[j]), -k);
      }
      const double q = wsum > 0 ? wg / wsum : 0.0;  // scaled by 2^-k
      for (std::size_t j = 0; j < n; ++j) {
        // Read everything first: the outputs may alias probs or grad_probs.
        const T pj = p[j];
        const double gj = std::ldexp(static_cast<double>(g[j]), -k);
        const bool free = is_free(pj, u[j]);
        const double w = free ? weight(pj) : 0.0;
        grad_scores(r, j) = w > 0 ? detail::narrow<T>(std::ldexp(w * (gj - q), k)) : T(0);  // p = 0: exactly 0
        if (!grad_upper.empty())
          grad_upper(r, j) = !free && pj > 0 ? detail::narrow<T>(std::ldexp(gj - q, k)) : T(0);
      }
    }
  });
}

}  // namespace

template <class T>
void constrained_softmax(ConstMatrix<T> scores, ConstMatrix<T> upper, MatrixView<T> probs, MaskView mask) {
  constrained_forward<T>("constrained_softmax", scores, upper, probs, mask, csoftmax_row<T>);
}

template <class T>
void constrained_sparsemax(ConstMatrix<T> scores, ConstMatrix<T> upper, MatrixView<T> probs, MaskView mask) {
  constrained_forward<T>("constrained_sparsemax", scores, upper, probs, mask, csparsemax_row<T>);
}

template <class T>
void constrained_softmax_backward(ConstMatrix<T> probs, ConstMatrix<T> upper, ConstMatrix<T> grad_probs,
                                  MatrixView<T> grad_scores, MatrixView<T> grad_upper) {
  constrained_backward<T>(
      "constrained_softmax_backward", probs, upper, grad_probs, grad_scores, grad_upper,
      [](T p, T u) { return p < u || p == 0; }, [](T p) { return static_cast<double>(p); });
}

template <class T>
void constrained_sparsemax_backward(ConstMatrix<T> probs, ConstMatrix<T> upper, ConstMatrix<T> grad_probs,
                                    MatrixView<T> grad_scores, MatrixView<T> grad_upper) {
  constrained_backward<T>(
      "constrained_sparsemax_backward", probs, upper, grad_probs, grad_scores, grad_upper,
      [](T p, T u) { return p > 0 && p < u; }, [](T) { return 1.0; });
}

#define ENTGRAPH_INSTANTIATE(T)                                                                                  \
  template void constrained_softmax<T>(ConstMatrix<T>, ConstMatrix<T>, MatrixView<T>, MaskView);                 \
  template void constrained_sparsemax<T>(ConstMatrix<T>, ConstMatrix<T>, MatrixView<T>, MaskView);               \
  template void constrained_softmax_backward<T>(ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, MatrixView<T>,   \
                                                MatrixView<T>);                                                  \
  template void constrained_sparsemax_backward<T>(ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, MatrixView<T>, \
                                                  MatrixView<T>);
ENTGRAPH_INSTANTIATE(float)
ENTGRAPH_INSTANTIATE(double)
#undef ENTGRAPH_INSTANTIATE

}  // namespace entgraph
