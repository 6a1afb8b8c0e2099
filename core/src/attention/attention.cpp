// Dense attention: validation, query blocking, masks, and dispatch to the
// matrix-product kernels and the public transforms.
//
// Per block of query rows [r0, r1): S = scale Q_b K^T is computed only for the
// keys some row of the block can see (a causal mask hides a suffix), the
// transform turns it into P in place, and O_b = P V skips the zero weights.
// The backward recomputes P the same way.
//
// Determinism: the forward's blocks are independent. The backward's key-side
// sums (dK, dV, d upper) go to a number of partial buffers that depends on the
// problem size only; partial g always takes the same contiguous run of blocks
// in order, and the partials are added in a fixed order at the end, so the
// thread count never changes a bit of the result.
#include "entgraph/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/transforms.hpp"
#include "attention/score_range.hpp"
#include "kernels/matmul_kernels.hpp"
#include "runtime/backends.hpp"
#include "runtime/parallel.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {
namespace {

// ---------------------------------------------------------------------------
// Messages.

[[noreturn]] void fail(const char* op, const Message& what) { throw Error(at_op(op) + what); }

using detail::num;

// ---------------------------------------------------------------------------
// Validation.

struct Dims {
  std::size_t n = 0, m = 0, d = 0, dv = 0;
};

// values = false: the options' arrays lie in a device's memory, whose values
// the device's kernel checks; only their presence is checked here.
template <class T>
void check_transform(const char* op, const Dims& dims, const AttentionOptions<T>& o, bool values) {
  const Transform& t = o.transform;
  const TransformInfo* row = find_transform_info(t.kind);
  if (row == nullptr)
    fail(op, cpp_name("options.transform.kind") + " is not a transform (got " + num(static_cast<std::size_t>(t.kind)) +
                 ", expected a TransformKind)");
  switch (row->family) {
    case TransformFamily::entmax:
    case TransformFamily::top_k:
      detail::check_transform_scalars(t, op, "options.transform");
      return;
    case TransformFamily::span:
      if (o.span == nullptr)
        fail(op, cpp_name("options.span") + " is missing for adaptive_span (got nullptr, expected " + num(dims.n) + " values)");
      if (!(std::isfinite(o.span_ramp) && o.span_ramp > 0.0))
        fail(op, cpp_name("options.span_ramp") + " is out of range (got " + num(o.span_ramp) + ", expected a finite R > 0)");
      for (std::size_t i = 0; values && i < dims.n; ++i)
        if (!std::isfinite(o.span[i]))
          throw Error(at_op(op) + cpp_name("options.span") + "[" + num(i) + "] is not finite (got " +
                          num(static_cast<double>(o.span[i])) + ", expected a finite span)",
                      ErrorCode::bad_value);
      return;
    case TransformFamily::constrained: {
      if (o.upper == nullptr)
        fail(op, cpp_name("options.upper") + " is missing for " + row->name + " (got nullptr, expected " +
                     num(dims.m) + " values)");
      if (!values) return;
      // Prefix sums of the bounds of the keys that are not padding: the keys a
      // causal query sees are a prefix.
      std::vector<double> prefix(dims.m + 1, 0.0);
      std::vector<std::size_t> count(dims.m + 1, 0);
      for (std::size_t j = 0; j < dims.m; ++j) {
        const bool kept = o.key_padding == nullptr || o.key_padding[j] != 0;
        const double u = static_cast<double>(o.upper[j]);
        if (kept && !(std::isfinite(u) && u >= 0.0))
          fail(op, cpp_name("options.upper") + "[" + num(j) + "] is out of range (got " + num(u) + ", expected a finite bound >= 0)");
        prefix[j + 1] = prefix[j] + (kept ? u : 0.0);
        count[j + 1] = count[j] + (kept ? 1 : 0);
      }
      for (std::size_t i = 0; i < dims.n; ++i) {
        const std::size_t lim = o.causal ? causal_key_limit(i, dims.n, dims.m) : dims.m;
        if (count[lim] == 0) continue;  // fully masked: a zero row, no constraint
        if (prefix[lim] < 1.0 - 1e-6)   // the transforms' own tolerance
          fail(op, cpp_name("options.upper") + ": the bounds of the keys visible to query " + num(i) + " sum to less than 1 (got " +
                       num(prefix[lim]) + ", expected >= 1)");
        if (!o.causal) break;  // every query sees the same keys
      }
      return;
    }
  }
}

// Everything but the output views; values = false skips what reads the
// arrays' values (a device's own memory: its kernel scans them).
template <class T>
Dims validate(const char* op, ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, const AttentionOptions<T>& o,
              bool values = true) {
  Dims dims{q.rows, k.rows, q.cols, v.cols};
  if (q.rows == 0) fail(op, cpp_name("q.rows") + " is 0 (got 0 queries, expected n >= 1)");
  if (k.rows == 0) fail(op, cpp_name("k.rows") + " is 0 (got 0 keys, expected m >= 1)");
  if (q.cols == 0) fail(op, cpp_name("q.cols") + " is 0 (got d = 0, expected d >= 1)");
  if (k.cols != q.cols)
    fail(op, cpp_name("k.cols") + " does not match " + cpp_name("q.cols") + " (got " + num(k.cols) + ", expected " + num(q.cols) + ")");
  if (v.rows != k.rows)
    fail(op, cpp_name("v.rows") + " does not match " + cpp_name("k.rows") + " (got " + num(v.rows) + ", expected " + num(k.rows) + ")");
  if (v.cols == 0) fail(op, cpp_name("v.cols") + " is 0 (got dv = 0, expected dv >= 1)");
  detail::check_view(op, "q", q);
  detail::check_view(op, "k", k);
  detail::check_view(op, "v", v);
  if (o.block_rows == 0) fail(op, cpp_name("options.block_rows") + " is 0 (got 0, expected >= 1)");
  check_attention_scale(o.scale, op, "options.scale");
  check_transform(op, dims, o, values);
  if (!values) return dims;
  detail::check_finite<T>(op, "q", q);
  detail::check_finite<T>(op, "k", k);
  detail::check_finite<T>(op, "v", v);
  detail::check_score_range<T>(op, q, k, o.scale, "options.scale", 2.0);  // 2: the products' rounding
  detail::check_value_range<T>(op, v);
  return dims;
}

// ---------------------------------------------------------------------------
// Computation.

// A leading stride for a transposed copy with `cols` columns that is not a
// multiple of 4 KiB, so that the rows of a column panel do not all compete for
// the same L1 sets.
std::size_t padded_stride(std::size_t cols) { return (cols + 15) / 16 * 16 + 16; }

template <class T>
std::vector<T> transposed(ConstMatrix<T> x, std::size_t ld) {
  std::vector<T> t(x.cols * ld, T(0));
  for (std::size_t i = 0; i < x.rows; ++i) {
    const T* row = x.row(i);
    for (std::size_t j = 0; j < x.cols; ++j) t[j * ld + i] = row[j];
  }
  return t;
}

template <class T>
struct Scratch {
  std::vector<T> p, scores, dp, ds, upper, dupper, row_grad;
  std::vector<std::uint8_t> mask;
};

template <class T>
struct Context {
  Dims dims;
  T scale;
  const AttentionOptions<T>* o;
  ConstMatrix<T> q, k, v;
  const detail::MatmulKernels<T>* mk;
  std::vector<T> kt;  // K^T, d x m at stride ldkt
  std::size_t ldkt;
  std::size_t nblocks;
  std::vector<std::size_t> padded_keys;  // ascending

