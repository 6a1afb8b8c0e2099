// The gradients of batched attention on the GPU
// (entgraph/cuda/batched_attention.hpp, batched_attention_backward): the
// tensor-core kernels for bfloat16 and float16 against the core's float64
// attention_backward run head by head on the same rounded inputs, the key
// and value heads' gradients summed over their query heads. A gradient must
// be within 1e-3 of the largest |entry| of its float64 counterpart, plus half
// an ulp of a 16-bit result. Every gradient entry starts as NaN, so an entry
// the GPU did not write fails.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "batched_tensors.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/batched_attention.hpp"
#include "entgraph/cuda/batched_attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/device.hpp"
#include "entgraph/error.hpp"
#include "entgraph/transforms.hpp"
#include "support.hpp"

namespace entgraph::cuda {
namespace {

using test::Matrix;
using namespace test_batched;

// [B][H][rows][cols] in float64.
struct Grads {
  std::vector<double> q, k, v;
};

// The oracle: the core's float64 attention_backward per (sequence, query
// head) on the widened valid rows; key/value gradients summed over the
// query heads of their group; zeros past each sequence's lengths.
Grads reference(const HostTensor& q, const HostTensor& k, const HostTensor& v, const HostTensor& go, const Transform& t,
                bool causal, double scale, const Lengths& lengths) {
  const std::size_t B = q.batch, Hq = q.heads, Hkv = k.heads, n = q.rows, m = k.rows, d = q.cols, dv = v.cols;
  const std::size_t group = Hq / Hkv;
  Grads g{std::vector<double>(B * Hq * n * d, 0.0), std::vector<double>(B * Hkv * m * d, 0.0),
          std::vector<double>(B * Hkv * m * dv, 0.0)};
  for (std::size_t b = 0; b < B; ++b) {
    const std::size_t n_b = length_of(lengths.query, b, n), m_b = length_of(lengths.key, b, m);
    if (n_b == 0 || m_b == 0) continue;
    for (std::size_t h = 0; h < Hq; ++h) {
      const std::size_t kv = h / group;
      const Matrix<double> qd = head_matrix(q, b, h, n_b), kd = head_matrix(k, b, kv, m_b),
                           vd = head_matrix(v, b, kv, m_b), god = head_matrix(go, b, h, n_b);
      Matrix<double> gq(n_b, d), gk(m_b, d), gv(m_b, dv);
      AttentionOptions<double> o;
      o.transform = t;
      o.causal = causal;
      o.scale = scale;
      entgraph::attention_backward<double>(qd.view(), kd.view(), vd.view(), god.view(), gq.view(), gk.view(), gv.view(),
                                           o);
      for (std::size_t i = 0; i < n_b; ++i)
        for (std::size_t c = 0; c < d; ++c) g.q[((b * Hq + h) * n + i) * d + c] = gq(i, c);
      for (std::size_t j = 0; j < m_b; ++j) {
        for (std::size_t c = 0; c < d; ++c) g.k[((b * Hkv + kv) * m + j) * d + c] += gk(j, c);
        for (std::size_t c = 0; c < dv; ++c) g.v[((b * Hkv + kv) * m + j) * dv + c] += gv(j, c);
      }
    }
  }
  return g;
}

struct Call {
  Transform transform = Transform::entmax15();
  bool causal = false;
  double scale = 0.0;
  Lengths lengths;
  DType grad_dtype = DType::float32;
  Layout grad_layout = Layout::bhnd;
};

struct GpuGrads {
  HostTensor q, k, v;
};

// The device entry on copies of the inputs; returns the gradients as the
// GPU wrote them (each allocated NaN).
GpuGrads run_gpu(const HostTensor& q, const HostTensor& k, const HostTensor& v, const HostTensor& go, const Call& c) {
  DeviceArray<unsigned char> dq(q.bytes.data(), q.bytes.size()), dk(k.bytes.data(), k.bytes.size()),
      dv(v.bytes.data(), v.bytes.size()), dgo(go.bytes.data(), go.bytes.size());
  GpuGrads g{HostTensor(c.grad_dtype, c.grad_layout, q.batch, q.heads, q.rows, q.cols),
             HostTensor(c.grad_dtype, c.grad_layout, k.batch, k.heads, k.rows, k.cols),
             HostTensor(c.grad_dtype, c.grad_layout, v.batch, v.heads, v.rows, v.cols)};
  DeviceArray<unsigned char> gq(g.q.bytes.data(), g.q.bytes.size()), gk(g.k.bytes.data(), g.k.bytes.size()),
      gv(g.v.bytes.data(), g.v.bytes.size());
  const DeviceOptions o = device_options(c.transform, c.causal, c.scale, c.lengths);
  cuda::batched_attention_backward(q.view<const void*>(dq.data()), k.view<const void*>(dk.data()),
                                   v.view<const void*>(dv.data()), go.view<const void*>(dgo.data()),
                                   g.q.view<void*>(gq.data()), g.k.view<void*>(gk.data()), g.v.view<void*>(gv.data()),
                                   o.options);
  synchronize();
  gq.download(g.q.bytes.data());
  gk.download(g.k.bytes.data());
  gv.download(g.v.bytes.data());
  return g;
}

// One gradient against its reference: within 1e-3 max |want| plus half an
// ulp of got's dtype; rows past the sequence's `valid` rows exactly zero;
// padding columns untouched.
void check_gradient(const char* name, const HostTensor& got, const std::vector<double>& want,
                    const std::vector<std::int32_t>& valid) {
  const std::size_t B = got.batch, H = got.heads, rows = got.rows, cols = got.cols;
  double largest = 0.0;
  for (double x : want) largest = std::max(largest, std::abs(x));
  const double tol = 1e-3 * largest;
  double worst = 0.0;
  std::size_t bad = 0, unzeroed = 0, touched = 0;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < rows; ++i) {
        for (std::size_t c = 0; c < cols; ++c) {
          const double g = got.get(b, h, i, c), w = want[((b * H + h) * rows + i) * cols + c];
          const double err = std::abs(g - w);
          if (!(err <= tol + half_ulp(got.dtype, std::max(std::abs(g), std::abs(w))))) ++bad;
          if (std::isfinite(err)) worst = std::max(worst, err);
          if (i >= length_of(valid, b, rows) && g != 0.0) ++unzeroed;
        }
        if (got.padded)
          for (std::size_t c = cols; c < got.row_stride; ++c)
            if (!std::isnan(got.get(b, h, i, c))) ++touched;
      }
  CAPTURE(name);
  CAPTURE(largest);
  CAPTURE(worst);
  CHECK(bad == 0);
  CHECK(unzeroed == 0);
  CHECK(touched == 0);
}

void check_grads(const GpuGrads& got, const Grads& want, const Lengths& lengths) {
  check_gradient("grad_q", got.q, want.q, lengths.query);
  check_gradient("grad_k", got.k, want.k, lengths.key);
  check_gradient("grad_v", got.v, want.v, lengths.key);
}

void check_call(const HostTensor& q, const HostTensor& k, const HostTensor& v, const HostTensor& go, const Call& c) {
  CAPTURE(test::describe(c.transform));
  CAPTURE(c.causal);
  CAPTURE(dtype_name(q.dtype));
  CAPTURE(dtype_name(c.grad_dtype));
  CAPTURE(layout_name(c.grad_layout));
  check_grads(run_gpu(q, k, v, go, c), reference(q, k, v, go, c.transform, c.causal, c.scale, c.lengths), c.lengths);
}

// The transforms the backward runs (alpha > 2, whose slopes p^(2 - alpha)
// are unbounded near the threshold, is refused: see the misuse case).
std::vector<Transform> backward_transforms() {
  return {Transform::softmax(),    Transform::entmax(1.0), Transform::entmax15(),
          Transform::entmax(1.25), Transform::sparsemax(), Transform::topk_softmax(70)};
}

struct Inputs {
  HostTensor q, k, v, go;
};
Inputs random_inputs(DType t, Layout layout, std::size_t B, std::size_t Hq, std::size_t Hkv, std::size_t n,
                     std::size_t m, std::size_t d, std::uint64_t seed) {
  return {random_tensor(t, layout, B, Hq, n, d, 1.0, seed), random_tensor(t, layout, B, Hkv, m, d, 1.0, seed + 1),
          random_tensor(t, layout, B, Hkv, m, d, 1.0, seed + 2), random_tensor(t, layout, B, Hq, n, d, 1.0, seed + 3)};
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("batched attention backward: bfloat16 and float16 on tensor cores match float64, GQA") {
    // n, m not multiples of the 64-row tiles; 4 query heads share 2 key/value heads.
    const std::size_t B = 2, Hq = 4, Hkv = 2, n = 100, m = 130;
    for (DType t : {DType::bfloat16, DType::float16})
      for (std::size_t d : {64, 128}) {
        const Inputs x = random_inputs(t, Layout::bhnd, B, Hq, Hkv, n, m, d, 40 + d);
        for (const Transform& tr : backward_transforms())
          for (bool causal : {false, true})
            for (DType grads : {DType::float32, t}) {
              CAPTURE(d);
              Call c;
              c.transform = tr;
              c.causal = causal;
              c.grad_dtype = grads;
              check_call(x.q, x.k, x.v, x.go, c);
            }
      }
  }

  TEST_CASE("batched attention backward: variable lengths, padded rows and fully masked rows") {
    // Sequence 0 full; 1 has no keys; 2 fewer queries than keys; 3 more
    // queries than keys (causal: the first rows see nothing); 4 no queries.
    const std::size_t B = 5, Hq = 2, Hkv = 1, n = 150, m = 140, d = 64;
    const Lengths lengths{{150, 90, 50, 120, 0}, {140, 0, 139, 64, 30}};
    for (DType t : {DType::bfloat16, DType::float16}) {
      const Inputs x = random_inputs(t, Layout::bhnd, B, Hq, Hkv, n, m, d, 50);
      for (const Transform& tr :
           {Transform::softmax(), Transform::entmax15(), Transform::sparsemax(), Transform::topk_softmax(10)})
        for (bool causal : {false, true}) {
          Call c;
          c.transform = tr;
          c.causal = causal;
          c.lengths = lengths;
          check_call(x.q, x.k, x.v, x.go, c);
          c.grad_dtype = t;
          check_call(x.q, x.k, x.v, x.go, c);
        }
    }
  }

  TEST_CASE("batched attention backward: a loss-scaled float16 grad_out (dS past 65504) stays finite and exact") {
    // grad_out ~ N(0, 4096^2): dP = dO . v reaches ~1e5, past float16's
    // range, so dS is carried with a power-of-two exponent per row.
    const std::size_t B = 1, Hq = 2, Hkv = 1, n = 130, m = 130, d = 64;
    const Inputs x = random_inputs(DType::float16, Layout::bhnd, B, Hq, Hkv, n, m, d, 95);
    const HostTensor go = random_tensor(DType::float16, Layout::bhnd, B, Hq, n, d, 4096.0, 99);
    double largest = 0.0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < d; ++c) largest = std::max(largest, std::abs(go.get(0, 0, i, c)));
    REQUIRE(largest > 8192.0);
    for (const Transform& tr : {Transform::softmax(), Transform::entmax15()}) {
      Call c;
      c.transform = tr;
      c.causal = true;
      check_call(x.q, x.k, x.v, go, c);  // float32 gradients: 16-bit ones would overflow here
    }
  }

