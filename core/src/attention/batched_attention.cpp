// Batched attention over (batch, heads, rows, cols) tensors of float32,
// bfloat16 or float16 (entgraph/batched_attention.hpp): the checks, the
// device dispatch, and the CPU path, which runs the float32 attention of
// attention.hpp on each (sequence, head) pair, forward and backward (the
// backward per key/value head group, whose query heads' key and value
// gradients it sums).
//
// A pair's valid rows become a head of their own: n_b queries and the first
// m_b keys, so attention's causal rule j <= i + (m - n) is the per-sequence
// rule and padded keys are never seen. 16-bit heads are widened into float32
// (exactly) and the output rounded once into out's dtype; float32 heads are
// used in place. Every check attention_forward<float> makes on a head is
// made here first, over all heads, on the same widened values, so a call
// either throws before it writes anything or computes every head.
#include "entgraph/batched_attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attention/batched_heads.hpp"
#include "attention/score_range.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/backend.hpp"
#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "runtime/backends.hpp"
#include "runtime/dtype_bits.hpp"
#include "runtime/parallel.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {
namespace {

constexpr const char* kOp = "batched_attention_forward";
constexpr const char* kBackwardOp = "batched_attention_backward";
// attention_forward's score headroom (score_range.hpp): the checks here
// decide what each head's call would.
constexpr double kAttentionHeadroom = 2.0;

using detail::num;

[[noreturn]] void fail(const char* op, const std::string& what, ErrorCode code = ErrorCode::bad_argument) {
  throw Error(at_op(op) + what, code);
}

std::string at(std::size_t b, std::size_t h) { return "[" + num(b) + ", " + num(h) + "]"; }

std::string shape_text(const ConstBatchedTensor& t) {
  return num(t.batch) + "x" + num(t.heads) + "x" + num(t.rows) + "x" + num(t.cols);
}

// ---------------------------------------------------------------------------
// Rows in and out of the tensors.

std::size_t row_offset(const ConstBatchedTensor& t, std::size_t b, std::size_t h, std::size_t i) {
  return b * t.batch_stride + h * t.head_stride + i * t.row_stride;
}

// Rows [0, rows) of head (b, h) as a float32 matrix: in place for float32,
// else widened into buf.
ConstMatrix<float> head_rows(const ConstBatchedTensor& t, std::size_t b, std::size_t h, std::size_t rows,
                             std::vector<float>& buf) {
  if (t.dtype == DType::float32) {
    // A single row's stride is never used; cols keeps the view well-formed.
    return {static_cast<const float*>(t.data) + row_offset(t, b, h, 0), rows, t.cols, rows > 1 ? t.row_stride : t.cols};
  }
  buf.resize(rows * t.cols);
  const bool bf16 = t.dtype == DType::bfloat16;
  for (std::size_t i = 0; i < rows; ++i) {
    const std::uint16_t* src = static_cast<const std::uint16_t*>(t.data) + row_offset(t, b, h, i);
    float* dst = buf.data() + i * t.cols;
    if (bf16)
      for (std::size_t c = 0; c < t.cols; ++c) dst[c] = detail::widen_bfloat16(src[c]);
    else
      for (std::size_t c = 0; c < t.cols; ++c) dst[c] = detail::widen_float16(src[c]);
  }
  return {buf.data(), rows, t.cols};
}

// x rounded to nearest even in a 16-bit format. A finite x that rounds past
// the format's largest value gives that value: the exact output is a
// weighted mean of v's entries, all finite in the format, so only float32
// accumulation error can take x there.
std::uint16_t round_output(float x, bool bf16) {
  if (bf16) {
    const std::uint16_t r = detail::round_to_bfloat16(x);
    return (r & 0x7fffu) == 0x7f80u && std::isfinite(x) ? static_cast<std::uint16_t>((r & 0x8000u) | 0x7f7fu) : r;
  }
  const std::uint16_t r = detail::round_to_float16(x);
  return (r & 0x7fffu) == 0x7c00u && std::isfinite(x) ? static_cast<std::uint16_t>((r & 0x8000u) | 0x7bffu) : r;
}

// ---------------------------------------------------------------------------
// Checks.

std::size_t query_length(const BatchedAttentionOptions& o, std::size_t b, std::size_t n) {
  return o.query_lengths ? static_cast<std::size_t>(o.query_lengths[b]) : n;
}
std::size_t key_length(const BatchedAttentionOptions& o, std::size_t b, std::size_t m) {
  return o.key_lengths ? static_cast<std::size_t>(o.key_lengths[b]) : m;
}

void check_data(const char* op, const std::string& name, const ConstBatchedTensor& t) {
  if (t.data == nullptr) fail(op, name + " has no data (got nullptr, expected " + shape_text(t) + " values)");
  if (t.dtype != DType::float32 && t.dtype != DType::bfloat16 && t.dtype != DType::float16)
    fail(op, name + ".dtype is not a DType (got " + num(static_cast<std::size_t>(t.dtype)) +
                 ", expected float32, bfloat16 or float16)");
  // Misaligned elements are undefined behaviour to read in C++ (and slow or
  // faulting on some devices).
  const std::size_t size = dtype_size(t.dtype);
  if (reinterpret_cast<std::uintptr_t>(t.data) % size != 0)
    fail(op, name + ".data is not aligned to its dtype (got an address " +
                 num(static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(t.data) % size)) +
                 " bytes past a multiple of " + num(size) + ", expected a multiple of " + num(size) + " for " +
                 dtype_name(t.dtype) + ")");
}

