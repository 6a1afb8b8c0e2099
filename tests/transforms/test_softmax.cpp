// Softmax: closed forms and properties specific to it.
#include <doctest/doctest.h>

#include "transforms/transform_support.hpp"

using namespace entgraph;
using namespace entgraph::test;

TEST_SUITE("transforms") {
  TEST_CASE("softmax: two-element rows are the sigmoid of the difference") {
    const double values[] = {-30.0, -5.5, -1.0, -0.25, 0.0, 0.125, 0.75, 2.0, 9.5, 30.0};
    Matrix<double> z(100, 2);
    std::vector<double> expect(100);
    std::size_t r = 0;
    for (double a : values)
      for (double b : values) {
        z(r, 0) = a;
        z(r, 1) = b;
        expect[r++] = 1.0 / (1.0 + std::exp(b - a));
      }
    {
      Matrix<double> p(100, 2);
      softmax<double>(z.view(), p.view());
      double worst = 0;
      for (std::size_t i = 0; i < 100; ++i)
        worst = std::max({worst, std::abs(p(i, 0) - expect[i]), std::abs(p(i, 1) - (1 - expect[i]))});
      CHECK(worst <= 1e-15);
    }
    const Matrix<float> zf = z.cast<float>();
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      Matrix<float> p(100, 2);
      softmax<float>(zf.view(), p.view());
      double worst = 0;
      for (std::size_t i = 0; i < 100; ++i)
        worst = std::max({worst, std::abs(p(i, 0) - expect[i]), std::abs(p(i, 1) - (1 - expect[i]))});
      CHECK(worst <= 1e-6);
    }
  }

  TEST_CASE("softmax: ratios of probabilities are exp of score differences") {
    const std::vector<double> z = float_exact(gaussian_row(50, 3.0, 11));
    const Matrix<float> zf = row_matrix<float>(z);
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      Matrix<float> p(1, 50);
      softmax<float>(zf.view(), p.view());
      double worst = 0;
      for (std::size_t j = 1; j < 50; ++j)
        worst = std::max(worst, std::abs(std::log(static_cast<double>(p(0, j)) / p(0, 0)) - (z[j] - z[0])));
      CHECK(worst <= 1e-5);
    }
  }

  TEST_CASE("softmax: dense, every finite unmasked entry is positive") {
    const Matrix<double> z = float_exact_matrix(4, 64, 3.0, 12);
    const Matrix<float> zf = z.cast<float>();
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      Matrix<float> p(4, 64);
      softmax<float>(zf.view(), p.view());
      CHECK(std::count_if(p.data.begin(), p.data.end(), [](float x) { return x > 0; }) == 256);
    }
  }

}  // TEST_SUITE
