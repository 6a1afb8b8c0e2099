#include "kernels/reference/transforms_reference.hpp"
#include "transforms/row_driver.hpp"  // narrow

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

namespace entgraph::detail {

template <class T>
constexpr T kInfT = std::numeric_limits<T>::infinity();

// Scaled so that nothing overflows: with the support S = {p > 0}, its weight
// s_ref = ref^e (ref: the largest p for e >= 0, the smallest for e < 0, so
// that t = s / s_ref = (p / ref)^e lies in [0, 1]) and M = 2^k, the power of
// two of max |dp| over S, dz_i = t_i ((dp_i - dp_ref) / M - r') * M * s_ref
// with r' = <t, (dp - dp_ref) / M> / sum t, |r'| < 4 (q' = dp_ref / M + r';
// taken relative to the reference entry, whose t = 1 may hold nearly all of
// sum t). Only the final product can overflow, and only where the exact
// result does.
template <class T>
void family_backward_robust_impl(const T* p, const T* dp, T* dz, std::size_t n, double e) {
  double ref = 0, big = 0, pivot = 0;  // pivot: dp of the reference entry (t = 1, the largest)
  bool any = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (!(p[i] > 0)) continue;
    const double pi = static_cast<double>(p[i]);
    if (!any || (e >= 0 ? pi > ref : pi < ref)) {
      ref = pi;
      pivot = static_cast<double>(dp[i]);
    }
    big = std::max(big, std::abs(static_cast<double>(dp[i])));
    any = true;
  }
  if (!any || big == 0 || !std::isfinite(big)) {
    for (std::size_t i = 0; i < n; ++i) dz[i] = T(0);  // no support, or dp = 0 on it
    return;
  }
  const int k = std::ilogb(big);
  const double pn = std::ldexp(pivot, -k);
  // Relative to the pivot, as entmax_family_backward does (no cancellation
  // where one entry holds nearly all of sum t): qn - pn.
  // The entries tied with the reference (t = 1) take their share of the
  // rest from the others' s directly (direct): s_ref t_j = s_j, but past
  // double's range s_ref overflows and t_j underflows (alpha = 1000, p =
  // [1 - 1e-6, 1e-6]: s = [1.001, 1e5988], dz = O(1)).
  double tt = 0, trest = 0, tied_rest = 0, direct = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!(p[i] > 0)) continue;
    const double pi = static_cast<double>(p[i]), t = std::pow(pi / ref, e);
    const double gi = std::ldexp(static_cast<double>(dp[i]), -k) - pn;
    tt += t;
    trest += t * gi;
    if (pi == ref) tied_rest += gi;
    else direct += std::pow(pi, e) * gi;
  }
  const double rn = trest / tt;  // tt >= 1: the reference entry has t = 1
  // s_ref = mant * 2^exp2, from pow when it is a normal double, else from logs.
  double mant = 0;
  int exp2 = 0;
  const double sref = std::pow(ref, e);
  if (std::isnormal(sref)) {
    mant = std::frexp(sref, &exp2);
  } else {
    const double l = e * std::log2(ref);
    const double whole = std::floor(l);
    mant = std::exp2(l - whole);
    exp2 = static_cast<int>(std::clamp(whole, -1e6, 1e6));
  }
  for (std::size_t i = 0; i < n; ++i) {
    const double pi = static_cast<double>(p[i]), gi = static_cast<double>(dp[i]);  // read before dz[i] is written
    if (!(pi > 0)) {
      dz[i] = T(0);
      continue;
    }
    // The others: s_i itself where it is a normal double (t_i may underflow
    // beside an overflowing s_ref), else t_i s_ref in parts.
    const double si = std::pow(pi, e), rest = (std::ldexp(gi, -k) - pn) - rn;
    const double v = pi == ref        ? std::ldexp(((std::ldexp(gi, -k) - pn) - tied_rest / tt) * mant, exp2 + k) -
                                     std::ldexp(direct / tt, k)
                     : std::isnormal(si) ? std::ldexp(si * rest, k)
                                         : std::ldexp(std::pow(pi / ref, e) * rest * mant, exp2 + k);
    // Past T's range (for float: what rounds to infinity) the exact value is
    // too: infinity, said explicitly rather than by an out-of-range cast.
    const double limit = std::is_same_v<T, float> ? 0x1.ffffffp127 : std::numeric_limits<double>::infinity();
    dz[i] = std::abs(v) < limit ? static_cast<T>(v) : v > 0 ? kInfT<T> : -kInfT<T>;
  }
}