void check_nonzero(const char* op, const std::string& field, std::size_t value, const char* meaning) {
  if (value == 0) fail(op, field + " is 0 (got 0, expected " + meaning + " >= 1)");
}

void check_same(const char* op, const std::string& field, std::size_t got, const std::string& other,
                std::size_t expected) {
  if (got != expected)
    fail(op, field + " does not match " + other + " (got " + num(got) + ", expected " + num(expected) + ")");
}

// Checks t's strides and returns the elements its view spans, from the first
// to one past the last. The dimensions ordered by stride must nest: each
// stride at least the extent of the smaller dimensions together. Contiguous
// and row-padded bhnd and bnhd views do; no view whose elements overlap does.
std::size_t check_layout(const char* op, const std::string& name, const ConstBatchedTensor& t) {
  if (t.rows > 1 && t.row_stride < t.cols)
    fail(op, name + ".row_stride is smaller than its cols (got " + num(t.row_stride) + ", expected >= " + num(t.cols) +
                 ")");
  struct Dim {
    std::size_t size, stride;
    const char* field;
  };
  std::vector<Dim> dims;
  for (const Dim& d : {Dim{t.rows, t.row_stride, "row_stride"}, Dim{t.heads, t.head_stride, "head_stride"},
                       Dim{t.batch, t.batch_stride, "batch_stride"}})
    if (d.size > 1) dims.push_back(d);
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  std::size_t extent = t.cols;
  for (const Dim& d : dims) {
    if (d.stride < extent)
      fail(op, name + "." + d.field + " is too small: elements of the view overlap (got " + num(d.stride) +
                   ", expected >= " + num(extent) + ", the extent of the dimensions with smaller strides)");
    if (d.size - 1 > (std::numeric_limits<std::size_t>::max() - extent) / d.stride)
      fail(op, name + ": its strides reach past the end of the address space (" + shape_text(t) + ", " + d.field + " " +
                   num(d.stride) + ")");
    extent += (d.size - 1) * d.stride;
  }
  const std::size_t size = dtype_size(t.dtype);
  const std::uintptr_t room = std::numeric_limits<std::uintptr_t>::max() - reinterpret_cast<std::uintptr_t>(t.data);
  if (extent > room / size)
    fail(op, name + ": its last element lies past the end of the address space (" + num(extent) +
                 " elements from data); the addresses would wrap");
  return extent;
}

// The first non-finite entry of a head and its largest |entry| (the fields
// of HeadScan up to `largest`), on the widened values attention
// sees. One pass that vectorises: the largest entry's position and the row
// norms are found only where a decision needs them (complete_scan).
HeadScan scan_head(ConstMatrix<float> x) {
  // On the bits: |x|'s pattern orders like |x| and is at least inf's for inf
  // and NaN, and integer maxima vectorise where float ones (NaN rules) do not.
  constexpr std::uint32_t kInf = 0x7f800000u;
  std::uint32_t largest = 0;
  HeadScan s;
  for (std::size_t i = 0; i < x.rows; ++i) {
    const float* row = x.row(i);
    std::uint32_t big = 0, bad = 0;
    for (std::size_t c = 0; c < x.cols; ++c) {
      const std::uint32_t a = detail::bits_of(row[c]) & 0x7fffffffu;
      big = big < a ? a : big;
      bad |= a >= kInf;
    }
    if (bad != 0) {
      for (std::size_t c = 0; c < x.cols; ++c)
        if (!std::isfinite(row[c])) {
          s.bad = true;
          s.bad_row = i;
          s.bad_col = c;
          s.bad_value = row[c];
          return s;
        }
    }
    largest = largest < big ? big : largest;
  }
  s.largest = detail::float_of(largest);
  return s;
}

