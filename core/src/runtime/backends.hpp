// entgraph internal: the registered device backends, as the op layer sees
// them (the public side is entgraph/device.hpp and entgraph/backend.hpp).
#pragma once

#include "entgraph/backend.hpp"

namespace entgraph::detail {

// The table of a device other than cpu, once it is registered and reports
// itself usable; else throws entgraph::Error "<op>: device <name> is not
// available (<why>)".
const BackendKernels& backend_for(Device device, const char* op);

// entgraph::Error "<op>: device <name> has no kernel for this op; run it
// on cpu" (host_kernel_exists: "... for this op on its own memory; pass
// host memory (Memory::host)"), ErrorCode::unsupported.
[[noreturn]] void throw_no_kernel(Device device, const char* op, bool host_kernel_exists = false);

// The kernel `entry` of that table, or throw_no_kernel's error when the
// backend leaves it null.
template <class Entry>
Entry backend_kernel(Device device, const char* op, Entry BackendKernels::*entry) {
  const Entry kernel = backend_for(device, op).*entry;
  if (kernel == nullptr) throw_no_kernel(device, op);
  return kernel;
}

// The kernel of an op that takes a Memory: `host_entry` for Memory::host,
// `device_entry` for Memory::device. A null one throws as above; on device
// memory, "... on its own memory; pass host memory" where the host entry
// exists, else "... run it on cpu".
template <class Entry>
Entry backend_kernel(Device device, const char* op, Memory memory, Entry BackendKernels::*host_entry,
                     Entry BackendKernels::*device_entry) {
  const BackendKernels& table = backend_for(device, op);
  const bool on_device = memory == Memory::device;
  const Entry kernel = table.*(on_device ? device_entry : host_entry);
  if (kernel == nullptr) throw_no_kernel(device, op, on_device && table.*host_entry != nullptr);
  return kernel;
}

}  // namespace entgraph::detail
