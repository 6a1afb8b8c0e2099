// Thread-count independence: every transform and backward gives bit-identical
// results for 1, 2 and 3 threads on a matrix large enough to be split.
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

constexpr std::size_t kRows = 300, kCols = 1000;
constexpr std::size_t kThreads[] = {1, 2, 3};

// Runs f() under each thread count and checks every result equals the first.
template <class R, class F>
void same_for_all_threads(F f) {
  std::vector<R> results;
  for (std::size_t th : kThreads) {
    ThreadsScope scope(th);
    CHECK(num_threads() == th);
    results.push_back(f());
  }
  for (std::size_t k = 1; k < results.size(); ++k) {
    CAPTURE(kThreads[k]);
    CHECK(bytes_equal(results[k], results[0]));
  }
}

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE("transforms: forward and backward are bit-identical for 1, 2 and 3 threads") {
    const Matrix<float> z = random_matrix<float>(kRows, kCols, 2.0, 1);
    const Matrix<float> g = random_matrix<float>(kRows, kCols, 1.0, 2);
    const Matrix<std::uint8_t> mask = random_mask(kRows, kCols, 0.8, 3);
    for (const Transform& t : basic_transforms()) {
      CAPTURE(describe(t));
      for (CpuIsa isa : available_cpu_isas()) {
        // The reference ISA runs the float64 kernels, checked below on doubles.
        if (isa == CpuIsa::reference) continue;
        IsaScope scope(isa);
        const std::string isa_name = scope.name();
        CAPTURE(isa_name);
        Matrix<float> p(kRows, kCols);
        apply_forward<float>(t, z.view(), p.view(), mask.view());
        same_for_all_threads<std::vector<float>>([&] {
          Matrix<float> out(kRows, kCols, -1.0f);
          apply_forward<float>(t, z.view(), out.view(), mask.view());
          return out.data;
        });
        same_for_all_threads<std::vector<float>>([&] {
          Matrix<float> dz(kRows, kCols, -1.0f);
          std::vector<float> ga(kRows, -1.0f);
          apply_backward<float>(t, p.view(), g.view(), dz.view(), ga.data());
          dz.data.insert(dz.data.end(), ga.begin(), ga.end());
          return dz.data;
        });
      }
      // The float64 reference too (except alpha near 1, where it is slow and
      // the row driver under test is the same).
      if (t.kind == TransformKind::entmax && t.alpha < 1.01) continue;
      const Matrix<double> zd = z.cast<double>();
      same_for_all_threads<std::vector<double>>([&] {
        Matrix<double> out(kRows, kCols, -1.0);
        apply_forward<double>(t, zd.view(), out.view(), mask.view());
        return out.data;
      });
      Matrix<double> pd(kRows, kCols);
      apply_forward<double>(t, zd.view(), pd.view(), mask.view());
      const Matrix<double> gd = g.cast<double>();
      same_for_all_threads<std::vector<double>>([&] {
        Matrix<double> dz(kRows, kCols, -1.0);
        std::vector<double> ga(kRows, -1.0);
        apply_backward<double>(t, pd.view(), gd.view(), dz.view(), ga.data());
        dz.data.insert(dz.data.end(), ga.begin(), ga.end());
        return dz.data;
      });
    }
  }

  TEST_CASE("adaptive_span: bit-identical for 1, 2 and 3 threads") {
    const Matrix<float> z = random_matrix<float>(kRows, kCols, 2.0, 4);
    const Matrix<float> g = random_matrix<float>(kRows, kCols, 1.0, 5);
    std::vector<float> span(kRows);
    for (std::size_t i = 0; i < kRows; ++i) span[i] = 10.5f + static_cast<float>(i % 97) * 3.25f;
    AdaptiveSpan shape;
    shape.ramp = 16;
    shape.query_offset = static_cast<std::ptrdiff_t>(kCols - kRows);
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      Matrix<float> p(kRows, kCols);
      adaptive_span<float>(z.view(), span.data(), shape, p.view());
      same_for_all_threads<std::vector<float>>([&] {
        Matrix<float> out(kRows, kCols, -1.0f);
        adaptive_span<float>(z.view(), span.data(), shape, out.view());
        return out.data;
      });
      same_for_all_threads<std::vector<float>>([&] {
        Matrix<float> dz(kRows, kCols, -1.0f);
        std::vector<float> ds(kRows, -1.0f);
        adaptive_span_backward<float>(p.view(), g.view(), span.data(), shape, dz.view(), ds.data());
        dz.data.insert(dz.data.end(), ds.begin(), ds.end());
        return dz.data;
      });
    }
    // dynamic span over many tokens.
    const Matrix<float> h = random_matrix<float>(kRows, 64, 1.0, 6);
    const Matrix<float> v = random_matrix<float>(1, 64, 0.3, 7);
    same_for_all_threads<std::vector<float>>([&] {
      std::vector<float> zs(kRows, -1.0f);
      dynamic_span<float>(h.view(), v.data.data(), 0.1f, 100.0, zs.data());
      return zs;
    });
    same_for_all_threads<std::vector<float>>([&] {
      std::vector<float> gv(64, -1.0f), gz(kRows, 0.5f);
      float gb = -1.0f;
      Matrix<float> gh(kRows, 64, -1.0f);
      dynamic_span_backward<float>(h.view(), v.data.data(), 0.1f, 100.0, gz.data(), gv.data(), &gb, gh.view());
      gv.push_back(gb);
      gv.insert(gv.end(), gh.data.begin(), gh.data.end());
      return gv;
    });
  }

  TEST_CASE("constrained: bit-identical for 1, 2 and 3 threads") {
    const Matrix<float> z = random_matrix<float>(kRows, kCols, 2.0, 8);
    const Matrix<float> g = random_matrix<float>(kRows, kCols, 1.0, 9);
    const Matrix<float> u(kRows, kCols, 0.0015f);  // sums to 1.5 per row: binding
    for (int which = 0; which < 2; ++which) {
      CAPTURE(which);
      Matrix<float> p(kRows, kCols);
      if (which == 0)
        constrained_softmax<float>(z.view(), u.view(), p.view());
      else
        constrained_sparsemax<float>(z.view(), u.view(), p.view());
      same_for_all_threads<std::vector<float>>([&] {
        Matrix<float> out(kRows, kCols, -1.0f);
        if (which == 0)
          constrained_softmax<float>(z.view(), u.view(), out.view());
        else
          constrained_sparsemax<float>(z.view(), u.view(), out.view());
        return out.data;
      });
      same_for_all_threads<std::vector<float>>([&] {
        Matrix<float> dz(kRows, kCols, -1.0f), du(kRows, kCols, -1.0f);
        if (which == 0)
          constrained_softmax_backward<float>(p.view(), u.view(), g.view(), dz.view(), du.view());
        else
          constrained_sparsemax_backward<float>(p.view(), u.view(), g.view(), dz.view(), du.view());
        dz.data.insert(dz.data.end(), du.data.begin(), du.data.end());
        return dz.data;
      });
    }
  }

}  // TEST_SUITE