void family_backward_robust(const float* p, const float* dp, float* dz, std::size_t n, double e) {
  family_backward_robust_impl(p, dp, dz, n, e);
}
void family_backward_robust(const double* p, const double* dp, double* dz, std::size_t n, double e) {
  family_backward_robust_impl(p, dp, dz, n, e);
}

namespace {
template <class T>
double entmax_grad_alpha_impl(const T* p, const T* dp, std::size_t n, double alpha) {
  const double e = 2.0 - alpha, beta = 1.0 / (alpha - 1.0);
  double S = 0, H = 0, gp = 0, gs = 0, gplp = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!(p[i] > 0)) continue;
    const double pi = static_cast<double>(p[i]), g = static_cast<double>(dp[i]);
    const double lp = std::log(pi), s = std::exp(e * lp), plp = pi * lp;
    S += s;
    H += plp;
    gp += g * pi;
    gs += g * s;
    gplp += g * plp;
  }
  if (!(S > 0)) return 0.0;
  const double mean_gs = gs / S;
  return beta * beta * (gp - mean_gs) - beta * (gplp - H * mean_gs);
}
}  // namespace

namespace {
// Scores may hold -inf for masked entries (they get p = 0). p may alias z or
// u, so nothing is written before everything is read.
//
// p = min(u, c e) with e = exp(z - top): start with no entry saturated and
// c = 1 / sum e; saturate every entry with c e_i >= u_i and recompute
// c = (1 - sum_sat u) / sum_free e. Each round removes mass from the free set
// more slowly than it removes bound, so c only grows and saturated entries
// stay saturated: at most n rounds, usually two or three, each one pass.
template <class T>
void csoftmax_row(const T* z, const T* u, T* p, std::size_t n) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  thread_local std::vector<unsigned char> saturated;
  saturated.assign(n, 0);
  // Each round: c for the current saturated set, with the free weights
  // e = exp(z - top) taken from the largest free score `top`, not the row's
  // max: once the high scores saturate, the free ones can lie thousands
  // below it, where exp(z - max) underflows even in double.
  double c = 0, top = kNegInf;
  for (bool changed = true; changed;) {
    double bound_mass = 0, free_mass = 0;  // summed afresh: no drift from updates
    top = kNegInf;
    for (std::size_t i = 0; i < n; ++i)
      if (!saturated[i]) top = std::max<double>(top, z[i]);
    for (std::size_t i = 0; i < n; ++i) {
      if (saturated[i]) bound_mass += u[i];
      else if (z[i] != -std::numeric_limits<T>::infinity()) free_mass += std::exp(static_cast<double>(z[i]) - top);
    }
    c = free_mass > 0 ? (1.0 - bound_mass) / free_mass : 0.0;
    changed = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (saturated[i] || z[i] == -std::numeric_limits<T>::infinity()) continue;
      if (c * std::exp(static_cast<double>(z[i]) - top) < static_cast<double>(u[i])) continue;
      saturated[i] = 1;
      changed = true;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const bool masked = z[i] == -std::numeric_limits<T>::infinity();
    p[i] = static_cast<T>(saturated[i] ? u[i] : masked ? 0.0 : c * std::exp(static_cast<double>(z[i]) - top));
  }
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

}  // namespace

void constrained_softmax_exact(const float* z, const float* u, float* p, std::size_t n) { csoftmax_row(z, u, p, n); }
void constrained_softmax_exact(const double* z, const double* u, double* p, std::size_t n) { csoftmax_row(z, u, p, n); }
void constrained_sparsemax_exact(const float* z, const float* u, float* p, std::size_t n) {
  csparsemax_row(z, u, p, n);
}
void constrained_sparsemax_exact(const double* z, const double* u, double* p, std::size_t n) {
  csparsemax_row(z, u, p, n);
}