  TEST_CASE("batched attention backward: both layouts, gradients in another layout, many tiles") {
    // n = m = 300: five query and key tiles, the causal key kernel starts at
    // a later query tile for each key tile.
    const std::size_t B = 1, Hq = 2, Hkv = 1, n = 300, m = 300, d = 128;
    for (Layout in : {Layout::bnhd, Layout::padded}) {
      const Inputs x = random_inputs(DType::bfloat16, in, B, Hq, Hkv, n, m, d, 60);
      for (Layout out : {Layout::bhnd, Layout::padded}) {
        CAPTURE(layout_name(in));
        Call c;
        c.grad_layout = out;
        c.causal = true;
        check_call(x.q, x.k, x.v, x.go, c);
        c.grad_dtype = DType::bfloat16;
        c.transform = Transform::softmax();
        check_call(x.q, x.k, x.v, x.go, c);
      }
    }
  }

  TEST_CASE("batched attention backward: through the core's Device::cuda call, host memory") {
    const std::size_t B = 2, Hq = 2, Hkv = 1, n = 66, m = 97, d = 64;
    const std::vector<std::int32_t> ql = {66, 40}, kl = {97, 12};
    for (DType t : {DType::bfloat16, DType::float16}) {
      const Inputs x = random_inputs(t, Layout::padded, B, Hq, Hkv, n, m, d, 70);
      GpuGrads g{HostTensor(t, Layout::padded, B, Hq, n, d), HostTensor(DType::float32, Layout::bhnd, B, Hkv, m, d),
                 HostTensor(t, Layout::bnhd, B, Hkv, m, d)};
      BatchedAttentionOptions o;
      o.transform = Transform::entmax15();
      o.causal = true;
      o.query_lengths = ql.data();
      o.key_lengths = kl.data();
      entgraph::batched_attention_backward(
          Device::cuda, x.q.view<const void*>(x.q.bytes.data()), x.k.view<const void*>(x.k.bytes.data()),
          x.v.view<const void*>(x.v.bytes.data()), x.go.view<const void*>(x.go.bytes.data()),
          g.q.view<void*>(g.q.bytes.data()), g.k.view<void*>(g.k.bytes.data()), g.v.view<void*>(g.v.bytes.data()), o);
      CAPTURE(dtype_name(t));
      check_grads(g, reference(x.q, x.k, x.v, x.go, o.transform, true, 0.0, {ql, kl}), {ql, kl});
    }
  }

