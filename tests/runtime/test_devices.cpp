// The op layer: Device-taking calls validate in the core, once, for every
// device, then run the registered backend's kernel. A recording backend
// stands in for a GPU here (it runs the CPU kernels and counts its calls), so
// this runs on every machine: a bad argument gives the CPU's own message and
// never reaches the kernel; a good one reaches it unchanged.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "clustered_capture.hpp"
#include "io/io_test_support.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/backend.hpp"
#include "entgraph/device.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/predictors/predictor.hpp"
#include "support.hpp"

using namespace entgraph;
using entgraph::test::error_code_of;
using entgraph::test::Matrix;

namespace {

struct Calls {
  int transform_forward = 0, transform_backward = 0, attention_forward = 0, graph_attention = 0, compare = 0,
      pattern = 0, forward_on_device = 0, backward_on_device = 0, attention_backward = 0, pattern_on_device = 0;
  SparsefinderHead last_head;
  LowRankThresholdHead last_lowrank;
  int lowrank = 0;
};
Calls calls;
bool fake_available = true;

BackendKernels recording_backend() {
  BackendKernels k;
  k.available = [](std::string* why) {
    if (!fake_available && why) *why = "the recording backend is switched off";
    return fake_available;
  };
  k.transform_forward = [](const Transform& t, ConstMatrix<float> s, MatrixView<float> p, MaskView m) {
    ++calls.transform_forward;
    transform_forward<float>(t, s, p, m);
  };
  k.transform_backward = [](const Transform& t, ConstMatrix<float> p, ConstMatrix<float> g, MatrixView<float> d) {
    ++calls.transform_backward;
    transform_backward<float>(t, p, g, d);
  };
  // Its "device memory" is host memory; like a GPU's kernel, it scans the
  // values itself (here with the CPU kernel's own scan) before writing.
  k.transform_forward_on_device = [](const Transform& t, ConstMatrix<float> s, MatrixView<float> p, MaskView m) {
    ++calls.forward_on_device;
    transform_forward<float>(t, s, p, m);
  };
  k.transform_backward_on_device = [](const Transform& t, ConstMatrix<float> p, ConstMatrix<float> g,
                                      MatrixView<float> d) {
    ++calls.backward_on_device;
    transform_backward<float>(t, p, g, d);
  };
  k.attention_forward = [](ConstMatrix<float> q, ConstMatrix<float> kk, ConstMatrix<float> v, MatrixView<float> out,
                           const AttentionOptions<float>& o) {
    ++calls.attention_forward;
    attention_forward<float>(q, kk, v, out, o);
  };
  k.graph_attention_forward = [](ConstMatrix<float> q, ConstMatrix<float> kk, ConstMatrix<float> v, const Graph& g,
                                 MatrixView<float> out, const AttentionOptions<float>& o) {
    ++calls.graph_attention;
    GraphAttentionOptions<float> go;
    go.attention = o;
    graph_attention_forward<float>(q, kk, v, g, out, go);
  };
  k.compare_graphs = [](const Graph& a, const Graph& b, bool causal) {
    ++calls.compare;
    return compare_graphs(a, b, causal);
  };
  k.sparsefinder_pattern = [](const SparsefinderHead& h, ConstMatrix<float> q, ConstMatrix<float> kk, bool) {
    ++calls.pattern;
    calls.last_head = h;
    return Graph::empty(q.rows, kk.rows);
  };
  k.sparsefinder_pattern_on_device = [](const SparsefinderHead& h, ConstMatrix<float> q, ConstMatrix<float> kk,
                                        bool) {
    ++calls.pattern_on_device;
    calls.last_head = h;
    return Graph::empty(q.rows, kk.rows);
  };
  k.lowrank_threshold_pattern = [](const LowRankThresholdHead& h, ConstMatrix<float> q, ConstMatrix<float> kk,
                                   bool) {
    ++calls.lowrank;
    calls.last_lowrank = h;
    return Graph::empty(q.rows, kk.rows);
  };
  return k;
}

// Registers the recording backend as Device::cuda for one test; afterwards
// Device::cuda is unavailable again, so no other test meets it.
struct RecordingBackend {
  RecordingBackend() {
    calls = {};
    fake_available = true;
    register_backend(Device::cuda, recording_backend());
  }
  ~RecordingBackend() { fake_available = false; }
};

// The message `fn` throws, or "" when it does not throw.
template <class Fn>
std::string message_of(Fn fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}


constexpr float kSentinel = 42.0f;

}  // namespace

