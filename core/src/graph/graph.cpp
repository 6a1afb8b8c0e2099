// entgraph: CSR attention graphs, set operations and metrics (see graph.hpp).
#include "entgraph/graph.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "entgraph/error.hpp"
#include "entgraph/heads.hpp"
#include "entgraph/runtime.hpp"
#include "entgraph/transforms.hpp"
#include "kernels/matmul_kernels.hpp"
#include "runtime/backends.hpp"

namespace entgraph {
namespace {

void check_index_range(std::size_t n, std::size_t m, const char* what) {
  if (m > std::numeric_limits<std::uint32_t>::max() || n > std::numeric_limits<std::uint32_t>::max())
    throw Error(at_op(what) + "graphs hold at most 2^32 - 1 queries and keys");
}

void check_same_shape(const Graph& a, const Graph& b, const char* what) {
  if (a.queries != b.queries || a.keys != b.keys)
    throw Error(at_op(what) + "graphs of different shapes (" + std::to_string(a.queries) + " x " +
                std::to_string(a.keys) + " and " + std::to_string(b.queries) + " x " + std::to_string(b.keys) + ")");
}

}  // namespace

bool Graph::contains(std::size_t query, std::size_t key) const {
  if (query >= queries) return false;
  return std::binary_search(row_begin(query), row_end(query), static_cast<std::uint32_t>(key));
}

Graph Graph::empty(std::size_t n, std::size_t m) {
  check_index_range(n, m, "Graph::empty");
  Graph g;
  g.queries = n;
  g.keys = m;
  g.offsets.assign(n + 1, 0);
  return g;
}

Graph Graph::full(std::size_t n, std::size_t m, bool causal) {
  Graph g = empty(n, m);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t end = causal ? causal_key_limit(i, n, m) : m;
    for (std::size_t j = 0; j < end; ++j) g.indices.push_back(static_cast<std::uint32_t>(j));
    g.offsets[i + 1] = g.indices.size();
  }
  return g;
}

Graph Graph::from_mask(MaskView mask) {
  if (mask.rows > 0 && mask.data == nullptr) throw Error(at_op("Graph::from_mask") + "mask has no data");
  Graph g = empty(mask.rows, mask.cols);
  for (std::size_t i = 0; i < mask.rows; ++i) {
    for (std::size_t j = 0; j < mask.cols; ++j)
      if (mask(i, j) != 0) g.indices.push_back(static_cast<std::uint32_t>(j));
    g.offsets[i + 1] = g.indices.size();
  }
  return g;
}

