#include <cuda_runtime.h>

#include "entgraph/cuda/device_graph.hpp"

namespace entgraph::cuda {

DeviceGraph DeviceGraph::upload(const Graph& g) {
  g.validate("DeviceGraph::upload");
  DeviceGraph d;
  d.queries = g.queries;
  d.keys = g.keys;
  d.offsets = DeviceArray<std::size_t>(g.offsets.data(), g.offsets.size(), "DeviceGraph::upload (offsets)");
  d.indices = DeviceArray<std::uint32_t>(g.indices.data(), g.indices.size(), "DeviceGraph::upload (indices)");
  return d;
}

Graph DeviceGraph::download() const {
  // Kernels that filled this graph may still run on another stream.
  check(cudaDeviceSynchronize(), "DeviceGraph::download");
  Graph g;
  g.queries = queries;
  g.keys = keys;
  g.offsets.resize(offsets.size());
  g.indices.resize(indices.size());
  offsets.download(g.offsets.data());
  indices.download(g.indices.data());
  return g;
}

}  // namespace entgraph::cuda
