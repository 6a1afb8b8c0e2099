// entgraph internal: the registered device backends, as the op layer sees
// them (the public side is entgraph/device.hpp and entgraph/backend.hpp).
#pragma once

#include "entgraph/backend.hpp"

namespace entgraph::detail {

// The table of a device other than cpu, once it is registered and reports
// itself usable; else throws entgraph::Error "<op>: device <name> is not
// available (<why>)".
const BackendKernels& backend_for(Device device, const char* op);

[[noreturn]] void throw_no_kernel(Device device, const char* op, bool device_memory = false);

// The kernel `entry` of that table, or entgraph::Error "<op>: device <name>
// has no kernel for this op; run it on cpu" when the backend leaves it null
// (device_memory: "... for this op on its own memory; pass host memory").
template <class Entry>
Entry backend_kernel(Device device, const char* op, Entry BackendKernels::*entry, bool device_memory = false) {
  const Entry kernel = backend_for(device, op).*entry;
  if (kernel == nullptr) throw_no_kernel(device, op, device_memory);
  return kernel;
}

}  // namespace entgraph::detail
