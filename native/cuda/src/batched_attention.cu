// Batched attention, the host side (see entgraph/cuda/batched_attention.hpp
// for the contract, batched_attention_kernel.cuh and
// batched_attention_backward_kernel.cuh for the kernels): checks before
// anything is launched, the workspace (entmax candidate slots, the
// backward's row states), the launch of the instance for the dtype and head
// dimension, the float32 path through the fused kernel head by head, and the
// backend's host-memory kernels.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention_common.cuh"
#include "backend_kernels.hpp"
#include "batched_attention_traits.cuh"
#include "head_scan.hpp"
#include "checks.cuh"
#include "csr_rows.cuh"
#include "entgraph/backend.hpp"
#include "entgraph/batched_attention.hpp"
#include "entgraph/block_graph.hpp"
#include "entgraph/block_sparse_attention.hpp"
#include "entgraph/cuda/attention.hpp"
#include "entgraph/cuda/batched_attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/cuda/device_block_graph.hpp"
#include "mma_ptx.cuh"

namespace entgraph::cuda {
namespace {

using detail::Weighting;
using detail::batched::BatchedParams;
using detail::batched::kBlockM;
using detail::batched::kBlockN;

constexpr const char* kOp = "cuda::batched_attention_forward";
constexpr const char* kWorkspaceOp = "cuda::batched_attention_workspace_bytes";
constexpr std::size_t kMaxGrid = 65535;  // blocks along the grid's y (heads) and z (sequences)
constexpr std::size_t kFlagAlign = 256;  // the candidate lists start this far into the workspace

bool sixteen_bit(DType t) { return t == DType::bfloat16 || t == DType::float16; }

std::string num(std::size_t x) { return std::to_string(x); }

// Calls f(E{}, integral_constant<int, D>{}) for a supported 16-bit dtype and
// head dimension (checked by the caller).
template <class F>
void with_kernel(DType dtype, std::size_t d, F&& f) {
  const auto dims = [&](auto e) {
    if (d == 64)
      f(e, std::integral_constant<int, 64>{});
    else
      f(e, std::integral_constant<int, 128>{});
  };
  if (dtype == DType::bfloat16)
    dims(detail::mma::Bfloat16{});
  else
    dims(detail::mma::Float16{});
}

// What the device cannot run, from the shapes alone.
void check_supported(DType dtype, std::size_t batch, std::size_t heads, std::size_t n, std::size_t m, std::size_t d,
                     std::size_t dv, const char* op) {
  if (sixteen_bit(dtype)) {
    if (d != 64 && d != 128)
      detail::argument_error(op, "q.cols (d) is not supported for " + std::string(dtype_name(dtype)) + " (got " +
                                     num(d) + ", expected 64 or 128)");
    if (dv != d)
      detail::argument_error(op, "v.cols (dv) must equal d for " + std::string(dtype_name(dtype)) + " (got " + num(dv) +
                                     ", expected " + num(d) + ")");
  } else {
    for (const auto& [name, x] : {std::pair<const char*, std::size_t>{"q.cols (d)", d}, {"v.cols (dv)", dv}})
      if (!detail::supported_head_dim(x))
        detail::argument_error(
            op, std::string(name) + " is not supported for float32 (got " + num(x) + ", expected 32, 64 or 128)");
  }
  constexpr std::size_t kMaxRows = static_cast<std::size_t>(INT_MAX) - kBlockM;
  if (n > kMaxRows || m > kMaxRows)
    detail::argument_error(
        op, "n or m is too large (got " + num(n) + " x " + num(m) + ", expected at most " + num(kMaxRows) + ")");
  if (batch > kMaxGrid || heads > kMaxGrid)
    detail::argument_error(op, "batch or q.heads is too large (got " + num(batch) + " x " + num(heads) +
                                   ", expected at most " + num(kMaxGrid) + " each: one grid dimension each)");
}

// The transform as the batched kernels run it, for m keys (detail::for_keys).
Weighting batched_weighting(const BatchedAttentionOptions& options, std::size_t d, std::size_t m, const char* op) {
  return detail::for_keys(detail::make_weighting(options.transform, options.scale, d, op, "options.transform"), m);
}

std::size_t capacity(std::size_t m, const BatchedAttentionTuning& t) {
  return std::min(t.candidate_capacity == 0 ? detail::batched::kDefaultCapacity : t.candidate_capacity, m);
}

// The 16-bit entmax workspace: `slots` flags, then slots x kBlockM x cap floats.
struct SlotScratch {
  std::size_t slots = 0, cap = 0, flag_bytes = 0, bytes = 0;
};

SlotScratch slot_scratch(DType dtype, std::size_t d, std::size_t batch, std::size_t heads, std::size_t n,
                         std::size_t cap, const char* op) {
  int resident = 1;
  with_kernel(dtype, d, [&](auto e, auto dc) {
    resident = detail::batched::resident_blocks<decltype(e), decltype(dc)::value, false>();
  });
  SlotScratch s;
  const std::size_t blocks = batch * heads * ((n + kBlockM - 1) / kBlockM);
  s.slots = std::min(blocks, static_cast<std::size_t>(resident));
  s.cap = cap;
  s.flag_bytes = (s.slots * sizeof(int) + kFlagAlign - 1) / kFlagAlign * kFlagAlign;
  const std::size_t per_slot = static_cast<std::size_t>(kBlockM) * sizeof(float);
  if (cap > (SIZE_MAX - s.flag_bytes) / per_slot / s.slots)
    detail::argument_error(op, "the candidate capacity is too large (got " + num(cap) + ")");
  s.bytes = s.flag_bytes + s.slots * per_slot * cap;
  return s;
}

// Bytes of scratch for these shapes (see the header).
std::size_t workspace_for(DType dtype, std::size_t batch, std::size_t heads, std::size_t n, std::size_t m,
                          std::size_t d, const Weighting& w, const BatchedAttentionTuning& tuning, const char* op) {
  if (w.softmax) return 0;
  const std::size_t cap = capacity(m, tuning);
  if (!sixteen_bit(dtype)) {
    if (cap > SIZE_MAX / sizeof(float) / n)
      detail::argument_error(op, "the candidate capacity is too large (got " + num(cap) + ")");
    return n * cap * sizeof(float);  // one head at a time
  }
  return slot_scratch(dtype, d, batch, heads, n, cap, op).bytes;
}

// Strides of the dimensions that have more than one entry must be multiples
// of `multiple` elements.
void check_strides(const ConstBatchedTensor& t, const char* name, std::size_t multiple, const char* why,
                   const char* op = kOp) {
  const struct {
    std::size_t size, stride;
    const char* field;
  } dims[] = {{t.batch, t.batch_stride, "batch_stride"},
              {t.heads, t.head_stride, "head_stride"},
              {t.rows, t.row_stride, "row_stride"}};
  for (const auto& dim : dims)
    if (dim.size > 1 && dim.stride % multiple != 0)
      detail::argument_error(op, std::string(name) + "." + dim.field + " is not a multiple of " + num(multiple) +
                                      " elements (got " + num(dim.stride) + ", expected a multiple of " +
                                      num(multiple) + ": " + why + ")");
}

// The tensors' data (named) and the options' lengths must be the GPU's;
// the tensors 16-byte aligned.
void check_pointers(const char* op, std::initializer_list<std::pair<const char*, const void*>> tensors,
                    const BatchedAttentionOptions& options) {
  for (const auto& [name, data] : tensors) detail::check_device_pointer(data, op, name);
  if (options.query_lengths) detail::check_device_pointer(options.query_lengths, op, "options.query_lengths", false);
  if (options.key_lengths) detail::check_device_pointer(options.key_lengths, op, "options.key_lengths", false);
}

// 16-bit inputs only (tensor cores); float32 runs on the CPU.
void check_sixteen_bit(const ConstBatchedTensor& q, const char* op, const char* what) {
  if (!sixteen_bit(q.dtype))
    detail::argument_error(op, "q.dtype is not supported (got " + std::string(dtype_name(q.dtype)) +
                                   ", expected bfloat16 or float16: " + what + " run on tensor cores; float32 runs "
                                   "on cpu)");
}

// The caller's workspace (checked to be large enough) or stream-ordered
// memory of `bytes`.
detail::AttentionScratch scratch(void* workspace, std::size_t workspace_bytes, std::size_t bytes, cudaStream_t stream) {
  if (workspace != nullptr && workspace_bytes < bytes)
    detail::argument_error(
        kOp, "workspace_bytes is too small (got " + num(workspace_bytes) + ", expected at least " + num(bytes) + ")");
  return detail::AttentionScratch(workspace, workspace_bytes, bytes, stream, kOp,
                                  "cuda::batched_attention_forward (workspace)");
}

// A tensor's strides in elements: sequence, head, row.
void strides_of(const ConstBatchedTensor& t, std::int64_t& batch, std::int64_t& head, std::int64_t& row) {
  batch = static_cast<std::int64_t>(t.batch_stride);
  head = static_cast<std::int64_t>(t.head_stride);
  row = static_cast<std::int64_t>(t.row_stride);
}

template <class T>
const T* at(const void* data, std::size_t offset) {
  return static_cast<const T*>(data) + offset;
}

// float32: the fused kernel of attention.hpp on each (sequence, head), with
// the lengths already on the host (null: full), and zeros for the rows
// past each sequence's queries (all rows when it has no key).
void run_float32(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                 const BatchedAttentionOptions& options, const std::int32_t* query_lengths,
                 const std::int32_t* key_lengths, const BatchedAttentionTuning& tuning, const Weighting& w,
                 void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  const std::size_t n = q.rows, m = k.rows, d = q.cols, dv = v.cols;
  const std::size_t bytes = workspace_for(DType::float32, q.batch, q.heads, n, m, d, w, tuning, kOp);
  const detail::AttentionScratch s = scratch(w.softmax ? nullptr : workspace, workspace_bytes, bytes, stream);
  FusedAttentionOptions fo;
  fo.causal = options.causal;
  fo.candidate_capacity = tuning.candidate_capacity;
  fo.workspace = s.data();
  fo.workspace_bytes = bytes;
  const std::size_t group = q.heads / k.heads;
  for (std::size_t b = 0; b < q.batch; ++b) {
    const auto clamp = [](const std::int32_t* lengths, std::size_t b, std::size_t full) {
      return lengths ? std::min(static_cast<std::size_t>(std::max(lengths[b], 0)), full) : full;
    };
    const std::size_t n_b = clamp(query_lengths, b, n), m_b = clamp(key_lengths, b, m);
    for (std::size_t h = 0; h < q.heads; ++h) {
      const std::size_t g = h / group;
      float* o = static_cast<float*>(out.data) + b * out.batch_stride + h * out.head_stride;
      std::size_t zero_from = 0;
      if (n_b > 0 && m_b > 0) {
        detail::launch_fused_attention(at<float>(q.data, b * q.batch_stride + h * q.head_stride),
                                       at<float>(k.data, b * k.batch_stride + g * k.head_stride),
                                       at<float>(v.data, b * v.batch_stride + g * v.head_stride), o, n_b, m_b, d, dv, w,
                                       fo, stream);
        zero_from = n_b;
      }
      if (zero_from < n)
        check(cudaMemsetAsync(o + zero_from * dv, 0, (n - zero_from) * dv * sizeof(float), stream),
              "cuda::batched_attention_forward (zero rows)");
    }
  }
}

// Host copies of the options' device lengths (each empty where null); waits
// for `stream` when there are any.
struct HostLengths {
  std::vector<std::int32_t> query, key;
  const std::int32_t* query_data() const { return query.empty() ? nullptr : query.data(); }
  const std::int32_t* key_data() const { return key.empty() ? nullptr : key.data(); }
};

HostLengths read_lengths(const BatchedAttentionOptions& options, std::size_t batch, cudaStream_t stream) {
  HostLengths h;
  const auto fetch = [&](const std::int32_t* lengths, std::vector<std::int32_t>& to) {
    if (!lengths) return;
    to.resize(batch);
    check(cudaMemcpyAsync(to.data(), lengths, batch * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream),
          "cuda::batched_attention_forward (reading the lengths)");
  };
  fetch(options.query_lengths, h.query);
  fetch(options.key_lengths, h.key);
  if (options.query_lengths || options.key_lengths) synchronize(stream);
  return h;
}

void run_float32_device_lengths(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                                const BatchedAttentionOptions& options, const BatchedAttentionTuning& tuning,
                                const Weighting& w, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  const HostLengths lengths = read_lengths(options, q.batch, stream);
  run_float32(q, k, v, out, options, lengths.query_data(), lengths.key_data(), tuning, w, workspace, workspace_bytes,
              stream);
}

// A block graph of 64 x 64 blocks in device memory, in the kernels' layout
// (BatchedParams::block_*, BackwardParams::key_offsets): its block rows and
// their transpose (per graph and key block, the query blocks that list it).
struct DeviceBlocks {
  DeviceArray<std::int32_t> offsets, cols, key_offsets, query_rows;
  int batch = 1, heads = 1;
};

// What the kernels take of a block graph (host or device): their tiles'
// block sizes, and int32 block indices.
template <class Blocks>
void check_kernel_blocks(const Blocks& g, const char* op) {
  if (g.query_block != static_cast<std::size_t>(kBlockM) || g.key_block != static_cast<std::size_t>(kBlockN))
    detail::argument_error(op, "graph.query_block and graph.key_block are not supported (got " + num(g.query_block) +
                                   " and " + num(g.key_block) + ", expected 64 and 64: the kernels' tiles)");
  if (g.kept() > static_cast<std::size_t>(INT_MAX))
    detail::argument_error(op, "graph has too many blocks (got " + num(g.kept()) + ", expected at most " +
                                   num(static_cast<std::size_t>(INT_MAX)) + ")");
}

DeviceBlocks device_blocks(const BlockGraph& g, const char* op) {
  check_kernel_blocks(g, op);
  const std::size_t graphs = g.batch * g.heads, qb = g.query_blocks(), kb = g.key_blocks();
  std::vector<std::int32_t> offsets(g.offsets.begin(), g.offsets.end()), cols(g.blocks.begin(), g.blocks.end());
  std::vector<std::int32_t> key_offsets(graphs * kb + 1, 0), query_rows(g.kept());
  for (std::size_t x = 0; x < graphs; ++x)  // count, then place in ascending query block order
    for (std::size_t i = 0; i < qb; ++i)
      for (const std::uint32_t* j = g.row_begin(x * qb + i); j != g.row_end(x * qb + i); ++j)
        ++key_offsets[x * kb + *j + 1];
  for (std::size_t c = 0; c < graphs * kb; ++c) key_offsets[c + 1] += key_offsets[c];
  std::vector<std::int32_t> fill(key_offsets.begin(), key_offsets.end() - 1);
  for (std::size_t x = 0; x < graphs; ++x)
    for (std::size_t i = 0; i < qb; ++i)
      for (const std::uint32_t* j = g.row_begin(x * qb + i); j != g.row_end(x * qb + i); ++j)
        query_rows[static_cast<std::size_t>(fill[x * kb + *j]++)] = static_cast<std::int32_t>(i);
  if (cols.empty()) cols.push_back(0);  // a graph without blocks: arrays of one unread entry, never null
  if (query_rows.empty()) query_rows.push_back(0);

  const char* what = "block_sparse_attention: uploading the graph";
  DeviceBlocks d;
  d.offsets = DeviceArray<std::int32_t>(offsets.data(), offsets.size(), what);
  d.cols = DeviceArray<std::int32_t>(cols.data(), cols.size(), what);
  d.key_offsets = DeviceArray<std::int32_t>(key_offsets.data(), key_offsets.size(), what);
  d.query_rows = DeviceArray<std::int32_t>(query_rows.data(), query_rows.size(), what);
  d.batch = static_cast<int>(g.batch);
  d.heads = static_cast<int>(g.heads);
  return d;
}

// The transpose of a device block graph, one thread per (graph, key block)
// column c: how many block rows list it (counts[c], kFill false) or, from
// key_offsets[c], their query blocks in ascending order. A binary search per
// block row: deterministic, without atomics.
template <bool kFill>
__global__ void transpose_blocks_kernel(const std::size_t* offsets, const std::uint32_t* blocks, std::size_t graphs,
                                        std::size_t qb, std::size_t kb, std::size_t* counts,
                                        const std::size_t* key_offsets, std::int32_t* query_rows) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t c = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < graphs * kb; c += stride) {
    const std::size_t x = c / kb;
    const std::uint32_t j = static_cast<std::uint32_t>(c % kb);
    std::size_t found = 0, pos = kFill ? key_offsets[c] : 0;
    for (std::size_t i = 0; i < qb; ++i) {
      const std::size_t r = x * qb + i, end = offsets[r + 1];
      std::size_t lo = offsets[r], hi = end;
      while (lo < hi) {
        const std::size_t mid = lo + (hi - lo) / 2;
        if (blocks[mid] < j)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo < end && blocks[lo] == j) {
        if (kFill)
          query_rows[pos++] = static_cast<std::int32_t>(i);
        else
          ++found;
      }
    }
    if (!kFill) counts[c] = found;
  }
}

