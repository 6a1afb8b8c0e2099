// Block-sparse attention graphs (see block_graph.hpp).
#include "entgraph/block_graph.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "entgraph/error.hpp"

namespace entgraph {
namespace {

std::string text(std::size_t x) { return std::to_string(x); }

}  // namespace

void BlockGraph::validate(const char* what) const {
  const std::string name(what);
  if (query_block == 0 || key_block == 0)
    throw Error(name + ": query_block and key_block must be >= 1 (got " + text(query_block) + " and " +
                text(key_block) + ")");
  if (key_blocks() > std::numeric_limits<std::uint32_t>::max())
    throw Error(name + ": keys / key_block is too large for 32-bit block indices (got " + text(key_blocks()) + ")",
                ErrorCode::limit);
  std::size_t rows = 0;
  if (__builtin_mul_overflow(batch, heads, &rows) || __builtin_mul_overflow(rows, query_blocks(), &rows) ||
      rows == std::numeric_limits<std::size_t>::max())
    throw Error(name + ": batch x heads x query blocks overflows (batch " + text(batch) + ", heads " + text(heads) +
                    ", " + text(query_blocks()) + " query blocks)",
                ErrorCode::limit);
  if (offsets.size() != rows + 1)
    throw Error(name + ": offsets has " + text(offsets.size()) + " entries, expected batch x heads x query blocks + 1 = " +
                text(rows + 1));
  if (offsets[0] != 0) throw Error(name + ": offsets[0] must be 0");
  if (offsets[rows] != blocks.size())
    throw Error(name + ": offsets[" + text(rows) + "] = " + text(offsets[rows]) + " but there are " +
                text(blocks.size()) + " blocks");
  const std::size_t limit = key_blocks();
  for (std::size_t r = 0; r < rows; ++r) {
    if (offsets[r + 1] < offsets[r]) throw Error(name + ": offsets decrease at block row " + text(r));
    for (std::size_t p = offsets[r]; p < offsets[r + 1]; ++p) {
      if (p > offsets[r] && blocks[p] <= blocks[p - 1])
        throw Error(name + ": the key blocks of block row " + text(r) + " are not sorted and unique");
      if (blocks[p] >= limit)
        throw Error(name + ": block row " + text(r) + " has key block " + text(blocks[p]) + ", not below " +
                    text(limit) + " = ceil(keys / key_block)");
    }
  }
}

Graph BlockGraph::expand(std::size_t b, std::size_t h, std::size_t n, std::size_t m) const {
  if (b >= batch || h >= heads || n > queries || m > keys)
    throw Error(at_op("BlockGraph::expand") + "graph (" + text(b) + ", " + text(h) + ") over " + text(n) + " x " +
                text(m) + " is outside " + text(batch) + " x " + text(heads) + " graphs of " + text(queries) + " x " +
                text(keys));
  Graph g = Graph::empty(n, m);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t r = row(b, h, i / query_block);
    for (const std::uint32_t* p = row_begin(r); p != row_end(r); ++p) {
      const std::size_t j0 = std::size_t{*p} * key_block, j1 = std::min(m, j0 + key_block);
      for (std::size_t j = j0; j < j1; ++j) g.indices.push_back(static_cast<std::uint32_t>(j));
    }
    g.offsets[i + 1] = g.indices.size();
  }
  return g;
}

BlockGraph BlockGraph::empty(std::size_t batch, std::size_t heads, std::size_t n, std::size_t m,
                             std::size_t query_block, std::size_t key_block) {
  if (query_block == 0 || key_block == 0)
    throw Error(at_op("BlockGraph") + "query_block and key_block must be >= 1 (got " + text(query_block) + " and " +
                text(key_block) + ")");
  BlockGraph out;
  out.batch = batch;
  out.heads = heads;
  out.queries = n;
  out.keys = m;
  out.query_block = query_block;
  out.key_block = key_block;
  out.offsets.assign(batch * heads * out.query_blocks() + 1, 0);
  return out;
}

BlockGraph BlockGraph::cover(const Graph& g, std::size_t query_block, std::size_t key_block) {
  return cover(std::vector<Graph>{g}, 1, 1, query_block, key_block);
}

BlockGraph BlockGraph::cover(const std::vector<Graph>& graphs, std::size_t batch, std::size_t heads,
                             std::size_t query_block, std::size_t key_block) {
  const char* op = "BlockGraph::cover";
  if (graphs.empty() || graphs.size() != batch * heads)
    throw Error(at_op(op) + "graphs has " + text(graphs.size()) + " entries, expected batch x heads = " +
                text(batch * heads) + " >= 1");
  BlockGraph out = empty(batch, heads, graphs[0].queries, graphs[0].keys, query_block, key_block);
  out.offsets.assign(1, 0);  // rows are appended below
  std::vector<std::uint32_t> row;
  for (std::size_t x = 0; x < graphs.size(); ++x) {
    const Graph& g = graphs[x];
    if (g.queries != out.queries || g.keys != out.keys)
      throw Error(at_op(op) + "graphs[" + text(x) + "] is " + text(g.queries) + " x " + text(g.keys) +
                  ", expected the size of graphs[0], " + text(out.queries) + " x " + text(out.keys));
    g.validate((std::string(op) + ": graphs[" + text(x) + "]").c_str());
    for (std::size_t block = 0; block < out.query_blocks(); ++block) {
      row.clear();
      const std::size_t i1 = std::min(g.queries, (block + 1) * query_block);
      for (std::size_t i = block * query_block; i < i1; ++i)
        for (const std::uint32_t* p = g.row_begin(i); p != g.row_end(i); ++p)
          row.push_back(static_cast<std::uint32_t>(*p / key_block));
      std::sort(row.begin(), row.end());
      row.erase(std::unique(row.begin(), row.end()), row.end());
      out.blocks.insert(out.blocks.end(), row.begin(), row.end());
      out.offsets.push_back(out.blocks.size());
    }
  }
  return out;
}

BlockGraph BlockGraph::full(std::size_t batch, std::size_t heads, std::size_t n, std::size_t m,
                            std::size_t query_block, std::size_t key_block, bool causal) {
  BlockGraph out = empty(batch, heads, n, m, query_block, key_block);
  out.offsets.assign(1, 0);  // rows are appended below
  for (std::size_t x = 0; x < batch * heads; ++x)
    for (std::size_t block = 0; block < out.query_blocks(); ++block) {
      // The block's last query sees keys j <= i + (m - n): the blocks up to it.
      std::size_t end = out.key_blocks();
      if (causal) {
        const std::size_t last = std::min(n, (block + 1) * query_block) - 1;
        end = last + m < n ? 0 : std::min(end, (last + m - n) / key_block + 1);
      }
      for (std::size_t j = 0; j < end; ++j) out.blocks.push_back(static_cast<std::uint32_t>(j));
      out.offsets.push_back(out.blocks.size());
    }
  return out;
}

}  // namespace entgraph
