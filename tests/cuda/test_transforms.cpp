// The CUDA transforms against the CPU core: the same float inputs through
// entgraph::cuda and through the core's float64 path (its reference kernels),
// compared row by row within 1e-5 of the row's largest value (widened for
// alpha > 2 by the conditioning bound the CPU's own float tests use); plus the
// invariants (finite, non-negative, rows sum to 1, masked entries exactly 0),
// exact structure (top-k supports, ties, consistency between kinds), the
// device-pointer API (in place, streams, the unchecked variants) and errors.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "entgraph/cuda/device.hpp"
#include "entgraph/device.hpp"
#include "entgraph/cuda/transforms.hpp"
#include "transforms/transform_support.hpp"

namespace entgraph::cuda {
namespace {

using test::Matrix;
using Mask = Matrix<std::uint8_t>;

constexpr float kSentinel = 42.0f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The kinds the GPU runs, with the parameters swept.
std::vector<Transform> gpu_transforms(std::size_t n) {
  std::vector<Transform> ts = {Transform::softmax(), Transform::sparsemax(), Transform::entmax15()};
  for (double alpha : {1.0, 1.0001, 1.25, 1.5, 1.75, 2.0, 3.0, 10.0}) ts.push_back(Transform::entmax(alpha));
  for (std::size_t k : {std::size_t{1}, std::size_t{8}, std::size_t{100}, n + 5}) ts.push_back(Transform::topk_softmax(k));
  return ts;
}

MaskView view_of(const Mask* mask) { return mask ? MaskView(mask->data.data(), mask->rows, mask->cols) : MaskView{}; }

Matrix<float> gpu_forward(const Transform& t, const Matrix<float>& z, const Mask* mask = nullptr) {
  Matrix<float> p(z.rows, z.cols, kSentinel);
  entgraph::transform_forward(Device::cuda, t, z.view(), p.view(), view_of(mask));
  return p;
}

Matrix<double> cpu_forward64(const Transform& t, const Matrix<float>& z, const Mask* mask = nullptr) {
  const Matrix<double> zd = z.cast<double>();
  Matrix<double> p(z.rows, z.cols);
  entgraph::transform_forward<double>(t, zd.view(), p.view(), view_of(mask));
  return p;
}

Matrix<float> gpu_backward(const Transform& t, const Matrix<float>& p, const Matrix<float>& g) {
  Matrix<float> dz(p.rows, p.cols, kSentinel);
  entgraph::transform_backward(Device::cuda, t, p.view(), g.view(), dz.view());
  return dz;
}

Matrix<double> cpu_backward64(const Transform& t, const Matrix<float>& p, const Matrix<float>& g) {
  const Matrix<double> pd = p.cast<double>(), gd = g.cast<double>();
  Matrix<double> dz(p.rows, p.cols);
  entgraph::transform_backward<double>(t, pd.view(), gd.view(), dz.view());
  return dz;
}

// Row i of z as the transform sees it: masked entries are -inf.
std::vector<double> effective_row(const Matrix<float>& z, const Mask* mask, std::size_t i) {
  std::vector<double> row(z.cols);
  for (std::size_t j = 0; j < z.cols; ++j)
    row[j] = mask && !(*mask)(i, j) ? -test::kInf : static_cast<double>(z(i, j));
  return row;
}

bool nothing_to_attend(const Matrix<float>& z, const Mask* mask, std::size_t i) {
  for (std::size_t j = 0; j < z.cols; ++j)
    if ((!mask || (*mask)(i, j)) && z(i, j) != kNegInf) return false;
  return true;
}

// Every row of the GPU's forward against the core's float64 forward, plus the
// invariants.
void check_forward(const Transform& t, const Matrix<float>& z, const Mask* mask = nullptr) {
  const Matrix<float> p = gpu_forward(t, z, mask);
  const Matrix<double> ref = cpu_forward64(t, z, mask);
  const test::DistStats st = test::dist_stats(p, mask, [&](std::size_t i) { return nothing_to_attend(z, mask, i); });
  CHECK(st.non_finite == 0);
  CHECK(st.min_p >= 0.0);
  CHECK(st.max_sum_err <= 1e-5);
  CHECK(st.masked_nonzero == 0);
  double worst = 0, worst_tol = 0;
  std::size_t bad_rows = 0;
  for (std::size_t i = 0; i < z.rows; ++i) {
    const std::vector<double> zi = effective_row(z, mask, i);
    std::vector<test::LD> ri(z.cols);
    for (std::size_t j = 0; j < z.cols; ++j) ri[j] = ref(i, j);
    // 6e-8: the CPU's float tests' rounding unit for the conditioning bound.
    const double tol = std::max(1e-5, 2 * test::entmax_conditioning(t, zi, ri, 6e-8));
    const double err = test::row_rel_err(test::row_of(p, i), ri);
    if (err > tol) ++bad_rows;
    if (err > worst) {
      worst = err;
      worst_tol = tol;
    }
    // Masked and -inf entries are exactly 0.
    for (std::size_t j = 0; j < z.cols; ++j)
      if (zi[j] == -test::kInf && p(i, j) != 0.0f) ++bad_rows;
  }
  CAPTURE(worst);
  CAPTURE(worst_tol);
  CHECK(bad_rows == 0);
}

// The backward on probs = the core's forward (a valid forward output) and
// random upstream gradients, against the core's float64 backward.
void check_backward(const Transform& t, const Matrix<float>& z, const Mask* mask, std::uint64_t seed) {
  const Matrix<float> p = cpu_forward64(t, z, mask).cast<float>();
  const Matrix<float> g = test::random_matrix<float>(z.rows, z.cols, 1.0, seed);
  const Matrix<float> dz = gpu_backward(t, p, g);
  const Matrix<double> ref = cpu_backward64(t, p, g);
  std::size_t bad = 0;
  double worst = 0;
  for (std::size_t i = 0; i < z.rows; ++i) {
    // Relative to the row's largest |dz|, floored for rows whose gradient
    // vanishes (one-hot softmax rows: dz = 0 up to rounding).
    double scale = 1e-6;
    for (std::size_t j = 0; j < z.cols; ++j)
      if (std::isfinite(ref(i, j))) scale = std::max(scale, std::abs(ref(i, j)));
    for (std::size_t j = 0; j < z.cols; ++j) {
      const double r = ref(i, j), d = dz(i, j);
      if (std::abs(r) > std::numeric_limits<float>::max()) {  // beyond float (alpha > 2, tiny p)
        bad += !(std::isinf(d) && (d > 0) == (r > 0));
        continue;
      }
      const double err = std::abs(d - r) / scale;
      worst = std::max(worst, std::isnan(err) ? test::kInf : err);
      bad += !(err <= 1e-5);
      if (p(i, j) == 0.0f && dz(i, j) != 0.0f) ++bad;  // off the support: exactly 0
    }
  }
  CAPTURE(worst);
  CHECK(bad == 0);
}

// -inf in a few places of z (every 5th entry of row 1, all of row 2) and,
// when masked, a row with every entry masked (row 3).
Matrix<float> scores_for(std::size_t rows, std::size_t n, double scale, std::uint64_t seed) {
  Matrix<float> z = test::random_matrix<float>(rows, n, scale, seed);
  if (rows > 1)
    for (std::size_t j = 0; j < n; j += 5) z(1, j) = kNegInf;
  if (rows > 2)
    for (std::size_t j = 0; j < n; ++j) z(2, j) = kNegInf;
  return z;
}

Mask mask_for(std::size_t rows, std::size_t n, std::uint64_t seed) {
  Mask m = test::random_mask(rows, n, 0.7, seed);
  if (rows > 3)
    for (std::size_t j = 0; j < n; ++j) m(3, j) = 0;
  return m;
}

std::size_t rows_for(std::size_t n) { return n >= 50000 ? 4 : n >= 4096 ? 6 : 16; }

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("cuda transforms: every transform matches the CPU core on random rows, with -inf and masks") {
    for (std::size_t n : {1, 7, 64, 512, 4096, 8193, 50000}) {
      CAPTURE(n);
      const std::size_t rows = rows_for(n);
      const Matrix<float> z = scores_for(rows, n, 1.0, 100 + n);
      const Mask mask = mask_for(rows, n, 200 + n);
      for (const Transform& t : gpu_transforms(n)) {
        CAPTURE(test::describe(t));
        check_forward(t, z);
        check_forward(t, z, &mask);
      }
    }
  }