// out[i] = in[i] as int32 (the values fit: checked by the caller).
template <class T>
__global__ void narrow_kernel(const T* in, std::size_t count, std::int32_t* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    out[i] = static_cast<std::int32_t>(in[i]);
}

template <class T>
DeviceArray<std::int32_t> narrowed(const T* in, std::size_t count, cudaStream_t stream, const char* what) {
  DeviceArray<std::int32_t> out(count > 0 ? count : 1, what);  // never empty: the kernels' arrays are never null
  if (count > 0) {
    launch(narrow_kernel<T>, detail::grid_for(count, 256), 256, 0, stream, in, count, out.data());
    check(cudaGetLastError(), what);
  }
  return out;
}

// The same layout from a block graph in device memory, built on `stream`.
DeviceBlocks device_blocks(const DeviceBlockGraph& g, const char* op, cudaStream_t stream) {
  check_kernel_blocks(g, op);
  const std::size_t graphs = g.batch * g.heads, qb = g.query_blocks(), kb = g.key_blocks(), columns = graphs * kb;
  if (g.offsets.size() != graphs * qb + 1)
    detail::argument_error(op, "graph.offsets has " + num(g.offsets.size()) +
                                   " entries, expected batch x heads x query blocks + 1 = " + num(graphs * qb + 1));
  const char* what = "block_sparse_attention: the graph's layout";
  DeviceBlocks d;
  d.offsets = narrowed(g.offsets.data(), g.offsets.size(), stream, what);
  d.cols = narrowed(g.blocks.data(), g.kept(), stream, what);
  DeviceArray<std::size_t> key_offsets = detail::zeroed_counts(columns, stream, what);
  d.query_rows = DeviceArray<std::int32_t>(g.kept() > 0 ? g.kept() : 1, what);
  if (columns > 0) {
    const unsigned grid = detail::grid_for(columns, 256);
    launch(transpose_blocks_kernel<false>, grid, 256, 0, stream, g.offsets.data(), g.blocks.data(), graphs, qb, kb,
           key_offsets.data(), nullptr, nullptr);
    check(cudaGetLastError(), what);
    detail::exclusive_scan(key_offsets.data(), columns + 1, stream, what);
    launch(transpose_blocks_kernel<true>, grid, 256, 0, stream, g.offsets.data(), g.blocks.data(), graphs, qb, kb,
           nullptr, key_offsets.data(), d.query_rows.data());
    check(cudaGetLastError(), what);
  }
  d.key_offsets = narrowed(key_offsets.data(), columns + 1, stream, what);
  // key_offsets (size_t) is freed at return: the narrowing must be done with it.
  check(cudaStreamSynchronize(stream), what);
  d.batch = static_cast<int>(g.batch);
  d.heads = static_cast<int>(g.heads);
  return d;
}