// The fields scan_head leaves out, from the head's valid rows x.
void complete_scan(ConstMatrix<float> x, HeadScan& s) {
  s.norm = detail::largest_row_norm<float>(x, s.norm_row);
  s.largest_row = s.largest_col = 0;
  for (std::size_t i = 0; i < x.rows; ++i)
    for (std::size_t c = 0; c < x.cols; ++c)
      if (std::fabs(x(i, c)) == s.largest) {
        s.largest_row = i;
        s.largest_col = c;
        return;
      }
}

[[noreturn]] void fail_non_finite(const char* op, const char* name, std::size_t b, std::size_t h, const HeadScan& s) {
  fail(op, std::string(name) + " has a non-finite entry at [" + num(b) + ", " + num(h) + ", " + num(s.bad_row) + ", " +
               num(s.bad_col) + "] (got " + (std::isnan(s.bad_value) ? "NaN" : (s.bad_value > 0 ? "+inf" : "-inf")) +
               ", expected a finite number)",
       ErrorCode::bad_value);
}

// A head of the scan order (q's (b, h), then k's (b, g), then v's (b, g)).
struct ScanItem {
  const ConstBatchedTensor* t;
  const char* name;
  std::size_t b, h, rows;
};

ScanItem scan_item(std::size_t item, const ConstBatchedTensor& q, const ConstBatchedTensor& k,
                   const ConstBatchedTensor& v, const BatchedAttentionOptions& o) {
  const std::size_t B = q.batch, Hq = q.heads, Hkv = k.heads;
  if (item < B * Hq) return {&q, "q", item / Hq, item % Hq, query_length(o, item / Hq, q.rows)};
  item -= B * Hq;
  const bool is_v = item >= B * Hkv;
  if (is_v) item -= B * Hkv;
  return {is_v ? &v : &k, is_v ? "v" : "k", item / Hkv, item % Hkv, key_length(o, item / Hkv, k.rows)};
}

std::size_t scan_count(const ConstBatchedTensor& q, const ConstBatchedTensor& k) {
  return q.batch * (q.heads + 2 * k.heads);
}

// NaN and inf within the valid lengths, and the score and value ranges that
// attention_forward<float> refuses (attention/score_range.hpp), decided from
// the heads' scans on the same numbers with the same bounds, so that no
// head's attention call can throw once this passes. `complete(item)` gives
// scans[item] with its position and norm fields, where a decision needs
// them (a device's scans come complete). Errors in a fixed order (q, k, v;
// sequence, head, row).
template <class Complete>
void judge_scans(const char* op, const ConstBatchedTensor& q, const ConstBatchedTensor& k, const ConstBatchedTensor& v,
                 const BatchedAttentionOptions& o, double headroom, const std::vector<HeadScan>& scans,
                 Complete&& complete) {
  const std::size_t B = q.batch, Hq = q.heads, Hkv = k.heads;
  for (std::size_t item = 0; item < scan_count(q, k); ++item) {  // a backward's grad_out scans follow
    const HeadScan& s = scans[item];
    if (!s.bad) continue;
    const ScanItem it = scan_item(item, q, k, v, o);
    fail_non_finite(op, it.name, it.b, it.h, s);
  }
  // check_score_range<float> with the per-head op's headroom, per pair. Row
  // norms are at most sqrt(d) times the largest entry, and largest_row_norm
  // computes them within (d + 3) double roundings, so a pair whose bound
  // from the largest entries clears the limit with that margin passes
  // attention's check too; the others get attention's own computation.
  const double scale_factor = std::max(1.0, std::abs(o.scale));
  const double score_limit = static_cast<double>(std::numeric_limits<float>::max()) / headroom;
  const double d = static_cast<double>(q.cols);
  const double margin = 1.0 + (2.0 * d + 20.0) * std::numeric_limits<double>::epsilon();
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < Hq; ++h) {
      const std::size_t g = h / (Hq / Hkv), qi = b * Hq + h, ki = B * Hq + b * Hkv + g;
      if (scale_factor * static_cast<double>(scans[qi].largest) * static_cast<double>(scans[ki].largest) * d *
              margin <=
          score_limit)
        continue;
      const HeadScan qs = complete(qi), ks = complete(ki);
      const double qn = qs.norm, kn = ks.norm;
      const double bound = scale_factor * qn * kn;
      if (bound <= score_limit) continue;
      fail(op, "the scores options.scale * q . k may overflow float: q" + at(b, h) + " row " + num(qs.norm_row) +
                   " has norm " + num(qn) + ", k" + at(b, g) + " row " + num(ks.norm_row) + " has norm " +
                   num(kn) + " and options.scale is " + num(o.scale) +
                   ", so max(1, |scale|) |q| |k| = " + num(bound) + " (expected at most " + num(score_limit) +
                   "); scale q, k or options.scale down",
           ErrorCode::bad_value);
    }
  // check_value_range<float> per key/value head, over its m_b keys (the
  // largest |entry| is exact, so the decision is attention's).
  const double u = std::numeric_limits<float>::epsilon() / 2;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t g = 0; g < Hkv; ++g) {
      const std::size_t vi = B * (Hq + Hkv) + b * Hkv + g;
      const float big = scans[vi].largest;
      const std::size_t m_b = key_length(o, b, k.rows);
      const double limit =
          static_cast<double>(std::numeric_limits<float>::max()) / (1.0 + 4.0 * static_cast<double>(m_b) * u);
      if (static_cast<double>(big) <= limit) continue;
      const HeadScan vs = complete(vi);
      fail(op, "v may make the output overflow float: |v[" + num(b) + ", " + num(g) + ", " + num(vs.largest_row) +
                   ", " + num(vs.largest_col) +
                   "]| = " + num(static_cast<double>(big)) + " (expected at most " + num(limit) + " for " +
                   num(m_b) + " keys); scale v down",
           ErrorCode::bad_value);
    }
}