  TEST_CASE("cuda transforms: adversarial magnitudes (1e4, 1e-6, a 1e4 offset, 1e20 spikes) match the CPU core") {
    for (std::size_t n : {2, 7, 512, 4096}) {
      CAPTURE(n);
      for (double scale : {1e4, 1e-6}) {
        CAPTURE(scale);
        const Matrix<float> z = scores_for(rows_for(n), n, scale, 300 + n);
        for (const Transform& t : gpu_transforms(n)) {
          CAPTURE(test::describe(t));
          check_forward(t, z);
        }
      }
      Matrix<float> shifted = test::random_matrix<float>(4, n, 1.0, 400 + n);
      for (float& x : shifted.data) x += 1e4f;
      shifted(0, n / 2) = 1e20f;  // a spike: one-hot
      shifted(1, 0) = -1e20f;
      for (const Transform& t : gpu_transforms(n)) {
        CAPTURE(test::describe(t));
        check_forward(t, shifted);
        const Matrix<float> p = gpu_forward(t, shifted);
        CHECK(p(0, n / 2) == doctest::Approx(1.0).epsilon(1e-7));
      }
    }
  }

  TEST_CASE("cuda transforms: the backward matches the CPU core") {
    for (std::size_t n : {1, 7, 64, 512, 4096, 8193, 50000}) {
      CAPTURE(n);
      const std::size_t rows = rows_for(n);
      const Matrix<float> z = scores_for(rows, n, 1.0, 500 + n);
      const Mask mask = mask_for(rows, n, 600 + n);
      for (const Transform& t : gpu_transforms(n)) {
        CAPTURE(test::describe(t));
        check_backward(t, z, nullptr, 700 + n);
        check_backward(t, z, &mask, 800 + n);
      }
    }
  }

