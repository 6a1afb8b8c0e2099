// Attention on the edges of a graph, with per-query exactness certificates
// (see graph_attention.hpp for the semantics and the certificate).
//
// Per query: gather the allowed keys of its graph row, compute their scores
// (dot products accumulated in double), apply the transform to that short row,
// certify it against an upper bound on every left-out score, and, if asked,
// recompute an uncertified query over all its allowed keys. Queries are
// independent and run on the thread pool; each writes only its own output row
// and flag, so the result does not depend on the thread count.
#include "entgraph/graph_attention.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "entgraph/error.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/transforms.hpp"
#include "kernels/matmul_kernels.hpp"
#include "runtime/parallel.hpp"
#include "transforms/row_driver.hpp"

namespace entgraph {
namespace {

constexpr const char* kOp = "graph_attention_forward";

[[noreturn]] void fail(const std::string& what) { throw Error(std::string(kOp) + ": " + what); }

using detail::num;

void check_transform(const Transform& t) {
  switch (t.kind) {
    case TransformKind::softmax:
    case TransformKind::sparsemax:
    case TransformKind::entmax15:
      return;
    case TransformKind::entmax:
    case TransformKind::topk_softmax:
      detail::check_transform_scalars(t, kOp, "options.attention.transform");
      return;
    case TransformKind::adaptive_span:
    case TransformKind::constrained_softmax:
    case TransformKind::constrained_sparsemax:
      fail(std::string("options.attention.transform is not supported on a graph (got ") +
           (t.kind == TransformKind::adaptive_span         ? "adaptive_span"
            : t.kind == TransformKind::constrained_softmax ? "constrained_softmax"
                                                           : "constrained_sparsemax") +
           ", expected softmax, sparsemax, entmax15, entmax or topk_softmax)");
  }
  fail("options.attention.transform.kind is not a transform (got " + num(static_cast<std::size_t>(t.kind)) +
       ", expected a TransformKind)");
}

template <class T>
void validate(ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, const Graph& graph, MatrixView<T> out,
              const GraphAttentionOptions<T>& options) {
  const AttentionOptions<T>& o = options.attention;
  if (q.rows == 0) fail("q.rows is 0 (got 0 queries, expected n >= 1)");
  if (k.rows == 0) fail("k.rows is 0 (got 0 keys, expected m >= 1)");
  if (q.cols == 0) fail("q.cols is 0 (got d = 0, expected d >= 1)");
  if (k.cols != q.cols) fail("k.cols does not match q.cols (got " + num(k.cols) + ", expected " + num(q.cols) + ")");
  if (v.rows != k.rows) fail("v.rows does not match k.rows (got " + num(v.rows) + ", expected " + num(k.rows) + ")");
  if (v.cols == 0) fail("v.cols is 0 (got dv = 0, expected dv >= 1)");
  if (k.rows > std::numeric_limits<std::uint32_t>::max())
    fail("k.rows is too large for a graph (got " + num(k.rows) + ", expected < 2^32)");
  detail::check_view(kOp, "q", q);
  detail::check_view(kOp, "k", k);
  detail::check_view(kOp, "v", v);
  detail::check_shape(kOp, "out", out, q.rows, v.cols);
  if (!std::isfinite(o.scale))
    fail("options.attention.scale is not finite (got " + num(o.scale) + ", expected a finite number)");
  check_transform(o.transform);
  if (graph.queries != q.rows)
    fail("graph.queries does not match q.rows (got " + num(graph.queries) + ", expected " + num(q.rows) + ")");
  if (graph.keys != k.rows)
    fail("graph.keys does not match k.rows (got " + num(graph.keys) + ", expected " + num(k.rows) + ")");
  graph.validate("graph_attention_forward: graph");
  detail::check_finite<T>(kOp, "q", q);
  detail::check_finite<T>(kOp, "k", k);
  detail::check_finite<T>(kOp, "v", v);
}

// The exponent parameter of the certificate: alpha of alpha-entmax (2 for
// sparsemax), 1 for the transforms certified only when complete.
double certificate_alpha(const Transform& t) {
  switch (t.kind) {
    case TransformKind::sparsemax:
      return 2.0;
    case TransformKind::entmax15:
      return 1.5;
    case TransformKind::entmax:
      return t.alpha;
    default:
      return 1.0;
  }
}

// Keys per block of the block-wise bound.
constexpr std::size_t kBoundBlock = 16;

// Left-out keys examined in decreasing norm order before falling back to the
// largest norm among all allowed keys.
constexpr std::size_t kNormWalk = 32;

template <class T>
struct Shared {
  std::size_t n = 0, m = 0, d = 0, dv = 0;
  double scale = 0.0;
  ConstMatrix<T> q, k, v;
  const Graph* graph = nullptr;
  const AttentionOptions<T>* o = nullptr;
  bool certify = true;
  std::vector<double> key_norm;           // ||k_j||
  std::vector<std::uint32_t> by_norm;     // allowed-by-padding keys, decreasing norm
  std::vector<double> prefix_max_norm;    // max norm over non-padding keys [0, j)
  std::vector<std::size_t> prefix_count;  // number of non-padding keys in [0, j)
  // Per block of kBoundBlock keys: the coordinate-wise max and min of its
  // non-padding keys (blocks x d each; a block without any is never read).
  std::vector<double> block_max, block_min;

