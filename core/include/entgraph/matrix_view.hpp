// entgraph: non-owning views of row-major matrices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace entgraph {

// A rows x cols row-major matrix whose row i starts at data + i * stride.
// stride >= cols; the view never owns memory. T may be const.
template <class T>
struct MatrixView {
  T* data = nullptr;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t stride = 0;

  constexpr MatrixView() = default;
  constexpr MatrixView(T* d, std::size_t r, std::size_t c) : data(d), rows(r), cols(c), stride(c) {}
  constexpr MatrixView(T* d, std::size_t r, std::size_t c, std::size_t s) : data(d), rows(r), cols(c), stride(s) {}

  // A view of T converts to a view of const T.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  constexpr MatrixView(const MatrixView<U>& other)  // NOLINT(google-explicit-constructor)
      : data(other.data), rows(other.rows), cols(other.cols), stride(other.stride) {}

  constexpr T* row(std::size_t i) const { return data + i * stride; }
  constexpr T& operator()(std::size_t i, std::size_t j) const { return data[i * stride + j]; }
  constexpr bool empty() const { return data == nullptr; }
};

// Read-only view whose element type does not take part in template argument
// deduction, so `f(ConstMatrix<T> in, MatrixView<T> out)` deduces T from `out`
// and still accepts a MatrixView<T> for `in`.
template <class T>
struct NonDeduced {
  using type = T;
};
template <class T>
using ConstMatrix = MatrixView<const typename NonDeduced<T>::type>;

// A boolean mask with the shape of the matrix it masks: nonzero keeps an entry,
// zero masks it. An empty mask (data == nullptr) keeps everything.
using MaskView = MatrixView<const std::uint8_t>;

}  // namespace entgraph
