// Block graphs in device memory and the cover of device graphs
// (entgraph/cuda/device_block_graph.hpp).
//
// The cover runs one thread block per block row (graph x, query block I):
// the edges of queries [I qb, (I + 1) qb) are one contiguous range of the
// CSR indices, so the block's threads stride over it and set bit key / kb of
// a bitmap in shared memory. Counted in a first pass, the bits are written
// in a second, each thread's contiguous run of words at its prefix, so
// every row comes out ascending without a sort.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checks.cuh"
#include "csr_rows.cuh"
#include "entgraph/cuda/device_block_graph.hpp"
#include "kernel_launch.cuh"
#include "predictors_common.cuh"

namespace entgraph::cuda {
namespace {

constexpr const char* kCoverOp = "cuda::block_cover";
constexpr unsigned kCoverThreads = 256;

// One graph's CSR arrays, as the kernel reads them.
struct GraphArrays {
  const std::size_t* offsets;
  const std::uint32_t* indices;
};

struct CoverShape {
  std::size_t graphs, n, query_blocks, query_block, key_block, words;
};

// Count (blocks null: counts[r] = the block row's key blocks) or fill
// (blocks[offsets[r] ..] = them, ascending).
__global__ void __launch_bounds__(kCoverThreads)
    cover_kernel(const GraphArrays* graphs, CoverShape s, std::size_t* counts, const std::size_t* offsets,
                 std::uint32_t* blocks) {
  std::uint32_t* bits = dynamic_shared<std::uint32_t>();
  std::size_t* before = reinterpret_cast<std::size_t*>(bits + s.words + (s.words & 1));  // 8-byte aligned
  const unsigned t = threadIdx.x;
  for (std::size_t r = blockIdx.x; r < s.graphs * s.query_blocks; r += gridDim.x) {
    const GraphArrays g = graphs[r / s.query_blocks];
    const std::size_t i0 = r % s.query_blocks * s.query_block;
    const std::size_t i1 = i0 + s.query_block < s.n ? i0 + s.query_block : s.n;
    for (std::size_t w = t; w < s.words; w += kCoverThreads) bits[w] = 0;
    __syncthreads();
    for (std::size_t e = g.offsets[i0] + t; e < g.offsets[i1]; e += kCoverThreads) {
      const std::size_t block = g.indices[e] / s.key_block;
      atomicOr(bits + block / 32, 1u << (block % 32));
    }
    __syncthreads();
    // Thread t owns words [w0, w1): its count, then (fill) its place.
    const std::size_t per = (s.words + kCoverThreads - 1) / kCoverThreads;
    const std::size_t w0 = t * per < s.words ? t * per : s.words, w1 = w0 + per < s.words ? w0 + per : s.words;
    std::size_t mine = 0;
    for (std::size_t w = w0; w < w1; ++w) mine += static_cast<std::size_t>(__popc(bits[w]));
    before[t] = mine;
    __syncthreads();
    if (t == 0) {
      std::size_t sum = 0;
      for (unsigned u = 0; u < kCoverThreads; ++u) {
        const std::size_t c = before[u];
        before[u] = sum;
        sum += c;
      }
      if (blocks == nullptr) counts[r] = sum;
    }
    __syncthreads();
    if (blocks != nullptr) {
      std::size_t p = offsets[r] + before[t];
      for (std::size_t w = w0; w < w1; ++w)
        for (std::uint32_t word = bits[w]; word != 0; word &= word - 1)
          blocks[p++] =
              static_cast<std::uint32_t>(w * 32 + static_cast<std::size_t>(__ffs(static_cast<int>(word)) - 1));
    }
    __syncthreads();  // before the next row clears the bitmap
  }
}

std::string num(std::size_t x) { return std::to_string(x); }

}  // namespace

DeviceBlockGraph DeviceBlockGraph::upload(const BlockGraph& g) {
  g.validate("DeviceBlockGraph::upload");
  DeviceBlockGraph d;
  d.batch = g.batch;
  d.heads = g.heads;
  d.queries = g.queries;
  d.keys = g.keys;
  d.query_block = g.query_block;
  d.key_block = g.key_block;
  d.offsets = DeviceArray<std::size_t>(g.offsets.data(), g.offsets.size(), "DeviceBlockGraph::upload (offsets)");
  d.blocks = DeviceArray<std::uint32_t>(g.blocks.data(), g.blocks.size(), "DeviceBlockGraph::upload (blocks)");
  return d;
}

BlockGraph DeviceBlockGraph::download() const {
  // Kernels that filled this graph may still run on another stream.
  check(cudaDeviceSynchronize(), "DeviceBlockGraph::download");
  BlockGraph g = shape();
  g.offsets.resize(offsets.size());
  g.blocks.resize(blocks.size());
  offsets.download(g.offsets.data());
  blocks.download(g.blocks.data());
  return g;
}

DeviceBlockGraph block_cover(const std::vector<const DeviceGraph*>& graphs, std::size_t batch, std::size_t heads,
                             std::size_t query_block, std::size_t key_block, cudaStream_t stream) {
  if (graphs.empty() || graphs.size() != batch * heads)
    detail::argument_error(kCoverOp, "graphs has " + num(graphs.size()) +
                                         " entries, expected batch x heads = " + num(batch * heads) + " >= 1");
  if (query_block == 0 || key_block == 0)
    detail::argument_error(
        kCoverOp, "query_block and key_block must be >= 1 (got " + num(query_block) + " and " + num(key_block) + ")");
  std::vector<GraphArrays> arrays(graphs.size());
  for (std::size_t x = 0; x < graphs.size(); ++x) {
    const DeviceGraph* g = graphs[x];
    if (g == nullptr) detail::argument_error(kCoverOp, "graphs[" + num(x) + "] is null");
    if (g->queries != graphs[0]->queries || g->keys != graphs[0]->keys)
      detail::argument_error(kCoverOp, "graphs[" + num(x) + "] is " + num(g->queries) + " x " + num(g->keys) +
                                           ", expected the size of graphs[0], " + num(graphs[0]->queries) + " x " +
                                           num(graphs[0]->keys));
    arrays[x] = {g->offsets.data(), g->indices.data()};
  }
  DeviceBlockGraph out;
  out.batch = batch;
  out.heads = heads;
  out.queries = graphs[0]->queries;
  out.keys = graphs[0]->keys;
  out.query_block = query_block;
  out.key_block = key_block;
  if (out.key_blocks() > kMaxCoverKeyBlocks)
    detail::argument_error(kCoverOp, "keys / key_block is above the GPU cover's " + num(kMaxCoverKeyBlocks) +
                                         " key blocks (got " + num(out.key_blocks()) +
                                         "): cover on the CPU (BlockGraph::cover) or use larger key blocks");
  const std::size_t rows = batch * heads * out.query_blocks();
  out.offsets = detail::zeroed_counts(rows, stream, kCoverOp);
  if (rows == 0 || out.keys == 0) {
    out.blocks = DeviceArray<std::uint32_t>(0, kCoverOp);
    check(cudaStreamSynchronize(stream), kCoverOp);
    return out;
  }
  const DeviceArray<GraphArrays> device_arrays(arrays.data(), arrays.size(), kCoverOp);
  const CoverShape shape{graphs.size(), out.queries, out.query_blocks(),
                         query_block,   key_block,   (out.key_blocks() + 31) / 32};
  const std::size_t shared =
      (shape.words + (shape.words & 1)) * sizeof(std::uint32_t) + kCoverThreads * sizeof(std::size_t);
  const unsigned grid = detail::grid_for(rows, 1);
  launch(cover_kernel, grid, kCoverThreads, shared, stream, device_arrays.data(), shape, out.offsets.data(), nullptr,
         nullptr);
  check(cudaGetLastError(), kCoverOp);
  out.blocks = DeviceArray<std::uint32_t>(detail::scan_counts(out.offsets.data(), rows, stream, kCoverOp), kCoverOp);
  if (out.blocks.size() > 0) {
    launch(cover_kernel, grid, kCoverThreads, shared, stream, device_arrays.data(), shape, nullptr, out.offsets.data(),
           out.blocks.data());
    check(cudaGetLastError(), kCoverOp);
  }
  // device_arrays is freed at return: the fill must be done with it.
  check(cudaStreamSynchronize(stream), kCoverOp);
  return out;
}

}  // namespace entgraph::cuda
