// ScoreBounds: low-rank upper bounds of scale q . k. Every bound, from
// bound_all and from bound_block over tiles of queries, on every bound
// kernel (float32, int16 and int8 on every instruction set, bf16 where the CPU has
// it), is checked against the exact score (long double from the float
// inputs) and against the scores that naive float loops and every compiled
// kernel of the library compute, on random, clustered, low-rank and
// adversarial keys (and bound - 2 slack against the lowest of them); plus
// tightness, the integer kernels against float64, codes on the rounding
// boundary, and the constructor's errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/attention_support.hpp"
#include "clustered_capture.hpp"
#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/score_bounds.hpp"
#include "kernels/bf16_scores.hpp"
#include "kernels/code_scores.hpp"
#include "kernels/matmul_kernels.hpp"
#include "support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

struct KeySet {
  std::string name;
  Matrix<float> k;
  std::vector<std::uint8_t> padding;  // empty: none
};

Matrix<float> transpose(const Matrix<float>& a) {
  Matrix<float> t(a.cols, a.rows);
  for (std::size_t i = 0; i < a.rows; ++i)
    for (std::size_t j = 0; j < a.cols; ++j) t(j, i) = a(i, j);
  return t;
}

// Keys of the clustered synthetic capture (clusters of norm 4, spread 0.3).
Matrix<float> clustered_keys(std::size_t m, std::size_t d, std::uint64_t seed, Matrix<float>* queries = nullptr) {
  const Capture c = clustered_capture(1, 1, d, {m}, 4, false, seed);
  Matrix<float> k(m, d);
  std::copy(c.keys.begin(), c.keys.end(), k.data.begin());
  if (queries) {
    *queries = Matrix<float>(m, d);
    std::copy(c.queries.begin(), c.queries.end(), queries->data.begin());
  }
  return k;
}

// Keys A B + noise: A m x r, B r x d.
Matrix<float> low_rank_keys(std::size_t m, std::size_t d, std::size_t r, double noise, std::uint64_t seed) {
  const Matrix<double> a = random_matrix<double>(m, r, 1.0, seed), b = random_matrix<double>(r, d, 1.0, seed + 1),
                       e = random_matrix<double>(m, d, noise, seed + 2);
  Matrix<float> k(m, d);
  for (std::size_t j = 0; j < m; ++j)
    for (std::size_t x = 0; x < d; ++x) {
      double s = e(j, x);
      for (std::size_t y = 0; y < r; ++y) s += a(j, y) * b(y, x);
      k(j, x) = static_cast<float>(s);
    }
  return k;
}

std::vector<KeySet> key_sets() {
  std::vector<KeySet> sets;
  sets.push_back({"random", random_matrix<float>(50, 16, 1.0, 1), {}});
  sets.push_back({"random d = 40", random_matrix<float>(37, 40, 1.0, 2), {}});
  sets.push_back({"clustered", clustered_keys(64, 16, 3), {}});
  sets.push_back({"low rank 3, no noise", low_rank_keys(48, 16, 3, 0.0, 4), {}});
  sets.push_back({"low rank 3, noise 1e-3", low_rank_keys(48, 16, 3, 1e-3, 5), {}});
  {
    Matrix<float> k = random_matrix<float>(40, 8, 1.0, 6);
    for (float& x : k.data) x += 1e4f;
    sets.push_back({"huge mean offset (1e4)", k, {}});
  }
  {
    Matrix<float> k = random_matrix<float>(40, 8, 1.0, 7);
    for (std::size_t j = 0; j < k.rows; ++j)
      for (std::size_t x = 0; x < k.cols; ++x) k(j, x) *= j % 3 == 0 ? 1e3f : 1e-6f;
    sets.push_back({"tiny-norm keys next to big ones", k, {}});
  }
  {
    Matrix<float> k = random_matrix<float>(30, 8, 1.0, 8);
    for (std::size_t j = 0; j < k.rows; ++j)
      for (std::size_t x = 0; x < k.cols; ++x) k(j, x) = j % 2 == 0 ? k(0, x) : k(j, x) * 1e-7f;
    sets.push_back({"one key repeated, the rest almost zero", k, {}});
  }
  sets.push_back({"d = 1", random_matrix<float>(25, 1, 2.0, 9), {}});
  {
    Matrix<float> k = random_matrix<float>(1, 6, 1.0, 10);
    sets.push_back({"a single key", k, {}});
  }
  {
    Matrix<float> k(20, 5);
    const Matrix<float> one = random_matrix<float>(1, 5, 1.0, 11);
    for (std::size_t j = 0; j < k.rows; ++j)
      for (std::size_t x = 0; x < k.cols; ++x) k(j, x) = one(0, x);
    sets.push_back({"all keys equal (zero covariance)", k, {}});
  }
  {
    Matrix<float> k = random_matrix<float>(30, 6, 1.0, 12);
    for (float& x : k.data) x *= 1e15f;
    sets.push_back({"huge magnitudes (1e15)", k, {}});
  }
  {
    Matrix<float> k = random_matrix<float>(30, 6, 1.0, 13);
    for (float& x : k.data) x *= 1e-12f;
    sets.push_back({"tiny magnitudes (1e-12)", k, {}});
  }
  {
    // Padded keys are outliers: they do not shape the basis, their bounds must still hold.
    KeySet s{"key padding (padded keys are outliers)", random_matrix<float>(45, 12, 1.0, 14), {}};
    for (std::size_t j = 0; j < s.k.rows; ++j) {
      s.padding.push_back(j % 4 == 1 ? 0 : 1);
      if (j % 4 == 1)
        for (std::size_t x = 0; x < s.k.cols; ++x) s.k(j, x) = s.k(j, x) * 300.0f + 500.0f;
    }
    sets.push_back(s);
  }
  {
    KeySet s{"every key padded", random_matrix<float>(12, 4, 1.0, 15), std::vector<std::uint8_t>(12, 0)};
    for (float& x : s.k.data) x += 3.0f;
    sets.push_back(s);
  }
  {
    // Keys that differ only in one coordinate, and a key exactly at their mean.
    Matrix<float> k(9, 4, 0.5f);
    for (std::size_t j = 0; j < 9; ++j) k(j, 2) = static_cast<float>(j) - 4.0f;
    sets.push_back({"collinear keys, one at the mean", k, {}});
  }
  return sets;
}

