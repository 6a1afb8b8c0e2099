// Fused dense attention on the GPU against the CPU's float64 attention on the
// same float inputs, and the unfused scores_to_probs against the CPU transforms.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/cuda/attention.hpp"
#include "entgraph/device.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/error.hpp"
#include "entgraph/transforms.hpp"
#include "support.hpp"

namespace entgraph::cuda {
namespace {

using test::Matrix;
using test::random_matrix;

// Everything the fused kernels implement: alpha = 1 through the entmax kind
// too, and top-k with k within a key tile, across tiles, and at or past m
// (softmax).
std::vector<Transform> fused_transforms() {
  return {Transform::softmax(),         Transform::entmax(1.0),       Transform::entmax15(),
          Transform::entmax(1.25),      Transform::sparsemax(),       Transform::entmax(2.0),
          Transform::entmax(3.0),       Transform::topk_softmax(1),   Transform::topk_softmax(7),
          Transform::topk_softmax(100), Transform::topk_softmax(5000)};
}

// The oracle: the core's float64 attention on the float inputs.
Matrix<double> cpu_attention(const Matrix<float>& q, const Matrix<float>& k, const Matrix<float>& v,
                             const AttentionOptions<float>& o) {
  AttentionOptions<double> od;
  od.transform = o.transform;
  od.scale = o.scale;
  od.causal = o.causal;
  od.key_padding = o.key_padding;
  const Matrix<double> qd = q.cast<double>(), kd = k.cast<double>(), vd = v.cast<double>();
  Matrix<double> out(q.rows, v.cols);
  entgraph::attention_forward<double>(qd.view(), kd.view(), vd.view(), out.view(), od);
  return out;
}

// capacity = 0: through the core's Device::cuda call (the backend's kernel);
// else through the device-memory API with that candidate capacity (small
// values exercise the overflow path).
Matrix<double> gpu_attention(const Matrix<float>& q, const Matrix<float>& k, const Matrix<float>& v,
                             const AttentionOptions<float>& o, std::size_t capacity = 0) {
  Matrix<float> out(q.rows, v.cols, -7.0f);  // sentinel: every entry must be written
  if (capacity == 0) {
    entgraph::attention_forward(Device::cuda, q.view(), k.view(), v.view(), out.view(), o);
    return out.cast<double>();
  }
  DeviceArray<float> dq(q.data.data(), q.data.size()), dk(k.data.data(), k.data.size()),
      dv(v.data.data(), v.data.size()), dout(out.data.size());
  DeviceArray<std::uint8_t> pad;
  if (o.key_padding) pad = DeviceArray<std::uint8_t>(o.key_padding, k.rows);
  FusedAttentionOptions fo;
  fo.transform = o.transform;
  fo.scale = o.scale;
  fo.causal = o.causal;
  fo.key_padding = o.key_padding ? pad.data() : nullptr;
  fo.candidate_capacity = capacity;
  attention_forward(dq.data(), dk.data(), dv.data(), dout.data(), q.rows, k.rows, q.cols, v.cols, fo);
  synchronize();
  dout.download(out.data.data());
  return out.cast<double>();
}

// Outputs are convex combinations of V rows: compare absolutely, relative to max |v|.
constexpr double kTol = 1e-4;

// The GPU's attention against the CPU's for one transform, mask and scale (0: 1/sqrt(d)).
void check_against_cpu(const Matrix<float>& q, const Matrix<float>& k, const Matrix<float>& v, const Transform& t,
                       bool causal, double scale = 0.0) {
  AttentionOptions<float> o;
  o.transform = t;
  o.causal = causal;
  o.scale = scale;
  CHECK(test::max_abs_diff(gpu_attention(q, k, v, o), cpu_attention(q, k, v, o)) <= kTol);
}

struct Case {
  std::size_t n, m, d, dv;
};

// Every (n, m) pair of the sizes, cycling through the head dimensions (d != dv included).
std::vector<Case> size_cases() {
  const std::size_t sizes[] = {1, 17, 128, 1000};
  const std::size_t dims[][2] = {{32, 32}, {64, 64}, {128, 128}, {64, 32}, {32, 128}, {128, 64}};
  std::vector<Case> cases;
  std::size_t t = 0;
  for (std::size_t n : sizes)
    for (std::size_t m : sizes) {
      cases.push_back({n, m, dims[t % 6][0], dims[t % 6][1]});
      ++t;
    }
  return cases;
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("fused attention: matches the CPU for every size, transform and mask") {
    for (const Case& c : size_cases()) {
      const Matrix<float> q = random_matrix<float>(c.n, c.d, 1.0, 11 + c.n);
      const Matrix<float> k = random_matrix<float>(c.m, c.d, 1.0, 13 + c.m);
      const Matrix<float> v = random_matrix<float>(c.m, c.dv, 1.0, 17 + c.m);
      for (const Transform& t : fused_transforms())
        for (bool causal : {false, true}) {
          CAPTURE(c.n);
          CAPTURE(c.m);
          CAPTURE(c.d);
          CAPTURE(c.dv);
          CAPTURE(test::describe(t));
          CAPTURE(causal);
          check_against_cpu(q, k, v, t, causal);
        }
    }
  }

  TEST_CASE("fused attention: every head dimension pair, scaled scores, sparse rows") {
    for (std::size_t d : {32, 64, 128})
      for (std::size_t dv : {32, 64, 128}) {
        // Scores with a spread of about 3: entmax rows have small supports.
        const Matrix<float> q = random_matrix<float>(100, d, 3.0, 5);
        const Matrix<float> k = random_matrix<float>(130, d, 1.0, 6);
        const Matrix<float> v = random_matrix<float>(130, dv, 1.0, 7);
        for (const Transform& t : {Transform::softmax(), Transform::entmax15(), Transform::sparsemax()})
          for (bool causal : {false, true}) {
            CAPTURE(d);
            CAPTURE(dv);
            CAPTURE(test::describe(t));
            CAPTURE(causal);
            check_against_cpu(q, k, v, t, causal, 0.3);
          }
      }
  }

  TEST_CASE("fused attention: tiny candidate buffers take the narrowing sweeps and stay exact") {
    // Capacity 1 overflows almost every query (tau then comes from narrowing
    // alone); 5 and 33 overflow some and collect after one or two narrowings;
    // 2000 >= m never overflows.
    const Matrix<float> q = random_matrix<float>(200, 64, 1.0, 21);
    const Matrix<float> k = random_matrix<float>(700, 64, 1.0, 22);
    const Matrix<float> v = random_matrix<float>(700, 64, 1.0, 23);
    // Top-k: k within the capacity, past it (the key bracket's sweeps), and
    // past the keys a causal row sees.
    for (const Transform& t :
         {Transform::entmax15(), Transform::entmax(1.25), Transform::sparsemax(), Transform::entmax(3.0),
          Transform::topk_softmax(4), Transform::topk_softmax(40), Transform::topk_softmax(600)})
      for (bool causal : {false, true}) {
        AttentionOptions<float> o;
        o.transform = t;
        o.causal = causal;
        const Matrix<double> want = cpu_attention(q, k, v, o);
        for (std::size_t capacity : {1, 5, 33, 2000}) {
          CAPTURE(test::describe(t));
          CAPTURE(causal);
          CAPTURE(capacity);
          CHECK(test::max_abs_diff(gpu_attention(q, k, v, o, capacity), want) <= kTol);
        }
      }
  }

  TEST_CASE("fused attention: the candidate floor keeps every support score, in any key order") {
    // Sweep 1 drops the scores below a floor solved from the candidates kept
    // so far. Keys sorted by query 0's score give it rising scores (the floor
    // is solved again and again) and query 1 (= -query 0) falling ones; the
    // other queries are random. Scales from flat rows (supports of hundreds,
    // some over the capacity) to peaked ones.
    const std::size_t n = 70, m = 3000, d = 32;
    Matrix<float> q = random_matrix<float>(n, d, 1.0, 31);
    Matrix<float> k = random_matrix<float>(m, d, 1.0, 32);
    const Matrix<float> v = random_matrix<float>(m, d, 1.0, 33);
    for (std::size_t c = 0; c < d; ++c) q.data[d + c] = -q.data[c];
    std::vector<std::pair<double, std::size_t>> order(m);
    for (std::size_t j = 0; j < m; ++j) {
      double s = 0.0;
      for (std::size_t c = 0; c < d; ++c) s += static_cast<double>(q.data[c]) * k.data[j * d + c];
      order[j] = {s, j};
    }
    std::sort(order.begin(), order.end());
    Matrix<float> sorted(m, d);
    for (std::size_t j = 0; j < m; ++j)
      std::copy_n(k.data.begin() + static_cast<std::ptrdiff_t>(order[j].second * d), d,
                  sorted.data.begin() + static_cast<std::ptrdiff_t>(j * d));
    k = sorted;
    for (const Transform& t :
         {Transform::entmax15(), Transform::entmax(1.25), Transform::sparsemax(), Transform::entmax(3.0)})
      for (double scale : {0.01, 0.05, 0.2, 1.0, 4.0}) {
        CAPTURE(test::describe(t));
        CAPTURE(scale);
        check_against_cpu(q, k, v, t, false, scale);
      }
  }

  TEST_CASE("fused attention: key padding, and queries that see no key get zero rows") {
    const std::size_t n = 90, m = 70, d = 32, dv = 64;
    const Matrix<float> q = random_matrix<float>(n, d, 1.0, 31);
    const Matrix<float> k = random_matrix<float>(m, d, 1.0, 32);
    const Matrix<float> v = random_matrix<float>(m, dv, 1.0, 33);
    std::vector<std::uint8_t> padding(m, 1);
    for (std::size_t j = 0; j < m; j += 3) padding[j] = 0;
    padding[1] = 0;  // with causal and n > m, early queries see only padding or nothing
    for (const Transform& t : fused_transforms())
      for (bool causal : {false, true}) {
        CAPTURE(test::describe(t));
        CAPTURE(causal);
        AttentionOptions<float> o;
        o.transform = t;
        o.causal = causal;
        o.key_padding = padding.data();
        const Matrix<double> got = gpu_attention(q, k, v, o);
        CHECK(test::max_abs_diff(got, cpu_attention(q, k, v, o)) <= kTol);
        if (causal) {
          // n - m = 20 queries see no key, and the next two see only padded keys 0 and 1.
          for (std::size_t i = 0; i < 22; ++i)
            for (std::size_t c = 0; c < dv; ++c) CHECK(got(i, c) == 0.0);
        }
      }
    std::vector<std::uint8_t> none(m, 0);
    AttentionOptions<float> o;
    o.key_padding = none.data();
    const Matrix<double> got = gpu_attention(q, k, v, o);
    for (double x : got.data) CHECK(x == 0.0);
  }

  TEST_CASE("fused attention: through the core's Device::cuda call on device memory, padding there too") {
    const std::size_t n = 77, m = 130, d = 64, width = 32;
    const Matrix<float> q = random_matrix<float>(n, d, 1.0, 601), k = random_matrix<float>(m, d, 1.0, 602),
                        v = random_matrix<float>(m, width, 1.0, 603);
    std::vector<std::uint8_t> padding(m, 1);
    for (std::size_t j = 0; j < m; j += 7) padding[j] = 0;
    DeviceArray<float> dq(q.data.data(), q.data.size()), dk(k.data.data(), k.data.size()),
        dv(v.data.data(), v.data.size());
    DeviceArray<std::uint8_t> dpad(padding.data(), padding.size());
    for (const Transform& t : {Transform::softmax(), Transform::entmax15(), Transform::entmax(1.75)}) {
      CAPTURE(t.name());
      AttentionOptions<float> o;
      o.transform = t;
      o.causal = true;
      o.key_padding = padding.data();
      const Matrix<double> expect = cpu_attention(q, k, v, o);
      o.key_padding = dpad.data();
      Matrix<float> out(n, width, -7.0f);
      DeviceArray<float> dout(out.data.data(), out.data.size());
      entgraph::attention_forward(Device::cuda, Memory::device, ConstMatrix<float>(dq.data(), n, d),
                                  ConstMatrix<float>(dk.data(), m, d), ConstMatrix<float>(dv.data(), m, width),
                                  MatrixView<float>(dout.data(), n, width), o);
      dout.download(out.data.data());
      CHECK(test::max_abs_diff(out.cast<double>(), expect) <= kTol);
    }
    // A NaN in device memory: the GPU scans, the core decides, with the CPU's message; out untouched.
    Matrix<float> bad = k;
    bad(100, 3) = std::numeric_limits<float>::quiet_NaN();
    AttentionOptions<float> o;
    std::string on_cpu;
    try {
      Matrix<float> out(n, width);
      entgraph::attention_forward(Device::cpu, q.view(), bad.view(), v.view(), out.view(), o);
    } catch (const Error& e) {
      on_cpu = e.what();
    }
    REQUIRE(!on_cpu.empty());
    const std::vector<float> sentinel(n * width, -7.0f);
    DeviceArray<float> dbad(bad.data.data(), bad.data.size()), dout(sentinel.data(), sentinel.size());
    CHECK_THROWS_WITH_AS(entgraph::attention_forward(Device::cuda, Memory::device, ConstMatrix<float>(dq.data(), n, d),
                                                     ConstMatrix<float>(dbad.data(), m, d),
                                                     ConstMatrix<float>(dv.data(), m, width),
                                                     MatrixView<float>(dout.data(), n, width), o),
                         on_cpu.c_str(), Error);
    std::vector<float> back(sentinel.size());
    dout.download(back.data());
    CHECK(back == sentinel);
  }

  TEST_CASE("fused attention: strided host views") {
    const std::size_t n = 40, m = 50, d = 64, dv = 32;
    Matrix<float> qbig = random_matrix<float>(n, d + 5, 1.0, 41);
    Matrix<float> kbig = random_matrix<float>(m, d + 3, 1.0, 42);
    Matrix<float> vbig = random_matrix<float>(m, dv + 7, 1.0, 43);
    Matrix<float> q(n, d), k(m, d), v(m, dv);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < d; ++c) q(i, c) = qbig(i, c);
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t c = 0; c < d; ++c) k(i, c) = kbig(i, c);
      for (std::size_t c = 0; c < dv; ++c) v(i, c) = vbig(i, c);
    }
    AttentionOptions<float> o;
    o.transform = Transform::entmax15();
    Matrix<float> outbig(n, dv + 2, 5.0f);
    entgraph::attention_forward(Device::cuda, ConstMatrix<float>{qbig.data.data(), n, d, d + 5}, ConstMatrix<float>{kbig.data.data(), m, d, d + 3},
                      ConstMatrix<float>{vbig.data.data(), m, dv, dv + 7}, MatrixView<float>{outbig.data.data(), n, dv, dv + 2},
                      o);
    Matrix<double> got(n, dv);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t c = 0; c < dv; ++c) got(i, c) = outbig(i, c);
      CHECK(outbig(i, dv) == 5.0f);  // the padding columns are untouched
      CHECK(outbig(i, dv + 1) == 5.0f);
    }
    CHECK(test::max_abs_diff(got, cpu_attention(q, k, v, o)) <= kTol);
  }

  TEST_CASE("fused attention: the device API with a caller's workspace and stream") {
    const std::size_t n = 300, m = 260, d = 128, dv = 128;
    const Matrix<float> q = random_matrix<float>(n, d, 1.0, 51);
    const Matrix<float> k = random_matrix<float>(m, d, 1.0, 52);
    const Matrix<float> v = random_matrix<float>(m, dv, 1.0, 53);
    DeviceArray<float> dq(q.data.data(), q.data.size()), dk(k.data.data(), k.data.size()), dv_(v.data.data(), v.data.size());
    DeviceArray<float> dout(n * dv);
    FusedAttentionOptions fo;
    fo.transform = Transform::entmax(1.5);
    fo.causal = true;
    fo.candidate_capacity = 16;
    const std::size_t bytes = attention_workspace_bytes(n, m, fo);
    CHECK(bytes == n * 16 * sizeof(float));
    CHECK(attention_workspace_bytes(n, m, FusedAttentionOptions{Transform::softmax()}) == 0);
    DeviceArray<float> workspace(bytes / sizeof(float));
    fo.workspace = workspace.data();
    fo.workspace_bytes = bytes;
    attention_forward(dq.data(), dk.data(), dv_.data(), dout.data(), n, m, d, dv, fo);
    synchronize();
    Matrix<float> out(n, dv);
    dout.download(out.data.data());
    AttentionOptions<float> o;
    o.transform = fo.transform;
    o.causal = true;
    CHECK(test::max_abs_diff(out.cast<double>(), cpu_attention(q, k, v, o)) <= kTol);

    fo.workspace_bytes = bytes - 4;
    CHECK_THROWS_WITH_AS(attention_forward(dq.data(), dk.data(), dv_.data(), dout.data(), n, m, d, dv, fo),
                         doctest::Contains("workspace_bytes"), Error);
  }

  TEST_CASE("fused attention: misuse throws entgraph::Error naming the argument, before any output") {
    const Matrix<float> q = random_matrix<float>(8, 48, 1.0, 61);
    const Matrix<float> k = random_matrix<float>(9, 48, 1.0, 62);
    const Matrix<float> v = random_matrix<float>(9, 32, 1.0, 63);
    Matrix<float> out(8, 32, 3.0f);
    AttentionOptions<float> o;
    CHECK_THROWS_WITH_AS(entgraph::attention_forward(Device::cuda, q.view(), k.view(), v.view(), out.view(), o), doctest::Contains("d is not supported"),
                         Error);
    const Matrix<float> q32 = random_matrix<float>(8, 32, 1.0, 61);
    const Matrix<float> k32 = random_matrix<float>(9, 32, 1.0, 62);
    o.transform = Transform::entmax(0.5);
    CHECK_THROWS_WITH_AS(entgraph::attention_forward(Device::cuda, q32.view(), k32.view(), v.view(), out.view(), o), doctest::Contains("alpha"),
                         Error);
    o.transform = Transform::entmax15();
    o.scale = std::nan("");
    CHECK_THROWS_WITH_AS(entgraph::attention_forward(Device::cuda, q32.view(), k32.view(), v.view(), out.view(), o), doctest::Contains("scale"),
                         Error);
    o.scale = 0.0;
    Matrix<float> bad = q32;
    bad(3, 4) = INFINITY;
    CHECK_THROWS_WITH_AS(entgraph::attention_forward(Device::cuda, bad.view(), k32.view(), v.view(), out.view(), o), doctest::Contains("q has a non-finite entry"),
                         Error);
    Matrix<float> wrong(7, 32);
    CHECK_THROWS_WITH_AS(entgraph::attention_forward(Device::cuda, q32.view(), k32.view(), v.view(), wrong.view(), o), doctest::Contains("out"),
                         Error);
    for (float x : out.data) CHECK(x == 3.0f);
    // Host memory given to the device API.
    FusedAttentionOptions fo;
    CHECK_THROWS_WITH_AS(attention_forward(q32.data.data(), k32.data.data(), v.data.data(), out.data.data(), 8, 9, 32, 32, fo),
                         doctest::Contains("not a device pointer"), Error);
    for (float x : out.data) CHECK(x == 3.0f);
  }

  TEST_CASE("scores_to_probs: the CPU transform of the scaled, masked scores; rows sum to 1, masked entries are 0") {
    const std::size_t n = 37, m = 300, d = 64;
    const Matrix<float> scores = random_matrix<float>(n, m, 8.0, 71);  // raw q.k products
    std::vector<std::uint8_t> padding(m, 1);
    for (std::size_t j = 5; j < m; j += 7) padding[j] = 0;
    for (const Transform& t : fused_transforms())
      for (bool causal : {false, true}) {
        CAPTURE(test::describe(t));
        CAPTURE(causal);
        DeviceArray<float> ds(scores.data.data(), scores.data.size());
        DeviceArray<std::uint8_t> dpad(padding.data(), m);
        FusedAttentionOptions fo;
        fo.transform = t;
        fo.causal = causal;
        fo.key_padding = dpad.data();
        scores_to_probs(ds.data(), n, m, d, fo);
        synchronize();
        Matrix<float> got(n, m);
        ds.download(got.data.data());

        // CPU: scale, mask, transform in float64.
        Matrix<double> z(n, m);
        Matrix<std::uint8_t> keep(n, m);
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t j = 0; j < m; ++j) {
            z(i, j) = static_cast<double>(scores(i, j)) / std::sqrt(static_cast<double>(d));
            keep(i, j) = padding[j] && (!causal || j < causal_key_limit(i, n, m));
          }
        Matrix<double> want(n, m);
        entgraph::transform_forward<double>(t, z.view(), want.view(), keep.view());
        CHECK(test::max_abs_diff(got.cast<double>(), want) <= 1e-5);
        for (std::size_t i = 0; i < n; ++i) {
          double sum = 0;
          for (std::size_t j = 0; j < m; ++j) {
            sum += got(i, j);
            CHECK(got(i, j) >= 0.0f);
            if (!keep(i, j)) CHECK(got(i, j) == 0.0f);
          }
          CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
        }
      }
  }
}

}  // namespace entgraph::cuda
