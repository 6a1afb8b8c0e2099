// Graph attention on the GPU: against the CPU's graph attention (mode fast
// false) on the same graph, and against dense attention on the full graph and
// on the true entmax support.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/cuda/attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/cuda/device_graph.hpp"
#include "entgraph/device.hpp"
#include "entgraph/cuda/graph_attention.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/model.hpp"
#include "support.hpp"

namespace entgraph::cuda {
namespace {

using test::Matrix;
using test::random_matrix;

constexpr double kTol = 1e-4;

std::vector<Transform> graph_transforms() {
  return {Transform::softmax(),       Transform::entmax15(),        Transform::entmax(1.25),
          Transform::sparsemax(),     Transform::entmax(3.0),       Transform::topk_softmax(1),
          Transform::topk_softmax(6), Transform::topk_softmax(1000)};
}

// Keys within w positions of the query's position i + (m - n), clipped to [0, m).
Graph window_graph(std::size_t n, std::size_t m, std::size_t w) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
  for (std::size_t i = 0; i < n; ++i) {
    const long pos = static_cast<long>(i + m) - static_cast<long>(n);
    for (long j = pos - static_cast<long>(w); j <= pos + static_cast<long>(w); ++j)
      if (j >= 0 && j < static_cast<long>(m))
        pairs.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
  }
  return Graph::from_pairs(n, m, std::move(pairs));
}

Matrix<double> cpu_graph_attention(const Matrix<float>& q, const Matrix<float>& k, const Matrix<float>& v,
                                   const Graph& g, const AttentionOptions<float>& o) {
  GraphAttentionOptions<double> go;
  go.attention.transform = o.transform;
  go.attention.scale = o.scale;
  go.attention.causal = o.causal;
  go.attention.key_padding = o.key_padding;
  go.mode = GraphAttentionMode::fast;
  const Matrix<double> qd = q.cast<double>(), kd = k.cast<double>(), vd = v.cast<double>();
  Matrix<double> out(q.rows, v.cols);
  entgraph::graph_attention_forward<double>(qd.view(), kd.view(), vd.view(), g, out.view(), go);
  return out;
}

Matrix<double> cpu_dense(const Matrix<float>& q, const Matrix<float>& k, const Matrix<float>& v,
                         const AttentionOptions<float>& o, Matrix<double>* probs = nullptr) {
  AttentionOptions<double> od;
  od.transform = o.transform;
  od.scale = o.scale;
  od.causal = o.causal;
  od.key_padding = o.key_padding;
  const Matrix<double> qd = q.cast<double>(), kd = k.cast<double>(), vd = v.cast<double>();
  Matrix<double> out(q.rows, v.cols);
  entgraph::attention_forward<double>(qd.view(), kd.view(), vd.view(), out.view(), od,
                                      probs ? probs->view() : MatrixView<double>{});
  return out;
}

// The CUDA backend computes the graph's rows only (GraphAttentionMode::fast).
GraphAttentionOptions<float> fast(const AttentionOptions<float>& o) {
  GraphAttentionOptions<float> go;
  go.attention = o;
  go.mode = GraphAttentionMode::fast;
  return go;
}

Matrix<double> gpu_graph_attention(const Matrix<float>& q, const Matrix<float>& k, const Matrix<float>& v,
                                   const Graph& g, const AttentionOptions<float>& o) {
  Matrix<float> out(q.rows, v.cols, -7.0f);
  entgraph::graph_attention_forward(Device::cuda, q.view(), k.view(), v.view(), g, out.view(), fast(o));
  return out.cast<double>();
}

// Exact mode on the GPU: out and the report.
Matrix<double> gpu_exact(const Matrix<float>& q, const Matrix<float>& k, const Matrix<float>& v, const Graph& g,
                         const AttentionOptions<float>& o, GraphAttentionReport* report) {
  GraphAttentionOptions<float> go;
  go.attention = o;
  go.mode = GraphAttentionMode::exact;
  Matrix<float> out(q.rows, v.cols, -7.0f);
  entgraph::graph_attention_forward(Device::cuda, q.view(), k.view(), v.view(), g, out.view(), go, report);
  return out.cast<double>();
}

// A random graph: each allowed pair with probability `share`.
Graph random_graph(std::size_t n, std::size_t m, double share, std::uint64_t seed) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
  std::uint64_t x = seed;
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t j = 0; j < m; ++j) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      if (static_cast<double>(x >> 11) * 0x1p-53 < share) pairs.emplace_back(i, j);
    }
  return Graph::from_pairs(n, m, std::move(pairs));
}

}  // namespace