void check_lengths(const char* op, const char* field, const std::int32_t* lengths, std::size_t batch, std::size_t limit,
                   const char* dim) {
  if (lengths == nullptr) return;
  for (std::size_t b = 0; b < batch; ++b)
    if (lengths[b] < 0 || static_cast<std::size_t>(lengths[b]) > limit)
      fail(op, std::string(field) + "[" + num(b) + "] is out of range (got " + std::to_string(lengths[b]) +
                   ", expected 0 <= length <= " + dim + " = " + num(limit) + ")");
}

void check_both_lengths(const char* op, const ConstBatchedTensor& q, const ConstBatchedTensor& k,
                        const BatchedAttentionOptions& o) {
  check_lengths(op, "options.query_lengths", o.query_lengths, q.batch, q.rows, "n");
  check_lengths(op, "options.key_lengths", o.key_lengths, q.batch, k.rows, "m");
}

// The value checks on host memory: the lengths, then the heads scanned in
// parallel and judged.
void check_values(const char* op, const ConstBatchedTensor& q, const ConstBatchedTensor& k, const ConstBatchedTensor& v,
                  const BatchedAttentionOptions& o, double headroom) {
  check_both_lengths(op, q, k, o);
  std::vector<HeadScan> scans(scan_count(q, k));
  detail::parallel_for(scans.size(), 1, [&](std::size_t i0, std::size_t i1) {
    std::vector<float> buf;
    for (std::size_t item = i0; item < i1; ++item) {
      const ScanItem it = scan_item(item, q, k, v, o);
      if (it.rows > 0) scans[item] = scan_head(head_rows(*it.t, it.b, it.h, it.rows, buf));
    }
  });
  std::vector<float> buf;
  judge_scans(op, q, k, v, o, headroom, scans, [&](std::size_t item) {
    const ScanItem it = scan_item(item, q, k, v, o);
    HeadScan s = scans[item];
    complete_scan(head_rows(*it.t, it.b, it.h, it.rows, buf), s);
    return s;
  });
}

void check_transform(const char* op, const Transform& t) {
  if (!detail::check_plain_transform(t, op, "options.transform"))
    fail(op, "options.transform is " + t.name() +
                 ", which needs per-head inputs that batched attention does not take (expected " +
                 transform_names(takes_scores_only, " or ") + ")");
}

// A tensor's name and its bytes, first element to last.
struct Range {
  const char* name;
  std::uintptr_t begin, end;
};
using Extents = std::array<Range, 3>;

Range range_of(const char* name, const ConstBatchedTensor& t, std::size_t extent) {
  const auto begin = reinterpret_cast<std::uintptr_t>(t.data);
  return {name, begin, begin + extent * dtype_size(t.dtype)};
}

