// The CUDA test binary: runs the GPU suites when a usable device is present;
// otherwise prints why and exits 77 (ctest: skipped), so a machine without a
// GPU shows the skip instead of a pass.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "entgraph/cuda/backend.hpp"
#include "entgraph/cuda/device.hpp"

int main(int argc, char** argv) {
  entgraph::cuda::register_backend();  // the suites reach the GPU through the core's Device::cuda calls
  if (!entgraph::cuda::available()) {
    std::printf("SKIPPED: the CUDA tests need a GPU; none is usable here (%s)\n",
                entgraph::cuda::unavailable_reason().c_str());
    return 77;
  }
  const entgraph::cuda::DeviceInfo info = entgraph::cuda::device_info();
  std::printf("CUDA device: %s (sm_%d%d, %zu MiB)\n", info.name.c_str(), info.major, info.minor,
              info.memory_bytes >> 20);
  doctest::Context context(argc, argv);
  return context.run();
}
