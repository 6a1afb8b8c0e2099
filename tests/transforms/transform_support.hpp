// Helpers of the transform, loss and runtime tests: direct dispatch over the
// public transform functions, small independent oracles in long double (so the
// float64 reference itself is checked), distribution statistics, and central
// finite differences.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/transforms.hpp"
#include "support.hpp"
#include "support/cases.hpp"

namespace entgraph::test {

using LD = long double;
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------
// Transforms under test.

// The transforms of the cases of support/cases.hpp with any of `tags` (none
// of them may need extra inputs or depend on the row length).
inline std::vector<Transform> tagged_transforms(unsigned tags) {
  std::vector<Transform> out;
  for (const cases::TransformCase& c : cases::transform_cases(tags)) out.push_back(c.transform());
  return out;
}

// The kinds that need no extra input, with the parameters the suite sweeps.
inline std::vector<Transform> basic_transforms() { return tagged_transforms(cases::kBasic); }

// Calls the transform's own public function (not transform_forward), so that a
// defect in the generic entry point cannot hide one in the direct ones.
template <class T>
void apply_forward(const Transform& t, ConstMatrix<T> scores, MatrixView<T> probs, MaskView mask = {}) {
  if (cases::needs_extra_inputs(t.kind)) FAIL("apply_forward: kind needs extra inputs");
  cases::forward<T>(t, cases::ExtraInputs<T>{}, scores, probs, mask);
}

template <class T>
void apply_backward(const Transform& t, ConstMatrix<T> probs, ConstMatrix<T> grad_probs, MatrixView<T> grad_scores,
                    T* grad_alpha = nullptr) {
  if (cases::needs_extra_inputs(t.kind)) FAIL("apply_backward: kind needs extra inputs");
  cases::ParamGrads<T> params;
  params.alpha = grad_alpha;
  cases::backward<T>(t, cases::ExtraInputs<T>{}, probs, grad_probs, grad_scores, params);
}

// ---------------------------------------------------------------------------
// Rows and matrices.

inline std::vector<double> gaussian_row(std::size_t n, double scale, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> z(n);
  for (auto& x : z) x = dist(rng);
  return z;
}

// Entries rounded to float, so that float and double runs see the same input.
inline std::vector<double> float_exact(std::vector<double> z) {
  for (auto& x : z) x = static_cast<double>(static_cast<float>(x));
  return z;
}

template <class T>
Matrix<T> row_matrix(const std::vector<double>& z) {
  Matrix<T> m(1, z.size());
  for (std::size_t j = 0; j < z.size(); ++j) m.data[j] = static_cast<T>(z[j]);
  return m;
}

template <class T>
std::vector<double> row_of(const Matrix<T>& m, std::size_t i) {
  std::vector<double> out(m.cols);
  for (std::size_t j = 0; j < m.cols; ++j) out[j] = static_cast<double>(m(i, j));
  return out;
}

// A matrix whose values are exactly representable in float.
inline Matrix<double> float_exact_matrix(std::size_t rows, std::size_t cols, double scale, std::uint64_t seed) {
  return random_matrix<double>(rows, cols, scale, seed).cast<float>().cast<double>();
}

// The library's float64 forward on one row.
inline std::vector<double> lib_forward(const Transform& t, const std::vector<double>& z,
                                       const std::vector<std::uint8_t>* keep = nullptr) {
  Matrix<double> s = row_matrix<double>(z), p(1, z.size());
  MaskView mask;
  if (keep) mask = MaskView(keep->data(), 1, z.size());
  apply_forward<double>(t, s.view(), p.view(), mask);
  return row_of(p, 0);
}

inline std::size_t support_size(const std::vector<double>& p) {
  return static_cast<std::size_t>(std::count_if(p.begin(), p.end(), [](double x) { return x > 0; }));
}

inline bool same_support(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t j = 0; j < a.size(); ++j)
    if ((a[j] > 0) != (b[j] > 0)) return false;
  return true;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t j = 0; j < a.size(); ++j) s += a[j] * b[j];
  return s;
}

