// entgraph: where an op runs.
//
// Device::cpu is the core itself and always present. Any other device runs
// the kernel table that a backend library registers with the core
// (entgraph/backend.hpp; the CUDA library's entgraph::cuda::register_backend()).
// The public calls that take a Device first (transform_forward,
// attention_forward, graph_attention_forward, compare_graphs,
// Predictor::predict, ...) validate their arguments in the core, once, with
// the CPU's checks and messages, whatever the device; then the device runs.
// Asking for a device that cannot run throws entgraph::Error saying why:
// nothing falls back to the CPU silently, so a benchmark never measures the
// wrong device.
#pragma once

#include <string>

namespace entgraph {

enum class Device { cpu, cuda };

// Where a call's arrays lie: in host memory (a device other than cpu copies
// them over and back) or in the device's own memory (nothing is copied; the
// device's kernel scans the values). Ops that take a Memory say so.
enum class Memory { host, device };

// A device's queue of work (CUDA: a cudaStream_t; torch's
// torch.cuda.current_stream().cuda_stream), opaque to the core, set per
// thread and device. Ops on the device's own memory (Memory::device) run in
// that queue's order: after the work already in it, before the work added
// after. Without one (null, the default) they return when their outputs are
// written; with one they return once their work is enqueued, except that
// they wait for what they must read on the host first (their value scans,
// batched attention's lengths, a predicted graph), so an error is still
// thrown before anything is written. Host-memory ops always return with
// their outputs written. Device::cpu has no stream (setting one throws).
void set_device_stream(Device device, void* stream);
void* device_stream(Device device);
// Sets the calling thread's stream for `device` while it lives.
class DeviceStreamScope {
 public:
  DeviceStreamScope(Device device, void* stream) : device_(device), previous_(device_stream(device)) {
    set_device_stream(device, stream);
  }
  ~DeviceStreamScope() { set_device_stream(device_, previous_); }
  DeviceStreamScope(const DeviceStreamScope&) = delete;
  DeviceStreamScope& operator=(const DeviceStreamScope&) = delete;

 private:
  Device device_;
  void* previous_;
};

// "cpu" or "cuda"; anything else throws entgraph::Error naming the argument
// ("device: unknown device (got 'tpu', expected cpu or cuda)").
Device parse_device(const std::string& name);
const char* device_name(Device device);

// Whether ops can run on `device` now: cpu always; another device when its
// backend is registered and reports itself usable (a GPU is present, the
// driver fits). When not, `why` (if given) receives the reason. Never throws.
bool device_available(Device device, std::string* why = nullptr);

// Whether `device` runs `op` on arguments like these: cpu every op; another
// device when it is available, has a kernel for the op and its backend's
// supports() says yes. When not, `why` (if given) receives the reason. Never
// throws. (BackendOp and OpArguments: entgraph/backend.hpp.)
enum class BackendOp;
struct OpArguments;
bool device_supports(Device device, BackendOp op, const OpArguments& arguments, std::string* why = nullptr);

}  // namespace entgraph