  Context(const Dims& dm, const AttentionOptions<T>& opt, ConstMatrix<T> q_, ConstMatrix<T> k_, ConstMatrix<T> v_)
      : dims(dm), o(&opt), q(q_), k(k_), v(v_), mk(&detail::matmul_kernels_for<T>()) {
    scale = static_cast<T>(opt.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(dims.d)) : opt.scale);
    ldkt = padded_stride(dims.m);
    kt = transposed<T>(k, ldkt);
    nblocks = dims.n / opt.block_rows + (dims.n % opt.block_rows != 0);  // no overflow for huge block_rows
    if (opt.key_padding)
      for (std::size_t j = 0; j < dims.m; ++j)
        if (opt.key_padding[j] == 0) padded_keys.push_back(j);
  }

  std::size_t block_begin(std::size_t b) const { return b * o->block_rows; }
  std::size_t block_end(std::size_t b) const {
    const std::size_t r0 = block_begin(b);
    return r0 + std::min(dims.n - r0, o->block_rows);
  }
  // Keys visible to some query of [r0, r1): [0, visible_end(r1)).
  std::size_t visible_end(std::size_t r1) const { return o->causal ? causal_key_limit(r1 - 1, dims.n, dims.m) : dims.m; }

  // The keep-mask of rows [r0, r1) x keys [0, cols), or an empty view if every
  // entry is kept.
  MaskView block_mask(std::size_t r0, std::size_t r1, std::size_t cols, Scratch<T>& s) const {
    const bool causal_cuts = o->causal && causal_key_limit(r0, dims.n, dims.m) < cols;
    if (!causal_cuts && o->key_padding == nullptr) return {};
    const std::size_t rows = r1 - r0;
    s.mask.resize(rows * cols);
    for (std::size_t i = 0; i < rows; ++i) {
      std::uint8_t* row = s.mask.data() + i * cols;
      const std::size_t lim = o->causal ? std::min(cols, causal_key_limit(r0 + i, dims.n, dims.m)) : cols;
      for (std::size_t j = 0; j < lim; ++j) row[j] = o->key_padding == nullptr || o->key_padding[j] != 0;
      std::fill(row + lim, row + cols, std::uint8_t(0));
    }
    return {s.mask.data(), rows, cols};
  }