// ---------------------------------------------------------------------------
// Independent oracles, long double. An entry takes part when it is kept by the
// mask and its score is not -inf; every other entry gets 0. A row with no such
// entry gives zeros.

inline std::vector<std::size_t> alive_entries(const std::vector<double>& z, const std::vector<std::uint8_t>* keep) {
  std::vector<std::size_t> idx;
  for (std::size_t j = 0; j < z.size(); ++j)
    if ((!keep || (*keep)[j]) && z[j] != -kInf) idx.push_back(j);
  return idx;
}

inline std::vector<LD> oracle_softmax(const std::vector<double>& z, const std::vector<std::uint8_t>* keep = nullptr) {
  std::vector<LD> p(z.size(), 0);
  const auto idx = alive_entries(z, keep);
  if (idx.empty()) return p;
  LD m = -std::numeric_limits<LD>::infinity();
  for (auto j : idx) m = std::max<LD>(m, z[j]);
  LD sum = 0;
  for (auto j : idx) sum += p[j] = std::exp(static_cast<LD>(z[j]) - m);
  for (auto j : idx) p[j] /= sum;
  return p;
}

// Sparsemax by sorting (Martins & Astudillo 2016, algorithm 1), on scores
// shifted by their maximum so that huge magnitudes lose nothing.
inline std::vector<LD> oracle_sparsemax(const std::vector<double>& z, const std::vector<std::uint8_t>* keep = nullptr) {
  std::vector<LD> p(z.size(), 0);
  const auto idx = alive_entries(z, keep);
  if (idx.empty()) return p;
  LD m = -std::numeric_limits<LD>::infinity();
  for (auto j : idx) m = std::max<LD>(m, z[j]);
  std::vector<LD> s;
  for (auto j : idx) s.push_back(static_cast<LD>(z[j]) - m);
  std::sort(s.begin(), s.end(), [](LD a, LD b) { return a > b; });
  LD cum = 0, tau = 0;
  for (std::size_t k = 1; k <= s.size(); ++k) {
    cum += s[k - 1];
    if (1 + static_cast<LD>(k) * s[k - 1] > cum) tau = (cum - 1) / static_cast<LD>(k);
  }
  for (auto j : idx) p[j] = std::max<LD>(0, (static_cast<LD>(z[j]) - m) - tau);
  return p;
}

