// Batched attention on the GPU (entgraph/cuda/batched_attention.hpp): the
// tensor-core kernel for bfloat16 and float16 and the float32 path, against
// the core's float64 attention run head by head on the same rounded inputs.
// Float32 outputs must be within 1e-4 of the largest |output|; 16-bit
// outputs within one rounding (half an ulp of the format) more. Every entry
// of out starts as NaN, so an entry the GPU did not write fails.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/batched_attention.hpp"
#include "entgraph/cuda/batched_attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/device.hpp"
#include "entgraph/error.hpp"
#include "entgraph/transforms.hpp"
#include "batched_tensors.hpp"
#include "support.hpp"

namespace entgraph::cuda {
namespace {

using test::Matrix;
using namespace test_batched;

// The oracle: the core's float64 attention per (sequence, head) on the
// widened inputs; [B][Hq][n][dv], zero rows past each sequence's queries.
std::vector<double> reference(const HostTensor& q, const HostTensor& k, const HostTensor& v, const Transform& t,
                              bool causal, double scale, const Lengths& lengths) {
  const std::size_t B = q.batch, Hq = q.heads, n = q.rows, dv = v.cols, group = q.heads / k.heads;
  std::vector<double> out(B * Hq * n * dv, 0.0);
  for (std::size_t b = 0; b < B; ++b) {
    const std::size_t n_b = length_of(lengths.query, b, n), m_b = length_of(lengths.key, b, k.rows);
    if (n_b == 0 || m_b == 0) continue;
    for (std::size_t h = 0; h < Hq; ++h) {
      const std::size_t g = h / group;
      const Matrix<double> qd = head_matrix(q, b, h, n_b), kd = head_matrix(k, b, g, m_b),
                           vd = head_matrix(v, b, g, m_b);
      Matrix<double> od(n_b, dv);
      AttentionOptions<double> o;
      o.transform = t;
      o.causal = causal;
      o.scale = scale;
      entgraph::attention_forward<double>(qd.view(), kd.view(), vd.view(), od.view(), o);
      for (std::size_t i = 0; i < n_b; ++i)
        for (std::size_t c = 0; c < dv; ++c) out[((b * Hq + h) * n + i) * dv + c] = od(i, c);
    }
  }
  return out;
}

struct Call {
  Transform transform = Transform::entmax15();
  bool causal = false;
  double scale = 0.0;
  Lengths lengths;
  BatchedAttentionTuning tuning;
  DType out_dtype = DType::float32;
  Layout out_layout = Layout::bhnd;
};

// The device entry on copies of q, k, v; returns out as the GPU wrote it.
HostTensor run_gpu(const HostTensor& q, const HostTensor& k, const HostTensor& v, const Call& c) {
  DeviceArray<unsigned char> dq(q.bytes.data(), q.bytes.size()), dk(k.bytes.data(), k.bytes.size()),
      dv(v.bytes.data(), v.bytes.size());
  HostTensor out(c.out_dtype, c.out_layout, q.batch, q.heads, q.rows, v.cols);
  DeviceArray<unsigned char> dout(out.bytes.data(), out.bytes.size());
  const DeviceOptions o = device_options(c.transform, c.causal, c.scale, c.lengths);
  cuda::batched_attention_forward(q.view<const void*>(dq.data()), k.view<const void*>(dk.data()),
                                  v.view<const void*>(dv.data()), out.view<void*>(dout.data()), o.options, c.tuning);
  synchronize();
  dout.download(out.bytes.data());
  return out;
}

// got against want: |got - want| <= 1e-4 max |want| + half an ulp of got's
// dtype; rows past a sequence's queries exactly zero; the padding columns of
// a padded out untouched (still NaN).
void check_close(const HostTensor& got, const std::vector<double>& want, const Lengths& lengths) {
  const std::size_t B = got.batch, H = got.heads, n = got.rows, dv = got.cols;
  double largest = 0.0;
  for (double x : want) largest = std::max(largest, std::abs(x));
  const double tol = 1e-4 * largest;
  double worst = 0.0;
  std::size_t bad = 0, unzeroed = 0;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t c = 0; c < dv; ++c) {
          const double g = got.get(b, h, i, c), w = want[((b * H + h) * n + i) * dv + c];
          const double err = std::abs(g - w);
          if (!(err <= tol + half_ulp(got.dtype, std::max(std::abs(g), std::abs(w))))) ++bad;
          if (std::isfinite(err)) worst = std::max(worst, err);
          if (i >= length_of(lengths.query, b, n) && g != 0.0) ++unzeroed;
        }
  CAPTURE(largest);
  CAPTURE(worst);
  CHECK(bad == 0);
  CHECK(unzeroed == 0);
  if (got.padded) {
    std::size_t touched = 0;
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t c = dv; c < got.row_stride; ++c)
            if (!std::isnan(got.get(b, h, i, c))) ++touched;
    CHECK(touched == 0);
  }
}