  // Sets the masked scores of rows [r0, r1) x keys [0, cols) to -inf, which
  // every transform maps to exactly 0, as it does a masked entry (and a row
  // of -inf to a zero row). Cheaper than a mask: the transforms' fast paths
  // take unmasked rows.
  void mask_scores(std::size_t r0, std::size_t r1, std::size_t cols, T* sp, std::size_t lds) const {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    for (std::size_t i = 0; i < r1 - r0; ++i) {
      T* row = sp + i * lds;
      const std::size_t lim = o->causal ? std::min(cols, causal_key_limit(r0 + i, dims.n, dims.m)) : cols;
      std::fill(row + lim, row + cols, kNegInf);
      for (std::size_t j : padded_keys) {
        if (j >= lim) break;
        row[j] = kNegInf;
      }
    }
  }

  // The bounds broadcast to rows x cols.
  MatrixView<const T> block_upper(std::size_t rows, std::size_t cols, Scratch<T>& s) const {
    s.upper.resize(rows * cols);
    for (std::size_t i = 0; i < rows; ++i) std::copy(o->upper, o->upper + cols, s.upper.data() + i * cols);
    return {s.upper.data(), rows, cols};
  }

  AdaptiveSpan span_shape(std::size_t r0) const {
    return {o->span_ramp, static_cast<std::ptrdiff_t>(r0) + static_cast<std::ptrdiff_t>(dims.m) -
                              static_cast<std::ptrdiff_t>(dims.n)};
  }

  // Writes the weights of rows [r0, r1) to columns [0, jmax) of p (stride
  // ldp) and returns jmax: columns past it are masked for every row of the
  // block and are not written.
  std::size_t block_probs(std::size_t r0, std::size_t r1, T* p, std::size_t ldp, Scratch<T>& s) const {
    const std::size_t rows = r1 - r0;
    const std::size_t cols = visible_end(r1);
    if (cols == 0) return 0;
    const TransformKind kind = o->transform.kind;
    // The transforms run in place (P overwrites S), except the constrained
    // ones: their row solvers clear p before they have read all of z.
    const bool in_place = o->transform.info().family != TransformFamily::constrained;
    T* sdata = p;
    std::size_t lds = ldp;
    if (!in_place) {
      s.scores.resize(rows * cols);
      sdata = s.scores.data();
      lds = cols;
    }
    mk->gemm_nn(rows, cols, dims.d, scale, q.row(r0), q.stride, kt.data(), ldkt, sdata, lds, false, false);
    const MatrixView<const T> sv(sdata, rows, cols, lds);
    const MatrixView<T> pv(p, rows, cols, ldp);
    // The constrained transforms check the bounds of every unmasked entry
    // (padding keys' bounds are not checked here), so they get a real mask.
    MaskView mask;
    if (in_place)
      mask_scores(r0, r1, cols, sdata, lds);
    else
      mask = block_mask(r0, r1, cols, s);
    switch (kind) {
      case TransformKind::adaptive_span:
        adaptive_span<T>(sv, o->span + r0, span_shape(r0), pv, mask);
        break;
      case TransformKind::constrained_softmax:
        constrained_softmax<T>(sv, block_upper(rows, cols, s), pv, mask);
        break;
      case TransformKind::constrained_sparsemax:
        constrained_sparsemax<T>(sv, block_upper(rows, cols, s), pv, mask);
        break;
      default:
        transform_forward<T>(o->transform, sv, pv, mask);
        break;
    }
    return cols;
  }
};

