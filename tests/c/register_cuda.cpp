// Linked into entgraph_c_api_cuda_test only: registers the CUDA backend
// before main, as a host program would at startup, so that test_c_api.c
// reaches the GPU through EG_DEVICE_CUDA (or, without a usable GPU, gets
// EG_ERROR_DEVICE with the backend's own reason).
#include "entgraph/cuda/backend.hpp"

namespace {
const bool registered = (entgraph::cuda::register_backend(), true);
}  // namespace