  TEST_CASE("batched attention backward: through the core's Device::cuda call on device memory") {
    const std::size_t B = 2, Hq = 4, Hkv = 2, n = 70, m = 90, d = 64;
    const std::vector<std::int32_t> ql = {70, 33}, kl = {90, 41};
    DeviceArray<std::int32_t> dql(ql.data(), ql.size()), dkl(kl.data(), kl.size());
    BatchedAttentionOptions o;
    o.transform = Transform::sparsemax();
    o.causal = true;
    o.query_lengths = dql.data();
    o.key_lengths = dkl.data();
    // The call on device copies; the gradients downloaded into g.
    const auto on_device = [&](const Inputs& x, GpuGrads& g) {
      DeviceArray<unsigned char> dq(x.q.bytes.data(), x.q.bytes.size()), dk(x.k.bytes.data(), x.k.bytes.size()),
          dv(x.v.bytes.data(), x.v.bytes.size()), dgo(x.go.bytes.data(), x.go.bytes.size()),
          gq(g.q.bytes.data(), g.q.bytes.size()), gk(g.k.bytes.data(), g.k.bytes.size()),
          gv(g.v.bytes.data(), g.v.bytes.size());
      entgraph::batched_attention_backward(Device::cuda, Memory::device, x.q.view<const void*>(dq.data()),
                                           x.k.view<const void*>(dk.data()), x.v.view<const void*>(dv.data()),
                                           x.go.view<const void*>(dgo.data()), g.q.view<void*>(gq.data()),
                                           g.k.view<void*>(gk.data()), g.v.view<void*>(gv.data()), o);
      gq.download(g.q.bytes.data());
      gk.download(g.k.bytes.data());
      gv.download(g.v.bytes.data());
    };
    const auto grads = [&] {
      return GpuGrads{HostTensor(DType::float16, Layout::bhnd, B, Hq, n, d),
                      HostTensor(DType::float16, Layout::bhnd, B, Hkv, m, d),
                      HostTensor(DType::float16, Layout::bhnd, B, Hkv, m, d)};
    };
    const Inputs x = random_inputs(DType::float16, Layout::bhnd, B, Hq, Hkv, n, m, d, 90);
    GpuGrads g = grads();
    on_device(x, g);
    check_grads(g, reference(x.q, x.k, x.v, x.go, o.transform, true, 0.0, {ql, kl}), {ql, kl});

    // A NaN in grad_out's valid rows: the GPU scans, the core decides with
    // the CPU's message; no gradient written.
    Inputs bad = x;
    bad.go.set(1, 3, 20, 7, std::nan(""));
    BatchedAttentionOptions host = o;
    host.query_lengths = ql.data();
    host.key_lengths = kl.data();
    GpuGrads on_cpu_grads = grads();
    std::string on_cpu;
    try {
      entgraph::batched_attention_backward(
          Device::cpu, bad.q.view<const void*>(bad.q.bytes.data()), bad.k.view<const void*>(bad.k.bytes.data()),
          bad.v.view<const void*>(bad.v.bytes.data()), bad.go.view<const void*>(bad.go.bytes.data()),
          on_cpu_grads.q.view<void*>(on_cpu_grads.q.bytes.data()),
          on_cpu_grads.k.view<void*>(on_cpu_grads.k.bytes.data()),
          on_cpu_grads.v.view<void*>(on_cpu_grads.v.bytes.data()), host);
    } catch (const Error& e) {
      on_cpu = e.what();
    }
    REQUIRE(on_cpu.find("grad_out has a non-finite entry") != std::string::npos);
    GpuGrads untouched = grads();
    const std::vector<unsigned char> before = untouched.q.bytes;
    CHECK_THROWS_WITH_AS(on_device(bad, untouched), on_cpu.c_str(), Error);
    CHECK(untouched.q.bytes == before);
  }

