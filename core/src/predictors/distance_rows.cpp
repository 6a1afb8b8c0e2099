// sparsefinder-distance's graph (distance_rows.hpp).
#include "predictors/distance_rows.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "entgraph/heads.hpp"
#include "kernels/matmul_kernels.hpp"
#include "predictors/row_blocks.hpp"
#include "runtime/cpu_clones.hpp"
#include "runtime/parallel.hpp"

namespace entgraph::detail {
namespace {

// The definition's two conditions for one pair (compiled for the baseline
// target: no FMA): b's first coordinate in the window [lo, hi], and the
// double sum of squares in coordinate order.
bool in_window(const float* b, double lo, double hi) {
  const double b0 = static_cast<double>(b[0]);
  return b0 >= lo && b0 <= hi;
}
double square_sum(const float* a, const float* b, std::size_t r) {
  double d2 = 0.0;
  for (std::size_t c = 0; c < r; ++c) {
    const double x = static_cast<double>(a[c]) - static_cast<double>(b[c]);
    d2 += x * x;
  }
  return d2;
}

// out[j] = −Σ_c (a_c − kt[c m + j])² in float for j < count (kt: r x m,
// the keys' coordinates by column; negated for select_above). In blocks of
// 64 keys whose sums stay in registers through the r coordinates.
ENTGRAPH_CPU_CLONES void negative_squares(const float* a, const float* kt, std::size_t m, std::size_t r,
                                          std::size_t count, float* out) {
  constexpr std::size_t B = 16, U = 4;  // U blocks at once: independent sums hide the adds' latency
  using Floats = float __attribute__((vector_size(B * sizeof(float))));  // GCC's vectors: 1-4 registers by ISA
  std::size_t j0 = 0;
  for (; j0 + U * B <= count; j0 += U * B) {
    Floats sum[U] = {};
    for (std::size_t c = 0; c < r; ++c) {
      const float* col = kt + c * m + j0;
#pragma GCC unroll 4
      for (std::size_t u = 0; u < U; ++u) {
        Floats v;
        std::memcpy(&v, col + u * B, sizeof v);
        const Floats x = a[c] - v;
        sum[u] += x * x;
      }
    }
#pragma GCC unroll 4
    for (std::size_t u = 0; u < U; ++u) {
      const Floats negative = -sum[u];
      std::memcpy(out + j0 + u * B, &negative, sizeof negative);
    }
  }
  for (std::size_t j = j0; j < count; ++j) {
    float sum = 0.0f;
    for (std::size_t c = 0; c < r; ++c) {
      const float x = a[c] - kt[c * m + j];
      sum += x * x;
    }
    out[j] = -sum;
  }
}

// Whether every |v[i]| is at most limit (NaN and infinities are not).
bool all_within(const float* v, std::size_t count, float limit) {
  bool within = true;
  for (std::size_t i = 0; i < count; ++i) within &= std::fabs(v[i]) <= limit;
  return within;
}

// The largest float strictly below x (x <= 0 here, NaN never).
float float_below(double x) {
  // (Past the float range the conversion itself would be undefined.)
  if (!(x > -static_cast<double>(std::numeric_limits<float>::max()))) return -std::numeric_limits<float>::infinity();
  float f = static_cast<float>(x);
  if (static_cast<double>(f) >= x) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return f;
}

}  // namespace

Graph distance_rows(const float* qp, std::size_t n, const float* kp, std::size_t m, std::size_t r, double t,
                    bool causal) {
  const double t2 = t * t;
  // The float pass's error: each difference rounds once (relative 2^-24),
  // each square and partial sum once more (or fused), so the float sum is
  // within (2r + 4) 2^-24 of the exact sum, relative, and the double one
  // within (r + 1) 2^-53; `relative` covers both with room. Results in the
  // subnormals round with an absolute error under 2^-149 an operation,
  // which `absolute` covers. Nothing overflows in float while the points lie
  // within 2^40 (sums under 2^91); otherwise every visible pair takes the
  // double sum. Any t works: a t² past the float range selects every key
  // and settles each by the window alone, a tiny one (or 0) sends every
  // candidate to the double sum.
  const double relative = static_cast<double>(2 * r + 8) * 0x1p-24, absolute = static_cast<double>(r + 1) * 0x1p-100;
  const bool float_pass = all_within(qp, n * r, 0x1p40f) && all_within(kp, m * r, 0x1p40f);
  const double sure_below = t2 * (1.0 - relative) - absolute, maybe_below = t2 * (1.0 + relative) + absolute;
  const float select_floor = float_below(-maybe_below);
  std::vector<float> kt;
  if (float_pass) {
    kt.resize(r * m);
    for (std::size_t j = 0; j < m; ++j)
      for (std::size_t c = 0; c < r; ++c) kt[c * m + j] = kp[j * r + c];
  }
  const MatmulKernels<float>& mk = matmul_kernels(cpu_isa());
  constexpr std::size_t kBlock = 16;
  const std::size_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<std::vector<std::uint32_t>> block_edges(blocks);
  std::vector<std::size_t> degree(n, 0);
  parallel_for(blocks, grain_for(kBlock * m / 4 + 1), [&](std::size_t b0, std::size_t b1) {
    std::vector<float> squares;
    std::vector<std::uint32_t> idx;
    for (std::size_t b = b0; b < b1; ++b) {
      std::vector<std::uint32_t>& edges = block_edges[b];
      for (std::size_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
        const std::size_t visible = causal ? causal_key_limit(i, n, m) : m, row_start = edges.size();
        const float* a = qp + i * r;
        const double a0 = static_cast<double>(a[0]), lo = a0 - t, hi = a0 + t;
        if (float_pass) {
          squares.resize(visible);
          idx.resize(visible);
          negative_squares(a, kt.data(), m, r, visible, squares.data());
          const std::size_t count = mk.select_above(squares.data(), nullptr, 0, visible, select_floor,
                                                    std::numeric_limits<float>::infinity(), idx.data());
          for (std::size_t c = 0; c < count; ++c) {
            const std::uint32_t j = idx[c];
            const float* b = kp + j * r;
            if (in_window(b, lo, hi) && (-static_cast<double>(squares[j]) <= sure_below || square_sum(a, b, r) <= t2))
              edges.push_back(j);
          }
        } else {
          for (std::size_t j = 0; j < visible; ++j) {
            const float* b = kp + j * r;
            if (in_window(b, lo, hi) && square_sum(a, b, r) <= t2) edges.push_back(static_cast<std::uint32_t>(j));
          }
        }
        degree[i] = edges.size() - row_start;
      }
    }
  });
  return join_row_blocks(n, m, degree, block_edges);
}

}  // namespace entgraph::detail