// q, k and v: pointers, dtypes, sizes, the shapes they share, strides.
Extents check_inputs(const char* op, const ConstBatchedTensor& q, const ConstBatchedTensor& k,
                     const ConstBatchedTensor& v) {
  check_data(op, "q", q);
  check_data(op, "k", k);
  check_data(op, "v", v);
  check_nonzero(op, "q.batch", q.batch, "batch");
  check_nonzero(op, "q.heads", q.heads, "Hq");
  check_nonzero(op, "q.rows", q.rows, "n");
  check_nonzero(op, "q.cols", q.cols, "d");
  check_nonzero(op, "k.heads", k.heads, "Hkv");
  check_nonzero(op, "k.rows", k.rows, "m");
  check_nonzero(op, "v.cols", v.cols, "dv");
  check_same(op, "k.batch", k.batch, "q.batch", q.batch);
  check_same(op, "v.batch", v.batch, "q.batch", q.batch);
  check_same(op, "k.cols", k.cols, "q.cols", q.cols);
  check_same(op, "v.heads", v.heads, "k.heads", k.heads);
  check_same(op, "v.rows", v.rows, "k.rows", k.rows);
  if (q.heads % k.heads != 0)
    fail(op, "q.heads is not a multiple of k.heads (got " + num(q.heads) + " query heads and " + num(k.heads) +
                 " key/value heads, expected Hq a multiple of Hkv)");
  for (const auto& [name, dtype] : {std::pair<const char*, DType>{"k", k.dtype}, {"v", v.dtype}})
    if (dtype != q.dtype)
      fail(op, std::string(name) + ".dtype does not match q.dtype (got " + dtype_name(dtype) + ", expected " +
                   dtype_name(q.dtype) + ")");
  return {range_of("q", q, check_layout(op, "q", q)), range_of("k", k, check_layout(op, "k", k)),
          range_of("v", v, check_layout(op, "v", v))};
}

// A size a result must have, and the field it comes from ("q.batch").
struct SizeOf {
  std::size_t value;
  const char* field;
};

// A result-shaped tensor (out, grad_out, a gradient): its data, its shape
// (batch, heads, rows, cols), q's dtype or float32, its strides.
Range check_result(const char* op, const char* name, const ConstBatchedTensor& t, DType q_dtype, SizeOf batch,
                   SizeOf heads, SizeOf rows, SizeOf cols) {
  const std::string n = name;
  check_data(op, n, t);
  check_same(op, n + ".batch", t.batch, batch.field, batch.value);
  check_same(op, n + ".heads", t.heads, heads.field, heads.value);
  check_same(op, n + ".rows", t.rows, rows.field, rows.value);
  check_same(op, n + ".cols", t.cols, cols.field, cols.value);
  if (t.dtype != q_dtype && t.dtype != DType::float32)
    fail(op, n + ".dtype is neither q.dtype nor float32 (got " + dtype_name(t.dtype) + ", q.dtype " +
                 dtype_name(q_dtype) + ")");
  return range_of(name, t, check_layout(op, n, t));
}

// A written tensor must share no byte with another it reads or writes:
// heads run in parallel, so one head's writes could reach another's inputs
// before they are read.
void check_apart(const char* op, const Range& written, const Range& other) {
  if (written.begin < other.end && other.begin < written.end)
    fail(op, std::string(written.name) + " overlaps " + other.name +
                 " (their memory ranges, first element to last, share bytes; expected " + written.name +
                 " in memory of its own)");
}

void check_options(const char* op, const BatchedAttentionOptions& o) {
  check_attention_scale(o.scale, op, "options.scale");
  check_transform(op, o.transform);
}

// The first head of grad_out whose scan found NaN or inf, in (sequence,
// head) order; scans holds batch x heads.
void judge_grad_out_scans(const char* op, const ConstBatchedTensor& grad_out, const HeadScan* scans) {
  for (std::size_t item = 0; item < grad_out.batch * grad_out.heads; ++item)
    if (scans[item].bad) fail_non_finite(op, "grad_out", item / grad_out.heads, item % grad_out.heads, scans[item]);
}

// NaN and inf in grad_out's valid rows (the first query_lengths[b] of each
// sequence), scanned in parallel, reported in (sequence, head, row) order.
void check_grad_out_values(const char* op, const ConstBatchedTensor& grad_out, const BatchedAttentionOptions& o) {
  std::vector<HeadScan> scans(grad_out.batch * grad_out.heads);
  detail::parallel_for(scans.size(), 1, [&](std::size_t i0, std::size_t i1) {
    std::vector<float> buf;
    for (std::size_t item = i0; item < i1; ++item) {
      const std::size_t b = item / grad_out.heads, h = item % grad_out.heads, rows = query_length(o, b, grad_out.rows);
      if (rows > 0) scans[item] = scan_head(head_rows(grad_out, b, h, rows, buf));
    }
  });
  judge_grad_out_scans(op, grad_out, scans.data());
}

// ---------------------------------------------------------------------------
// Computation.

// What a 16-bit store does with a finite value that rounds past the
// format's range: the forward's output becomes the largest finite value
// (round_output); gradients have no such bound and become +-inf, as
// PyTorch's conversions do.
enum class Overflow { largest, infinity };

