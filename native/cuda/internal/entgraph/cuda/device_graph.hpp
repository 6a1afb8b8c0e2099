// entgraph CUDA backend: an attention graph in device memory.
//
// The same CSR layout as entgraph::Graph (graph.hpp): offsets holds
// queries + 1 values with offsets[0] = 0 and offsets[queries] = edges(), and
// the keys of query i are indices[offsets[i] .. offsets[i + 1]), ascending,
// without repeats, each < keys. Kernels that read a DeviceGraph trust these
// invariants (upload() checks them); kernels that build one guarantee them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "entgraph/cuda/device.hpp"
#include "entgraph/graph.hpp"

namespace entgraph::cuda {

struct DeviceGraph {
  std::size_t queries = 0;               // n
  std::size_t keys = 0;                  // m
  DeviceArray<std::size_t> offsets;      // n + 1 values
  DeviceArray<std::uint32_t> indices;    // offsets[n] key indices

  std::size_t edges() const { return indices.size(); }

  // A copy of g on the device. Throws entgraph::Error (from Graph::validate,
  // naming "DeviceGraph::upload") unless g is a valid graph, and CudaError
  // when no device is usable or memory runs out.
  static DeviceGraph upload(const Graph& g);
  // A copy in host memory (waits for the device's pending work first).
  Graph download() const;
};

}  // namespace entgraph::cuda