// The fraction of nonzero weights in a block, estimated from every 4th row
// (it only steers the choice of kernels, never the result's meaning).
template <class T>
double density(const T* p, std::size_t rows, std::size_t cols, std::size_t ldp) {
  std::size_t nnz = 0, seen = 0;
  for (std::size_t i = 0; i < rows; i += 4, seen += cols) {
    const T* row = p + i * ldp;
    std::uint32_t row_nnz = 0;
    for (std::size_t j = 0; j < cols; ++j) row_nnz += row[j] != T(0);
    nnz += row_nnz;
  }
  return static_cast<double>(nnz) / static_cast<double>(seen);
}

// Products with P (or dS, which is zero wherever P is) skip its zeros below
// half density, where that pays for finding them.
constexpr double kSparseDensity = 0.5;
// dP = dO V^T is computed only where P > 0 (dot by dot) below this density.
constexpr double kSampledDensity = 0.25;

template <class T>
void run_forward(const Dims& dims, ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, MatrixView<T> out,
                 const AttentionOptions<T>& o, MatrixView<T> probs) {
  const Context<T> c(dims, o, q, k, v);
  const std::size_t m = dims.m;
  detail::parallel_for(c.nblocks, 1, [&](std::size_t b0, std::size_t b1) {
    Scratch<T> s;
    for (std::size_t b = b0; b < b1; ++b) {
      const std::size_t r0 = c.block_begin(b), r1 = c.block_end(b), rows = r1 - r0;
      T* p;
      std::size_t ldp;
      if (probs.empty()) {
        ldp = padded_stride(m);
        s.p.resize(rows * ldp);
        p = s.p.data();
      } else {
        p = probs.row(r0);
        ldp = probs.stride;
      }
      const std::size_t cols = c.block_probs(r0, r1, p, ldp, s);
      if (!probs.empty())
        for (std::size_t i = 0; i < rows; ++i) std::fill(p + i * ldp + cols, p + i * ldp + m, T(0));
      c.mk->gemm_nn(rows, dims.dv, cols, T(1), p, ldp, v.data, v.stride, out.row(r0), out.stride, false,
                    density(p, rows, cols, ldp) < kSparseDensity);
    }
  });
}

// Partial buffers of the key-side sums: a function of the problem size only.
std::size_t partial_count(std::size_t nblocks, std::size_t m, std::size_t d, std::size_t dv) {
  constexpr std::size_t kMaxPartials = 16;
  constexpr std::size_t kBudget = std::size_t(1) << 23;  // elements across all partials
  const std::size_t by_memory = std::max<std::size_t>(1, kBudget / (m * (d + dv + 1)));
  return std::max<std::size_t>(1, std::min({nblocks, kMaxPartials, by_memory}));
}