// The kernel's view of q, k, v, out (out.data may be null) and the options.
BatchedParams batched_params(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                             const BatchedAttentionOptions& options, const Weighting& w,
                             const DeviceBlocks* blocks = nullptr) {
  BatchedParams p{};
  p.q = static_cast<const std::uint16_t*>(q.data);
  p.k = static_cast<const std::uint16_t*>(k.data);
  p.v = static_cast<const std::uint16_t*>(v.data);
  p.out = out.data;
  strides_of(q, p.q_batch, p.q_head, p.q_row);
  strides_of(k, p.k_batch, p.k_head, p.k_row);
  strides_of(v, p.v_batch, p.v_head, p.v_row);
  strides_of(as_const(out), p.o_batch, p.o_head, p.o_row);
  p.group = static_cast<int>(q.heads / k.heads);
  p.n = static_cast<int>(q.rows);
  p.m = static_cast<int>(k.rows);
  p.query_lengths = options.query_lengths;
  p.key_lengths = options.key_lengths;
  p.causal = options.causal;
  p.out_float32 = out.dtype == DType::float32;
  p.w = w;
  if (blocks != nullptr) {
    p.block_offsets = blocks->offsets.data();
    p.block_cols = blocks->cols.data();
    p.block_batch = blocks->batch;
    p.block_heads = blocks->heads;
  }
  return p;
}

