// entgraph CUDA backend: a block-sparse attention graph (entgraph/
// block_graph.hpp) in device memory, and the cover of device-resident
// key-level graphs: a predictor's graph turned into blocks without leaving
// the GPU, for block-sparse attention on device tensors
// (batched_attention.hpp, block_sparse_attention_forward).
//
// The layout is BlockGraph's: offsets holds batch x heads x query_blocks()
// + 1 values, offsets[0] = 0, and block row r lists its key blocks in
// blocks[offsets[r] .. offsets[r + 1]), ascending, without repeats. Kernels
// that read one trust these invariants (upload() checks them); block_cover
// guarantees them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "entgraph/block_graph.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/cuda/device_graph.hpp"

namespace entgraph::cuda {

struct DeviceBlockGraph {
  std::size_t batch = 1, heads = 1;              // graphs: one per (sequence, head), b major
  std::size_t queries = 0, keys = 0;             // n and m of each graph
  std::size_t query_block = 64, key_block = 64;  // rows per block
  DeviceArray<std::size_t> offsets;              // batch x heads x query_blocks() + 1 values
  DeviceArray<std::uint32_t> blocks;             // key block indices

  // ceil(n / block) without overflow, whatever the block size (>= 1).
  std::size_t query_blocks() const { return BlockGraph::blocks_of(queries, query_block); }
  std::size_t key_blocks() const { return BlockGraph::blocks_of(keys, key_block); }
  std::size_t kept() const { return blocks.size(); }
  // Its sizes as a BlockGraph without blocks (BlockGraph::empty), for the
  // core's shape checks; throws for a block size of 0.
  BlockGraph shape() const { return BlockGraph::empty(batch, heads, queries, keys, query_block, key_block); }

  // A copy of g on the device. Throws entgraph::Error (BlockGraph::validate,
  // naming "DeviceBlockGraph::upload") unless g is valid.
  static DeviceBlockGraph upload(const BlockGraph& g);
  // A copy in host memory (waits for the device's pending work first).
  BlockGraph download() const;
};

// The most key blocks block_cover takes: each block row's set of key blocks
// is a bitmap in shared memory (46 KiB).
inline constexpr std::size_t kMaxCoverKeyBlocks = 11776 * 32;

// The blocks of query_block x key_block holding at least one edge of
// graphs[b * heads + h] (all of one size), as BlockGraph::cover computes
// them. Runs on `stream` and waits for it once, to size the result.
// Throws entgraph::Error naming "cuda::block_cover" for a list that is
// empty or not batch x heads long, a null entry, graphs of different sizes,
// a block size of 0, or more than kMaxCoverKeyBlocks key blocks.
DeviceBlockGraph block_cover(const std::vector<const DeviceGraph*>& graphs, std::size_t batch, std::size_t heads,
                             std::size_t query_block, std::size_t key_block, cudaStream_t stream = nullptr);

}  // namespace entgraph::cuda
