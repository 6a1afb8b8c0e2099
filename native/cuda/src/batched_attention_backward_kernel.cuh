// The gradients of batched attention on tensor cores (the contract is
// entgraph/batched_attention.hpp's batched_attention_backward; the host side
// is in batched_attention.cu).
//
// Design. For entmax and top-k the forward kernel runs first with out = null and
// writes each query row's weighting state (max, sum, tau:
// BatchedParams::stats); for softmax the query kernel finds max and sum in a
// sweep of its own (sweep 0 below). A weight is then recomputed from its
// score alone: p = attention_weight(x) / sum.
// With g = p^(2 - alpha) (softmax and top-k: g = p; sparsemax: g = [p > 0]) the
// gradient of a score is dS = g (dP - delta), dP = dO V^T, delta =
// sum_j g_j dP_j / sum_j g_j (entmax's Jacobian is diag(g) - g g^T / sum g).
// Then two kernels, neither with atomics, so the result does not depend on
// the schedule:
//   query kernel, one block per (query tile of 64, query head, sequence):
//     softmax's sweep 0: S = Q K^T, each row's max and sum (written out);
//     sweep 1 over the key tiles: S = Q K^T, dP = dO V^T by mma.sync, the
//     row sums of g dP and g -> delta (written for the key kernel);
//     sweep 2: S and dP again, dS, dQ += dS K;
//   key kernel, one block per (key tile of 64, key/value head, sequence):
//     for every query head of the group and every query tile that sees the
//     tile: S^T = K Q^T, dP^T = V dO^T, P^T and dS^T from the rows' states,
//     dV += P^T dO and dK += dS^T Q; the group's query heads add up in
//     float32 in head order, rounded once (as the CPU's contract says).
// Each warp owns 16 rows of its tile (queries, or keys) and never exchanges
// them: a C fragment pair of two 8-column tiles is the A fragment of the
// next product (mma_layout.hpp), so P and dS stay in registers. The weights
// and dS enter the products as two 16-bit parts (weight_split.hpp), as in the
// forward's P V. Warps skip the products of a 16-key (16-query) step whose
// weights are all zero.
#pragma once

#include "batched_attention_kernel.cuh"
#include "kernel_launch.cuh"

namespace entgraph::cuda::detail::batched {

// Shared memory of both kernels: six 64-row tiles of 16-bit values (query
// kernel: Q, dO, K x 2, V x 2; key kernel: K, V, Q x 2, dO x 2), then the key
// kernel's row states and deltas of two query tiles.
template <int D>
struct BackwardLayout {
  static constexpr int kLd = Layout<D>::kLd;
  static constexpr std::size_t kTileBytes = std::size_t{kBlockN} * kLd * 2;
  static constexpr std::size_t kStats = 6 * kTileBytes;
  static constexpr std::size_t kDelta = kStats + 2 * std::size_t{kBlockM} * sizeof(float4);
  static constexpr std::size_t kBytes = kDelta + 2 * std::size_t{kBlockM} * sizeof(float);
  static_assert(kBlockM == kBlockN, "query and key tiles share the tile buffers");
  static_assert(kTileBytes % 16 == 0, "every tile starts 16-byte aligned");
};

// A row's weight p and g = dp/dx's diagonal factor, from its score x (-inf
// where not visible) and state {max, sum, tau_hi, tau_lo}.
struct WeightAndSlope {
  float p, g;
};
__device__ inline WeightAndSlope weight_and_slope(float x, float4 st, const Weighting& w) {
  if (!(st.y > 0.0f) || x == -INFINITY) return {0.0f, 0.0f};
  const float p = attention_weight(x, st.x, Tau{st.z, st.w}, w) / st.y;
  if (w.softmax || w.topk > 0) return {p, p};  // top-k: softmax's on the kept keys (the selection is constant)
  if (!(p > 0.0f)) return {0.0f, 0.0f};
  // g = p^(2 - alpha) = p^(1 - 1/q), q = 1/(alpha - 1).
  if (w.q_int == 1) return {p, 1.0f};
  if (w.q_int == 2) return {p, sqrtf(p)};
  return {p, powf(p, 1.0f - 1.0f / w.q)};
}

// The A fragment of the 16-column step kc / 16 of a warp's 16 x 64 C
// fragments c, this thread's first row times factor[0] and its second (8
// rows below) times factor[1], as hi and lo 16-bit parts; false when every
// value of the warp's step is 0 (skip the products).
template <class E>
__device__ inline bool a_parts(const float (&c)[kBlockN / 8][4], int kc, const float (&factor)[2],
                               std::uint32_t (&hi)[4], std::uint32_t (&lo)[4]) {
  // A register r holds row group (+ 8 for r odd), columns 2t, 2t + 1 (+ 8 for
  // r >= 2): C tile kc / 8 (+ 1), elements 0, 1 (row group) or 2, 3 (+ 8).
  bool any = false;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float(&t)[4] = c[kc / 8 + (r >> 1)];
    const float f = factor[r & 1];
    const float x = t[2 * (r & 1)] * f, y = t[2 * (r & 1) + 1] * f;
    any = any || x != 0.0f || y != 0.0f;
    const WeightParts a = split_weight<E>(x), b = split_weight<E>(y);
    hi[r] = mma::pack_pair(a.hi, b.hi);
    lo[r] = mma::pack_pair(a.lo, b.lo);
  }
  return __any_sync(kFullWarp, any);
}

