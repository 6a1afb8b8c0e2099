// Attention on a device's own memory (Memory::device): the core checks
// shapes, strides and parameters and never reads the data; the backend's
// kernel reads the lengths and scans the heads (HeadScan), and the core's
// check_attention_values / check_batched_attention_values decide on the
// scans with the CPU's messages. A recording backend stands in for the GPU:
// its "device memory" is host memory, and it scans with a plain reference
// written here from HeadScan's definition, so the tests prove that a
// backend scanning by the documented rules gets exactly the CPU's errors
// and results.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/backend.hpp"
#include "entgraph/batched_attention.hpp"
#include "entgraph/device.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/graph_attention.hpp"
#include "io/io_test_support.hpp"
#include "support.hpp"

using namespace entgraph;

namespace {

int kernel_calls = 0, host_calls = 0, dense_calls = 0, graph_calls = 0, backward_calls = 0;
void* stream_seen = nullptr;  // the calling thread's stream when the last batched kernel ran
bool switched_on = false;

// Entry (b, h, i, c) widened to float, as attention reads it.
float element(const ConstBatchedTensor& t, std::size_t b, std::size_t h, std::size_t i, std::size_t c) {
  const std::size_t o = b * t.batch_stride + h * t.head_stride + i * t.row_stride + c;
  switch (t.dtype) {
    case DType::bfloat16:
      return bfloat16_to_float(static_cast<const std::uint16_t*>(t.data)[o]);
    case DType::float16:
      return float16_to_float(static_cast<const std::uint16_t*>(t.data)[o]);
    default:
      return static_cast<const float*>(t.data)[o];
  }
}

// HeadScan of head (b, h) over its first `rows` rows, from the
// definition in entgraph/backend.hpp, in plain scalar code.
HeadScan reference_scan(const ConstBatchedTensor& t, std::size_t b, std::size_t h, std::size_t rows) {
  HeadScan s;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t c = 0; c < t.cols; ++c) {
      const float x = element(t, b, h, i, c);
      if (!std::isfinite(x)) {
        s.bad = true, s.bad_row = i, s.bad_col = c, s.bad_value = x;
        return s;
      }
      if (std::fabs(x) > s.largest) s.largest = std::fabs(x), s.largest_row = i, s.largest_col = c;
    }
  for (std::size_t i = 0; i < rows; ++i) {
    double big = 0.0, ss = 0.0;
    for (std::size_t c = 0; c < t.cols; ++c)
      big = std::max(big, std::fabs(static_cast<double>(element(t, b, h, i, c))));
    if (big == 0.0) continue;
    for (std::size_t c = 0; c < t.cols; ++c) {
      const double y = static_cast<double>(element(t, b, h, i, c)) / big;
      ss += y * y;
    }
    if (big * std::sqrt(ss) > s.norm) s.norm = big * std::sqrt(ss), s.norm_row = i;
  }
  return s;
}

std::size_t clamp_length(const std::int32_t* lengths, std::size_t b, std::size_t full) {
  if (lengths == nullptr) return full;
  return lengths[b] < 0 ? 0 : std::min(static_cast<std::size_t>(lengths[b]), full);
}

ConstBatchedTensor one_head(ConstMatrix<float> x) {
  return {x.data, DType::float32, 1, 1, x.rows, x.cols, x.rows * x.stride, x.rows * x.stride, x.stride};
}

