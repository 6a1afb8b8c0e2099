// entgraph transform: one transform, forward and optionally backward, over a
// .npy file of scores.
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "entgraph/device.hpp"
#include "entgraph/error.hpp"
#include "entgraph/io/files.hpp"
#include "entgraph/io/npy.hpp"
#include "entgraph/transforms.hpp"
#include "npy_input.hpp"

namespace entgraph::cli {
namespace {

constexpr const char* kUsage =
    "Usage: entgraph transform --fn NAME [--alpha A] [--k K] [--grad G.npy --grad-out GI.npy]\n"
    "                          [--device cpu|cuda] [--isa NAME] [--threads N] IN.npy OUT.npy\n"
    "\n"
    "Applies an attention transform to each row of IN.npy, a 2-D float32 or float64\n"
    "array of scores, and writes the weights to OUT.npy with the same shape and dtype.\n"
    "float32 runs the kernels of the active ISA; float64 runs the scalar float64\n"
    "reference.\n"
    "\n"
    "Options:\n"
    "  --fn NAME          %s (required)\n"
    "  --alpha A          entmax only, required there: alpha in [1, 1000]\n"
    "                     (1 is softmax, 1.5 entmax15, 2 sparsemax; larger is sparser)\n"
    "  --k K              topk only, required there: scores kept per row, K >= 1\n"
    "                     (ties with the K-th largest are kept too)\n"
    "  --grad G.npy       upstream gradient dL/dp, same shape as IN (float32 or\n"
    "                     float64, converted to IN's dtype); needs --grad-out\n"
    "  --grad-out GI.npy  where the backward writes dL/dz (IN's dtype)\n"
    "  --device D         cpu (default) or cuda: the GPU kernels, for float32 input\n"
    "                     (an error, saying why, where no GPU is usable)\n"
    "%s"
    "  -h, --help         show this help\n"
    "\n"
    "Example:\n"
    "  entgraph transform --fn entmax --alpha 1.25 data/sample_scores.npy p.npy\n";

// --device: where the transform runs (cpu unless given). The CUDA backend is
// registered at startup (main.cpp) where the tool is built with it.
Device device_option(const Args& args) {
  const auto name = args.get("device");
  if (!name) return Device::cpu;
  Device device = Device::cpu;
  try {
    device = parse_device(*name);
  } catch (const Error&) {
    throw args.error("--device: unknown device (got '" + *name + "', expected cpu or cuda)");
  }
#ifndef ENTGRAPH_HAVE_CUDA
  if (device == Device::cuda)
    throw Error("transform: --device cuda: this entgraph was built without the CUDA backend (no nvcc at build time)");
#endif
  return device;
}

// float32 runs on `device`; float64 only on the CPU (run_transform checks).
template <class T>
void forward(Device device, const Transform& t, ConstMatrix<T> scores, MatrixView<T> probs) {
  if constexpr (std::is_same_v<T, float>)
    transform_forward(device, t, scores, probs);
  else
    transform_forward<T>(t, scores, probs);
}

template <class T>
void backward(Device device, const Transform& t, ConstMatrix<T> probs, ConstMatrix<T> grad_probs,
              MatrixView<T> grad_scores) {
  if constexpr (std::is_same_v<T, float>)
    transform_backward(device, t, probs, grad_probs, grad_scores);
  else
    transform_backward<T>(t, probs, grad_probs, grad_scores);
}

// Library errors (NaN in the scores, ...) get the file they came from.
template <class F>
void with_context(const std::string& path, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    throw Error("transform: " + path + ": " + e.what(), e.code());
  }
}

template <class T>
void run(Device device, const Transform& t, const NpyArray& in, const std::string& in_path, const NpyArray* grad,
         const std::string& grad_path, const std::string& out_path, const std::string& grad_out_path) {
  const NpyMatrix<T> scores = in.to_matrix<T>();
  NpyMatrix<T> probs{scores.rows, scores.cols, std::vector<T>(scores.data.size())};
  with_context(in_path, [&] { forward<T>(device, t, scores.view(), probs.view()); });
  if (grad == nullptr) {
    write_npy(out_path, probs.view());
    return;
  }
  // Compute everything before writing anything, so a failure leaves no
  // half-finished set of outputs.
  const NpyMatrix<T> grad_probs = grad->to_matrix<T>();
  NpyMatrix<T> grad_scores{scores.rows, scores.cols, std::vector<T>(scores.data.size())};
  with_context(grad_path, [&] { backward<T>(device, t, probs.view(), grad_probs.view(), grad_scores.view()); });
  // Both files or neither (a failing --grad-out leaves OUT as it was).
  write_files_bytes(
      "transform", {{out_path, encode_npy(NpyArray::from_matrix<T>(probs.view()))},
                    {grad_out_path, encode_npy(NpyArray::from_matrix<T>(grad_scores.view()))}});
}

}  // namespace

int run_transform(const std::vector<std::string>& argv) {
  const Args args(
      "transform", argv,
      {{"fn", true}, {"alpha", true}, {"k", true}, {"grad", true}, {"grad-out", true}, {"device", true}, kIsaOption,
       kThreadsOption});
  if (args.help()) {
    std::printf(kUsage, transform_names(takes_scores_only, " or ", true).c_str(), kRuntimeOptionsHelp);
    return 0;
  }
  const Transform t = parse_transform_option(args);
  const Device device = device_option(args);
  const auto grad_path = args.get("grad");
  const auto grad_out_path = args.get("grad-out");
  if (grad_path.has_value() != grad_out_path.has_value())
    throw args.error(grad_path ? "--grad needs --grad-out GI.npy" : "--grad-out needs --grad G.npy");
  args.expect_positional(2, "IN.npy OUT.npy");
  if (grad_out_path && same_path(*grad_out_path, args.positional()[1]))
    throw args.error("--grad-out names OUT.npy itself (" + *grad_out_path + "); give another file");
  apply_runtime_options(args);

  const std::string& in_path = args.positional()[0];
  const std::string& out_path = args.positional()[1];
  const NpyArray in = read_score_matrix("transform", in_path);
  NpyArray grad;
  if (grad_path) {
    grad = read_score_matrix("transform", *grad_path);
    if (grad.shape != in.shape)
      throw Error("transform: " + *grad_path + ": the gradient's shape " + npy_shape_string(grad.shape) +
                  " does not match the input's " + npy_shape_string(in.shape));
  }
  const NpyArray* g = grad_path ? &grad : nullptr;
  const std::string gp = grad_path.value_or(""), gi = grad_out_path.value_or("");
  if (in.dtype == NpyDtype::float64) {
    if (device != Device::cpu)
      throw Error(std::string("transform: --device ") + device_name(device) + ": " + in_path +
                  " is float64; the GPU kernels take float32");
    run<double>(device, t, in, in_path, g, gp, out_path, gi);
  } else {
    run<float>(device, t, in, in_path, g, gp, out_path, gi);
  }
  return 0;
}

}  // namespace entgraph::cli