Graph Graph::from_buckets(MatrixView<const std::uint32_t> query_buckets, MatrixView<const std::uint32_t> key_buckets,
                          std::size_t num_buckets) {
  const std::size_t n = query_buckets.rows, m = key_buckets.rows;
  Graph g = empty(n, m);
  auto check = [&](const char* side, std::size_t row, std::size_t c, std::uint32_t b) {
    if (b >= num_buckets)
      throw Error(at_op("Graph::from_buckets") + side + "(" + std::to_string(row) + ", " + std::to_string(c) +
                  ") = " + std::to_string(b) + " is not below num_buckets = " + std::to_string(num_buckets));
  };
  // Keys of each bucket (counting sort), in key order.
  std::vector<std::size_t> start(num_buckets + 1, 0);
  for (std::size_t j = 0; j < m; ++j)
    for (std::size_t c = 0; c < key_buckets.cols; ++c) {
      check("key_buckets", j, c, key_buckets(j, c));
      ++start[key_buckets(j, c) + 1];
    }
  for (std::size_t b = 0; b < num_buckets; ++b) start[b + 1] += start[b];
  std::vector<std::uint32_t> members(start[num_buckets]);
  std::vector<std::size_t> fill(start.begin(), start.end() - 1);
  for (std::size_t j = 0; j < m; ++j)
    for (std::size_t c = 0; c < key_buckets.cols; ++c) members[fill[key_buckets(j, c)]++] = static_cast<std::uint32_t>(j);
  // A key that lists a bucket twice is in it twice, side by side: once.
  std::vector<std::size_t> end(num_buckets);
  for (std::size_t b = 0; b < num_buckets; ++b)
    end[b] = static_cast<std::size_t>(std::unique(members.begin() + static_cast<std::ptrdiff_t>(start[b]),
                                                  members.begin() + static_cast<std::ptrdiff_t>(start[b + 1])) -
                                      members.begin());
  // Room for the rows at most (untouched memory costs nothing), so that the
  // indices are never moved: coarse buckets give graphs of n m / 2 edges.
  std::vector<std::size_t> listed(n, 0);  // per query, its buckets' members with repeats
  std::size_t most = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t c = 0; c < query_buckets.cols; ++c) {
      check("query_buckets", i, c, query_buckets(i, c));
      listed[i] += end[query_buckets(i, c)] - start[query_buckets(i, c)];
    }
    most += std::min(m, listed[i]);
  }
  if (most <= (std::size_t{1} << 28)) g.indices.reserve(most);

  // Each query's row one of two ways, the same sorted row either way: its
  // buckets' member lists merged (a stamp per key drops repeats; a sort when
  // more than one list), or, when those lists are long, the buckets' key
  // bitmaps OR-ed and read in key order (no sort: coarse buckets, such as
  // quantization's, give rows of half the keys).
  const std::size_t words = (m + 63) / 64;
  constexpr std::size_t kBitmapBytes = std::size_t{64} << 20;
  const bool bitmaps_fit = words > 0 && num_buckets <= kBitmapBytes / 8 / words;
  std::vector<std::uint64_t> bitmap, row_bits;
  if (bitmaps_fit) {
    bitmap.assign(num_buckets * words, 0);
    for (std::size_t b = 0; b < num_buckets; ++b)
      for (std::size_t p = start[b]; p < end[b]; ++p)
        bitmap[b * words + members[p] / 64] |= std::uint64_t{1} << (members[p] % 64);
    row_bits.resize(words);
  }
  std::vector<std::size_t> stamp(m, static_cast<std::size_t>(-1));
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t row_start = g.indices.size();
    if (query_buckets.cols == 1) {  // one bucket: its members, in order
      const std::uint32_t b = query_buckets(i, 0);
      g.indices.insert(g.indices.end(), members.begin() + static_cast<std::ptrdiff_t>(start[b]),
                       members.begin() + static_cast<std::ptrdiff_t>(end[b]));
    } else if (bitmaps_fit && listed[i] > 2 * words * query_buckets.cols) {
      std::fill(row_bits.begin(), row_bits.end(), 0);
      for (std::size_t c = 0; c < query_buckets.cols; ++c) {
        const std::uint64_t* bits = bitmap.data() + query_buckets(i, c) * words;
        for (std::size_t w = 0; w < words; ++w) row_bits[w] |= bits[w];
      }
      std::size_t count = 0;
      for (std::size_t w = 0; w < words; ++w) count += static_cast<std::size_t>(__builtin_popcountll(row_bits[w]));
      g.indices.resize(row_start + count);
      std::uint32_t* out = g.indices.data() + row_start;
      for (std::size_t w = 0; w < words; ++w)
        for (std::uint64_t x = row_bits[w]; x != 0; x &= x - 1)
          *out++ = static_cast<std::uint32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(x)));
    } else {
      for (std::size_t c = 0; c < query_buckets.cols; ++c) {
        const std::uint32_t b = query_buckets(i, c);
        for (std::size_t p = start[b]; p < end[b]; ++p)
          if (stamp[members[p]] != i) {
            stamp[members[p]] = i;
            g.indices.push_back(members[p]);
          }
      }
      const auto row = g.indices.begin() + static_cast<std::ptrdiff_t>(row_start);
      if (!std::is_sorted(row, g.indices.end())) std::sort(row, g.indices.end());
    }
    g.offsets[i + 1] = g.indices.size();
  }
  return g;
}

Graph Graph::from_pairs(std::size_t n, std::size_t m, std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs) {
  Graph g = empty(n, m);
  for (const auto& [i, j] : pairs)
    if (i >= n || j >= m)
      throw Error(at_op("Graph::from_pairs") + "pair (" + std::to_string(i) + ", " + std::to_string(j) + ") is outside " +
                  std::to_string(n) + " x " + std::to_string(m));
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  g.indices.reserve(pairs.size());
  for (const auto& [i, j] : pairs) {
    g.indices.push_back(j);
    ++g.offsets[i + 1];
  }
  for (std::size_t i = 0; i < n; ++i) g.offsets[i + 1] += g.offsets[i];
  return g;
}