  bool kept(std::size_t j) const { return o->key_padding == nullptr || o->key_padding[j] != 0; }
  std::size_t limit(std::size_t i) const { return o->causal ? causal_key_limit(i, n, m) : m; }
};

// float runs on the SIMD kernels of the current ISA, double on the reference.
template <class T>
const detail::MatmulKernels<T>& graph_kernels() {
  if constexpr (std::is_same_v<T, float>)
    return detail::matmul_kernels(cpu_isa());
  else
    return detail::reference_matmul_kernels<T>();
}

template <class T>
struct Scratch {
  std::vector<std::uint32_t> keys;
  std::vector<T> scores, probs, sorted;
};

// Scores of query i on `keys` into s.scores, then the transform into s.probs.
template <class T>
void score_and_transform(const Shared<T>& c, std::size_t i, Scratch<T>& s) {
  const std::size_t cnt = s.keys.size();
  s.scores.resize(cnt);
  s.probs.resize(cnt);
  graph_kernels<T>().gather_dot(c.q.row(i), c.k.data, c.k.stride, s.keys.data(), cnt, c.d, static_cast<T>(c.scale),
                                s.scores.data());
  if (cnt == 0) return;  // nothing to attend to: a zero row
  transform_forward<T>(c.o->transform, ConstMatrix<T>{s.scores.data(), 1, cnt}, MatrixView<T>{s.probs.data(), 1, cnt});
}

// out_i = sum_t p_t v_{keys[t]} (zero row when keys is empty).
template <class T>
void write_output(const Shared<T>& c, std::size_t i, Scratch<T>& s, MatrixView<T> out) {
  graph_kernels<T>().gather_axpy(s.probs.data(), c.v.data, c.v.stride, s.keys.data(), s.keys.size(), c.dv,
                                 out.row(i));
}

// An upper bound on ||k_j|| over the allowed keys j < lim that are not in
// graph row i (at least one exists).
template <class T>
double left_out_norm_bound(const Shared<T>& c, std::size_t i, std::size_t lim) {
  const std::uint32_t* b = c.graph->row_begin(i);
  const std::uint32_t* e = c.graph->row_end(i);
  const std::size_t walk = std::min(kNormWalk, c.by_norm.size());
  for (std::size_t t = 0; t < walk; ++t) {
    const std::uint32_t j = c.by_norm[t];
    if (j >= lim) continue;
    if (std::binary_search(b, e, j)) continue;
    return c.key_norm[j];  // the left-out key of largest norm
  }
  return c.prefix_max_norm[lim];
}

// An upper bound on scale q_i . k_j over the allowed keys j < lim that are
// not in graph row i: the maximum, over the blocks of keys not entirely in the
// row, of the bound of q_i . k on the block's coordinate box. -inf if every
// block is covered (cannot happen when a key is left out).
template <class T>
double left_out_box_bound(const Shared<T>& c, std::size_t i, std::size_t lim) {
  const T* qi = c.q.row(i);
  const double sign = c.scale < 0 ? -1.0 : 1.0;
  const std::uint32_t* p = c.graph->row_begin(i);
  const std::uint32_t* e = c.graph->row_end(i);
  double best = -std::numeric_limits<double>::infinity();
  for (std::size_t b0 = 0, b = 0; b0 < lim; b0 += kBoundBlock, ++b) {
    const std::size_t b1 = std::min(b0 + kBoundBlock, lim);
    std::size_t in_row = 0;
    for (; p != e && *p < b1; ++p) in_row += c.kept(*p) ? 1 : 0;
    if (in_row == c.prefix_count[b1] - c.prefix_count[b0]) continue;  // no left-out key here
    double sum = 0.0, slack = 0.0;
    for (std::size_t x = 0; x < c.d; ++x) {
      const double qx = sign * static_cast<double>(qi[x]);
      const double t = std::max(qx * c.block_max[b * c.d + x], qx * c.block_min[b * c.d + x]);
      sum += t;
      slack += std::abs(t);
    }
    best = std::max(best, std::abs(c.scale) * (sum + 1e-12 * slack));
  }
  return best;
}

// Whether the restricted row of query i (scores/probs of s) provably equals
// the dense row, given a bound `bound` on every left-out score.
template <class T>
bool certify(const Transform& t, Scratch<T>& s, double bound) {
  constexpr double eps = std::numeric_limits<T>::epsilon();
  const std::size_t cnt = s.scores.size();
  if (cnt == 0) return false;
  if (t.kind == TransformKind::topk_softmax) {
    if (cnt < t.k) return false;  // the dense row would keep a left-out key
    s.sorted.assign(s.scores.begin(), s.scores.end());
    std::nth_element(s.sorted.begin(), s.sorted.begin() + static_cast<std::ptrdiff_t>(t.k - 1), s.sorted.end(),
                     std::greater<T>());
    const double kth = static_cast<double>(s.sorted[t.k - 1]);
    const double margin = 64.0 * eps * (std::abs(kth) + std::abs(bound)) + 1e-6 * std::abs(kth);
    return kth - bound > margin;  // every left-out score is strictly below the kept ones
  }
  const double alpha = certificate_alpha(t);
  if (!(alpha > 1.0)) return false;  // softmax: only the complete row
  const double am1 = alpha - 1.0;
  // tau from the largest weight: p = ((alpha-1) s - tau)^(1/(alpha-1)).
  std::size_t best = 0;
  double smax = 0.0;
  for (std::size_t x = 0; x < cnt; ++x) {
    if (s.probs[x] > s.probs[best]) best = x;
    smax = std::max(smax, std::abs(static_cast<double>(s.scores[x])));
  }
  const double p = static_cast<double>(s.probs[best]);
  if (!(p > 0.0)) return false;
  const double tau = am1 * static_cast<double>(s.scores[best]) - std::pow(p, am1);
  const double margin = 64.0 * eps * (am1 * (smax + std::abs(bound)) + 1.0) + 1e-6 * std::abs(tau);
  return tau - am1 * bound >= margin;
}

// Queries are processed in tiles of kTile consecutive rows. When their key
// lists overlap (windows, buckets of neighbours), the tile's scores are one
// GEMM over the union of its keys, gathered once, instead of one gathered dot
// product per edge; each row then takes its own scores out of the tile.
constexpr std::size_t kTile = 16;

template <class T>
struct TileScratch {
  std::vector<std::uint32_t> cand;      // the tile's candidate keys, row after row
  std::vector<std::size_t> start;       // kTile + 1 offsets into cand
  std::vector<std::uint32_t> keys;      // the union of the tile's candidates, sorted
  std::vector<std::size_t> stamp;       // per key: 1 + the last tile that holds it
  std::vector<std::uint32_t> pos;       // per key of the union: its index in keys
  std::vector<T> ku, qt, scores;        // K of the union (|union| x d), Q^T of the tile (d x rows), S^T
  std::vector<T> block, probs, vu, out; // fast path: scores and P (rows x |union|), V of the union, P V
};

// Fills s.keys / s.scores of row r of the tile from the tile's block of
// transposed scores (|union| x rows).
template <class T>
void take_row(const TileScratch<T>& t, std::size_t r, std::size_t rows, Scratch<T>& s) {
  s.keys.assign(t.cand.begin() + static_cast<std::ptrdiff_t>(t.start[r]),
                t.cand.begin() + static_cast<std::ptrdiff_t>(t.start[r + 1]));
  s.scores.resize(s.keys.size());
  for (std::size_t x = 0; x < s.keys.size(); ++x) s.scores[x] = t.scores[t.pos[s.keys[x]] * rows + r];
}

// Transforms for which -inf scores stand exactly for "not a candidate".
bool tile_transform(const Transform& t) {
  return t.kind == TransformKind::softmax || t.kind == TransformKind::sparsemax ||
         t.kind == TransformKind::entmax15 || t.kind == TransformKind::entmax;
}

// The fast path of a tile (no certificates): the tile's rows as one block of
// scores over the union, -inf where a key is not a row's candidate, one
// transform call for the block and one GEMM for P V_union.
template <class T>
void whole_tile(const Shared<T>& c, TileScratch<T>& t, const std::uint32_t* ids, std::size_t rows,
                MatrixView<T> out, std::vector<std::uint8_t>& certified) {
  const std::size_t u = t.keys.size();
  t.block.assign(rows * u, -std::numeric_limits<T>::infinity());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t x = t.start[r]; x < t.start[r + 1]; ++x) {
      const std::size_t p = t.pos[t.cand[x]];
      t.block[r * u + p] = t.scores[p * rows + r];
    }
  t.probs.resize(rows * u);
  transform_forward<T>(c.o->transform, ConstMatrix<T>{t.block.data(), rows, u}, MatrixView<T>{t.probs.data(), rows, u});
  t.vu.resize(u * c.dv);
  for (std::size_t x = 0; x < u; ++x) std::copy_n(c.v.row(t.keys[x]), c.dv, t.vu.data() + x * c.dv);
  t.out.resize(rows * c.dv);
  graph_kernels<T>().gemm_nn(rows, c.dv, u, T(1), t.probs.data(), u, t.vu.data(), c.dv, t.out.data(), c.dv, false,
                             true);
  for (std::size_t r = 0; r < rows; ++r) {
    std::copy_n(t.out.data() + r * c.dv, c.dv, out.row(ids[r]));
    certified[ids[r]] = t.start[r + 1] - t.start[r] == c.prefix_count[c.limit(ids[r])] ? 1 : 0;
  }
}

template <class T>
void run(const Shared<T>& c, bool recompute, MatrixView<T> out, std::vector<std::uint8_t>& certified,
         std::vector<std::uint8_t>& recomputed) {
  const std::size_t avg_degree = c.graph->edges() / c.n + 1;
  const std::size_t tiles = (c.n + kTile - 1) / kTile;
  // Tiles take queries in the order of their first key, then their degree
  // (stable): queries of one bucket, whose rows are equal, end up in the same
  // tiles; for windows this is the identity.
  std::vector<std::uint32_t> order(c.n);
  for (std::size_t i = 0; i < c.n; ++i) order[i] = static_cast<std::uint32_t>(i);
  auto first_key = [&](std::uint32_t i) {
    return c.graph->degree(i) == 0 ? std::numeric_limits<std::uint32_t>::max() : *c.graph->row_begin(i);
  };
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const std::uint32_t fa = first_key(a), fb = first_key(b);
    return fa != fb ? fa < fb : c.graph->degree(a) < c.graph->degree(b);
  });
  detail::parallel_for(tiles, detail::grain_for(kTile * (avg_degree * (c.d + c.dv) + c.d)), [&](std::size_t b0,
                                                                                               std::size_t b1) {
    Scratch<T> s;
    TileScratch<T> t;
    for (std::size_t b = b0; b < b1; ++b) {
      const std::size_t i0 = b * kTile, rows = std::min(kTile, c.n - i0);
      const std::uint32_t* ids = order.data() + i0;  // the tile's queries
      t.cand.clear();
      t.start.assign(1, 0);
      std::size_t widest = 0;
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t lim = c.limit(ids[r]);
        for (const std::uint32_t* p = c.graph->row_begin(ids[r]); p != c.graph->row_end(ids[r]) && *p < lim; ++p)
          if (c.kept(*p)) t.cand.push_back(*p);
        t.start.push_back(t.cand.size());
        widest = std::max(widest, t.start[r + 1] - t.start[r]);
      }
      // The union: stamp the candidates, then scan the range they span when
      // it is short (windows, neighbourhoods), else sort them.
      t.keys.clear();
      // Rows that are each one run of consecutive keys (windows): the union
      // is one run too when the runs overlap or touch.
      bool runs = !t.cand.empty();
      std::uint32_t run_lo = 0, run_hi = 0;
      for (std::size_t r = 0; r < rows && runs; ++r) {
        const std::size_t a = t.start[r], e = t.start[r + 1];
        if (a == e) continue;
        const std::uint32_t lo = t.cand[a], hi = t.cand[e - 1];
        runs = hi - lo + 1 == e - a;
        if (a == 0 || run_lo > run_hi) {
          run_lo = lo;
          run_hi = hi;
        } else {
          runs = runs && lo <= run_hi + 1 && hi + 1 >= run_lo;
          run_lo = std::min(run_lo, lo);
          run_hi = std::max(run_hi, hi);
        }
      }
      if (runs) {
        for (std::uint32_t j = run_lo; j <= run_hi; ++j) t.keys.push_back(j);
      } else if (!t.cand.empty()) {
        if (t.stamp.size() != c.m) t.stamp.assign(c.m, 0);
        std::uint32_t lo = t.cand.front(), hi = t.cand.front();
        for (std::uint32_t j : t.cand) {
          lo = std::min(lo, j);
          hi = std::max(hi, j);
          t.stamp[j] = b + 1;
        }
        if (hi - lo <= 4 * t.cand.size()) {
          for (std::uint32_t j = lo; j <= hi; ++j)
            if (t.stamp[j] == b + 1) t.keys.push_back(j);
        } else {
          t.keys = t.cand;
          std::sort(t.keys.begin(), t.keys.end());
          t.keys.erase(std::unique(t.keys.begin(), t.keys.end()), t.keys.end());
        }
      }
      // The tile GEMM pays for |union| scores per row: worth it when the rows
      // share most of their keys.
      const bool tiled = std::is_same_v<T, float> && rows > 1 && widest >= 8 && t.keys.size() <= 2 * widest;
      if (tiled) {
        if (t.pos.size() != c.m) t.pos.assign(c.m, 0);
        for (std::size_t x = 0; x < t.keys.size(); ++x) t.pos[t.keys[x]] = static_cast<std::uint32_t>(x);
        // S^T (|union| x rows) = K_union Q_tile^T: K's rows are copied whole,
        // only the small Q tile is transposed.
        const std::size_t u = t.keys.size();
        t.ku.resize(u * c.d);
        for (std::size_t x = 0; x < u; ++x) std::copy_n(c.k.row(t.keys[x]), c.d, t.ku.data() + x * c.d);
        t.qt.resize(c.d * rows);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t y = 0; y < c.d; ++y) t.qt[y * rows + r] = c.q(ids[r], y);
        t.scores.resize(u * rows);
        graph_kernels<T>().gemm_nn(u, rows, c.d, static_cast<T>(c.scale), t.ku.data(), c.d, t.qt.data(), rows,
                                   t.scores.data(), rows, false, false);
        if (!c.certify && !recompute && tile_transform(c.o->transform)) {
          whole_tile<T>(c, t, ids, rows, out, certified);
          continue;
        }
      }
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t i = ids[r], lim = c.limit(i);
        const std::size_t allowed = c.prefix_count[lim];
        if (tiled) {
          take_row<T>(t, r, rows, s);
          s.probs.resize(s.keys.size());
          if (!s.keys.empty())
            transform_forward<T>(c.o->transform, ConstMatrix<T>{s.scores.data(), 1, s.keys.size()},
                                 MatrixView<T>{s.probs.data(), 1, s.keys.size()});
        } else {
          s.keys.assign(t.cand.begin() + static_cast<std::ptrdiff_t>(t.start[r]),
                        t.cand.begin() + static_cast<std::ptrdiff_t>(t.start[r + 1]));
          score_and_transform<T>(c, i, s);
        }
        bool ok = s.keys.size() == allowed;  // every allowed key (or none at all)
        if (!ok && c.certify) {
          const double qn = std::sqrt(std::inner_product(c.q.row(i), c.q.row(i) + c.d, c.q.row(i), 0.0,
                                                         std::plus<double>(), [](T a, T b) {
                                                           return static_cast<double>(a) * static_cast<double>(b);
                                                         }));
          const double norm_bound = std::abs(c.scale) * qn * left_out_norm_bound<T>(c, i, lim) * (1.0 + 1e-12);
          const double bound = std::min(norm_bound, left_out_box_bound<T>(c, i, lim));
          ok = certify<T>(c.o->transform, s, bound);
        }
        certified[i] = ok ? 1 : 0;
        if (!ok && recompute) {
          s.keys.clear();
          for (std::size_t j = 0; j < lim; ++j)
            if (c.kept(j)) s.keys.push_back(static_cast<std::uint32_t>(j));
          score_and_transform<T>(c, i, s);
          recomputed[i] = 1;
        }
        write_output<T>(c, i, s, out);
      }
    }
  });
}

}  // namespace