// stats: the backward's run (out.data null, each row's state written there);
// blocks: attention on those blocks only (null: every key).
void run_sixteen_bit(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                     const BatchedAttentionOptions& options, const BatchedAttentionTuning& tuning, const Weighting& w,
                     void* workspace, std::size_t workspace_bytes, cudaStream_t stream, float4* stats = nullptr,
                     const DeviceBlocks* blocks = nullptr) {
  const std::size_t n = q.rows, m = k.rows, d = q.cols;
  SlotScratch slots;
  if (!w.softmax) slots = slot_scratch(q.dtype, d, q.batch, q.heads, n, capacity(m, tuning), kOp);
  const detail::AttentionScratch s = scratch(w.softmax ? nullptr : workspace, workspace_bytes, slots.bytes, stream);

  BatchedParams p = batched_params(q, k, v, out, options, w, blocks);
  p.stats = stats;
  if (!w.softmax) {
    char* base = static_cast<char*>(static_cast<void*>(s.data()));
    p.slot_flags = reinterpret_cast<int*>(base);
    p.slots = static_cast<int>(slots.slots);
    p.cand = reinterpret_cast<float*>(base + slots.flag_bytes);
    p.cap = static_cast<int>(slots.cap);
    check(cudaMemsetAsync(p.slot_flags, 0, slots.flag_bytes, stream), "cuda::batched_attention_forward (slots)");
  }
  const auto tiles = static_cast<unsigned>((n + kBlockM - 1) / kBlockM);
  with_kernel(q.dtype, d, [&](auto e, auto dc) {
    using E = decltype(e);
    constexpr int D = decltype(dc)::value;
    const auto heads = static_cast<unsigned>(q.heads), batch = static_cast<unsigned>(q.batch);
    if (w.softmax)
      detail::batched::launch_batched<E, D, true>(p, tiles, heads, batch, stream);
    else
      detail::batched::launch_batched<E, D, false>(p, tiles, heads, batch, stream);
  });
}

