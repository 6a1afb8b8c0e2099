// entgraph: the interface a device backend implements.
//
// A backend library (native/cuda) fills a BackendKernels table and registers
// it for its Device; the core's Device-taking calls then run it. The core has
// validated every argument before it calls a kernel here, with the same
// checks and messages as for its own CPU kernels (shapes, strides, transform
// parameters, NaN and infinities), so a kernel never checks them again. What
// a kernel may still throw (as an entgraph::Error): its own failures (device
// memory, a launch) and what the device cannot do, named as such (CUDA: "d is
// not supported (got 48, expected 32, 64 or 128)").
//
// Kernels take host memory, except the `_on_device` entries, which take the
// device's own (Memory::device, entgraph/device.hpp: the core checks shapes
// and parameters, the kernel scans the values), and return when their
// outputs are written. A null entry means the device has no kernel for that
// op: the core says so
// ("attention_backward: device cuda has no kernel for this op; run it on
// cpu"). Adding a device: a Device value (device.hpp), a table here, its
// registration; see docs/ARCHITECTURE.md.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "entgraph/attention.hpp"
#include "entgraph/batched_attention.hpp"
#include "entgraph/block_graph.hpp"
#include "entgraph/device.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/graph_attention.hpp"
#include "entgraph/matrix_view.hpp"
#include "entgraph/transforms.hpp"
#include "entgraph/view_checks.hpp"

namespace entgraph {

// One head of a fitted Sparsefinder predictor, in memory: what a device needs
// to predict its graph (Predictor::predict(Device, ...)).
struct SparsefinderHead {
  enum class Method { distance, quantization, kmeans };
  Method method = Method::distance;
  ConstMatrix<float> wq, wk;     // d x r projections of queries and keys
  double threshold = 0.0;        // distance: edge iff ||q' - k'|| <= threshold
  ConstMatrix<float> edges;      // quantization: r x (bins - 1) ascending bin edges
  ConstMatrix<float> centroids;  // kmeans: clusters x r
  std::size_t top = 1;           // kmeans: nearest centroids shared
};

// One head of a fitted lowrank-threshold predictor (bits >= 2), in memory:
// what a device needs to predict its graph. The device projects q and k with
// wq and wk, rounds each projected row to integer codes of `bits` bits with
// its own step, and keeps the keys whose estimated score clears the
// estimated row's alpha-entmax threshold minus margin / (alpha - 1)
// (core/src/predictors/estimated_rows.hpp has the definition).
struct LowRankThresholdHead {
  ConstMatrix<float> wq, wk;  // d x r projections of queries (scale folded in) and keys
  int bits = 4;               // 2 ... 8
  double alpha = 1.5;         // > 1 (alpha = 1 keeps every allowed key: the core does not ask the device)
  double margin = 0.0;        // in units of 1 / (alpha - 1)
};

// An op of the table below, and what of its arguments decides whether a
// device runs it (device_supports, entgraph/device.hpp).
enum class BackendOp {
  transform_forward,
  transform_backward,
  attention_forward,
  attention_backward,
  batched_attention_forward,
  batched_attention_backward,
  block_sparse_attention_forward,
  block_sparse_attention_backward,
  graph_attention_forward,
  graph_attention_exact,
  compare_graphs,
  sparsefinder_pattern,
  lowrank_threshold_pattern,
};
struct OpArguments {
  Transform transform;          // the transform ops, attention
  std::size_t d = 0, dv = 0;    // attention: the head dimensions of q/k and of v
  Memory memory = Memory::host;  // where the arrays lie: asks for the _on_device kernel
};

struct BackendKernels {
  // Whether the device can run now; when not, writes the reason to *why.
  // Never throws.
  bool (*available)(std::string* why) = nullptr;
  // Whether the device runs `op` on arguments like these (its kernel is
  // non-null: the core asks that first); when not, writes what it lacks to
  // *why. Null: every op with a kernel, whatever its arguments. Never throws.
  // Tests and benchmarks ask it (device_supports) instead of keeping lists.
  bool (*supports)(BackendOp op, const OpArguments& arguments, std::string* why) = nullptr;

