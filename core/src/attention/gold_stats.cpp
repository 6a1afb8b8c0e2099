// entgraph: counting a capture's gold attention graph (see gold_stats.hpp).
#include "entgraph/gold_stats.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/transforms.hpp"
#include "kernels/matmul_kernels.hpp"

namespace entgraph {

GoldStats gold_stats(const Capture& capture, std::size_t layer, std::size_t head) {
  const HeadSettings& settings = capture.head(layer, head);  // checks the range
  const Transform transform = settings.alpha == 1.5 ? Transform::entmax15() : Transform::entmax(settings.alpha);
  const auto& mm = detail::matmul_kernels(cpu_isa());
  constexpr std::size_t kBlock = 64;
  const std::size_t d = capture.head_dim;

  GoldStats stats;
  std::vector<float> kt, scores, probs;
  for (std::size_t s = 0; s < capture.sequences(); ++s) {
    const MatrixView<const float> q = capture.queries_of(layer, head, s);
    const MatrixView<const float> k = capture.keys_of(layer, head, s);
    const std::size_t n = q.rows;
    kt.assign(d * n, 0.0f);  // K^T, so that each block is one row-major GEMM
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t c = 0; c < d; ++c) kt[c * n + j] = k(j, c);
    for (std::size_t r0 = 0; r0 < n; r0 += kBlock) {
      const std::size_t rows = std::min(kBlock, n - r0);
      scores.resize(rows * n);
      probs.resize(rows * n);
      mm.gemm_nn(rows, n, d, static_cast<float>(settings.scale), q.row(r0), q.stride, kt.data(), n, scores.data(), n,
                 false, false);
      if (settings.causal)
        for (std::size_t i = 0; i < rows; ++i)
          std::fill(scores.begin() + i * n + r0 + i + 1, scores.begin() + (i + 1) * n,
                    -std::numeric_limits<float>::infinity());
      transform_forward<float>(transform, {scores.data(), rows, n}, {probs.data(), rows, n});
      stats.edges += static_cast<std::size_t>(std::count_if(probs.begin(), probs.end(), [](float p) { return p > 0.0f; }));
    }
    stats.allowed += settings.causal ? n * (n + 1) / 2 : n * n;
    stats.queries += n;
  }
  return stats;
}

}  // namespace entgraph