// alpha-entmax by bisection on tau, scores shifted by their maximum;
// alpha = 1 is softmax.
// alpha-entmax for alpha > 2 in long double, in the weights' own terms: a
// threshold tau in long double is off by (1e-19)^(1/(alpha - 1)) near a
// score (0.008 at alpha = 10), and near a tie at alpha = 1000 the answer
// needs tau to 1e-5994. Sorted decreasingly the support is a prefix; with
// a = alpha - 1, c_j = a (z_j - z_k) and u = log p_k, p_j = (e^(a u) + c_j)^(1/a),
// taken in logs so that e^(a u) may underflow. Independent of the library's
// entmax_relative: the support by a linear scan, u by bisection on
// [log((1 - S) / k), log((1 - S) / m)] (S: the mass above z_k, m: ties at z_k).
inline std::vector<LD> oracle_entmax_relative(const std::vector<double>& z, double alpha,
                                              const std::vector<std::size_t>& idx) {
  const LD a = static_cast<LD>(alpha) - 1, inf = std::numeric_limits<LD>::infinity();
  std::vector<std::size_t> order(idx);
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return z[x] > z[y]; });
  auto mass_above = [&](std::size_t k) {
    LD sum = 0;
    for (std::size_t j = 0; j < k; ++j)
      if (z[order[j]] > z[order[k]])
        sum += std::exp(std::log(a * (static_cast<LD>(z[order[j]]) - static_cast<LD>(z[order[k]]))) / a);
    return sum;
  };
  std::size_t k = 1;
  while (k < order.size() && mass_above(k) < 1) ++k;
  const LD zk = z[order[k - 1]], rest = 1 - mass_above(k - 1);
  std::vector<LD> logc(k);
  LD ties = 0;
  for (std::size_t j = 0; j < k; ++j) {
    const LD c = a * (static_cast<LD>(z[order[j]]) - zk);
    ties += c == 0;
    logc[j] = c > 0 ? std::log(c) : -inf;
  }
  auto weight = [&](LD u, std::size_t j) {  // exp(log(e^(a u) + c_j) / a)
    const LD x = a * u, y = logc[j];
    const LD l = y == -inf ? x : x > y ? x + std::log1p(std::exp(y - x)) : y + std::log1p(std::exp(x - y));
    return std::exp(l / a);
  };
  auto mass = [&](LD u) {
    LD sum = 0;
    for (std::size_t j = 0; j < k; ++j) sum += weight(u, j);
    return sum;
  };
  LD lo = std::log(rest / static_cast<LD>(k)), hi = std::log(rest / ties);
  for (int it = 0; it < 400; ++it) {
    const LD mid = (lo + hi) / 2;
    if (mid <= lo || mid >= hi) break;
    (mass(mid) >= 1 ? hi : lo) = mid;
  }
  std::vector<LD> p(z.size(), 0);
  const LD total = mass(hi);
  for (std::size_t j = 0; j < k; ++j) p[order[j]] = weight(hi, j) / total;
  return p;
}

inline std::vector<LD> oracle_entmax(const std::vector<double>& z, double alpha,
                                     const std::vector<std::uint8_t>* keep = nullptr) {
  if (alpha == 1.0) return oracle_softmax(z, keep);
  if (alpha > 2.0) {
    const auto idx = alive_entries(z, keep);
    return idx.empty() ? std::vector<LD>(z.size(), 0) : oracle_entmax_relative(z, alpha, idx);
  }
  std::vector<LD> p(z.size(), 0);
  const auto idx = alive_entries(z, keep);
  if (idx.empty()) return p;
  const LD am1 = static_cast<LD>(alpha) - 1;
  LD m = -std::numeric_limits<LD>::infinity();
  for (auto j : idx) m = std::max<LD>(m, z[j]);
  auto fill = [&](LD tau) {
    LD sum = 0;
    for (auto j : idx) {
      const LD x = am1 * (static_cast<LD>(z[j]) - m) - tau;
      p[j] = x > 0 ? std::exp(std::log(x) / am1) : 0;
      sum += p[j];
    }
    return sum;
  };
  // sum(tau = -1) >= 1 (the maximum alone gets 1); sum(tau = -n^(1-alpha)) <= 1.
  LD lo = -1, hi = -std::exp(-am1 * std::log(static_cast<LD>(idx.size())));
  for (int it = 0; it < 400; ++it) {
    const LD mid = (lo + hi) / 2;
    if (mid <= lo || mid >= hi) break;
    (fill(mid) >= 1 ? lo : hi) = mid;
  }
  const LD sum = fill(lo);
  for (auto j : idx) p[j] /= sum;
  return p;
}

// Top-k softmax by sorting; every score equal to the k-th largest is kept.
inline std::vector<LD> oracle_topk(const std::vector<double>& z, std::size_t k,
                                   const std::vector<std::uint8_t>* keep = nullptr) {
  const auto idx = alive_entries(z, keep);
  if (idx.empty()) return std::vector<LD>(z.size(), 0);
  std::vector<double> s;
  for (auto j : idx) s.push_back(z[j]);
  std::sort(s.begin(), s.end(), [](double a, double b) { return a > b; });
  const double kth = s[std::min(k, s.size()) - 1];
  std::vector<std::uint8_t> sel(z.size(), 0);
  for (auto j : idx) sel[j] = z[j] >= kth;
  return oracle_softmax(z, &sel);
}