  TEST_CASE("batched attention backward: misuse throws entgraph::Error naming the argument, before any output") {
    const std::size_t B = 1, H = 1, n = 64, m = 64, d = 64;
    const auto expect = [](const auto& call, const std::string& message) {
      CAPTURE(message);
      try {
        call();
        FAIL("no exception");
      } catch (const Error& e) {
        CHECK(std::string(e.what()).find(message) != std::string::npos);
      }
    };
    // The backend's call on host tensors (inputs x, grad_out go, options o)
    // must throw `message` and leave the gradients as they were (NaN).
    const auto refused = [&](const Inputs& x, const HostTensor& go, const BatchedAttentionOptions& o,
                             const std::string& message) {
      HostTensor gq(DType::float32, Layout::bhnd, B, H, n, d), gk = gq, gv = gq;
      expect(
          [&] {
            entgraph::batched_attention_backward(
                Device::cuda, x.q.view<const void*>(x.q.bytes.data()), x.k.view<const void*>(x.k.bytes.data()),
                x.v.view<const void*>(x.v.bytes.data()), go.view<const void*>(go.bytes.data()),
                gq.view<void*>(gq.bytes.data()), gk.view<void*>(gk.bytes.data()), gv.view<void*>(gv.bytes.data()), o);
          },
          message);
      for (unsigned char byte : gq.bytes) CHECK(byte == 0xff);
    };
    // float32 runs on the CPU only: the backend refuses it, naming the dtype.
    const Inputs x32 = random_inputs(DType::float32, Layout::bhnd, B, H, H, n, m, d, 80);
    refused(x32, x32.go, {}, "q.dtype is not supported (got float32");
    // grad_out in float32 beside bfloat16 inputs: the kernels read q's format.
    const Inputs x = random_inputs(DType::bfloat16, Layout::bhnd, B, H, H, n, m, d, 81);
    refused(x, x32.go, {}, "grad_out.dtype is not q's (got float32, expected bfloat16");
    // alpha > 2 has unbounded slopes p^(2 - alpha) (the CPU's backward
    // pivots on the largest).
    BatchedAttentionOptions o;
    o.transform = Transform::entmax(3.0);
    refused(x, x.go, o, "options.transform is not supported by the gradients on cuda (got entmax");
  }
}

}  // namespace entgraph::cuda