// Queries for a key set: random at several magnitudes, the keys themselves
// and their negations, a zero query, and one of huge norm.
Matrix<float> queries_for(const Matrix<float>& k, std::uint64_t seed) {
  const std::size_t d = k.cols;
  std::vector<std::vector<float>> rows;
  const Matrix<float> r = random_matrix<float>(12, d, 1.0, seed);
  for (std::size_t i = 0; i < r.rows; ++i) {
    std::vector<float> q(r.data.begin() + static_cast<std::ptrdiff_t>(i * d),
                         r.data.begin() + static_cast<std::ptrdiff_t>((i + 1) * d));
    const float mag = i % 4 == 0 ? 1e-3f : i % 4 == 1 ? 1.0f : i % 4 == 2 ? 30.0f : 1e4f;
    for (float& x : q) x *= mag;
    rows.push_back(q);
  }
  for (std::size_t j = 0; j < std::min<std::size_t>(k.rows, 6); ++j) {
    std::vector<float> q(k.data.begin() + static_cast<std::ptrdiff_t>(j * d),
                         k.data.begin() + static_cast<std::ptrdiff_t>((j + 1) * d));
    rows.push_back(q);
    for (float& x : q) x = -x;
    rows.push_back(q);
  }
  rows.emplace_back(d, 0.0f);
  Matrix<float> q(rows.size(), d);
  for (std::size_t i = 0; i < rows.size(); ++i) std::copy(rows[i].begin(), rows[i].end(), q.data.begin() + i * d);
  return q;
}

// Every score of query i on key j that a computation could report: the exact
// one (long double) and float ones in several orders and on every kernel.
struct Scores {
  Matrix<double> exact, computed_max, computed_min;  // nq x m
};

Scores all_scores(const Matrix<float>& q, const Matrix<float>& k, double scale) {
  const std::size_t nq = q.rows, m = k.rows, d = k.cols;
  Scores s{Matrix<double>(nq, m), Matrix<double>(nq, m, -std::numeric_limits<double>::infinity()),
           Matrix<double>(nq, m, std::numeric_limits<double>::infinity())};
  const float fscale = static_cast<float>(scale);
  auto take = [&](std::size_t i, std::size_t j, double v) {
    s.computed_max(i, j) = std::max(s.computed_max(i, j), v);
    s.computed_min(i, j) = std::min(s.computed_min(i, j), v);
  };
  for (std::size_t i = 0; i < nq; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      long double e = 0;
      float fwd = 0, rev = 0, pre = 0, fused = 0;
      double dbl = 0;
      for (std::size_t x = 0; x < d; ++x) {
        e += static_cast<long double>(q(i, x)) * static_cast<long double>(k(j, x));
        fwd += q(i, x) * k(j, x);
        rev += q(i, d - 1 - x) * k(j, d - 1 - x);
        pre += (fscale * q(i, x)) * k(j, x);
        fused = std::fma(q(i, x), k(j, x), fused);
        dbl += static_cast<double>(q(i, x)) * static_cast<double>(k(j, x));
      }
      s.exact(i, j) = static_cast<double>(static_cast<long double>(scale) * e);
      take(i, j, static_cast<double>(fscale * fwd));
      take(i, j, static_cast<double>(fscale * rev));
      take(i, j, static_cast<double>(pre));
      take(i, j, static_cast<double>(fscale * fused));
      take(i, j, static_cast<double>(static_cast<float>(scale * dbl)));
    }
  // The library's kernels on every instruction set: S = Q K^T (dense
  // attention), S^T = K Q^T (graph attention's tiles), gathered dots (rows).
  const Matrix<float> kt = transpose(k), qt = transpose(q);
  std::vector<std::uint32_t> idx(m);
  for (std::size_t j = 0; j < m; ++j) idx[j] = static_cast<std::uint32_t>(j);
  for (CpuIsa isa : available_cpu_isas()) {
    const detail::MatmulKernels<float>& mk = detail::matmul_kernels(isa);
    Matrix<float> sq(nq, m), st(m, nq), g(nq, m);
    mk.gemm_nn(nq, m, d, fscale, q.data.data(), d, kt.data.data(), m, sq.data.data(), m, false, false);
    mk.gemm_nn(m, nq, d, fscale, k.data.data(), d, qt.data.data(), nq, st.data.data(), nq, false, false);
    for (std::size_t i = 0; i < nq; ++i)
      mk.gather_dot(q.data.data() + i * d, k.data.data(), d, idx.data(), m, d, fscale, g.data.data() + i * m);
    for (std::size_t i = 0; i < nq; ++i)
      for (std::size_t j = 0; j < m; ++j) {
        take(i, j, sq(i, j));
        take(i, j, st(j, i));
        take(i, j, g(i, j));
      }
  }
  return s;
}

struct Violation {
  std::size_t count = 0;
  std::size_t i = 0, j = 0;
  double bound = 0, score = 0;
  void check(std::size_t qi, std::size_t kj, double b, double sc) {
    if (b >= sc) return;
    if (count++ == 0) {
      i = qi;
      j = kj;
      bound = b;
      score = sc;
    }
  }
};

// Random sides of code_bounds for `rows` rows and m keys (the keys' arrays
// padded to whole blocks, as the kernels read them): integer margins in
// [0, add_limit], power-of-two steps 2^-30 ... 2^4, residual columns in
// [0, 2) and rounding columns in [0, 2e-3).
struct RandomBoundSides {
  std::vector<std::int32_t> qadd, kadd;
  std::vector<float> qscale, qresid, qround, kscale, kresid, kround;