// acc += A B for the warp's 16 rows, A from a_parts, B the 16 rows kc.. of
// the row-major tile T (64 rows x D) by ldmatrix.trans.
template <class E, int D>
__device__ inline void add_product(const std::uint32_t (&hi)[4], const std::uint32_t (&lo)[4], const std::uint16_t* T,
                                   int kc, float (&acc)[D / 8][4]) {
  constexpr int kLd = Layout<D>::kLd;
  const mma::Coord t_row = mma::v_block_row(static_cast<int>(threadIdx.x % kWarpSize));
#pragma unroll
  for (int c = 0; c < D; c += 16) {
    std::uint32_t b[4];
    mma::ldmatrix_x4_trans(b, T + (kc + t_row.row) * kLd + c + t_row.col);
    E::mma(acc[c / 8], lo, b[0], b[1]);
    E::mma(acc[c / 8], hi, b[0], b[1]);
    E::mma(acc[c / 8 + 1], lo, b[2], b[3]);
    E::mma(acc[c / 8 + 1], hi, b[2], b[3]);
  }
}

// The warp's 16 rows of a gradient, this thread's first row times
// factor[0] and its second times factor[1], rows row0 + ... below `rows`
// (the tensor's), rounded once: float32, or E's format (a value past its
// range becomes +-inf, as the contract says).
template <class E, int D>
__device__ void store_gradient(void* out, bool out_float32, std::int64_t head, std::int64_t row_stride, int row0,
                               int rows, const float (&factor)[2], const float (&acc)[D / 8][4]) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int base = static_cast<int>(threadIdx.x / kWarpSize) * 16;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const mma::Coord e = mma::c_element(lane, 2 * half);
    const int r = row0 + base + e.row;
    if (r >= rows) continue;
    const std::int64_t at = head + static_cast<std::int64_t>(r) * row_stride;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const int c = nt * 8 + e.col;
      const float x = acc[nt][2 * half] * factor[half], y = acc[nt][2 * half + 1] * factor[half];
      if (out_float32)
        *reinterpret_cast<float2*>(static_cast<float*>(out) + at + c) = make_float2(x, y);
      else
        *reinterpret_cast<std::uint32_t*>(static_cast<std::uint16_t*>(out) + at + c) =
            mma::pack_pair(E::to_bits(x), E::to_bits(y));
    }
  }
}