TEST_SUITE("runtime") {
  TEST_CASE("devices: names parse both ways; an unknown name is refused naming it") {
    CHECK(parse_device("cpu") == Device::cpu);
    CHECK(parse_device("cuda") == Device::cuda);
    CHECK(std::string(device_name(Device::cuda)) == "cuda");
    CHECK(std::string(device_name(Device::cpu)) == "cpu");
    CHECK_THROWS_WITH_AS(parse_device("tpu"), doctest::Contains("'tpu'"), Error);
    CHECK(device_available(Device::cpu));
    CHECK_THROWS_WITH_AS(register_backend(Device::cpu, recording_backend()), doctest::Contains("cpu"), Error);
    CHECK_THROWS_WITH_AS(register_backend(Device::cuda, BackendKernels{}), doctest::Contains("available"), Error);
  }

  TEST_CASE("devices: device_supports asks for a kernel, then the backend's supports()") {
    RecordingBackend backend;
    OpArguments args;
    args.transform = Transform::topk_softmax(3);
    args.d = args.dv = 48;
    std::string why;
    CHECK(device_supports(Device::cpu, BackendOp::attention_backward, args));
    // No supports(): every op with a kernel.
    CHECK(device_supports(Device::cuda, BackendOp::transform_forward, args));
    CHECK_FALSE(device_supports(Device::cuda, BackendOp::attention_backward, args, &why));
    CHECK(why == "device cuda has no kernel for this op");
    // On the device's own memory: the _on_device entries (the recording
    // backend has them for the transforms, not for attention).
    OpArguments on_device = args;
    on_device.memory = Memory::device;
    CHECK(device_supports(Device::cuda, BackendOp::transform_forward, on_device));
    CHECK_FALSE(device_supports(Device::cuda, BackendOp::attention_forward, on_device, &why));
    CHECK(why == "device cuda has no kernel for this op on its own memory");
    CHECK_FALSE(device_supports(Device::cuda, BackendOp::compare_graphs, on_device));
    // A backend that takes head dimension 64 only, and no top-k.
    BackendKernels table = recording_backend();
    table.supports = [](BackendOp op, const OpArguments& a, std::string* reason) {
      if (a.transform.info().family == TransformFamily::top_k) return (*reason = "no top-k here", false);
      if (op == BackendOp::attention_forward && a.d != 64) return (*reason = "d must be 64", false);
      return true;
    };
    register_backend(Device::cuda, table);
    CHECK_FALSE(device_supports(Device::cuda, BackendOp::transform_forward, args, &why));
    CHECK(why == "no top-k here");
    args.transform = Transform::entmax15();
    CHECK(device_supports(Device::cuda, BackendOp::transform_forward, args));
    CHECK_FALSE(device_supports(Device::cuda, BackendOp::attention_forward, args, &why));
    CHECK(why == "d must be 64");
    args.d = 64;
    CHECK(device_supports(Device::cuda, BackendOp::attention_forward, args));
    fake_available = false;
    CHECK_FALSE(device_supports(Device::cuda, BackendOp::attention_forward, args, &why));
    CHECK(why == "the recording backend is switched off");
  }

  TEST_CASE("devices: a device that cannot run says why and writes nothing") {
    RecordingBackend backend;
    fake_available = false;
    std::string why;
    CHECK_FALSE(device_available(Device::cuda, &why));
    CHECK(why == "the recording backend is switched off");
    const Matrix<float> z = test::random_matrix<float>(3, 5, 1.0, 1);
    Matrix<float> p(3, 5, kSentinel);
    CHECK_THROWS_WITH_AS(transform_forward(Device::cuda, Transform::softmax(), z.view(), p.view()),
                         doctest::Contains("transform_forward: device cuda is not available (the recording backend"),
                         Error);
    // The code says so too (the C API's EG_ERROR_DEVICE comes from it, not from the words).
    CHECK(error_code_of([&] { transform_forward(Device::cuda, Transform::softmax(), z.view(), p.view()); }) ==
          ErrorCode::device_unavailable);
    CHECK(calls.transform_forward == 0);
    for (float x : p.data) CHECK(x == kSentinel);
  }

  TEST_CASE("devices: transforms reach the kernel unchanged, bad arguments never do, with the CPU's messages") {
    RecordingBackend backend;
    const Matrix<float> z = test::random_matrix<float>(4, 9, 2.0, 2);
    for (const Transform& t : {Transform::softmax(), Transform::entmax15(), Transform::entmax(1.7),
                               Transform::topk_softmax(3), Transform::sparsemax()}) {
      CAPTURE(t.name());
      Matrix<float> cpu(4, 9), dev(4, 9), gcpu(4, 9), gdev(4, 9);
      transform_forward(Device::cpu, t, z.view(), cpu.view());
      transform_forward(Device::cuda, t, z.view(), dev.view());
      CHECK(dev.data == cpu.data);
      const Matrix<float> g = test::random_matrix<float>(4, 9, 1.0, 3);
      transform_backward(Device::cpu, t, cpu.view(), g.view(), gcpu.view());
      transform_backward(Device::cuda, t, cpu.view(), g.view(), gdev.view());
      CHECK(gdev.data == gcpu.data);
    }
    CHECK(calls.transform_forward == 5);
    CHECK(calls.transform_backward == 5);

    // Each bad call: the same message on both devices, no kernel call, no write.
    Matrix<float> bad = z;
    bad(2, 3) = std::numeric_limits<float>::quiet_NaN();
    Matrix<float> wrong(4, 8), out(4, 9, kSentinel);
    const Matrix<float> empty(4, 0);
    Matrix<float> empty_out(4, 0);
    Matrix<std::uint8_t> short_mask(3, 9, 1);
    Transform span;
    span.kind = TransformKind::adaptive_span;
    struct Bad {
      Transform t;
      ConstMatrix<float> scores;
      MatrixView<float> probs;
      MaskView mask;
    };
    const std::vector<Bad> cases = {
        {Transform::softmax(), bad.view(), out.view(), {}},
        {Transform::entmax15(), z.view(), wrong.view(), {}},
        {Transform::entmax(0.5), z.view(), out.view(), {}},
        {Transform::entmax(std::nan("")), z.view(), out.view(), {}},
        {Transform::topk_softmax(0), z.view(), out.view(), {}},
        {Transform::sparsemax(), z.view(), out.view(), short_mask.view()},
        {Transform::softmax(), empty.view(), empty_out.view(), {}},
        {span, z.view(), out.view(), {}},
    };
    for (const Bad& c : cases) {
      const std::string on_cpu = message_of([&] { transform_forward(Device::cpu, c.t, c.scores, c.probs, c.mask); });
      const std::string on_dev = message_of([&] { transform_forward(Device::cuda, c.t, c.scores, c.probs, c.mask); });
      CAPTURE(on_cpu);
      CHECK(!on_cpu.empty());
      CHECK(on_dev == on_cpu);
    }
    CHECK(calls.transform_forward == 5);
    for (float x : out.data) CHECK(x == kSentinel);

    Matrix<float> g(4, 9, 1.0f), gout(4, 9, kSentinel);
    g(1, 1) = std::numeric_limits<float>::infinity();
    for (const Transform& t : {Transform::softmax(), Transform::entmax(1000.0), Transform::topk_softmax(0)}) {
      const std::string on_cpu = message_of([&] { transform_backward(Device::cpu, t, z.view(), g.view(), gout.view()); });
      const std::string on_dev = message_of([&] { transform_backward(Device::cuda, t, z.view(), g.view(), gout.view()); });
      CAPTURE(on_cpu);
      CHECK(!on_cpu.empty());
      CHECK(on_dev == on_cpu);
    }
    CHECK(calls.transform_backward == 5);
    for (float x : gout.data) CHECK(x == kSentinel);
  }

  TEST_CASE("devices: on the device's own memory the core checks shapes and parameters, the kernel the values") {
    RecordingBackend backend;
    const Matrix<float> z = test::random_matrix<float>(4, 9, 2.0, 2);
    const Matrix<float> g = test::random_matrix<float>(4, 9, 1.0, 3);
    for (const Transform& t : {Transform::softmax(), Transform::entmax15(), Transform::topk_softmax(3)}) {
      CAPTURE(t.name());
      Matrix<float> cpu(4, 9), dev(4, 9), gcpu(4, 9), gdev(4, 9);
      transform_forward(Device::cpu, t, z.view(), cpu.view());
      transform_forward(Device::cuda, Memory::device, t, z.view(), dev.view());
      CHECK(dev.data == cpu.data);
      transform_backward(Device::cpu, t, cpu.view(), g.view(), gcpu.view());
      transform_backward(Device::cuda, Memory::device, t, cpu.view(), g.view(), gdev.view());
      CHECK(gdev.data == gcpu.data);
    }
    CHECK(calls.forward_on_device == 3);
    CHECK(calls.backward_on_device == 3);
    CHECK(calls.transform_forward + calls.transform_backward == 0);  // nothing went through host memory

    // Shapes and parameters: the core's check, the CPU's message, no kernel call.
    Matrix<float> wrong(4, 8), out(4, 9, kSentinel);
    for (const auto& [t, probs] : std::vector<std::pair<Transform, MatrixView<float>>>{
             {Transform::entmax15(), wrong.view()}, {Transform::entmax(0.5), out.view()},
             {Transform::topk_softmax(0), out.view()}}) {
      const std::string on_cpu = message_of([&] { transform_forward(Device::cpu, t, z.view(), probs); });
      CAPTURE(on_cpu);
      CHECK(!on_cpu.empty());
      CHECK(message_of([&] { transform_forward(Device::cuda, Memory::device, t, z.view(), probs); }) == on_cpu);
    }
    CHECK(calls.forward_on_device == 3);
    // Values: the core does not read device memory; the kernel scans them, with the same message.
    Matrix<float> bad = z;
    bad(2, 3) = std::numeric_limits<float>::quiet_NaN();
    const std::string nan_on_cpu = message_of([&] { transform_forward(Device::cpu, Transform::softmax(), bad.view(), out.view()); });
    CHECK(nan_on_cpu.find("non-finite") != std::string::npos);
    CHECK(message_of([&] { transform_forward(Device::cuda, Memory::device, Transform::softmax(), bad.view(), out.view()); }) ==
          nan_on_cpu);
    CHECK(calls.forward_on_device == 4);
    for (float x : out.data) CHECK(x == kSentinel);

    // Device::cpu: its own memory is the host's.
    Matrix<float> on_cpu(4, 9), expected(4, 9);
    transform_forward(Device::cpu, Memory::device, Transform::entmax15(), z.view(), on_cpu.view());
    transform_forward<float>(Transform::entmax15(), z.view(), expected.view());
    CHECK(on_cpu.data == expected.data);

    // A backend that takes host memory only says so, as unsupported.
    BackendKernels host_only = recording_backend();
    host_only.transform_forward_on_device = nullptr;
    register_backend(Device::cuda, host_only);
    const auto e = error_code_of([&] { transform_forward(Device::cuda, Memory::device, Transform::softmax(), z.view(), out.view()); });
    CHECK(e == ErrorCode::unsupported);
    CHECK(message_of([&] { transform_forward(Device::cuda, Memory::device, Transform::softmax(), z.view(), out.view()); }) ==
          "transform_forward: device cuda has no kernel for this op on its own memory; pass host memory (Memory::host)");
  }

  TEST_CASE("devices: a backend's attention backward gets validated arguments only") {
    RecordingBackend backend;
    BackendKernels table = recording_backend();
    table.attention_backward = [](ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                  ConstMatrix<float> g, MatrixView<float> gq, MatrixView<float> gk,
                                  MatrixView<float> gv, const AttentionOptions<float>& o) {
      ++calls.attention_backward;
      attention_backward<float>(q, k, v, g, gq, gk, gv, o);
    };
    register_backend(Device::cuda, table);
    const std::size_t n = 5, d = 4;
    const Matrix<float> q = test::random_matrix<float>(n, d, 1.0, 7), k = test::random_matrix<float>(n, d, 1.0, 8),
                        v = test::random_matrix<float>(n, d, 1.0, 9), g = test::random_matrix<float>(n, d, 1.0, 10);
    AttentionOptions<float> o;
    o.transform = Transform::entmax(1.3);
    Matrix<float> cq(n, d), ck(n, d), cv(n, d), dq(n, d), dk(n, d), dv(n, d);
    attention_backward(Device::cpu, q.view(), k.view(), v.view(), g.view(), cq.view(), ck.view(), cv.view(), o);
    attention_backward(Device::cuda, q.view(), k.view(), v.view(), g.view(), dq.view(), dk.view(), dv.view(), o);
    CHECK(calls.attention_backward == 1);
    CHECK(dq.data == cq.data);
    CHECK(dk.data == ck.data);
    CHECK(dv.data == cv.data);
    // A NaN upstream gradient, a wrong output shape, a bad alpha: the CPU's message, no kernel call.
    Matrix<float> gbad = g, narrow(n, d - 1), out(n, d, kSentinel);
    gbad(3, 1) = std::numeric_limits<float>::quiet_NaN();
    AttentionOptions<float> bad_alpha = o;
    bad_alpha.transform = Transform::entmax(0.5);
    const std::vector<std::function<void(Device)>> bad_calls = {
        [&](Device dev) { attention_backward(dev, q.view(), k.view(), v.view(), gbad.view(), out.view(), dk.view(), dv.view(), o); },
        [&](Device dev) { attention_backward(dev, q.view(), k.view(), v.view(), g.view(), narrow.view(), dk.view(), dv.view(), o); },
        [&](Device dev) { attention_backward(dev, q.view(), k.view(), v.view(), g.view(), out.view(), dk.view(), dv.view(), bad_alpha); },
    };
    for (const auto& call : bad_calls) {
      const std::string on_cpu = message_of([&] { call(Device::cpu); });
      CAPTURE(on_cpu);
      CHECK(!on_cpu.empty());
      CHECK(message_of([&] { call(Device::cuda); }) == on_cpu);
    }
    CHECK(calls.attention_backward == 1);
    for (float x : out.data) CHECK(x == kSentinel);
  }

  TEST_CASE("devices: attention and graph attention are validated in the core; missing kernels are named") {
    RecordingBackend backend;
    const std::size_t n = 6, d = 4;
    const Matrix<float> q = test::random_matrix<float>(n, d, 1.0, 4), k = test::random_matrix<float>(n, d, 1.0, 5),
                        v = test::random_matrix<float>(n, d, 1.0, 6);
    AttentionOptions<float> o;
    o.transform = Transform::entmax15();
    o.causal = true;
    Matrix<float> cpu(n, d), dev(n, d, kSentinel);
    attention_forward(Device::cpu, q.view(), k.view(), v.view(), cpu.view(), o);
    attention_forward(Device::cuda, q.view(), k.view(), v.view(), dev.view(), o);
    CHECK(dev.data == cpu.data);
    CHECK(calls.attention_forward == 1);

    Matrix<float> qbad = q, out(n, d, kSentinel);
    qbad(0, 0) = std::numeric_limits<float>::infinity();
    const std::string on_cpu = message_of([&] { attention_forward(Device::cpu, qbad.view(), k.view(), v.view(), out.view(), o); });
    CHECK(on_cpu.find("q has a non-finite entry") != std::string::npos);
    CHECK(message_of([&] { attention_forward(Device::cuda, qbad.view(), k.view(), v.view(), out.view(), o); }) == on_cpu);
    CHECK(calls.attention_forward == 1);
    for (float x : out.data) CHECK(x == kSentinel);

    // The recording backend has no attention backward.
    Matrix<float> gq(n, d), gk(n, d), gv(n, d);
    CHECK_THROWS_WITH_AS(attention_backward(Device::cuda, q.view(), k.view(), v.view(), q.view(), gq.view(), gk.view(),
                                            gv.view(), o),
                         doctest::Contains("attention_backward: device cuda has no kernel for this op; run it on cpu"),
                         Error);
    CHECK(error_code_of([&] {
            attention_backward(Device::cuda, q.view(), k.view(), v.view(), q.view(), gq.view(), gk.view(), gv.view(), o);
          }) == ErrorCode::unsupported);
    // Nor on its own memory: then the device has no kernel at all, and the message says so.
    CHECK(message_of([&] {
            attention_backward(Device::cuda, Memory::device, q.view(), k.view(), v.view(), q.view(), gq.view(),
                               gk.view(), gv.view(), o);
          }) == "attention_backward: device cuda has no kernel for this op; run it on cpu");
    // A bad value on a device that can run: the CPU's code.
    CHECK(error_code_of([&] { attention_forward(Device::cuda, qbad.view(), k.view(), v.view(), out.view(), o); }) ==
          ErrorCode::bad_value);

    GraphAttentionOptions<float> go;
    go.attention = o;
    const Graph full = Graph::full(n, n, true);
    Matrix<float> gdev(n, d, kSentinel), gcpu(n, d);
    graph_attention_forward(Device::cpu, q.view(), k.view(), v.view(), full, gcpu.view(), go);
    graph_attention_forward(Device::cuda, q.view(), k.view(), v.view(), full, gdev.view(), go);
    CHECK(gdev.data == gcpu.data);
    CHECK(calls.graph_attention == 1);
    go.mode = GraphAttentionMode::exact;
    Matrix<float> untouched(n, d, kSentinel);
    CHECK_THROWS_WITH_AS(
        graph_attention_forward(Device::cuda, q.view(), k.view(), v.view(), full, untouched.view(), go),
        doctest::Contains("device cuda has no kernel for this op; run it on cpu"), Error);  // none in this backend
    go.mode = GraphAttentionMode::fast;
    const std::string graph_cpu = message_of(
        [&] { graph_attention_forward(Device::cpu, q.view(), k.view(), v.view(), Graph::full(n + 1, n, false), untouched.view(), go); });
    CHECK(graph_cpu.find("graph.queries") != std::string::npos);
    CHECK(message_of([&] {
            graph_attention_forward(Device::cuda, q.view(), k.view(), v.view(), Graph::full(n + 1, n, false),
                                    untouched.view(), go);
          }) == graph_cpu);
    CHECK(calls.graph_attention == 1);
    for (float x : untouched.data) CHECK(x == kSentinel);

    CHECK(compare_graphs(Device::cuda, full, full, true).hits == compare_graphs(full, full, true).hits);
    CHECK(calls.compare == 1);
    CHECK_THROWS_WITH_AS(compare_graphs(Device::cuda, full, Graph::full(n, n + 1, true), true),
                         doctest::Contains("different shapes"), Error);
    CHECK(calls.compare == 1);
  }

  TEST_CASE("devices: lowrank-threshold hands its head to the device; softmax heads and float32 estimates do not") {
    RecordingBackend backend;
    Capture capture = test::clustered_capture(1, 2, 8, {24}, 3, false);
    capture.head(0, 0).alpha = 1.0;
    capture.head(0, 1).alpha = 1.75;
    const MatrixView<const float> q = capture.queries_of(0, 1, 0), k = capture.keys_of(0, 1, 0);
    auto p = make_predictor("lowrank-threshold", {{"bits", "3"}, {"margin", "0.25"}, {"r", "5"}});
    CHECK_THROWS_WITH_AS(p->predict(Device::cuda, q, k, 0, 1, false), doctest::Contains("predict before fit"), Error);
    p->fit(capture, {});
    CHECK_THROWS_WITH_AS(p->predict(Device::cuda, q, k, 0, 2, false), doctest::Contains("out of range"), Error);
    CHECK(p->predict(Device::cuda, q, k, 0, 1, false).edges() == 0);  // the recording backend's empty graph
    CHECK(calls.lowrank == 1);
    CHECK(calls.last_lowrank.bits == 3);
    CHECK(calls.last_lowrank.alpha == 1.75);
    CHECK(calls.last_lowrank.margin == 0.25);
    CHECK(calls.last_lowrank.wq.rows == 8);
    CHECK(calls.last_lowrank.wq.cols == 5);
    CHECK(calls.last_lowrank.wk.cols == 5);
    // Softmax keeps every allowed key without asking the device.
    CHECK(p->predict(Device::cuda, q, k, 0, 0, true).edges() == Graph::full(24, 24, true).edges());
    CHECK(calls.lowrank == 1);
    // No kernel on the device's own memory in this backend.
    CHECK(error_code_of([&] { p->predict(Device::cuda, Memory::device, q, k, 0, 1, false); }) ==
          ErrorCode::unsupported);
    auto float_estimate = make_predictor("lowrank-threshold", {{"bits", "0"}});
    float_estimate->fit(capture, {});
    CHECK_THROWS_WITH_AS(float_estimate->predict(Device::cuda, q, k, 0, 1, false),
                         doctest::Contains("device cuda has no kernel for this method; run it on cpu"), Error);
  }

  TEST_CASE("devices: a fitted Sparsefinder predictor hands its in-memory parameters to the device") {
    RecordingBackend backend;
    const Capture capture = test::clustered_capture(1, 2, 8, {24}, 3, false);
    const MatrixView<const float> q = capture.queries_of(0, 1, 0), k = capture.keys_of(0, 1, 0);
    auto window = make_predictor("window", {{"window", "2"}});
    CHECK_THROWS_WITH_AS(window->predict(Device::cuda, q, k, 0, 1, false),
                         doctest::Contains("window: predict: device cuda has no kernel for this method; run it on cpu"),
                         Error);
    auto sf = make_predictor("sparsefinder-kmeans", {{"clusters", "3"}, {"top", "2"}, {"r", "3"}, {"extra_window", "1"}});
    CHECK_THROWS_WITH_AS(sf->predict(Device::cuda, q, k, 0, 1, false), doctest::Contains("predict before fit"), Error);
    sf->fit(capture, {});
    CHECK_THROWS_WITH_AS(sf->predict(Device::cuda, q, k, 0, 7, false), doctest::Contains("out of range"), Error);
    CHECK(calls.pattern == 0);
    const Graph g = sf->predict(Device::cuda, q, k, 0, 1, false);
    CHECK(calls.pattern == 1);
    const SparsefinderHead& h = calls.last_head;
    CHECK(h.method == SparsefinderHead::Method::kmeans);
    CHECK(h.wq.rows == capture.head_dim);
    CHECK(h.wq.cols == 3);
    CHECK(h.wk.rows == capture.head_dim);
    CHECK(h.centroids.rows == 3);
    CHECK(h.centroids.cols == 3);
    CHECK(h.top == 2);
    // The device's graph was empty: what is left is the union window, added on the host.
    CHECK(g.edges() == window_global_graph(q.rows, k.rows, 1, 0, false).edges());

    // q and k in the device's own memory: the other entry, the same head, the same checks first.
    CHECK_THROWS_WITH_AS(sf->predict(Device::cuda, Memory::device, q, k, 0, 7, false),
                         doctest::Contains("out of range"), Error);
    CHECK(calls.pattern_on_device == 0);
    const Graph on_device = sf->predict(Device::cuda, Memory::device, q, k, 0, 1, false);
    CHECK(calls.pattern_on_device == 1);
    CHECK(calls.pattern == 1);
    CHECK(calls.last_head.centroids.rows == 3);
    CHECK(on_device.edges() == g.edges());
    BackendKernels host_only = recording_backend();
    host_only.sparsefinder_pattern_on_device = nullptr;
    register_backend(Device::cuda, host_only);
    CHECK(error_code_of([&] { sf->predict(Device::cuda, Memory::device, q, k, 0, 1, false); }) ==
          ErrorCode::unsupported);
    // Device::cpu: its memory is the host's.
    CHECK(sf->predict(Device::cpu, Memory::device, q, k, 0, 1, false).indices ==
          sf->predict(q, k, 0, 1, false).indices);
  }
}