namespace {
// Free entries (softmax: p < u or p == 0; sparsemax: 0 < p < u) pass gradient
// to z with weight w (p; 1), saturated ones (p == u > 0) to u:
// dz = w (g - q), du = g - q, q = sum w g / sum w over the free entries.
// Gradients are scaled by 2^-k, the power of two of the largest |g| (exact),
// so that neither the sum nor g - q overflows; only the final product can,
// where the exact one does.
template <class T>
void constrained_backward_row(bool softmax_kind, const T* p, const T* u, const T* g, T* dz, T* du, std::size_t n) {
  auto is_free = [softmax_kind](T pj, T uj) { return softmax_kind ? (pj < uj) | (pj == 0) : (pj > 0) & (pj < uj); };
  double big = 0;
  for (std::size_t j = 0; j < n; ++j) big = std::max(big, std::abs(static_cast<double>(g[j])));
  const int k = big > 0 ? std::ilogb(big) : 0;
  const double down = std::ldexp(1.0, -k), up = std::ldexp(1.0, k);
  double wsum = 0, wg = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const double w = is_free(p[j], u[j]) ? (softmax_kind ? static_cast<double>(p[j]) : 1.0) : 0.0;
    wsum += w;
    wg += w * (static_cast<double>(g[j]) * down);
  }
  const double q = wsum > 0 ? wg / wsum : 0.0;  // scaled by 2^-k
  for (std::size_t j = 0; j < n; ++j) {  // everything read before written: dz, du may alias p or g
    const T pj = p[j];
    const double d = static_cast<double>(g[j]) * down - q;
    const bool free = is_free(pj, u[j]);
    const double w = free ? (softmax_kind ? static_cast<double>(pj) : 1.0) : 0.0;  // p = 0: dz exactly 0
    dz[j] = narrow<T>((w * d) * up);
    if (du != nullptr) du[j] = !free && pj > 0 ? narrow<T>(d * up) : T(0);
  }
}
}  // namespace

namespace {
// The table entries (the forward's scratch unused; the kind fixed).
template <class T>
void csoftmax_kernel(const T* z, const T* u, T* p, std::size_t n, T*) {
  csoftmax_row(z, u, p, n);
}
template <class T>
void csparsemax_kernel(const T* z, const T* u, T* p, std::size_t n, T*) {
  csparsemax_row(z, u, p, n);
}
template <class T, bool kSoftmax>
void constrained_backward_kernel(const T* p, const T* u, const T* g, T* dz, T* du, std::size_t n) {
  constrained_backward_row(kSoftmax, p, u, g, dz, du, n);
}
}  // namespace

void constrained_backward_exact(bool softmax_kind, const float* p, const float* u, const float* g, float* dz,
                                float* du, std::size_t n) {
  constrained_backward_row(softmax_kind, p, u, g, dz, du, n);
}
void constrained_backward_exact(bool softmax_kind, const double* p, const double* u, const double* g, double* dz,
                                double* du, std::size_t n) {
  constrained_backward_row(softmax_kind, p, u, g, dz, du, n);
}

double entmax_grad_alpha(const float* p, const float* dp, std::size_t n, double alpha) {
  return entmax_grad_alpha_impl(p, dp, n, alpha);
}
double entmax_grad_alpha(const double* p, const double* dp, std::size_t n, double alpha) {
  return entmax_grad_alpha_impl(p, dp, n, alpha);
}

