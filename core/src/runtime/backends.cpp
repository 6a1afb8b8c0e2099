// The device registry: which backend runs each Device other than cpu.
#include "runtime/backends.hpp"

#include <mutex>
#include <string>

#include "entgraph/error.hpp"

namespace entgraph {
namespace {

constexpr std::size_t kDevices = 2;  // Device::cpu, Device::cuda

struct Registry {
  std::mutex mutex;
  BackendKernels tables[kDevices];
  bool registered[kDevices] = {};
};

Registry& registry() {
  static Registry r;
  return r;
}

std::size_t index_of(Device device) { return static_cast<std::size_t>(device); }

}  // namespace

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  throw Error("device: unknown device (got '" + name + "', expected cpu or cuda)");
}

const char* device_name(Device device) { return device == Device::cuda ? "cuda" : "cpu"; }

namespace {
thread_local void* streams[kDevices] = {};
}  // namespace

void set_device_stream(Device device, void* stream) {
  if (device == Device::cpu) {
    if (stream == nullptr) return;  // nothing to set: a scope's restore
    throw Error(at_op("set_device_stream") + cpp_name("device") + " is cpu, which has no stream (got a stream for it)");
  }
  if (index_of(device) >= kDevices)
    throw Error(at_op("set_device_stream") + cpp_name("device") + " is not a Device (got " +
                std::to_string(index_of(device)) + ")");
  streams[index_of(device)] = stream;
}

void* device_stream(Device device) {
  return index_of(device) < kDevices ? streams[index_of(device)] : nullptr;
}

void register_backend(Device device, const BackendKernels& kernels) {
  if (device == Device::cpu) throw Error(at_op("register_backend") + "device cpu runs the core's own kernels");
  if (kernels.available == nullptr)
    throw Error(at_op("register_backend") + "kernels.available is null for device " + device_name(device) +
                " (every backend must say whether it can run)");
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.tables[index_of(device)] = kernels;
  r.registered[index_of(device)] = true;
}

bool device_available(Device device, std::string* why) {
  if (device == Device::cpu) return true;
  Registry& r = registry();
  BackendKernels table;
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    if (!r.registered[index_of(device)]) {
      if (why)
        *why = std::string("no ") + device_name(device) + " backend is registered: build with nvcc, link entgraph::cuda and call entgraph::cuda::register_backend()";
      return false;
    }
    table = r.tables[index_of(device)];
  }
  std::string reason;
  const bool ok = table.available(&reason);
  if (!ok && why) *why = reason;
  return ok;
}

namespace {

// Whether the table has a kernel for op on that memory.
bool has_kernel(const BackendKernels& t, BackendOp op, Memory memory) {
  const bool host = memory == Memory::host;
  switch (op) {
    case BackendOp::transform_forward:
      return (host ? t.transform_forward : t.transform_forward_on_device) != nullptr;
    case BackendOp::transform_backward:
      return (host ? t.transform_backward : t.transform_backward_on_device) != nullptr;
    case BackendOp::attention_forward:
      return (host ? t.attention_forward : t.attention_forward_on_device) != nullptr;
    case BackendOp::attention_backward:
      return (host ? t.attention_backward : t.attention_backward_on_device) != nullptr;
    case BackendOp::batched_attention_forward:
      return (host ? t.batched_attention_forward : t.batched_attention_forward_on_device) != nullptr;
    case BackendOp::batched_attention_backward:
      return (host ? t.batched_attention_backward : t.batched_attention_backward_on_device) != nullptr;
    case BackendOp::block_sparse_attention_forward:  // graphs are host objects
      return host && t.block_sparse_attention_forward != nullptr;
    case BackendOp::block_sparse_attention_backward:
      return host && t.block_sparse_attention_backward != nullptr;
    case BackendOp::graph_attention_forward:
      return (host ? t.graph_attention_forward : t.graph_attention_forward_on_device) != nullptr;
    case BackendOp::graph_attention_exact:
      return (host ? t.graph_attention_exact : t.graph_attention_exact_on_device) != nullptr;
    case BackendOp::compare_graphs: return host && t.compare_graphs != nullptr;  // graphs are host objects
    case BackendOp::sparsefinder_pattern:
      return (host ? t.sparsefinder_pattern : t.sparsefinder_pattern_on_device) != nullptr;
    case BackendOp::lowrank_threshold_pattern:
      return (host ? t.lowrank_threshold_pattern : t.lowrank_threshold_pattern_on_device) != nullptr;
  }
  return false;
}

}  // namespace

bool device_supports(Device device, BackendOp op, const OpArguments& arguments, std::string* why) {
  if (device == Device::cpu) return true;
  if (!device_available(device, why)) return false;
  BackendKernels table;
  {
    Registry& r = registry();
    const std::lock_guard<std::mutex> lock(r.mutex);
    table = r.tables[index_of(device)];
  }
  if (!has_kernel(table, op, arguments.memory)) {
    if (why)
      *why = std::string("device ") + device_name(device) + " has no kernel for this op" +
             (arguments.memory == Memory::device ? " on its own memory" : "");
    return false;
  }
  return table.supports == nullptr || table.supports(op, arguments, why);
}

namespace detail {

const BackendKernels& backend_for(Device device, const char* op) {
  std::string why;
  if (device == Device::cpu || !device_available(device, &why))
    throw Error(at_op(op) + "device " + device_name(device) + " is not available (" +
                    (device == Device::cpu ? std::string("cpu has no backend table") : why) + ")",
                ErrorCode::device_unavailable);
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  return r.tables[index_of(device)];
}

void throw_no_kernel(Device device, const char* op, bool host_kernel_exists) {
  if (host_kernel_exists)
    throw Error(at_op(op) + "device " + device_name(device) +
                    " has no kernel for this op on its own memory; pass host memory (Memory::host)",
                ErrorCode::unsupported);
  throw Error(at_op(op) + "device " + device_name(device) + " has no kernel for this op; run it on cpu",
              ErrorCode::unsupported);
}

}  // namespace detail
}  // namespace entgraph