inline std::vector<LD> oracle_forward(const Transform& t, const std::vector<double>& z,
                                      const std::vector<std::uint8_t>* keep = nullptr) {
  switch (t.kind) {
    case TransformKind::softmax:
      return oracle_softmax(z, keep);
    case TransformKind::sparsemax:
      return oracle_sparsemax(z, keep);
    case TransformKind::entmax15:
      return oracle_entmax(z, 1.5, keep);
    case TransformKind::entmax:
      return oracle_entmax(z, t.alpha, keep);
    case TransformKind::topk_softmax:
      return oracle_topk(z, t.k, keep);
    default:
      return {};
  }
}

// Constrained softmax p = min(u, c exp(z)) by bisection on log c.
inline std::vector<LD> oracle_csoftmax(const std::vector<double>& z, const std::vector<double>& u,
                                       const std::vector<std::uint8_t>* keep = nullptr) {
  std::vector<LD> p(z.size(), 0);
  const auto idx = alive_entries(z, keep);
  if (idx.empty()) return p;
  LD m = -std::numeric_limits<LD>::infinity();
  for (auto j : idx) m = std::max<LD>(m, z[j]);
  auto fill = [&](LD t) {
    LD sum = 0;
    for (auto j : idx) sum += p[j] = std::min<LD>(u[j], std::exp(t + static_cast<LD>(z[j]) - m));
    return sum;
  };
  LD se = 0;
  for (auto j : idx) se += std::exp(static_cast<LD>(z[j]) - m);
  LD lo = -std::log(se), hi = lo;
  for (auto j : idx)
    if (u[j] > 0) hi = std::max<LD>(hi, std::log(static_cast<LD>(u[j])) - (static_cast<LD>(z[j]) - m));
  for (int it = 0; it < 400; ++it) {
    const LD mid = (lo + hi) / 2;
    if (mid <= lo || mid >= hi) break;
    (fill(mid) <= 1 ? lo : hi) = mid;
  }
  fill(hi);
  return p;
}

// Constrained sparsemax p = clamp(z - tau, 0, u) by bisection on tau.
inline std::vector<LD> oracle_csparsemax(const std::vector<double>& z, const std::vector<double>& u,
                                         const std::vector<std::uint8_t>* keep = nullptr) {
  std::vector<LD> p(z.size(), 0);
  const auto idx = alive_entries(z, keep);
  if (idx.empty()) return p;
  LD lo = std::numeric_limits<LD>::infinity(), hi = -lo;
  for (auto j : idx) {
    lo = std::min<LD>(lo, z[j]);
    hi = std::max<LD>(hi, z[j]);
  }
  lo -= 1;
  auto fill = [&](LD tau) {
    LD sum = 0;
    for (auto j : idx) sum += p[j] = std::clamp<LD>(static_cast<LD>(z[j]) - tau, 0, u[j]);
    return sum;
  };
  for (int it = 0; it < 400; ++it) {
    const LD mid = (lo + hi) / 2;
    if (mid <= lo || mid >= hi) break;
    (fill(mid) >= 1 ? lo : hi) = mid;
  }
  fill(lo);
  return p;
}

// Adaptive span of one row: p_j ∝ m(x_j) exp(s_j), x_j = query_pos - j.
inline std::vector<LD> oracle_span(const std::vector<double>& s, double z, double ramp, std::ptrdiff_t query_pos,
                                   const std::vector<std::uint8_t>* keep = nullptr) {
  std::vector<LD> m(s.size(), 0), p(s.size(), 0);
  LD mx = -std::numeric_limits<LD>::infinity();
  for (std::size_t j = 0; j < s.size(); ++j) {
    if ((keep && !(*keep)[j]) || s[j] == -kInf) continue;
    const LD x = static_cast<LD>(query_pos) - static_cast<LD>(j);
    m[j] = std::clamp<LD>((static_cast<LD>(ramp) + z - x) / ramp, 0, 1);
    if (m[j] > 0) mx = std::max<LD>(mx, s[j]);
  }
  LD sum = 0;
  for (std::size_t j = 0; j < s.size(); ++j)
    if (m[j] > 0) sum += p[j] = m[j] * std::exp(static_cast<LD>(s[j]) - mx);
  if (sum > 0)
    for (auto& x : p) x /= sum;
  return p;
}