namespace {
// log(exp(x) + exp(y)), y may be -inf.
double log_add_exp(double x, double y) {
  if (y == -std::numeric_limits<double>::infinity()) return x;
  return x > y ? x + std::log1p(std::exp(y - x)) : y + std::log1p(std::exp(x - y));
}

// alpha-entmax in the weights' own terms (a = alpha - 1). Sorted in
// decreasing order, the support is a prefix z_1 >= ... >= z_k, and with
// c_j = a (z_j - z_k) >= 0 and h = p_k^a the weights are p_j = (h + c_j)^(1/a):
// nothing cancels, and where h underflows c_j dominates (ties, c_j = 0, get
// p_k). The plain form [a z_j - tau]^(1/a) needs tau to within the rounding of
// a z_j, magnified by the power 1/a: (1e-16)^(1/9) = 0.017 at alpha = 10.
//
// Support: z_k is in it iff S_k = sum_{z_j > z_k} c_j^(1/a) < 1 (the mass at
// tau = a z_k); S_k grows with k, so the last such k is found by galloping,
// then bisecting. Then G(u) = sum_j exp(log(e^(a u) + c_j) / a) - 1, with
// u = log p_k, is increasing and convex; Newton from u0 = log((1 - S_k) / m)
// (m: the entries tied at z_k), where G >= 0, descends monotonically to the
// root, and u0 - u* <= log(k / m) (for alpha >= 2, 1 - S_k <= k p_k by the
// subadditivity of x^(1/a)): a few steps. 1 - S_k >= 2^-53 keeps p_k normal.
template <class T>
void entmax_relative_impl(const T* z, T* p, std::size_t n, double alpha) {
  const double a = alpha - 1.0, inv = 1.0 / a;
  thread_local std::vector<std::pair<double, std::size_t>> s;  // candidates: (score, index)
  thread_local std::vector<double> logc;
  double top = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < n; ++i) top = std::max(top, static_cast<double>(z[i]));
  s.clear();
  if (top > -std::numeric_limits<double>::infinity())
    for (std::size_t i = 0; i < n; ++i)  // a (top - z) >= 1: the max alone outweighs tau = a z
      if (a * (top - static_cast<double>(z[i])) < 1.0) s.emplace_back(static_cast<double>(z[i]), i);
  for (std::size_t i = 0; i < n; ++i) p[i] = T(0);  // z was read: p may alias it
  if (s.empty()) return;
  std::sort(s.begin(), s.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  auto mass_above = [&](std::size_t k) {  // S at tau = a z_k (k 0-based)
    const double zk = s[k].first;
    double sum = 0;
    for (std::size_t j = 0; j < k && s[j].first > zk; ++j) sum += std::exp(std::log(a * (s[j].first - zk)) * inv);
    return sum;
  };
  std::size_t good = 0, bad = s.size();  // S(good) < 1; bad: past the end, or S(bad) >= 1
  for (std::size_t step = 1; good + step < bad; step *= 2) {
    if (mass_above(good + step) < 1.0) {
      good += step;
    } else {
      bad = good + step;
      break;
    }
  }
  while (bad - good > 1) {
    const std::size_t mid = good + (bad - good) / 2;
    (mass_above(mid) < 1.0 ? good : bad) = mid;
  }
  const std::size_t k = good + 1;
  const double zk = s[good].first;
  logc.resize(k);
  double ties = 0;
  for (std::size_t j = 0; j < k; ++j) {
    const bool tie = !(s[j].first > zk);
    ties += tie;
    logc[j] = tie ? -std::numeric_limits<double>::infinity() : std::log(a * (s[j].first - zk));
  }
  double u = std::log((1.0 - mass_above(good)) / ties);
  for (int it = 0; it < 100; ++it) {
    const double au = a * u;
    double g = -1.0, slope = 0.0;  // G(u) and G'(u) = sum p_j h / (h + c_j)
    for (std::size_t j = 0; j < k; ++j) {
      const double l = log_add_exp(au, logc[j]), pj = std::exp(l * inv);
      g += pj;
      slope += pj * std::exp(au - l);
    }
    if (!(g > 0.0 && slope > 0.0)) break;  // at the root, to rounding
    const double step = g / slope;
    u -= step;
    if (step <= 1e-15 * std::max(1.0, std::abs(u))) break;
  }
  const double au = a * u;
  double total = 0;
  for (std::size_t j = 0; j < k; ++j) total += (logc[j] = std::exp(log_add_exp(au, logc[j]) * inv));
  for (std::size_t j = 0; j < k; ++j) p[s[j].second] = static_cast<T>(logc[j] / total);
}
}  // namespace

void entmax_relative(const float* z, float* p, std::size_t n, double alpha) { entmax_relative_impl(z, p, n, alpha); }
void entmax_relative(const double* z, double* p, std::size_t n, double alpha) {
  entmax_relative_impl(z, p, n, alpha);
}

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double row_max(const double* z, std::size_t n) {
  double m = kNegInf;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, z[i]);
  return m;
}