BackendKernels recording_table() {
  BackendKernels k;
  k.available = [](std::string* why) {
    if (!switched_on && why) *why = "the recording backend is switched off";
    return switched_on;
  };
  k.batched_attention_forward = [](ConstBatchedTensor q, ConstBatchedTensor kk, ConstBatchedTensor v, BatchedTensor out,
                                   const BatchedAttentionOptions& o) {
    ++host_calls;
    batched_attention_forward(q, kk, v, out, o);
  };
  k.batched_attention_forward_on_device = [](ConstBatchedTensor q, ConstBatchedTensor kk, ConstBatchedTensor v,
                                             BatchedTensor out, const BatchedAttentionOptions& o) {
    ++kernel_calls;
    stream_seen = device_stream(Device::cuda);
    std::vector<HeadScan> scans;
    for (std::size_t b = 0; b < q.batch; ++b)
      for (std::size_t h = 0; h < q.heads; ++h)
        scans.push_back(reference_scan(q, b, h, clamp_length(o.query_lengths, b, q.rows)));
    for (const ConstBatchedTensor* t : {&kk, &v})
      for (std::size_t b = 0; b < q.batch; ++b)
        for (std::size_t h = 0; h < kk.heads; ++h)
          scans.push_back(reference_scan(*t, b, h, clamp_length(o.key_lengths, b, kk.rows)));
    check_batched_attention_values("batched_attention_forward", q, kk, v, o, scans);
    batched_attention_forward(q, kk, v, out, o);  // the "device" runs the CPU's attention
  };
  k.attention_forward_on_device = [](ConstMatrix<float> q, ConstMatrix<float> kk, ConstMatrix<float> v,
                                     MatrixView<float> out, const AttentionOptions<float>& o) {
    ++dense_calls;
    check_attention_values("attention_forward", q, kk, v, o, reference_scan(one_head(q), 0, 0, q.rows),
                           reference_scan(one_head(kk), 0, 0, kk.rows), reference_scan(one_head(v), 0, 0, v.rows));
    attention_forward<float>(q, kk, v, out, o);
  };
  k.attention_backward_on_device = [](ConstMatrix<float> q, ConstMatrix<float> kk, ConstMatrix<float> v,
                                      ConstMatrix<float> g, MatrixView<float> gq, MatrixView<float> gk,
                                      MatrixView<float> gv, const AttentionOptions<float>& o) {
    ++backward_calls;
    check_attention_backward_values("attention_backward", q, kk, v, o, reference_scan(one_head(q), 0, 0, q.rows),
                                    reference_scan(one_head(kk), 0, 0, kk.rows),
                                    reference_scan(one_head(v), 0, 0, v.rows),
                                    reference_scan(one_head(g), 0, 0, g.rows));
    attention_backward<float>(q, kk, v, g, gq, gk, gv, o);
  };
  k.graph_attention_forward_on_device = [](ConstMatrix<float> q, ConstMatrix<float> kk, ConstMatrix<float> v,
                                           const Graph& g, MatrixView<float> out, const AttentionOptions<float>& o) {
    ++graph_calls;
    check_graph_attention_values("graph_attention_forward", q, kk, v, o, reference_scan(one_head(q), 0, 0, q.rows),
                                 reference_scan(one_head(kk), 0, 0, kk.rows),
                                 reference_scan(one_head(v), 0, 0, v.rows));
    GraphAttentionOptions<float> go;
    go.attention = o;
    graph_attention_forward<float>(q, kk, v, g, out, go);
  };
  return k;
}

struct RecordingBackend {
  RecordingBackend() {
    kernel_calls = host_calls = dense_calls = graph_calls = backward_calls = 0;
    switched_on = true;
    register_backend(Device::cuda, recording_table());
  }
  ~RecordingBackend() { switched_on = false; }
};

constexpr std::uint16_t kSentinel = 0x1234;