// ---------------------------------------------------------------------------
// Statistics of a result matrix.

struct DistStats {
  double min_p = kInf;             // smallest entry
  double max_sum_err = 0;          // max |row sum - expected|, expected 1 (0 for an empty row)
  std::size_t non_finite = 0;      // NaN or inf entries
  std::size_t masked_nonzero = 0;  // masked entries that are not exactly 0
};

// expect_empty(i) says whether row i has nothing to attend to (sum 0).
template <class T, class EmptyRow>
DistStats dist_stats(const Matrix<T>& p, const Matrix<std::uint8_t>* mask, EmptyRow expect_empty) {
  DistStats st;
  for (std::size_t i = 0; i < p.rows; ++i) {
    double sum = 0;
    for (std::size_t j = 0; j < p.cols; ++j) {
      const double x = static_cast<double>(p(i, j));
      if (!std::isfinite(x)) ++st.non_finite;
      st.min_p = std::min(st.min_p, x);
      if (mask && !(*mask)(i, j) && x != 0) ++st.masked_nonzero;
      sum += x;
    }
    st.max_sum_err = std::max(st.max_sum_err, std::abs(sum - (expect_empty(i) ? 0.0 : 1.0)));
  }
  return st;
}

template <class T>
DistStats dist_stats(const Matrix<T>& p, const Matrix<std::uint8_t>* mask = nullptr) {
  return dist_stats(p, mask, [&](std::size_t i) {
    if (!mask) return false;
    for (std::size_t j = 0; j < p.cols; ++j)
      if ((*mask)(i, j)) return false;
    return true;
  });
}

// max over rows of max_j |a - b| / max(max_j |b|, floor).
template <class A, class B>
double row_rel_err(const Matrix<A>& a, const Matrix<B>& b, double floor = 1e-30) {
  double worst = 0;
  for (std::size_t i = 0; i < a.rows; ++i) {
    double scale = floor, err = 0;
    for (std::size_t j = 0; j < a.cols; ++j) {
      scale = std::max(scale, std::abs(static_cast<double>(b(i, j))));
      const double d = std::abs(static_cast<double>(a(i, j)) - static_cast<double>(b(i, j)));
      err = std::max(err, std::isnan(d) ? kInf : d);
    }
    worst = std::max(worst, err / scale);
  }
  return worst;
}

template <class T>
double row_rel_err(const std::vector<T>& a, const std::vector<LD>& b, double floor = 1e-30) {
  double scale = floor, err = 0;
  for (std::size_t j = 0; j < a.size(); ++j) {
    scale = std::max(scale, static_cast<double>(std::abs(b[j])));
    const double d = std::abs(static_cast<double>(a[j]) - static_cast<double>(b[j]));
    err = std::max(err, std::isnan(d) ? kInf : d);
  }
  return err / scale;
}

// max |a - b| over all entries (NaN counts as inf), for matrices of any two types.
template <class A, class B>
double max_abs_err(const Matrix<A>& a, const Matrix<B>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    const double d = std::abs(static_cast<double>(a.data[i]) - static_cast<double>(b.data[i]));
    m = std::max(m, std::isnan(d) ? kInf : d);
  }
  return m;
}

inline double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