void zero(double* p, std::size_t n) { std::fill(p, p + n, 0.0); }

void softmax(const double* z, double* p, std::size_t n, const RowParams&, double*) {
  const double m = row_max(z, n);
  if (m == kNegInf) return zero(p, n);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += (p[i] = std::exp(z[i] - m));
  for (std::size_t i = 0; i < n; ++i) p[i] /= sum;
}

// The finite entries of z, sorted in decreasing order.
std::vector<double> sorted_desc(const double* z, std::size_t n) {
  std::vector<double> s;
  s.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    if (z[i] != kNegInf) s.push_back(z[i]);
  std::sort(s.begin(), s.end(), std::greater<double>());
  return s;
}

// Sparsemax by sorting (Martins & Astudillo 2016, Alg. 1): the support is the
// largest k with 1 + k z_(k) > sum_{j<=k} z_(j). Scores are centred on the max
// first: tau is O(1) away from it, and max + tau would round away for |z| >> 1.
void sparsemax(const double* z, double* p, std::size_t n, const RowParams&, double*) {
  const std::vector<double> s = sorted_desc(z, n);
  if (s.empty()) return zero(p, n);
  double cum = 0, tau = -1;
  for (std::size_t k = 1; k <= s.size(); ++k) {
    const double x = s[k - 1] - s[0];
    cum += x;
    if (1.0 + k * x > cum) tau = (cum - 1.0) / k;
  }
  for (std::size_t i = 0; i < n; ++i) p[i] = std::max((z[i] - s[0]) - tau, 0.0);
}

// 1.5-entmax by sorting (Peters et al. 2019, Alg. 2) on x = z / 2: for each k
// the candidate tau_k solves sum_{j<=k} (x_(j) - tau)^2 = 1; the support is the
// largest k with tau_k < x_(k).
void entmax15(const double* z, double* p, std::size_t n, const RowParams&, double*) {
  std::vector<double> s = sorted_desc(z, n);
  if (s.empty()) return zero(p, n);
  const double top = s[0] / 2;
  double sum = 0, sumsq = 0, tau = -1;  // relative to top
  for (std::size_t k = 1; k <= s.size(); ++k) {
    const double x = s[k - 1] / 2 - top;  // centred for accuracy
    sum += x;
    sumsq += x * x;
    const double mean = sum / k;
    const double delta = (1.0 - (sumsq - k * mean * mean)) / k;
    if (delta < 0) break;
    const double t = mean - std::sqrt(delta);
    if (t < x) tau = t;  // x_(k) is in the support
    else break;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const double d = std::max((z[i] / 2 - top) - tau, 0.0);
    p[i] = d * d;
  }
}

// alpha-entmax by bisection on tau in p = [(alpha-1) (z - max) - tau]_+^(1/(alpha-1))
// (tau relative to the max), bracketed by -1 <= tau <= -n^(1-alpha), run until
// the bracket stops shrinking in double, then renormalised.
// Above alpha = 2 this loses (1e-16)^(1/(alpha - 1)) near the threshold
// (1e-8 at 3, 0.017 at 10): entmax_relative serves there.
void entmax(const double* z, double* p, std::size_t n, const RowParams& params, double* scratch) {
  const double alpha = params.alpha;
  if (alpha == 1.0) return softmax(z, p, n, params, scratch);
  if (alpha > 2.0) return entmax_relative(z, p, n, alpha);
  const double am1 = alpha - 1, inv = 1 / am1;
  std::size_t finite = 0;
  for (std::size_t i = 0; i < n; ++i) finite += z[i] != kNegInf;
  if (finite == 0) return zero(p, n);
  const double m = row_max(z, n);
  double lo = -1, hi = -std::pow(static_cast<double>(finite), -am1);
  auto mass = [&](double tau) {
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double w = (z[i] - m) * am1 - tau;
      if (w > 0) s += std::pow(w, inv);
    }
    return s;
  };
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    (mass(mid) >= 1 ? lo : hi) = mid;
  }
  const double tau = lo;  // mass(lo) >= 1: never an empty support
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double w = (z[i] - m) * am1 - tau;
    sum += (p[i] = w > 0 ? std::pow(w, inv) : 0.0);
  }
  for (std::size_t i = 0; i < n; ++i) p[i] /= sum;
}

