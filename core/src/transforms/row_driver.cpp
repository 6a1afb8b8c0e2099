#include "transforms/row_driver.hpp"

#include <vector>

namespace entgraph::detail {

void check_transform_scalars(const Transform& t, const char* op, const std::string& name) {
  const TransformInfo& row = transform_info(t.kind);
  if (row.parameter == TransformParameter::alpha && !(t.alpha >= 1.0 && t.alpha <= kMaxEntmaxAlpha))
    throw Error(at_op(op) + cpp_name(name + ".alpha") + " is out of range (got " + num(t.alpha) +
                ", expected 1 <= alpha <= " + num(kMaxEntmaxAlpha) + ")");
  if (row.parameter == TransformParameter::k && t.k == 0)
    throw Error(at_op(op) + cpp_name(name + ".k") + " is 0 for " + cpp_name(row.name) + " (got 0, expected k >= 1)");
}

bool check_plain_transform(const Transform& t, const char* op, const std::string& name) {
  const TransformInfo* row = find_transform_info(t.kind);
  if (row == nullptr)
    throw Error(at_op(op) + cpp_name(name + ".kind") + " is not a transform (got " +
                num(static_cast<std::size_t>(t.kind)) + ", expected a TransformKind)");
  if (row->extra_inputs()) return false;
  check_transform_scalars(t, op, name);
  return true;
}

void check_alpha(const char* op, double alpha) {
  if (!(alpha >= 1.0 && alpha <= kMaxEntmaxAlpha))
    throw Error(at_op(op) + "alpha out of range (got " + number_text(alpha) + ", expected 1 <= alpha <= " +
                number_text(kMaxEntmaxAlpha) + "; alpha = 1 is softmax)");
}

void check_topk_k(const char* op, std::size_t k) {
  if (k == 0) throw Error(at_op(op) + "k must be at least 1 (got k = 0)");
}

namespace {

// Rows validated in parallel; the first bad entry in row order is reported.
template <class T>
void check_rows(const char* op, const char* arg, ConstMatrix<T> m, MaskView mask, bool allow_neg_inf) {
  const std::size_t none = static_cast<std::size_t>(-1);
  std::vector<std::size_t> bad_col(m.rows, none);
  const auto& kernels = transform_kernels();
  parallel_for(m.rows, grain_for(m.cols), [&](std::size_t begin, std::size_t end) {
    for (std::size_t r = begin; r < end; ++r) {
      const T* row = m.row(r);
      const std::uint8_t* keep = mask.empty() ? nullptr : mask.row(r);
      if constexpr (std::is_same_v<T, float>) {  // fast path: a SIMD check of the whole row
        if (!keep && (allow_neg_inf ? kernels.valid : kernels.finite)(row, m.cols)) continue;
      }
      for (std::size_t j = 0; j < m.cols; ++j) {
        if (keep && !keep[j]) continue;
        const T x = row[j];
        const bool ok = allow_neg_inf ? x < std::numeric_limits<T>::infinity() : std::isfinite(x);
        if (!ok) {
          bad_col[r] = j;
          break;
        }
      }
    }
  });
  for (std::size_t r = 0; r < m.rows; ++r) {
    if (bad_col[r] == none) continue;
    throw_non_finite(op, arg, r, bad_col[r], static_cast<double>(m(r, bad_col[r])), allow_neg_inf);
  }
}

}  // namespace

void throw_non_finite(const char* op, const char* arg, std::size_t row, std::size_t col, double x,
                      bool allow_neg_inf) {
  throw Error(at_op(op) + cpp_name(arg) + " has a non-finite entry at (" + std::to_string(row) + ", " +
                  std::to_string(col) + ") (got " + (std::isnan(x) ? "NaN" : (x > 0 ? "+inf" : "-inf")) +
                  (allow_neg_inf ? ", expected a finite number or -inf)" : ", expected a finite number)"),
              ErrorCode::bad_value);
}

template <class T>
void check_scores(const char* op, const char* arg, ConstMatrix<T> scores, MaskView mask) {
  check_rows<T>(op, arg, scores, mask, true);
}

template <class T>
void check_finite(const char* op, const char* arg, ConstMatrix<T> values) {
  check_rows<T>(op, arg, values, {}, false);
}

template <class T>
T* thread_scratch(std::size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

template void check_scores<float>(const char*, const char*, ConstMatrix<float>, MaskView);
template void check_scores<double>(const char*, const char*, ConstMatrix<double>, MaskView);
template void check_finite<float>(const char*, const char*, ConstMatrix<float>);
template void check_finite<double>(const char*, const char*, ConstMatrix<double>);
template float* thread_scratch<float>(std::size_t);
template double* thread_scratch<double>(std::size_t);

}  // namespace entgraph::detail
