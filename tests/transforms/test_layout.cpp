// Memory layout: in place (output aliases input) equals out of place, and row
// strides larger than the row are honoured (padding is never read or written).
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

// A rows x cols matrix stored with a larger stride; padding holds a sentinel.
template <class T>
struct Padded {
  std::size_t rows, cols, stride;
  std::vector<T> buf;
  Padded(const Matrix<T>& m, std::size_t pad, T sentinel)
      : rows(m.rows), cols(m.cols), stride(m.cols + pad), buf(m.rows * (m.cols + pad), sentinel) {
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) buf[i * stride + j] = m(i, j);
  }
  MatrixView<T> view() { return {buf.data(), rows, cols, stride}; }
  MatrixView<const T> view() const { return {buf.data(), rows, cols, stride}; }
  Matrix<T> dense() const {
    Matrix<T> m(rows, cols);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) m(i, j) = buf[i * stride + j];
    return m;
  }
  bool padding_is(T sentinel) const {
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = cols; j < stride; ++j)
        if (!(buf[i * stride + j] == sentinel)) return false;
    return true;
  }
};

template <class T, class F>
void for_each_path_t(F f) {
  if constexpr (std::is_same_v<T, double>) {
    f();
  } else {
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      f();
    }
  }
}

}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE_TEMPLATE("transforms: in place equals out of place", T, float, double) {
    const std::size_t rows = 7, n = 203;
    const Matrix<T> z = random_matrix<T>(rows, n, 2.0, 1);
    const Matrix<T> g = random_matrix<T>(rows, n, 1.0, 2);
    const Matrix<std::uint8_t> mask = random_mask(rows, n, 0.7, 3);
    for (const Transform& t : basic_transforms()) {
      CAPTURE(describe(t));
      for_each_path_t<T>([&] {
        Matrix<T> p(rows, n);
        apply_forward<T>(t, z.view(), p.view(), mask.view());
        Matrix<T> inplace = z;
        apply_forward<T>(t, inplace.view(), inplace.view(), mask.view());
        CHECK(bytes_equal(inplace.data, p.data));
        // Backward: grad_scores aliasing grad_probs, then aliasing probs.
        Matrix<T> dz(rows, n);
        std::vector<T> ga(rows), ga2(rows), ga3(rows);
        apply_backward<T>(t, p.view(), g.view(), dz.view(), ga.data());
        Matrix<T> gi = g;
        apply_backward<T>(t, p.view(), gi.view(), gi.view(), ga2.data());
        CHECK(bytes_equal(gi.data, dz.data));
        Matrix<T> pi = p;
        apply_backward<T>(t, pi.view(), g.view(), pi.view(), ga3.data());
        CHECK(bytes_equal(pi.data, dz.data));
        if (t.kind == TransformKind::entmax) {
          CHECK(bytes_equal(ga2, ga));
          CHECK(bytes_equal(ga3, ga));
        }
      });
    }
    // Adaptive span and the constrained transforms.
    std::vector<T> span(rows);
    for (std::size_t i = 0; i < rows; ++i) span[i] = static_cast<T>(20.5 + 30 * i);
    AdaptiveSpan shape;
    shape.ramp = 10;
    shape.query_offset = 190;
    const Matrix<T> u(rows, n, T(0.0125));
    for_each_path_t<T>([&] {
      Matrix<T> p(rows, n), inplace = z;
      adaptive_span<T>(z.view(), span.data(), shape, p.view(), mask.view());
      adaptive_span<T>(inplace.view(), span.data(), shape, inplace.view(), mask.view());
      CHECK(bytes_equal(inplace.data, p.data));
      Matrix<T> dz(rows, n), gi = g;
      adaptive_span_backward<T>(p.view(), g.view(), span.data(), shape, dz.view());
      adaptive_span_backward<T>(p.view(), gi.view(), span.data(), shape, gi.view());
      CHECK(bytes_equal(gi.data, dz.data));

      Matrix<T> c(rows, n), ci = z;
      constrained_softmax<T>(z.view(), u.view(), c.view(), mask.view());
      constrained_softmax<T>(ci.view(), u.view(), ci.view(), mask.view());
      CHECK(bytes_equal(ci.data, c.data));
      Matrix<T> d(rows, n), di = z;
      constrained_sparsemax<T>(z.view(), u.view(), d.view(), mask.view());
      constrained_sparsemax<T>(di.view(), u.view(), di.view(), mask.view());
      CHECK(bytes_equal(di.data, d.data));
      Matrix<T> cdz(rows, n), cgi = g;
      constrained_sparsemax_backward<T>(d.view(), u.view(), g.view(), cdz.view());
      constrained_sparsemax_backward<T>(d.view(), u.view(), cgi.view(), cgi.view());
      CHECK(bytes_equal(cgi.data, cdz.data));
    });
  }

  TEST_CASE_TEMPLATE("transforms: row strides larger than the row are honoured", T, float, double) {
    const std::size_t rows = 9, n = 131;
    const T sentinel = static_cast<T>(-12345.5);
    const Matrix<T> z = random_matrix<T>(rows, n, 2.0, 11);
    const Matrix<T> g = random_matrix<T>(rows, n, 1.0, 12);
    const Matrix<std::uint8_t> mask = random_mask(rows, n, 0.7, 13);
    const Padded<T> zp(z, 5, sentinel), gp(g, 17, sentinel);
    const Padded<std::uint8_t> mp(mask, 3, std::uint8_t{0});
    for (const Transform& t : basic_transforms()) {
      CAPTURE(describe(t));
      for_each_path_t<T>([&] {
        Matrix<T> p(rows, n);
        apply_forward<T>(t, z.view(), p.view(), mask.view());
        Padded<T> pp(Matrix<T>(rows, n), 3, sentinel);
        apply_forward<T>(t, zp.view(), pp.view(), mp.view());
        CHECK(pp.padding_is(sentinel));
        CHECK(bytes_equal(pp.dense().data, p.data));
        // Backward with three different strides.
        Matrix<T> dz(rows, n);
        apply_backward<T>(t, p.view(), g.view(), dz.view());
        const Padded<T> ppad(p, 1, sentinel);
        Padded<T> dzp(Matrix<T>(rows, n), 8, sentinel);
        apply_backward<T>(t, ppad.view(), gp.view(), dzp.view());
        CHECK(dzp.padding_is(sentinel));
        CHECK(bytes_equal(dzp.dense().data, dz.data));
      });
    }
    // Adaptive span and constrained with strides.
    std::vector<T> span(rows, T(40.5));
    AdaptiveSpan shape;
    shape.ramp = 8;
    shape.query_offset = 100;
    const Matrix<T> u(rows, n, T(0.02));
    const Padded<T> up(u, 2, sentinel);
    for_each_path_t<T>([&] {
      Matrix<T> p(rows, n);
      adaptive_span<T>(z.view(), span.data(), shape, p.view(), mask.view());
      Padded<T> pp(Matrix<T>(rows, n), 4, sentinel);
      adaptive_span<T>(zp.view(), span.data(), shape, pp.view(), mp.view());
      CHECK(pp.padding_is(sentinel));
      CHECK(bytes_equal(pp.dense().data, p.data));

      Matrix<T> c(rows, n);
      constrained_sparsemax<T>(z.view(), u.view(), c.view(), mask.view());
      Padded<T> cp(Matrix<T>(rows, n), 6, sentinel);
      constrained_sparsemax<T>(zp.view(), up.view(), cp.view(), mp.view());
      CHECK(cp.padding_is(sentinel));
      CHECK(bytes_equal(cp.dense().data, c.data));

      Matrix<T> s(rows, n);
      constrained_softmax<T>(z.view(), u.view(), s.view(), mask.view());
      Padded<T> sp(Matrix<T>(rows, n), 1, sentinel);
      constrained_softmax<T>(zp.view(), up.view(), sp.view(), mp.view());
      CHECK(sp.padding_is(sentinel));
      CHECK(bytes_equal(sp.dense().data, s.data));

      Matrix<T> du(rows, n), dz(rows, n);
      constrained_softmax_backward<T>(s.view(), u.view(), g.view(), dz.view(), du.view());
      const Padded<T> spd(s, 2, sentinel);
      Padded<T> dzp(Matrix<T>(rows, n), 3, sentinel), dup(Matrix<T>(rows, n), 5, sentinel);
      constrained_softmax_backward<T>(spd.view(), up.view(), gp.view(), dzp.view(), dup.view());
      CHECK(dzp.padding_is(sentinel));
      CHECK(dup.padding_is(sentinel));
      CHECK(bytes_equal(dzp.dense().data, dz.data));
      CHECK(bytes_equal(dup.dense().data, du.data));
    });
  }

}  // TEST_SUITE