void topk_softmax(const double* z, double* p, std::size_t n, const RowParams& params, double* scratch) {
  const std::vector<double> s = sorted_desc(z, n);
  if (s.empty()) return zero(p, n);
  if (params.k >= s.size()) return softmax(z, p, n, params, scratch);
  const double kth = s[params.k - 1];
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += (p[i] = z[i] >= kth ? std::exp(z[i] - s[0]) : 0.0);
  for (std::size_t i = 0; i < n; ++i) p[i] /= sum;
}

double span_mask(double x, double z, double ramp) { return std::clamp((ramp + z - x) / ramp, 0.0, 1.0); }

void adaptive_span(const double* s, double* p, std::size_t n, const RowParams& params, double*) {
  double m = kNegInf;
  for (std::size_t j = 0; j < n; ++j) {
    const double x = static_cast<double>(params.query_pos) - static_cast<double>(j);
    if (span_mask(x, params.span, params.ramp) > 0) m = std::max(m, s[j]);
  }
  if (m == kNegInf) return zero(p, n);
  double sum = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const double x = static_cast<double>(params.query_pos) - static_cast<double>(j);
    const double mask = span_mask(x, params.span, params.ramp);
    sum += (p[j] = mask > 0 ? mask * std::exp(s[j] - m) : 0.0);
  }
  for (std::size_t j = 0; j < n; ++j) p[j] /= sum;
}

// dz = s (dp - <s, dp> / sum s) with the given s(p) = p^e on the support
// (s(0) = 0), computed as s ((dp - dp_m) - r) with m the entry of the largest
// s and r = sum_j s_j (dp_j - dp_m) / sum s: when one entry holds nearly all
// of sum s (alpha > 2: s = p^(2 - alpha) of a tiny p beside a large one),
// dp_m - <s, dp> / sum s cancels to a few digits even in double, and its dz
// with it (alpha = 10: 1% of the row's largest |dz|). When that overflows on
// the way (|dp| near the double maximum, or s beyond it for alpha > 2),
// family_backward_robust redoes the row.
template <class Weight>
void entmax_family_backward(const double* p, const double* dp, double* dz, std::size_t n, double e, Weight weight) {
  double ss = 0, s_top = 0, pivot = 0, big = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double s = weight(p[i]);
    ss += s;
    if (s > s_top) {
      s_top = s;
      pivot = dp[i];
    }
    if (s > 0) big = std::max(big, std::abs(dp[i]));
  }
  double rest = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] > 0) rest += weight(p[i]) * (dp[i] - pivot);
  const double r = ss > 0 ? rest / ss : 0.0;
  if (!(std::isfinite(ss) && std::isfinite(rest) && 2 * big + std::abs(r) <= std::numeric_limits<double>::max()))
    return family_backward_robust(p, dp, dz, n, e);
  for (std::size_t i = 0; i < n; ++i) dz[i] = p[i] > 0 ? weight(p[i]) * ((dp[i] - pivot) - r) : 0.0;
}

void softmax_backward(const double* p, const double* dp, double* dz, std::size_t n, const RowParams&) {
  entmax_family_backward(p, dp, dz, n, 1.0, [](double x) { return x; });
}
void sparsemax_backward(const double* p, const double* dp, double* dz, std::size_t n, const RowParams&) {
  entmax_family_backward(p, dp, dz, n, 0.0, [](double x) { return x > 0 ? 1.0 : 0.0; });
}
void entmax15_backward(const double* p, const double* dp, double* dz, std::size_t n, const RowParams&) {
  entmax_family_backward(p, dp, dz, n, 0.5, [](double x) { return std::sqrt(x); });
}
void entmax_backward(const double* p, const double* dp, double* dz, std::size_t n, const RowParams& params) {
  const double e = 2 - params.alpha;
  entmax_family_backward(p, dp, dz, n, e, [e](double x) { return x > 0 ? std::pow(x, e) : 0.0; });
}
void entmax_backward_alpha(const double* p, const double* dp, double* dz, std::size_t n, const RowParams& params,
                           double* grad_alpha) {
  *grad_alpha = entmax_grad_alpha(p, dp, n, params.alpha);  // first: dz may alias p or dp
  entmax_backward(p, dp, dz, n, params);
}

}  // namespace

