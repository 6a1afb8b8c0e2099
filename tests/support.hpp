// Shared helpers of the doctest suite.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "entgraph/matrix_view.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph::test {

// Sets the CPU instruction set for one scope and restores it afterwards, so a
// test can run the same case on every compiled kernel path:
//   for (CpuIsa isa : available_cpu_isas()) { IsaScope scope(isa); CAPTURE(scope.name()); ... }
class IsaScope {
 public:
  explicit IsaScope(CpuIsa isa) : saved_(cpu_isa()) { set_cpu_isa(isa); }
  ~IsaScope() { set_cpu_isa(saved_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
  const char* name() const { return cpu_isa_name(cpu_isa()); }

 private:
  CpuIsa saved_;
};

// Sets the thread count for one scope.
class ThreadsScope {
 public:
  explicit ThreadsScope(std::size_t n) { set_num_threads(n); }
  ~ThreadsScope() { set_num_threads(0); }
};

// A rows x cols matrix that owns its storage.
template <class T>
struct Matrix {
  std::size_t rows = 0, cols = 0;
  std::vector<T> data;
  Matrix() = default;
  Matrix(std::size_t r, std::size_t c, T fill = T(0)) : rows(r), cols(c), data(r * c, fill) {}
  MatrixView<T> view() { return {data.data(), rows, cols}; }
  MatrixView<const T> view() const { return {data.data(), rows, cols}; }
  T& operator()(std::size_t i, std::size_t j) { return data[i * cols + j]; }
  const T& operator()(std::size_t i, std::size_t j) const { return data[i * cols + j]; }
  template <class U>
  Matrix<U> cast() const {
    Matrix<U> out(rows, cols);
    for (std::size_t i = 0; i < data.size(); ++i) out.data[i] = static_cast<U>(data[i]);
    return out;
  }
};

// Gaussian entries with the given scale, from a fixed seed.
template <class T>
Matrix<T> random_matrix(std::size_t rows, std::size_t cols, double scale = 1.0, std::uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, scale);
  Matrix<T> m(rows, cols);
  for (auto& x : m.data) x = static_cast<T>(dist(rng));
  return m;
}

// A random keep-mask with about `keep` of entries kept.
inline Matrix<std::uint8_t> random_mask(std::size_t rows, std::size_t cols, double keep, std::uint64_t seed = 2) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution dist(keep);
  Matrix<std::uint8_t> m(rows, cols);
  for (auto& x : m.data) x = dist(rng) ? 1 : 0;
  return m;
}

template <class T>
double max_abs_diff(const Matrix<T>& a, const Matrix<T>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i)
    m = std::max(m, std::abs(static_cast<double>(a.data[i]) - static_cast<double>(b.data[i])));
  return m;
}

// A label for CAPTURE that does not depend on Transform::name() (which is
// itself under test).
inline std::string describe(const Transform& t) {
  switch (t.kind) {
    case TransformKind::softmax:
      return "softmax";
    case TransformKind::sparsemax:
      return "sparsemax";
    case TransformKind::entmax15:
      return "entmax15";
    case TransformKind::entmax:
      return "entmax(" + std::to_string(t.alpha) + ")";
    case TransformKind::topk_softmax:
      return "topk(" + std::to_string(t.k) + ")";
    case TransformKind::adaptive_span:
      return "adaptive_span";
    case TransformKind::constrained_softmax:
      return "constrained_softmax";
    case TransformKind::constrained_sparsemax:
      return "constrained_sparsemax";
  }
  return "?";
}

}  // namespace entgraph::test