// What the GPU adds to the contract's checks: what it cannot run, device
// pointers, alignment. Returns the resolved transform.
Weighting check_device_call(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                            const BatchedAttentionOptions& options, const char* op = kOp) {
  const Weighting w = batched_weighting(options, q.cols, k.rows, op);
  check_supported(q.dtype, q.batch, q.heads, q.rows, k.rows, q.cols, v.cols, op);
  check_pointers(op, {{"q.data", q.data}, {"k.data", k.data}, {"v.data", v.data}, {"out.data", out.data}}, options);
  if (sixteen_bit(q.dtype)) {
    const char* why = "rows are copied 16 bytes at a time";
    check_strides(q, "q", 8, why, op);
    check_strides(k, "k", 8, why, op);
    check_strides(v, "v", 8, why, op);
    check_strides(as_const(out), "out", 2, "outputs are written two at a time", op);
  } else {
    for (const auto& [name, t] :
         {std::pair<const char*, ConstBatchedTensor>{"q", q}, {"k", k}, {"v", v}, {"out", as_const(out)}}) {
      if (t.rows > 1 && t.row_stride != t.cols)
        detail::argument_error(kOp, std::string(name) + ".row_stride is not its cols (got " + num(t.row_stride) +
                                        ", expected " + num(t.cols) +
                                        ": float32 runs the fused kernel, which reads contiguous rows)");
      const ConstBatchedTensor heads_only{t.data, t.dtype,        t.batch,       t.heads,     1,
                                          t.cols, t.batch_stride, t.head_stride, t.row_stride};
      check_strides(heads_only, name, 4, "each head starts 16-byte aligned");
    }
  }
  return w;
}

// Every check of the device entry, in order; returns the resolved transform.
Weighting check_call(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                     const BatchedAttentionOptions& options) {
  // The contract's checks (shapes, strides, overlaps, dtypes, transform), values aside.
  check_batched_attention(q, k, v, out, options, kOp, false);
  return check_device_call(q, k, v, out, options);
}

}  // namespace

std::size_t batched_attention_workspace_bytes(ConstBatchedTensor q, ConstBatchedTensor k,
                                              const BatchedAttentionOptions& options,
                                              const BatchedAttentionTuning& tuning) {
  const Weighting w = batched_weighting(options, q.cols, k.rows, kWorkspaceOp);
  check_supported(q.dtype, q.batch, q.heads, q.rows, k.rows, q.cols, q.cols, kWorkspaceOp);
  if (q.batch == 0 || q.heads == 0 || q.rows == 0 || k.rows == 0)
    detail::argument_error(kWorkspaceOp, "a size is 0 (got batch " + num(q.batch) + ", heads " + num(q.heads) + ", n " +
                                             num(q.rows) + ", m " + num(k.rows) + ", expected each >= 1)");
  return workspace_for(q.dtype, q.batch, q.heads, q.rows, k.rows, q.cols, w, tuning, kWorkspaceOp);
}

std::size_t batched_attention_workspace_bytes(ConstBatchedTensor q, ConstBatchedTensor k,
                                              const BatchedAttentionOptions& options) {
  return batched_attention_workspace_bytes(q, k, options, BatchedAttentionTuning{});
}

void batched_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                               const BatchedAttentionOptions& options, const BatchedAttentionTuning& tuning,
                               void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  const Weighting w = check_call(q, k, v, out, options);
  if (sixteen_bit(q.dtype))
    run_sixteen_bit(q, k, v, out, options, tuning, w, workspace, workspace_bytes, stream);
  else
    run_float32_device_lengths(q, k, v, out, options, tuning, w, workspace, workspace_bytes, stream);
}

void batched_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                               const BatchedAttentionOptions& options, void* workspace, std::size_t workspace_bytes,
                               cudaStream_t stream) {
  batched_attention_forward(q, k, v, out, options, BatchedAttentionTuning{}, workspace, workspace_bytes, stream);
}