template <int D>
__device__ inline void zero(float (&acc)[D / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
}

// dS enters its products as two parts in E's format; float16's top out at
// 65504, where dS (g (dP - delta), unbounded: a loss-scaled grad_out makes
// it large) would become inf and its lo part -inf, NaN in every product. So
// each of this thread's two accumulator rows keeps a power-of-two exponent
// e: dS is multiplied by 2^-e (|dS| 2^-e < 2^14) before the split, the
// accumulator row is multiplied by 2^-(e' - e) when e grows to e' (exact
// but for values below float32's normal range), and the store multiplies
// the row by 2^e. bfloat16 has float32's range and keeps e = 0.
template <class E>
struct RowExponents {
  static constexpr bool kScaled = E::kMaxFinite < 1.0e5f;
  int e[2] = {0, 0};
  // Grows e for the rows of ds (a warp's 16 x 64 C fragments) and rescales acc.
  template <int D>
  __device__ void fit(const float (&ds)[kBlockN / 8][4], float (&acc)[D / 8][4]) {
    if constexpr (kScaled) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float m = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kBlockN / 8; ++nt) m = fmaxf(m, fmaxf(fabsf(ds[nt][2 * half]), fabsf(ds[nt][2 * half + 1])));
        m = fmaxf(m, __shfl_xor_sync(kFullWarp, m, 1));  // the 4 lanes of a group share the row
        m = fmaxf(m, __shfl_xor_sync(kFullWarp, m, 2));
        const int need = m >= 16384.0f && m <= 3.0e38f ? ilogbf(m) - 13 : 0;
        if (need > e[half]) {
          const float shrink = ldexpf(1.0f, e[half] - need);
#pragma unroll
          for (int nt = 0; nt < D / 8; ++nt) {
            acc[nt][2 * half] *= shrink;
            acc[nt][2 * half + 1] *= shrink;
          }
          e[half] = need;
        }
      }
    }
  }
  // What dS is multiplied by before its split, per row.
  __device__ void down(float (&f)[2]) const { f[0] = ldexpf(1.0f, -e[0]), f[1] = ldexpf(1.0f, -e[1]); }
  // The store's factors: `scale` times 2^e, per row.
  __device__ void up(float scale, float (&f)[2]) const {
    f[0] = ldexpf(scale, e[0]), f[1] = ldexpf(scale, e[1]);
  }
};

