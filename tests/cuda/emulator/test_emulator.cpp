// The CUDA emulator itself (docs/CUDA.md, "The emulator"): small kernels
// whose results are known, and the misuse it must report as a launch error
// rather than run. The racy kernel at the end is run only by the tsan
// preset, whose ctest expects ThreadSanitizer to fail it.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "entgraph_emulator/instructions.hpp"

namespace {

using entgraph_emulator::launch;

std::string launch_error() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
}

template <class T>
struct Device {
  T* p = nullptr;
  explicit Device(std::size_t n) { REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess); }
  ~Device() { cudaFree(p); }
  std::vector<T> read(std::size_t n) const {
    std::vector<T> out(n);
    REQUIRE(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }
};

// Each thread writes its slot, the block waits, each reads its neighbour's.
__global__ void rotate_kernel(int* out) {
  int* s = entgraph_emulator::dynamic_shared<int>();
  s[threadIdx.x] = static_cast<int>(blockIdx.x * 1000 + threadIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

__global__ void shuffle_kernel(int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  int v = __shfl_xor_sync(0xffffffffu, lane * 10, 1);
  const unsigned odd = __ballot_sync(0xffffffffu, lane % 2);
  v += __shfl_sync(0xffffffffu, lane, 31 - lane) * 1000;
  out[threadIdx.x] = v + (odd == 0xaaaaaaaau ? 0 : 1000000);
}

__global__ void divergent_kernel(int* out) {
  if (threadIdx.x % 2 == 0)
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
  else
    out[threadIdx.x] = __ballot_sync(0xffffffffu, 1);
}

__global__ void early_exit_kernel(int* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

// Lanes 48-63 wait at a shuffle for lanes 32-47, who wait at the barrier
// for them.
__global__ void deadlock_kernel(int* out) {
  if (threadIdx.x < 48) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
    __syncthreads();
  }
}

// One mma.sync.m16n8k16 with A = row-index pattern and B = column pattern,
// fragments filled by the PTX ISA's tables as a kernel would fill them.
__global__ void mma_kernel(const float* a, const float* b, float* d) {
  const int lane = static_cast<int>(threadIdx.x);
  const int g = lane / 4, t = lane % 4;
  const auto bits = [](float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    return static_cast<std::uint32_t>(u >> 16);  // exact for the small integers used
  };
  const auto pack = [&](float lo, float hi) { return bits(lo) | bits(hi) << 16; };
  const std::uint32_t ra[4] = {pack(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]),
                               pack(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
                               pack(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
                               pack(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9])};
  const std::uint32_t b0 = pack(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]);
  const std::uint32_t b1 = pack(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g]);
  float acc[4] = {0, 0, 0, 0};
  entgraph_emulator::mma_m16n8k16(entgraph_emulator::Half::bfloat16, acc, ra, b0, b1);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

// One mma.sync.m16n8k32 on signed bytes (A 16 x 32 row-major, B 32 x 8
// row-major), fragments filled byte by byte from the PTX ISA's table.
__global__ void mma_s8_kernel(const std::int8_t* a, const std::int8_t* b, int* d) {
  const int lane = static_cast<int>(threadIdx.x);
  const int g = lane / 4, t = lane % 4;
  const auto word = [](std::int8_t b0, std::int8_t b1, std::int8_t b2, std::int8_t b3) {
    return static_cast<std::uint32_t>(static_cast<std::uint8_t>(b0)) |
           static_cast<std::uint32_t>(static_cast<std::uint8_t>(b1)) << 8 |
           static_cast<std::uint32_t>(static_cast<std::uint8_t>(b2)) << 16 |
           static_cast<std::uint32_t>(static_cast<std::uint8_t>(b3)) << 24;
  };
  const auto a_word = [&](int row, int col) {
    return word(a[row * 32 + col], a[row * 32 + col + 1], a[row * 32 + col + 2], a[row * 32 + col + 3]);
  };
  const auto b_word = [&](int k, int col) {
    return word(b[k * 8 + col], b[(k + 1) * 8 + col], b[(k + 2) * 8 + col], b[(k + 3) * 8 + col]);
  };
  const std::uint32_t ra[4] = {a_word(g, 4 * t), a_word(g + 8, 4 * t), a_word(g, 4 * t + 16),
                               a_word(g + 8, 4 * t + 16)};
  int acc[4] = {1, 2, 3, 4};  // d += a b: the accumulators take part
  entgraph_emulator::mma_m16n8k32_s8(acc, ra, b_word(4 * t, g), b_word(4 * t + 16, g));
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

// Copies a 16-byte row asynchronously; reads the destination before and
// after waiting.
__global__ void copy_kernel(const float* src, float* out) {
  float* s = entgraph_emulator::dynamic_shared<float>();
  for (int i = 0; i < 4; ++i) s[i] = -1.0f;
  entgraph_emulator::cp_async_16(s, src, true);
  out[0] = s[0];
  entgraph_emulator::cp_async_wait_all();
  out[1] = s[0];
}

// Thread 0 writes what thread 1 reads, with no barrier between them.
__global__ void racy_kernel(int* out) {
  int* s = entgraph_emulator::dynamic_shared<int>();
  if (threadIdx.x == 0) s[0] = 7;
  __syncwarp();  // orders warp 0 only
  if (threadIdx.x == 32) out[0] = s[0];
}

}  // namespace

TEST_SUITE("emulator") {
  TEST_CASE("a barrier orders shared memory; every block gets its own indices") {
    Device<int> out(3 * 64);
    launch(rotate_kernel, dim3(3), dim3(64), 64 * sizeof(int), nullptr, out.p);
    REQUIRE(launch_error().empty());
    const std::vector<int> got = out.read(3 * 64);
    for (int b = 0; b < 3; ++b)
      for (int t = 0; t < 64; ++t) CHECK(got[static_cast<std::size_t>(b * 64 + t)] == b * 1000 + (t + 1) % 64);
  }

  TEST_CASE("shuffles and ballots exchange within each warp") {
    Device<int> out(64);
    launch(shuffle_kernel, dim3(1), dim3(64), 0, nullptr, out.p);
    REQUIRE(launch_error().empty());
    const std::vector<int> got = out.read(64);
    for (int t = 0; t < 64; ++t) {
      const int lane = t % 32;
      CHECK(got[static_cast<std::size_t>(t)] == (lane ^ 1) * 10 + (31 - lane) * 1000);
    }
  }

  TEST_CASE("mma.sync.m16n8k16 multiplies as the PTX ISA lays out its fragments") {
    std::vector<float> a(16 * 16), b(16 * 8);
    for (int r = 0; r < 16; ++r)
      for (int k = 0; k < 16; ++k) a[static_cast<std::size_t>(r * 16 + k)] = static_cast<float>((r + 2 * k) % 7 - 3);
    for (int k = 0; k < 16; ++k)
      for (int c = 0; c < 8; ++c) b[static_cast<std::size_t>(k * 8 + c)] = static_cast<float>((3 * k + c) % 5 - 2);
    Device<float> da(a.size()), db(b.size()), dd(16 * 8);
    REQUIRE(cudaMemcpy(da.p, a.data(), a.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(db.p, b.data(), b.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
    launch(mma_kernel, dim3(1), dim3(32), 0, nullptr, da.p, db.p, dd.p);
    REQUIRE(launch_error().empty());
    const std::vector<float> got = dd.read(16 * 8);
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 8; ++c) {
        float want = 0;
        for (int k = 0; k < 16; ++k)
          want += a[static_cast<std::size_t>(r * 16 + k)] * b[static_cast<std::size_t>(k * 8 + c)];
        CHECK(got[static_cast<std::size_t>(r * 8 + c)] == want);
      }
  }

  TEST_CASE("mma.sync.m16n8k32 on signed bytes multiplies as the PTX ISA lays out its fragments") {
    std::vector<std::int8_t> a(16 * 32), b(32 * 8);
    // Extremes included: -128 * -128 summed 32 times stays in int32.
    for (int r = 0; r < 16; ++r)
      for (int k = 0; k < 32; ++k)
        a[static_cast<std::size_t>(r * 32 + k)] = static_cast<std::int8_t>(r == 0 ? -128 : (5 * r + 3 * k) % 255 - 127);
    for (int k = 0; k < 32; ++k)
      for (int c = 0; c < 8; ++c)
        b[static_cast<std::size_t>(k * 8 + c)] = static_cast<std::int8_t>(c == 0 ? -128 : (7 * k + 11 * c) % 251 - 125);
    Device<std::int8_t> da(a.size()), db(b.size());
    Device<int> dd(16 * 8);
    REQUIRE(cudaMemcpy(da.p, a.data(), a.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(db.p, b.data(), b.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    launch(mma_s8_kernel, dim3(1), dim3(32), 0, nullptr, da.p, db.p, dd.p);
    REQUIRE(launch_error().empty());
    const std::vector<int> got = dd.read(16 * 8);
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 8; ++c) {
        int want = 1 + (r >= 8 ? 2 : 0) + c % 2;  // the accumulator's start
        for (int k = 0; k < 32; ++k)
          want += a[static_cast<std::size_t>(r * 32 + k)] * b[static_cast<std::size_t>(k * 8 + c)];
        CHECK(got[static_cast<std::size_t>(r * 8 + c)] == want);
      }
  }

  TEST_CASE("cp.async lands only when the thread waits") {
    const float src[4] = {5, 6, 7, 8};
    Device<float> dsrc(4), out(2);
    REQUIRE(cudaMemcpy(dsrc.p, src, sizeof src, cudaMemcpyHostToDevice) == cudaSuccess);
    launch(copy_kernel, dim3(1), dim3(1), 16, nullptr, dsrc.p, out.p);
    REQUIRE(launch_error().empty());
    const std::vector<float> got = out.read(2);
    CHECK(got[0] == -1.0f);
    CHECK(got[1] == 5.0f);
  }

  TEST_CASE("misuse is the launch's error, naming what went wrong") {
    Device<int> out(64);
    launch(divergent_kernel, dim3(1), dim3(32), 0, nullptr, out.p);
    CHECK(launch_error().find("divergent warp") != std::string::npos);
    launch(early_exit_kernel, dim3(1), dim3(32), 0, nullptr, out.p);
    CHECK(launch_error().find("exited while its warp waits at __shfl_xor_sync") != std::string::npos);
    launch(deadlock_kernel, dim3(1), dim3(64), 0, nullptr, out.p);
    const std::string deadlock = launch_error();
    CHECK(deadlock.find("deadlock") != std::string::npos);
    CHECK(deadlock.find("wait at __syncthreads") != std::string::npos);
    launch(rotate_kernel, dim3(1), dim3(2048), 0, nullptr, out.p);
    CHECK(launch_error().find("invalid configuration") != std::string::npos);
    launch(rotate_kernel, dim3(1), dim3(64), 64 * 1024, nullptr, out.p);
    CHECK(launch_error().find("dynamic shared memory") != std::string::npos);
    REQUIRE(cudaFuncSetAttribute(rotate_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == cudaSuccess);
    launch(rotate_kernel, dim3(1), dim3(64), 64 * 1024, nullptr, out.p);
    CHECK(launch_error().empty());
    int host = 0;
    CHECK(cudaMemcpy(&host, &host, sizeof host, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  }

  TEST_CASE("racecheck: a read of another warp's write with no barrier between" * doctest::skip(true)) {
    Device<int> out(1);
    launch(racy_kernel, dim3(1), dim3(64), 16, nullptr, out.p);
    CHECK(launch_error().empty());
  }
}
