// Host views in and out of device memory: the backend's kernels (backend.cu)
// and the host-memory overloads of the predictor primitives copy through
// these. Any row stride on the host; contiguous rows on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "entgraph/cuda/device.hpp"
#include "entgraph/cuda/device_graph.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/matrix_view.hpp"

namespace entgraph::cuda::detail {

// Row pitch in bytes of a host view (a single row may have any stride).
template <class V>
std::size_t pitch_of(const V& view) {
  return (view.rows > 1 ? view.stride : view.cols) * sizeof(*view.data);
}

// A contiguous device copy of a host view.
template <class T>
DeviceArray<T> upload(MatrixView<const T> view, const std::string& what) {
  DeviceArray<T> out(view.rows * view.cols, what.c_str());
  if (view.rows == 0 || view.cols == 0) return out;
  const std::size_t width = view.cols * sizeof(T);
  check(cudaMemcpy2D(out.data(), width, view.data, pitch_of(view), width, view.rows, cudaMemcpyHostToDevice),
        what.c_str());
  return out;
}

// The contiguous device matrix `from` into a host view of its shape.
template <class T>
void download(const DeviceArray<T>& from, MatrixView<T> to, const std::string& what) {
  if (to.rows == 0 || to.cols == 0) return;
  const std::size_t width = to.cols * sizeof(T);
  check(cudaMemcpy2D(to.data, pitch_of(to), from.data(), width, width, to.rows, cudaMemcpyDeviceToHost),
        what.c_str());
}

// A device copy of a graph the core has validated (DeviceGraph::upload, the
// public entry, validates again).
inline DeviceGraph upload_valid(const Graph& g, const std::string& what) {
  DeviceGraph d;
  d.queries = g.queries;
  d.keys = g.keys;
  d.offsets = DeviceArray<std::size_t>(g.offsets.data(), g.offsets.size(), (what + " (offsets)").c_str());
  d.indices = DeviceArray<std::uint32_t>(g.indices.data(), g.indices.size(), (what + " (indices)").c_str());
  return d;
}

}  // namespace entgraph::cuda::detail
