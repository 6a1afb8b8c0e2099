// Batched attention (entgraph/batched_attention.hpp) against a float64
// reference written here: scalar S = scale Q K^T over each sequence's
// visible keys, the core's float64 transform as the transform oracle, P V,
// all on the same rounded inputs the call sees. Every CPU instruction set;
// float32, bfloat16 and float16; bhnd, bnhd and a padded strided view;
// grouped-query heads; per-sequence lengths (0 and n included); causal and
// not; ties at the threshold; scores of +-1e4; thread-count independence;
// every error the header lists, with its message, and nothing written.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/attention_support.hpp"
#include "attention/batched_support.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/backend.hpp"
#include "entgraph/batched_attention.hpp"
#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

// One batched problem.
struct Setup {
  std::size_t batch = 4, hq = 8, hkv = 2, n = 70, m = 90, d = 16, dv = 12;
  DType dtype = DType::float32;
  bool out_float32 = false;  // out in float32 whatever the inputs' dtype
  Layout layout = Layout::bhnd;
  std::vector<std::int32_t> qlen, klen;  // empty: full lengths
  BatchedAttentionOptions options;

  std::size_t n_of(std::size_t b) const { return qlen.empty() ? n : static_cast<std::size_t>(qlen[b]); }
  std::size_t m_of(std::size_t b) const { return klen.empty() ? m : static_cast<std::size_t>(klen[b]); }
  BatchedAttentionOptions opts() const {
    BatchedAttentionOptions o = options;
    o.query_lengths = qlen.empty() ? nullptr : qlen.data();
    o.key_lengths = klen.empty() ? nullptr : klen.data();
    return o;
  }
};

struct BatchedProblem {
  Setup s;
  Tensor4 q, k, v, out;
  explicit BatchedProblem(const Setup& setup)
      : s(setup),
        q(s.dtype, s.batch, s.hq, s.n, s.d, s.layout),
        k(s.dtype, s.batch, s.hkv, s.m, s.d, s.layout),
        v(s.dtype, s.batch, s.hkv, s.m, s.dv, s.layout),
        out(s.out_float32 ? DType::float32 : s.dtype, s.batch, s.hq, s.n, s.dv, s.layout) {}

  // Gaussian entries (times `spread`) in the valid rows only: padded rows
  // stay NaN, which the call must neither scan nor read.
  void fill_random(std::uint64_t seed, double spread = 1.0) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> dist(0.0, spread);
    auto fill = [&](Tensor4& t, bool queries) {
      for (std::size_t b = 0; b < t.batch; ++b)
        for (std::size_t h = 0; h < t.heads; ++h)
          for (std::size_t i = 0; i < (queries ? s.n_of(b) : s.m_of(b)); ++i)
            for (std::size_t c = 0; c < t.cols; ++c) t.set(b, h, i, c, static_cast<float>(dist(rng)));
    };
    fill(q, true);
    fill(k, false);
    fill(v, false);
  }

  void run() { batched_attention_forward(q.cview(), k.cview(), v.cview(), out.view(), s.opts()); }
};

