// Tests of lowrank-threshold's fast cut (predictors/estimated_rows.hpp) and
// of the integer code products under it (kernels/code_scores.hpp): against a
// float64 reference that forms every exact estimate and runs the whole
// float64 transform on each row, and across instruction sets and thread
// counts, where the graphs must be identical.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/heads.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/transforms.hpp"
#include "kernels/code_scores.hpp"
#include "predictors/estimated_rows.hpp"
#include "predictors/theta_lower_bound.hpp"
#include "predictors/theta_steps.hpp"
#include "support.hpp"

namespace entgraph::test {
namespace {

using detail::code_scores_kernel;
using detail::FloatEstimate;
using detail::QuantizedEstimate;

std::vector<std::int16_t> random_codes(std::size_t count, int limit, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> u(-limit, limit);
  std::vector<std::int16_t> v(count);
  for (auto& x : v) x = static_cast<std::int16_t>(u(rng));
  return v;
}

std::size_t group_count(std::size_t keys) { return (keys + detail::kCodeGroupKeys - 1) / detail::kCodeGroupKeys; }

std::vector<double> random_steps(std::size_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.05, 0.4);
  std::vector<double> v(count);
  for (auto& x : v) x = u(rng);
  return v;
}

// The definition, in float64 on every exact estimate of the row. Edges whose
// estimate is within 1e-12 (relative) of the cut are reported as ambiguous:
// there the reference's θ (from the largest weight) and the solver's
// (closed form) may differ in their last bits.
struct ReferenceCut {
  Graph graph;
  std::vector<std::pair<std::size_t, std::size_t>> ambiguous;
};

ReferenceCut reference_cut(const detail::EstimatedScores& estimate, std::size_t n, std::size_t m, bool causal,
                           double alpha, double margin) {
  ReferenceCut out;
  out.graph = Graph::empty(n, m);
  const Transform t = Transform::for_alpha(alpha);
  // The approximations in the cut's blocks of rows (a float GEMM's last
  // bits may depend on its shape).
  constexpr std::size_t B = detail::kCutBlockRows;
  std::vector<float> approx(n * m), block_max(B * group_count(m));
  for (std::size_t r0 = 0; r0 < n; r0 += B) {
    const std::size_t rows = std::min(B, n - r0);
    const std::size_t keys = causal ? causal_key_limit(r0 + rows - 1, n, m) : m;
    if (keys > 0)
      estimate.approximate(r0, rows, keys, approx.data() + r0 * m, m, block_max.data(), group_count(keys));
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t visible = causal ? causal_key_limit(i, n, m) : m;
    if (visible > 0) {
      const float* row = approx.data() + i * m;
      std::vector<double> e(visible), p(visible);
      // exact() without the approximation: the code products formed again
      for (std::size_t j = 0; j < visible; ++j)
        e[j] = estimate.exact(i, j, dynamic_cast<const QuantizedEstimate*>(&estimate) != nullptr ? nullptr : row);
      transform_forward<double>(t, {e.data(), 1, visible}, {p.data(), 1, visible});
      const std::size_t best = static_cast<std::size_t>(std::max_element(p.begin(), p.end()) - p.begin());
      const double theta = e[best] - std::pow(p[best], alpha - 1.0) / (alpha - 1.0);
      const double cut = theta - margin / (alpha - 1.0);
      for (std::size_t j = 0; j < visible; ++j) {
        if (std::fabs(e[j] - cut) <= 1e-12 * (1.0 + std::fabs(cut))) out.ambiguous.emplace_back(i, j);
        if (e[j] > cut) out.graph.indices.push_back(static_cast<std::uint32_t>(j));
      }
    }
    out.graph.offsets[i + 1] = out.graph.indices.size();
  }
  return out;
}

// Every edge of `got` and `want` agrees, except at the reference's ambiguous pairs.
void check_same_graph(const Graph& got, const ReferenceCut& want) {
  REQUIRE(got.offsets.size() == want.graph.offsets.size());
  got.validate("cut_estimated_rows");
  std::size_t differences = 0;
  for (std::size_t i = 0; i + 1 < got.offsets.size(); ++i) {
    std::vector<std::uint32_t> a(got.row_begin(i), got.row_end(i)), b(want.graph.row_begin(i), want.graph.row_end(i));
    if (a == b) continue;
    std::vector<std::uint32_t> diff;
    std::set_symmetric_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(diff));
    for (std::uint32_t j : diff)
      if (std::find(want.ambiguous.begin(), want.ambiguous.end(), std::make_pair(i, std::size_t{j})) ==
          want.ambiguous.end())
        ++differences;
  }
  CHECK(differences == 0);
}