// Rows [from, rows) of head (b, h) of t from src (row i at src + i x t.cols,
// float32), rounded once into t's dtype, and rows [rows, t.rows) as zeros
// (all bits zero is +0 in each dtype).
void store_head(const BatchedTensor& t, std::size_t b, std::size_t h, const float* src, std::size_t rows,
                Overflow overflow, std::size_t from = 0) {
  const ConstBatchedTensor ct = as_const(t);
  const std::size_t size = dtype_size(t.dtype), cols = t.cols;
  for (std::size_t i = from; i < t.rows; ++i) {
    unsigned char* dst = static_cast<unsigned char*>(t.data) + row_offset(ct, b, h, i) * size;
    if (i >= rows) {
      std::memset(dst, 0, cols * size);
      continue;
    }
    const float* row = src + i * cols;
    auto* dst16 = reinterpret_cast<std::uint16_t*>(dst);
    const bool bf16 = t.dtype == DType::bfloat16;
    if (t.dtype == DType::float32)
      std::memcpy(dst, row, cols * sizeof(float));
    else if (overflow == Overflow::largest)
      for (std::size_t c = 0; c < cols; ++c) dst16[c] = round_output(row[c], bf16);
    else
      for (std::size_t c = 0; c < cols; ++c)
        dst16[c] = bf16 ? detail::round_to_bfloat16(row[c]) : detail::round_to_float16(row[c]);
  }
}

struct Buffers {
  std::vector<float> q, k, v, out;
};

void run_pair(const ConstBatchedTensor& q, const ConstBatchedTensor& k, const ConstBatchedTensor& v,
              const BatchedTensor& out, const BatchedAttentionOptions& o, const detail::HeadForward& head,
              std::size_t b, std::size_t h, Buffers& s) {
  const std::size_t n = q.rows, dv = out.cols, g = h / (q.heads / k.heads);
  const std::size_t n_b = query_length(o, b, n), m_b = key_length(o, b, k.rows);
  if (n_b == 0 || m_b == 0) return store_head(out, b, h, nullptr, 0, Overflow::largest);  // every row zeros
  const ConstMatrix<float> qm = head_rows(q, b, h, n_b, s.q), km = head_rows(k, b, g, m_b, s.k),
                           vm = head_rows(v, b, g, m_b, s.v);
  if (out.dtype == DType::float32) {  // in place; then the padded rows
    const std::size_t stride = n_b > 1 ? out.row_stride : dv;
    head(b, h, qm, km, vm, MatrixView<float>(static_cast<float*>(out.data) + row_offset(as_const(out), b, h, 0), n_b, dv,
                                             stride));
    return store_head(out, b, h, nullptr, n_b, Overflow::largest, n_b);
  }
  s.out.resize(n_b * dv);
  head(b, h, qm, km, vm, MatrixView<float>(s.out.data(), n_b, dv));
  store_head(out, b, h, s.out.data(), n_b, Overflow::largest);
}

// Runs units [0, count) with fn(unit, scratch): on the pool when there are
// at least as many as threads (each head's own blocks then run serially
// inside its task), else one after the other, each on the whole pool. A
// head's result does not depend on that, so neither does the batch's.
template <class Scratch, class Fn>
void for_each_unit(std::size_t count, Fn&& fn) {
  if (count > 1 && count >= num_threads()) {
    detail::parallel_for(count, 1, [&](std::size_t u0, std::size_t u1) {
      Scratch s;
      for (std::size_t u = u0; u < u1; ++u) fn(u, s);
    });
  } else {
    Scratch s;
    for (std::size_t u = 0; u < count; ++u) fn(u, s);
  }
}

AttentionOptions<float> head_options(const BatchedAttentionOptions& o) {
  AttentionOptions<float> ao;
  ao.transform = o.transform;
  ao.scale = o.scale;
  ao.causal = o.causal;
  return ao;
}

struct GradBuffers {
  std::vector<float> q, k, v, grad_out, gq, gk, gv, gk_sum, gv_sum;
};

