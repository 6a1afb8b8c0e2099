// The scan of a device array for NaN and infinity (value_scan.hpp): a kernel
// finds the first bad entry, the host reads its verdict before any transform
// is enqueued, so a bad input leaves every output untouched.
#include "kernel_launch.cuh"
#include "value_scan.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "checks.cuh"
#include "entgraph/error.hpp"
#include "reduce.cuh"

namespace entgraph::cuda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr unsigned kThreads = 256;

// The first index (row-major) of an entry that the mask keeps and that is NaN
// or +inf (or -inf too, unless allowed), atomically min-ed into *first.
__global__ void find_invalid_kernel(const float* x, const std::uint8_t* mask, unsigned long long total,
                                    bool allow_neg_inf, unsigned long long* first) {
  unsigned long long found = ~0ull;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    if (mask != nullptr && mask[i] == 0) continue;
    const float v = x[i];
    if (!(allow_neg_inf ? v < kInf : fabsf(v) < kInf)) {  // NaN fails both
      found = i;  // indices only grow along this thread's loop
      break;
    }
  }
  found = detail::warp_min(found);
  if (threadIdx.x % detail::kWarpSize == 0 && found != ~0ull) atomicMin(first, found);
}

}  // namespace

namespace detail {

void check_device_values(const std::string& op, const char* arg, const float* x, const std::uint8_t* mask,
                         std::size_t rows, std::size_t cols, bool allow_neg_inf, cudaStream_t stream) {
  const std::string what = op + ": scanning " + arg;
  const unsigned long long total = static_cast<unsigned long long>(rows) * cols;
  // Stream-ordered allocation (cheap, no device-wide sync); plain cudaMalloc
  // where the device has no memory pools.
  unsigned long long* first = nullptr;
  bool pooled = true;
  cudaError_t status = cudaMallocAsync(reinterpret_cast<void**>(&first), sizeof(*first), stream);
  if (status == cudaErrorNotSupported) {
    cudaGetLastError();
    pooled = false;
    status = cudaMalloc(reinterpret_cast<void**>(&first), sizeof(*first));
  }
  check(status, what.c_str());
  struct Release {
    void* p;
    cudaStream_t s;
    bool pooled;
    ~Release() { pooled ? cudaFreeAsync(p, s) : cudaFree(p); }
  } release{first, stream, pooled};
  check(cudaMemsetAsync(first, 0xff, sizeof(*first), stream), what.c_str());
  const unsigned threads = kThreads;
  const unsigned long long blocks = std::min<unsigned long long>((total + threads - 1) / threads, 4096);
  launch(find_invalid_kernel, static_cast<unsigned>(blocks), threads, 0, stream, x, mask, total, allow_neg_inf, first);
  check(cudaGetLastError(), what.c_str());
  unsigned long long bad = 0;
  check(cudaMemcpyAsync(&bad, first, sizeof(bad), cudaMemcpyDeviceToHost, stream), what.c_str());
  check(cudaStreamSynchronize(stream), what.c_str());
  if (bad == ~0ull) return;
  float v = 0.0f;
  check(cudaMemcpyAsync(&v, x + bad, sizeof(v), cudaMemcpyDeviceToHost, stream), what.c_str());
  check(cudaStreamSynchronize(stream), what.c_str());
  throw Error(op + ": " + arg + " has a non-finite entry at (" + std::to_string(bad / cols) + ", " +
              std::to_string(bad % cols) + ") (got " + (std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf")) +
              (allow_neg_inf ? ", expected a finite number or -inf)" : ", expected a finite number)"));
}

}  // namespace detail
}  // namespace entgraph::cuda