  TEST_CASE("cuda transforms: ties and equal rows") {
    // A row of equal scores is uniform for every transform (top-k keeps the
    // ties with its k-th entry, so all of them).
    for (std::size_t n : {1, 7, 300, 9000}) {
      CAPTURE(n);
      const Matrix<float> z(3, n, 2.5f);
      for (const Transform& t : gpu_transforms(n)) {
        CAPTURE(test::describe(t));
        const Matrix<float> p = gpu_forward(t, z);
        for (float x : p.data) CHECK(x == doctest::Approx(1.0 / static_cast<double>(n)).epsilon(1e-6));
      }
    }
    // Top-k keeps every score equal to the k-th largest: {3, 2, 2, 2} of
    // {3, 1, 2, 2, 2, 0} for k = 2, 3 and 4.
    const std::vector<float> row = {3, 1, 2, 2, 2, 0};
    Matrix<float> z(1, row.size());
    z.data = row;
    for (std::size_t k : {2, 3, 4}) {
      CAPTURE(k);
      const Matrix<float> p = gpu_forward(Transform::topk_softmax(k), z);
      CHECK(test::support_size(test::row_of(p, 0)) == 4);
      CHECK(p(0, 1) == 0.0f);
      CHECK(p(0, 5) == 0.0f);
    }
    // Quantised scores (many ties), long rows: the top-k support equals the
    // CPU's exactly, and sparsemax/entmax match it too.
    for (std::size_t n : {64, 4096, 20000}) {
      CAPTURE(n);
      Matrix<float> q = test::random_matrix<float>(4, n, 1.0, 900 + n);
      for (float& x : q.data) x = std::round(x * 4.0f) / 4.0f;
      for (const Transform& t : gpu_transforms(n)) {
        CAPTURE(test::describe(t));
        check_forward(t, q);
        if (t.kind != TransformKind::topk_softmax) continue;
        const Matrix<float> p = gpu_forward(t, q);
        Matrix<float> cpu(q.rows, q.cols);
        entgraph::transform_forward<float>(t, q.view(), cpu.view());
        for (std::size_t i = 0; i < q.rows; ++i) CHECK(test::same_support(test::row_of(p, i), test::row_of(cpu, i)));
      }
    }
    // Entries exactly at the sparsemax threshold get exactly 0.
    Matrix<float> at(1, 3);
    at.data = {1.0f, 0.0f, 0.0f};
    const Matrix<float> ps = gpu_forward(Transform::sparsemax(), at);
    CHECK(ps(0, 0) == 1.0f);
    CHECK(ps(0, 1) == 0.0f);
    CHECK(ps(0, 2) == 0.0f);
  }