template <class T>
void run_backward(const Dims& dims, ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, ConstMatrix<T> grad_out,
                  MatrixView<T> grad_q, MatrixView<T> grad_k, MatrixView<T> grad_v, const AttentionOptions<T>& o,
                  AttentionParamGrads<T>* params) {
  const Context<T> c(dims, o, q, k, v);
  const std::size_t m = dims.m, d = dims.d, dv = dims.dv;
  const TransformKind kind = o.transform.kind;
  const TransformInfo& row = o.transform.info();
  const bool want_alpha = params != nullptr && row.parameter == TransformParameter::alpha;
  T* const grad_span = params != nullptr && row.family == TransformFamily::span ? params->span : nullptr;
  T* const grad_upper = params != nullptr && row.family == TransformFamily::constrained ? params->upper : nullptr;

  const std::size_t ldvt = padded_stride(m);
  const std::vector<T> vt = transposed<T>(v, ldvt);
  const std::size_t ld = padded_stride(m);

  const std::size_t parts = partial_count(c.nblocks, m, d, dv);
  // Partial 0 is the output itself; the others are zeroed scratch.
  // Each partial is zeroed by the task that fills it.
  const std::size_t part_size = m * (d + dv + (grad_upper ? 1 : 0));
  const std::unique_ptr<T[]> extra(new T[(parts - 1) * part_size]);
  std::vector<double> block_alpha(c.nblocks, 0.0);

  detail::parallel_for(parts, 1, [&](std::size_t g0, std::size_t g1) {
    Scratch<T> s;
    for (std::size_t g = g0; g < g1; ++g) {
      T* dk = grad_k.data;
      std::size_t ldk = grad_k.stride;
      T* dvp = grad_v.data;
      std::size_t ldv = grad_v.stride;
      T* du = grad_upper;
      if (g > 0) {
        T* base = extra.get() + (g - 1) * part_size;
        dk = base;
        ldk = d;
        dvp = base + m * d;
        ldv = dv;
        du = grad_upper ? base + m * (d + dv) : nullptr;
      }
      if (du) std::fill(du, du + m, T(0));
      // The partial's first block with visible keys overwrites it (rows past
      // its keys are zeroed), so that it needs no separate clearing pass.
      bool fresh = true;
      auto clear_rows = [&](std::size_t j0) {
        for (std::size_t j = j0; j < m; ++j) {
          std::fill(dk + j * ldk, dk + j * ldk + d, T(0));
          std::fill(dvp + j * ldv, dvp + j * ldv + dv, T(0));
        }
      };
      const std::size_t bb = g * c.nblocks / parts, be = (g + 1) * c.nblocks / parts;
      for (std::size_t b = bb; b < be; ++b) {
        const std::size_t r0 = c.block_begin(b), r1 = c.block_end(b), rows = r1 - r0;
        // Scratch rows at a stride that is not a multiple of 4 KiB: the
        // transposed products walk down their columns.
        s.p.resize(rows * ld);
        T* p = s.p.data();
        const std::size_t cols = c.block_probs(r0, r1, p, ld, s);
        if (cols == 0) {
          for (std::size_t i = r0; i < r1; ++i) std::fill(grad_q.row(i), grad_q.row(i) + d, T(0));
          if (grad_span) std::fill(grad_span + r0, grad_span + r1, T(0));
          continue;
        }
        // dP = dO V^T, needed only where P > 0.
        s.dp.resize(rows * ld);
        const double dens = density(p, rows, cols, ld);
        const bool sparse = dens < kSparseDensity;
        if (dens < kSampledDensity)
          c.mk->gemm_nt_sampled(rows, cols, dv, T(1), grad_out.row(r0), grad_out.stride, v.data, v.stride, p, ld,
                                s.dp.data(), ld);
        else
          c.mk->gemm_nn(rows, cols, dv, T(1), grad_out.row(r0), grad_out.stride, vt.data(), ldvt, s.dp.data(), ld,
                        false, false);
        // dS = transform backward.
        s.ds.resize(rows * ld);
        const MatrixView<const T> pv(p, rows, cols, ld);
        const MatrixView<const T> dpv(s.dp.data(), rows, cols, ld);
        const MatrixView<T> dsv(s.ds.data(), rows, cols, ld);
        switch (kind) {
          case TransformKind::adaptive_span:
            adaptive_span_backward<T>(pv, dpv, o.span + r0, c.span_shape(r0), dsv,
                                      grad_span ? grad_span + r0 : nullptr);
            break;
          case TransformKind::constrained_softmax:
          case TransformKind::constrained_sparsemax: {
            const MatrixView<const T> uv = c.block_upper(rows, cols, s);
            MatrixView<T> duv;
            if (du) {
              s.dupper.resize(rows * cols);
              duv = {s.dupper.data(), rows, cols};
            }
            if (kind == TransformKind::constrained_softmax)
              constrained_softmax_backward<T>(pv, uv, dpv, dsv, duv);
            else
              constrained_sparsemax_backward<T>(pv, uv, dpv, dsv, duv);
            if (du)
              for (std::size_t i = 0; i < rows; ++i)
                for (std::size_t j = 0; j < cols; ++j) du[j] += duv(i, j);
            break;
          }
          default: {
            T* row_alpha = nullptr;
            if (want_alpha) {
              s.row_grad.assign(rows, T(0));
              row_alpha = s.row_grad.data();
            }
            transform_backward<T>(o.transform, pv, dpv, dsv, row_alpha);
            if (want_alpha) {
              double sum = 0.0;
              for (std::size_t i = 0; i < rows; ++i) sum += static_cast<double>(row_alpha[i]);
              block_alpha[b] = sum;
            }
            break;
          }
        }
        // dQ_b = scale dS K; dK += scale dS^T Q_b; dV += P^T dO_b.
        c.mk->gemm_nn(rows, d, cols, c.scale, s.ds.data(), ld, k.data, k.stride, grad_q.row(r0), grad_q.stride, false,
                      sparse);
        c.mk->gemm_tn(cols, d, rows, c.scale, s.ds.data(), ld, q.row(r0), q.stride, dk, ldk, !fresh, sparse);
        c.mk->gemm_tn(cols, dv, rows, T(1), p, ld, grad_out.row(r0), grad_out.stride, dvp, ldv, !fresh, sparse);
        if (fresh) clear_rows(cols);
        fresh = false;
      }
      if (fresh) clear_rows(0);
    }
  });

  if (parts > 1) {
    detail::parallel_for(m, detail::grain_for(parts * (d + dv)), [&](std::size_t j0, std::size_t j1) {
      for (std::size_t g = 1; g < parts; ++g) {
        const T* base = extra.get() + (g - 1) * part_size;
        for (std::size_t j = j0; j < j1; ++j) {
          T* dk = grad_k.row(j);
          const T* pk = base + j * d;
          for (std::size_t x = 0; x < d; ++x) dk[x] += pk[x];
          T* dvr = grad_v.row(j);
          const T* pv = base + m * d + j * dv;
          for (std::size_t x = 0; x < dv; ++x) dvr[x] += pv[x];
          if (grad_upper) grad_upper[j] += base[m * (d + dv) + j];
        }
      }
    });
  }
  if (params != nullptr) {
    double alpha = 0.0;
    for (double a : block_alpha) alpha += a;
    params->alpha = want_alpha ? alpha : 0.0;
  }
}