// A bhnd tensor of bfloat16 bit patterns.
struct Tensor16 {
  std::vector<std::uint16_t> bits;
  std::size_t batch, heads, rows, cols;
  Tensor16(std::size_t b, std::size_t h, std::size_t n, std::size_t d, std::uint64_t seed)
      : bits(b * h * n * d), batch(b), heads(h), rows(n), cols(d) {
    const auto values = test::random_matrix<float>(1, bits.size(), 1.0, seed);
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = float_to_bfloat16(values.data[i]);
  }
  std::uint16_t& at(std::size_t b, std::size_t h, std::size_t i, std::size_t c) {
    return bits[((b * heads + h) * rows + i) * cols + c];
  }
  ConstBatchedTensor view() const {
    return ConstBatchedTensor::bhnd(bits.data(), DType::bfloat16, batch, heads, rows, cols);
  }
  BatchedTensor out() { return BatchedTensor::bhnd(bits.data(), DType::bfloat16, batch, heads, rows, cols); }
};

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("devices: batched attention on the device's own memory gets the CPU's results and the CPU's errors") {
    RecordingBackend backend;
    const std::size_t B = 2, Hq = 4, Hkv = 2, n = 5, m = 7, d = 8;
    Tensor16 q(B, Hq, n, d, 11), k(B, Hkv, m, d, 12), v(B, Hkv, m, d, 13);
    const std::int32_t query_lengths[] = {5, 3}, key_lengths[] = {6, 7};
    BatchedAttentionOptions o;
    o.transform = Transform::entmax15();
    o.causal = true;
    o.query_lengths = query_lengths;
    o.key_lengths = key_lengths;

    Tensor16 cpu(B, Hq, n, d, 1), dev(B, Hq, n, d, 2);
    batched_attention_forward(Device::cpu, q.view(), k.view(), v.view(), cpu.out(), o);
    batched_attention_forward(Device::cuda, Memory::device, q.view(), k.view(), v.view(), dev.out(), o);
    CHECK(dev.bits == cpu.bits);
    CHECK(kernel_calls == 1);
    CHECK(host_calls == 0);  // nothing went through host memory

    // Each bad call: the CPU's message and code on the device's memory, out untouched.
    Tensor16 out(B, Hq, n, d, 3);
    std::fill(out.bits.begin(), out.bits.end(), kSentinel);
    const auto expect_cpu_error = [&](const char* what, const ConstBatchedTensor& qq, const ConstBatchedTensor& kk,
                                      const ConstBatchedTensor& vv, const BatchedTensor& oo,
                                      const BatchedAttentionOptions& opts, bool reaches_kernel) {
      const std::string call = what;
      CAPTURE(call);
      const std::string on_cpu = test::thrown([&] { batched_attention_forward(Device::cpu, qq, kk, vv, oo, opts); });
      CAPTURE(on_cpu);
      CHECK(on_cpu != "(no error)");
      const int before = kernel_calls;
      CHECK(test::thrown([&] { batched_attention_forward(Device::cuda, Memory::device, qq, kk, vv, oo, opts); }) ==
            on_cpu);
      CHECK(test::error_code_of([&] {
              batched_attention_forward(Device::cuda, Memory::device, qq, kk, vv, oo, opts);
            }) == test::error_code_of([&] { batched_attention_forward(Device::cpu, qq, kk, vv, oo, opts); }));
      CHECK(kernel_calls - before == (reaches_kernel ? 2 : 0));
      for (std::uint16_t x : out.bits) CHECK(x == kSentinel);
    };

    // Shapes and parameters: the core's own checks, before the kernel.
    Tensor16 short_out(B, Hq, n - 1, d, 4);
    expect_cpu_error("out.rows", q.view(), k.view(), v.view(), short_out.out(), o, false);
    BatchedAttentionOptions bad_alpha = o;
    bad_alpha.transform = Transform::entmax(0.5);
    expect_cpu_error("alpha", q.view(), k.view(), v.view(), out.out(), bad_alpha, false);

    // Values and lengths: the kernel's scan, the core's decision.
    const std::int32_t too_long[] = {5, 8};
    BatchedAttentionOptions bad_length = o;
    bad_length.key_lengths = too_long;
    expect_cpu_error("key_lengths", q.view(), k.view(), v.view(), out.out(), bad_length, true);
    Tensor16 q_nan = q;
    q_nan.at(1, 2, 1, 5) = 0x7fc0;  // NaN inside sequence 1's 3 queries
    expect_cpu_error("NaN", q_nan.view(), k.view(), v.view(), out.out(), o, true);
    Tensor16 k_inf = k;
    k_inf.at(0, 1, 2, 0) = 0xff80;  // -inf
    expect_cpu_error("-inf", q.view(), k_inf.view(), v.view(), out.out(), o, true);
    Tensor16 q_big = q, k_big = k;  // scores past float's range
    q_big.at(1, 3, 2, 1) = float_to_bfloat16(3e19f);
    k_big.at(1, 1, 4, 1) = float_to_bfloat16(3e19f);
    expect_cpu_error("scores", q_big.view(), k_big.view(), v.view(), out.out(), o, true);
    // Values that may overflow the output (float32 only: bfloat16's largest
    // is below float's limit), at the first of two equal largest entries.
    std::vector<float> q32(2 * 4, 0.5f), k32(3 * 4, 0.25f), v32(3 * 4, 1.0f), out32(2 * 4, 7.0f);
    v32[1 * 4 + 2] = std::numeric_limits<float>::max();
    v32[2 * 4 + 0] = -std::numeric_limits<float>::max();
    const auto t32 = [](const std::vector<float>& x, std::size_t rows) {
      return ConstBatchedTensor::bhnd(x.data(), DType::float32, 1, 1, rows, 4);
    };
    BatchedAttentionOptions plain;
    const std::string v_on_cpu = test::thrown([&] {
      batched_attention_forward(Device::cpu, t32(q32, 2), t32(k32, 3), t32(v32, 3),
                                BatchedTensor::bhnd(out32.data(), DType::float32, 1, 1, 2, 4), plain);
    });
    CHECK(v_on_cpu.find("|v[0, 0, 1, 2]| = ") != std::string::npos);
    CHECK(test::thrown([&] {
            batched_attention_forward(Device::cuda, Memory::device, t32(q32, 2), t32(k32, 3), t32(v32, 3),
                                      BatchedTensor::bhnd(out32.data(), DType::float32, 1, 1, 2, 4), plain);
          }) == v_on_cpu);
    for (float x : out32) CHECK(x == 7.0f);

    // A NaN past a sequence's length is never read, on either path.
    Tensor16 q_padded = q;
    q_padded.at(1, 0, 4, 0) = 0x7fc0;  // sequence 1 has 3 queries
    Tensor16 again(B, Hq, n, d, 5);
    batched_attention_forward(Device::cuda, Memory::device, q_padded.view(), k.view(), v.view(), again.out(), o);
    CHECK(again.bits == cpu.bits);

    // A scan of the wrong size is refused, naming it.
    CHECK_THROWS_WITH_AS(
        check_batched_attention_values("batched_attention_forward", q.view(), k.view(), v.view(), o, {}),
        doctest::Contains("scans has the wrong size (got 0, expected 16"), Error);

    // A backend without the entry says so, as unsupported.
    BackendKernels host_only = recording_table();
    host_only.batched_attention_forward_on_device = nullptr;
    register_backend(Device::cuda, host_only);
    CHECK(test::error_code_of([&] {
            batched_attention_forward(Device::cuda, Memory::device, q.view(), k.view(), v.view(), out.out(), o);
          }) == ErrorCode::unsupported);
  }

  TEST_CASE("devices: dense attention on the device's own memory gets the CPU's results and the CPU's errors") {
    RecordingBackend backend;
    const std::size_t n = 6, m = 9, d = 5, dv = 3;
    const auto q = test::random_matrix<float>(n, d, 1.0, 21), k = test::random_matrix<float>(m, d, 1.0, 22),
               v = test::random_matrix<float>(m, dv, 1.0, 23);
    const std::vector<std::uint8_t> padding = {1, 1, 0, 1, 1, 1, 0, 1, 1};
    AttentionOptions<float> o;
    o.transform = Transform::entmax(1.25);
    o.causal = true;
    o.key_padding = padding.data();
    test::Matrix<float> cpu(n, dv), dev(n, dv, 7.0f);
    attention_forward(Device::cpu, q.view(), k.view(), v.view(), cpu.view(), o);
    attention_forward(Device::cuda, Memory::device, q.view(), k.view(), v.view(), dev.view(), o);
    CHECK(dev.data == cpu.data);
    CHECK(dense_calls == 1);

    test::Matrix<float> out(n, dv, 7.0f), narrow(n, dv - 1, 7.0f);
    const auto expect_cpu_error = [&](const char* what, const test::Matrix<float>& qq, const test::Matrix<float>& kk,
                                      const test::Matrix<float>& vv, MatrixView<float> oo,
                                      const AttentionOptions<float>& opts, int kernel_calls_expected) {
      const std::string call = what;
      CAPTURE(call);
      const std::string on_cpu =
          test::thrown([&] { attention_forward(Device::cpu, qq.view(), kk.view(), vv.view(), oo, opts); });
      CAPTURE(on_cpu);
      CHECK(on_cpu != "(no error)");
      const int before = dense_calls;
      CHECK(test::thrown([&] {
              attention_forward(Device::cuda, Memory::device, qq.view(), kk.view(), vv.view(), oo, opts);
            }) == on_cpu);
      CHECK(dense_calls - before == kernel_calls_expected);
      for (float x : out.data) CHECK(x == 7.0f);
    };
    expect_cpu_error("out.cols", q, k, v, narrow.view(), o, 0);
    AttentionOptions<float> bad_scale = o;
    bad_scale.scale = std::numeric_limits<double>::infinity();
    expect_cpu_error("scale", q, k, v, out.view(), bad_scale, 0);
    test::Matrix<float> k_nan = k, q_big = q, k_big = k, v_big = v;
    k_nan(4, 2) = std::numeric_limits<float>::quiet_NaN();
    expect_cpu_error("NaN", q, k_nan, v, out.view(), o, 1);
    q_big(3, 1) = 3e19f;
    k_big(7, 4) = -3e19f;
    expect_cpu_error("scores", q_big, k_big, v, out.view(), o, 1);
    v_big(5, 2) = std::numeric_limits<float>::max();
    v_big(8, 0) = -std::numeric_limits<float>::max();
    expect_cpu_error("v", q, k, v_big, out.view(), o, 1);

    // The options' arrays lie in device memory too: the core checks that
    // they are there, not what they hold.
    AttentionOptions<float> constrained = o;
    constrained.transform = Transform::of(TransformKind::constrained_softmax, 1.0, 0);
    expect_cpu_error("upper missing", q, k, v, out.view(), constrained, 0);
  }

  TEST_CASE("devices: graph attention on the device's own memory gets the CPU's results and the CPU's errors") {
    RecordingBackend backend;
    const std::size_t n = 7, m = 7, d = 4;
    const auto q = test::random_matrix<float>(n, d, 1.0, 31), k = test::random_matrix<float>(m, d, 1.0, 32),
               v = test::random_matrix<float>(m, d, 1.0, 33);
    const Graph window = Graph::full(n, m, true);
    GraphAttentionOptions<float> o;
    o.attention.transform = Transform::entmax15();
    test::Matrix<float> cpu(n, d), dev(n, d, 7.0f);
    graph_attention_forward(Device::cpu, q.view(), k.view(), v.view(), window, cpu.view(), o);
    graph_attention_forward(Device::cuda, Memory::device, q.view(), k.view(), v.view(), window, dev.view(), o);
    CHECK(dev.data == cpu.data);
    CHECK(graph_calls == 1);

    test::Matrix<float> out(n, d, 7.0f);
    const auto expect_cpu_error = [&](const char* what, const test::Matrix<float>& qq, const test::Matrix<float>& kk,
                                      const test::Matrix<float>& vv, const Graph& g, int calls) {
      const std::string call = what;
      CAPTURE(call);
      const std::string on_cpu = test::thrown(
          [&] { graph_attention_forward(Device::cpu, qq.view(), kk.view(), vv.view(), g, out.view(), o); });
      CAPTURE(on_cpu);
      CHECK(on_cpu != "(no error)");
      const int before = graph_calls;
      CHECK(test::thrown([&] {
              graph_attention_forward(Device::cuda, Memory::device, qq.view(), kk.view(), vv.view(), g, out.view(), o);
            }) == on_cpu);
      CHECK(graph_calls - before == calls);
      for (float x : out.data) CHECK(x == 7.0f);
    };
    Graph broken = window;
    broken.indices[2] = 99;  // a key out of range: the core's own check
    expect_cpu_error("graph", q, k, v, broken, 0);
    test::Matrix<float> v_inf = v, q_big = q, k_big = k;
    v_inf(6, 3) = -std::numeric_limits<float>::infinity();
    expect_cpu_error("-inf", q, k, v_inf, window, 1);
    q_big(2, 0) = 1e19f;  // past graph attention's headroom of 16, within dense attention's 2
    k_big(5, 0) = 5e18f;
    expect_cpu_error("scores", q_big, k_big, v, window, 1);
  }

  TEST_CASE("devices: attention backward on the device's own memory gets the CPU's results and the CPU's errors") {
    RecordingBackend backend;
    const std::size_t n = 5, m = 6, d = 4;
    const auto q = test::random_matrix<float>(n, d, 1.0, 41), k = test::random_matrix<float>(m, d, 1.0, 42),
               v = test::random_matrix<float>(m, d, 1.0, 43), g = test::random_matrix<float>(n, d, 1.0, 44);
    AttentionOptions<float> o;
    o.transform = Transform::sparsemax();
    test::Matrix<float> cq(n, d), ck(m, d), cv(m, d), dq(n, d), dk(m, d), dv(m, d);
    attention_backward(Device::cpu, q.view(), k.view(), v.view(), g.view(), cq.view(), ck.view(), cv.view(), o);
    attention_backward(Device::cuda, Memory::device, q.view(), k.view(), v.view(), g.view(), dq.view(), dk.view(),
                       dv.view(), o);
    CHECK(dq.data == cq.data);
    CHECK(dk.data == ck.data);
    CHECK(dv.data == cv.data);
    CHECK(backward_calls == 1);

    test::Matrix<float> out(n, d, 7.0f), narrow(m, d - 1);
    const auto expect_cpu_error = [&](const char* what, const test::Matrix<float>& qq, const test::Matrix<float>& gg,
                                      MatrixView<float> grad_k, int calls) {
      const std::string call = what;
      CAPTURE(call);
      const std::string on_cpu = test::thrown([&] {
        attention_backward(Device::cpu, qq.view(), k.view(), v.view(), gg.view(), out.view(), grad_k, dv.view(), o);
      });
      CAPTURE(on_cpu);
      CHECK(on_cpu != "(no error)");
      const int before = backward_calls;
      CHECK(test::thrown([&] {
              attention_backward(Device::cuda, Memory::device, qq.view(), k.view(), v.view(), gg.view(), out.view(),
                                 grad_k, dv.view(), o);
            }) == on_cpu);
      CHECK(backward_calls - before == calls);
      for (float x : out.data) CHECK(x == 7.0f);
    };
    expect_cpu_error("grad_k.cols", q, g, narrow.view(), 0);
    test::Matrix<float> q_nan = q, g_nan = g;
    q_nan(1, 1) = std::numeric_limits<float>::quiet_NaN();
    g_nan(4, 3) = std::numeric_limits<float>::infinity();
    expect_cpu_error("q NaN", q_nan, g, dk.view(), 1);
    expect_cpu_error("grad_out inf", q, g_nan, dk.view(), 1);
  }

  TEST_CASE("devices: a thread's stream per device reaches the kernels on device memory") {
    RecordingBackend backend;
    CHECK(device_stream(Device::cuda) == nullptr);
    int queue_a = 0, queue_b = 0;  // any address stands for a stream here
    const std::size_t B = 1, H = 1, n = 3, m = 4, d = 8;
    Tensor16 q(B, H, n, d, 51), k(B, H, m, d, 52), v(B, H, m, d, 53), out(B, H, n, d, 54);
    {
      const DeviceStreamScope scope(Device::cuda, &queue_a);
      CHECK(device_stream(Device::cuda) == &queue_a);
      {
        const DeviceStreamScope inner(Device::cuda, &queue_b);
        batched_attention_forward(Device::cuda, Memory::device, q.view(), k.view(), v.view(), out.out(), {});
        CHECK(stream_seen == &queue_b);
      }
      CHECK(device_stream(Device::cuda) == &queue_a);  // restored
      // Streams are per thread: another thread starts with none.
      void* elsewhere = &queue_b;
      std::thread([&] { elsewhere = device_stream(Device::cuda); }).join();
      CHECK(elsewhere == nullptr);
    }
    CHECK(device_stream(Device::cuda) == nullptr);
    batched_attention_forward(Device::cuda, Memory::device, q.view(), k.view(), v.view(), out.out(), {});
    CHECK(stream_seen == nullptr);
    // The CPU has no stream.
    CHECK(device_stream(Device::cpu) == nullptr);
    CHECK_THROWS_WITH_AS(set_device_stream(Device::cpu, &queue_a),
                         "set_device_stream: device is cpu, which has no stream (got a stream for it)", Error);
    set_device_stream(Device::cpu, nullptr);
  }
}