  TEST_CASE("cuda transforms: rows with nothing to attend to give zeros; masked NaN is ignored") {
    for (std::size_t n : {1, 33, 10000}) {
      CAPTURE(n);
      Matrix<float> z = test::random_matrix<float>(3, n, 1.0, 1000 + n);
      Mask mask(3, n, 1);
      for (std::size_t j = 0; j < n; ++j) {
        z(0, j) = kNegInf;                                      // all -inf
        mask(1, j) = 0;                                         // all masked
        z(1, j) = std::numeric_limits<float>::quiet_NaN();      // ... and NaN under the mask
      }
      z(2, n - 1) = std::numeric_limits<float>::infinity();  // +inf, masked
      mask(2, n - 1) = 0;
      for (const Transform& t : gpu_transforms(n)) {
        CAPTURE(test::describe(t));
        Matrix<float> p;
        REQUIRE_NOTHROW(p = gpu_forward(t, z, &mask));
        for (std::size_t j = 0; j < n; ++j) {
          CHECK(p(0, j) == 0.0f);
          CHECK(p(1, j) == 0.0f);
        }
        CHECK(p(2, n - 1) == 0.0f);
        check_forward(t, z, &mask);
      }
    }
  }

  TEST_CASE("cuda transforms: entmax at alpha 1, 1.5 and 2 runs softmax, entmax15 and sparsemax exactly") {
    const Matrix<float> z = scores_for(8, 700, 2.0, 1100);
    const Mask mask = mask_for(8, 700, 1101);
    const std::pair<Transform, Transform> pairs[] = {{Transform::entmax(1.0), Transform::softmax()},
                                                     {Transform::entmax(1.5), Transform::entmax15()},
                                                     {Transform::entmax(2.0), Transform::sparsemax()}};
    for (const auto& [a, b] : pairs) {
      CAPTURE(test::describe(a));
      CHECK(test::bytes_equal(gpu_forward(a, z, &mask).data, gpu_forward(b, z, &mask).data));
      const Matrix<float> p = gpu_forward(b, z), g = test::random_matrix<float>(8, 700, 1.0, 1102);
      CHECK(test::bytes_equal(gpu_backward(a, p, g).data, gpu_backward(b, p, g).data));
    }
    // Top-k with k >= n is softmax; the top-k backward is softmax's.
    CHECK(test::bytes_equal(gpu_forward(Transform::topk_softmax(700), z).data,
                            gpu_forward(Transform::softmax(), z).data));
  }

  TEST_CASE("cuda transforms: device pointers, in place, on a stream; the unchecked variants give the same bits") {
    const std::size_t rows = 37, n = 1000;
    const Matrix<float> z = scores_for(rows, n, 1.0, 1200);
    const Mask mask = mask_for(rows, n, 1201);
    const Matrix<float> g = test::random_matrix<float>(rows, n, 1.0, 1202);
    cudaStream_t stream = nullptr;
    REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
    for (const Transform& t : gpu_transforms(n)) {
      CAPTURE(test::describe(t));
      const Matrix<float> expect = gpu_forward(t, z, &mask);
      DeviceArray<float> d(z.data.data(), z.data.size());
      DeviceArray<std::uint8_t> dm(mask.data.data(), mask.data.size());
      cuda::transform_forward(t, d.data(), d.data(), rows, n, dm.data(), stream);  // in place
      synchronize(stream);
      std::vector<float> back(z.data.size());
      d.download(back.data());
      CHECK(test::bytes_equal(back, expect.data));
      DeviceArray<float> d2(z.data.data(), z.data.size()), out(z.data.size());
      cuda::transform_forward_unchecked(t, d2.data(), out.data(), rows, n, dm.data(), stream);
      synchronize(stream);
      out.download(back.data());
      CHECK(test::bytes_equal(back, expect.data));
      // Backward in place over grad_probs, and unchecked.
      const Matrix<float> dz = gpu_backward(t, expect, g);
      DeviceArray<float> dp(expect.data.data(), expect.data.size()), dg(g.data.data(), g.data.size());
      cuda::transform_backward(t, dp.data(), dg.data(), dg.data(), rows, n, stream);
      synchronize(stream);
      dg.download(back.data());
      CHECK(test::bytes_equal(back, dz.data));
      DeviceArray<float> dg2(g.data.data(), g.data.size());
      cuda::transform_backward_unchecked(t, dp.data(), dg2.data(), dp.data(), rows, n, stream);  // over probs
      synchronize(stream);
      dp.download(back.data());
      CHECK(test::bytes_equal(back, dz.data));
    }
    cudaStreamDestroy(stream);
  }

