// Device::cuda's kernel table (entgraph/backend.hpp), registered with the
// core by cuda::register_backend(). Each kernel lives with its concept
// (backend_kernels.hpp); this file only assembles them.
#include "backend_kernels.hpp"
#include "entgraph/cuda/backend.hpp"
#include "entgraph/cuda/device.hpp"

namespace entgraph::cuda {
namespace {

bool usable(std::string* why) {
  if (available()) return true;
  if (why) *why = unavailable_reason();
  return false;
}

}  // namespace

void register_backend() {
  BackendKernels table;
  table.available = usable;
  table.transform_forward = detail::host_transform_forward;
  table.transform_backward = detail::host_transform_backward;
  table.attention_forward = detail::host_attention_forward;
  table.batched_attention_forward = detail::host_batched_attention_forward;
  table.graph_attention_forward = detail::host_graph_attention_forward;
  table.compare_graphs = detail::host_compare_graphs;
  table.sparsefinder_pattern = detail::host_sparsefinder_pattern;
  entgraph::register_backend(Device::cuda, table);
}

}  // namespace entgraph::cuda