template <class T>
void graph_attention_forward(ConstMatrix<T> q, ConstMatrix<T> k, ConstMatrix<T> v, const Graph& graph,
                             MatrixView<T> out, const GraphAttentionOptions<T>& options, GraphAttentionReport* report) {
  validate<T>(q, k, v, graph, out, options);
  Shared<T> c;
  c.n = q.rows;
  c.m = k.rows;
  c.d = q.cols;
  c.dv = v.cols;
  c.q = q;
  c.k = k;
  c.v = v;
  c.graph = &graph;
  c.o = &options.attention;
  c.certify = options.certify;
  c.scale = options.attention.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(c.d)) : options.attention.scale;
  c.key_norm.resize(c.m);
  c.prefix_max_norm.assign(c.m + 1, 0.0);
  c.prefix_count.assign(c.m + 1, 0);
  for (std::size_t j = 0; j < c.m; ++j) {
    double acc = 0.0;
    for (std::size_t x = 0; x < c.d; ++x) acc += static_cast<double>(k(j, x)) * static_cast<double>(k(j, x));
    c.key_norm[j] = std::sqrt(acc);
    const bool kept = c.kept(j);
    c.prefix_max_norm[j + 1] = kept ? std::max(c.prefix_max_norm[j], c.key_norm[j]) : c.prefix_max_norm[j];
    c.prefix_count[j + 1] = c.prefix_count[j] + (kept ? 1 : 0);
    if (kept) c.by_norm.push_back(static_cast<std::uint32_t>(j));
  }
  const std::size_t blocks = (c.m + kBoundBlock - 1) / kBoundBlock;
  c.block_max.assign(blocks * c.d, -std::numeric_limits<double>::infinity());
  c.block_min.assign(blocks * c.d, std::numeric_limits<double>::infinity());
  for (std::size_t j = 0; j < c.m; ++j) {
    if (!c.kept(j)) continue;
    double* bmax = c.block_max.data() + (j / kBoundBlock) * c.d;
    double* bmin = c.block_min.data() + (j / kBoundBlock) * c.d;
    for (std::size_t x = 0; x < c.d; ++x) {
      bmax[x] = std::max(bmax[x], static_cast<double>(k(j, x)));
      bmin[x] = std::min(bmin[x], static_cast<double>(k(j, x)));
    }
  }
  // Only the first kNormWalk keys of the order are ever read.
  const std::size_t head = std::min(kNormWalk, c.by_norm.size());
  std::partial_sort(c.by_norm.begin(), c.by_norm.begin() + static_cast<std::ptrdiff_t>(head), c.by_norm.end(),
                    [&](std::uint32_t a, std::uint32_t b) {
                      return c.key_norm[a] != c.key_norm[b] ? c.key_norm[a] > c.key_norm[b] : a < b;
                    });
  std::vector<std::uint8_t> certified(c.n, 0), recomputed(c.n, 0);
  run<T>(c, options.recompute_uncertified, out, certified, recomputed);
  if (report != nullptr) {
    report->certified_rows = static_cast<std::size_t>(std::count(certified.begin(), certified.end(), 1));
    report->recomputed_rows = static_cast<std::size_t>(std::count(recomputed.begin(), recomputed.end(), 1));
    report->certified = std::move(certified);
  }
}

template void graph_attention_forward<float>(ConstMatrix<float>, ConstMatrix<float>, ConstMatrix<float>, const Graph&,
                                             MatrixView<float>, const GraphAttentionOptions<float>&,
                                             GraphAttentionReport*);
template void graph_attention_forward<double>(ConstMatrix<double>, ConstMatrix<double>, ConstMatrix<double>,
                                              const Graph&, MatrixView<double>, const GraphAttentionOptions<double>&,
                                              GraphAttentionReport*);

}  // namespace entgraph
