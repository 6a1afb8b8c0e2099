// entgraph: block-sparse attention graphs — per (sequence, head), which key
// blocks each query block attends to — as tensor-core kernels tile
// attention, and their conversion from and to key-level graphs (graph.hpp).
//
// Queries are cut into blocks of query_block rows and keys into blocks of
// key_block: block I holds queries [I qb, (I + 1) qb) ∩ [0, n), block J keys
// [J kb, (J + 1) kb) ∩ [0, m). Row I of graph (b, h) lists the key blocks
// its queries attend to, ascending, without repeats: CSR over the
// batch x heads x query_blocks() block rows, b major, then h, then I.
// Within a kept block every key is an edge; masks (causal, lengths) apply on
// top where the graph is used (block_sparse_attention.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "entgraph/graph.hpp"

namespace entgraph {

struct BlockGraph {
  std::size_t batch = 1, heads = 1;              // graphs: one per (sequence, head)
  std::size_t queries = 0, keys = 0;             // n and m of each graph
  std::size_t query_block = 64, key_block = 64;  // rows per block, >= 1
  std::vector<std::size_t> offsets;              // batch x heads x query_blocks() + 1 entries, offsets[0] = 0
  std::vector<std::uint32_t> blocks;             // key block indices, ascending within each block row

  // The blocks of `block` that cut `size` rows: ceil(size / block), without
  // overflow whatever the block size (>= 1).
  static std::size_t blocks_of(std::size_t size, std::size_t block) { return size == 0 ? 0 : (size - 1) / block + 1; }
  std::size_t query_blocks() const { return blocks_of(queries, query_block); }
  std::size_t key_blocks() const { return blocks_of(keys, key_block); }
  // The index of block row I of graph (b, h) in offsets.
  std::size_t row(std::size_t b, std::size_t h, std::size_t block) const {
    return (b * heads + h) * query_blocks() + block;
  }
  const std::uint32_t* row_begin(std::size_t r) const { return blocks.data() + offsets[r]; }
  const std::uint32_t* row_end(std::size_t r) const { return blocks.data() + offsets[r + 1]; }
  // Kept blocks over all graphs.
  std::size_t kept() const { return blocks.size(); }

  // Throws entgraph::Error unless the invariants hold (block sizes >= 1,
  // sizes, offsets, sorted and unique blocks in range); `what` names the
  // caller's argument.
  void validate(const char* what = "graph") const;

  // Graph (b, h) at key level over its first n queries and first m keys
  // (n <= queries, m <= keys): query i is linked to every key < m of the
  // blocks of its block row.
  Graph expand(std::size_t b, std::size_t h, std::size_t n, std::size_t m) const;

  // batch x heads graphs of n x m without a block (every query attends to
  // nothing); throws entgraph::Error for a block size of 0.
  static BlockGraph empty(std::size_t batch, std::size_t heads, std::size_t n, std::size_t m, std::size_t query_block,
                          std::size_t key_block);
  // The blocks holding at least one edge of g (the graph rounded up to
  // blocks): a one-graph BlockGraph.
  static BlockGraph cover(const Graph& g, std::size_t query_block, std::size_t key_block);
  // The same for graphs[b * heads + h], all of one size.
  static BlockGraph cover(const std::vector<Graph>& graphs, std::size_t batch, std::size_t heads,
                          std::size_t query_block, std::size_t key_block);
  // Every block of batch x heads graphs of n x m; causal: only the blocks
  // holding a pair j <= i + (m - n).
  static BlockGraph full(std::size_t batch, std::size_t heads, std::size_t n, std::size_t m, std::size_t query_block,
                         std::size_t key_block, bool causal);
};

}  // namespace entgraph
