// Run-time device selection: the same host-memory calls on Device::cpu and
// Device::cuda agree, and misuse is refused.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/device.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph {
namespace {

std::vector<float> normal(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
  return worst;
}

TEST_SUITE("cuda") {
  TEST_CASE("parse_device names the device it does not know") {
    CHECK(parse_device("cpu") == Device::cpu);
    CHECK(parse_device("cuda") == Device::cuda);
    CHECK_THROWS_WITH_AS(parse_device("gpu"), doctest::Contains("'gpu'"), Error);
  }

  TEST_CASE("the registered backend reports the GPU as available") {
    std::string why = "unchanged";
    CHECK(device_available(Device::cuda, &why));
    CHECK(why == "unchanged");
    CHECK(device_available(Device::cpu));
  }

  TEST_CASE("transforms, attention and graph attention agree on cpu and cuda") {
    const std::size_t n = 64, d = 32;
    const std::vector<float> scores = normal(n * n, 1), q = normal(n * d, 2), k = normal(n * d, 3), v = normal(n * d, 4);
    for (const Transform t : {Transform::softmax(), Transform::entmax15(), Transform::sparsemax(), Transform::entmax(1.25)}) {
      std::vector<float> cpu(n * n), gpu(n * n);
      transform_forward(Device::cpu, t, {scores.data(), n, n}, {cpu.data(), n, n});
      transform_forward(Device::cuda, t, {scores.data(), n, n}, {gpu.data(), n, n});
      CHECK(max_diff(cpu, gpu) < 1e-5);
      AttentionOptions<float> options;
      options.transform = t;
      options.causal = true;
      std::vector<float> a_cpu(n * d), a_gpu(n * d), g_gpu(n * d);
      attention_forward(Device::cpu, {q.data(), n, d}, {k.data(), n, d}, {v.data(), n, d}, {a_cpu.data(), n, d}, options);
      attention_forward(Device::cuda, {q.data(), n, d}, {k.data(), n, d}, {v.data(), n, d}, {a_gpu.data(), n, d}, options);
      CHECK(max_diff(a_cpu, a_gpu) < 1e-4);
      GraphAttentionOptions<float> graph_options;
      graph_options.attention = options;
      graph_options.mode = GraphAttentionMode::fast;
      graph_attention_forward(Device::cuda, {q.data(), n, d}, {k.data(), n, d}, {v.data(), n, d}, Graph::full(n, n, true),
                              {g_gpu.data(), n, d}, graph_options);
      CHECK(max_diff(a_cpu, g_gpu) < 1e-4);
    }
  }

  TEST_CASE("certificates are a CPU feature") {
    const std::size_t n = 4, d = 32;
    const std::vector<float> x = normal(n * d, 5);
    std::vector<float> out(n * d, 7.0f);
    GraphAttentionOptions<float> options;
    options.mode = GraphAttentionMode::certify;
    CHECK_THROWS_WITH_AS(graph_attention_forward(Device::cuda, {x.data(), n, d}, {x.data(), n, d}, {x.data(), n, d},
                                                 Graph::full(n, n, false), {out.data(), n, d}, options),
                         doctest::Contains("certify runs on cpu"), Error);
    CHECK(std::all_of(out.begin(), out.end(), [](float o) { return o == 7.0f; }));
  }
}

}  // namespace
}  // namespace entgraph