void check_call(const HostTensor& q, const HostTensor& k, const HostTensor& v, const Call& c) {
  CAPTURE(test::describe(c.transform));
  CAPTURE(c.causal);
  CAPTURE(dtype_name(q.dtype));
  CAPTURE(dtype_name(c.out_dtype));
  CAPTURE(layout_name(c.out_layout));
  CAPTURE(c.tuning.candidate_capacity);
  check_close(run_gpu(q, k, v, c), reference(q, k, v, c.transform, c.causal, c.scale, c.lengths), c.lengths);
}

// Everything the GPU implements; alpha = 1 through the entmax kind too;
// top-k with k within a key tile and across tiles (k = 1 and k >= m: the
// ties case).
std::vector<Transform> gpu_transforms() {
  return {Transform::softmax(),    Transform::entmax(1.0),     Transform::entmax15(),
          Transform::entmax(1.25), Transform::sparsemax(),     Transform::entmax(2.0),
          Transform::entmax(3.0),  Transform::topk_softmax(5), Transform::topk_softmax(70)};
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("batched attention: bfloat16 and float16 on tensor cores match float64, every transform, GQA") {
    // n, m not multiples of the 64-row tiles; 4 query heads share 2 key/value heads.
    const std::size_t B = 2, Hq = 4, Hkv = 2, n = 100, m = 130;
    for (DType t : {DType::bfloat16, DType::float16})
      for (std::size_t d : {64, 128}) {
        const HostTensor q = random_tensor(t, Layout::bhnd, B, Hq, n, d, 1.0, 1 + d);
        const HostTensor k = random_tensor(t, Layout::bhnd, B, Hkv, m, d, 1.0, 2 + d);
        const HostTensor v = random_tensor(t, Layout::bhnd, B, Hkv, m, d, 1.0, 3 + d);
        for (const Transform& tr : gpu_transforms())
          for (bool causal : {false, true})
            for (DType out : {DType::float32, t}) {
              CAPTURE(d);
              Call c;
              c.transform = tr;
              c.causal = causal;
              c.out_dtype = out;
              check_call(q, k, v, c);
            }
      }
  }

  TEST_CASE("batched attention: variable lengths, padded rows and fully masked rows") {
    // Sequence 0 full; 1 has no keys (every row sees nothing); 2 has fewer
    // queries than keys; 3 more queries than keys (causal: the first rows
    // see nothing); 4 no queries.
    const std::size_t B = 5, Hq = 2, Hkv = 1, n = 150, m = 140, d = 64;
    const Lengths lengths{{150, 90, 50, 120, 0}, {140, 0, 139, 64, 30}};
    for (DType t : {DType::bfloat16, DType::float16}) {
      const HostTensor q = random_tensor(t, Layout::bhnd, B, Hq, n, d, 1.0, 11);
      const HostTensor k = random_tensor(t, Layout::bhnd, B, Hkv, m, d, 1.0, 12);
      const HostTensor v = random_tensor(t, Layout::bhnd, B, Hkv, m, d, 1.0, 13);
      for (const Transform& tr :
           {Transform::softmax(), Transform::entmax15(), Transform::sparsemax(), Transform::topk_softmax(10)})
        for (bool causal : {false, true}) {
          Call c;
          c.transform = tr;
          c.causal = causal;
          c.lengths = lengths;
          check_call(q, k, v, c);
          c.out_dtype = t;
          check_call(q, k, v, c);
        }
    }
  }

  TEST_CASE("batched attention: both layouts, padded rows, out in another layout") {
    const std::size_t B = 2, Hq = 3, Hkv = 3, n = 70, m = 65, d = 128;
    for (Layout in : {Layout::bhnd, Layout::bnhd, Layout::padded}) {
      const HostTensor q = random_tensor(DType::bfloat16, in, B, Hq, n, d, 1.0, 21);
      const HostTensor k = random_tensor(DType::bfloat16, in, B, Hkv, m, d, 1.0, 22);
      const HostTensor v = random_tensor(DType::bfloat16, in, B, Hkv, m, d, 1.0, 23);
      for (Layout out : {Layout::bhnd, Layout::bnhd, Layout::padded}) {
        CAPTURE(layout_name(in));
        Call c;
        c.out_layout = out;
        c.causal = true;
        check_call(q, k, v, c);
        c.out_dtype = DType::bfloat16;
        c.transform = Transform::softmax();
        check_call(q, k, v, c);
      }
    }
  }

  TEST_CASE("batched attention: many key tiles, sparse rows and local attention (skipped tiles)") {
    // Scores with a spread of about 3 (small supports), and queries equal to
    // their own key (attention near the diagonal): most key tiles hold no
    // support key for a block, and the output sweep skips them.
    const std::size_t B = 1, H = 2, n = 300, m = 1000, d = 64;
    HostTensor q = random_tensor(DType::bfloat16, Layout::bhnd, B, H, n, d, 1.0, 31);
    const HostTensor k = random_tensor(DType::bfloat16, Layout::bhnd, B, H, m, d, 1.0, 32);
    const HostTensor v = random_tensor(DType::bfloat16, Layout::bhnd, B, H, m, d, 1.0, 33);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < d; ++c) q.set(0, 1, i, c, k.get(0, 1, i + (m - n), c));  // head 1: local
    for (const Transform& tr : {Transform::softmax(), Transform::entmax15(), Transform::sparsemax(),
                                Transform::entmax(1.25), Transform::entmax(3.0), Transform::topk_softmax(3)})
      for (bool causal : {false, true})
        for (double scale : {0.0, 0.4, 2.0}) {
          CAPTURE(scale);
          Call c;
          c.transform = tr;
          c.causal = causal;
          c.scale = scale;
          check_call(q, k, v, c);
        }
  }

  TEST_CASE("batched attention: ties at the threshold") {
    // Keys repeated in groups of 8, V rows distinct: scores tie exactly (the
    // same products in the same order), and for sparse rows a whole group is
    // in or out of the support together.
    const std::size_t n = 64, m = 256, d = 64;
    for (DType t : {DType::bfloat16, DType::float16}) {
      const HostTensor q = random_tensor(t, Layout::bhnd, 1, 1, n, d, 1.0, 41);
      HostTensor k = random_tensor(t, Layout::bhnd, 1, 1, m, d, 1.0, 42);
      const HostTensor v = random_tensor(t, Layout::bhnd, 1, 1, m, d, 1.0, 43);
      for (std::size_t j = 0; j < m; ++j)
        for (std::size_t c = 0; c < d; ++c) k.set(0, 0, j, c, k.get(0, 0, j - j % 8, c));
      // Uniform rows: every score equal (q = 0), all keys tie at the max.
      HostTensor flat = q;
      for (std::size_t c = 0; c < d; ++c) flat.set(0, 0, 0, c, 0.0);
      // Top-k also with k = 1, at a group's end and one past it (k = 8, 9:
      // the whole next group ties at the threshold), and k >= m (softmax).
      std::vector<Transform> transforms = gpu_transforms();
      for (std::size_t kk : {1, 8, 9, 300}) transforms.push_back(Transform::topk_softmax(kk));
      for (const Transform& tr : transforms)
        for (double scale : {0.0, 3.0}) {
          CAPTURE(scale);
          Call c;
          c.transform = tr;
          c.scale = scale;
          check_call(q, k, v, c);
          check_call(flat, k, v, c);
        }
    }
  }

  TEST_CASE("batched attention: scores of +-1e4") {
    // q_i = a_i u and k_j = b_j u with u in {-1, 1}^64, a_i in {-1, 1} and
    // b_j in {-3, ..., 3}: scores a_i b_j 64 are exact integers, and the
    // scale takes them to +-1e4. Each row's support is its tied top group
    // (the next group is 3333 below), scattered over the key tiles. (Random
    // scores of that size would differ from the float64 ones by float32's
    // ulp at 1e4, about 1e-3, enough to move the weights of near ties.)
    const std::size_t H = 2, n = 80, m = 200, d = 64;
    const double scale = 1e4 / (64.0 * 3.0);
    for (DType t : {DType::bfloat16, DType::float16}) {
      HostTensor q(t, Layout::bhnd, 1, H, n, d), k(t, Layout::bhnd, 1, H, m, d);
      const HostTensor v = random_tensor(t, Layout::bhnd, 1, H, m, d, 1.0, 53);
      std::mt19937_64 rng(51);
      std::uniform_int_distribution<int> sign(0, 1), level(-3, 3);
      for (std::size_t h = 0; h < H; ++h) {
        std::vector<double> u(d);
        for (double& x : u) x = sign(rng) ? 1.0 : -1.0;
        for (std::size_t i = 0; i < n; ++i) {
          const double a = sign(rng) ? 1.0 : -1.0;
          for (std::size_t c = 0; c < d; ++c) q.set(0, h, i, c, a * u[c]);
        }
        for (std::size_t j = 0; j < m; ++j) {
          const double b = level(rng);
          for (std::size_t c = 0; c < d; ++c) k.set(0, h, j, c, b * u[c]);
        }
      }
      for (const Transform& tr : gpu_transforms())
        for (bool causal : {false, true}) {
          Call c;
          c.transform = tr;
          c.causal = causal;
          c.scale = scale;
          check_call(q, k, v, c);
          c.scale = -scale;  // the bottom group instead
          check_call(q, k, v, c);
        }
    }
  }

  TEST_CASE("batched attention: tiny candidate capacities take the narrowing sweeps and stay exact") {
    const std::size_t n = 200, m = 700, d = 64;
    const HostTensor q = random_tensor(DType::bfloat16, Layout::bhnd, 2, 2, n, d, 1.0, 61);
    const HostTensor k = random_tensor(DType::bfloat16, Layout::bhnd, 2, 1, m, d, 1.0, 62);
    const HostTensor v = random_tensor(DType::bfloat16, Layout::bhnd, 2, 1, m, d, 1.0, 63);
    // Top-k: k within the capacity (floors raised as the list fills), past
    // it (the key bracket's sweeps) and past a sequence's keys.
    for (const Transform& tr :
         {Transform::entmax15(), Transform::entmax(1.25), Transform::sparsemax(), Transform::entmax(3.0),
          Transform::topk_softmax(4), Transform::topk_softmax(40), Transform::topk_softmax(400)})
      for (bool causal : {false, true})
        for (std::size_t capacity : {1, 5, 33, 2000}) {
          Call c;
          c.transform = tr;
          c.causal = causal;
          c.tuning.candidate_capacity = capacity;
          c.lengths = {{200, 150}, {700, 333}};
          check_call(q, k, v, c);
        }
  }

  TEST_CASE("batched attention: float32 runs the fused kernel head by head, lengths included") {
    const std::size_t B = 2, Hq = 4, Hkv = 2, n = 90, m = 77;
    for (std::size_t d : {32, 64, 128}) {
      const HostTensor q = random_tensor(DType::float32, Layout::bhnd, B, Hq, n, d, 1.0, 71);
      const HostTensor k = random_tensor(DType::float32, Layout::bhnd, B, Hkv, m, d, 1.0, 72);
      const HostTensor v = random_tensor(DType::float32, Layout::bhnd, B, Hkv, m, 64, 1.0, 73);
      for (const Transform& tr : {Transform::softmax(), Transform::entmax15(), Transform::topk_softmax(6)})
        for (bool causal : {false, true}) {
          CAPTURE(d);
          Call c;
          c.transform = tr;
          c.causal = causal;
          check_call(q, k, v, c);
          c.lengths = {{90, 3}, {0, 77}};
          check_call(q, k, v, c);
          c.tuning.candidate_capacity = 3;
          check_call(q, k, v, c);
        }
    }
  }

  TEST_CASE("batched attention: through the core's Device::cuda call, host memory in every dtype") {
    const std::size_t B = 2, Hq = 2, Hkv = 1, n = 66, m = 97, d = 64;
    const std::vector<std::int32_t> ql = {66, 40}, kl = {97, 12};
    for (DType t : {DType::float32, DType::bfloat16, DType::float16})
      for (Layout layout : {Layout::bhnd, Layout::padded}) {
        const HostTensor q = random_tensor(t, layout, B, Hq, n, d, 1.0, 81);
        const HostTensor k = random_tensor(t, layout, B, Hkv, m, d, 1.0, 82);
        const HostTensor v = random_tensor(t, layout, B, Hkv, m, d, 1.0, 83);
        HostTensor out(t, layout, B, Hq, n, d);
        BatchedAttentionOptions o;
        o.transform = Transform::entmax15();
        o.causal = true;
        o.query_lengths = ql.data();
        o.key_lengths = kl.data();
        entgraph::batched_attention_forward(Device::cuda, q.view<const void*>(q.bytes.data()),
                                            k.view<const void*>(k.bytes.data()), v.view<const void*>(v.bytes.data()),
                                            out.view<void*>(out.bytes.data()), o);
        CAPTURE(dtype_name(t));
        CAPTURE(layout_name(layout));
        check_close(out, reference(q, k, v, o.transform, true, 0.0, {ql, kl}), {ql, kl});
      }
  }

  TEST_CASE("batched attention: through the core's Device::cuda call on device memory, lengths there too") {
    const std::size_t B = 2, Hq = 4, Hkv = 2, n = 70, m = 90, d = 64;
    const std::vector<std::int32_t> ql = {70, 33}, kl = {90, 41};
    DeviceArray<std::int32_t> dql(ql.data(), ql.size()), dkl(kl.data(), kl.size());
    BatchedAttentionOptions o;
    o.transform = Transform::entmax15();
    o.causal = true;
    o.query_lengths = dql.data();
    o.key_lengths = dkl.data();
    const auto on_device = [&](const HostTensor& q, const HostTensor& k, const HostTensor& v, HostTensor& out,
                               const BatchedAttentionOptions& opts) {
      DeviceArray<unsigned char> dq(q.bytes.data(), q.bytes.size()), dk(k.bytes.data(), k.bytes.size()),
          dv(v.bytes.data(), v.bytes.size()), dout(out.bytes.data(), out.bytes.size());
      try {
        entgraph::batched_attention_forward(Device::cuda, Memory::device, q.view<const void*>(dq.data()),
                                            k.view<const void*>(dk.data()), v.view<const void*>(dv.data()),
                                            out.view<void*>(dout.data()), opts);
      } catch (...) {
        dout.download(out.bytes.data());
        throw;
      }
      dout.download(out.bytes.data());
    };
    for (DType t : {DType::float32, DType::bfloat16})
      for (Layout layout : {Layout::bhnd, Layout::bnhd}) {
        if (t == DType::float32 && layout == Layout::bnhd) continue;  // float32 reads contiguous rows
        CAPTURE(dtype_name(t));
        CAPTURE(layout_name(layout));
        const HostTensor q = random_tensor(t, layout, B, Hq, n, d, 1.0, 101);
        const HostTensor k = random_tensor(t, layout, B, Hkv, m, d, 1.0, 102);
        const HostTensor v = random_tensor(t, layout, B, Hkv, m, d, 1.0, 103);
        HostTensor out(t, layout, B, Hq, n, d);
        on_device(q, k, v, out, o);
        check_close(out, reference(q, k, v, o.transform, true, 0.0, {ql, kl}), {ql, kl});
      }

    // On a stream of the caller's (DeviceStreamScope): enqueued there; the
    // outputs are there once the stream is done.
    {
      cudaStream_t stream = nullptr;
      check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "test: cudaStreamCreate");
      const HostTensor q = random_tensor(DType::bfloat16, Layout::bhnd, B, Hq, n, d, 1.0, 107);
      const HostTensor k = random_tensor(DType::bfloat16, Layout::bhnd, B, Hkv, m, d, 1.0, 108);
      const HostTensor v = random_tensor(DType::bfloat16, Layout::bhnd, B, Hkv, m, d, 1.0, 109);
      HostTensor out(DType::bfloat16, Layout::bhnd, B, Hq, n, d);
      DeviceArray<unsigned char> dq(q.bytes.data(), q.bytes.size()), dk(k.bytes.data(), k.bytes.size()),
          dv(v.bytes.data(), v.bytes.size()), dout(out.bytes.data(), out.bytes.size());
      {
        const DeviceStreamScope scope(Device::cuda, stream);
        entgraph::batched_attention_forward(Device::cuda, Memory::device, q.view<const void*>(dq.data()),
                                            k.view<const void*>(dk.data()), v.view<const void*>(dv.data()),
                                            out.view<void*>(dout.data()), o);
      }
      synchronize(stream);
      dout.download(out.bytes.data());
      check_close(out, reference(q, k, v, o.transform, true, 0.0, {ql, kl}), {ql, kl});
      cudaStreamDestroy(stream);
    }

    // Bad values in device memory: the GPU scans, the core decides, with the
    // CPU's message for the same host arrays; out untouched.
    BatchedAttentionOptions host = o;
    host.query_lengths = ql.data();
    host.key_lengths = kl.data();
    const HostTensor q = random_tensor(DType::bfloat16, Layout::bhnd, B, Hq, n, d, 1.0, 104);
    const HostTensor k = random_tensor(DType::bfloat16, Layout::bhnd, B, Hkv, m, d, 1.0, 105);
    const HostTensor v = random_tensor(DType::bfloat16, Layout::bhnd, B, Hkv, m, d, 1.0, 106);
    HostTensor q_nan = q, k_big = k, q_big = q;
    q_nan.set(1, 3, 20, 7, std::nan(""));
    q_big.set(1, 2, 30, 5, 4e19);
    k_big.set(1, 1, 40, 5, -4e19);
    struct Bad {
      const char* what;
      const HostTensor *q, *k;
    };
    for (const Bad& bad : {Bad{"NaN", &q_nan, &k}, Bad{"scores", &q_big, &k_big}}) {
      CAPTURE(bad.what);
      HostTensor host_out(DType::bfloat16, Layout::bhnd, B, Hq, n, d);
      std::string on_cpu;
      try {
        entgraph::batched_attention_forward(Device::cpu, bad.q->view<const void*>(bad.q->bytes.data()),
                                            bad.k->view<const void*>(bad.k->bytes.data()),
                                            v.view<const void*>(v.bytes.data()),
                                            host_out.view<void*>(host_out.bytes.data()), host);
      } catch (const Error& e) {
        on_cpu = e.what();
      }
      REQUIRE(!on_cpu.empty());
      HostTensor out(DType::bfloat16, Layout::bhnd, B, Hq, n, d);
      const std::vector<unsigned char> before = out.bytes;
      CHECK_THROWS_WITH_AS(on_device(*bad.q, *bad.k, v, out, o), on_cpu.c_str(), Error);
      CHECK(out.bytes == before);
    }
    const std::vector<std::int32_t> too_long = {70, 91};
    DeviceArray<std::int32_t> dbad(too_long.data(), too_long.size());
    BatchedAttentionOptions bad_lengths = o;
    bad_lengths.key_lengths = dbad.data();
    HostTensor out(DType::bfloat16, Layout::bhnd, B, Hq, n, d);
    CHECK_THROWS_WITH_AS(on_device(q, k, v, out, bad_lengths),
                         "batched_attention_forward: options.key_lengths[1] is out of range (got 91, expected 0 <= "
                         "length <= m = 90)",
                         Error);
  }

  TEST_CASE("batched attention: the caller's workspace and stream") {
    const std::size_t B = 3, H = 2, n = 130, m = 200, d = 128;
    const HostTensor q = random_tensor(DType::float16, Layout::bnhd, B, H, n, d, 1.0, 91);
    const HostTensor k = random_tensor(DType::float16, Layout::bnhd, B, H, m, d, 1.0, 92);
    const HostTensor v = random_tensor(DType::float16, Layout::bnhd, B, H, m, d, 1.0, 93);
    BatchedAttentionOptions o;
    o.transform = Transform::entmax(1.75);
    const std::size_t bytes =
        batched_attention_workspace_bytes(q.view<const void*>(nullptr), k.view<const void*>(nullptr), o);
    CHECK(bytes > 0);
    BatchedAttentionOptions softmax = o;
    softmax.transform = Transform::softmax();
    CHECK(batched_attention_workspace_bytes(q.view<const void*>(nullptr), k.view<const void*>(nullptr), softmax) == 0);
    DeviceArray<unsigned char> dq(q.bytes.data(), q.bytes.size()), dk(k.bytes.data(), k.bytes.size()),
        dv(v.bytes.data(), v.bytes.size()), workspace(bytes);
    HostTensor out(DType::float32, Layout::bhnd, B, H, n, d);
    DeviceArray<unsigned char> dout(out.bytes.data(), out.bytes.size());
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "test: cudaStreamCreate");
    for (int repeat = 0; repeat < 2; ++repeat)  // the slots are free again after a call
      cuda::batched_attention_forward(q.view<const void*>(dq.data()), k.view<const void*>(dk.data()),
                                      v.view<const void*>(dv.data()), out.view<void*>(dout.data()), o, workspace.data(),
                                      bytes, stream);
    synchronize(stream);
    dout.download(out.bytes.data());
    check_close(out, reference(q, k, v, o.transform, false, 0.0, {}), {});
    CHECK_THROWS_WITH_AS(cuda::batched_attention_forward(q.view<const void*>(dq.data()), k.view<const void*>(dk.data()),
                                                         v.view<const void*>(dv.data()), out.view<void*>(dout.data()),
                                                         o, workspace.data(), bytes - 1, stream),
                         doctest::Contains("workspace_bytes is too small"), Error);
    cudaStreamDestroy(stream);
  }

  TEST_CASE("batched attention: misuse throws entgraph::Error naming the argument, before any output") {
    const std::size_t B = 1, H = 2, n = 16, m = 16;
    const HostTensor q = random_tensor(DType::bfloat16, Layout::bhnd, B, H, n, 64, 1.0, 1);
    const HostTensor k = random_tensor(DType::bfloat16, Layout::bhnd, B, H, m, 64, 1.0, 2);
    const HostTensor v = random_tensor(DType::bfloat16, Layout::bhnd, B, H, m, 64, 1.0, 3);
    const HostTensor q32 = random_tensor(DType::bfloat16, Layout::bhnd, B, H, n, 32, 1.0, 4);
    const HostTensor k32 = random_tensor(DType::bfloat16, Layout::bhnd, B, H, m, 32, 1.0, 5);
    DeviceArray<unsigned char> dq(q.bytes.data(), q.bytes.size()), dk(k.bytes.data(), k.bytes.size()),
        dv(v.bytes.data(), v.bytes.size()), dq32(q32.bytes.data(), q32.bytes.size()),
        dk32(k32.bytes.data(), k32.bytes.size());
    HostTensor out(DType::bfloat16, Layout::bhnd, B, H, n, 64);
    DeviceArray<unsigned char> dout(out.bytes.data(), out.bytes.size());
    const auto Q = q.view<const void*>(dq.data()), K = k.view<const void*>(dk.data()),
               V = v.view<const void*>(dv.data());
    const auto O = out.view<void*>(dout.data());
    BatchedAttentionOptions o;

    CHECK_THROWS_WITH_AS(cuda::batched_attention_forward(q32.view<const void*>(dq32.data()),
                                                         k32.view<const void*>(dk32.data()), V, O, o),
                         doctest::Contains("q.cols (d) is not supported"), Error);
    o.transform = Transform::of(TransformKind::adaptive_span, 1.0, 0);
    CHECK_THROWS_WITH_AS(cuda::batched_attention_forward(Q, K, V, O, o),
                         doctest::Contains("options.transform is adaptive_span"), Error);
    o.transform = Transform::entmax15();
    o.scale = std::nan("");
    CHECK_THROWS_WITH_AS(cuda::batched_attention_forward(Q, K, V, O, o), doctest::Contains("scale"), Error);
    o.scale = 0.0;
    // Host memory where device memory is expected.
    CHECK_THROWS_WITH_AS(cuda::batched_attention_forward(q.view<const void*>(q.bytes.data()), K, V, O, o),
                         doctest::Contains("not a device pointer"), Error);
    // A row stride that is not a multiple of 8 elements.
    auto odd = Q;
    odd.rows = n - 1;
    odd.row_stride = 68;
    auto odd_out = O;
    odd_out.rows = n - 1;
    CHECK_THROWS_WITH_AS(cuda::batched_attention_forward(odd, K, V, odd_out, o), doctest::Contains("q.row_stride"),
                         Error);
    // Mixed 16-bit dtypes (float32 out is the one mix allowed).
    auto half_out = O;
    half_out.dtype = DType::float16;
    CHECK_THROWS_WITH_AS(cuda::batched_attention_forward(Q, K, V, half_out, o), doctest::Contains("dtype"), Error);
    // A float32 out overlapping q.
    auto overlapping = O;
    overlapping.data = const_cast<void*>(Q.data);
    overlapping.dtype = DType::float32;
    CHECK_THROWS_WITH_AS(cuda::batched_attention_forward(Q, K, V, overlapping, o), doctest::Contains("out overlaps q"),
                         Error);
    // float32 needs contiguous rows.
    const HostTensor f = random_tensor(DType::float32, Layout::padded, B, H, n, 64, 1.0, 6);
    DeviceArray<unsigned char> df(f.bytes.data(), f.bytes.size());
    HostTensor fout(DType::float32, Layout::bhnd, B, H, n, 64);
    DeviceArray<unsigned char> dfout(fout.bytes.data(), fout.bytes.size());
    const HostTensor fk = random_tensor(DType::float32, Layout::bhnd, B, H, m, 64, 1.0, 7);
    DeviceArray<unsigned char> dfk(fk.bytes.data(), fk.bytes.size());
    CHECK_THROWS_WITH_AS(
        cuda::batched_attention_forward(f.view<const void*>(df.data()), fk.view<const void*>(dfk.data()),
                                        fk.view<const void*>(dfk.data()), fout.view<void*>(dfout.data()), o),
        doctest::Contains("q.row_stride is not its cols"), Error);
    // Nothing was written.
    synchronize();
    std::vector<unsigned char> after(out.bytes.size());
    dout.download(after.data());
    CHECK(after == out.bytes);
    std::vector<unsigned char> fafter(fout.bytes.size());
    dfout.download(fafter.data());
    CHECK(fafter == fout.bytes);
  }
}

}  // namespace entgraph::cuda