// The gradients of key/value head (b, g) and of the query heads that share
// it: each query head's attention_backward, its grad_q stored at once, its
// grad_k and grad_v added to the group's sums in head order.
void run_backward_group(const detail::GradTensors& t, const BatchedAttentionOptions& o, const detail::HeadBackward& head,
                        std::size_t b, std::size_t g, GradBuffers& s) {
  const std::size_t per = t.q.heads / t.k.heads, d = t.q.cols, dv = t.v.cols;
  const std::size_t n_b = query_length(o, b, t.q.rows), m_b = key_length(o, b, t.k.rows);
  const bool live = n_b > 0 && m_b > 0;
  ConstMatrix<float> km, vm;
  if (live) {
    km = head_rows(t.k, b, g, m_b, s.k);
    vm = head_rows(t.v, b, g, m_b, s.v);
  }
  s.gk_sum.assign(live ? m_b * d : 0, 0.0f);
  s.gv_sum.assign(live ? m_b * dv : 0, 0.0f);
  for (std::size_t h = g * per; h < (g + 1) * per; ++h) {
    if (!live) {
      store_head(t.grad_q, b, h, nullptr, 0, Overflow::infinity);
      continue;
    }
    s.gq.resize(n_b * d);
    s.gk.resize(m_b * d);
    s.gv.resize(m_b * dv);
    head(b, h, head_rows(t.q, b, h, n_b, s.q), km, vm, head_rows(t.grad_out, b, h, n_b, s.grad_out),
         MatrixView<float>(s.gq.data(), n_b, d), MatrixView<float>(s.gk.data(), m_b, d),
         MatrixView<float>(s.gv.data(), m_b, dv));
    store_head(t.grad_q, b, h, s.gq.data(), n_b, Overflow::infinity);
    for (std::size_t x = 0; x < s.gk.size(); ++x) s.gk_sum[x] += s.gk[x];
    for (std::size_t x = 0; x < s.gv.size(); ++x) s.gv_sum[x] += s.gv[x];
  }
  store_head(t.grad_k, b, g, s.gk_sum.data(), live ? m_b : 0, Overflow::infinity);
  store_head(t.grad_v, b, g, s.gv_sum.data(), live ? m_b : 0, Overflow::infinity);
}

}  // namespace

namespace detail {

void run_heads_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                       const BatchedAttentionOptions& o, const HeadForward& head) {
  const std::size_t heads = q.heads;
  for_each_unit<Buffers>(q.batch * heads, [&](std::size_t p, Buffers& s) {
    run_pair(q, k, v, out, o, head, p / heads, p % heads, s);
  });
}

void run_heads_backward(const GradTensors& t, const BatchedAttentionOptions& o, const HeadBackward& head) {
  const std::size_t groups = t.k.heads;
  for_each_unit<GradBuffers>(t.q.batch * groups, [&](std::size_t u, GradBuffers& s) {
    run_backward_group(t, o, head, u / groups, u % groups, s);
  });
}

void check_batched_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                           const BatchedAttentionOptions& options, const char* op, double headroom,
                           bool check_values_too) {
  const Extents inputs = check_inputs(op, q, k, v);
  const Range out_range = check_result(op, "out", as_const(out), q.dtype, {q.batch, "q.batch"}, {q.heads, "q.heads"},
                                       {q.rows, "q.rows"}, {v.cols, "v.cols"});
  for (const Range& input : inputs) check_apart(op, out_range, input);
  check_options(op, options);
  if (check_values_too) check_values(op, q, k, v, options, headroom);
}

void check_batched_backward(const GradTensors& t, const BatchedAttentionOptions& options, const char* op,
                            double headroom, bool check_values_too) {
  const ConstBatchedTensor &q = t.q, &k = t.k, &v = t.v;
  const Extents inputs = check_inputs(op, q, k, v);
  const Range go = check_result(op, "grad_out", t.grad_out, q.dtype, {q.batch, "q.batch"}, {q.heads, "q.heads"},
                                {q.rows, "q.rows"}, {v.cols, "v.cols"});
  const Range grads[] = {
      check_result(op, "grad_q", as_const(t.grad_q), q.dtype, {q.batch, "q.batch"}, {q.heads, "q.heads"},
                   {q.rows, "q.rows"}, {q.cols, "q.cols"}),
      check_result(op, "grad_k", as_const(t.grad_k), q.dtype, {q.batch, "q.batch"}, {k.heads, "k.heads"},
                   {k.rows, "k.rows"}, {k.cols, "k.cols"}),
      check_result(op, "grad_v", as_const(t.grad_v), q.dtype, {q.batch, "q.batch"}, {v.heads, "v.heads"},
                   {v.rows, "v.rows"}, {v.cols, "v.cols"})};
  // Gradients are written while other heads still read the inputs, and each
  // gradient once per key/value head group: no sharing with either.
  for (std::size_t x = 0; x < 3; ++x) {
    for (const Range& input : inputs) check_apart(op, grads[x], input);
    check_apart(op, grads[x], go);
    for (std::size_t y = 0; y < x; ++y) check_apart(op, grads[x], grads[y]);
  }
  check_options(op, options);
  if (!check_values_too) return;
  check_values(op, q, k, v, options, headroom);
  check_grad_out_values(op, t.grad_out, options);
}

}  // namespace detail

void check_batched_attention(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                             const BatchedAttentionOptions& options, const char* op, bool check_values_too) {
  detail::check_batched_forward(q, k, v, out, options, op, kAttentionHeadroom, check_values_too);
}

void check_batched_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                      ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                      BatchedTensor grad_v, const BatchedAttentionOptions& options, const char* op,
                                      bool check_values_too) {
  detail::check_batched_backward({q, k, v, grad_out, grad_q, grad_k, grad_v}, options, op, kAttentionHeadroom,
                                 check_values_too);
}