namespace {

// A contiguous [B, H, rows, cols] device copy of a host view.
DeviceArray<unsigned char> upload_tensor(const ConstBatchedTensor& t, const char* what) {
  const std::size_t size = dtype_size(t.dtype), width = t.cols * size;
  DeviceArray<unsigned char> d(t.batch * t.heads * t.rows * width, what);
  for (std::size_t b = 0; b < t.batch; ++b)
    for (std::size_t h = 0; h < t.heads; ++h)
      check(cudaMemcpy2D(d.data() + (b * t.heads + h) * t.rows * width, width,
                         static_cast<const unsigned char*>(t.data) + (b * t.batch_stride + h * t.head_stride) * size,
                         t.rows > 1 ? t.row_stride * size : width, width, t.rows, cudaMemcpyHostToDevice),
            what);
  return d;
}

ConstBatchedTensor contiguous(const ConstBatchedTensor& t, const void* data) {
  return ConstBatchedTensor::bhnd(data, t.dtype, t.batch, t.heads, t.rows, t.cols);
}

// Device memory for a contiguous copy of the result `like`, and its view.
struct DeviceResult {
  DeviceArray<unsigned char> memory;
  BatchedTensor view;
};
DeviceResult device_result(const BatchedTensor& like, const char* what) {
  DeviceResult r{DeviceArray<unsigned char>(like.batch * like.heads * like.rows * like.cols * dtype_size(like.dtype),
                                            what),
                 {}};
  const ConstBatchedTensor c = contiguous(as_const(like), r.memory.data());
  r.view = BatchedTensor{r.memory.data(), c.dtype,        c.batch,       c.heads,     c.rows,
                         c.cols,          c.batch_stride, c.head_stride, c.row_stride};
  return r;
}

// The contiguous device copy back into the host view `to`.
void download(const BatchedTensor& to, const DeviceResult& from, const char* what) {
  const std::size_t size = dtype_size(to.dtype), width = to.cols * size;
  for (std::size_t b = 0; b < to.batch; ++b)
    for (std::size_t h = 0; h < to.heads; ++h)
      check(cudaMemcpy2D(static_cast<unsigned char*>(to.data) + (b * to.batch_stride + h * to.head_stride) * size,
                         to.rows > 1 ? to.row_stride * size : width,
                         from.memory.data() + (b * to.heads + h) * to.rows * width, width, width, to.rows,
                         cudaMemcpyDeviceToHost),
            what);
}

// Device copies of the options' host lengths; `on_device` points at them.
struct DeviceLengths {
  DeviceArray<std::int32_t> query, key;
};
DeviceLengths upload_lengths(const BatchedAttentionOptions& options, std::size_t batch,
                             BatchedAttentionOptions& on_device, const char* op) {
  DeviceLengths l;
  on_device = options;
  if (options.query_lengths) {
    l.query = DeviceArray<std::int32_t>(options.query_lengths, batch, (std::string(op) + ": query_lengths").c_str());
    on_device.query_lengths = l.query.data();
  }
  if (options.key_lengths) {
    l.key = DeviceArray<std::int32_t>(options.key_lengths, batch, (std::string(op) + ": key_lengths").c_str());
    on_device.key_lengths = l.key.data();
  }
  return l;
}

// The forward on host tensors (checked; on `blocks` when given, 16-bit
// only): copies in, the kernel, copies out; `op` names the call in CUDA
// errors.
void run_forward_from_host(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, BatchedTensor out,
                           const BatchedAttentionOptions& options, const Weighting& w, const DeviceBlocks* blocks,
                           const std::string& op) {
  const std::string uploading = op + ": uploading the inputs";
  const DeviceArray<unsigned char> dq = upload_tensor(q, uploading.c_str()), dk = upload_tensor(k, uploading.c_str()),
                                   dv = upload_tensor(v, uploading.c_str());
  const DeviceResult d_out = device_result(out, (op + ": out").c_str());
  // The core has validated everything (the copies are contiguous and
  // cudaMalloc-aligned): straight to the launch.
  const ConstBatchedTensor cq = contiguous(q, dq.data()), ck = contiguous(k, dk.data()), cv = contiguous(v, dv.data());
  if (sixteen_bit(q.dtype)) {
    BatchedAttentionOptions o;  // the kernel reads the lengths on the GPU
    const DeviceLengths lengths = upload_lengths(options, q.batch, o, op.c_str());
    run_sixteen_bit(cq, ck, cv, d_out.view, o, BatchedAttentionTuning{}, w, nullptr, 0, nullptr, nullptr, blocks);
    synchronize(nullptr);  // before the lengths' copies are freed
  } else {
    run_float32(cq, ck, cv, d_out.view, options, options.query_lengths, options.key_lengths, BatchedAttentionTuning{},
                w, nullptr, 0, nullptr);
    synchronize(nullptr);
  }
  download(out, d_out, (op + ": downloading out").c_str());
}

}  // namespace

// The backend's kernel: the core has validated the arguments (values
// included); what the GPU cannot run is refused before anything is copied.
void detail::host_batched_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                            BatchedTensor out, const BatchedAttentionOptions& options) {
  const Weighting w = batched_weighting(options, q.cols, k.rows, kOp);
  check_supported(q.dtype, q.batch, q.heads, q.rows, k.rows, q.cols, v.cols, kOp);
  run_forward_from_host(q, k, v, out, options, w, nullptr, "batched_attention_forward");
}

// The backend's kernel on device memory (Memory::device): the core has
// checked all but the values; the lengths are read and the heads scanned
// here, and the core's check_batched_attention_values decides on them with
// the CPU's messages before anything is launched.
void detail::device_batched_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                              BatchedTensor out, const BatchedAttentionOptions& options) {
  const Weighting w = check_device_call(q, k, v, out, options);
  const cudaStream_t stream = detail::current_stream();
  const HostLengths lengths = read_lengths(options, q.batch, stream);
  BatchedAttentionOptions on_host = options;
  on_host.query_lengths = lengths.query_data();
  on_host.key_lengths = lengths.key_data();
  check_batched_attention_values(
      "batched_attention_forward", q, k, v, on_host,
      detail::scan_batched_heads("batched_attention_forward", q, k, v, on_host.query_lengths, on_host.key_lengths,
                                 stream));
  const BatchedAttentionTuning tuning;
  if (sixteen_bit(q.dtype))
    run_sixteen_bit(q, k, v, out, options, tuning, w, nullptr, 0, stream);
  else
    run_float32(q, k, v, out, options, on_host.query_lengths, on_host.key_lengths, tuning, w, nullptr, 0, stream);
  detail::finish_on_device(stream);
}

