// entgraph wasm: the error slot, the version, the ISA, memory counters.
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
}  // namespace

EMSCRIPTEN_BINDINGS(entgraph_runtime) {
  emscripten::function("takeError", &take_error);
  emscripten::function("version", guarded<&version>);
  emscripten::function("isa", guarded<&isa>);
  emscripten::function("setIsa", guarded<&set_isa>);
  emscripten::function("heapBytes", guarded<&heap_bytes>);
  emscripten::function("allocatedBytes", guarded<&allocated_bytes>);
}

}  // namespace entgraph::js