  RandomBoundSides(std::size_t rows, std::size_t m, std::int32_t add_limit, std::mt19937_64& rng)
      : qadd(rows),
        kadd(padded(m), 0),
        qscale(rows),
        qresid(rows),
        qround(rows),
        kscale(padded(m), 0.0f),
        kresid(padded(m), 0.0f),
        kround(padded(m), 0.0f) {
    std::uniform_int_distribution<std::int32_t> add(0, add_limit);
    std::uniform_int_distribution<int> exponent(-30, 4);
    std::uniform_real_distribution<float> column(0.0f, 2.0f);
    for (std::size_t i = 0; i < rows; ++i) {
      qadd[i] = add(rng);
      qscale[i] = std::ldexp(1.0f, exponent(rng));
      qresid[i] = column(rng);
      qround[i] = column(rng) * 1e-3f;
    }
    for (std::size_t j = 0; j < m; ++j) {
      kadd[j] = add(rng);
      kscale[j] = std::ldexp(1.0f, exponent(rng));
      kresid[j] = column(rng);
      kround[j] = column(rng) * 1e-3f;
    }
  }
  static std::size_t padded(std::size_t m) { return (m + 15) / 16 * 16; }
  detail::CodeBoundSide row() const { return {qadd.data(), qscale.data(), qresid.data(), qround.data()}; }
  detail::CodeBoundSide key(bool resid) const {
    return {kadd.data(), kscale.data(), resid ? kresid.data() : nullptr, kround.data()};
  }
};

// The kernel float bounds of rank r (of d) use when `forced` is preferred
// (score_bounds.hpp): a forced kernel that cannot run gives way to the
// automatic choice, which never picks bf16 where it could not be forced.
BoundKernel expected_kernel(BoundKernel forced, std::size_t rank, std::size_t d) {
  if (forced == BoundKernel::float32) return BoundKernel::float32;
  if (forced == BoundKernel::int16 && rank >= 1) return BoundKernel::int16;
  if (forced == BoundKernel::int8 && rank >= 1) return BoundKernel::int8;
  if (forced == BoundKernel::bf16 && rank == d) return BoundKernel::bf16;
  if (rank < kMinAutoInt16BoundRank) return BoundKernel::float32;
  return detail::has_byte_dot_products() ? BoundKernel::int8 : BoundKernel::int16;
}

// Checks bound_all and bound_block (tiles of 5 queries, blocks of 7 keys,
// query sides with a row stride wider than width()) against every score,
// and bound - 2 slack + lower_offset (a lower bound) against the lowest.
void check_sound(const KeySet& ks, double scale, std::size_t rank, BoundKernel forced) {
  const Matrix<float>& k = ks.k;
  const std::size_t m = k.rows, d = k.cols;
  CAPTURE(ks.name);
  CAPTURE(scale);
  CAPTURE(rank);
  const ScoreBounds<float> b(k.view(), scale, rank, ks.padding.empty() ? nullptr : ks.padding.data());
  CHECK(b.rank() == std::min(rank, d));
  CHECK(b.keys() == m);
  CHECK(b.width() == b.rank() + 2);
  CHECK(b.kernel() == expected_kernel(forced, b.rank(), d));
  const Matrix<float> q = queries_for(k, 100 + rank);
  const Scores s = all_scores(q, k, scale);
  Violation vs_exact, vs_computed, block_exact, block_computed, lower_exact, lower_computed;
  std::size_t not_finite = 0;
  for (std::size_t i = 0; i < q.rows; ++i) {
    const std::vector<double> all = b.bound_all(q.data.data() + i * d);
    REQUIRE(all.size() == m);
    for (std::size_t j = 0; j < m; ++j) {
      not_finite += std::isfinite(all[j]) ? 0 : 1;
      vs_exact.check(i, j, all[j], s.exact(i, j));
      vs_computed.check(i, j, all[j], s.computed_max(i, j));
    }
  }
  const std::size_t w = b.width(), ldq = w + 3, tile = 5;
  std::size_t wrong_group_max = 0;
  for (std::size_t i0 = 0; i0 < q.rows; i0 += tile) {
    const std::size_t rows = std::min(tile, q.rows - i0);
    std::vector<float> qt(rows * ldq, std::nanf(""));
    std::vector<double> offset(rows);
    for (std::size_t r = 0; r < rows; ++r)
      offset[r] = b.prepare_query(q.data.data() + (i0 + r) * d, qt.data() + r * ldq);
    for (std::size_t block : {std::size_t{7}, std::size_t{80}})  // 80: blocks at multiples of 16 keys
      for (std::size_t j0 = 0; j0 < m; j0 += block) {
        const std::size_t j1 = std::min(m, j0 + block), ldb = block + 2, ldg = 3;
        std::vector<float> out(rows * ldb, std::nanf("")), group_max(rows * ldg, std::nanf(""));
        b.bound_block(qt.data(), rows, ldq, j0, j1, out.data(), ldb, group_max.data(), ldg);
        for (std::size_t r = 0; r < rows; ++r) {
          for (std::size_t j = j0; j < j1; ++j) {
            const double bound = offset[r] + static_cast<double>(out[r * ldb + (j - j0)]);
            block_exact.check(i0 + r, j, bound, s.exact(i0 + r, j));
            block_computed.check(i0 + r, j, bound, s.computed_max(i0 + r, j));
            // Violation checks "first >= second": the score must be at least the lower bound.
            const double lower = static_cast<double>(out[r * ldb + (j - j0)]) -
                                 2.0 * b.slack(qt.data() + r * ldq, j) + b.lower_offset(offset[r]);
            lower_exact.check(i0 + r, j, s.exact(i0 + r, j), lower);
            lower_computed.check(i0 + r, j, s.computed_min(i0 + r, j), lower);
          }
          for (std::size_t a = 0; a < j1 - j0; a += ScoreBounds<float>::kGroupKeys) {
            const float* o = out.data() + r * ldb + a;
            wrong_group_max += group_max[r * ldg + a / ScoreBounds<float>::kGroupKeys] ==
                                       *std::max_element(o, o + std::min<std::size_t>(64, j1 - j0 - a))
                                   ? 0
                                   : 1;
          }
        }
      }
  }
  CHECK(not_finite == 0);
  CHECK(wrong_group_max == 0);
  for (const auto& check : {std::pair<const char*, const Violation*>{"bound_all vs exact", &vs_exact},
                            {"bound_all vs computed", &vs_computed},
                            {"bound_block vs exact", &block_exact},
                            {"bound_block vs computed", &block_computed},
                            {"lower bound vs exact (bound: the score)", &lower_exact},
                            {"lower bound vs computed (bound: the lowest score)", &lower_computed}}) {
    // Not a structured binding: CAPTURE's lambda cannot name one before C++20 (clang, em++).
    const char* what = check.first;
    const Violation* v = check.second;
    CAPTURE(what);
    CHECK_MESSAGE(v->count == 0, v->count, " bounds below a score; first: query ", v->i, " key ", v->j, " bound ",
                  v->bound, " score ", v->score);
  }
}