constexpr const char* kForward = "attention_forward";
constexpr const char* kBackward = "attention_backward";
constexpr const char* kMultiForward = "multihead_attention_forward";
constexpr const char* kMultiBackward = "multihead_attention_backward";

template <class T>
Dims validate_forward(const char* op, ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, MatrixView<T> out,
                      const AttentionOptions<T>& o, MatrixView<T> probs, bool values = true) {
  const Dims dims = validate<T>(op, q, k, v, o, values);
  detail::check_shape(op, "out", out, dims.n, dims.dv);
  if (!probs.empty()) detail::check_shape(op, "probs", probs, dims.n, dims.m);
  return dims;
}

template <class T>
Dims validate_backward(const char* op, ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, ConstMatrix<T> grad_out,
                       MatrixView<T> grad_q, MatrixView<T> grad_k, MatrixView<T> grad_v, const AttentionOptions<T>& o,
                       bool values = true) {
  const Dims dims = validate<T>(op, q, k, v, o, values);
  detail::check_shape(op, "grad_out", grad_out, dims.n, dims.dv);
  detail::check_shape(op, "grad_q", grad_q, dims.n, dims.d);
  detail::check_shape(op, "grad_k", grad_k, dims.m, dims.d);
  detail::check_shape(op, "grad_v", grad_v, dims.m, dims.dv);
  if (values) detail::check_finite<T>(op, "grad_out", grad_out);
  return dims;
}

template <class T>
AttentionOptions<T> head_options(const AttentionOptions<T>& o, std::size_t h, std::size_t n, std::size_t m) {
  AttentionOptions<T> out = o;
  if (o.span) out.span = o.span + h * n;
  if (o.upper) out.upper = o.upper + h * m;
  return out;
}

void check_heads(const char* op, const char* name, std::size_t heads, std::size_t expected) {
  if (heads != expected)
    fail(op,
         std::string(name) + ".heads does not match q.heads (got " + num(heads) + ", expected " + num(expected) + ")");
}