namespace {

constexpr const char* kBackwardOp = "cuda::batched_attention_backward";

// What the GPU's backward adds to the contract's checks, from the shapes
// and dtypes alone: tensor cores only, grad_out in q's format. Returns the
// resolved transform.
Weighting check_backward_supported(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                   ConstBatchedTensor grad_out, const BatchedAttentionOptions& options,
                                   const char* op = kBackwardOp) {
  const Weighting w = batched_weighting(options, q.cols, k.rows, op);
  if (options.transform.tsallis_alpha() > 2.0)
    detail::argument_error(op, "options.transform is not supported by the gradients on cuda (got " +
                                   options.transform.name() +
                                   ", expected alpha <= 2: past it the slopes p^(2 - alpha) are unbounded and need the "
                                   "CPU's pivoted backward; run it on cpu)");
  check_sixteen_bit(q, op, "the gradients");
  if (grad_out.dtype != q.dtype)
    detail::argument_error(op, "grad_out.dtype is not q's (got " + std::string(dtype_name(grad_out.dtype)) +
                                   ", expected " + dtype_name(q.dtype) + ": the kernels read grad_out in q's format)");
  check_supported(q.dtype, q.batch, q.heads, q.rows, k.rows, q.cols, v.cols, op);
  return w;
}

// The gradients on device memory (checked): the forward's run for the row
// states, then the query and key kernels.
void run_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v, ConstBatchedTensor grad_out,
                  BatchedTensor grad_q, BatchedTensor grad_k, BatchedTensor grad_v,
                  const BatchedAttentionOptions& options, const Weighting& w, cudaStream_t stream,
                  const DeviceBlocks* blocks = nullptr) {
  const std::size_t rows = q.batch * q.heads * q.rows;
  const detail::AttentionScratch s(nullptr, 0, rows * (sizeof(float4) + sizeof(float)), stream, kBackwardOp,
                                   "cuda::batched_attention_backward (row states)");
  float4* stats = reinterpret_cast<float4*>(s.data());
  const BatchedTensor no_out{nullptr, q.dtype, q.batch, q.heads, q.rows, v.cols, 0, 0, 0};
  // Entmax's thresholds come from the forward; softmax's max and sum the
  // query kernel finds in a sweep of its own.
  if (!w.softmax)
    run_sixteen_bit(q, k, v, no_out, options, BatchedAttentionTuning{}, w, nullptr, 0, stream, stats, blocks);

  detail::batched::BackwardParams bp{};
  bp.f = batched_params(q, k, v, no_out, options, w, blocks);
  if (blocks != nullptr) {
    bp.key_offsets = blocks->key_offsets.data();
    bp.query_rows = blocks->query_rows.data();
  }
  bp.dout = static_cast<const std::uint16_t*>(grad_out.data);
  strides_of(grad_out, bp.do_batch, bp.do_head, bp.do_row);
  bp.dq = grad_q.data;
  bp.dk = grad_k.data;
  bp.dv = grad_v.data;
  bp.dq_float32 = grad_q.dtype == DType::float32;
  bp.dk_float32 = grad_k.dtype == DType::float32;
  bp.dv_float32 = grad_v.dtype == DType::float32;
  strides_of(as_const(grad_q), bp.dq_batch, bp.dq_head, bp.dq_row);
  strides_of(as_const(grad_k), bp.dk_batch, bp.dk_head, bp.dk_row);
  strides_of(as_const(grad_v), bp.dv_batch, bp.dv_head, bp.dv_row);
  bp.stats = stats;
  bp.delta = reinterpret_cast<float*>(stats + rows);
  bp.scale = static_cast<float>(w.scale);
  bp.q_heads = static_cast<int>(q.heads);
  bp.batch = static_cast<int>(q.batch);
  with_kernel(q.dtype, q.cols, [&](auto e, auto dc) {
    detail::batched::launch_batched_backward<decltype(e), decltype(dc)::value>(bp, stream);
  });
}

// check_backward_supported, then device pointers and alignment.
Weighting check_backward_device_call(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                     ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                     BatchedTensor grad_v, const BatchedAttentionOptions& options,
                                     const char* op = kBackwardOp) {
  const Weighting w = check_backward_supported(q, k, v, grad_out, options, op);
  check_pointers(op,
                 {{"q.data", q.data},
                  {"k.data", k.data},
                  {"v.data", v.data},
                  {"grad_out.data", grad_out.data},
                  {"grad_q.data", grad_q.data},
                  {"grad_k.data", grad_k.data},
                  {"grad_v.data", grad_v.data}},
                 options);
  const char* copied = "rows are copied 16 bytes at a time";
  const char* paired = "gradients are written two at a time";
  check_strides(q, "q", 8, copied, op);
  check_strides(k, "k", 8, copied, op);
  check_strides(v, "v", 8, copied, op);
  check_strides(grad_out, "grad_out", 8, copied, op);
  check_strides(as_const(grad_q), "grad_q", 2, paired, op);
  check_strides(as_const(grad_k), "grad_k", 2, paired, op);
  check_strides(as_const(grad_v), "grad_v", 2, paired, op);
  return w;
}

}  // namespace

void batched_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                BatchedTensor grad_v, const BatchedAttentionOptions& options, cudaStream_t stream) {
  check_batched_attention_backward(q, k, v, grad_out, grad_q, grad_k, grad_v, options, kBackwardOp, false);
  const Weighting w = check_backward_device_call(q, k, v, grad_out, grad_q, grad_k, grad_v, options);
  run_backward(q, k, v, grad_out, grad_q, grad_k, grad_v, options, w, stream);
}

// The backend's kernel on device memory (Memory::device): as the forward's,
// with grad_out scanned beside q, k and v.
void detail::device_batched_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                               ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                               BatchedTensor grad_k, BatchedTensor grad_v,
                                               const BatchedAttentionOptions& options) {
  const Weighting w = check_backward_device_call(q, k, v, grad_out, grad_q, grad_k, grad_v, options);
  const cudaStream_t stream = detail::current_stream();
  const HostLengths lengths = read_lengths(options, q.batch, stream);
  BatchedAttentionOptions on_host = options;
  on_host.query_lengths = lengths.query_data();
  on_host.key_lengths = lengths.key_data();
  const char* op = "batched_attention_backward";
  check_batched_attention_backward_values(
      op, q, k, v, grad_out, on_host,
      detail::scan_batched_heads(op, q, k, v, on_host.query_lengths, on_host.key_lengths, stream, &grad_out));
  run_backward(q, k, v, grad_out, grad_q, grad_k, grad_v, options, w, stream);
  detail::finish_on_device(stream);
}