  void (*transform_forward)(const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs,
                            MaskView mask) = nullptr;
  void (*transform_backward)(const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                             MatrixView<float> grad_scores) = nullptr;
  // The same on the device's own memory (Memory::device): the core has checked
  // the shapes and parameters but not the values, which the kernel scans
  // (NaN, +inf: the CPU's messages) before it writes anything. Null: the
  // device takes host memory only for these ops.
  void (*transform_forward_on_device)(const Transform& t, ConstMatrix<float> scores, MatrixView<float> probs,
                                      MaskView mask) = nullptr;
  void (*transform_backward_on_device)(const Transform& t, ConstMatrix<float> probs, ConstMatrix<float> grad_probs,
                                       MatrixView<float> grad_scores) = nullptr;
  // Dense attention. Transforms the device has no kernel for (those with
  // extra inputs: options.span, options.upper) are the kernel's to refuse.
  void (*attention_forward)(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v, MatrixView<float> out,
                            const AttentionOptions<float>& options) = nullptr;
  // The same on the device's own memory (q, k, v, out and options.key_padding;
  // options.span and options.upper too, whose values the kernel checks if
  // it runs those transforms): the core has checked all but the values; the
  // kernel scans q, k and v and hands the scans to check_attention_values
  // before it writes.
  void (*attention_forward_on_device)(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                      MatrixView<float> out, const AttentionOptions<float>& options) = nullptr;
  void (*attention_backward)(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                             ConstMatrix<float> grad_out, MatrixView<float> grad_q, MatrixView<float> grad_k,
                             MatrixView<float> grad_v, const AttentionOptions<float>& options) = nullptr;
  // The same on the device's own memory; the kernel scans q, k, v and
  // grad_out and hands the scans to check_attention_backward_values.
  void (*attention_backward_on_device)(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                       ConstMatrix<float> grad_out, MatrixView<float> grad_q,
                                       MatrixView<float> grad_k, MatrixView<float> grad_v,
                                       const AttentionOptions<float>& options) = nullptr;
  // Batched attention (batched_attention.hpp) on host tensors of any dtype;
  // the kernel refuses, as such, what the device cannot run.
  void (*batched_attention_forward)(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                    BatchedTensor out, const BatchedAttentionOptions& options) = nullptr;
  // The same on the device's own memory, lengths included: the core has
  // checked all but the values; the kernel reads the lengths, scans the
  // heads and hands both to check_batched_attention_values before it writes.
  void (*batched_attention_forward_on_device)(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                              BatchedTensor out, const BatchedAttentionOptions& options) = nullptr;
  // Its gradients (batched_attention_backward) on host tensors.
  void (*batched_attention_backward)(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                     ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                     BatchedTensor grad_v, const BatchedAttentionOptions& options) = nullptr;
  // The same on the device's own memory: the kernel reads the lengths, scans
  // the heads of q, k, v and grad_out and hands them to
  // check_batched_attention_backward_values before it writes.
  void (*batched_attention_backward_on_device)(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                               ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                               BatchedTensor grad_k, BatchedTensor grad_v,
                                               const BatchedAttentionOptions& options) = nullptr;
  // Block-sparse attention (block_sparse_attention.hpp) on host tensors and
  // a host graph, the core's checks done (values and the graph's invariants
  // included); the kernel refuses, as such, what the device cannot run.
  void (*block_sparse_attention_forward)(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                         const BlockGraph& graph, BatchedTensor out,
                                         const BatchedAttentionOptions& options) = nullptr;
  void (*block_sparse_attention_backward)(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                          const BlockGraph& graph, ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                          BatchedTensor grad_k, BatchedTensor grad_v,
                                          const BatchedAttentionOptions& options) = nullptr;
  // Attention on the graph's edges only (GraphAttentionMode::fast).
  void (*graph_attention_forward)(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                  const Graph& graph, MatrixView<float> out,
                                  const AttentionOptions<float>& options) = nullptr;
  // The same on the device's own memory (q, k, v, out, key_padding; the
  // graph is host memory): the kernel scans q, k and v and hands the scans
  // to check_graph_attention_values before it writes.
  void (*graph_attention_forward_on_device)(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                            const Graph& graph, MatrixView<float> out,
                                            const AttentionOptions<float>& options) = nullptr;
  // Exact mode (GraphAttentionMode::exact) on host memory: out equals dense
  // attention, the graph only a first guess. The core has checked the
  // arguments (the transform has a threshold); the kernel refuses, as such,
  // transforms it has none for. report, if not null, is overwritten as the
  // CPU's exact mode writes it.
  void (*graph_attention_exact)(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v, const Graph& graph,
                                MatrixView<float> out, const AttentionOptions<float>& options,
                                GraphAttentionReport* report) = nullptr;
  // The same on the device's own memory (q, k, v, out, key_padding; the
  // graph is host memory): the kernel scans q, k and v and hands the scans
  // to check_graph_attention_values before it writes.
  void (*graph_attention_exact_on_device)(ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                          const Graph& graph, MatrixView<float> out,
                                          const AttentionOptions<float>& options,
                                          GraphAttentionReport* report) = nullptr;
  GraphMetrics (*compare_graphs)(const Graph& predicted, const Graph& gold, bool causal) = nullptr;
  // A Sparsefinder head's graph before the union with extra_window /
  // extra_global edges: q is n x d, k is m x d.
  Graph (*sparsefinder_pattern)(const SparsefinderHead& head, ConstMatrix<float> q, ConstMatrix<float> k,
                                bool causal) = nullptr;
  // The same with q and k in the device's own memory (the head's parameters
  // and the graph are host memory).
  Graph (*sparsefinder_pattern_on_device)(const SparsefinderHead& head, ConstMatrix<float> q, ConstMatrix<float> k,
                                          bool causal) = nullptr;
  // A lowrank-threshold head's graph, likewise (q and k host memory, or the
  // device's own for the _on_device kernel). The kernel checks the values
  // (a NaN or infinity has no code) with the CPU's message.
  Graph (*lowrank_threshold_pattern)(const LowRankThresholdHead& head, ConstMatrix<float> q, ConstMatrix<float> k,
                                     bool causal) = nullptr;
  Graph (*lowrank_threshold_pattern_on_device)(const LowRankThresholdHead& head, ConstMatrix<float> q,
                                               ConstMatrix<float> k, bool causal) = nullptr;
};

// For a backend's own entry points on device memory, which the core's op
// layer never sees: the core's check of a transform's parameters (alpha in
// [1, kMaxEntmaxAlpha], k >= 1), with its message naming `op` and the
// argument `name`. Shapes: entgraph/view_checks.hpp.
void check_transform_parameters(const Transform& t, const char* op, const std::string& name);
// The same for an attention scale (finite; 0 stands for 1/sqrt(d)), named
// `name` ("options.scale"); every attention op of the core checks it so.
void check_attention_scale(double scale, const char* op, const std::string& name);

// What a scan of one head's q, k or v finds, over the values attention
// sees (16-bit entries widened to float32 exactly) in its valid rows (dense
// attention: all; batched attention: the first query_lengths[b] rows of q's
// heads, the first key_lengths[b] of k's and v's, lengths clamped to
// [0, rows]; a head without rows finds nothing). The device's kernel
// computes it on its own memory; the core decides from it.
struct HeadScan {
  bool bad = false;                      // an entry is NaN or +-inf
  std::size_t bad_row = 0, bad_col = 0;  // the first such entry, row-major
  float bad_value = 0.0f;                // its value
  // When no entry is bad:
  float largest = 0.0f;                            // the largest |entry|
  std::size_t largest_row = 0, largest_col = 0;    // its first position, row-major
  // The largest row norm and its first row, each norm in double as
  // big * sqrt(sum over the row in order of (x / big)^2), big the row's
  // largest |entry| (0 for a zero row), no fused multiply-adds.
  double norm = 0.0;
  std::size_t norm_row = 0;
};

// For a backend's batched_attention_forward_on_device: the value checks of
// batched attention (lengths in range, NaN and inf, scores and outputs that
// may overflow float32), decided from `options` with its lengths copied to
// host memory and from `scans`, one per head in the order q's (b, h), k's
// (b, g), v's (b, g), b major. Throws the CPU path's entgraph::Error for the
// first failure (the tensors' data is never read), or one naming `scans`
// when it has the wrong size.
void check_batched_attention_values(const char* op, ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                    const BatchedAttentionOptions& options, const std::vector<HeadScan>& scans);
// The same for batched_attention_backward_on_device: `scans` as above, then
// one per head of grad_out ((b, h), b major, over its first query_lengths[b]
// rows).
void check_batched_attention_backward_values(const char* op, ConstBatchedTensor q, ConstBatchedTensor k,
                                             ConstBatchedTensor v, ConstBatchedTensor grad_out,
                                             const BatchedAttentionOptions& options,
                                             const std::vector<HeadScan>& scans);

// The same for dense attention_forward_on_device: NaN and inf in q, k, v,
// scores and outputs that may overflow float, decided from the scans of q,
// k and v (options.scale is read; no data is). The CPU's messages.
void check_attention_values(const char* op, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                            const AttentionOptions<float>& options, const HeadScan& q_scan, const HeadScan& k_scan,
                            const HeadScan& v_scan);

// The same for attention_backward_on_device: the forward's checks, then
// grad_out's scan (finite).
void check_attention_backward_values(const char* op, ConstMatrix<float> q, ConstMatrix<float> k,
                                     ConstMatrix<float> v, const AttentionOptions<float>& options,
                                     const HeadScan& q_scan, const HeadScan& k_scan, const HeadScan& v_scan,
                                     const HeadScan& grad_out_scan);

// The same for graph_attention_forward_on_device (graph attention's scale
// name and its larger score headroom).
void check_graph_attention_values(const char* op, ConstMatrix<float> q, ConstMatrix<float> k, ConstMatrix<float> v,
                                  const AttentionOptions<float>& options, const HeadScan& q_scan,
                                  const HeadScan& k_scan, const HeadScan& v_scan);

// Makes `kernels` the table of `device` (replacing any earlier one). Throws
// entgraph::Error for Device::cpu, whose kernels are the core's own.
// Thread-safe; registering while another thread runs an op on that device is
// not.
void register_backend(Device device, const BackendKernels& kernels);

}  // namespace entgraph