// The float64 reference: [b][h][i][c] of out, row-major.
std::vector<double> reference(const BatchedProblem& p) {
  const Setup& s = p.s;
  const double scale = s.options.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(s.d)) : s.options.scale;
  std::vector<double> out(s.batch * s.hq * s.n * s.dv, 0.0);
  std::vector<double> z, w;
  for (std::size_t b = 0; b < s.batch; ++b) {
    const std::size_t nb = s.n_of(b), mb = s.m_of(b);
    for (std::size_t h = 0; h < s.hq; ++h) {
      const std::size_t g = h / (s.hq / s.hkv);
      for (std::size_t i = 0; i < nb; ++i) {
        // Visible keys: a prefix; causal: j <= i + (m_b - n_b).
        std::size_t visible = mb;
        if (s.options.causal) {
          const long long last = static_cast<long long>(i) + static_cast<long long>(mb) - static_cast<long long>(nb);
          visible = last < 0 ? 0 : std::min<std::size_t>(mb, static_cast<std::size_t>(last) + 1);
        }
        if (visible == 0) continue;  // a zero row
        z.assign(visible, 0.0);
        w.assign(visible, 0.0);
        for (std::size_t j = 0; j < visible; ++j) {
          double dot = 0.0;
          for (std::size_t c = 0; c < s.d; ++c) dot += p.q.get(b, h, i, c) * p.k.get(b, g, j, c);
          z[j] = scale * dot;
        }
        transform_forward<double>(s.options.transform, MatrixView<const double>(z.data(), 1, visible),
                                  MatrixView<double>(w.data(), 1, visible));
        double* o = &out[((b * s.hq + h) * s.n + i) * s.dv];
        for (std::size_t j = 0; j < visible; ++j)
          for (std::size_t c = 0; c < s.dv; ++c) o[c] += w[j] * p.v.get(b, g, j, c);
      }
    }
  }
  return out;
}

// Checks out against the reference: float32 within 1e-5 of the largest
// |reference|; 16-bit within that plus one rounding of the format; rows past
// n_b exactly zero; padding between out's rows untouched (still NaN).
void check_against_reference(const BatchedProblem& p, double rel = 1e-5) {
  const Setup& s = p.s;
  const std::vector<double> ref = reference(p);
  double biggest = 0.0;
  for (double x : ref) biggest = std::max(biggest, std::abs(x));
  const double tol = rel * std::max(biggest, 1e-30);
  double worst = 0.0;
  std::size_t bad = 0, nonzero_padded = 0;
  for (std::size_t b = 0; b < s.batch; ++b)
    for (std::size_t h = 0; h < s.hq; ++h)
      for (std::size_t i = 0; i < s.n; ++i)
        for (std::size_t c = 0; c < s.dv; ++c) {
          const double got = p.out.get(b, h, i, c), want = ref[((b * s.hq + h) * s.n + i) * s.dv + c];
          if (i >= s.n_of(b)) {
            // +0 bits exactly.
            nonzero_padded += !(got == 0.0 && !std::signbit(got));
            continue;
          }
          const double err = std::abs(got - want);
          const double allowed = tol + half_ulp(s.dtype, std::abs(want) + tol);
          if (!(err <= allowed)) ++bad;
          if (!(err <= worst)) worst = err;
        }
  CAPTURE(biggest);
  CAPTURE(worst);
  CHECK(bad == 0);
  CHECK(nonzero_padded == 0);
  // Gaps of the padded layout hold NaN still.
  CHECK(touched_gaps(p.out) == 0);
}

constexpr DType kDtypes[] = {DType::float32, DType::bfloat16, DType::float16};
constexpr Layout kLayouts[] = {Layout::bhnd, Layout::bnhd, Layout::padded};

// The message an entgraph::Error carries, "" if none is thrown.
std::string message_of(const std::function<void()>& f) { return error_message(f); }

