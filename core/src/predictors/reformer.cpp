// entgraph: Reformer's LSH predictor (Kitaev et al. 2020, "Reformer: the
// efficient transformer", section 2): per hash round, a random rotation R
// (d x B/2, Gaussian) maps each L2-normalised query and key x to the bucket
// argmax([xR, -xR]) (the first on ties); a query and a key in the same
// bucket in any round are an edge. Queries and keys are hashed alike, as in
// Reformer's shared-QK attention.
//
// R's entries are Box-Muller normals from runtime/random.hpp, one engine per
// (seed, layer, head, round): the same seed gives the same graph on every
// platform, up to the last bit of libm's log / sin / cos.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "predictors/registry.hpp"
#include "runtime/random.hpp"
#include "training/normalised_rows.hpp"

namespace entgraph::detail {
namespace {

class ReformerPredictor final : public Predictor {
 public:
  explicit ReformerPredictor(PredictorSettings s) : Predictor(std::move(s)) {
    SettingsReader reader("reformer", settings_);
    const long b = reader.integer("buckets", 8, 2, 1L << 16);
    if (b % 2 != 0)
      throw Error("reformer: setting 'buckets': expected an even integer in [2, 65536], got '" + settings_.at("buckets") +
                  "'");
    buckets_ = static_cast<std::size_t>(b);
    rounds_ = static_cast<std::size_t>(reader.integer("rounds", 2, 1, 64));
    seed_ = read_seed(reader);
    reader.finish();
  }
  std::string method() const override { return "reformer"; }

  Graph predict_pattern(MatrixView<const float> q, MatrixView<const float> k, std::size_t layer, std::size_t head,
                        bool) const override {
    const std::size_t d = q.cols, half = buckets_ / 2;
    std::vector<std::uint32_t> qb(q.rows * rounds_), kb(k.rows * rounds_);
    std::vector<double> rotation(d * half), x(d), y(half);
    for (std::size_t round = 0; round < rounds_; ++round) {
      // R is d x B/2, row-major, Gaussian.
      NormalPairs normal(std::mt19937_64(keyed_seed(kStreamReformer, seed_, layer, head, round)));
      for (double& r : rotation) r = normal.next();
      auto hash = [&](MatrixView<const float> v, std::vector<std::uint32_t>& out) {
        for (std::size_t i = 0; i < v.rows; ++i) {
          normalised_row(v, i, x.data());
          std::fill(y.begin(), y.end(), 0.0);
          for (std::size_t c = 0; c < d; ++c) {
            const double xc = x[c];
            const double* rr = rotation.data() + c * half;
            for (std::size_t b = 0; b < half; ++b) y[b] += xc * rr[b];
          }
          // argmax of [y, -y], the first on ties.
          std::size_t best = 0;
          double best_value = y[0];
          for (std::size_t b = 1; b < half; ++b)
            if (y[b] > best_value) best_value = y[b], best = b;
          for (std::size_t b = 0; b < half; ++b)
            if (-y[b] > best_value) best_value = -y[b], best = half + b;
          out[i * rounds_ + round] = static_cast<std::uint32_t>(best + round * buckets_);
        }
      };
      hash(q, qb);
      hash(k, kb);
    }
    return Graph::from_buckets({qb.data(), q.rows, rounds_}, {kb.data(), k.rows, rounds_}, rounds_ * buckets_);
  }

 private:
  std::size_t buckets_ = 8, rounds_ = 2;
  std::uint64_t seed_ = 0;
};

}  // namespace

PredictorFactory reformer_factory() {
  return {"reformer", create_method<ReformerPredictor>, load_unlearned<ReformerPredictor>};
}

}  // namespace entgraph::detail