void Graph::validate(const char* what) const {
  const std::string name(what);
  if (offsets.size() != queries + 1)
    throw Error(name + ": offsets has " + std::to_string(offsets.size()) + " entries, expected queries + 1 = " +
                std::to_string(queries + 1));
  if (offsets[0] != 0) throw Error(name + ": offsets[0] must be 0");
  if (offsets[queries] != indices.size())
    throw Error(name + ": offsets[queries] = " + std::to_string(offsets[queries]) + " but there are " +
                std::to_string(indices.size()) + " indices");
  for (std::size_t i = 0; i < queries; ++i)
    if (offsets[i + 1] < offsets[i]) throw Error(name + ": offsets decrease at query " + std::to_string(i));
  // Every graph attention call validates its graph: one branch-free pass per
  // row (sorted, unique, and so in range if its last key is), and only a bad
  // row is looked at again to say what is wrong.
  for (std::size_t i = 0; i < queries; ++i) {
    const std::size_t b = offsets[i], e = offsets[i + 1];
    if (b == e) continue;
    bool bad = indices[e - 1] >= keys;
    for (std::size_t p = b + 1; p < e; ++p) bad |= indices[p] <= indices[p - 1];
    if (!bad) continue;
    for (std::size_t p = b; p < e; ++p) {
      if (p > b && indices[p] <= indices[p - 1])
        throw Error(name + ": the keys of query " + std::to_string(i) + " are not sorted and unique");
      if (indices[p] >= keys)
        throw Error(name + ": query " + std::to_string(i) + " has key " + std::to_string(indices[p]) +
                    ", not below keys = " + std::to_string(keys));
    }
  }
}

Graph graph_union(const Graph& a, const Graph& b) {
  check_same_shape(a, b, "graph_union");
  Graph g = Graph::empty(a.queries, a.keys);
  g.indices.reserve(std::max(a.edges(), b.edges()));
  for (std::size_t i = 0; i < a.queries; ++i) {
    std::set_union(a.row_begin(i), a.row_end(i), b.row_begin(i), b.row_end(i), std::back_inserter(g.indices));
    g.offsets[i + 1] = g.indices.size();
  }
  return g;
}

Graph window_global_graph(std::size_t n, std::size_t m, long window, std::size_t global, bool causal) {
  Graph g = Graph::empty(n, m);
  const std::size_t heads = std::min(global, m);  // the global keys 0..heads-1
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t lo = m, hi = m;  // the window [lo, hi), empty by default
    if (i < global) {
      lo = 0;
    } else if (window >= 0) {
      const std::size_t w = static_cast<std::size_t>(window);
      lo = std::min(m, i > w ? i - w : 0);
      hi = std::min(m, i + (causal ? 0 : w) + 1);
    }
    if (i < global) hi = m;
    for (std::size_t j = 0; j < std::min(heads, lo); ++j) g.indices.push_back(static_cast<std::uint32_t>(j));
    for (std::size_t j = lo; j < hi; ++j) g.indices.push_back(static_cast<std::uint32_t>(j));
    // Global keys past the window's end.
    for (std::size_t j = hi; j < heads; ++j)
      g.indices.push_back(static_cast<std::uint32_t>(j));
    g.offsets[i + 1] = g.indices.size();
  }
  return g;
}

std::size_t intersection_count(const Graph& a, const Graph& b, bool causal) {
  check_same_shape(a, b, "intersection_count");
  std::size_t count = 0;
  for (std::size_t i = 0; i < a.queries; ++i) {
    const std::uint32_t end =
        static_cast<std::uint32_t>(causal ? causal_key_limit(i, a.queries, a.keys) : a.keys);
    const std::uint32_t *x = a.row_begin(i), *xe = std::lower_bound(x, a.row_end(i), end);
    const std::uint32_t *y = b.row_begin(i), *ye = std::lower_bound(y, b.row_end(i), end);
    while (x != xe && y != ye) {
      if (*x < *y) {
        ++x;
      } else if (*y < *x) {
        ++y;
      } else {
        ++count;
        ++x;
        ++y;
      }
    }
  }
  return count;
}

std::size_t allowed_edge_count(const Graph& g, bool causal) {
  if (!causal) return g.edges();
  std::size_t count = 0;
  for (std::size_t i = 0; i < g.queries; ++i)
    count += static_cast<std::size_t>(
        std::lower_bound(g.row_begin(i), g.row_end(i), static_cast<std::uint32_t>(causal_key_limit(i, g.queries, g.keys))) -
        g.row_begin(i));
  return count;
}