TEST_SUITE("cuda") {
  // Exact mode on the GPU (exact_graph_attention.cu): whatever the graph,
  // every row is dense attention's (float64 reference on the same inputs),
  // and the report accounts for every row.
  TEST_CASE("exact mode: every row equals dense attention, whatever the graph") {
    struct Shape {
      std::size_t n, m, d, dv;
    };
    double worst = 0.0;
    std::size_t scored = 0, allowed = 0;
    for (const Shape& s : {Shape{1, 1, 32, 32}, Shape{70, 70, 64, 64}, Shape{150, 200, 32, 48},
                           Shape{130, 130, 128, 64}, Shape{40, 260, 16, 16}})
      for (const Transform& t : {Transform::entmax15(), Transform::sparsemax(), Transform::entmax(1.25),
                                 Transform::entmax(3.0)})
        for (bool causal : {false, true})
          for (bool padded : {false, true}) {
            const Matrix<float> q = random_matrix<float>(s.n, s.d, 2.5, 11 + s.n);
            const Matrix<float> k = random_matrix<float>(s.m, s.d, 1.0, 12 + s.m);
            const Matrix<float> v = random_matrix<float>(s.m, s.dv, 1.0, 13 + s.m);
            std::vector<std::uint8_t> padding(s.m, 1);
            for (std::size_t j = 3; j < s.m; j += 7) padding[j] = 0;
            AttentionOptions<float> o;
            o.transform = t;
            o.causal = causal;
            if (padded) o.key_padding = padding.data();
            Matrix<double> probs(s.n, s.m);
            const Matrix<double> dense = cpu_dense(q, k, v, o, &probs);
            Matrix<std::uint8_t> support(s.n, s.m);
            for (std::size_t i = 0; i < probs.data.size(); ++i) support.data[i] = probs.data[i] > 0.0;
            double v_scale = 0.0;  // the outputs' scale: the largest |v|
            for (float x : v.data) v_scale = std::max(v_scale, std::fabs(static_cast<double>(x)));
            const std::vector<std::pair<std::string, Graph>> graphs = {
                {"empty", Graph::empty(s.n, s.m)},
                {"window 3", window_graph(s.n, s.m, 3)},
                {"random 0.1", random_graph(s.n, s.m, 0.1, 7)},
                {"full", Graph::full(s.n, s.m, false)},
                {"support", Graph::from_mask(support.view())}};
            for (const auto& [name, g] : graphs) {
              CAPTURE(s.n);
              CAPTURE(s.m);
              CAPTURE(s.d);
              CAPTURE(test::describe(t));
              CAPTURE(causal);
              CAPTURE(padded);
              CAPTURE(name);
              GraphAttentionReport report;
              const Matrix<double> got = gpu_exact(q, k, v, g, o, &report);
              // float32 attention's own rounding: as the fast kernel on the
              // full graph (dense attention on this device) has it.
              const double err = test::max_abs_diff(got, dense) / v_scale;
              worst = std::max(worst, err);
              CHECK(err <= 1e-5);
              REQUIRE(report.settled.size() == s.n);
              CHECK(report.exact_rows() == s.n);
              CHECK(report.bound_kernel == BoundKernel::int8_mma);
              CHECK(report.bounded_rows == s.n);
              if (name == "empty") CHECK(report.dense_rows == s.n);
              if (name == "support") {
                CHECK(report.dense_rows <= s.n);  // rows without an allowed key only
                CHECK(report.graph_rows > 0);
              }
              scored += report.graph_pairs + report.repair_pairs;
              allowed += report.bound_pairs;
            }
          }
    MESSAGE("exact mode: largest |out - dense| / max |v| " << worst << "; keys scored " << scored << " of " << allowed
                                                  << " allowed");
    CHECK(scored < allowed / 2);  // the bounds exclude keys
  }

  // The long teacher (rotary heads, where the CPU's low-rank bounds exclude
  // almost nothing) on 1000 bytes of held-out text, every head, a causal
  // window of 64 keys as the graph: every row dense attention's, and how many
  // keys the byte-code bounds leave to score.
  TEST_CASE("exact mode: the long teacher's heads with a window graph") {
    std::ifstream file(std::string(ENTGRAPH_SOURCE_DIR) + "/data/heldout-long.txt", std::ios::binary);
    REQUIRE(file.good());
    const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    const Teacher teacher = Teacher::load(std::string(ENTGRAPH_SOURCE_DIR) + "/data/teacher-long");
    const Capture c = teacher.capture({text.substr(0, 1000)});
    const std::size_t n = c.lengths[0], d = c.head_dim;
    const Graph window = window_graph(n, n, 64);  // the causal mask keeps the 65 keys up to the query
    std::size_t scored = 0, allowed = 0, graph_rows = 0;
    double worst = 0.0;
    for (std::size_t layer = 0; layer < c.layers; ++layer)
      for (std::size_t h = 0; h < c.heads; ++h) {
        CAPTURE(layer);
        CAPTURE(h);
        const auto copy = [](MatrixView<const float> x) {
          Matrix<float> m(x.rows, x.cols);
          for (std::size_t i = 0; i < x.rows; ++i)
            for (std::size_t j = 0; j < x.cols; ++j) m(i, j) = x(i, j);
          return m;
        };
        const Matrix<float> q = copy(c.queries_of(layer, h, 0)), k = copy(c.keys_of(layer, h, 0)),
                            v = copy(c.values_of(layer, h, 0));
        AttentionOptions<float> o;
        o.transform = Transform::for_alpha(c.head(layer, h).alpha);
        o.scale = c.head(layer, h).scale;
        o.causal = true;
        GraphAttentionReport report;
        const Matrix<double> got = gpu_exact(q, k, v, window, o, &report);
        double v_scale = 0.0;
        for (float x : v.data) v_scale = std::max(v_scale, std::fabs(static_cast<double>(x)));
        const double err = test::max_abs_diff(got, cpu_dense(q, k, v, o)) / v_scale;
        worst = std::max(worst, err);
        CHECK(err <= 1e-5);
        CHECK(report.exact_rows() == n);
        scored += report.graph_pairs + report.repair_pairs;
        allowed += report.bound_pairs;
        graph_rows += report.graph_rows;
      }
    MESSAGE("long teacher, window 64, " << n << " bytes, " << c.layers * c.heads << " heads: keys scored " << scored
                                        << " of " << allowed << " allowed (" << 100.0 * scored / allowed
                                        << " %), rows settled by the window " << graph_rows << ", largest error "
                                        << worst << " of max |v|; d = " << d);
    CHECK(scored < allowed);
  }

  TEST_CASE("exact mode on device cuda: what it refuses, naming it") {
    const std::size_t n = 8, d = 32;
    const Matrix<float> x = random_matrix<float>(n, d, 1.0, 5);
    Matrix<float> out(n, d, 7.0f);
    GraphAttentionOptions<float> go;
    go.mode = GraphAttentionMode::exact;
    go.attention.transform = Transform::softmax();
    CHECK_THROWS_AS(entgraph::graph_attention_forward(Device::cuda, x.view(), x.view(), x.view(), Graph::empty(n, n),
                                                      out.view(), go),
                    Error);
    go.attention.transform = Transform::topk_softmax(2);
    CHECK_THROWS_WITH_AS(entgraph::graph_attention_forward(Device::cuda, x.view(), x.view(), x.view(),
                                                           Graph::empty(n, n), out.view(), go),
                         doctest::Contains("not supported on device cuda"), Error);
    go.attention.transform = Transform::entmax15();
    go.mode = GraphAttentionMode::certify;
    CHECK_THROWS_WITH_AS(entgraph::graph_attention_forward(Device::cuda, x.view(), x.view(), x.view(),
                                                           Graph::empty(n, n), out.view(), go),
                         doctest::Contains("certify runs on cpu"), Error);
    for (float o : out.data) CHECK(o == 7.0f);
  }

  TEST_CASE("exact mode on device memory: the host call's output and report; NaN refused before writing") {
    const std::size_t n = 90, m = 120, d = 64, dv = 48;
    const Matrix<float> q = random_matrix<float>(n, d, 2.5, 41), k = random_matrix<float>(m, d, 1.0, 42),
                        v = random_matrix<float>(m, dv, 1.0, 43);
    std::vector<std::uint8_t> padding(m, 1);
    for (std::size_t j = 5; j < m; j += 9) padding[j] = 0;
    const Graph g = window_graph(n, m, 4);
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      AttentionOptions<float> o;
      o.transform = Transform::entmax15();
      o.causal = causal;
      o.key_padding = padding.data();
      GraphAttentionReport host_report, device_report;
      const Matrix<double> want = gpu_exact(q, k, v, g, o, &host_report);
      const DeviceArray<float> dq(q.data.data(), q.data.size()), dk(k.data.data(), k.data.size()),
          dv_(v.data.data(), v.data.size());
      DeviceArray<float> dout(n * dv);
      const DeviceArray<std::uint8_t> dpad(padding.data(), m);
      GraphAttentionOptions<float> go;
      go.attention = o;
      go.attention.key_padding = dpad.data();
      go.mode = GraphAttentionMode::exact;
      entgraph::graph_attention_forward(Device::cuda, Memory::device, {dq.data(), n, d}, {dk.data(), m, d},
                                        {dv_.data(), m, dv}, g, {dout.data(), n, dv}, go, &device_report);
      Matrix<float> got(n, dv);
      dout.download(got.data.data());
      CHECK(test::max_abs_diff(got.cast<double>(), want) == 0.0);
      CHECK(device_report.settled == host_report.settled);
      CHECK(device_report.repair_pairs == host_report.repair_pairs);
      CHECK(device_report.graph_pairs == host_report.graph_pairs);
      // A NaN in k: the CPU's message, out untouched.
      std::vector<float> bad = k.data;
      bad[7 * d + 3] = std::numeric_limits<float>::quiet_NaN();
      const DeviceArray<float> dbad(bad.data(), bad.size());
      DeviceArray<float> untouched(n * dv);
      const std::vector<float> sevens(n * dv, 7.0f);
      untouched = DeviceArray<float>(sevens.data(), sevens.size());
      std::string cpu_message;
      try {
        GraphAttentionOptions<float> host_go = go;
        host_go.attention.key_padding = padding.data();
        Matrix<float> scratch(n, dv);
        entgraph::graph_attention_forward(Device::cpu, q.view(), {bad.data(), m, d}, v.view(), g, scratch.view(),
                                          host_go);
      } catch (const Error& e) {
        cpu_message = e.what();
      }
      REQUIRE(!cpu_message.empty());
      CHECK_THROWS_WITH_AS(entgraph::graph_attention_forward(Device::cuda, Memory::device, {dq.data(), n, d},
                                                             {dbad.data(), m, d}, {dv_.data(), m, dv}, g,
                                                             {untouched.data(), n, dv}, go),
                           cpu_message.c_str(), Error);
      std::vector<float> after(n * dv);
      untouched.download(after.data());
      CHECK(after == sevens);
    }
  }


  TEST_CASE("graph attention: a window graph gives the CPU's graph attention") {
    struct Shape {
      std::size_t n, m, d, dv;
    };
    // d = 20 and dv = 24 take the scalar (non-float4) loads; dv = 200 takes two column passes.
    for (const Shape& s : {Shape{1, 1, 32, 32}, Shape{17, 17, 64, 64}, Shape{128, 200, 20, 24},
                           Shape{300, 120, 128, 200}, Shape{1000, 1000, 64, 32}})
      for (std::size_t w : {0, 3, 40})
        for (const Transform& t : graph_transforms())
          for (bool causal : {false, true}) {
            CAPTURE(s.n);
            CAPTURE(s.m);
            CAPTURE(s.d);
            CAPTURE(s.dv);
            CAPTURE(w);
            CAPTURE(test::describe(t));
            CAPTURE(causal);
            const Matrix<float> q = random_matrix<float>(s.n, s.d, 1.0, 3 + s.n);
            const Matrix<float> k = random_matrix<float>(s.m, s.d, 1.0, 4 + s.m);
            const Matrix<float> v = random_matrix<float>(s.m, s.dv, 1.0, 5 + s.m);
            const Graph g = window_graph(s.n, s.m, w);
            AttentionOptions<float> o;
            o.transform = t;
            o.causal = causal;
            CHECK(test::max_abs_diff(gpu_graph_attention(q, k, v, g, o), cpu_graph_attention(q, k, v, g, o)) <= kTol);
          }
  }

  TEST_CASE("graph attention: through the core's Device::cuda call on device memory") {
    const std::size_t n = 90, m = 120, d = 64, width = 48;
    const Matrix<float> q = random_matrix<float>(n, d, 1.0, 701), k = random_matrix<float>(m, d, 1.0, 702),
                        v = random_matrix<float>(m, width, 1.0, 703);
    const Graph g = window_graph(n, m, 9);
    DeviceArray<float> dq(q.data.data(), q.data.size()), dk(k.data.data(), k.data.size()),
        dv(v.data.data(), v.data.size());
    GraphAttentionOptions<float> go;
    go.attention.transform = Transform::entmax15();
    go.attention.causal = true;
    Matrix<float> out(n, width, -7.0f);
    DeviceArray<float> dout(out.data.data(), out.data.size());
    entgraph::graph_attention_forward(Device::cuda, Memory::device, ConstMatrix<float>(dq.data(), n, d),
                                      ConstMatrix<float>(dk.data(), m, d), ConstMatrix<float>(dv.data(), m, width), g,
                                      MatrixView<float>(dout.data(), n, width), go);
    dout.download(out.data.data());
    CHECK(test::max_abs_diff(out.cast<double>(), cpu_graph_attention(q, k, v, g, go.attention)) <= kTol);
    // An infinity in device memory: the CPU's message, out untouched.
    Matrix<float> bad = v;
    bad(33, 7) = std::numeric_limits<float>::infinity();
    std::string on_cpu;
    try {
      Matrix<float> host_out(n, width);
      entgraph::graph_attention_forward(Device::cpu, q.view(), k.view(), bad.view(), g, host_out.view(), go);
    } catch (const Error& e) {
      on_cpu = e.what();
    }
    REQUIRE(!on_cpu.empty());
    const std::vector<float> sentinel(n * width, -7.0f);
    DeviceArray<float> dbad(bad.data.data(), bad.data.size()), dsentinel(sentinel.data(), sentinel.size());
    CHECK_THROWS_WITH_AS(entgraph::graph_attention_forward(
                             Device::cuda, Memory::device, ConstMatrix<float>(dq.data(), n, d),
                             ConstMatrix<float>(dk.data(), m, d), ConstMatrix<float>(dbad.data(), m, width), g,
                             MatrixView<float>(dsentinel.data(), n, width), go),
                         on_cpu.c_str(), Error);
    std::vector<float> back(sentinel.size());
    dsentinel.download(back.data());
    CHECK(back == sentinel);
  }

  TEST_CASE("graph attention: the full graph gives dense attention (CPU and the fused GPU kernel)") {
    for (std::size_t n : {17, 128, 333})
      for (std::size_t m : {1, 64, 250})
        for (const Transform& t : graph_transforms())
          for (bool causal : {false, true}) {
            CAPTURE(n);
            CAPTURE(m);
            CAPTURE(test::describe(t));
            CAPTURE(causal);
            const Matrix<float> q = random_matrix<float>(n, 64, 1.0, 7 + n);
            const Matrix<float> k = random_matrix<float>(m, 64, 1.0, 8 + m);
            const Matrix<float> v = random_matrix<float>(m, 32, 1.0, 9 + m);
            AttentionOptions<float> o;
            o.transform = t;
            o.causal = causal;
            const Matrix<double> got = gpu_graph_attention(q, k, v, Graph::full(n, m, causal), o);
            CHECK(test::max_abs_diff(got, cpu_dense(q, k, v, o)) <= kTol);
            Matrix<float> fused(n, 32);
            entgraph::attention_forward(Device::cuda, q.view(), k.view(), v.view(), fused.view(), o);
            CHECK(test::max_abs_diff(got, fused.cast<double>()) <= kTol);
            // Edges the causal mask forbids are ignored: the full non-causal graph gives the same.
            if (causal)
              CHECK(test::max_abs_diff(gpu_graph_attention(q, k, v, Graph::full(n, m, false), o), got) <= 1e-5);
          }
  }

  TEST_CASE("graph attention: on the true entmax support it equals dense attention (sparse consistency)") {
    const std::size_t n = 200, m = 500, d = 64, dv = 64;
    const Matrix<float> q = random_matrix<float>(n, d, 2.5, 81);
    const Matrix<float> k = random_matrix<float>(m, d, 1.0, 82);
    const Matrix<float> v = random_matrix<float>(m, dv, 1.0, 83);
    for (const Transform& t : {Transform::entmax15(), Transform::sparsemax(), Transform::entmax(1.25)})
      for (bool causal : {false, true}) {
        CAPTURE(test::describe(t));
        CAPTURE(causal);
        AttentionOptions<float> o;
        o.transform = t;
        o.causal = causal;
        Matrix<double> probs(n, m);
        const Matrix<double> dense = cpu_dense(q, k, v, o, &probs);
        Matrix<std::uint8_t> support(n, m);
        for (std::size_t i = 0; i < probs.data.size(); ++i) support.data[i] = probs.data[i] > 0.0;
        const Graph g = Graph::from_mask(support.view());
        CHECK(g.edges() < n * m / 2);  // the test is about sparse rows
        CHECK(test::max_abs_diff(gpu_graph_attention(q, k, v, g, o), dense) <= kTol);
      }
  }

  TEST_CASE("graph attention: empty rows and key padding give zero rows where nothing is visible") {
    const std::size_t n = 50, m = 40;
    const Matrix<float> q = random_matrix<float>(n, 32, 1.0, 91);
    const Matrix<float> k = random_matrix<float>(m, 32, 1.0, 92);
    const Matrix<float> v = random_matrix<float>(m, 32, 1.0, 93);
    std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;
    for (std::uint32_t i = 0; i < n; ++i)
      if (i % 4 != 0)
        for (std::uint32_t j = i % 7; j < m; j += 5) pairs.emplace_back(i, j);
    const Graph g = Graph::from_pairs(n, m, pairs);
    std::vector<std::uint8_t> padding(m, 1);
    for (std::size_t j = 0; j < m; j += 10) padding[j] = 0;  // rows with i % 7 == 0 lose key 0, 10, ...
    for (const Transform& t : graph_transforms())
      for (bool causal : {false, true}) {
        CAPTURE(test::describe(t));
        CAPTURE(causal);
        AttentionOptions<float> o;
        o.transform = t;
        o.causal = causal;
        o.key_padding = padding.data();
        const Matrix<double> got = gpu_graph_attention(q, k, v, g, o);
        CHECK(test::max_abs_diff(got, cpu_graph_attention(q, k, v, g, o)) <= kTol);
        for (std::size_t i = 0; i < n; i += 4)
          for (std::size_t c = 0; c < 32; ++c) CHECK(got(i, c) == 0.0);
      }
  }

  TEST_CASE("graph attention: the device API on an uploaded graph, with a caller's workspace") {
    const std::size_t n = 256, m = 256, d = 128, dv = 64;
    const Matrix<float> q = random_matrix<float>(n, d, 1.0, 101);
    const Matrix<float> k = random_matrix<float>(m, d, 1.0, 102);
    const Matrix<float> v = random_matrix<float>(m, dv, 1.0, 103);
    const Graph g = window_graph(n, m, 16);
    const DeviceGraph dg = DeviceGraph::upload(g);
    DeviceArray<float> dq(q.data.data(), q.data.size()), dk(k.data.data(), k.data.size()),
        dv_(v.data.data(), v.data.size());
    DeviceArray<float> dout(n * dv);
    FusedAttentionOptions fo;
    fo.transform = Transform::entmax15();
    fo.causal = true;
    DeviceArray<float> workspace(g.edges());
    fo.workspace = workspace.data();
    fo.workspace_bytes = graph_attention_workspace_bytes(g.edges());
    graph_attention_forward(dq.data(), dk.data(), dv_.data(), dg, dout.data(), d, dv, fo);
    synchronize();
    Matrix<float> out(n, dv);
    dout.download(out.data.data());
    AttentionOptions<float> o;
    o.transform = fo.transform;
    o.causal = true;
    CHECK(test::max_abs_diff(out.cast<double>(), cpu_graph_attention(q, k, v, g, o)) <= kTol);
  }

  TEST_CASE("graph attention: misuse throws entgraph::Error naming the argument") {
    const Matrix<float> q = random_matrix<float>(6, 8, 1.0, 111);
    const Matrix<float> k = random_matrix<float>(5, 8, 1.0, 112);
    const Matrix<float> v = random_matrix<float>(5, 4, 1.0, 113);
    Matrix<float> out(6, 4, 3.0f);
    AttentionOptions<float> o;
    CHECK_THROWS_WITH_AS(entgraph::graph_attention_forward(Device::cuda, q.view(), k.view(), v.view(), Graph::full(6, 4, false), out.view(), fast(o)),
                         doctest::Contains("graph.keys"), Error);
    CHECK_THROWS_WITH_AS(entgraph::graph_attention_forward(Device::cuda, q.view(), k.view(), v.view(), Graph::full(7, 5, false), out.view(), fast(o)),
                         doctest::Contains("graph.queries"), Error);
    Graph unsorted = Graph::full(6, 5, false);
    std::swap(unsorted.indices[0], unsorted.indices[1]);
    CHECK_THROWS_AS(entgraph::graph_attention_forward(Device::cuda, q.view(), k.view(), v.view(), unsorted, out.view(), fast(o)), Error);
    for (float x : out.data) CHECK(x == 3.0f);
  }
}

}  // namespace entgraph::cuda
