// Low-rank upper bounds on attention scores (see score_bounds.hpp).
#include "entgraph/score_bounds.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>

#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "kernels/bf16_scores.hpp"
#include "kernels/code_scores.hpp"
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

// The int16 kernel's constants (docs/EXACT.md, "Integer bounds"). Codes
// reach at most C(r) = min(32767, floor(sqrt(2^30 / r))), so that the
// integer sum D + A_i + B_j stays under 2^31; kCodeGuard code units cover
// its conversion to float (under 2^31: at most 64) and the float epilogue's
// rounding of the scaled sum (at most 2.0001 u 2^31 = 256.1), with room for
// underflow (steps are at least 2^-60, so a code unit is at least 2^-120).
// kColumnInflation lifts the query's residual and rounding terms above the
// epilogue's rounding of their products (at most 3.0001 u relative).
constexpr std::int32_t kCodeGuard = 512;
constexpr double kColumnInflation = 1.0 + 0x1p-20;
constexpr double kMinCodeStep = 0x1p-60;
// The int8 kernel's: codes of at most kByteCodeLimit (a byte, and a 16-bit
// pair sum of vpmaddubsw cannot saturate), r <= kMaxInt8BoundRank so that
// |D + A_i + B_j| < 2^24 (|D| <= 8100 r, A_i <= 45.25 r + 0.75 + guard,
// B_j <= 45 r + 0.5: at most 8190.25 r + guard + 2): float(N) is exact
// and the epilogue rounds t = N s_q s_k by at most 2.0001 u 2^24 = 2.0001
// code units; kByteCodeGuard covers that and the underflow allowance.
constexpr std::int32_t kByteCodeLimit = 90;
constexpr std::int32_t kByteCodeGuard = 4;
static_assert(8190.25 * static_cast<double>(kMaxInt8BoundRank) + kByteCodeGuard + 2 < 0x1p24);

std::int32_t code_limit(std::size_t r) {
  return static_cast<std::int32_t>(
      std::min(32767.0, std::floor(std::sqrt(static_cast<double>(std::size_t{1} << 30) / static_cast<double>(r)))));
}

// Codes of r floats x: a power-of-two step s in (max|x| / limit, 2 max|x| /
// limit] (at least kMinCodeStep) and c_x with x = s (c_x + e_x), |e_x| <= 1/2
// exactly (x / s and x / s - c_x are exact in double). Returns s; l1 = sum |c_x|. codes
// may be null (only s and l1 wanted).
float quantize(const float* x, std::size_t r, std::int32_t limit, std::int16_t* codes, std::int64_t& l1) {
  // The largest |x| in four independent chains (r is short: the chain's
  // latency, not its adds, is the cost); exact in float.
  float tops[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (std::size_t c = 0; c < r; ++c) {
    const float a = std::abs(x[c]);
    tops[c % 4] = a > tops[c % 4] ? a : tops[c % 4];
  }
  const double top = std::max(std::max(tops[0], tops[1]), std::max(tops[2], tops[3]));
  int e = 0;
  std::frexp(top / limit, &e);  // top / limit < 2^e (rounding is monotone: also for the exact quotient)
  const double step = std::max(std::ldexp(1.0, e), kMinCodeStep), inverse = 1.0 / step;
  // Without branches (nearest_integer's comparisons are 0 or 1), so that the
  // loop vectorizes; the sum fits 32 bits (|code| <= 32767, r <=
  // kMaxInt16BoundRank).
  std::int32_t sum = 0;
  for (std::size_t c = 0; c < r; ++c) {
    const auto integer = static_cast<std::int32_t>(detail::nearest_integer(static_cast<double>(x[c]) * inverse));
    if (codes != nullptr) codes[c] = static_cast<std::int16_t>(integer);
    sum += integer < 0 ? -integer : integer;
  }
  l1 = sum;
  return static_cast<float>(step);
}

// The query's integer margin A = ceil(|c_q|_1 / 2 + r / 4) + guard.
std::int32_t query_code_add(std::int64_t l1, std::size_t r, std::int32_t guard) {
  return static_cast<std::int32_t>((2 * l1 + static_cast<std::int64_t>(r) + 3) / 4) + guard;
}

float inflate(float x) { return static_cast<float>(static_cast<double>(x) * kColumnInflation); }

BoundKernel initial_bound_kernel();

std::atomic<BoundKernel>& bound_kernel_preference() {
  static std::atomic<BoundKernel> preference{initial_bound_kernel()};
  return preference;
}

void check_preference(BoundKernel kernel, const std::string& where) {
  if (kernel == BoundKernel::float64)
    throw Error(where +
                ": float64 is the kernel of double bounds, not a choice for float ones (expected auto, "
                "float32, bf16, int16 or int8)");
  if (kernel == BoundKernel::bf16 && detail::bf16_scores_kernel() == nullptr)
    throw Error(where + ": bf16 needs AVX-512 BF16 and the avx512 kernels (this CPU or the ISA in use, " +
                cpu_isa_name(cpu_isa()) + ", has none)");
}

BoundKernel initial_bound_kernel() {
  const char* env = std::getenv("ENTGRAPH_BOUND_KERNEL");
  if (env == nullptr || *env == '\0') return BoundKernel::automatic;
  BoundKernel kernel = BoundKernel::automatic;
  try {
    kernel = parse_bound_kernel(env);
  } catch (const Error&) {
    throw Error(std::string("ENTGRAPH_BOUND_KERNEL: unknown bound kernel (got '") + env +
                "', expected auto, float32, bf16, int16 or int8)");
  }
  check_preference(kernel, "ENTGRAPH_BOUND_KERNEL");
  return kernel;
}

}  // namespace

