// The CUDA backend's transform kernels (BackendKernels): the core has
// validated the arguments; the device adds what only it cannot do, then on
// host memory uploads, launches (transform_launch.hpp) and downloads, and on
// its own memory scans the values (value_scan.hpp) and launches.
#include <string>

#include "backend_kernels.hpp"
#include "checks.cuh"
#include "entgraph/backend.hpp"
#include "entgraph/cuda/device.hpp"
#include "staging.cuh"
#include "transform_launch.hpp"
#include "value_scan.hpp"

namespace entgraph::cuda::detail {
namespace {

// What the device cannot do (the core has checked everything else).
void check_capacity(const char* op, const Transform& t, std::size_t cols) {
  if (!transform_supported(t.kind))
    throw Error(std::string(op) + ": " + t.name() + " needs extra inputs; device cuda has no kernel for it");
  if (cols > kMaxTransformCols)
    throw Error(std::string(op) + ": rows are too long for device cuda (got n = " + std::to_string(cols) +
                ", expected n <= " + std::to_string(kMaxTransformCols) + ")");
}

}  // namespace

void device_transform_forward(const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs, MaskView mask) {
  check_capacity("transform_forward", t, scores.cols);
  check_contiguous("transform_forward", "scores", scores);
  check_contiguous("transform_forward", "probs", probs);
  if (!mask.empty()) check_contiguous("transform_forward", "mask", mask);
  if (scores.rows == 0) return;
  // A host pointer would fault inside a kernel and poison the context.
  check_device_pointer(scores.data, "transform_forward", "scores", false);
  check_device_pointer(probs.data, "transform_forward", "probs", false);
  if (!mask.empty()) check_device_pointer(mask.data, "transform_forward", "mask", false);
  const std::uint8_t* keep = mask.empty() ? nullptr : mask.data;
  const cudaStream_t stream = current_stream();
  // The CPU's scan and message ("<transform>: scores has a non-finite entry at (r, c) ...").
  check_device_values(t.info().name, "scores", scores.data, keep, scores.rows, scores.cols, true, stream);
  launch_transform_forward("transform_forward", t, scores.data, probs.data, keep, scores.rows, scores.cols, stream);
  finish_on_device(stream);
}

void device_transform_backward(const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                               MatrixView<float> grad_scores) {
  check_capacity("transform_backward", t, probs.cols);
  check_contiguous("transform_backward", "probs", probs);
  check_contiguous("transform_backward", "grad_probs", grad_probs);
  check_contiguous("transform_backward", "grad_scores", grad_scores);
  if (probs.rows == 0) return;
  check_device_pointer(probs.data, "transform_backward", "probs", false);
  check_device_pointer(grad_probs.data, "transform_backward", "grad_probs", false);
  check_device_pointer(grad_scores.data, "transform_backward", "grad_scores", false);
  const cudaStream_t stream = current_stream();
  check_device_values(t.info().backward_name, "grad_probs", grad_probs.data, nullptr, probs.rows, probs.cols, false,
                      stream);
  launch_transform_backward("transform_backward", t, probs.data, grad_probs.data, grad_scores.data, probs.rows,
                            probs.cols, stream);
  finish_on_device(stream);
}

void host_transform_forward(const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs, MaskView mask) {
  check_capacity("transform_forward", t, scores.cols);
  if (scores.rows == 0) return;
  const DeviceArray<float> d_scores = upload(scores, "transform_forward: uploading scores");
  DeviceArray<float> d_probs(scores.rows * scores.cols, "transform_forward: probs");
  DeviceArray<std::uint8_t> d_mask;
  if (!mask.empty()) d_mask = upload(mask, "transform_forward: uploading mask");
  launch_transform_forward("transform_forward", t, d_scores.data(), d_probs.data(),
                           mask.empty() ? nullptr : d_mask.data(), scores.rows, scores.cols, nullptr);
  download(d_probs, probs, "transform_forward: downloading probs");
}

void host_transform_backward(const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                             MatrixView<float> grad_scores) {
  check_capacity("transform_backward", t, probs.cols);
  if (probs.rows == 0) return;
  const DeviceArray<float> d_probs = upload(probs, "transform_backward: uploading probs");
  const DeviceArray<float> d_grad = upload(grad_probs, "transform_backward: uploading grad_probs");
  DeviceArray<float> d_out(probs.rows * probs.cols, "transform_backward: grad_scores");
  launch_transform_backward("transform_backward", t, d_probs.data(), d_grad.data(), d_out.data(), probs.rows,
                            probs.cols, nullptr);
  download(d_out, grad_scores, "transform_backward: downloading grad_scores");
}

}  // namespace entgraph::cuda::detail
