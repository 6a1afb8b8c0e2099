// The scan of batched attention's heads (head_scan.hpp): one block
// per head; each thread walks its rows (first non-finite entry, largest
// |entry|, row norm computed as the CPU's largest_row_norm does, in double
// with correctly rounded operations and no fused multiply-adds), thread 0
// combines them; the host reads one record per head.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <string>

#include "checks.cuh"
#include "entgraph/cuda/device.hpp"
#include "head_scan.hpp"
#include "kernel_launch.cuh"

namespace entgraph::cuda {
namespace {

constexpr unsigned kThreads = 128;
constexpr unsigned kMaxBlocks = 65535;
constexpr unsigned long long kNone = ~0ull;

// A head to scan: its first element and stride between rows.
struct HeadRef {
  const void* data;
  unsigned long long row_stride;
  unsigned long long rows;
};

// What a block writes for its head (HeadScan, in fixed-width fields).
struct ScanRecord {
  unsigned long long bad_row, bad_col;  // kNone: no bad entry
  float bad_value;
  unsigned largest_bits;  // |entry| as bits (orders like |entry| for finite values)
  unsigned long long largest_row, largest_col;
  double norm;
  unsigned long long norm_row;
};

// Entry c of a row, widened exactly to float32.
__device__ float widen(const void* row, unsigned long long c, int dtype) {
  if (dtype == static_cast<int>(DType::float32)) return static_cast<const float*>(row)[c];
  const unsigned short bits = static_cast<const unsigned short*>(row)[c];
  if (dtype == static_cast<int>(DType::bfloat16)) return __uint_as_float(static_cast<unsigned>(bits) << 16);
  return __half2float(__ushort_as_half(bits));
}

__global__ void scan_heads_kernel(const HeadRef* heads, unsigned long long count, unsigned long long cols, int dtype,
                                  int element_bytes, ScanRecord* records) {
  __shared__ unsigned long long bad_row[kThreads], bad_col[kThreads], big_row[kThreads], norm_row[kThreads];
  __shared__ float bad_value[kThreads];
  __shared__ unsigned big_bits[kThreads];
  __shared__ double norm[kThreads];
  for (unsigned long long h = blockIdx.x; h < count; h += gridDim.x) {
    const HeadRef head = heads[h];
    const unsigned t = threadIdx.x;
    unsigned long long my_bad_row = kNone, my_bad_col = 0, my_big_row = 0, my_norm_row = 0;
    float my_bad_value = 0.0f;
    unsigned my_big = 0;
    double my_norm = 0.0;
    for (unsigned long long r = t; r < head.rows; r += kThreads) {
      const void* row = static_cast<const unsigned char*>(head.data) + r * head.row_stride * element_bytes;
      unsigned big = 0;
      unsigned long long first_bad = kNone;
      for (unsigned long long c = 0; c < cols; ++c) {
        const unsigned a = __float_as_uint(widen(row, c, dtype)) & 0x7fffffffu;
        if (a >= 0x7f800000u) {
          first_bad = c;
          break;
        }
        big = max(big, a);
      }
      if (first_bad != kNone) {
        my_bad_row = r;  // rows only grow along this thread's loop
        my_bad_col = first_bad;
        my_bad_value = widen(row, first_bad, dtype);
        break;
      }
      if (big > my_big) my_big = big, my_big_row = r;
      if (big == 0) continue;
      // largest_row_norm (attention/score_range.hpp), operation for operation.
      const double scale = static_cast<double>(__uint_as_float(big));
      double ss = 0.0;
      for (unsigned long long c = 0; c < cols; ++c) {
        const double y = __ddiv_rn(static_cast<double>(widen(row, c, dtype)), scale);
        ss = __dadd_rn(ss, __dmul_rn(y, y));
      }
      const double n = __dmul_rn(scale, __dsqrt_rn(ss));
      if (n > my_norm) my_norm = n, my_norm_row = r;
    }
    bad_row[t] = my_bad_row;
    bad_col[t] = my_bad_col;
    bad_value[t] = my_bad_value;
    big_bits[t] = my_big;
    big_row[t] = my_big_row;
    norm[t] = my_norm;
    norm_row[t] = my_norm_row;
    __syncthreads();
    if (t == 0) {
      ScanRecord s{kNone, 0, 0.0f, 0, 0, 0, 0.0, 0};
      for (unsigned i = 0; i < kThreads; ++i) {
        if (bad_row[i] < s.bad_row) s.bad_row = bad_row[i], s.bad_col = bad_col[i], s.bad_value = bad_value[i];
        // Ties go to the first row, as on the CPU (a zero maximum is row 0).
        const unsigned b = big_bits[i];
        if (b > s.largest_bits || (b == s.largest_bits && b != 0 && big_row[i] < s.largest_row))
          s.largest_bits = b, s.largest_row = big_row[i];
        if (norm[i] > s.norm || (norm[i] == s.norm && norm[i] != 0.0 && norm_row[i] < s.norm_row))
          s.norm = norm[i], s.norm_row = norm_row[i];
      }
      if (s.bad_row == kNone && s.largest_bits != 0) {
        const void* row =
            static_cast<const unsigned char*>(head.data) + s.largest_row * head.row_stride * element_bytes;
        for (unsigned long long c = 0; c < cols; ++c)
          if ((__float_as_uint(widen(row, c, dtype)) & 0x7fffffffu) == s.largest_bits) {
            s.largest_col = c;
            break;
          }
      }
      records[h] = s;
    }
    __syncthreads();
  }
}

std::size_t valid(const std::int32_t* lengths, std::size_t b, std::size_t full) {
  return lengths ? std::min(static_cast<std::size_t>(std::max(lengths[b], 0)), full) : full;
}

}  // namespace

std::vector<HeadScan> detail::scan_batched_heads(const char* op, ConstBatchedTensor q, ConstBatchedTensor k,
                                                 ConstBatchedTensor v, const std::int32_t* query_lengths,
                                                 const std::int32_t* key_lengths, cudaStream_t stream,
                                                 const ConstBatchedTensor* grad_out) {
  const std::string what = std::string(op) + (grad_out ? ": scanning q, k, v and grad_out" : ": scanning q, k and v");
  const char* kWhat = what.c_str();
  const std::size_t B = q.batch, Hq = q.heads, Hkv = k.heads, size = dtype_size(q.dtype);
  std::vector<HeadRef> refs;
  refs.reserve(B * (Hq + 2 * Hkv + (grad_out ? Hq : 0)));
  const auto add = [&](const ConstBatchedTensor& t, std::size_t heads, const std::int32_t* lengths) {
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t h = 0; h < heads; ++h)
        refs.push_back({static_cast<const unsigned char*>(t.data) + (b * t.batch_stride + h * t.head_stride) * size,
                        t.row_stride, valid(lengths, b, t.rows)});
  };
  add(q, Hq, query_lengths);
  add(k, Hkv, key_lengths);
  add(v, Hkv, key_lengths);
  if (grad_out) add(*grad_out, Hq, query_lengths);
  std::vector<HeadScan> scans(refs.size());
  const DeviceArray<HeadRef> d_refs(refs.data(), refs.size(), kWhat);
  DeviceArray<ScanRecord> d_records(refs.size(), kWhat);
  const std::size_t qk = B * (Hq + Hkv);
  const auto scan_chunk = [&](std::size_t first, std::size_t count, std::size_t cols) {
    if (count == 0) return;
    const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>(count, kMaxBlocks));
    launch(scan_heads_kernel, blocks, kThreads, 0, stream, d_refs.data() + first, count, cols,
           static_cast<int>(q.dtype), static_cast<int>(size), d_records.data() + first);
    check(cudaGetLastError(), kWhat);
  };
  scan_chunk(0, qk, q.cols);                 // q's and k's heads, d wide
  scan_chunk(qk, refs.size() - qk, v.cols);  // v's and grad_out's, dv wide
  std::vector<ScanRecord> records(refs.size());
  check(cudaMemcpyAsync(records.data(), d_records.data(), records.size() * sizeof(ScanRecord), cudaMemcpyDeviceToHost,
                        stream),
        kWhat);
  synchronize(stream);
  for (std::size_t i = 0; i < records.size(); ++i) {
    const ScanRecord& r = records[i];
    HeadScan& s = scans[i];
    s.bad = r.bad_row != kNone;
    s.bad_row = s.bad ? static_cast<std::size_t>(r.bad_row) : 0;
    s.bad_col = static_cast<std::size_t>(r.bad_col);
    s.bad_value = r.bad_value;
    std::memcpy(&s.largest, &r.largest_bits, sizeof s.largest);
    s.largest_row = static_cast<std::size_t>(r.largest_row);
    s.largest_col = static_cast<std::size_t>(r.largest_col);
    s.norm = r.norm;
    s.norm_row = static_cast<std::size_t>(r.norm_row);
  }
  return scans;
}

std::vector<HeadScan> detail::scan_one_head(const char* op, const char* pointer_op, ConstMatrix<float> q,
                                            ConstMatrix<float> k, ConstMatrix<float> v, MatrixView<float> out,
                                            const std::uint8_t* key_padding, bool aligned, cudaStream_t stream) {
  check_device_pointer(q.data, pointer_op, "q", aligned);
  check_device_pointer(k.data, pointer_op, "k", aligned);
  check_device_pointer(v.data, pointer_op, "v", aligned);
  check_device_pointer(out.data, pointer_op, "out", aligned);
  if (key_padding) check_device_pointer(key_padding, pointer_op, "options.key_padding", false);
  check_contiguous(op, "q", q);
  check_contiguous(op, "k", k);
  check_contiguous(op, "v", v);
  check_contiguous(op, "out", out);
  return scan_batched_heads(op, one_head(q), one_head(k), one_head(v), nullptr, nullptr, stream);
}

}  // namespace entgraph::cuda