// Heads run one after the other, each on the whole pool, unless there are at
// least as many heads as threads; a head's result is the same either way.
void for_each_head(std::size_t heads, const std::function<void(std::size_t)>& fn) {
  if (heads > 1 && heads >= num_threads()) {
    detail::parallel_for(heads, 1, [&](std::size_t h0, std::size_t h1) {
      for (std::size_t h = h0; h < h1; ++h) fn(h);
    });
  } else {
    for (std::size_t h = 0; h < heads; ++h) fn(h);
  }
}

}  // namespace

template <class T>
void attention_forward(ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, MatrixView<T> out,
                       const AttentionOptions<T>& options, MatrixView<T> probs) {
  const Dims dims = validate_forward<T>(kForward, q, k, v, out, options, probs);
  run_forward<T>(dims, q, k, v, out, options, probs);
}

template <class T>
void attention_backward(ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, ConstMatrix<T> grad_out,
                        MatrixView<T> grad_q, MatrixView<T> grad_k, MatrixView<T> grad_v,
                        const AttentionOptions<T>& options, AttentionParamGrads<T>* params) {
  const Dims dims = validate_backward<T>(kBackward, q, k, v, grad_out, grad_q, grad_k, grad_v, options);
  run_backward<T>(dims, q, k, v, grad_out, grad_q, grad_k, grad_v, options, params);
}

template <class T>
void multihead_attention_forward(ConstHeads<T> q, ConstHeads<T> k, ConstHeads<T> v, HeadsView<T> out,
                                 const AttentionOptions<T>& options, HeadsView<T> probs) {
  const char* op = kMultiForward;
  if (q.heads == 0) fail(op, cpp_name("q.heads") + " is 0 (got 0, expected >= 1)");
  check_heads(op, "k", k.heads, q.heads);
  check_heads(op, "v", v.heads, q.heads);
  check_heads(op, "out", out.heads, q.heads);
  const bool want_probs = probs.data != nullptr;
  if (want_probs) check_heads(op, "probs", probs.heads, q.heads);
  std::vector<Dims> dims(q.heads);
  for (std::size_t h = 0; h < q.heads; ++h)
    dims[h] =
        validate_forward<T>(op, q.head(h), k.head(h), v.head(h), out.head(h), head_options(options, h, q.rows, k.rows),
                            want_probs ? probs.head(h) : MatrixView<T>{});
  for_each_head(q.heads, [&](std::size_t h) {
    run_forward<T>(dims[h], q.head(h), k.head(h), v.head(h), out.head(h), head_options(options, h, q.rows, k.rows),
                   want_probs ? probs.head(h) : MatrixView<T>{});
  });
}

template <class T>
void multihead_attention_backward(ConstHeads<T> q, ConstHeads<T> k, ConstHeads<T> v, ConstHeads<T> grad_out,
                                  HeadsView<T> grad_q, HeadsView<T> grad_k, HeadsView<T> grad_v,
                                  const AttentionOptions<T>& options, double* grad_alpha) {
  const char* op = kMultiBackward;
  if (q.heads == 0) fail(op, cpp_name("q.heads") + " is 0 (got 0, expected >= 1)");
  check_heads(op, "k", k.heads, q.heads);
  check_heads(op, "v", v.heads, q.heads);
  check_heads(op, "grad_out", grad_out.heads, q.heads);
  check_heads(op, "grad_q", grad_q.heads, q.heads);
  check_heads(op, "grad_k", grad_k.heads, q.heads);
  check_heads(op, "grad_v", grad_v.heads, q.heads);
  std::vector<Dims> dims(q.heads);
  for (std::size_t h = 0; h < q.heads; ++h)
    dims[h] = validate_backward<T>(op, q.head(h), k.head(h), v.head(h), grad_out.head(h), grad_q.head(h),
                                   grad_k.head(h), grad_v.head(h), head_options(options, h, q.rows, k.rows));
  for_each_head(q.heads, [&](std::size_t h) {
    AttentionParamGrads<T> params;
    run_backward<T>(dims[h], q.head(h), k.head(h), v.head(h), grad_out.head(h), grad_q.head(h), grad_k.head(h),
                    grad_v.head(h), head_options(options, h, q.rows, k.rows), &params);
    if (grad_alpha) grad_alpha[h] = params.alpha;
  });
}

