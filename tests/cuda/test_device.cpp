// Device memory round trips and errors.
#include <doctest/doctest.h>

#include <vector>

#include "entgraph/cuda/device.hpp"

namespace entgraph::cuda {

TEST_SUITE("cuda") {
  TEST_CASE("a DeviceArray holds what was uploaded and moves without copying") {
    const std::vector<float> host = {1.0f, -2.5f, 3.25f, 0.0f, 1e-30f};
    DeviceArray<float> a(host.data(), host.size(), "test");
    std::vector<float> back(host.size());
    a.download(back.data());
    CHECK(back == host);
    DeviceArray<float> b = std::move(a);
    CHECK(a.data() == nullptr);
    CHECK(b.size() == host.size());
    std::fill(back.begin(), back.end(), 0.0f);
    b.download(back.data());
    CHECK(back == host);
  }

  TEST_CASE("an impossible allocation throws CudaError naming the operation") {
    CHECK_THROWS_WITH_AS(DeviceArray<float>(std::size_t(1) << 60, "huge buffer"), doctest::Contains("huge buffer"),
                         CudaError);
  }
}

}  // namespace entgraph::cuda