const ReferenceKernels64 kReference64 = {
    softmax,          sparsemax,          entmax15,          entmax,          topk_softmax, adaptive_span,
    softmax_backward, sparsemax_backward, entmax15_backward, entmax_backward, entmax_backward_alpha,
    csoftmax_kernel<double>, csparsemax_kernel<double>, constrained_backward_kernel<double, true>,
    constrained_backward_kernel<double, false>,
};

namespace {

// The float table of the reference ISA: widen, run the float64 kernel, round.
template <ForwardRow64 (ReferenceKernels64::*F)>
void widened_forward(const float* z, float* p, std::size_t n, const RowParams& params, float*) {
  thread_local std::vector<double> buf;
  buf.resize(3 * n + 64);
  double* z64 = buf.data();
  double* p64 = z64 + n;
  for (std::size_t i = 0; i < n; ++i) z64[i] = z[i];
  (kReference64.*F)(z64, p64, n, params, p64 + n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<float>(p64[i]);
}

template <BackwardRow64 (ReferenceKernels64::*F)>
void widened_backward(const float* p, const float* dp, float* dz, std::size_t n, const RowParams& params) {
  thread_local std::vector<double> buf;
  buf.resize(3 * n);
  double* p64 = buf.data();
  double* dp64 = p64 + n;
  double* dz64 = dp64 + n;
  for (std::size_t i = 0; i < n; ++i) {
    p64[i] = p[i];
    dp64[i] = dp[i];
  }
  (kReference64.*F)(p64, dp64, dz64, n, params);
  for (std::size_t i = 0; i < n; ++i) dz[i] = static_cast<float>(dz64[i]);
}

void widened_backward_alpha(const float* p, const float* dp, float* dz, std::size_t n, const RowParams& params,
                            double* grad_alpha) {
  *grad_alpha = entmax_grad_alpha(p, dp, n, params.alpha);  // first: dz may alias p or dp
  widened_backward<&ReferenceKernels64::entmax_backward>(p, dp, dz, n, params);
}

bool valid(const float* z, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (!(z[i] < std::numeric_limits<float>::infinity())) return false;
  return true;
}

bool finite(const float* z, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(z[i])) return false;
  return true;
}

template <ForwardRow64 ReferenceKernels64::*Kernel>
void widened_rows(const float* const* z, float* const* p, std::size_t count, std::size_t n, const RowParams& params,
                  float* scratch) {
  for (std::size_t r = 0; r < count; ++r) widened_forward<Kernel>(z[r], p[r], n, params, scratch);
}

bool upper_bounds(const float* z, const float* u, std::size_t n, double* total) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!(std::isfinite(u[i]) && u[i] >= 0)) return false;
    if (z[i] > -std::numeric_limits<float>::infinity()) s += u[i];
  }
  *total = s;
  return true;
}

}  // namespace

const TransformKernels kReferenceKernels = {
    CpuIsa::reference,
    valid,
    finite,
    upper_bounds,
    widened_forward<&ReferenceKernels64::softmax>,
    widened_forward<&ReferenceKernels64::sparsemax>,
    widened_forward<&ReferenceKernels64::entmax15>,
    widened_rows<&ReferenceKernels64::entmax15>,
    widened_forward<&ReferenceKernels64::entmax>,
    widened_rows<&ReferenceKernels64::entmax>,
    widened_forward<&ReferenceKernels64::topk_softmax>,
    widened_forward<&ReferenceKernels64::adaptive_span>,
    widened_backward<&ReferenceKernels64::softmax_backward>,
    widened_backward<&ReferenceKernels64::sparsemax_backward>,
    widened_backward<&ReferenceKernels64::entmax15_backward>,
    widened_backward<&ReferenceKernels64::entmax_backward>,
    widened_backward_alpha,
    csoftmax_kernel<float>,
    csparsemax_kernel<float>,
    constrained_backward_kernel<float, true>,
    constrained_backward_kernel<float, false>,
};

}  // namespace entgraph::detail