// Each row's largest value of every 64 keys (the kernels' group_max).
std::vector<float> group_maxima(const std::vector<float>& out, std::size_t rows, std::size_t keys, std::size_t ldo) {
  const std::size_t groups = group_count(keys);
  std::vector<float> maxima(rows * groups);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t g = 0; g < groups; ++g) {
      const float* o = out.data() + i * ldo + g * detail::kCodeGroupKeys;
      maxima[i * groups + g] = *std::max_element(o, o + std::min(detail::kCodeGroupKeys, keys - g * detail::kCodeGroupKeys));
    }
  return maxima;
}

bool same_graph(const Graph& a, const Graph& b) { return a.offsets == b.offsets && a.indices == b.indices; }

TEST_SUITE("predictors") {
  TEST_CASE("code_scores: every instruction set gives the scalar kernel's values bit for bit") {
    std::mt19937_64 rng(11);
    for (std::size_t r : {1, 2, 7, 32, 33}) {
      for (std::size_t rows : {1, 3, 4, 5, 64}) {
        for (std::size_t keys : {1, 15, 16, 17, 100, 300}) {
          CAPTURE(r);
          CAPTURE(rows);
          CAPTURE(keys);
          const auto q = random_codes(rows * r, 127, rng), k = random_codes(keys * r, 127, rng);
          std::vector<float> qs(rows), ks(keys);
          for (auto& x : qs) x = static_cast<float>(random_steps(1, rng)[0]);
          for (auto& x : ks) x = static_cast<float>(random_steps(1, rng)[0]);
          const auto qp = detail::pack_code_queries(q.data(), rows, r);
          const auto kp = detail::pack_code_keys(k.data(), keys, r);
          const std::size_t pairs = (r + 1) / 2, ldo = keys + 3;
          // The definition: exact integer dot products, scaled as documented.
          std::vector<float> want(rows * ldo, -7.0f);
          for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < keys; ++j)
              want[i * ldo + j] = static_cast<float>(detail::code_dot(&q[i * r], &k[j * r], r)) * ks[j] * qs[i];
          const std::vector<float> want_max = group_maxima(want, rows, keys, ldo);
          for (CpuIsa isa : available_cpu_isas()) {
            CAPTURE(cpu_isa_name(isa));
            std::vector<float> got(rows * ldo, -7.0f);  // the padding past `keys` stays untouched
            std::vector<float> got_max(want_max.size(), -7.0f);
            code_scores_kernel(isa)(qp.data(), rows, kp.data(), pairs, keys, qs.data(), ks.data(), got.data(), ldo,
                                    got_max.data(), group_count(keys));
            CHECK(got == want);
            CHECK(got_max == want_max);
          }
        }
      }
    }
  }

  TEST_CASE("byte_code_scores: the same integers from byte codes, on every instruction set that has them") {
    std::mt19937_64 rng(14);
    CHECK(detail::byte_codes_fit(0));
    CHECK(detail::byte_codes_fit(90));
    CHECK_FALSE(detail::byte_codes_fit(91));  // 4 · 91² > 2^15 - 1: a 16-bit pair sum could saturate
    CHECK(detail::byte_segment_quads(90) == 1);
    CHECK(detail::byte_segment_quads(7) == 167);
    // The AMX and VNNI kernels where this CPU (and for AMX, Linux) has them;
    // they run under avx512.
    detail::ByteCodeScores amx = nullptr, vnni = nullptr, avx_vnni = nullptr;
    const auto isas = available_cpu_isas();
    if (std::find(isas.begin(), isas.end(), CpuIsa::avx512) != isas.end()) {
      IsaScope scope(CpuIsa::avx512);
      amx = detail::byte_amx_kernels().scores;
      vnni = detail::byte_vnni_kernels().scores;
    }
    if (std::find(isas.begin(), isas.end(), CpuIsa::avx2) != isas.end()) {
      IsaScope scope(CpuIsa::avx2);
      avx_vnni = detail::byte_avx_vnni_kernels().scores;
    }
    if (amx == nullptr) MESSAGE("no AMX-INT8 here (or ENTGRAPH_AMX=off): its kernel is not tested");
    if (vnni == nullptr) MESSAGE("no AVX-512 VNNI here: its kernel is not tested");
    if (avx_vnni == nullptr) MESSAGE("no AVX-VNNI here: its kernel is not tested");
    // Codes at their largest in magnitude (the worst case of each 16-bit sum),
    // and random ones; segments of 1 quad (largest 90) to all of them; for
    // AMX, tiles of fewer than 16 quads, of 16, and both (r = 100: 25 quads).
    for (int largest : {1, 7, 63, 90}) {
      for (bool extreme : {false, true}) {
        for (std::size_t r : {1, 3, 4, 5, 32, 61, 100, 256}) {
          for (std::size_t rows : {1, 5, 17}) {
            for (std::size_t keys : {1, 16, 63, 64, 65, 200}) {
              CAPTURE(largest);
              CAPTURE(extreme);
              CAPTURE(r);
              CAPTURE(rows);
              CAPTURE(keys);
              auto q = random_codes(rows * r, largest, rng), k = random_codes(keys * r, largest, rng);
              if (extreme) {  // q at +largest (the largest unsigned byte), k at ±largest
                for (auto& c : q) c = static_cast<std::int16_t>(largest);
                for (auto& c : k) c = static_cast<std::int16_t>(rng() % 2 == 0 ? largest : -largest);
              }
              std::vector<float> qs(rows), ks(keys);
              for (auto& x : qs) x = static_cast<float>(random_steps(1, rng)[0]);
              for (auto& x : ks) x = static_cast<float>(random_steps(1, rng)[0]);
              const auto qp = detail::pack_byte_queries(q.data(), rows, r, largest);
              const auto kp = detail::pack_byte_keys(k.data(), keys, r);
              const auto correction = detail::byte_key_corrections(k.data(), keys, r, largest);
              const std::size_t quads = (r + 3) / 4, ldo = keys + 3;
              std::vector<float> want(rows * ldo, -7.0f);
              for (std::size_t i = 0; i < rows; ++i)
                for (std::size_t j = 0; j < keys; ++j)
                  want[i * ldo + j] = static_cast<float>(detail::code_dot(&q[i * r], &k[j * r], r)) * ks[j] * qs[i];
              const std::vector<float> want_max = group_maxima(want, rows, keys, ldo);
              int kernels = 0;
              std::vector<std::pair<std::string, detail::ByteCodeScores>> under_test;
              for (CpuIsa isa : isas) under_test.emplace_back(cpu_isa_name(isa), detail::byte_kernels(isa).scores);
              under_test.emplace_back("amx", amx);
              under_test.emplace_back("vnni", vnni);
              under_test.emplace_back("avx-vnni", avx_vnni);
              for (const auto& [name, kernel] : under_test) {
                if (kernel == nullptr) continue;
                ++kernels;
                CAPTURE(name);
                std::vector<float> got(rows * ldo, -7.0f), got_max(want_max.size(), -7.0f);
                kernel(qp.data(), rows, kp.data(), correction.data(), quads, detail::byte_segment_quads(largest), keys,
                       qs.data(), ks.data(), got.data(), ldo, got_max.data(), group_count(keys));
                CHECK(got == want);
                CHECK(got_max == want_max);
              }
              CHECK(kernels >= 1);  // the scalar reference at least
            }
          }
        }
      }
    }
  }

  TEST_CASE("theta_lower_bound: below the threshold, close to it, and the exact steps from it prove the same one") {
    std::mt19937_64 rng(31);
    std::size_t checked = 0;
    for (double alpha : {1.5, 2.0}) {
      for (std::size_t count : {1, 2, 3, 4, 5, 7, 17, 75, 128, 1000, 5000}) {
        for (int kind = 0; kind < 4; ++kind) {
          CAPTURE(alpha);
          CAPTURE(count);
          CAPTURE(kind);
          // x = (α − 1)(e − max e): uniform over one reach, spread over many,
          // a few values repeated (ties at the threshold), a near-flat row.
          std::vector<double> x(count);
          std::uniform_real_distribution<double> u(kind == 1 ? -8.0 : -1.0, 0.0);
          std::uniform_int_distribution<int> level(0, 3);
          for (double& v : x) v = kind == 2 ? -0.25 * level(rng) : kind == 3 ? -1e-9 * u(rng) : u(rng);
          x[rng() % count] = 0.0;
          std::vector<double> reference = x, from_bound = x;
          const detail::theta_steps::Result want = detail::theta_steps::steps(reference.data(), count, alpha, -1.0);
          REQUIRE(want.solved);
          // The float64 definition: the weights above θ sum to 1.
          long double mass = 0.0L;
          for (double v : x)
            if (v > want.tau) mass += alpha == 2.0 ? v - want.tau : (v - want.tau) * (v - want.tau);
          CHECK(std::fabs(static_cast<double>(mass) - 1.0) < 1e-12 * static_cast<double>(count));
          for (double start : {-1.0, want.tau - 0.5, want.tau - 1e-7}) {
            if (start < -1.0) continue;
            const double bound = detail::theta_lower_bound(x.data(), count, alpha, start);
            CHECK(bound <= want.tau);
            // Close: lowered by its margin (count + 1)² 2^-40 and its own rounding,
            // so the exact steps keep little more than the support.
            const double terms = static_cast<double>(count) + 1.0;
            CHECK(want.tau - bound <= 1.01 * terms * terms * 0x1p-40);
            from_bound = x;
            const detail::theta_steps::Result got = detail::theta_steps::steps(from_bound.data(), count, alpha, bound);
            CHECK(got.solved);
            CHECK(got.tau == want.tau);  // the same closed form on the same keys, bit for bit
            CHECK(got.count == want.count);
            ++checked;
          }
        }
      }
    }
    CHECK(checked > 100);
    // Other α: the start comes back unchanged.
    const double x[] = {0.0, -0.2, -0.7};
    CHECK(detail::theta_lower_bound(x, 3, 1.25, -0.9) == -0.9);
    CHECK(detail::theta_lower_bound(x, 3, 3.0, -0.9) == -0.9);
  }

  TEST_CASE("exact estimates read back from the approximation equal the code products' own, bit for bit") {
    // exact() without an approximation forms the code products again; with
    // one (and exact_many) it recovers them where every product is under 2^20 (r = 32 at 8 bits:
    // 32 * 127^2 = 516,128), and forms them where not (r = 64 at 8 bits).
    // Codes at the extremes and random ones; steps spread over 2^-30 ... 2^30.
    std::mt19937_64 rng(23);
    std::uniform_real_distribution<double> exponent(-30.0, 30.0);
    for (int limit : {1, 7, 90, 127}) {
      for (std::size_t r : {1u, 5u, 32u, 64u, 256u}) {
        CAPTURE(limit);
        CAPTURE(r);
        const std::size_t n = 17, m = 150;
        auto q = random_codes(n * r, limit, rng), k = random_codes(m * r, limit, rng);
        for (std::size_t x = 0; x < r; ++x) {  // the largest product of the row: every code at the limit
          q[x] = static_cast<std::int16_t>(limit);
          k[x] = static_cast<std::int16_t>(limit);
          k[r + x] = static_cast<std::int16_t>(-limit);
        }
        std::vector<double> q_steps(n), k_steps(m);
        for (double& x : q_steps) x = std::exp2(exponent(rng));
        for (double& x : k_steps) x = std::exp2(exponent(rng));
        const QuantizedEstimate estimate(q, k, q_steps, k_steps, r);
        std::vector<float> approx(n * m), block_max(n * group_count(m));
        estimate.approximate(0, n, m, approx.data(), m, block_max.data(), group_count(m));
        std::vector<std::uint32_t> idx(m);
        for (std::size_t j = 0; j < m; ++j) idx[j] = static_cast<std::uint32_t>(m - 1 - j);  // any order
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i) {
          std::vector<double> got(m);
          const double top = estimate.exact_many(i, idx.data(), m, approx.data() + i * m, got.data());
          double want_top = -std::numeric_limits<double>::infinity();
          for (std::size_t c = 0; c < m; ++c) {
            const double want = estimate.exact(i, idx[c], nullptr);
            want_top = std::max(want_top, want);
            wrong += std::memcmp(&want, &got[c], sizeof want) == 0 ? 0 : 1;
            const double one = estimate.exact(i, idx[c], approx.data() + i * m);
            wrong += std::memcmp(&want, &one, sizeof want) == 0 ? 0 : 1;
          }
          wrong += top == want_top ? 0 : 1;
        }
        CHECK(wrong == 0);
      }
    }
  }

  TEST_CASE("cut_estimated_rows: equals the float64 definition, on every instruction set and thread count") {
    std::mt19937_64 rng(12);
    struct Shape {
      std::size_t n, m, r;
      int limit;  // largest |code|: 7 for 4 bits, 127 for 8 bits, 1 for many ties
      bool causal;
    };
    const Shape shapes[] = {{70, 70, 32, 7, true},    {70, 130, 16, 127, true}, {50, 200, 8, 7, false},
                            {40, 40, 4, 1, false},    {40, 40, 4, 1, true},     {1, 1, 3, 7, false},
                            {130, 150, 33, 7, false}, {65, 300, 32, 7, true},  {40, 90, 22, 90, true}};
    for (const Shape& s : shapes) {
      const auto q = random_codes(s.n * s.r, s.limit, rng), k = random_codes(s.m * s.r, s.limit, rng);
      const QuantizedEstimate estimate(q, k, random_steps(s.n, rng), random_steps(s.m, rng), s.r);
      for (double alpha : {1.5, 2.0, 1.25, 3.0}) {
        for (double margin : {0.0, 0.5, -0.3}) {
          CAPTURE(s.n);
          CAPTURE(s.m);
          CAPTURE(s.r);
          CAPTURE(s.causal);
          CAPTURE(alpha);
          CAPTURE(margin);
          const ReferenceCut want = reference_cut(estimate, s.n, s.m, s.causal, alpha, margin);
          CHECK(want.ambiguous.size() <= 2 * s.n);  // exact ties at the cut are rare even with 3 code values
          Graph first;
          bool have_first = false;
          for (CpuIsa isa : available_cpu_isas()) {
            IsaScope scope(isa);
            for (std::size_t threads : {1, 2}) {
              ThreadsScope t(threads);
              CAPTURE(scope.name());
              const Graph got = detail::cut_estimated_rows(estimate, s.n, s.m, s.causal, alpha, margin);
              check_same_graph(got, want);
              if (!have_first) {
                first = got;
                have_first = true;
              }
              CHECK(same_graph(got, first));  // bit-identical everywhere
            }
          }
        }
      }
    }
  }

  TEST_CASE("cut_estimated_rows: steps far outside float's comfortable range follow the definition too") {
    // Hostile but finite projections: query steps whose float scales are
    // subnormal (3e-41) against keys of step 1e38, so that the estimates are
    // of order 1 and a subnormal scale's rounding would move them far more
    // than the approximation's slack; steps of 0 (zero rows); huge query
    // steps against tiny key steps.
    std::mt19937_64 rng(14);
    std::uniform_real_distribution<double> spread(0.5, 1.0);
    const std::size_t n = 50, m = 90, r = 16;
    const auto q = random_codes(n * r, 7, rng), k = random_codes(m * r, 7, rng);
    const std::pair<double, double> scales[] = {{3e-41, 1e38}, {1e-44, 1e40}, {1e30, 1e-31}, {2e20, 3e-21}};
    for (const auto& [q_scale, k_scale] : scales) {
      std::vector<double> q_steps(n), k_steps(m);
      for (double& x : q_steps) x = q_scale * spread(rng);
      for (double& x : k_steps) x = k_scale * spread(rng);
      q_steps[3] = 0.0;
      k_steps[5] = 0.0;
      const QuantizedEstimate estimate(q, k, q_steps, k_steps, r);
      for (double alpha : {1.5, 2.0, 1.25})
        for (bool causal : {false, true}) {
          CAPTURE(q_scale);
          CAPTURE(alpha);
          CAPTURE(causal);
          check_same_graph(detail::cut_estimated_rows(estimate, n, m, causal, alpha, 0.0),
                           reference_cut(estimate, n, m, causal, alpha, 0.0));
        }
    }
  }

  TEST_CASE("cut_estimated_rows: float estimates follow the definition too") {
    std::mt19937_64 rng(13);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const std::size_t n = 90, m = 120, r = 8;
    std::vector<float> q(n * r), k(m * r);
    for (auto& x : q) x = normal(rng);
    for (auto& x : k) x = normal(rng);
    const FloatEstimate estimate(q, k, r);
    for (bool causal : {false, true})
      for (double alpha : {1.5, 2.0, 1.75}) {
        CAPTURE(causal);
        CAPTURE(alpha);
        check_same_graph(detail::cut_estimated_rows(estimate, n, m, causal, alpha, 0.25),
                         reference_cut(estimate, n, m, causal, alpha, 0.25));
      }
  }
}

}  // namespace
}  // namespace entgraph::test
