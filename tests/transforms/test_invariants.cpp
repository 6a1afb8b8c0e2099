// Invariants shared by every transform that needs no extra input, on every
// ISA (float) and on the float64 reference: masks, -inf, empty rows, length-1
// rows, uniform rows, one spike, shift invariance.
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

// Runs f<T>(tag) for T = double once and T = float on every ISA.
template <class F>
void for_each_path(F f) {
  {
    const std::string isa_name = "double (float64 reference)";
    CAPTURE(isa_name);
    f(double{});
  }
  for (CpuIsa isa : available_cpu_isas()) {
    IsaScope scope(isa);
    const std::string isa_name = scope.name();
    CAPTURE(isa_name);
    f(float{});
  }
}

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE("transforms: masked entries are exactly 0 whatever their score, even NaN or +inf") {
    for (const Transform& t : basic_transforms()) {
      CAPTURE(describe(t));
      for (std::size_t n : {2, 9, 64, 333}) {
        CAPTURE(n);
        const std::size_t rows = 6;
        const Matrix<double> z = float_exact_matrix(rows, n, 3.0, 40 + n);
        Matrix<std::uint8_t> mask = random_mask(rows, n, 0.6, 41 + n);
        for (std::size_t i = 0; i < rows; ++i) mask(i, i % n) = 1;  // every row keeps one entry
        // The same scores with garbage under the mask.
        Matrix<double> dirty = z;
        for (std::size_t i = 0; i < rows; ++i)
          for (std::size_t j = 0; j < n; ++j)
            if (!mask(i, j)) dirty(i, j) = (j % 3 == 0) ? kNaN : (j % 3 == 1 ? kInf : 1e6);
        for_each_path([&](auto tag) {
          using T = decltype(tag);
          const Matrix<T> zc = z.cast<T>(), zd = dirty.cast<T>();
          Matrix<T> pc(rows, n, T(-1)), pd(rows, n, T(-1));
          apply_forward<T>(t, zc.view(), pc.view(), mask.view());
          CHECK_NOTHROW(apply_forward<T>(t, zd.view(), pd.view(), mask.view()));
          const DistStats st = dist_stats(pd, &mask);
          CHECK(st.non_finite == 0);
          CHECK(st.masked_nonzero == 0);
          CHECK(st.min_p >= 0.0);
          CHECK(st.max_sum_err <= 1e-5);
          CHECK(row_rel_err(pd, pc) <= 1e-6);
        });
      }
    }
  }

  TEST_CASE("transforms: a fully masked row and an all -inf row give all zeros") {
    for (const Transform& t : basic_transforms()) {
      CAPTURE(describe(t));
      for (std::size_t n : {1, 5, 40}) {
        CAPTURE(n);
        // Row 0 fully masked, row 1 all -inf, row 2 -inf where unmasked, row 3 normal.
        Matrix<double> z = float_exact_matrix(4, n, 1.0, 7);
        Matrix<std::uint8_t> mask(4, n, 1);
        for (std::size_t j = 0; j < n; ++j) {
          mask(0, j) = 0;
          z(1, j) = -kInf;
          if (j % 2 == 0)
            z(2, j) = -kInf;
          else
            mask(2, j) = 0;
        }
        for_each_path([&](auto tag) {
          using T = decltype(tag);
          const Matrix<T> zt = z.cast<T>();
          Matrix<T> p(4, n, T(-1));
          apply_forward<T>(t, zt.view(), p.view(), mask.view());
          for (std::size_t i = 0; i < 3; ++i) {
            CAPTURE(i);
            CHECK(row_of(p, i) == std::vector<double>(n, 0.0));
          }
          double sum = 0;
          for (std::size_t j = 0; j < n; ++j) sum += static_cast<double>(p(3, j));
          CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
          // Without a mask, the all -inf row still gives zeros.
          Matrix<T> q(4, n, T(-1));
          apply_forward<T>(t, zt.view(), q.view());
          CHECK(row_of(q, 1) == std::vector<double>(n, 0.0));
        });
      }
    }
  }

  TEST_CASE("transforms: -inf entries get 0 and the rest is the transform of the finite entries") {
    for (const Transform& t : basic_transforms()) {
      CAPTURE(describe(t));
      for (std::size_t n : {3, 17, 200}) {
        CAPTURE(n);
        std::vector<double> z = float_exact(gaussian_row(n, 2.0, 60 + n));
        std::vector<std::uint8_t> finite(n, 1);
        for (std::size_t j = 0; j < n; j += 3) {
          z[j] = -kInf;
          finite[j] = 0;
        }
        const auto o = oracle_forward(t, z, &finite);
        for_each_path([&](auto tag) {
          using T = decltype(tag);
          const Matrix<T> zt = row_matrix<T>(z);
          Matrix<T> p(1, n, T(-1));
          apply_forward<T>(t, zt.view(), p.view());
          const auto row = row_of(p, 0);
          std::size_t inf_nonzero = 0;
          for (std::size_t j = 0; j < n; ++j) inf_nonzero += (!finite[j] && row[j] != 0);
          CHECK(inf_nonzero == 0);
          CHECK(row_rel_err(row, o) <= 1e-5);
        });
      }
    }
  }

  TEST_CASE("transforms: a length-1 row gives [1]") {
    for (const Transform& t : basic_transforms()) {
      CAPTURE(describe(t));
      for (double v : {0.0, -3.25, 1e4, -1e4, 1e-6, 1e20, -1e20}) {
        CAPTURE(v);
        for_each_path([&](auto tag) {
          using T = decltype(tag);
          Matrix<T> z(3, 1, static_cast<T>(v)), p(3, 1, T(-1));
          apply_forward<T>(t, z.view(), p.view());
          // 1 within one rounding (a kernel may divide by a computed sum).
          CHECK(static_cast<double>(p(0, 0)) == doctest::Approx(1.0).epsilon(1e-7));
          CHECK(static_cast<double>(p(2, 0)) == doctest::Approx(1.0).epsilon(1e-7));
        });
      }
    }
  }

  TEST_CASE("transforms: a uniform row gives 1/n") {
    for (const Transform& t : basic_transforms()) {
      CAPTURE(describe(t));
      for (std::size_t n : {2, 3, 7, 16, 17, 100, 1000}) {
        for (double v : {0.0, -2.5, 1e4}) {
          CAPTURE(n);
          CAPTURE(v);
          for_each_path([&](auto tag) {
            using T = decltype(tag);
            Matrix<T> z(2, n, static_cast<T>(v)), p(2, n, T(-1));
            apply_forward<T>(t, z.view(), p.view());
            double worst = 0;
            for (T x : p.data) worst = std::max(worst, std::abs(static_cast<double>(x) * n - 1.0));
            CHECK(worst <= 1e-5);
          });
        }
      }
    }
  }

  TEST_CASE("transforms: one spike with a large margin gives a one-hot row") {
    for (const Transform& t : basic_transforms()) {
      CAPTURE(describe(t));
      for (std::size_t n : {2, 7, 17, 1000}) {
        CAPTURE(n);
        Matrix<double> z = float_exact_matrix(3, n, 1.0, 80 + n);
        const std::size_t hot[3] = {0, n / 2, n - 1};
        for (std::size_t i = 0; i < 3; ++i) z(i, hot[i]) = 250.0;
        for_each_path([&](auto tag) {
          using T = decltype(tag);
          const Matrix<T> zt = z.cast<T>();
          Matrix<T> p(3, n, T(-1));
          apply_forward<T>(t, zt.view(), p.view());
          for (std::size_t i = 0; i < 3; ++i) {
            CAPTURE(i);
            CHECK(static_cast<double>(p(i, hot[i])) == doctest::Approx(1.0).epsilon(1e-6));
            double rest = 0;
            for (std::size_t j = 0; j < n; ++j)
              if (j != hot[i]) rest = std::max(rest, std::abs(static_cast<double>(p(i, j))));
            CHECK(rest <= 1e-30);
          }
        });
      }
    }
  }

  TEST_CASE("transforms: adding a constant to a row does not change it") {
    for (const Transform& t : basic_transforms()) {
      CAPTURE(describe(t));
      for (std::size_t n : {5, 17, 300}) {
        CAPTURE(n);
        // Multiples of 1/8 in [-8, 8], shifted by 1024: exact in float.
        std::mt19937_64 rng(n);
        Matrix<double> z(2, n), zs(2, n);
        for (std::size_t i = 0; i < z.data.size(); ++i) {
          z.data[i] = static_cast<double>(static_cast<int>(rng() % 129) - 64) / 8.0;
          zs.data[i] = z.data[i] + 1024.0;
        }
        for_each_path([&](auto tag) {
          using T = decltype(tag);
          const Matrix<T> a = z.cast<T>(), b = zs.cast<T>();
          Matrix<T> pa(2, n), pb(2, n);
          apply_forward<T>(t, a.view(), pa.view());
          apply_forward<T>(t, b.view(), pb.view());
          CHECK(row_rel_err(pb, pa) <= 1e-5);
        });
      }
    }
  }

}  // TEST_SUITE