// The query kernel (see the top of this file): delta and dQ. kListed: the
// block-sparse instance (key_tiles).
template <class E, int D, bool kListed>
__global__ void __launch_bounds__(kThreads) batched_backward_query_kernel(const BackwardParams bp) {
  using L = BackwardLayout<D>;
  const BatchedParams& p = bp.f;
  float4* smem_vec = dynamic_shared<float4>();
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem_vec);
  std::uint16_t* Qs = reinterpret_cast<std::uint16_t*>(smem);
  std::uint16_t* dOs = reinterpret_cast<std::uint16_t*>(smem + L::kTileBytes);
  std::uint16_t* Ks = reinterpret_cast<std::uint16_t*>(smem + 2 * L::kTileBytes);
  std::uint16_t* Vs = reinterpret_cast<std::uint16_t*>(smem + 4 * L::kTileBytes);

  const int b = static_cast<int>(blockIdx.z), h = static_cast<int>(blockIdx.y);
  const int tile = p.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  const int q0 = tile * kBlockM;
  const int n_b = clamped_length(p.query_lengths, b, p.n);
  const int m_b = clamped_length(p.key_lengths, b, p.m);
  const int kv = h / p.group;
  const std::int64_t row_head = (static_cast<std::int64_t>(b) * bp.q_heads + h) * p.n;
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int base = static_cast<int>(threadIdx.x / kWarpSize) * 16;
  const int row[2] = {q0 + base + mma::c_element(lane, 0).row, q0 + base + mma::c_element(lane, 2).row};

  float dq[D / 8][4];
  zero<D>(dq);
  const int key_end = q0 < n_b ? visible_keys(min(q0 + kBlockM, n_b) - 1, n_b, m_b, p.causal) : 0;
  KeyTiles kt = key_tiles<kListed>(p, b, h, tile, (key_end + kBlockN - 1) / kBlockN);
  const int tiles = kt.tiles;
  float4 st[2];
  int limit[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    st[half] = !p.w.softmax && row[half] < p.n ? bp.stats[row_head + row[half]] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    limit[half] = visible_keys(row[half], n_b, m_b, p.causal);
  }
  if (kt.first() >= tiles) {  // padding rows, rows that see no key, or no block
    if (lane % 4 == 0)
      for (int half = 0; half < 2; ++half)
        if (row[half] < p.n) {
          bp.delta[row_head + row[half]] = 0.0f;
          if (p.w.softmax) bp.stats[row_head + row[half]] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    const float none[2] = {0.0f, 0.0f};
    store_gradient<E, D>(bp.dq, bp.dq_float32, b * bp.dq_batch + h * bp.dq_head, bp.dq_row, q0, p.n, none, dq);
    return;
  }
  load_rows_async<D, kBlockM, L::kLd>(Qs, p.q + b * p.q_batch + h * p.q_head, p.q_row, q0, n_b);
  load_rows_async<D, kBlockM, L::kLd>(dOs, bp.dout + b * bp.do_batch + h * bp.do_head, bp.do_row, q0, n_b);
  mma::cp_async_commit();  // waited for with the first K tile
  const std::uint16_t* k_head = p.k + b * p.k_batch + kv * p.k_head;
  const std::uint16_t* v_head = p.v + b * p.v_batch + kv * p.v_head;

  // This thread's slopes g and dP of key tile t (S and dP by mma; dP only
  // where the warp has a weight).
  float gs[kBlockN / 8][4], dp[kBlockN / 8][4];
  const auto tile_terms = [&](int t, const std::uint16_t* K, const std::uint16_t* V) {
    float s[kBlockN / 8][4];
    warp_scores<E, D>(Qs, K, s);
    bool any = false;
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j = t * kBlockN + nt * 8 + mma::c_element(lane, i).col;
        const int half = i >> 1;
        const float x = j < limit[half] ? __fmul_rn(s[nt][i], p.w.factor) : -INFINITY;
        gs[nt][i] = weight_and_slope(x, st[half], p.w).g;
        any = any || gs[nt][i] != 0.0f;
      }
    if (__any_sync(kFullWarp, any))
      warp_scores<E, D>(dOs, V, dp);
    else
      zero<kBlockN>(dp);
  };
  const auto every_tile = [&](int t) { return kt.after(t); };

  // Softmax, sweep 0: each row's max and sum of exp2(x - max), online (every
  // lane of a row's group holds the same max; the sums add up at the end),
  // written for the key kernel.
  if (p.w.softmax) {
    float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
    sweep<D, false>(p, k_head, v_head, m_b, Ks, Vs, kt.first(), tiles, every_tile,
                    [&](int t, const std::uint16_t* K, const std::uint16_t*) {
                      float s[kBlockN / 8][4];
                      warp_scores<E, D>(Qs, K, s);
                      float top[2] = {-INFINITY, -INFINITY};
#pragma unroll
                      for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
                        for (int i = 0; i < 4; ++i) {
                          const int j = t * kBlockN + nt * 8 + mma::c_element(lane, i).col;
                          s[nt][i] = j < limit[i >> 1] ? __fmul_rn(s[nt][i], p.w.factor) : -INFINITY;
                          top[i >> 1] = fmaxf(top[i >> 1], s[nt][i]);
                        }
#pragma unroll
                      for (int half = 0; half < 2; ++half) {
                        top[half] = fmaxf(top[half], __shfl_xor_sync(kFullWarp, top[half], 1));
                        top[half] = fmaxf(top[half], __shfl_xor_sync(kFullWarp, top[half], 2));
                        const float next = fmaxf(mx[half], top[half]);
                        if (next == -INFINITY) continue;  // nothing seen yet
                        float part = 0.0f;
#pragma unroll
                        for (int nt = 0; nt < kBlockN / 8; ++nt)
                          part += exp2f(s[nt][2 * half] - next) + exp2f(s[nt][2 * half + 1] - next);
                        sum[half] = sum[half] * exp2f(mx[half] - next) + part;  // exp2(-inf) = 0
                        mx[half] = next;
                      }
                    });
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      sum[half] += __shfl_xor_sync(kFullWarp, sum[half], 1);
      sum[half] += __shfl_xor_sync(kFullWarp, sum[half], 2);
      st[half] = sum[half] > 0.0f ? make_float4(mx[half], sum[half], 0.0f, 0.0f) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (lane % 4 == 0 && row[half] < p.n) bp.stats[row_head + row[half]] = st[half];
    }
  }

  // Sweep 1: delta.
  float sum_gdp[2] = {0.0f, 0.0f}, sum_g[2] = {0.0f, 0.0f};
  sweep<D, true>(p, k_head, v_head, m_b, Ks, Vs, kt.first(), tiles, every_tile,
                 [&](int t, const std::uint16_t* K, const std::uint16_t* V) {
                   tile_terms(t, K, V);
#pragma unroll
                   for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
                     for (int i = 0; i < 4; ++i) {
                       sum_gdp[i >> 1] += gs[nt][i] * dp[nt][i];
                       sum_g[i >> 1] += gs[nt][i];
                     }
                 });
  float delta[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {  // the 4 lanes of a group share the row
    for (int mask = 1; mask < 4; mask <<= 1) {
      sum_gdp[half] += __shfl_xor_sync(kFullWarp, sum_gdp[half], mask);
      sum_g[half] += __shfl_xor_sync(kFullWarp, sum_g[half], mask);
    }
    delta[half] = sum_g[half] > 0.0f ? sum_gdp[half] / sum_g[half] : 0.0f;
    if (lane % 4 == 0 && row[half] < p.n) bp.delta[row_head + row[half]] = delta[half];
  }

  // Sweep 2: dS = g (dP - delta), dQ += dS K.
  RowExponents<E> ex;
  sweep<D, true>(p, k_head, v_head, m_b, Ks, Vs, kt.first(), tiles, every_tile,
                 [&](int t, const std::uint16_t* K, const std::uint16_t* V) {
                   tile_terms(t, K, V);
#pragma unroll
                   for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
                     for (int i = 0; i < 4; ++i) gs[nt][i] *= dp[nt][i] - delta[i >> 1];
                   ex.template fit<D>(gs, dq);
                   float down[2];
                   ex.down(down);
#pragma unroll
                   for (int kc = 0; kc < kBlockN; kc += 16) {
                     std::uint32_t hi[4], lo[4];
                     if (a_parts<E>(gs, kc, down, hi, lo)) add_product<E, D>(hi, lo, K, kc, dq);
                   }
                 });
  float up[2];
  ex.up(bp.scale, up);
  store_gradient<E, D>(bp.dq, bp.dq_float32, b * bp.dq_batch + h * bp.dq_head, bp.dq_row, q0, p.n, up, dq);
}

