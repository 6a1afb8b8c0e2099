// entgraph: the argument checks of matrix views, with the messages every op
// of the library uses. The core's ops call them before any output is
// written; a backend's own entry points (device memory, which the core never
// sees) call them too, so both say the same thing about the same mistake.
#pragma once

#include <cstddef>
#include <string>

#include "entgraph/error.hpp"

namespace entgraph {

// "3x4": a shape as messages write it.
inline std::string shape_text(std::size_t rows, std::size_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// Throws unless `view` has data (when not empty) and a row stride that fits
// its rows (a single row may have any stride).
template <class V>
void check_view(const char* op, const char* arg, const V& view) {
  if (view.data == nullptr && view.rows * view.cols > 0)
    throw Error(std::string(op) + ": " + arg + " has no data (got nullptr, expected " +
                shape_text(view.rows, view.cols) + " values)");
  if (view.rows > 1 && view.stride < view.cols)
    throw Error(std::string(op) + ": " + arg + ".stride is smaller than its cols (got " + std::to_string(view.stride) +
                ", expected >= " + std::to_string(view.cols) + ")");
}

// Throws unless `view` is a valid rows x cols view.
template <class V>
void check_shape(const char* op, const char* arg, const V& view, std::size_t rows, std::size_t cols) {
  if (view.rows != rows || view.cols != cols)
    throw Error(std::string(op) + ": " + arg + " has the wrong shape (got " + shape_text(view.rows, view.cols) +
                ", expected " + shape_text(rows, cols) + ")");
  check_view(op, arg, view);
}

// Throws unless `input` has at least one column.
template <class V>
void check_nonempty(const char* op, const char* arg, const V& input) {
  if (input.cols == 0) throw Error(std::string(op) + ": " + arg + " rows are empty (got n = 0, expected n >= 1)");
}

}  // namespace entgraph