TEST_SUITE("attention") {
  TEST_CASE("score bounds: every bound is at least the exact and every computed score (float, every kernel)") {
    for (BoundKernel kernel : forcible_bound_kernels()) {
      const BoundKernelScope scope(kernel);
      const std::string kernel_name = bound_kernel_name(kernel);
      CAPTURE(kernel_name);
      // The integer kernel on every instruction set (bf16 only runs on avx512).
      std::vector<CpuIsa> isas{cpu_isa()};
      if (kernel == BoundKernel::int16 || kernel == BoundKernel::int8) isas = available_cpu_isas();
      for (CpuIsa isa : isas) {
        IsaScope isa_scope(isa);
        const std::string isa_name = isa_scope.name();
        CAPTURE(isa_name);
        for (const KeySet& ks : key_sets())
          for (std::size_t rank :
               {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{8}, ks.k.cols, ks.k.cols + 5})
            for (double scale : {0.25, 1.0, -0.7}) check_sound(ks, scale, rank, kernel);
      }
    }
  }

  TEST_CASE("score bounds: the automatic choice takes int8 for exclusion only; a report keeps the tighter kernels") {
    // Certify mode's bounds are its result (rows proven, missed mass): int8's
    // wider margin would prove less, so it is never the automatic choice
    // there; exact mode takes it wherever a byte dot product runs.
    const Matrix<float> k = random_matrix<float>(70, 32, 1.0, 17);
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope isa_scope(isa);
      const std::string isa_name = isa_scope.name();
      CAPTURE(isa_name);
      const BoundKernelScope automatic(BoundKernel::automatic);
      const ScoreBounds<float> exclusion(k.view(), 1.0, 32, nullptr, BoundPurpose::exclusion);
      const ScoreBounds<float> report(k.view(), 1.0, 32, nullptr, BoundPurpose::report);
      CHECK((exclusion.kernel() == BoundKernel::int8) == detail::has_byte_dot_products());
      CHECK(report.kernel() != BoundKernel::int8);
      const BoundKernelScope forced(BoundKernel::int8);
      CHECK(ScoreBounds<float>(k.view(), 1.0, 32, nullptr, BoundPurpose::report).kernel() == BoundKernel::int8);
    }
  }

  TEST_CASE("score bounds: every bound is at least the exact score in float64") {
    for (const KeySet& ks : key_sets())
      for (std::size_t rank : {std::size_t{0}, std::size_t{2}, ks.k.cols})
        for (double scale : {0.5, -1.3}) {
          CAPTURE(ks.name);
          CAPTURE(rank);
          CAPTURE(scale);
          const Matrix<double> k = ks.k.cast<double>();
          const Matrix<double> q = queries_for(ks.k, 7).cast<double>();
          const ScoreBounds<double> b(k.view(), scale, rank, ks.padding.empty() ? nullptr : ks.padding.data());
          std::size_t below = 0;
          double worst = 0;
          for (std::size_t i = 0; i < q.rows; ++i) {
            const std::vector<double> all = b.bound_all(q.data.data() + i * q.cols);
            for (std::size_t j = 0; j < k.rows; ++j) {
              long double e = 0;
              double naive = 0;
              for (std::size_t x = 0; x < k.cols; ++x) {
                e += static_cast<long double>(q(i, x)) * static_cast<long double>(k(j, x));
                naive += q(i, x) * k(j, x);
              }
              const double exact = static_cast<double>(static_cast<long double>(scale) * e);
              const double score = std::max(exact, scale * naive);
              if (all[j] < score) {
                ++below;
                worst = std::max(worst, score - all[j]);
              }
            }
          }
          CHECK_MESSAGE(below == 0, below, " bounds below the score, worst by ", worst);
        }
  }

  TEST_CASE("score bounds: at full rank a bound exceeds the score by rounding only; low-rank keys are bound tightly") {
    struct Setup {
      std::string name;
      Matrix<float> k;
      std::size_t rank;
    };
    const std::vector<Setup> setups = {{"random, rank = d", random_matrix<float>(50, 16, 1.0, 21), 16},
                                       {"random, rank > d", random_matrix<float>(50, 6, 1.0, 22), 9},
                                       {"low rank 3, rank 3", low_rank_keys(48, 16, 3, 0.0, 23), 3},
                                       {"clustered, rank = d", clustered_keys(40, 8, 24), 8}};
    for (BoundKernel kernel : forcible_bound_kernels())
    for (const Setup& s : setups) {
      const BoundKernelScope scope(kernel);
      const std::string kernel_name = bound_kernel_name(kernel);
      CAPTURE(kernel_name);
      CAPTURE(s.name);
      const std::size_t m = s.k.rows, d = s.k.cols;
      const double scale = 0.5;
      const ScoreBounds<float> b(s.k.view(), scale, s.rank);
      std::vector<double> mean(d, 0.0);
      for (std::size_t j = 0; j < m; ++j)
        for (std::size_t x = 0; x < d; ++x) mean[x] += s.k(j, x) / static_cast<double>(m);
      const Matrix<float> q = random_matrix<float>(10, d, 1.0, 25);
      double worst = 0;  // (bound - score) / (|scale| ||q|| (||k|| + ||k - mu||))
      double widest = 0;  // max_j ||k_j|| + ||k_j - mu||: bfloat16's margin is per query
      for (std::size_t j = 0; j < m; ++j) {
        double kn = 0, cn = 0;
        for (std::size_t x = 0; x < d; ++x) {
          kn += static_cast<double>(s.k(j, x)) * s.k(j, x);
          cn += (s.k(j, x) - mean[x]) * (s.k(j, x) - mean[x]);
        }
        widest = std::max(widest, std::sqrt(kn) + std::sqrt(cn));
      }
      for (std::size_t i = 0; i < q.rows; ++i) {
        const std::vector<double> all = b.bound_all(q.data.data() + i * d);
        double qn = 0;
        for (std::size_t x = 0; x < d; ++x) qn += static_cast<double>(q(i, x)) * q(i, x);
        for (std::size_t j = 0; j < m; ++j) {
          double e = 0, kn = 0, cn = 0;
          for (std::size_t x = 0; x < d; ++x) {
            e += static_cast<double>(q(i, x)) * s.k(j, x);
            kn += static_cast<double>(s.k(j, x)) * s.k(j, x);
            cn += (s.k(j, x) - mean[x]) * (s.k(j, x) - mean[x]);
          }
          const double gap = all[j] - scale * e;
          CHECK(gap >= 0);
          worst = std::max(worst, gap / (scale * std::sqrt(qn) *
                                         (b.uses_bf16() ? widest : std::sqrt(kn) + std::sqrt(cn))));
        }
      }
      MESSAGE(s.name << ": worst relative gap " << worst << " (" << bound_kernel_name(b.kernel()) << ")");
      // The rounding term is 4 (d + 3r + 16) eps, ~2e-5 here; bfloat16 adds
      // twice its margin of 2^-7 ||q|| max ||k - mu|| at most; int16 twice
      // s_q s_k (A + B) (docs/EXACT.md), at most 4 sqrt(r) / C + 4 (1.5 r +
      // 2 guard + 4) / C^2 relative, with C = min(32767, sqrt(2^30 / r));
      // int8 the same with C = 90 and a guard of 4.
      const double r = static_cast<double>(b.rank()), c = std::min(32767.0, std::floor(std::sqrt(0x1p30 / r)));
      const double allowed =
          b.kernel() == BoundKernel::bf16    ? 2.0 * std::ldexp(1.0, -7) + 1e-4
          : b.kernel() == BoundKernel::int16 ? 4.0 * std::sqrt(r) / c + 4.0 * (1.5 * r + 1028) / (c * c) + 1e-4
          : b.kernel() == BoundKernel::int8  ? 4.0 * std::sqrt(r) / 90 + 4.0 * (1.5 * r + 12) / (90 * 90) + 1e-4
                                             : 1e-4;
      CHECK(worst <= allowed);
    }
    // Rank 0 is looser than rank 3 on rank-3 keys (on average).
    const Matrix<float> k = low_rank_keys(48, 16, 3, 1e-3, 26), q = random_matrix<float>(8, 16, 1.0, 27);
    const ScoreBounds<float> loose(k.view(), 1.0, 0), tight(k.view(), 1.0, 3);
    double gap0 = 0, gap3 = 0;
    for (std::size_t i = 0; i < q.rows; ++i) {
      const std::vector<double> a = loose.bound_all(q.data.data() + i * 16),
                                c = tight.bound_all(q.data.data() + i * 16);
      for (std::size_t j = 0; j < k.rows; ++j) {
        double e = 0;
        for (std::size_t x = 0; x < 16; ++x) e += static_cast<double>(q(i, x)) * k(j, x);
        gap0 += a[j] - e;
        gap3 += c[j] - e;
      }
    }
    CHECK(gap3 * 100 < gap0);
  }

  TEST_CASE("score bounds: the basis ignores padded keys, whose bounds still hold") {
    // Kept keys lie on a line; padded ones are everywhere. At rank 1 the kept
    // keys are bound to rounding only if the padded keys did not shape the basis.
    const std::size_t m = 30, d = 6;
    Matrix<float> k = random_matrix<float>(m, d, 5.0, 31);
    const Matrix<float> dir = random_matrix<float>(1, d, 1.0, 32);
    std::vector<std::uint8_t> padding(m, 1);
    for (std::size_t j = 0; j < m; ++j) {
      if (j % 3 == 0) {
        padding[j] = 0;
        continue;
      }
      for (std::size_t x = 0; x < d; ++x) k(j, x) = static_cast<float>(j) * 0.25f * dir(0, x);
    }
    const ScoreBounds<float> b(k.view(), 1.0, 1, padding.data());
    const Matrix<float> q = random_matrix<float>(6, d, 1.0, 33);
    for (std::size_t i = 0; i < q.rows; ++i) {
      const std::vector<double> all = b.bound_all(q.data.data() + i * d);
      for (std::size_t j = 0; j < m; ++j) {
        double e = 0, kn = 0;
        for (std::size_t x = 0; x < d; ++x) {
          e += static_cast<double>(q(i, x)) * k(j, x);
          kn += static_cast<double>(k(j, x)) * k(j, x);
        }
        CAPTURE(i);
        CAPTURE(j);
        CHECK(all[j] >= e);
        if (padding[j]) CHECK(all[j] - e <= 1e-3 * (1.0 + std::sqrt(kn)));
      }
    }
  }

  TEST_CASE("bfloat16 scores match a float64 sum of the bfloat16 products, for every shape") {
    const detail::Bf16Scores kernel = detail::bf16_scores_kernel();
    if (kernel == nullptr) {
      MESSAGE("skipped: this CPU (or the ISA in use) has no AVX-512 BF16");
      return;
    }
    auto widen = [](std::uint16_t h) {
      const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return static_cast<double>(f);
    };
    for (std::size_t d : {1u, 2u, 7u, 32u})
      for (std::size_t rows : {1u, 2u, 3u, 4u, 5u, 9u})
        for (std::size_t m : {1u, 15u, 16u, 17u, 63u, 64u, 65u, 130u}) {
          CAPTURE(d);
          CAPTURE(rows);
          CAPTURE(m);
          const Matrix<float> k = random_matrix<float>(m, d, 1.0, 40 + m), q = random_matrix<float>(rows, d, 1.0, 41);
          const std::vector<std::uint16_t> packed = detail::pack_bf16_keys(k.data.data(), m, d, d);
          const std::size_t pairs = (d + 1) / 2, ldo = m + 3;
          std::vector<std::uint32_t> qp(rows * pairs, 0);
          for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t x = 0; x < d; ++x)
              qp[r * pairs + x / 2] |= static_cast<std::uint32_t>(detail::to_bf16(q(r, x))) << (16 * (x % 2));
          std::vector<float> add(rows), out(rows * ldo, -7.0f);
          for (std::size_t r = 0; r < rows; ++r) add[r] = 0.25f * static_cast<float>(r);
          const std::size_t groups = (m + 63) / 64, ldg = groups + 1;
          std::vector<float> group_max(rows * ldg, -7.0f);
          kernel(qp.data(), rows, packed.data(), pairs, m, add.data(), out.data(), ldo, group_max.data(), ldg);
          std::size_t wrong = 0;
          for (std::size_t r = 0; r < rows; ++r) {
            for (std::size_t j = 0; j < m; ++j) {
              double want = add[r], size = std::abs(add[r]);
              for (std::size_t x = 0; x < d; ++x) {
                const double t = widen(detail::to_bf16(q(r, x))) * widen(detail::to_bf16(k(j, x)));
                want += t;
                size += std::abs(t);
              }
              wrong += std::abs(out[r * ldo + j] - want) <= 4.0 * (d + 2) * 6e-8 * size ? 0 : 1;
            }
            for (std::size_t j = m; j < ldo; ++j) wrong += out[r * ldo + j] == -7.0f ? 0 : 1;  // untouched
            for (std::size_t g = 0; g < groups; ++g) {
              const float* o = out.data() + r * ldo + 64 * g;
              wrong += group_max[r * ldg + g] == *std::max_element(o, o + std::min<std::size_t>(64, m - 64 * g)) ? 0 : 1;
            }
            wrong += group_max[r * ldg + groups] == -7.0f ? 0 : 1;
          }
          CHECK(wrong == 0);
        }
    // Round to nearest, ties to even.
    CHECK(detail::to_bf16(1.0f) == 0x3f80);
    CHECK(detail::to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);   // tie: even
    CHECK(detail::to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // tie: even (up)
    CHECK(detail::to_bf16(-2.5f) == 0xc020);
  }

  TEST_CASE("integer bound kernel: code_bounds equals a float64 evaluation on every instruction set, for every shape") {
    // The kernel lemma of docs/EXACT.md ("Integer bounds"): out is
    // float(D + A_i + B_j) s_q s_k plus the two columns, at most 64 code
    // units (the conversion) plus 2.0001 u |t| and 3.0001 u of each column
    // below it, and group_max is each 64-key group's largest out.
    for (CpuIsa isa : available_cpu_isas()) {
      const detail::CodeBounds kernel = detail::code_bounds_kernel(isa);
      const std::string isa_name = cpu_isa_name(isa);
      CAPTURE(isa_name);
      std::mt19937_64 rng(77);
      for (std::size_t r : {1u, 2u, 7u, 32u})
        for (std::size_t rows : {1u, 3u, 4u, 5u, 9u})
          for (std::size_t m : {1u, 15u, 16u, 17u, 64u, 65u, 130u, 300u})
            for (bool resid : {false, true}) {
              CAPTURE(r);
              CAPTURE(rows);
              CAPTURE(m);
              CAPTURE(resid);
              const std::int32_t limit =
                  static_cast<std::int32_t>(std::min(32767.0, std::floor(std::sqrt(0x1p30 / static_cast<double>(r)))));
              std::uniform_int_distribution<std::int32_t> code(-limit, limit);
              std::vector<std::int16_t> qc(rows * r), kc(m * r);
              for (auto& c : qc) c = static_cast<std::int16_t>(code(rng));
              for (auto& c : kc) c = static_cast<std::int16_t>(code(rng));
              // Some rows and keys at the largest codes, all of one sign: the integer sum's extremes.
              for (std::size_t x = 0; x < r; ++x) {
                qc[x] = static_cast<std::int16_t>(-limit);
                kc[x] = static_cast<std::int16_t>(-limit);
              }
              const RandomBoundSides sides(rows, m, static_cast<std::int32_t>(r) * limit / 2 + 600, rng);
              const auto& [qadd, kadd, qscale, qresid, qround, kscale, kresid, kround] = sides;
              const std::vector<std::int16_t> packed = detail::pack_code_keys(kc.data(), m, r);
              const std::vector<std::int32_t> qp = detail::pack_code_queries(qc.data(), rows, r);
              const detail::CodeBoundSide row = sides.row(), key = sides.key(resid);
              const std::size_t ldo = m + 3, groups = (m + 63) / 64, ldg = groups + 1;
              std::vector<float> out(rows * ldo, -7.0f), group_max(rows * ldg, -7.0f);
              kernel(qp.data(), rows, packed.data(), (r + 1) / 2, m, row, key, out.data(), ldo, group_max.data(), ldg);
              std::size_t wrong = 0, below = 0;
              for (std::size_t i = 0; i < rows; ++i) {
                for (std::size_t j = 0; j < m; ++j) {
                  std::int64_t dsum = qadd[i] + kadd[j];
                  for (std::size_t x = 0; x < r; ++x) dsum += std::int64_t{qc[i * r + x]} * kc[j * r + x];
                  REQUIRE(std::llabs(dsum) < (std::int64_t{1} << 31));
                  const double step = static_cast<double>(qscale[i]) * kscale[j];
                  const double t = static_cast<double>(dsum) * step;
                  const double a = resid ? static_cast<double>(qresid[i]) * kresid[j] : 0.0;
                  const double b = static_cast<double>(qround[i]) * kround[j];
                  const double want = t + a + b, u = 0x1p-24;
                  const double got = out[i * ldo + j];
                  wrong += std::abs(got - want) <= 64.0 * step + 4.0 * u * (std::abs(t) + a + b) ? 0 : 1;
                  below += got >= t - (64.0 + 2.0001 * u * 0x1p31) * step + a * (1 - 3.0001 * u) + b * (1 - 2.0001 * u)
                               ? 0
                               : 1;
                }
                for (std::size_t j = m; j < ldo; ++j) wrong += out[i * ldo + j] == -7.0f ? 0 : 1;  // untouched
                for (std::size_t g = 0; g < groups; ++g) {
                  const float* o = out.data() + i * ldo + 64 * g;
                  wrong += group_max[i * ldg + g] == *std::max_element(o, o + std::min<std::size_t>(64, m - 64 * g)) ? 0 : 1;
                }
                wrong += group_max[i * ldg + groups] == -7.0f ? 0 : 1;
              }
              CHECK(wrong == 0);
              CHECK(below == 0);
            }
    }
  }

  TEST_CASE("byte bound kernels: the floats of code_bounds on the same integers, on every kernel that has them") {
    // byte_code_bounds (ScoreBounds' int8 kernel) forms the same integer
    // D + A_i + B_j from byte codes (queries shifted by the offset, which
    // key.add takes off again) and runs code_bounds' epilogue: the same
    // floats, bit for bit, as the 16-bit kernel of its instruction set (AMX
    // and VNNI: of avx512; AVX-VNNI: of avx2).
    constexpr std::int32_t kLimit = 90;
    REQUIRE(detail::byte_codes_fit(kLimit));
    struct UnderTest {
      std::string name;
      detail::ByteCodeBounds bytes;
      detail::CodeBounds words;
    };
    std::vector<UnderTest> kernels;
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string name = cpu_isa_name(isa);
      kernels.push_back({name, detail::byte_kernels(isa).bounds, detail::code_bounds_kernel(isa)});
      if (isa == CpuIsa::avx2)
        kernels.push_back({"avx-vnni", detail::byte_avx_vnni_kernels().bounds, detail::code_bounds_kernel(isa)});
      if (isa != CpuIsa::avx512) continue;
      kernels.push_back({"amx", detail::byte_amx_kernels().bounds, detail::code_bounds_kernel(isa)});
      kernels.push_back({"vnni", detail::byte_vnni_kernels().bounds, detail::code_bounds_kernel(isa)});
    }
    std::mt19937_64 rng(78);
    for (const UnderTest& t : kernels) {
      CAPTURE(t.name);
      if (t.bytes == nullptr) {
        MESSAGE(t.name << ": no byte multiply here (or ENTGRAPH_AMX=off): its byte bound kernel is not tested");
        continue;
      }
      std::size_t wrong = 0, cases = 0;
      for (std::size_t r : {1u, 4u, 5u, 32u, 61u, 100u})  // AMX: tiles of fewer than 16 quads, of 16, and both
        for (std::size_t rows : {1u, 4u, 5u, 17u})
          for (std::size_t m : {1u, 16u, 17u, 64u, 65u, 200u})
            for (bool resid : {false, true}) {
              std::uniform_int_distribution<std::int32_t> code(-kLimit, kLimit);
              const std::size_t padded = RandomBoundSides::padded(m);
              std::vector<std::int16_t> qc(rows * r), kc(m * r);
              for (auto& c : qc) c = static_cast<std::int16_t>(code(rng));
              for (auto& c : kc) c = static_cast<std::int16_t>(code(rng));
              for (std::size_t x = 0; x < r; ++x) {  // the extremes of the byte sums
                qc[x] = static_cast<std::int16_t>(kLimit);
                kc[x] = static_cast<std::int16_t>(-kLimit);
              }
              const RandomBoundSides sides(rows, m, 5000, rng);
              const std::vector<std::int32_t> correction = detail::byte_key_corrections(kc.data(), m, r, kLimit);
              std::vector<std::int32_t> kstart(padded);
              for (std::size_t j = 0; j < padded; ++j) kstart[j] = sides.kadd[j] - correction[j];
              const detail::CodeBoundSide row = sides.row(), key = sides.key(resid);
              const detail::CodeBoundSide byte_key{kstart.data(), key.scale, key.resid, key.round};
              const std::size_t ldo = m + 3, groups = (m + 63) / 64, ldg = groups + 1;
              std::vector<float> want(rows * ldo, -7.0f), want_max(rows * ldg, -7.0f);
              std::vector<float> got(rows * ldo, -7.0f), got_max(rows * ldg, -7.0f);
              t.words(detail::pack_code_queries(qc.data(), rows, r).data(), rows,
                      detail::pack_code_keys(kc.data(), m, r).data(), (r + 1) / 2, m, row, key, want.data(), ldo,
                      want_max.data(), ldg);
              t.bytes(detail::pack_byte_queries(qc.data(), rows, r, kLimit).data(), rows,
                      detail::pack_byte_keys(kc.data(), m, r).data(), (r + 3) / 4, detail::byte_segment_quads(kLimit),
                      m, row, byte_key, got.data(), ldo, got_max.data(), ldg);
              ++cases;
              for (std::size_t x = 0; x < want.size(); ++x)
                wrong += std::memcmp(&want[x], &got[x], sizeof(float)) == 0 ? 0 : 1;
              for (std::size_t x = 0; x < want_max.size(); ++x)
                wrong += std::memcmp(&want_max[x], &got_max[x], sizeof(float)) == 0 ? 0 : 1;
            }
      CHECK(cases > 0);
      CHECK_MESSAGE(wrong == 0, wrong, " floats differ from code_bounds");
    }
  }

  TEST_CASE("integer bounds hold with every code on the rounding boundary, where quantization errs the most") {
    // Keys in pairs k, -k (mean exactly 0) and positive queries, scale 1 and
    // rank d (the identity), every coordinate at s (n + 1/2) with n even, for
    // the step s the documented rule picks: the nearest code (ties to even)
    // is n, every quantization error is +1/2, so for the
    // positive keys q . k = s_q s_k (D + |c_q|_1 / 2 + |c_k|_1 / 2 + r / 4),
    // exactly the margin. The bound must still hold, above the score by the
    // guard (int16: 512 code units, less at most 321 of rounding; int8: 4,
    // less at most 2.0001), plus under 2 of the margin's ceilings and the
    // output's own rounding, and the rounding column: the margin is used up
    // and no more.
    const std::size_t d = 16, pairs = 24, m = 2 * pairs;
    struct Kernel {
      BoundKernel kernel;
      double limit, guard, rounding;
    };
    for (const Kernel& kernel : {Kernel{BoundKernel::int16, std::floor(std::sqrt(0x1p30 / d)), 512.0, 321.0},
                                 Kernel{BoundKernel::int8, 90.0, 4.0, 2.0001}}) {
      const std::string kernel_name = bound_kernel_name(kernel.kernel);
      CAPTURE(kernel_name);
      const double limit = kernel.limit;  // 8192 or 90
      const int top_half = static_cast<int>(0.375 * limit);
      std::mt19937_64 rng(91);
      std::uniform_int_distribution<int> half_n(0, top_half - 1), exponent(-12, 6);
      // A row at step 2^e: its first value is s (2 floor(0.375 C) + 1/2), so max / C lies in (s / 2, s].
      auto boundary_row = [&](float* row, int e) {
        const double s = std::ldexp(1.0, e);
        row[0] = static_cast<float>(s * (2 * top_half + 0.5));
        for (std::size_t x = 1; x < d; ++x) row[x] = static_cast<float>(s * (2 * half_n(rng) + 0.5));
        return s;
      };
      Matrix<float> k(m, d), q(8, d);
      std::vector<double> kstep(m), qstep(q.rows);
      for (std::size_t p = 0; p < pairs; ++p) {
        kstep[2 * p] = kstep[2 * p + 1] = boundary_row(&k(2 * p, 0), exponent(rng));
        for (std::size_t x = 0; x < d; ++x) k(2 * p + 1, x) = -k(2 * p, x);
      }
      for (std::size_t i = 0; i < q.rows; ++i) qstep[i] = boundary_row(&q(i, 0), exponent(rng));
      const Scores scores = all_scores(q, k, 1.0);
      for (CpuIsa isa : available_cpu_isas()) {
        IsaScope isa_scope(isa);
        const BoundKernelScope scope(kernel.kernel);
        const std::string isa_name = isa_scope.name();
        CAPTURE(isa_name);
        const ScoreBounds<float> b(k.view(), 1.0, d);
        REQUIRE(b.kernel() == kernel.kernel);
        std::vector<float> qt(b.width());
        double low = std::numeric_limits<double>::infinity(), high = -low;
        std::size_t below = 0, loose = 0;
        for (std::size_t i = 0; i < q.rows; ++i) {
          const double offset = b.prepare_query(&q(i, 0), qt.data());
          CHECK(offset == 0.0);
          std::vector<float> out(m), group_max(1);
          b.bound_block(qt.data(), 1, b.width(), 0, m, out.data(), m, group_max.data(), 1);
          for (std::size_t j = 0; j < m; ++j) {
            below += out[j] >= scores.computed_max(i, j) && out[j] >= scores.exact(i, j) ? 0 : 1;
            if (j % 2 == 1) continue;  // the negative keys' errors partly cancel
            double kn = 0;
            for (std::size_t x = 0; x < d; ++x) kn += static_cast<double>(k(j, x)) * k(j, x);
            const double rounding_column = static_cast<double>(qt[d + 1]) * 2.0 * std::sqrt(kn);
            const double code_unit = qstep[i] * kstep[j];
            const double units = (out[j] - scores.exact(i, j) - rounding_column) / code_unit;
            low = std::min(low, units);
            high = std::max(high, units);
            loose += units <= kernel.guard + 2.0 + 0x1p-23 * std::abs(out[j]) / code_unit ? 0 : 1;
          }
        }
        MESSAGE(kernel_name << ", " << isa_name << ": bound - score - rounding column, in code units: " << low << " .. "
                            << high);
        CHECK(below == 0);
        CHECK(low >= kernel.guard - kernel.rounding - 1.0);
        CHECK(loose == 0);
      }
    }
  }

  TEST_CASE("score bounds reject an empty or non-finite k and a zero or non-finite scale") {
    const Matrix<float> k = random_matrix<float>(5, 3, 1.0, 41);
    Matrix<float> k_nan = k, k_inf = k;
    k_nan(2, 1) = std::nanf("");
    k_inf(4, 0) = -std::numeric_limits<float>::infinity();
    const Matrix<float> none(0, 3), flat(5, 0);
    struct Case {
      const char* name;
      const Matrix<float>* k;
      double scale;
      const char* expect;
    };
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    for (const Case& c :
         {Case{"no keys", &none, 1.0, "k is empty"}, Case{"d = 0", &flat, 1.0, "k is empty"},
          Case{"NaN key", &k_nan, 1.0, "k"}, Case{"inf key", &k_inf, 1.0, "k"}, Case{"scale 0", &k, 0.0, "scale"},
          Case{"scale NaN", &k, nan, "scale"}, Case{"scale inf", &k, -inf, "scale"}}) {
      CAPTURE(c.name);
      const std::string msg = error_message([&] { ScoreBounds<float> b(c.k->view(), c.scale, 2); });
      CAPTURE(msg);
      CHECK(msg.rfind("ScoreBounds: ", 0) == 0);
      CHECK(msg.find(c.expect) != std::string::npos);
    }
    const Matrix<double> kd(0, 2);
    CHECK(error_message([&] { ScoreBounds<double> b(kd.view(), 1.0, 1); }).find("k is empty") != std::string::npos);
  }
}

}  // namespace