// The query tiles the key kernel visits for key tile `tile` of key/value
// head kv of sequence b, per query head gi of the group: [first, last) of
// the tiles the masks allow, or, with a block graph, those of its tiles
// that list the key tile (in the transposed block rows).
struct QueryTiles {
  const BackwardParams& bp;
  int b, kv, tile, first, last;
  __device__ bool listed() const { return bp.key_offsets != nullptr; }
  __device__ std::int64_t column(int gi) const {
    const BatchedParams& p = bp.f;
    const int h = kv * p.group + gi, key_tiles = (p.m + kBlockN - 1) / kBlockN;
    return (static_cast<std::int64_t>(p.block_batch == 1 ? 0 : b) * p.block_heads + (p.block_heads == 1 ? 0 : h)) *
               key_tiles +
           tile;
  }
  // The index in query_rows of the column's first tile >= tile (ascending lists).
  __device__ int lower_bound(std::int64_t c, int tile) const {
    int lo = bp.key_offsets[c], hi = bp.key_offsets[c + 1];
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (bp.query_rows[mid] < tile)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo;
  }
  __device__ int count(int gi) const {
    if (first >= last) return 0;
    if (!listed()) return last - first;
    const std::int64_t c = column(gi);
    return lower_bound(c, last) - lower_bound(c, first);
  }
  // The i-th tile (i < count(gi)).
  __device__ int at(int gi, int i) const {
    return listed() ? bp.query_rows[lower_bound(column(gi), first) + i] : first + i;
  }
};

