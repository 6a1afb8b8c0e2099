// entgraph: the fixed attention patterns (docs/PREDICTORS.md), nothing
// learned:
//   window      keys j with |i - j| <= w (causal: i - w <= j <= i)
//   global      the first g tokens attend to, and are attended by, all
//   longformer  window + global (Beltagy et al. 2020)
//   bigbird     window + global + r random keys per query (Zaheer et al. 2020)
//
// bigbird's random keys come from runtime/random.hpp, one engine per (seed,
// layer, head, row), so the same seed gives the same graph on every platform.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "predictors/registry.hpp"
#include "runtime/random.hpp"

namespace entgraph::detail {
namespace {

constexpr long kMaxPattern = 1L << 20;  // the bound of extra_window / extra_global too

// window, global, longformer and bigbird: the union of a local window
// (|i - j| <= w, only j <= i under causal), the first g tokens as global
// tokens (they attend to every key, every query attends to them) and r random
// keys per query outside the rest (allowed keys only under causal).
class FixedPatternPredictor : public Predictor {
 public:
  Graph predict_pattern(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer, std::size_t head,
                        bool causal) const override {
    const std::size_t n = q.rows, m = k.rows;
    Graph g = Graph::empty(n, m);
    std::vector<std::uint32_t> row;
    for (std::size_t i = 0; i < n; ++i) {
      if (i < global_) {  // a global query attends to every key
        for (std::size_t j = 0; j < m; ++j) g.indices.push_back(static_cast<std::uint32_t>(j));
        g.offsets[i + 1] = g.indices.size();
        continue;
      }
      const std::size_t gl = std::min(global_, m);  // keys [0, gl) are global
      // The window [lo, hi] (empty when lo > hi).
      std::size_t lo = 0, hi = 0;
      bool has_window = window_ >= 0;
      if (has_window) {
        const std::size_t w = static_cast<std::size_t>(window_);
        lo = i > w ? i - w : 0;
        hi = causal ? i : i + w;
        if (m == 0 || lo > m - 1) has_window = false;
        else hi = std::min(hi, m - 1);
      }
      row.clear();
      for (std::size_t j = 0; j < gl; ++j) row.push_back(static_cast<std::uint32_t>(j));
      if (has_window)
        for (std::size_t j = std::max(lo, gl); j <= hi; ++j) row.push_back(static_cast<std::uint32_t>(j));
      if (random_ > 0) {  // global keys and the window are already in order
        add_random(row, i, gl, has_window, lo, hi, m, causal, layer, head);
        std::sort(row.begin(), row.end());
      }
      g.indices.insert(g.indices.end(), row.begin(), row.end());
      g.offsets[i + 1] = g.indices.size();
    }
    return g;
  }

 protected:
  FixedPatternPredictor(PredictorSettings settings, const char* method, bool window, bool global, bool random)
      : Predictor(std::move(settings)) {
    SettingsReader reader(method, settings_);
    if (window) window_ = reader.integer("window", 3, 0, kMaxPattern);
    if (global) global_ = static_cast<std::size_t>(reader.integer("global", 2, 0, kMaxPattern));
    if (random) {
      random_ = static_cast<std::size_t>(reader.integer("random", 2, 0, kMaxPattern));
      seed_ = read_seed(reader);
    }
    reader.finish();
  }

 private:
  // Appends r distinct keys drawn uniformly (Floyd's algorithm) from the free
  // keys of row i: [gl, M) minus the window, M = m (or i + 1 under causal).
  void add_random(std::vector<std::uint32_t>& row, std::size_t i, std::size_t gl, bool has_window, std::size_t lo,
                  std::size_t hi, std::size_t m, bool causal, std::size_t layer, std::size_t head) const {
    const std::size_t limit = causal ? std::min(m, i + 1) : m;
    if (limit <= gl) return;
    // Free keys: [a0, a1) and [b0, limit).
    std::size_t a0 = gl, a1 = gl, b0 = gl;
    if (has_window) {
      a1 = std::min(std::max(lo, gl), limit);
      b0 = std::max(hi + 1, gl);
    }
    const std::size_t na = a1 - a0, nb = b0 < limit ? limit - b0 : 0, free = na + nb;
    if (free == 0) return;
    auto key_of = [&](std::size_t t) { return static_cast<std::uint32_t>(t < na ? a0 + t : b0 + (t - na)); };
    if (random_ >= free) {
      for (std::size_t t = 0; t < free; ++t) row.push_back(key_of(t));
      return;
    }
    std::mt19937_64 rng(keyed_seed(kStreamBigBird, seed_, layer, head, i));
    std::vector<std::size_t> chosen;  // sorted
    chosen.reserve(random_);
    for (std::size_t j = free - random_; j < free; ++j) {
      const std::size_t t = static_cast<std::size_t>(uniform_below_reject_low(rng, j + 1));
      auto at = std::lower_bound(chosen.begin(), chosen.end(), t);
      if (at != chosen.end() && *at == t) {
        chosen.push_back(j);  // j is above everything chosen so far
      } else {
        chosen.insert(at, t);
      }
    }
    for (std::size_t t : chosen) row.push_back(key_of(t));
  }

  long window_ = -1;  // -1: no window
  std::size_t global_ = 0;
  std::size_t random_ = 0;
  std::uint64_t seed_ = 0;
};

class WindowPredictor final : public FixedPatternPredictor {
 public:
  explicit WindowPredictor(PredictorSettings s) : FixedPatternPredictor(std::move(s), "window", true, false, false) {}
  std::string method() const override { return "window"; }
};

class GlobalPredictor final : public FixedPatternPredictor {
 public:
  explicit GlobalPredictor(PredictorSettings s) : FixedPatternPredictor(std::move(s), "global", false, true, false) {}
  std::string method() const override { return "global"; }
};

class LongformerPredictor final : public FixedPatternPredictor {
 public:
  explicit LongformerPredictor(PredictorSettings s)
      : FixedPatternPredictor(std::move(s), "longformer", true, true, false) {}
  std::string method() const override { return "longformer"; }
};

class BigBirdPredictor final : public FixedPatternPredictor {
 public:
  explicit BigBirdPredictor(PredictorSettings s) : FixedPatternPredictor(std::move(s), "bigbird", true, true, true) {}
  std::string method() const override { return "bigbird"; }
};

}  // namespace

const std::vector<PredictorFactory>& pattern_factories() {
  static const std::vector<PredictorFactory> factories = {
      {"window", create_method<WindowPredictor>, load_unlearned<WindowPredictor>},
      {"global", create_method<GlobalPredictor>, load_unlearned<GlobalPredictor>},
      {"longformer", create_method<LongformerPredictor>, load_unlearned<LongformerPredictor>},
      {"bigbird", create_method<BigBirdPredictor>, load_unlearned<BigBirdPredictor>},
      reformer_factory(),
      routing_factory(),
  };
  return factories;
}

}  // namespace entgraph::detail
