// entgraph wasm: the error slot, the version, the ISA, memory counters, threads.
#include <emscripten/bind.h>
#include <emscripten/heap.h>
#include <malloc.h>

#include <string>

#include "entgraph/runtime.hpp"
#include "js_interop.hpp"

namespace entgraph::js {
namespace {
std::string version() { return ENTGRAPH_VERSION; }
std::string isa() { return cpu_isa_name(cpu_isa()); }
void set_isa(const std::string& name) { set_cpu_isa(parse_cpu_isa(name)); }
double heap_bytes() { return static_cast<double>(emscripten_get_heap_size()); }
double allocated_bytes() { return static_cast<double>(mallinfo().uordblks); }
// The core's thread count: the threaded module's pool of Web Workers holds
// threads - 1 of them (entgraph.js sizes it); the single-thread module
// refuses n > 1.
void set_num_threads_js(double n) { set_num_threads(to_size(n, "threads")); }
double num_threads_js() { return static_cast<double>(num_threads()); }
}  // namespace

EMSCRIPTEN_BINDINGS(entgraph_runtime) {
  emscripten::function("takeError", &take_error);
  emscripten::function("version", guarded<&version>);
  emscripten::function("isa", guarded<&isa>);
  emscripten::function("setIsa", guarded<&set_isa>);
  emscripten::function("heapBytes", guarded<&heap_bytes>);
  emscripten::function("allocatedBytes", guarded<&allocated_bytes>);
  emscripten::function("setNumThreads", guarded<&set_num_threads_js>);
  emscripten::function("numThreads", guarded<&num_threads_js>);
}

}  // namespace entgraph::js