const char* bound_kernel_name(BoundKernel kernel) {
  switch (kernel) {
    case BoundKernel::automatic:
      return "auto";
    case BoundKernel::float32:
      return "float32";
    case BoundKernel::float64:
      return "float64";
    case BoundKernel::bf16:
      return "bf16";
    case BoundKernel::int16:
      return "int16";
    case BoundKernel::int8:
      return "int8";
    case BoundKernel::int8_mma:
      return "int8-mma";
  }
  return "unknown";
}

BoundKernel parse_bound_kernel(const std::string& name) {
  for (BoundKernel k : {BoundKernel::automatic, BoundKernel::float32, BoundKernel::float64, BoundKernel::bf16,
                        BoundKernel::int16, BoundKernel::int8})
    if (name == bound_kernel_name(k)) return k;
  throw Error(at_op("parse_bound_kernel") + "unknown bound kernel (got '" + name +
              "', expected auto, float32, float64, bf16, int16 or int8)");
}

BoundKernel bound_kernel() { return bound_kernel_preference().load(); }

void set_bound_kernel(BoundKernel kernel) {
  check_preference(kernel, "set_bound_kernel");
  bound_kernel_preference().store(kernel);
}

template <class T>
ScoreBounds<T>::ScoreBounds(ConstMatrix<T> k, double scale, std::size_t rank, const std::uint8_t* key_padding,
                            BoundPurpose purpose)
    : m_(k.rows), d_(k.cols), rank_(std::min(rank, k.cols)), scale_(scale) {
  if (k.rows == 0 || k.cols == 0)
    throw Error(at_op(kOp) + "k is empty (got " + detail::num(k.rows) + " x " + detail::num(k.cols) +
                ", expected m >= 1 keys of d >= 1)");
  detail::check_view(kOp, "k", k);
  detail::check_finite<T>(kOp, "k", k);
  if (!std::isfinite(scale) || scale == 0.0)
    throw Error(at_op(kOp) + "scale is not a finite non-zero number (got " + detail::num(scale) + ")");
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
  kt_ld_ = m_ + 64 / sizeof(T);
  kt_.assign(width() * kt_ld_, T(0));
  std::vector<double> c(d), proj(r);
  for (std::size_t j = 0; j < m_; ++j) {
    double norm2 = 0.0, centred2 = 0.0;
    for (std::size_t x = 0; x < d; ++x) {
      c[x] = static_cast<double>(k(j, x)) - mean_[x];
      norm2 += static_cast<double>(k(j, x)) * static_cast<double>(k(j, x));
      centred2 += c[x] * c[x];
    }
    // The identity's projection is the centred key itself (no copy: a
    // library call per key).
    const double* p = identity_ ? c.data() : proj.data();
    if (!identity_) {
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
    for (std::size_t y = 0; y < r; ++y) kt_[y * kt_ld_ + j] = static_cast<T>(p[y]);
    kt_[r * kt_ld_ + j] = round_up<T>(std::sqrt(resid2));
    // The rounding term scales with the larger of the score's terms (||k||)
    // and the bound's terms (||k - mu||).
    kt_[(r + 1) * kt_ld_ + j] = round_up<T>(std::sqrt(norm2) + std::sqrt(centred2));
  }
  if constexpr (std::is_same_v<T, float>) {
    const BoundKernel want = bound_kernel();
    const bool can_bf16 = identity_ && detail::bf16_scores_kernel() != nullptr;
    const bool can_int16 = r >= 1 && r <= kMaxInt16BoundRank;
    const bool can_int8 = r >= 1 && r <= kMaxInt8BoundRank;
    if (want == BoundKernel::float32) {
      kernel_ = BoundKernel::float32;
    } else if (want == BoundKernel::int16 && can_int16) {
      kernel_ = BoundKernel::int16;
    } else if (want == BoundKernel::int8 && can_int8) {
      kernel_ = BoundKernel::int8;
    } else if (want == BoundKernel::bf16 && can_bf16) {
      kernel_ = BoundKernel::bf16;
    } else {
      // Byte dot products (AMX, VNNI, AVX-VNNI) are cheaper than bf16's and
      // int16's (measured end to end in exact mode, docs/PERFORMANCE.md);
      // plain vpmaddubsw is not cheaper than pmaddwd at a code range of 90.
      const bool bytes_pay = purpose == BoundPurpose::exclusion && detail::has_byte_dot_products();
      kernel_ = bytes_pay && can_int8 && r >= kMinAutoInt16BoundRank ? BoundKernel::int8
                : can_bf16                                           ? BoundKernel::bf16
                : can_int16 && r >= kMinAutoInt16BoundRank           ? BoundKernel::int16
                                                                     : BoundKernel::float32;
    }
    if (uses_codes()) {
      // The keys' codes from the stored projections (the float bound's own
      // terms), B_j = ceil(|c_k|_1 / 2), and the float columns, per block.
      const std::size_t padded = (m_ + detail::kCodeBlockKeys - 1) / detail::kCodeBlockKeys * detail::kCodeBlockKeys;
      const bool bytes = kernel_ == BoundKernel::int8;
      code_limit_ = bytes ? kByteCodeLimit : code_limit(r);
      code_guard_ = bytes ? kByteCodeGuard : kCodeGuard;
      std::vector<std::int16_t> codes(m_ * r);
      std::vector<float> column(r);
      kadd_.assign(padded, 0);
      kscale_.assign(padded, 0.0f);
      kresid_.assign(padded, 0.0f);
      kround_.assign(padded, 0.0f);
      for (std::size_t j = 0; j < m_; ++j) {
        for (std::size_t y = 0; y < r; ++y) column[y] = kt_[y * kt_ld_ + j];
        std::int64_t l1 = 0;
        kscale_[j] = quantize(column.data(), r, code_limit_, codes.data() + j * r, l1);
        kadd_[j] = static_cast<std::int32_t>((l1 + 1) / 2);
        kresid_[j] = kt_[r * kt_ld_ + j];
        kround_[j] = kt_[(r + 1) * kt_ld_ + j];
      }
      kcode_ = detail::pack_code_keys(codes.data(), m_, r);
      if (bytes) {  // both forms: the byte multiply is chosen per call
        kbyte_ = detail::pack_byte_keys(codes.data(), m_, r);
        kstart_ = detail::byte_key_corrections(codes.data(), m_, r, kByteCodeLimit);
        for (std::size_t j = 0; j < padded; ++j) kstart_[j] = kadd_[j] - kstart_[j];
      }
    }
    if (kernel_ == BoundKernel::bf16) {
      std::vector<float> centred(m_ * d);
      for (std::size_t j = 0; j < m_; ++j) {
        double norm2 = 0.0;
        for (std::size_t x = 0; x < d; ++x) {
          centred[j * d + x] = kt_[x * kt_ld_ + j];
          norm2 += static_cast<double>(centred[j * d + x]) * static_cast<double>(centred[j * d + x]);
        }
        kmax_ = std::max(kmax_, std::sqrt(norm2));
        round_max_ = std::max(round_max_, static_cast<double>(kt_[(d + 1) * kt_ld_ + j]));
      }
      kbf_ = detail::pack_bf16_keys(centred.data(), m_, d, d);
    }
  } else {
    kernel_ = BoundKernel::float64;
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
  if (uses_codes()) {
    bound_block_codes(qt, rows, ldq, j0, j1, bounds, ldb, group_max, ldg);
    return;
  }
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
  // bounds = qt (rows x w) * kt[:, j0:j1] (w x (j1 - j0)), kt's rows kt_ld_ apart.
  const detail::MatmulKernels<T>& mk = detail::matmul_kernels_for<T>();
  mk.gemm_nn(rows, j1 - j0, width(), T(1), qt, ldq, kt_.data() + j0, kt_ld_, bounds, ldb, false, false);
  if (group_max == nullptr) return;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t g = 0; g < groups; ++g) {
      const std::size_t a = g * kGroupKeys;
      group_max[r * ldg + g] = mk.max_value(bounds + r * ldb + a, std::min(kGroupKeys, j1 - j0 - a));
    }
}

// The int16 and int8 bounds (docs/EXACT.md, "Integer bounds"): each row's
// r projections are quantized like the keys' (A_i = ceil(|c_q|_1 / 2 + r /
// 4) plus the guard), its residual and rounding terms inflated, and the
// kernel forms float(D_ij + A_i + B_j) s_q s_k plus the two columns, from
// byte codes where this machine multiplies bytes (int8), else from 16-bit
// ones. Blocks that do not start at a multiple of 16 keys (only tests ask
// for them) go through a buffer from the block before.
template <class T>
void ScoreBounds<T>::bound_block_codes(const T* qt, std::size_t rows, std::size_t ldq, std::size_t j0, std::size_t j1,
                                       T* bounds, std::size_t ldb, T* group_max, std::size_t ldg) const {
  if constexpr (std::is_same_v<T, float>) {
    static_assert(kGroupKeys == detail::kCodeGroupKeys);
    const std::size_t r = rank_, pairs = (r + 1) / 2;
    std::vector<std::int16_t> codes(rows * r);
    std::vector<std::int32_t> add(rows);
    std::vector<float> scale(rows), resid(rows), round(rows);
    for (std::size_t i = 0; i < rows; ++i) {
      const float* row = qt + i * ldq;
      std::int64_t l1 = 0;
      scale[i] = quantize(row, r, code_limit_, codes.data() + i * r, l1);
      add[i] = query_code_add(l1, r, code_guard_);
      resid[i] = inflate(row[r]);
      round[i] = inflate(row[r + 1]);
    }
    const std::size_t a = j0 - j0 % detail::kCodeBlockKeys, keys = j1 - a;
    const detail::CodeBoundSide row_side{add.data(), scale.data(), resid.data(), round.data()};
    detail::CodeBoundSide key_side{kadd_.data() + a, kscale_.data() + a, identity_ ? nullptr : kresid_.data() + a,
                                   kround_.data() + a};
    const detail::ByteCodeBounds bytes = kbyte_.empty() ? nullptr : detail::fastest_byte_kernels().bounds;
    std::vector<std::int32_t> packed;
    std::vector<std::uint32_t> packed_bytes;
    if (bytes != nullptr) {
      packed_bytes = detail::pack_byte_queries(codes.data(), rows, r, kByteCodeLimit);
      key_side.add = kstart_.data() + a;
    } else {
      packed = detail::pack_code_queries(codes.data(), rows, r);
    }
    const std::size_t quads = (r + 3) / 4;
    auto kernel = [&](float* out, std::size_t ldo, float* maxima, std::size_t ldm) {
      if (bytes != nullptr) {
        bytes(packed_bytes.data(), rows,
              kbyte_.data() + a / detail::kCodeBlockKeys * quads * 4 * detail::kCodeBlockKeys, quads,
              detail::byte_segment_quads(kByteCodeLimit), keys, row_side, key_side, out, ldo, maxima, ldm);
      } else {
        detail::code_bounds_kernel(cpu_isa())(
            packed.data(), rows, kcode_.data() + a / detail::kCodeBlockKeys * pairs * 2 * detail::kCodeBlockKeys, pairs,
            keys, row_side, key_side, out, ldo, maxima, ldm);
      }
    };
    const std::size_t groups = (keys + kGroupKeys - 1) / kGroupKeys;
    std::vector<float> scratch_max;
    if (a == j0) {
      if (group_max == nullptr) {
        scratch_max.resize(rows * groups);
        group_max = scratch_max.data();
        ldg = groups;
      }
      kernel(bounds, ldb, group_max, ldg);
      return;
    }
    std::vector<float> buffer(rows * keys);
    scratch_max.resize(rows * groups);
    kernel(buffer.data(), keys, scratch_max.data(), groups);
    const detail::MatmulKernels<T>& mk = detail::matmul_kernels_for<T>();
    for (std::size_t i = 0; i < rows; ++i) {
      std::copy_n(buffer.data() + i * keys + (j0 - a), j1 - j0, bounds + i * ldb);
      if (group_max == nullptr) continue;
      for (std::size_t g = 0; g * kGroupKeys < j1 - j0; ++g)
        group_max[i * ldg + g] = mk.max_value(bounds + i * ldb + g * kGroupKeys, std::min(kGroupKeys, j1 - j0 - g * kGroupKeys));
    }
  } else {
    (void)qt, (void)rows, (void)ldq, (void)j0, (void)j1, (void)bounds, (void)ldb, (void)group_max, (void)ldg;
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
typename ScoreBounds<T>::QuerySlack ScoreBounds<T>::query_slack(const T* qt) const {
  QuerySlack q;
  q.qt = qt;
  if (uses_bf16()) {
    q.margin = bf16_margin(qt);
    return q;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (uses_codes()) {
      const std::size_t r = rank_;
      std::int64_t l1 = 0;
      q.step = static_cast<double>(quantize(qt, r, code_limit_, nullptr, l1));
      q.add = static_cast<double>(query_code_add(l1, r, code_guard_));
      q.resid = identity_ ? 0.0 : static_cast<double>(inflate(qt[r]));
      q.round = static_cast<double>(inflate(qt[r + 1]));
    }
  }
  return q;
}

template <class T>
double ScoreBounds<T>::slack(const QuerySlack& q, std::size_t j) const {
  if (uses_bf16()) return q.margin;
  if constexpr (std::is_same_v<T, float>) {
    if (uses_codes()) {
      // The columns as the kernel multiplies them, plus the quantization
      // margin s_q s_k (A_i + B_j): twice this covers the bound's distance
      // to the score (docs/EXACT.md).
      const double step = q.step * kscale_[j];
      const double columns = (identity_ ? 0.0 : q.resid * kresid_[j]) + q.round * kround_[j];
      const double s = columns * kColumnInflation + step * (q.add + kadd_[j]);
      return s * (1.0 + 8.0 * std::numeric_limits<double>::epsilon());
    }
  }
  const T* qt = q.qt;
  const double s = static_cast<double>(qt[rank_]) * static_cast<double>(kt_[rank_ * kt_ld_ + j]) +
                   static_cast<double>(qt[rank_ + 1]) * static_cast<double>(kt_[(rank_ + 1) * kt_ld_ + j]);
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