  TEST_CASE("cuda transforms: the core's Device API on device memory gives the host path's bits and messages") {
    const std::size_t rows = 19, n = 700;
    const Matrix<float> z = scores_for(rows, n, 1.0, 1300);
    const Mask mask = mask_for(rows, n, 1301);
    const Matrix<float> g = test::random_matrix<float>(rows, n, 1.0, 1302);
    for (const Transform& t : {Transform::softmax(), Transform::entmax15(), Transform::entmax(1.3), Transform::topk_softmax(9)}) {
      CAPTURE(test::describe(t));
      const Matrix<float> expect = gpu_forward(t, z, &mask);
      DeviceArray<float> dz(z.data.data(), z.data.size()), dp(z.data.size());
      DeviceArray<std::uint8_t> dm(mask.data.data(), mask.data.size());
      entgraph::transform_forward(Device::cuda, Memory::device, t, ConstMatrix<float>(dz.data(), rows, n),
                                  MatrixView<float>(dp.data(), rows, n), MaskView(dm.data(), rows, n));
      std::vector<float> back(z.data.size());
      dp.download(back.data());
      CHECK(test::bytes_equal(back, expect.data));
      const Matrix<float> grad = gpu_backward(t, expect, g);
      DeviceArray<float> dg(g.data.data(), g.data.size()), dout(z.data.size());
      entgraph::transform_backward(Device::cuda, Memory::device, t, ConstMatrix<float>(dp.data(), rows, n),
                                   ConstMatrix<float>(dg.data(), rows, n), MatrixView<float>(dout.data(), rows, n));
      dout.download(back.data());
      CHECK(test::bytes_equal(back, grad.data));
    }
    // A NaN in device memory: the CPU's message, nothing written.
    Matrix<float> bad = z;
    bad(4, 5) = std::numeric_limits<float>::quiet_NaN();
    std::string on_cpu;
    try {
      Matrix<float> p(rows, n);
      entgraph::transform_forward(Device::cpu, Transform::entmax15(), bad.view(), p.view());
    } catch (const Error& e) {
      on_cpu = e.what();
    }
    REQUIRE(!on_cpu.empty());
    const std::vector<float> sentinel(z.data.size(), kSentinel);
    DeviceArray<float> dbad(bad.data.data(), bad.data.size()), dp(sentinel.data(), sentinel.size());
    CHECK_THROWS_WITH_AS(entgraph::transform_forward(Device::cuda, Memory::device, Transform::entmax15(),
                                                     ConstMatrix<float>(dbad.data(), rows, n),
                                                     MatrixView<float>(dp.data(), rows, n)),
                         on_cpu.c_str(), Error);
    std::vector<float> back(z.data.size());
    dp.download(back.data());
    CHECK(test::bytes_equal(back, sentinel));
  }