namespace {

// The backward on host tensors (checked by the core; w from
// check_backward_supported): copies in, run_backward, copies out.
void run_backward_from_host(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                            ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                            BatchedTensor grad_v, const BatchedAttentionOptions& options, const Weighting& w,
                            const DeviceBlocks* blocks) {
  const char* what = "batched_attention_backward: uploading the inputs";
  const DeviceArray<unsigned char> dq = upload_tensor(q, what), dk = upload_tensor(k, what),
                                   dv = upload_tensor(v, what), ddo = upload_tensor(grad_out, what);
  const char* results = "batched_attention_backward: gradients";
  const DeviceResult gq = device_result(grad_q, results), gk = device_result(grad_k, results),
                     gv = device_result(grad_v, results);
  BatchedAttentionOptions o;
  const DeviceLengths lengths = upload_lengths(options, q.batch, o, "batched_attention_backward");
  run_backward(contiguous(q, dq.data()), contiguous(k, dk.data()), contiguous(v, dv.data()),
               contiguous(grad_out, ddo.data()), gq.view, gk.view, gv.view, o, w, nullptr, blocks);
  synchronize(nullptr);  // before the lengths' and the graph's copies are freed
  const char* down = "batched_attention_backward: downloading the gradients";
  download(grad_q, gq, down);
  download(grad_k, gk, down);
  download(grad_v, gv, down);
}

constexpr const char* kBlockForwardOp = "cuda::block_sparse_attention_forward";
constexpr const char* kBlockBackwardOp = "cuda::block_sparse_attention_backward";

}  // namespace

// The backend's kernel: the core has validated the arguments (values
// included); what the GPU cannot run is refused before anything is copied.
void detail::host_batched_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                             ConstBatchedTensor grad_out, BatchedTensor grad_q, BatchedTensor grad_k,
                                             BatchedTensor grad_v, const BatchedAttentionOptions& options) {
  const Weighting w = check_backward_supported(q, k, v, grad_out, options);
  run_backward_from_host(q, k, v, grad_out, grad_q, grad_k, grad_v, options, w, nullptr);
}

// Block-sparse attention, the backend's kernels (host memory, checked by
// the core, the graph included): 16-bit tensors and 64 x 64 blocks.
void detail::host_block_sparse_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                                 const BlockGraph& graph, BatchedTensor out,
                                                 const BatchedAttentionOptions& options) {
  const Weighting w = batched_weighting(options, q.cols, k.rows, kBlockForwardOp);
  check_sixteen_bit(q, kBlockForwardOp, "blocks");
  check_supported(q.dtype, q.batch, q.heads, q.rows, k.rows, q.cols, v.cols, kBlockForwardOp);
  const DeviceBlocks blocks = device_blocks(graph, kBlockForwardOp);
  run_forward_from_host(q, k, v, out, options, w, &blocks, "block_sparse_attention_forward");
}

void detail::host_block_sparse_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                                  const BlockGraph& graph, ConstBatchedTensor grad_out,
                                                  BatchedTensor grad_q, BatchedTensor grad_k, BatchedTensor grad_v,
                                                  const BatchedAttentionOptions& options) {
  const Weighting w = check_backward_supported(q, k, v, grad_out, options, kBlockBackwardOp);
  const DeviceBlocks blocks = device_blocks(graph, kBlockBackwardOp);
  run_backward_from_host(q, k, v, grad_out, grad_q, grad_k, grad_v, options, w, &blocks);
}

// Block-sparse attention on device tensors and a device graph: the device
// entry points' checks, the graph's shape, then its layout and the kernels.
void block_sparse_attention_forward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                    const DeviceBlockGraph& graph, BatchedTensor out,
                                    const BatchedAttentionOptions& options, cudaStream_t stream) {
  check_batched_attention(q, k, v, out, options, kBlockForwardOp, false);
  check_sixteen_bit(q, kBlockForwardOp, "blocks");
  const Weighting w = check_device_call(q, k, v, out, options, kBlockForwardOp);
  check_block_graph_shape(graph.shape(), q, k, kBlockForwardOp);
  const DeviceBlocks blocks = device_blocks(graph, kBlockForwardOp, stream);
  run_sixteen_bit(q, k, v, out, options, BatchedAttentionTuning{}, w, nullptr, 0, stream, nullptr, &blocks);
  check(cudaStreamSynchronize(stream), kBlockForwardOp);  // before the layout is freed
}

void block_sparse_attention_backward(ConstBatchedTensor q, ConstBatchedTensor k, ConstBatchedTensor v,
                                     const DeviceBlockGraph& graph, ConstBatchedTensor grad_out, BatchedTensor grad_q,
                                     BatchedTensor grad_k, BatchedTensor grad_v, const BatchedAttentionOptions& options,
                                     cudaStream_t stream) {
  check_batched_attention_backward(q, k, v, grad_out, grad_q, grad_k, grad_v, options, kBlockBackwardOp, false);
  const Weighting w = check_backward_device_call(q, k, v, grad_out, grad_q, grad_k, grad_v, options, kBlockBackwardOp);
  check_block_graph_shape(graph.shape(), q, k, kBlockBackwardOp);
  const DeviceBlocks blocks = device_blocks(graph, kBlockBackwardOp, stream);
  run_backward(q, k, v, grad_out, grad_q, grad_k, grad_v, options, w, stream, &blocks);
  check(cudaStreamSynchronize(stream), kBlockBackwardOp);  // before the layout is freed
}

}  // namespace entgraph::cuda