// The key kernel (see the top of this file): dK and dV.
template <class E, int D>
__global__ void __launch_bounds__(kThreads) batched_backward_key_kernel(const BackwardParams bp) {
  using L = BackwardLayout<D>;
  const BatchedParams& p = bp.f;
  float4* smem_vec = dynamic_shared<float4>();
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem_vec);
  std::uint16_t* Ks = reinterpret_cast<std::uint16_t*>(smem);
  std::uint16_t* Vs = reinterpret_cast<std::uint16_t*>(smem + L::kTileBytes);
  std::uint16_t* Qs = reinterpret_cast<std::uint16_t*>(smem + 2 * L::kTileBytes);   // two buffers
  std::uint16_t* dOs = reinterpret_cast<std::uint16_t*>(smem + 4 * L::kTileBytes);  // two buffers
  float4* sts = reinterpret_cast<float4*>(smem + L::kStats);                        // two x kBlockM
  float* deltas = reinterpret_cast<float*>(smem + L::kDelta);                       // two x kBlockM
  constexpr int kTile = kBlockN * L::kLd;

  const int b = static_cast<int>(blockIdx.z), kv = static_cast<int>(blockIdx.y);
  const int j0 = static_cast<int>(blockIdx.x) * kBlockN;
  const int n_b = clamped_length(p.query_lengths, b, p.n);
  const int m_b = clamped_length(p.key_lengths, b, p.m);
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int base = static_cast<int>(threadIdx.x / kWarpSize) * 16;
  const int key[2] = {j0 + base + mma::c_element(lane, 0).row, j0 + base + mma::c_element(lane, 2).row};

  float dk[D / 8][4], dv[D / 8][4];
  zero<D>(dk);
  zero<D>(dv);
  RowExponents<E> ex;  // dK's rows (dS^T's)
  const float weight_scale[2] = {E::kWeightScale, E::kWeightScale};
  // The query tiles that see a key of this tile: from the first query whose
  // limit passes j0 (limits grow with the query) to the last query; with a
  // block graph, those of them that list the tile.
  int first_query = n_b;
  if (j0 < m_b) {
    if (!p.causal) {
      first_query = 0;
    } else {
      int lo = 0, hi = n_b;  // first i in [0, n_b) with visible_keys(i) > j0, or n_b
      while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (visible_keys(mid, n_b, m_b, true) > j0)
          hi = mid;
        else
          lo = mid + 1;
      }
      first_query = lo;
    }
  }
  const QueryTiles qt{bp, b, kv, static_cast<int>(blockIdx.x), first_query / kBlockM,
                      first_query < n_b ? (n_b + kBlockM - 1) / kBlockM : 0};
  int items = 0;
  for (int gi = 0; gi < p.group; ++gi) items += qt.count(gi);
  // Item u: query head kv group + gi and its query tile's first row.
  const auto item = [&](int u, int& h, int& q0) {
    int gi = 0;
    for (int c = qt.count(0); u >= c; c = qt.count(++gi)) u -= c;
    h = kv * p.group + gi;
    q0 = qt.at(gi, u) * kBlockM;
  };

  if (items > 0) {
    load_rows_async<D, kBlockN, L::kLd>(Ks, p.k + b * p.k_batch + kv * p.k_head, p.k_row, j0, m_b);
    load_rows_async<D, kBlockN, L::kLd>(Vs, p.v + b * p.v_batch + kv * p.v_head, p.v_row, j0, m_b);
    const auto issue = [&](int u, int buf) {
      int h, q0;
      item(u, h, q0);
      load_rows_async<D, kBlockM, L::kLd>(Qs + buf * kTile, p.q + b * p.q_batch + h * p.q_head, p.q_row, q0, n_b);
      load_rows_async<D, kBlockM, L::kLd>(dOs + buf * kTile, bp.dout + b * bp.do_batch + h * bp.do_head, bp.do_row, q0,
                                          n_b);
      mma::cp_async_commit();
      const int i = q0 + static_cast<int>(threadIdx.x);
      if (threadIdx.x < kBlockM) {
        const std::int64_t at = (static_cast<std::int64_t>(b) * bp.q_heads + h) * p.n + i;
        sts[buf * kBlockM + threadIdx.x] = i < n_b ? bp.stats[at] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        deltas[buf * kBlockM + threadIdx.x] = i < n_b ? bp.delta[at] : 0.0f;
      }
    };
    issue(0, 0);
    int buf = 0;
    for (int u = 0; u < items; ++u) {
      mma::cp_async_wait_all();
      __syncthreads();  // item u is in buffer buf for everyone, and everyone is done with buffer buf ^ 1
      if (u + 1 < items) issue(u + 1, buf ^ 1);
      int h, q0;
      item(u, h, q0);
      const std::uint16_t* Q = Qs + buf * kTile;
      const std::uint16_t* dO = dOs + buf * kTile;
      const float4* st = sts + buf * kBlockM;
      const float* dl = deltas + buf * kBlockM;
      float pt[kBlockN / 8][4], gt[kBlockN / 8][4], dpt[kBlockN / 8][4];
      warp_scores<E, D>(Ks, Q, pt);  // S^T: the warp's keys x the tile's queries
      bool any = false;
#pragma unroll
      for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int c = nt * 8 + mma::c_element(lane, i).col;
          const bool seen = key[i >> 1] < visible_keys(q0 + c, n_b, m_b, p.causal);
          const float x = seen ? __fmul_rn(pt[nt][i], p.w.factor) : -INFINITY;
          const WeightAndSlope ws = weight_and_slope(x, st[c], p.w);
          pt[nt][i] = ws.p;
          gt[nt][i] = ws.g;
          any = any || ws.g != 0.0f;
        }
      if (__any_sync(kFullWarp, any)) {
        warp_scores<E, D>(Vs, dO, dpt);  // dP^T
#pragma unroll
        for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) gt[nt][i] *= dpt[nt][i] - dl[nt * 8 + mma::c_element(lane, i).col];
        ex.template fit<D>(gt, dk);
        float down[2];
        ex.down(down);
#pragma unroll
        for (int kc = 0; kc < kBlockM; kc += 16) {
          std::uint32_t hi[4], lo[4];
          if (a_parts<E>(pt, kc, weight_scale, hi, lo)) add_product<E, D>(hi, lo, dO, kc, dv);
          if (a_parts<E>(gt, kc, down, hi, lo)) add_product<E, D>(hi, lo, Q, kc, dk);
        }
      }
      buf ^= 1;
    }
  }
  float up[2];
  ex.up(bp.scale, up);
  const float unweight[2] = {1.0f / E::kWeightScale, 1.0f / E::kWeightScale};
  store_gradient<E, D>(bp.dk, bp.dk_float32, b * bp.dk_batch + kv * bp.dk_head, bp.dk_row, j0, p.m, up, dk);
  store_gradient<E, D>(bp.dv, bp.dv_float32, b * bp.dv_batch + kv * bp.dv_head, bp.dv_row, j0, p.m, unweight, dv);
}