bool bits_equal(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_SUITE("attention") {
  TEST_CASE("batched attention: every transform, dtype and layout matches float64 on every ISA (GQA, varlen, causal)") {
    // 4 sequences: n_b > m_b (causal hides every key from the first 33
    // queries), n_b = 0, n_b = n with m_b = m, and keys m_b = 0.
    Setup s;
    s.qlen = {70, 0, 45, 20};
    s.klen = {37, 90, 90, 0};
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      for (const Transform& t : kBatchedTransforms)
        for (bool causal : {false, true})
          for (DType dtype : kDtypes)
            for (Layout layout : kLayouts) {
              CAPTURE(describe(t));
              CAPTURE(causal);
              const std::string dtype_text = dtype_name(dtype);
              CAPTURE(dtype_text);
              const std::string layout_text = layout_name(layout);
              CAPTURE(layout_text);
              s.options.transform = t;
              s.options.causal = causal;
              // Larger scores than 1/sqrt(d), so the sparse transforms are sparse.
              s.options.scale = 2.0 / std::sqrt(static_cast<double>(s.d));
              s.dtype = dtype;
              s.layout = layout;
              BatchedProblem p(s);
              p.fill_random(11);
              p.run();
              check_against_reference(p);
            }
    }
  }

  TEST_CASE("batched attention: multi-query (Hkv = 1) and multi-head (Hkv = Hq), full lengths, n = m = 130") {
    for (std::size_t hkv : {std::size_t{1}, std::size_t{8}})
      for (const Transform& t : {Transform::softmax(), Transform::entmax15(), Transform::topk_softmax(4)})
        for (DType dtype : kDtypes)
          for (bool causal : {false, true}) {
            CAPTURE(hkv);
            CAPTURE(describe(t));
            const std::string dtype_text = dtype_name(dtype);
            CAPTURE(dtype_text);
            CAPTURE(causal);
            Setup s;
            s.batch = 2;
            s.hkv = hkv;
            s.n = s.m = 130;  // two query blocks and a part
            s.d = s.dv = 32;
            s.dtype = dtype;
            s.options.transform = t;
            s.options.causal = causal;
            BatchedProblem p(s);
            p.fill_random(21);
            p.run();
            check_against_reference(p);
          }
  }

  TEST_CASE("batched attention: float32 outputs are attention_forward's bits; 16-bit ones its result rounded once") {
    Setup s;
    s.batch = 2;
    s.qlen = {70, 31};
    s.klen = {90, 64};
    s.options.transform = Transform::entmax15();
    s.options.causal = true;
    for (const auto& [dtype, out_float32] : {std::pair{DType::float32, false}, {DType::bfloat16, false},
                                             {DType::float16, false}, {DType::bfloat16, true},
                                             {DType::float16, true}}) {
      const std::string dtype_text = std::string(dtype_name(dtype)) + (out_float32 ? " -> float32" : "");
      CAPTURE(dtype_text);
      s.dtype = dtype;
      s.out_float32 = out_float32;
      s.layout = Layout::bnhd;
      BatchedProblem p(s);
      p.fill_random(5);
      p.run();
      std::size_t mismatches = 0;
      for (std::size_t b = 0; b < s.batch; ++b)
        for (std::size_t h = 0; h < s.hq; ++h) {
          const std::size_t nb = s.n_of(b), mb = s.m_of(b), g = h / (s.hq / s.hkv);
          Matrix<float> qh(nb, s.d), kh(mb, s.d), vh(mb, s.dv), oh(nb, s.dv);
          for (std::size_t i = 0; i < nb; ++i)
            for (std::size_t c = 0; c < s.d; ++c) qh(i, c) = static_cast<float>(p.q.get(b, h, i, c));
          for (std::size_t j = 0; j < mb; ++j) {
            for (std::size_t c = 0; c < s.d; ++c) kh(j, c) = static_cast<float>(p.k.get(b, g, j, c));
            for (std::size_t c = 0; c < s.dv; ++c) vh(j, c) = static_cast<float>(p.v.get(b, g, j, c));
          }
          AttentionOptions<float> o;
          o.transform = s.options.transform;
          o.causal = true;
          attention_forward<float>(qh.view(), kh.view(), vh.view(), oh.view(), o);
          for (std::size_t i = 0; i < nb; ++i)
            for (std::size_t c = 0; c < s.dv; ++c) {
              const std::size_t at = p.out.offset(b, h, i, c);
              const float x = oh(i, c);
              const bool same = dtype == DType::float32 || out_float32 ? bits_equal(p.out.f32[at], x)
                                : dtype == DType::bfloat16 ? p.out.h16[at] == float_to_bfloat16(x)
                                                           : p.out.h16[at] == float_to_float16(x);
              mismatches += !same;
            }
        }
      CHECK(mismatches == 0);
    }
  }

  TEST_CASE("batched attention: ties at the threshold and top-k ties, on exact integer scores") {
    // Small integer Q and K (exact in every dtype) with scale 1: every score
    // is an exact small integer in float32 too, with many equal scores, so
    // sparsemax/entmax thresholds land on ties and top-4 keeps every key
    // tied with the 4th.
    for (const Transform& t : kBatchedTransforms)
      for (DType dtype : kDtypes) {
        CAPTURE(describe(t));
        const std::string dtype_text = dtype_name(dtype);
        CAPTURE(dtype_text);
        Setup s;
        s.batch = 2;
        s.hq = 4;
        s.hkv = 2;
        s.n = 33;
        s.m = 47;
        s.d = 4;
        s.dv = 5;
        s.dtype = dtype;
        s.options.transform = t;
        s.options.scale = 1.0;
        BatchedProblem p(s);
        std::mt19937_64 rng(3);
        std::uniform_int_distribution<int> small(-1, 1);
        for (Tensor4* x : {&p.q, &p.k, &p.v})
          for (std::size_t b = 0; b < x->batch; ++b)
            for (std::size_t h = 0; h < x->heads; ++h)
              for (std::size_t i = 0; i < x->rows; ++i)
                for (std::size_t c = 0; c < x->cols; ++c)
                  x->set(b, h, i, c,
                         x == &p.v ? static_cast<float>(small(rng)) * 0.5f + 0.25f : static_cast<float>(small(rng)));
        p.run();
        check_against_reference(p);
      }
  }

  TEST_CASE("batched attention: scores of +-1e4 compute exactly; scores that may overflow float are refused") {
    // Integer Q and K with scale 1e4: the scores are exact multiples of 1e4
    // in float32, and every transform gives one-hot rows or exact ties.
    for (const Transform& t : kBatchedTransforms)
      for (DType dtype : kDtypes) {
        CAPTURE(describe(t));
        const std::string dtype_text = dtype_name(dtype);
        CAPTURE(dtype_text);
        Setup s;
        s.batch = 1;
        s.hq = 2;
        s.hkv = 1;
        s.n = 9;
        s.m = 11;
        s.d = 3;
        s.dv = 4;
        s.dtype = dtype;
        s.options.transform = t;
        s.options.scale = 1e4;
        s.options.causal = true;
        BatchedProblem p(s);
        std::mt19937_64 rng(8);
        std::uniform_int_distribution<int> small(-1, 1);
        for (Tensor4* x : {&p.q, &p.k, &p.v})
          for (std::size_t h = 0; h < x->heads; ++h)
            for (std::size_t i = 0; i < x->rows; ++i)
              for (std::size_t c = 0; c < x->cols; ++c) x->set(0, h, i, c, static_cast<float>(small(rng)));
        p.run();
        check_against_reference(p);
      }
    // bfloat16 has float's range: 1e19 * 1e19 overflows the float32 scores.
    Setup s;
    s.batch = 2;
    s.hq = 4;
    s.hkv = 2;
    s.n = 5;
    s.m = 6;
    s.d = 3;
    s.dv = 2;
    s.dtype = DType::bfloat16;
    BatchedProblem p(s);
    p.fill_random(2);
    p.q.set(1, 3, 2, 0, 2e19f);
    p.k.set(1, 1, 4, 1, 3e19f);
    const Tensor4 before = p.out;
    const std::string msg = message_of([&] { p.run(); });
    CAPTURE(msg);
    CHECK(msg.rfind("batched_attention_forward: the scores options.scale * q . k may overflow float: q[1, 3] row 2 "
                    "has norm ",
                    0) == 0);
    CHECK(msg.find("k[1, 1] row 4 has norm ") != std::string::npos);
    CHECK(p.out.same_bits(before));
    // The same entries in heads that never meet (q head 3 uses k head 1, not
    // 0) are fine.
    p.k.set(1, 1, 4, 1, 1.0f);
    p.k.set(1, 0, 4, 1, 3e19f);
    p.run();
    check_against_reference(p);
    // Entries of 1e19 in different columns: d x the largest entries (3e38)
    // is past the limit (1.7e38), the row norms' product (1e38) is not, and
    // the norms decide, as in attention.hpp.
    p.k.set(1, 0, 4, 1, 0.5f);
    p.q.set(1, 3, 2, 0, 1e19f);
    p.k.set(1, 1, 4, 1, 1e19f);
    p.run();
    check_against_reference(p);
    // Values near bfloat16's largest could make the float32 output overflow
    // with many keys... the bound of attention.hpp, per key/value head.
    Setup big = s;
    big.batch = 1;
    big.m = 20000;
    big.n = 1;
    BatchedProblem pv(big);
    pv.fill_random(4);
    pv.v.set(0, 1, 17, 0, 3.39e38f);  // bfloat16's largest, 0x7f7f
    const std::string vmsg = message_of([&] { pv.run(); });
    CAPTURE(vmsg);
    CHECK(vmsg.rfind("batched_attention_forward: v may make the output overflow float: |v[0, 1, 17, 0]| = ", 0) == 0);
  }

  // The name matches tests/wasm/main.cpp's "*2 and 3 threads*" filter: that
  // build has no threads.
  TEST_CASE("batched attention: NaN in padded rows is never read; the output is the same with 1, 2 and 3 threads") {
    Setup s;
    s.qlen = {70, 0, 45, 20};
    s.klen = {37, 90, 90, 0};
    s.options.transform = Transform::entmax15();
    s.options.causal = true;
    s.layout = Layout::padded;
    for (DType dtype : kDtypes) {
      const std::string dtype_text = dtype_name(dtype);
      CAPTURE(dtype_text);
      s.dtype = dtype;
      // 32 pairs (on the pool, one task each, with up to 32 threads; one
      // after the other, each on the pool, with 40) and one pair (its query
      // blocks on the pool).
      for (std::size_t batch : {std::size_t{4}, std::size_t{1}}) {
        Setup t = s;
        t.batch = batch;
        if (batch == 1) {
          t.hq = t.hkv = 1;
          t.n = t.m = 300;
          t.qlen = {300};
          t.klen = {250};
        }
        BatchedProblem one(t);
        one.fill_random(9);
        {
          ThreadsScope threads(1);
          one.run();
        }
        check_against_reference(one);
        for (std::size_t count : {2, 3, 40}) {
          CAPTURE(count);
          BatchedProblem more(t);
          more.fill_random(9);
          ThreadsScope threads(count);
          more.run();
          CHECK(one.out.same_bits(more.out));
        }
      }
    }
  }

  TEST_CASE("batched attention: the Device overload checks in the core and runs the backend's kernel") {
    std::vector<float> qd(2 * 3 * 4, 0.5f), kd(2 * 5 * 4, 0.25f), vd(2 * 5 * 2, 1.0f), od(2 * 3 * 2, 7.0f);
    const auto q = ConstBatchedTensor::bhnd(qd.data(), DType::float32, 1, 2, 3, 4);
    const auto k = ConstBatchedTensor::bhnd(kd.data(), DType::float32, 1, 2, 5, 4);
    const auto v = ConstBatchedTensor::bhnd(vd.data(), DType::float32, 1, 2, 5, 2);
    const auto out = BatchedTensor::bhnd(od.data(), DType::float32, 1, 2, 3, 2);
    static int calls = 0;
    static bool usable = true;
    BackendKernels table;
    table.available = [](std::string* why) {
      if (!usable && why) *why = "the batched-attention test backend is switched off";
      return usable;
    };
    register_backend(Device::cuda, table);
    CHECK_THROWS_WITH_AS(batched_attention_forward(Device::cuda, q, k, v, out, {}),
                         "batched_attention_forward: device cuda has no kernel for this op; run it on cpu", Error);
    table.batched_attention_forward = [](ConstBatchedTensor, ConstBatchedTensor, ConstBatchedTensor, BatchedTensor o,
                                         const BatchedAttentionOptions&) {
      ++calls;
      static_cast<float*>(o.data)[0] = -1.0f;
    };
    register_backend(Device::cuda, table);
    batched_attention_forward(Device::cuda, q, k, v, out, {});
    CHECK(calls == 1);
    CHECK(od[0] == -1.0f);
    // A bad argument gets the CPU's message and never reaches the kernel.
    BatchedAttentionOptions bad;
    bad.scale = std::numeric_limits<double>::infinity();
    const std::string on_cpu = message_of([&] { batched_attention_forward(Device::cpu, q, k, v, out, bad); });
    CHECK(on_cpu == "batched_attention_forward: options.scale is not finite (got inf, expected a finite number)");
    CHECK(message_of([&] { batched_attention_forward(Device::cuda, q, k, v, out, bad); }) == on_cpu);
    CHECK(calls == 1);
    // The CPU overload is the plain call.
    batched_attention_forward(Device::cpu, q, k, v, out, {});
    CHECK(calls == 1);
    CHECK(od[0] == doctest::Approx(1.0f));  // a weighted mean of ones
    usable = false;                         // Device::cuda unavailable again for the other tests
    CHECK_THROWS_WITH_AS(batched_attention_forward(Device::cuda, q, k, v, out, {}),
                         doctest::Contains("batched_attention_forward: device cuda is not available"), Error);
  }

  TEST_CASE("batched attention: bad input throws an error naming the argument and writes nothing") {
    // B = 2, Hq = 4, Hkv = 2, n = 5, m = 6, d = 3, dv = 2; float32 bhnd.
    Setup s;
    s.batch = 2;
    s.hq = 4;
    s.hkv = 2;
    s.n = 5;
    s.m = 6;
    s.d = 3;
    s.dv = 2;
    BatchedProblem p(s);
    p.fill_random(1);
    const Tensor4 sentinel = p.out;
    ConstBatchedTensor q, k, v;
    BatchedTensor out;
    BatchedAttentionOptions o;
    auto reset = [&] {
      q = p.q.cview();
      k = p.k.cview();
      v = p.v.cview();
      out = p.out.view();
      o = BatchedAttentionOptions{};
    };
    auto expect = [&](const std::string& message) {
      const std::string got = message_of([&] { batched_attention_forward(q, k, v, out, o); });
      CHECK(got == "batched_attention_forward: " + message);
      CHECK(p.out.same_bits(sentinel));
      reset();
    };
    reset();

    q.data = nullptr;
    expect("q has no data (got nullptr, expected 2x4x5x3 values)");
    v.dtype = static_cast<DType>(9);
    expect("v.dtype is not a DType (got 9, expected float32, bfloat16 or float16)");
    std::vector<std::uint16_t> raw(200);
    k = ConstBatchedTensor::bhnd(reinterpret_cast<const unsigned char*>(raw.data()) + 1, DType::bfloat16, 2, 2, 6, 3);
    expect(
        "k.data is not aligned to its dtype (got an address 1 bytes past a multiple of 2, expected a multiple of 2 "
        "for bfloat16)");

    q.batch = 0;
    expect("q.batch is 0 (got 0, expected batch >= 1)");
    q.heads = 0;
    expect("q.heads is 0 (got 0, expected Hq >= 1)");
    q.rows = 0;
    expect("q.rows is 0 (got 0, expected n >= 1)");
    q.cols = 0;
    expect("q.cols is 0 (got 0, expected d >= 1)");
    k.heads = 0;
    expect("k.heads is 0 (got 0, expected Hkv >= 1)");
    k.rows = 0;
    expect("k.rows is 0 (got 0, expected m >= 1)");
    v.cols = 0;
    expect("v.cols is 0 (got 0, expected dv >= 1)");

    k.batch = 1;
    expect("k.batch does not match q.batch (got 1, expected 2)");
    v.batch = 3;
    expect("v.batch does not match q.batch (got 3, expected 2)");
    out.batch = 1;
    expect("out.batch does not match q.batch (got 1, expected 2)");
    k.cols = 2;
    expect("k.cols does not match q.cols (got 2, expected 3)");
    v.heads = 1;
    expect("v.heads does not match k.heads (got 1, expected 2)");
    v.rows = 5;
    expect("v.rows does not match k.rows (got 5, expected 6)");
    out.heads = 2;
    expect("out.heads does not match q.heads (got 2, expected 4)");
    out.rows = 4;
    expect("out.rows does not match q.rows (got 4, expected 5)");
    out.cols = 3;
    expect("out.cols does not match v.cols (got 3, expected 2)");
    k.heads = v.heads = 3;
    expect(
        "q.heads is not a multiple of k.heads (got 4 query heads and 3 key/value heads, expected Hq a multiple of "
        "Hkv)");
    k.dtype = DType::bfloat16;
    expect("k.dtype does not match q.dtype (got bfloat16, expected float32)");
    out.dtype = DType::float16;
    expect("out.dtype is neither q.dtype nor float32 (got float16, q.dtype float32)");

    q.row_stride = 2;
    expect("q.row_stride is smaller than its cols (got 2, expected >= 3)");
    q.head_stride = 12;  // 5 rows of stride 3 need 15
    expect(
        "q.head_stride is too small: elements of the view overlap (got 12, expected >= 15, the extent of the "
        "dimensions with smaller strides)");
    v.batch_stride = 20;  // 2 heads of 12 need 24
    expect(
        "v.batch_stride is too small: elements of the view overlap (got 20, expected >= 24, the extent of the "
        "dimensions with smaller strides)");
    out.head_stride = out.row_stride = 2;  // equal strides: rows and heads coincide
    expect(
        "out.head_stride is too small: elements of the view overlap (got 2, expected >= 10, the extent of the "
        "dimensions with smaller strides)");
    k.batch_stride = std::numeric_limits<std::size_t>::max() / 2;
    {
      const std::string got = message_of([&] { batched_attention_forward(q, k, v, out, o); });
      CHECK(got.rfind("batched_attention_forward: k: its last element lies past the end of the address space", 0) == 0);
      reset();
    }
    k.batch_stride = std::numeric_limits<std::size_t>::max() - 4;
    k.batch = q.batch = v.batch = out.batch = 3;
    {
      const std::string got = message_of([&] { batched_attention_forward(q, k, v, out, o); });
      CHECK(got.rfind("batched_attention_forward: k: its strides reach past the end of the address space", 0) == 0);
      reset();
    }
    // A head_stride of 0 for one head is fine (it is never used)...
    {
      Setup one = s;
      one.hq = one.hkv = 1;
      BatchedProblem p1(one);
      p1.fill_random(3);
      p1.q.head_stride = p1.k.head_stride = p1.v.head_stride = p1.out.head_stride = 0;
      p1.run();
      check_against_reference(p1);
    }
    // ... but out may not share memory with an input, not even a part of it.
    out = BatchedTensor::bhnd(const_cast<float*>(p.q.f32.data()) + 10, DType::float32, 2, 4, 5, 2);
    expect(
        "out overlaps q (their memory ranges, first element to last, share bytes; expected out in memory of its "
        "own)");
    // v and an out that starts inside it, in one allocation: out's range
    // (80 floats) is longer than v's (48), and past its own allocation it
    // could reach q or k's, whose turn comes first.
    std::vector<float> v_then_out(24 + 80);
    std::copy(p.v.f32.begin(), p.v.f32.end(), v_then_out.begin());
    v = ConstBatchedTensor::bhnd(v_then_out.data(), DType::float32, 2, 2, 6, 2);
    out = BatchedTensor::bhnd(v_then_out.data() + 24, DType::float32, 2, 4, 5, 2);
    expect(
        "out overlaps v (their memory ranges, first element to last, share bytes; expected out in memory of its "
        "own)");
    // q = k (self-attention on one buffer) is fine.
    {
      const Tensor4 before = p.out;
      k = ConstBatchedTensor{p.q.data(), DType::float32, 2, 2, 5, 3, 60, 15, 3};
      v = ConstBatchedTensor{p.q.data(), DType::float32, 2, 2, 5, 2, 60, 15, 3};
      CHECK(message_of([&] { batched_attention_forward(q, k, v, out, o); }).empty());
      p.out = before;
      reset();
    }

    const std::int32_t bad_q[] = {5, -1}, long_q[] = {6, 0}, long_k[] = {7, 6};
    o.query_lengths = bad_q;
    expect("options.query_lengths[1] is out of range (got -1, expected 0 <= length <= n = 5)");
    o.query_lengths = long_q;
    expect("options.query_lengths[0] is out of range (got 6, expected 0 <= length <= n = 5)");
    o.key_lengths = long_k;
    expect("options.key_lengths[0] is out of range (got 7, expected 0 <= length <= m = 6)");

    o.scale = std::numeric_limits<double>::quiet_NaN();
    expect("options.scale is not finite (got nan, expected a finite number)");
    o.transform = Transform::entmax(0.5);
    expect("options.transform.alpha is out of range (got 0.5, expected 1 <= alpha <= 1000)");
    o.transform = Transform::topk_softmax(0);
    expect("options.transform.k is 0 for topk_softmax (got 0, expected k >= 1)");
    o.transform = {TransformKind::adaptive_span, 1.0, 0};
    expect(
        "options.transform is adaptive_span, which needs per-head inputs that batched attention does not take "
        "(expected softmax, sparsemax, entmax15, entmax or topk_softmax)");
    o.transform = {TransformKind::constrained_sparsemax, 2.0, 0};
    expect(
        "options.transform is constrained_sparsemax, which needs per-head inputs that batched attention does not "
        "take (expected softmax, sparsemax, entmax15, entmax or topk_softmax)");
    o.transform = {static_cast<TransformKind>(40), 1.0, 0};
    expect("options.transform.kind is not a transform (got 40, expected a TransformKind)");

    // Non-finite values within the valid lengths, named by [b, h, i, c].
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    p.q.f32[p.q.offset(1, 2, 3, 0)] = nan;
    reset();
    expect("q has a non-finite entry at [1, 2, 3, 0] (got NaN, expected a finite number)");
    p.q.f32[p.q.offset(1, 2, 3, 0)] = 0.5f;
    p.k.f32[p.k.offset(0, 1, 5, 2)] = inf;
    reset();
    expect("k has a non-finite entry at [0, 1, 5, 2] (got +inf, expected a finite number)");
    p.k.f32[p.k.offset(0, 1, 5, 2)] = 0.5f;
    p.v.f32[p.v.offset(1, 0, 0, 1)] = -inf;
    reset();
    expect("v has a non-finite entry at [1, 0, 0, 1] (got -inf, expected a finite number)");
    // Past the lengths they are padding: never scanned, never read.
    const std::int32_t short_q[] = {5, 3}, short_k[] = {6, 4};
    p.q.f32[p.q.offset(1, 2, 3, 0)] = nan;
    p.k.f32[p.k.offset(1, 1, 4, 2)] = inf;
    p.v.f32[p.v.offset(1, 0, 5, 1)] = -inf;
    p.v.f32[p.v.offset(1, 0, 0, 1)] = 0.25f;
    p.s.qlen = {5, 3};
    p.s.klen = {6, 4};
    reset();
    o.query_lengths = short_q;
    o.key_lengths = short_k;
    CHECK(message_of([&] { batched_attention_forward(q, k, v, out, o); }).empty());
    check_against_reference(p);
  }
}
