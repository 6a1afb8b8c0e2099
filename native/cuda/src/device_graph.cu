#include <cuda_runtime.h>

#include "entgraph/cuda/device_graph.hpp"
#include "staging.cuh"

namespace entgraph::cuda {

DeviceGraph DeviceGraph::upload(const Graph& g) {
  g.validate("DeviceGraph::upload");
  return detail::upload_valid(g, "DeviceGraph::upload");
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