void batched_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                               const BatchedAttentionOptions& options) {
  check_batched_attention(q, k, v, out, options, kOp);
  const AttentionOptions<float> ao = head_options(options);
  detail::run_heads_forward(q, k, v, out, options,
                            [&](std::size_t, std::size_t, ConstMatrix<float> qm, ConstMatrix<float> km,
                                ConstMatrix<float> vm, MatrixView<float> om) { attention_forward<float>(qm, km, vm, om, ao); });
}

void batched_attention_forward(Device device, ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                               BatchedTensor out, const BatchedAttentionOptions& options) {
  batched_attention_forward(device, Memory::host, q, k, v, out, options);
}

void batched_attention_forward(Device device, Memory memory, ConstBatchedTensor q, ConstBatchedTensor k,
                               ConstBatchedTensor v, BatchedTensor out, const BatchedAttentionOptions& options) {
  if (device == Device::cpu) return batched_attention_forward(q, k, v, out, options);  // its memory is the host's
  const auto kernel = detail::backend_kernel(device, kOp, memory, &BackendKernels::batched_attention_forward,
                                             &BackendKernels::batched_attention_forward_on_device);
  check_batched_attention(q, k, v, out, options, kOp, /*check_values_too=*/memory == Memory::host);
  kernel(q, k, v, out, options);
}

void batched_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                BatchedTensor grad_v, const BatchedAttentionOptions& options) {
  check_batched_attention_backward(q, k, v, grad_out, grad_q, grad_k, grad_v, options, kBackwardOp);
  const AttentionOptions<float> ao = head_options(options);
  detail::run_heads_backward({q, k, v, grad_out, grad_q, grad_k, grad_v}, options,
                             [&](std::size_t, std::size_t, ConstMatrix<float> qm, ConstMatrix<float> km,
                                 ConstMatrix<float> vm, ConstMatrix<float> gom, MatrixView<float> gq,
                                 MatrixView<float> gk, MatrixView<float> gv) {
                               attention_backward<float>(qm, km, vm, gom, gq, gk, gv, ao);
                             });
}

void batched_attention_backward(Device device, ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                BatchedTensor grad_v, const BatchedAttentionOptions& options) {
  batched_attention_backward(device, Memory::host, q, k, v, grad_out, grad_q, grad_k, grad_v, options);
}

void batched_attention_backward(Device device, Memory memory, ConstBatchedTensor q, ConstBatchedTensor k,
                                ConstBatchedTensor v, ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                BatchedTensor grad_k, BatchedTensor grad_v, const BatchedAttentionOptions& options) {
  if (device == Device::cpu) return batched_attention_backward(q, k, v, grad_out, grad_q, grad_k, grad_v, options);
  const auto kernel = detail::backend_kernel(device, kBackwardOp, memory, &BackendKernels::batched_attention_backward,
                                             &BackendKernels::batched_attention_backward_on_device);
  check_batched_attention_backward(q, k, v, grad_out, grad_q, grad_k, grad_v, options, kBackwardOp,
                                   /*check_values_too=*/memory == Memory::host);
  kernel(q, k, v, grad_out, grad_q, grad_k, grad_v, options);
}

void check_batched_attention_values(const char* op, ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                    const BatchedAttentionOptions& options, const std::vector<HeadScan>& scans) {
  if (scans.size() != scan_count(q, k))
    throw Error(at_op(op) + cpp_name("scans") + " has the wrong size (got " + num(scans.size()) + ", expected " +
                num(scan_count(q, k)) + ": one per head of q, k and v)");
  check_both_lengths(op, q, k, options);
  judge_scans(op, q, k, v, options, kAttentionHeadroom, scans, [&](std::size_t item) { return scans[item]; });
}

void check_batched_attention_backward_values(const char* op, ConstBatchedTensor q, ConstBatchedTensor k,
                                             ConstBatchedTensor v, ConstBatchedTensor grad_out,
                                             const BatchedAttentionOptions& options,
                                             const std::vector<HeadScan>& scans) {
  const std::size_t forward = scan_count(q, k), grads = q.batch * q.heads;
  if (scans.size() != forward + grads)
    throw Error(at_op(op) + cpp_name("scans") + " has the wrong size (got " + num(scans.size()) + ", expected " +
                num(forward + grads) + ": one per head of q, k, v and grad_out)");
  check_both_lengths(op, q, k, options);
  judge_scans(op, q, k, v, options, kAttentionHeadroom, scans, [&](std::size_t item) { return scans[item]; });
  judge_grad_out_scans(op, grad_out, scans.data() + forward);
}

}  // namespace entgraph
