// entgraph: Sparsefinder's learned projections (see training/projection.hpp).
#include "entgraph/training/projection.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/training/progress.hpp"
#include "io/capture_context.hpp"
#include "runtime/cpu_clones.hpp"
#include "runtime/numbers.hpp"
#include "runtime/parallel.hpp"
#include "runtime/random.hpp"

namespace entgraph {
namespace {

// Rows a pass of project_rows, and columns a chunk: 4 rows x 8 columns of
// double sums stay in registers through the whole sum over t (with the
// sums in memory, their loads and stores bounded the loop at a third of
// the multiply-add rate).
constexpr std::size_t kProjectRows = 4, kProjectColumns = 8;

// The rows of x times w (dim x rank) into float rows of out.
// Vectorised over the rank; each value still sums over t in order, and
// each product of two floats is exact in double, so a fused multiply-add
// rounds as the separate add does: the result does not depend on the
// instruction set (runtime/cpu_clones.hpp).
ENTGRAPH_CPU_CLONES void project_rows(const float* __restrict x, std::size_t rows, std::size_t ldx,
                                      const double* __restrict w, std::size_t dim, std::size_t rank,
                                      float* __restrict out) {
  constexpr std::size_t R = kProjectRows, C = kProjectColumns;
  static_assert(R == 4, "the loop below names each row's sum");
  for (std::size_t i0 = 0; i0 < rows; i0 += R) {
    const std::size_t nr = std::min(R, rows - i0);
    const float* row[R];
    for (std::size_t r = 0; r < R; ++r) row[r] = x + (i0 + std::min(r, nr - 1)) * ldx;  // repeats: never stored
    for (std::size_t c0 = 0; c0 < rank; c0 += C) {
      const std::size_t nc = std::min(C, rank - c0);
      double acc[R][C] = {};
      const double* __restrict wc = w + c0;
      if (nc == C) {  // GCC's vectors: one AVX-512 register a row, two AVX2 ones, four SSE2 ones
        using Doubles = double __attribute__((vector_size(C * sizeof(double))));
        Doubles a0 = {}, a1 = {}, a2 = {}, a3 = {};
        for (std::size_t t = 0; t < dim; ++t) {
          Doubles wr;
          std::memcpy(&wr, wc + t * rank, sizeof wr);
          a0 += static_cast<double>(row[0][t]) * wr;
          a1 += static_cast<double>(row[1][t]) * wr;
          a2 += static_cast<double>(row[2][t]) * wr;
          a3 += static_cast<double>(row[3][t]) * wr;
        }
        std::memcpy(acc[0], &a0, sizeof a0);
        std::memcpy(acc[1], &a1, sizeof a1);
        std::memcpy(acc[2], &a2, sizeof a2);
        std::memcpy(acc[3], &a3, sizeof a3);
      } else {  // the last columns of a rank that is not a multiple of C
        for (std::size_t t = 0; t < dim; ++t) {
          const double* __restrict wr = wc + t * rank;
          for (std::size_t r = 0; r < R; ++r)
            for (std::size_t c = 0; c < nc; ++c) acc[r][c] += static_cast<double>(row[r][t]) * wr[c];
        }
      }
      for (std::size_t r = 0; r < nr; ++r)
        for (std::size_t c = 0; c < nc; ++c) out[(i0 + r) * rank + c0 + c] = static_cast<float>(acc[r][c]);
    }
  }
}

std::vector<float> project(MatrixView<const float> x, const std::vector<float>& w, std::size_t dim, std::size_t rank,
                           const char* what) {
  if (x.cols != dim)
    throw Error(at_op(std::string("Projection::") + what) + "rows have " + std::to_string(x.cols) +
                " columns, expected " + std::to_string(dim));
  std::vector<float> out(x.rows * rank);
  const std::vector<double> wd(w.begin(), w.end());
  if (x.rows > 0) project_rows(x.row(0), x.rows, x.stride, wd.data(), dim, rank, out.data());
  return out;
}

void check_options(const ProjectionOptions& o, const char* op) {
  auto bad = [&](const std::string& what) { throw Error(at_op(op) + what); };
  if (o.rank == 0) bad("rank must be >= 1 (got 0)");
  if (o.batch == 0) bad("batch must be >= 1 (got 0)");
  if (o.negatives == 0) bad("negatives must be >= 1 (got 0)");
  if (!(o.lr > 0) || !std::isfinite(o.lr)) bad("lr must be finite and > 0 (got " + detail::number_text(o.lr) + ")");
  if (!(o.margin >= 0) || !std::isfinite(o.margin))
    bad("margin must be finite and >= 0 (got " + detail::number_text(o.margin) + ")");
}

// The gold graphs of one head and what sampling needs.
struct HeadData {
  MatrixView<const float> q, k;  // every token of the head (sequences concatenated)
  std::vector<Graph> gold;       // per sequence, local indices
  std::vector<std::size_t> offset;
  // Queries usable for training: (sequence, local index).
  std::vector<std::pair<std::uint32_t, std::uint32_t>> queries;
  bool causal = false;
};

HeadData head_data(const Capture& capture, std::size_t layer, std::size_t head, const char* op) {
  if (layer >= capture.layers || head >= capture.heads)
    throw Error(at_op(op) + "layer " + std::to_string(layer) + ", head " + std::to_string(head) +
                " out of range (capture has " + std::to_string(capture.layers) + " x " +
                std::to_string(capture.heads) + ")");
  HeadData h;
  const std::size_t tokens = capture.tokens(), d = capture.head_dim;
  const std::size_t base = (layer * capture.heads + head) * tokens * d;
  if (capture.queries.size() < base + tokens * d || capture.keys.size() < base + tokens * d)
    throw Error(at_op(op) + "capture arrays are smaller than layers * heads * tokens * head_dim");
  h.q = {capture.queries.data() + base, tokens, d};
  h.k = {capture.keys.data() + base, tokens, d};
  h.causal = capture.head(layer, head).causal;
  std::size_t off = 0;
  for (std::size_t s = 0; s < capture.sequences(); ++s) {
    h.offset.push_back(off);
    h.gold.push_back(gold_graph(capture, layer, head, s));
    const Graph& g = h.gold.back();
    const std::size_t len = capture.lengths[s];
    for (std::size_t i = 0; i < len; ++i) {
      const std::size_t allowed = h.causal ? i + 1 : len;
      if (g.degree(i) > 0 && g.degree(i) < allowed)
        h.queries.emplace_back(static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(i));
    }
    off += len;
  }
  return h;
}

// The t-th (0-based) key in [0, ∞) that is not in the sorted row.
std::uint32_t nth_missing(const std::uint32_t* begin, const std::uint32_t* end, std::uint64_t t) {
  // row[e] - e counts the missing keys below row[e]; it never decreases.
  const std::uint32_t* lo = begin;
  std::size_t count = static_cast<std::size_t>(end - begin);
  while (count > 0) {  // first e with row[e] - e > t
    const std::size_t step = count / 2;
    const std::uint32_t* mid = lo + step;
    if (static_cast<std::uint64_t>(*mid) - static_cast<std::uint64_t>(mid - begin) <= t) {
      lo = mid + 1;
      count -= step + 1;
    } else {
      count = step;
    }
  }
  return static_cast<std::uint32_t>(t + static_cast<std::uint64_t>(lo - begin));
}

// Appends the triplets of one query (every gold edge, `negatives` negatives each).
void add_triplets(const HeadData& h, std::pair<std::uint32_t, std::uint32_t> query, std::size_t negatives,
                  std::mt19937_64& rng, std::vector<Triplet>& out) {
  const auto [s, i] = query;
  const Graph& g = h.gold[s];
  const std::size_t len = g.queries;
  const std::size_t allowed = h.causal ? i + 1 : len;
  const std::uint32_t* b = g.row_begin(i);
  const std::uint32_t* e = g.row_end(i);
  const std::uint64_t free_keys = allowed - g.degree(i);
  const auto off = static_cast<std::uint32_t>(h.offset[s]);
  for (const std::uint32_t* p = b; p != e; ++p)
    for (std::size_t n = 0; n < negatives; ++n) {
      const std::uint32_t l = nth_missing(b, e, detail::uniform_below(rng, free_keys));
      out.push_back({off + i, off + *p, off + l});
    }
}

struct Adam {
  std::vector<double> m, v;
  std::size_t step = 0;
  explicit Adam(std::size_t n) : m(n, 0.0), v(n, 0.0) {}
  void update(std::vector<double>& w, const std::vector<double>& g, double lr) {
    constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    ++step;
    const double c1 = 1.0 - std::pow(b1, static_cast<double>(step));
    const double c2 = 1.0 - std::pow(b2, static_cast<double>(step));
    for (std::size_t t = 0; t < w.size(); ++t) {
      m[t] = b1 * m[t] + (1 - b1) * g[t];
      v[t] = b2 * v[t] + (1 - b2) * g[t] * g[t];
      w[t] -= lr * (m[t] / c1) / (std::sqrt(v[t] / c2) + eps);
    }
  }
};

std::mt19937_64 head_stream(std::uint64_t seed, std::size_t layer, std::size_t head) {
  return std::mt19937_64(detail::mix_seed(seed, layer, head));
}

void initial_weights(std::mt19937_64& rng, std::size_t dim, std::size_t rank, std::vector<double>& wq,
                     std::vector<double>& wk) {
  const double sd = 1.0 / std::sqrt(static_cast<double>(dim));
  wq.resize(dim * rank);
  wk.resize(dim * rank);
  for (double& w : wq) w = sd * detail::standard_normal(rng);
  for (double& w : wk) w = sd * detail::standard_normal(rng);
}

Projection to_projection(std::size_t dim, std::size_t rank, const std::vector<double>& wq,
                         const std::vector<double>& wk) {
  Projection p;
  p.dim = dim;
  p.rank = rank;
  p.wq.assign(wq.begin(), wq.end());
  p.wk.assign(wk.begin(), wk.end());
  return p;
}

}  // namespace

std::vector<float> Projection::project_queries(MatrixView<const float> x) const {
  return project(x, wq, dim, rank, "project_queries");
}
std::vector<float> Projection::project_keys(MatrixView<const float> x) const {
  return project(x, wk, dim, rank, "project_keys");
}

double hinge_loss_gradient(MatrixView<const float> q, MatrixView<const float> k, const std::vector<Triplet>& triplets,
                           std::size_t rank, const std::vector<double>& wq, const std::vector<double>& wk,
                           double margin, std::vector<double>* grad_wq, std::vector<double>* grad_wk) {
  const std::size_t d = q.cols;
  if (k.cols != d)
    throw Error(at_op("hinge_loss_gradient") + "q has " + std::to_string(d) + " columns, k has " + std::to_string(k.cols));
  if (rank == 0 || wq.size() != d * rank || wk.size() != d * rank)
    throw Error(at_op("hinge_loss_gradient") + "wq / wk must hold d * rank = " + std::to_string(d * rank) + " values (got " +
                std::to_string(wq.size()) + ", " + std::to_string(wk.size()) + ")");
  if (grad_wq) grad_wq->assign(d * rank, 0.0);
  if (grad_wk) grad_wk->assign(d * rank, 0.0);
  if (triplets.empty()) return 0.0;
  const double scale = 1.0 / static_cast<double>(triplets.size());
  std::vector<double> a(rank), b(rank), c(rank), ga(rank), gb(rank), gc(rank);
  auto proj = [&](const float* x, const std::vector<double>& w, std::vector<double>& out) {
    std::fill(out.begin(), out.end(), 0.0);
    for (std::size_t t = 0; t < d; ++t) {
      const double v = x[t];
      for (std::size_t r = 0; r < rank; ++r) out[r] += v * w[t * rank + r];
    }
  };
  double loss = 0;
  for (const Triplet& tr : triplets) {
    if (tr.query >= q.rows || tr.positive >= k.rows || tr.negative >= k.rows)
      throw Error(at_op("hinge_loss_gradient") + "triplet index out of range (q has " + std::to_string(q.rows) +
                  " rows, k has " + std::to_string(k.rows) + ")");
    proj(q.row(tr.query), wq, a);
    proj(k.row(tr.positive), wk, b);
    proj(k.row(tr.negative), wk, c);
    double dpos = 0, dneg = 0;
    for (std::size_t r = 0; r < rank; ++r) {
      dpos += (a[r] - b[r]) * (a[r] - b[r]);
      dneg += (a[r] - c[r]) * (a[r] - c[r]);
    }
    const double h = margin + dpos - dneg;
    if (h <= 0) continue;
    loss += h;
    if (!grad_wq && !grad_wk) continue;
    for (std::size_t r = 0; r < rank; ++r) {
      ga[r] = scale * 2.0 * (c[r] - b[r]);
      gb[r] = scale * 2.0 * (b[r] - a[r]);
      gc[r] = scale * 2.0 * (a[r] - c[r]);
    }
    const float* xq = q.row(tr.query);
    const float* xp = k.row(tr.positive);
    const float* xn = k.row(tr.negative);
    for (std::size_t t = 0; t < d; ++t)
      for (std::size_t r = 0; r < rank; ++r) {
        if (grad_wq) (*grad_wq)[t * rank + r] += xq[t] * ga[r];
        if (grad_wk) (*grad_wk)[t * rank + r] += xp[t] * gb[r] + xn[t] * gc[r];
      }
  }
  return loss * scale;
}

Projection initial_projection(std::size_t dim, std::size_t rank, std::uint64_t seed, std::size_t layer,
                              std::size_t head) {
  if (dim == 0 || rank == 0) throw Error(at_op("initial_projection") + "dim and rank must be >= 1");
  std::mt19937_64 rng = head_stream(seed, layer, head);
  std::vector<double> wq, wk;
  initial_weights(rng, dim, rank, wq, wk);
  return to_projection(dim, rank, wq, wk);
}

Projection train_projection(const Capture& capture, std::size_t layer, std::size_t head,
                            const ProjectionOptions& options, ProjectionStats* stats) {
  check_options(options, "train_projection");
  const HeadData h = head_data(capture, layer, head, "train_projection");
  const std::size_t d = capture.head_dim, r = options.rank;
  std::mt19937_64 rng = head_stream(options.seed, layer, head);
  std::vector<double> wq, wk, gq, gk;
  initial_weights(rng, d, r, wq, wk);
  Adam adam_q(d * r), adam_k(d * r);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> order = h.queries;
  std::vector<Triplet> triplets;
  if (stats) *stats = ProjectionStats{};
  for (std::size_t epoch = 0; epoch < options.epochs; ++epoch) {
    for (std::size_t t = order.size(); t > 1; --t) std::swap(order[t - 1], order[detail::uniform_below(rng, t)]);
    double loss_sum = 0;
    std::size_t count = 0, batches = 0;
    for (std::size_t start = 0; start < order.size(); start += options.batch) {
      triplets.clear();
      const std::size_t stop = std::min(order.size(), start + options.batch);
      for (std::size_t b = start; b < stop; ++b) add_triplets(h, order[b], options.negatives, rng, triplets);
      if (triplets.empty()) continue;
      const double loss = hinge_loss_gradient(h.q, h.k, triplets, r, wq, wk, options.margin, &gq, &gk);
      adam_q.update(wq, gq, options.lr);
      adam_k.update(wk, gk, options.lr);
      loss_sum += loss * static_cast<double>(triplets.size());
      count += triplets.size();
      ++batches;
    }
    if (stats) {
      stats->triplets = count;
      stats->batches = batches;
      stats->epoch_loss.push_back(count ? loss_sum / static_cast<double>(count) : 0.0);
    }
  }
  return to_projection(d, r, wq, wk);
}

std::vector<Projection> train_projections(const Capture& capture, const ProjectionOptions& options,
                                          std::vector<ProjectionStats>* stats) {
  check_options(options, "train_projections");
  const std::size_t heads = capture.layers * capture.heads;
  std::vector<Projection> out(heads);
  if (stats) stats->assign(heads, ProjectionStats{});
  ProgressBar bar("training projections", heads, options.quiet);
  detail::parallel_for(heads, 1, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const std::size_t layer = i / capture.heads, head = i % capture.heads;
      out[i] = detail::in_head(capture, layer, head, [&] {
        return train_projection(capture, layer, head, options, stats ? &(*stats)[i] : nullptr);
      });
      bar.advance();
    }
  });
  bar.finish();
  return out;
}

double evaluate_projection(const Capture& capture, std::size_t layer, std::size_t head, const Projection& projection,
                           const ProjectionOptions& options, std::uint64_t seed) {
  check_options(options, "evaluate_projection");
  const HeadData h = head_data(capture, layer, head, "evaluate_projection");
  if (projection.dim != capture.head_dim || projection.wq.size() != projection.dim * projection.rank ||
      projection.wk.size() != projection.dim * projection.rank)
    throw Error(at_op("evaluate_projection") + "projection does not match the capture's head_dim");
  std::mt19937_64 rng(detail::mix_seed(seed, layer, head));
  std::vector<Triplet> triplets;
  for (const auto& query : h.queries) add_triplets(h, query, options.negatives, rng, triplets);
  const std::vector<double> wq(projection.wq.begin(), projection.wq.end());
  const std::vector<double> wk(projection.wk.begin(), projection.wk.end());
  return hinge_loss_gradient(h.q, h.k, triplets, projection.rank, wq, wk, options.margin, nullptr, nullptr);
}

}  // namespace entgraph