void attention_forward(Device device, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                       MatrixView<float> out, const AttentionOptions<float>& options) {
  attention_forward(device, Memory::host, q, k, v, out, options);
}

void attention_forward(Device device, Memory memory, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                       MatrixView<float> out, const AttentionOptions<float>& options) {
  if (device == Device::cpu) return attention_forward<float>(q, k, v, out, options);  // its memory is the host's
  const auto kernel = detail::backend_kernel(device, kForward, memory, &BackendKernels::attention_forward,
                                             &BackendKernels::attention_forward_on_device);
  validate_forward<float>(kForward, q, k, v, out, options, {}, /*values=*/memory == Memory::host);
  kernel(q, k, v, out, options);
}

void check_attention_values(const char* op, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                            const AttentionOptions<float>& options, const HeadScan& q_scan, const HeadScan& k_scan,
                            const HeadScan& v_scan) {
  (void)q, (void)k;  // their shapes were checked by the core; the scans stand for their values
  // validate()'s order and headroom: q, k, v finite; the score range; the value range.
  detail::judge_attention_scans(op, v.rows, options.scale, "options.scale", 2.0, q_scan, k_scan, v_scan);
}

void attention_backward(Device device, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                        ConstMatrix<float> grad_out, MatrixView<float> grad_q, MatrixView<float> grad_k,
                        MatrixView<float> grad_v, const AttentionOptions<float>& options) {
  attention_backward(device, Memory::host, q, k, v, grad_out, grad_q, grad_k, grad_v, options);
}

void attention_backward(Device device, Memory memory, ConstMatrix<float> q, ConstMatrix<float> k,
                        ConstMatrix<float> v, ConstMatrix<float> grad_out, MatrixView<float> grad_q,
                        MatrixView<float> grad_k, MatrixView<float> grad_v, const AttentionOptions<float>& options) {
  if (device == Device::cpu) return attention_backward<float>(q, k, v, grad_out, grad_q, grad_k, grad_v, options);
  const auto kernel = detail::backend_kernel(device, kBackward, memory, &BackendKernels::attention_backward,
                                             &BackendKernels::attention_backward_on_device);
  validate_backward<float>(kBackward, q, k, v, grad_out, grad_q, grad_k, grad_v, options, /*values=*/memory == Memory::host);
  kernel(q, k, v, grad_out, grad_q, grad_k, grad_v, options);
}

void check_attention_backward_values(const char* op, ConstMatrix<float> q, ConstMatrix<float> k,
                                     ConstMatrix<float> v, const AttentionOptions<float>& options,
                                     const HeadScan& q_scan, const HeadScan& k_scan, const HeadScan& v_scan,
                                     const HeadScan& grad_out_scan) {
  check_attention_values(op, q, k, v, options, q_scan, k_scan, v_scan);
  // validate_backward's last check: grad_out finite.
  if (grad_out_scan.bad)
    detail::throw_non_finite(op, "grad_out", grad_out_scan.bad_row, grad_out_scan.bad_col,
                             static_cast<double>(grad_out_scan.bad_value), false);
}

#define ENTGRAPH_INSTANTIATE_ATTENTION(T)                                                                             \
  template void attention_forward<T>(ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, MatrixView<T>,                   \
                                     const AttentionOptions<T>&, MatrixView<T>);                                      \
  template void attention_backward<T>(ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, ConstMatrix<T>, MatrixView<T>,  \
                                      MatrixView<T>, MatrixView<T>, const AttentionOptions<T>&,                       \
                                      AttentionParamGrads<T>*);                                                       \
  template void multihead_attention_forward<T>(ConstHeads<T>, ConstHeads<T>, ConstHeads<T>, HeadsView<T>,             \
                                               const AttentionOptions<T>&, HeadsView<T>);                             \
  template void multihead_attention_backward<T>(ConstHeads<T>, ConstHeads<T>, ConstHeads<T>, ConstHeads<T>,           \
                                                HeadsView<T>, HeadsView<T>, HeadsView<T>, const AttentionOptions<T>&, \
                                                double*);

ENTGRAPH_INSTANTIATE_ATTENTION(float)
ENTGRAPH_INSTANTIATE_ATTENTION(double)
#undef ENTGRAPH_INSTANTIATE_ATTENTION

}  // namespace entgraph
