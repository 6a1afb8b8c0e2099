// Device::cuda's kernel table (entgraph/backend.hpp), registered with the
// core by cuda::register_backend(). Each kernel lives with its concept
// (backend_kernels.hpp); this file only assembles them.
#include <string>
#include <utility>

#include "backend_kernels.hpp"
#include "entgraph/cuda/backend.hpp"
#include "entgraph/cuda/entgraph_cuda.h"
#include "entgraph/cuda/device.hpp"
#include "transform_launch.hpp"

namespace entgraph::cuda {
namespace {

bool usable(std::string* why) {
  if (available()) return true;
  if (why) *why = unavailable_reason();
  return false;
}

bool refuse(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return false;
}

// What the kernels below run, from the transform list's cuda column and the
// head dimensions the fused kernels are built for.
bool supports(BackendOp op, const OpArguments& a, std::string* why) {
  const TransformInfo* row = find_transform_info(a.transform.kind);
  switch (op) {
    case BackendOp::transform_forward:
    case BackendOp::transform_backward:
      if (!detail::transform_supported(a.transform.kind))
        return refuse(why, a.transform.name() + " has no CUDA kernel (expected " +
                               transform_names(has_cuda_transform, " or ") + ")");
      return true;
    case BackendOp::attention_forward:
    case BackendOp::graph_attention_forward:
      if (row == nullptr || !has_cuda_attention(*row))
        return refuse(why, a.transform.name() + " has no CUDA attention kernel (expected " +
                               transform_names(has_cuda_attention, " or ") + ")");
      if (op == BackendOp::attention_forward &&
          !(detail::supported_head_dim(a.d) && detail::supported_head_dim(a.dv)))
        return refuse(why, "the fused attention kernels take d and dv of 32, 64 or 128 (got d = " +
                               std::to_string(a.d) + ", dv = " + std::to_string(a.dv) + ")");
      return true;
    default:
      return true;
  }
}

}  // namespace

void register_backend() {
  BackendKernels table;
  table.available = usable;
  table.supports = supports;
  table.transform_forward = detail::host_transform_forward;
  table.transform_backward = detail::host_transform_backward;
  table.transform_forward_on_device = detail::device_transform_forward;
  table.transform_backward_on_device = detail::device_transform_backward;
  table.attention_forward = detail::host_attention_forward;
  table.attention_forward_on_device = detail::device_attention_forward;
  table.batched_attention_forward = detail::host_batched_attention_forward;
  table.batched_attention_forward_on_device = detail::device_batched_attention_forward;
  table.batched_attention_backward = detail::host_batched_attention_backward;
  table.batched_attention_backward_on_device = detail::device_batched_attention_backward;
  table.block_sparse_attention_forward = detail::host_block_sparse_attention_forward;
  table.block_sparse_attention_backward = detail::host_block_sparse_attention_backward;
  table.graph_attention_forward = detail::host_graph_attention_forward;
  table.graph_attention_forward_on_device = detail::device_graph_attention_forward;
  table.compare_graphs = detail::host_compare_graphs;
  table.sparsefinder_pattern = detail::host_sparsefinder_pattern;
  table.sparsefinder_pattern_on_device = detail::device_sparsefinder_pattern;
  table.graph_attention_exact = detail::host_graph_attention_exact;
  table.graph_attention_exact_on_device = detail::device_graph_attention_exact;
  table.lowrank_threshold_pattern = detail::host_lowrank_threshold_pattern;
  table.lowrank_threshold_pattern_on_device = detail::device_lowrank_threshold_pattern;
  entgraph::register_backend(Device::cuda, table);
}

}  // namespace entgraph::cuda

extern "C" eg_status eg_cuda_register_backend(void) {
  // The C++ registration throws only if the table cannot be stored.
  try {
    entgraph::cuda::register_backend();
    return EG_OK;
  } catch (...) {
    return EG_ERROR_MEMORY;
  }
}