// How far (relative to the row's largest weight) a correct entmax in
// arithmetic with unit roundoff `eps` can be off on this row. With
// x_j = (alpha-1)(z_j - max z) - tau and p_j = [x_j]_+^(1/(alpha-1)), rounding
// x_j by dx_j = 2 eps ((alpha-1)|z_j - max z| + 1) can move p_j to anywhere
// between [x_j - dx_j]_+^(1/(alpha-1)) and [x_j + dx_j]_+^(1/(alpha-1)): an
// entry whose x_j is within rounding of the threshold may appear or vanish. This is
// large only for alpha > 2 (exponent < 1); 0 for alpha <= 2 and the other
// transforms, where the base tolerances apply.
inline double entmax_conditioning(const Transform& t, const std::vector<double>& z, const std::vector<LD>& p,
                                  double eps) {
  const double alpha = t.kind == TransformKind::entmax ? t.alpha : 0.0;
  if (alpha <= 2.0) return 0.0;
  const LD am1 = static_cast<LD>(alpha) - 1;
  LD m = -std::numeric_limits<LD>::infinity(), pmax = 0, pmin = 1;
  std::size_t anchor = 0;
  for (double x : z) m = std::max<LD>(m, x);
  for (std::size_t j = 0; j < p.size(); ++j) {
    pmax = std::max(pmax, p[j]);
    if (p[j] > 0 && p[j] <= pmin) {
      pmin = p[j];
      anchor = j;
    }
  }
  if (pmax <= 0) return 0.0;
  // x_j = p_j^(alpha-1) on the support; elsewhere measured from the smallest
  // support entry, so that entries near the threshold get an accurate x_j.
  const LD x_anchor = std::pow(pmin, am1);
  LD worst = 0;
  for (std::size_t j = 0; j < z.size(); ++j) {
    if (z[j] == -kInf) continue;
    const LD x = p[j] > 0 ? std::pow(p[j], am1) : x_anchor + am1 * (static_cast<LD>(z[j]) - z[anchor]);
    const LD dx = 2 * static_cast<LD>(eps) * (am1 * std::abs(static_cast<LD>(z[j]) - m) + 1);
    if (x + dx <= 0) continue;
    const LD xp = std::max<LD>(x, 0), p0 = std::pow(xp, 1 / am1);
    const LD up = std::pow(xp + dx, 1 / am1) - p0, down = p0 - std::pow(std::max<LD>(x - dx, 0), 1 / am1);
    worst = std::max({worst, up, down});
  }
  return static_cast<double>(worst / pmax);
}

// ---------------------------------------------------------------------------
// Finite differences (float64, central).

// d/dx_j <g, f(x)> for every j.
template <class F>
std::vector<double> fd_vjp(F f, const std::vector<double>& x, const std::vector<double>& g, double eps) {
  std::vector<double> out(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) {
    auto xp = x, xm = x;
    xp[j] += eps;
    xm[j] -= eps;
    out[j] = (dot(g, f(xp)) - dot(g, f(xm))) / (2 * eps);
  }
  return out;
}

// d/dx_j f(x) for a scalar f.
template <class F>
std::vector<double> fd_grad(F f, const std::vector<double>& x, double eps) {
  std::vector<double> out(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) {
    auto xp = x, xm = x;
    xp[j] += eps;
    xm[j] -= eps;
    out[j] = (f(xp) - f(xm)) / (2 * eps);
  }
  return out;
}

// True when perturbing any single coordinate by +-eps leaves the support of
// f's output unchanged (so f is smooth there and FD is meaningful).
template <class F>
bool support_stable(F f, const std::vector<double>& x, double eps) {
  const auto p0 = f(x);
  for (std::size_t j = 0; j < x.size(); ++j) {
    auto xp = x, xm = x;
    xp[j] += eps;
    xm[j] -= eps;
    if (!same_support(p0, f(xp)) || !same_support(p0, f(xm))) return false;
  }
  return true;
}

// Fills a matrix view's padding (columns cols..stride-1) and checks it later.
template <class T>
bool bytes_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace entgraph::test
