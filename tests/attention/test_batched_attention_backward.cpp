// Batched attention's gradients (batched_attention_backward,
// entgraph/batched_attention.hpp) against the float64 reference of
// attention/batched_reference.hpp (the transforms' Jacobians in closed
// form), itself checked here by central differences of a float64 forward.
// Every CPU instruction set; float32, bfloat16 and float16 inputs and
// gradients; bhnd, bnhd and padded views; grouped-query heads, whose key and
// value gradients sum; per-sequence lengths (0 included); causal and not;
// thread-count independence; float32's bits; every error of the header's
// list, with nothing written.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/attention_support.hpp"
#include "attention/batched_reference.hpp"
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

std::string message_of(const std::function<void()>& f) { return error_message(f); }

// Lengths with a sequence of no queries, one of no keys, and n_b > m_b
// (causal hides every key from the first queries).
BatchedShape varlen_shape() {
  BatchedShape s;
  s.batch = 4;
  s.qlen = {21, 0, 13, 9};
  s.klen = {10, 26, 26, 0};
  return s;
}

}  // namespace

TEST_SUITE("attention") {
  TEST_CASE("batched attention backward: the float64 reference's gradients are the central differences of its loss") {
    for (const Transform& t : kBatchedTransforms)
      for (bool causal : {false, true}) {
        CAPTURE(describe(t));
        CAPTURE(causal);
        BatchedShape s;
        s.batch = 2;
        s.n = 7;
        s.m = 9;
        s.d = 4;
        s.dv = 3;
        s.qlen = {7, 5};
        s.klen = {9, 6};
        Batched lib(s, DType::float32, DType::float32, Layout::bhnd);
        lib.o.transform = t;
        lib.o.causal = causal;
        lib.o.scale = 0.9;
        lib.fill(3);
        const Problem64 p = lib.as_float64();
        const Grads64 g = reference_grads(p);
        // Directional derivatives along random directions of q, k and v.
        std::mt19937_64 rng(5);
        std::normal_distribution<double> dist(0.0, 1.0);
        for (int which = 0; which < 3; ++which) {
          CAPTURE(which);
          Problem64 plus = p, minus = p;
          std::vector<double>& x_plus = which == 0 ? plus.q : which == 1 ? plus.k : plus.v;
          std::vector<double>& x_minus = which == 0 ? minus.q : which == 1 ? minus.k : minus.v;
          const std::vector<double>& grad = which == 0 ? g.q : which == 1 ? g.k : g.v;
          const double h = 1e-6;
          double analytic = 0.0;
          for (std::size_t x = 0; x < grad.size(); ++x) {
            const double dir = dist(rng);
            x_plus[x] += h * dir;
            x_minus[x] -= h * dir;
            analytic += grad[x] * dir;
          }
          const double numeric = (loss(plus) - loss(minus)) / (2 * h);
          CHECK(std::abs(numeric - analytic) <= 1e-6 * std::max(1.0, std::abs(analytic)));
        }
      }
  }

  TEST_CASE("batched attention backward: every transform, dtype and layout matches float64 on every ISA") {
    const BatchedShape s = varlen_shape();
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      for (const Transform& t : kBatchedTransforms)
        for (bool causal : {false, true})
          for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
            for (bool float32_grads : {false, true})
              for (Layout layout : {Layout::bhnd, Layout::bnhd, Layout::padded}) {
                if (dtype == DType::float32 && float32_grads) continue;
                CAPTURE(describe(t));
                CAPTURE(causal);
                const std::string dtype_text = dtype_name(dtype), layout_text = layout_name(layout);
                CAPTURE(dtype_text);
                CAPTURE(float32_grads);
                CAPTURE(layout_text);
                Batched p(s, dtype, float32_grads ? DType::float32 : dtype, layout);
                p.o.transform = t;
                p.o.causal = causal;
                p.o.scale = 2.0 / std::sqrt(static_cast<double>(s.d));  // sparse transforms sparse
                p.fill(17);
                p.backward();
                check_grad_reference(p, 1e-4);
              }
    }
  }

  TEST_CASE("batched attention backward: multi-query and multi-head heads, n = m = 130, full lengths") {
    for (std::size_t hkv : {std::size_t{1}, std::size_t{4}})
      for (const Transform& t : {Transform::softmax(), Transform::entmax15(), Transform::sparsemax()})
        for (bool causal : {false, true}) {
          CAPTURE(hkv);
          CAPTURE(describe(t));
          CAPTURE(causal);
          BatchedShape s;
          s.batch = 1;
          s.hkv = hkv;
          s.n = s.m = 130;  // two query blocks and a part
          s.d = s.dv = 16;
          Batched p(s, DType::bfloat16, DType::float32, Layout::bnhd);
          p.o.transform = t;
          p.o.causal = causal;
          p.fill(23);
          p.backward();
          check_grad_reference(p, 1e-4);
        }
  }

  TEST_CASE("batched attention backward: float32 gradients are attention_backward's, key/value ones summed in head order") {
    BatchedShape s = varlen_shape();
    Batched p(s, DType::float32, DType::float32, Layout::bhnd);
    p.o.transform = Transform::entmax15();
    p.o.causal = true;
    p.fill(29);
    p.backward();
    const std::size_t per = s.hq / s.hkv;
    std::size_t mismatched = 0;
    auto same = [&](float a, double b) { mismatched += !(a == static_cast<float>(b) && std::signbit(a) == std::signbit(b)); };
    AttentionOptions<float> ao;
    ao.transform = p.o.transform;
    ao.causal = true;
    for (std::size_t b = 0; b < s.batch; ++b) {
      const std::size_t nb = s.n_of(b), mb = s.m_of(b);
      if (nb == 0 || mb == 0) continue;
      for (std::size_t g = 0; g < s.hkv; ++g) {
        std::vector<float> gk_sum(mb * s.d, 0.0f), gv_sum(mb * s.dv, 0.0f);
        for (std::size_t h = g * per; h < (g + 1) * per; ++h) {
          auto head = [&](const Tensor4& t, std::size_t hh, std::size_t rows) {
            return ConstMatrix<float>(t.f32.data() + t.offset(b, hh, 0, 0), rows, t.cols, t.row_stride);
          };
          std::vector<float> gq(nb * s.d), gk(mb * s.d), gv(mb * s.dv);
          attention_backward<float>(head(p.q, h, nb), head(p.k, g, mb), head(p.v, g, mb), head(p.grad_out, h, nb),
                                    MatrixView<float>(gq.data(), nb, s.d), MatrixView<float>(gk.data(), mb, s.d),
                                    MatrixView<float>(gv.data(), mb, s.dv), ao);
          for (std::size_t i = 0; i < nb; ++i)
            for (std::size_t c = 0; c < s.d; ++c) same(gq[i * s.d + c], p.grad_q.get(b, h, i, c));
          for (std::size_t x = 0; x < gk.size(); ++x) gk_sum[x] += gk[x];
          for (std::size_t x = 0; x < gv.size(); ++x) gv_sum[x] += gv[x];
        }
        for (std::size_t j = 0; j < mb; ++j) {
          for (std::size_t c = 0; c < s.d; ++c) same(gk_sum[j * s.d + c], p.grad_k.get(b, g, j, c));
          for (std::size_t c = 0; c < s.dv; ++c) same(gv_sum[j * s.dv + c], p.grad_v.get(b, g, j, c));
        }
      }
    }
    CHECK(mismatched == 0);
  }

  // The name matches tests/wasm/main.cpp's "*2 and 3 threads*" filter: that
  // build has no threads.
  TEST_CASE("batched attention backward: the gradients are the same with 1, 2 and 3 threads (and 40)") {
    for (DType dtype : {DType::float32, DType::bfloat16}) {
      const std::string dtype_text = dtype_name(dtype);
      CAPTURE(dtype_text);
      // 8 key/value groups (on the pool, one task each, up to 8 threads; one
      // after the other, each on the pool, with 40).
      const BatchedShape s = varlen_shape();
      Batched one(s, dtype, dtype, Layout::padded);
      one.o.causal = true;
      one.fill(31);
      {
        ThreadsScope threads(1);
        one.backward();
      }
      for (std::size_t count : {2, 3, 40}) {
        CAPTURE(count);
        Batched more(s, dtype, dtype, Layout::padded);
        more.o.causal = true;
        more.fill(31);
        ThreadsScope threads(count);
        more.backward();
        CHECK(one.grad_q.same_bits(more.grad_q));
        CHECK(one.grad_k.same_bits(more.grad_k));
        CHECK(one.grad_v.same_bits(more.grad_v));
      }
    }
  }

  TEST_CASE("batched attention backward: 16-bit gradients past the format's range are +-inf") {
    // One key, softmax: p = 1, so grad_v = grad_out (summed over 4 query
    // heads in fp16's largest 65504: 4 x 65504 is past the range).
    BatchedShape s;
    s.batch = 1;
    s.hq = 4;
    s.hkv = 1;
    s.n = 1;
    s.m = 1;
    s.d = 2;
    s.dv = 2;
    Batched p(s, DType::float16, DType::float16, Layout::bhnd);
    p.o.transform = Transform::softmax();
    p.fill(1);
    for (std::size_t h = 0; h < s.hq; ++h) {
      p.grad_out.set(0, h, 0, 0, 65504.0f);
      p.grad_out.set(0, h, 0, 1, -65504.0f);
    }
    p.backward();
    CHECK(p.grad_v.get(0, 0, 0, 0) == std::numeric_limits<double>::infinity());
    CHECK(p.grad_v.get(0, 0, 0, 1) == -std::numeric_limits<double>::infinity());
    // grad_q and grad_k are 0 with one key (the softmax of one score is 1).
    CHECK(p.grad_q.get(0, 2, 0, 1) == 0.0);
    CHECK(p.grad_k.get(0, 0, 0, 0) == 0.0);
  }

  TEST_CASE("batched attention backward: bad input throws an error naming the argument and writes nothing") {
    BatchedShape s;
    s.batch = 2;
    s.hq = 4;
    s.hkv = 2;
    s.n = 5;
    s.m = 6;
    s.d = 3;
    s.dv = 2;
    s.qlen = {5, 3};
    Batched p(s, DType::bfloat16, DType::bfloat16, Layout::bhnd);
    p.fill(1);
    const Tensor4 sentinel_q = p.grad_q, sentinel_k = p.grad_k, sentinel_v = p.grad_v;
    ConstBatchedTensor q, k, v, go;
    BatchedTensor gq, gk, gv;
    BatchedAttentionOptions o;
    auto reset = [&] {
      q = p.q.cview();
      k = p.k.cview();
      v = p.v.cview();
      go = p.grad_out.cview();
      gq = p.grad_q.view();
      gk = p.grad_k.view();
      gv = p.grad_v.view();
      o = p.o;
    };
    auto expect = [&](const std::string& message) {
      const std::string got = message_of([&] { batched_attention_backward(q, k, v, go, gq, gk, gv, o); });
      CHECK(got == "batched_attention_backward: " + message);
      CHECK(p.grad_q.same_bits(sentinel_q));
      CHECK(p.grad_k.same_bits(sentinel_k));
      CHECK(p.grad_v.same_bits(sentinel_v));
      reset();
    };
    reset();

    // The forward's checks of q, k, v and the options.
    q.data = nullptr;
    expect("q has no data (got nullptr, expected 2x4x5x3 values)");
    k.cols = 2;
    expect("k.cols does not match q.cols (got 2, expected 3)");
    o.scale = std::numeric_limits<double>::infinity();
    expect("options.scale is not finite (got inf, expected a finite number)");
    o.transform = Transform::entmax(0.5);
    CHECK(message_of([&] { batched_attention_backward(q, k, v, go, gq, gk, gv, o); }).find("alpha") !=
          std::string::npos);
    reset();
    // grad_out and the gradients, like out.
    go.data = nullptr;
    expect("grad_out has no data (got nullptr, expected 2x4x5x2 values)");
    go.rows = 4;
    expect("grad_out.rows does not match q.rows (got 4, expected 5)");
    go.cols = 3;
    expect("grad_out.cols does not match v.cols (got 3, expected 2)");
    go.dtype = DType::float16;
    expect("grad_out.dtype is neither q.dtype nor float32 (got float16, q.dtype bfloat16)");
    gq.batch = 1;
    expect("grad_q.batch does not match q.batch (got 1, expected 2)");
    gq.cols = 2;
    expect("grad_q.cols does not match q.cols (got 2, expected 3)");
    gk.heads = 4;
    expect("grad_k.heads does not match k.heads (got 4, expected 2)");
    gk.rows = 5;
    expect("grad_k.rows does not match k.rows (got 5, expected 6)");
    gv.cols = 3;
    expect("grad_v.cols does not match v.cols (got 3, expected 2)");
    gv.dtype = DType::float16;
    expect("grad_v.dtype is neither q.dtype nor float32 (got float16, q.dtype bfloat16)");
    gk.row_stride = 2;
    expect("grad_k.row_stride is smaller than its cols (got 2, expected >= 3)");
    // Shared memory.
    gk.data = const_cast<void*>(k.data);
    expect("grad_k overlaps k (their memory ranges, first element to last, share bytes; expected grad_k in memory of "
           "its own)");
    gq.data = const_cast<void*>(go.data);  // checked before anything is read or written
    expect("grad_q overlaps grad_out (their memory ranges, first element to last, share bytes; expected grad_q in "
           "memory of its own)");
    gv.data = gk.data;
    expect("grad_v overlaps grad_k (their memory ranges, first element to last, share bytes; expected grad_v in memory "
           "of its own)");
    // Values: grad_out's valid rows only.
    p.grad_out.set(1, 2, 1, 1, std::numeric_limits<float>::infinity());
    expect("grad_out has a non-finite entry at [1, 2, 1, 1] (got +inf, expected a finite number)");
    p.grad_out.set(1, 2, 1, 1, 0.5f);
    // Row 3 of sequence 1 is past query_lengths[1] = 3: NaN there (as filled) is never read.
    CHECK(std::isnan(p.grad_out.get(1, 2, 3, 0)));
    p.q.set(0, 1, 4, 2, std::numeric_limits<float>::quiet_NaN());
    expect("q has a non-finite entry at [0, 1, 4, 2] (got NaN, expected a finite number)");
    p.q.set(0, 1, 4, 2, 0.25f);
    CHECK(message_of([&] { batched_attention_backward(q, k, v, go, gq, gk, gv, o); }).empty());
    CHECK_FALSE(p.grad_q.same_bits(sentinel_q));
  }

  TEST_CASE("batched attention backward: the Device overload checks in the core and runs the backend's kernel") {
    BatchedShape s;
    s.batch = 1;
    s.hq = s.hkv = 1;
    s.n = s.m = 4;
    s.d = s.dv = 2;
    Batched p(s, DType::float32, DType::float32, Layout::bhnd);
    p.fill(2);
    static int calls = 0;
    static bool usable = true;
    BackendKernels table;
    table.available = [](std::string* why) {
      if (!usable && why) *why = "the batched-backward test backend is switched off";
      return usable;
    };
    register_backend(Device::cuda, table);
    auto call = [&](Device device) {
      batched_attention_backward(device, p.q.cview(), p.k.cview(), p.v.cview(), p.grad_out.cview(), p.grad_q.view(),
                                 p.grad_k.view(), p.grad_v.view(), p.o);
    };
    CHECK(message_of([&] { call(Device::cuda); }) ==
          "batched_attention_backward: device cuda has no kernel for this op; run it on cpu");
    CHECK_FALSE(device_supports(Device::cuda, BackendOp::batched_attention_backward, {}));
    table.batched_attention_backward = [](ConstBatchedTensor, ConstBatchedTensor, ConstBatchedTensor,
                                          ConstBatchedTensor, BatchedTensor gq, BatchedTensor, BatchedTensor,
                                          const BatchedAttentionOptions&) {
      ++calls;
      static_cast<float*>(gq.data)[0] = -7.0f;
    };
    register_backend(Device::cuda, table);
    CHECK(device_supports(Device::cuda, BackendOp::batched_attention_backward, {}));
    call(Device::cuda);
    CHECK(calls == 1);
    CHECK(p.grad_q.get(0, 0, 0, 0) == -7.0);
    // A bad value gets the CPU's message and never reaches the kernel.
    p.grad_out.set(0, 0, 3, 1, std::numeric_limits<float>::quiet_NaN());
    const std::string on_cpu = message_of([&] { call(Device::cpu); });
    CHECK(on_cpu == "batched_attention_backward: grad_out has a non-finite entry at [0, 0, 3, 1] (got NaN, expected a "
                    "finite number)");
    CHECK(message_of([&] { call(Device::cuda); }) == on_cpu);
    CHECK(calls == 1);
    usable = false;  // Device::cuda unavailable again for the other tests
    CHECK(message_of([&] { call(Device::cuda); }).find("device cuda is not available") != std::string::npos);
  }
}