  TEST_CASE("cuda transforms: more rows than the grid, and strided host views") {
    // More rows than blocks launched (65535 on a GPU, 1024 on the emulator,
    // transform_rows.cuh): the blocks loop over the rest.
#if defined(ENTGRAPH_CUDA_EMULATOR)
    const std::size_t rows_past_grid = 2500;
#else
    const std::size_t rows_past_grid = 70000;
#endif
    const Matrix<float> many = test::random_matrix<float>(rows_past_grid, 3, 1.0, 1300);
    for (const Transform& t : {Transform::softmax(), Transform::entmax15(), Transform::entmax(1.25),
                               Transform::topk_softmax(2)}) {
      CAPTURE(test::describe(t));
      check_forward(t, many);
    }
    // Views with row strides larger than cols; the padding is not touched.
    const std::size_t rows = 9, n = 50, stride = 64;
    std::vector<float> zs(rows * stride, kSentinel), ps(rows * stride, kSentinel), gs(rows * stride, 0.5f),
        dzs(rows * stride, kSentinel);
    std::vector<std::uint8_t> ms(rows * stride, 9);
    const Matrix<float> z = test::random_matrix<float>(rows, n, 1.0, 1301);
    const Mask mask = mask_for(rows, n, 1302);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        zs[i * stride + j] = z(i, j);
        ms[i * stride + j] = mask(i, j);
      }
    const Transform t = Transform::entmax15();
    entgraph::transform_forward(Device::cuda, t, ConstMatrix<float>(zs.data(), rows, n, stride), MatrixView<float>(ps.data(), rows, n, stride),
                      MaskView(ms.data(), rows, n, stride));
    const Matrix<float> expect = gpu_forward(t, z, &mask);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < stride; ++j) {
        if (j < n) CHECK(ps[i * stride + j] == expect(i, j));
        else CHECK(ps[i * stride + j] == kSentinel);
      }
    entgraph::transform_backward(Device::cuda, t, ConstMatrix<float>(ps.data(), rows, n, stride), ConstMatrix<float>(gs.data(), rows, n, stride),
                       MatrixView<float>(dzs.data(), rows, n, stride));
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = n; j < stride; ++j) CHECK(dzs[i * stride + j] == kSentinel);
  }

  TEST_CASE("cuda transforms: bad input throws entgraph::Error naming the argument, before anything is written") {
    const std::size_t rows = 20, n = 300;
    const Matrix<float> z = test::random_matrix<float>(rows, n, 1.0, 1400);
    const auto untouched = [](const Matrix<float>& m) {
      return std::all_of(m.data.begin(), m.data.end(), [](float x) { return x == kSentinel; });
    };
    for (const Transform& t : {Transform::softmax(), Transform::sparsemax(), Transform::entmax15(),
                               Transform::entmax(1.25), Transform::entmax(2.5), Transform::topk_softmax(3)}) {
      CAPTURE(test::describe(t));
      // NaN or +inf in an unmasked score: the first one in row-major order is named.
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        for (std::size_t at : {std::size_t{0}, rows * n / 2 + 7, rows * n - 1}) {
          CAPTURE(at);
          Matrix<float> zb = z;
          zb.data[at] = bad;
          zb.data[rows * n - 1] = bad;  // a later one too
          const std::string where =
              "scores has a non-finite entry at (" + std::to_string(at / n) + ", " + std::to_string(at % n) + ")";
          Matrix<float> p(rows, n, kSentinel);
          CHECK_THROWS_WITH_AS(entgraph::transform_forward(Device::cuda, t, zb.view(), p.view()), doctest::Contains(where.c_str()), entgraph::Error);
          CHECK(untouched(p));
          // Device pointers: the device output is untouched too.
          DeviceArray<float> dz(zb.data.data(), zb.data.size()), dp(p.data.data(), p.data.size());
          CHECK_THROWS_WITH_AS(cuda::transform_forward(t, dz.data(), dp.data(), rows, n), doctest::Contains(where.c_str()),
                               entgraph::Error);
          std::vector<float> back(p.data.size());
          dp.download(back.data());
          CHECK(back == p.data);
        }
      }
      // Shapes and sizes.
      Matrix<float> p(rows, n, kSentinel), p_rows(rows + 1, n, kSentinel), p_cols(rows, n + 1, kSentinel);
      Mask mask_rows(rows - 1, n, 1);
      CHECK_THROWS_WITH_AS(entgraph::transform_forward(Device::cuda, t, z.view(), p_rows.view()), doctest::Contains("probs"), entgraph::Error);
      CHECK_THROWS_WITH_AS(entgraph::transform_forward(Device::cuda, t, z.view(), p_cols.view()), doctest::Contains("probs"), entgraph::Error);
      CHECK_THROWS_WITH_AS(entgraph::transform_forward(Device::cuda, t, z.view(), p.view(), mask_rows.view()), doctest::Contains("mask"),
                           entgraph::Error);
      CHECK(untouched(p));
      Matrix<float> z0(rows, 0), p0(rows, 0);
      CHECK_THROWS_WITH_AS(entgraph::transform_forward(Device::cuda, t, z0.view(), p0.view()), doctest::Contains("scores rows are empty"),
                           entgraph::Error);
      DeviceArray<float> dz(z.data.data(), z.data.size()), dp(z.data.size());
      CHECK_THROWS_WITH_AS(cuda::transform_forward(t, dz.data(), dp.data(), rows, 0), doctest::Contains("empty"),
                           entgraph::Error);
      CHECK_THROWS_WITH_AS(cuda::transform_forward(t, nullptr, dp.data(), rows, n), doctest::Contains("scores has no data"),
                           entgraph::Error);
      CHECK_THROWS_WITH_AS(cuda::transform_forward(t, dz.data(), nullptr, rows, n), doctest::Contains("probs has no data"),
                           entgraph::Error);
      CHECK_NOTHROW(cuda::transform_forward(t, nullptr, nullptr, 0, n));  // no rows: nothing to do
      // A pageable host pointer is rejected unless the device can read pageable memory.
      int device = 0, pageable = 0;
      REQUIRE(cudaGetDevice(&device) == cudaSuccess);
      REQUIRE(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device) == cudaSuccess);
      Matrix<float> host_out(rows, n, kSentinel);
      if (pageable) {
        CHECK_NOTHROW(cuda::transform_forward(t, dz.data(), host_out.data.data(), rows, n));
      } else {
        CHECK_THROWS_WITH_AS(cuda::transform_forward(t, z.data.data(), dp.data(), rows, n),
                             doctest::Contains("not device memory"), entgraph::Error);
        CHECK_THROWS_WITH_AS(cuda::transform_forward(t, dz.data(), host_out.data.data(), rows, n),
                             doctest::Contains("not device memory"), entgraph::Error);
      }
      // Backward: shapes, and non-finite upstream gradients (-inf too).
      const Matrix<float> pr = gpu_forward(t, z);
      Matrix<float> g(rows, n, 1.0f), dzm(rows, n, kSentinel), g_rows(rows + 1, n, 1.0f), dz_cols(rows, n - 1, kSentinel);
      CHECK_THROWS_WITH_AS(entgraph::transform_backward(Device::cuda, t, pr.view(), g_rows.view(), dzm.view()), doctest::Contains("grad_probs"),
                           entgraph::Error);
      CHECK_THROWS_WITH_AS(entgraph::transform_backward(Device::cuda, t, pr.view(), g.view(), dz_cols.view()), doctest::Contains("grad_scores"),
                           entgraph::Error);
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), kNegInf}) {
        Matrix<float> gb = g;
        gb(3, 4) = bad;
        CHECK_THROWS_WITH_AS(entgraph::transform_backward(Device::cuda, t, pr.view(), gb.view(), dzm.view()),
                             doctest::Contains("grad_probs has a non-finite entry at (3, 4)"), entgraph::Error);
      }
      CHECK(untouched(dzm));
    }
    // Parameters, in the CPU's words.
    const Matrix<float> small = test::random_matrix<float>(2, 5, 1.0, 1401);
    Matrix<float> p(2, 5, kSentinel);
    for (double alpha : {0.5, 1001.0, std::numeric_limits<double>::quiet_NaN()}) {
      CAPTURE(alpha);
      CHECK_THROWS_WITH_AS(entgraph::transform_forward(Device::cuda, Transform::entmax(alpha), small.view(), p.view()),
                           doctest::Contains("alpha out of range"), entgraph::Error);
      CHECK_THROWS_WITH_AS(entgraph::transform_backward(Device::cuda, Transform::entmax(alpha), small.view(), small.view(), p.view()),
                           doctest::Contains("alpha out of range"), entgraph::Error);
    }
    CHECK_THROWS_WITH_AS(entgraph::transform_forward(Device::cuda, Transform::topk_softmax(0), small.view(), p.view()),
                         doctest::Contains("k must be at least 1"), entgraph::Error);
    CHECK_THROWS_WITH_AS(entgraph::transform_backward(Device::cuda, Transform::topk_softmax(0), small.view(), small.view(), p.view()),
                         doctest::Contains("k must be at least 1"), entgraph::Error);
    Transform span;
    span.kind = TransformKind::adaptive_span;
    CHECK_THROWS_WITH_AS(entgraph::transform_forward(Device::cuda, span, small.view(), p.view()), doctest::Contains("needs extra inputs"),
                         entgraph::Error);
    CHECK(std::all_of(p.data.begin(), p.data.end(), [](float x) { return x == kSentinel; }));
  }
}

}  // namespace entgraph::cuda