std::size_t allowed_pair_count(std::size_t n, std::size_t m, bool causal) {
  if (!causal) return n * m;
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i) count += causal_key_limit(i, n, m);
  return count;
}

Graph gold_graph(MatrixView<const float> q, MatrixView<const float> k, const HeadSettings& settings) {
  if (q.cols != k.cols)
    throw Error(at_op("gold_graph") + "q has " + std::to_string(q.cols) + " columns, k has " + std::to_string(k.cols));
  if (!(settings.alpha >= 1.0) || !(settings.scale > 0.0))
    throw Error(at_op("gold_graph") + "settings need alpha >= 1 and scale > 0");
  const Transform transform = Transform::for_alpha(settings.alpha);
  const auto& mm = detail::matmul_kernels(cpu_isa());
  constexpr std::size_t kBlock = 64;
  const std::size_t n = q.rows, m = k.rows, d = q.cols;
  Graph g = Graph::empty(n, m);
  std::vector<float> kt(d * m), scores, probs;  // K^T: each block is one row-major GEMM
  for (std::size_t j = 0; j < m; ++j)
    for (std::size_t c = 0; c < d; ++c) kt[c * m + j] = k(j, c);
  for (std::size_t r0 = 0; r0 < n; r0 += kBlock) {
    const std::size_t rows = std::min(kBlock, n - r0);
    scores.resize(rows * m);
    probs.resize(rows * m);
    mm.gemm_nn(rows, m, d, static_cast<float>(settings.scale), q.row(r0), q.stride, kt.data(), m, scores.data(), m,
               false, false);
    if (settings.causal)
      for (std::size_t i = 0; i < rows; ++i)
        std::fill(scores.begin() + static_cast<std::ptrdiff_t>(i * m + causal_key_limit(r0 + i, n, m)),
                  scores.begin() + static_cast<std::ptrdiff_t>((i + 1) * m), -std::numeric_limits<float>::infinity());
    transform_forward<float>(transform, {scores.data(), rows, m}, {probs.data(), rows, m});
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t j = 0; j < m; ++j)
        if (probs[i * m + j] > 0.0f) g.indices.push_back(static_cast<std::uint32_t>(j));
      g.offsets[r0 + i + 1] = g.indices.size();
    }
  }
  return g;
}

double GraphMetrics::sparsity() const {
  return allowed == 0 ? 0.0 : 1.0 - static_cast<double>(predicted) / static_cast<double>(allowed);
}
double GraphMetrics::gold_sparsity() const {
  return allowed == 0 ? 0.0 : 1.0 - static_cast<double>(gold) / static_cast<double>(allowed);
}
double GraphMetrics::recall() const { return gold == 0 ? 1.0 : static_cast<double>(hits) / static_cast<double>(gold); }
double GraphMetrics::precision() const {
  return predicted == 0 ? 1.0 : static_cast<double>(hits) / static_cast<double>(predicted);
}
GraphMetrics& GraphMetrics::operator+=(const GraphMetrics& o) {
  gold += o.gold;
  predicted += o.predicted;
  hits += o.hits;
  allowed += o.allowed;
  queries += o.queries;
  return *this;
}

GraphMetrics compare_graphs(Device device, const Graph& predicted, const Graph& gold, bool causal) {
  if (device == Device::cpu) return compare_graphs(predicted, gold, causal);
  const auto kernel = detail::backend_kernel(device, "compare_graphs", &BackendKernels::compare_graphs);
  check_same_shape(predicted, gold, "compare_graphs");
  predicted.validate("compare_graphs: predicted");
  gold.validate("compare_graphs: gold");
  return kernel(predicted, gold, causal);
}

GraphMetrics compare_graphs(const Graph& predicted, const Graph& gold, bool causal) {
  check_same_shape(predicted, gold, "compare_graphs");
  GraphMetrics m;
  m.gold = allowed_edge_count(gold, causal);
  m.predicted = allowed_edge_count(predicted, causal);
  m.hits = intersection_count(predicted, gold, causal);
  m.allowed = allowed_pair_count(predicted.queries, predicted.keys, causal);
  m.queries = predicted.queries;
  return m;
}

}  // namespace entgraph