template <class E, int D>
void launch_batched_backward(const BackwardParams& bp, cudaStream_t stream) {
  constexpr std::size_t bytes = BackwardLayout<D>::kBytes;
  const auto query_kernel = bp.f.block_offsets != nullptr ? batched_backward_query_kernel<E, D, true>
                                                          : batched_backward_query_kernel<E, D, false>;
  const auto key_kernel = batched_backward_key_kernel<E, D>;
  const char* what = "cuda::batched_attention_backward (launch)";
  check(cudaFuncSetAttribute(query_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), what);
  check(cudaFuncSetAttribute(key_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), what);
  const auto query_tiles = static_cast<unsigned>((bp.f.n + kBlockM - 1) / kBlockM);
  const auto key_tiles = static_cast<unsigned>((bp.f.m + kBlockN - 1) / kBlockN);
  const auto batch = static_cast<unsigned>(bp.batch);
  launch(query_kernel, dim3(query_tiles, static_cast<unsigned>(bp.q_heads), batch), kThreads, bytes, stream, bp);
  check(cudaGetLastError(), what);  // the key kernel reads the query kernel's deltas: same stream, in order
  launch(key_kernel, dim3(key_tiles, static_cast<unsigned>(bp.q_heads / bp.f.group), batch), kThreads, bytes, stream,
         bp);
  check(cudaGetLastError(), what);
}

}  // namespace entgraph::cuda::detail::batched
