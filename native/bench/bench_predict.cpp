// entgraph benchmarks: the cost of finding the graph against the attention it
// should save (issue 31). lowrank-threshold (default settings: r = d, 4-bit
// codes) predicts one head of the long teacher (layer 1, head 1, causal
// 1.5-entmax) on the first n bytes of data/heldout-long.txt, fitted on
// data/heldout.txt (4 x 2048 bytes, never the text it predicts); beside it,
// dense 1.5-entmax attention of the same head in the same run. One thread.
// Compare BM_predict/lowrank-threshold/n:N with BM_predict/dense_attention/n:N.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/model.hpp"
#include "entgraph/predictors/predictor.hpp"

namespace entgraph::bench {
namespace {

constexpr std::size_t kLayer = 1, kHead = 1;

std::string read_text(const char* name) {
  std::ifstream f(std::string(ENTGRAPH_SOURCE_DIR) + "/data/" + name, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The teacher, the fitted predictor and the captured head at each n, built
// on first use (not at registration, so that other benchmarks' runs skip it).
struct Setup {
  std::unique_ptr<Predictor> predictor;
  std::vector<std::pair<std::size_t, Capture>> captures;
  std::string error;

  static Setup& get() {
    static Setup s = [] {
      Setup s;
      try {
        const Teacher teacher = Teacher::load(std::string(ENTGRAPH_SOURCE_DIR) + "/data/teacher-long");
        const std::string fit_text = read_text("heldout.txt"), test_text = read_text("heldout-long.txt");
        std::vector<std::string> fit_parts;
        for (std::size_t p = 0; p < 4 && (p + 1) * 2048 <= fit_text.size(); ++p)
          fit_parts.push_back(fit_text.substr(p * 2048, 2048));
        s.predictor = make_predictor("lowrank-threshold");
        s.predictor->fit(teacher.capture(fit_parts), {});
        for (std::size_t n : {1024, 2048, 4096, 8192}) {
          if (test_text.size() < n || n > teacher.config().context) continue;
          s.captures.emplace_back(n, teacher.capture({test_text.substr(0, n)}));
        }
      } catch (const std::exception& e) {
        s.error = e.what();
      }
      return s;
    }();
    return s;
  }

  const Capture* capture(std::size_t n) const {
    for (const auto& [size, c] : captures)
      if (size == n) return &c;
    return nullptr;
  }
};

void run(benchmark::State& state, std::size_t n, bool predict) {
  const ScopedRuntime runtime(1, default_isa());
  const Setup& setup = Setup::get();
  const Capture* capture = setup.capture(n);
  if (capture == nullptr) {
    state.SkipWithError(setup.error.empty() ? "the teacher's context or the text is shorter than n"
                                            : setup.error.c_str());
    return;
  }
  const auto q = capture->queries_of(kLayer, kHead, 0), k = capture->keys_of(kLayer, kHead, 0),
             v = capture->values_of(kLayer, kHead, 0);
  const HeadSettings& head = capture->head(kLayer, kHead);
  if (predict) {
    for (auto _ : state)
      benchmark::DoNotOptimize(setup.predictor->predict(q, k, kLayer, kHead, head.causal).indices.data());
  } else {
    std::vector<float> out(n * v.cols);
    AttentionOptions<float> options;
    options.transform = Transform::for_alpha(head.alpha);
    options.scale = head.scale;
    options.causal = head.causal;
    for (auto _ : state) {
      attention_forward<float>(q, k, v, {out.data(), n, v.cols}, options);
      benchmark::DoNotOptimize(out.data());
    }
  }
}

}  // namespace

void register_predict_benchmarks() {
  for (std::size_t n : {1024, 2048, 4096, 8192})
    for (bool predict : {false, true})
      benchmark::RegisterBenchmark(
          (std::string("BM_predict/") + (predict ? "lowrank-threshold" : "dense_attention") + "/n:" + std::to_string(n) +
           "/threads:1")
              .c_str(),
          [n, predict](benchmark::State& s) { run(s, n, predict); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
}

}  // namespace entgraph::bench
