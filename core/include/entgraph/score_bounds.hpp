// entgraph: rigorous upper bounds on attention scores that cost far less
// than the scores themselves.
//
// For one head's keys K (m x d) and a score s_ij = scale q_i . k_j, the keys
// are centred on their mean mu and split along the top-r principal
// directions U (d x r, orthonormal, from the keys' covariance):
//   k_j - mu = U k^_j + k⊥_j,      q = scale q_i:  q^ = U^T q,  q⊥ = q - U q^,
//   s_ij = q . mu + q^ . k^_j + q⊥ . k⊥_j  <=  q . mu + q^ . k^_j + ||q⊥|| ||k⊥_j||
// (Cauchy-Schwarz on the residuals, which are orthogonal to U). A bound costs
// r + 2 multiply-adds per pair instead of d; computed for a tile of queries
// it is one small GEMM. On the keys of a trained attention head most of the
// key variance lies in a few directions, so the residual term is small.
//
// Floating point: mu, U, the projections and the norms are computed in double
// and stored in T; each bound carries an extra c ||q|| (||k_j|| + ||k_j - mu||) with
// c = 4 (d + 3 r + 16) eps(T), more than the rounding of a computed score
// (at most d eps ||q|| ||k_j||) plus that of the bound itself, so a bound is
// never below the score that any of the library's kernels computes.
//
// bound_block runs on one of several kernels (BoundKernel below); each adds
// a margin that covers its own rounding, so every kernel's bound is valid.
//
// Used by graph attention's exact mode (graph_attention.hpp) to prove that
// keys left out of a predicted graph have zero weight.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "entgraph/matrix_view.hpp"

namespace entgraph {

// ScoreBounds' rank "auto": the smallest of 8 and 16 whose directions hold at
// least kAutoRankVariance of the keys' variance, else d (exact scores up to
// rounding). Keys with rotary positions spread their variance over every
// dimension; keys of learned-position models keep most of it in a few.
inline constexpr std::size_t kAutoBoundRank = static_cast<std::size_t>(-1);
inline constexpr double kAutoRankVariance = 0.9;

// The kernel of bound_block (docs/EXACT.md, "The bounds"):
// - float32: the library's float GEMM over the width() columns; any rank.
// - float64: the same in double (ScoreBounds<double> always).
// - bf16: identity bounds in bfloat16 (vdpbf16ps), on a CPU with AVX-512 BF16
//   while the library runs its avx512 kernels; a margin per query.
// - int16: the r projections quantized to 16-bit integer codes with
//   power-of-two steps per query and per key, multiplied exactly as integers
//   (pmaddwd, i32x4.dot_i16x8_s), with a margin per pair that covers the
//   quantization; 1 <= r <= kMaxInt16BoundRank.
// - int8: the same with byte codes (at most 90 in magnitude) and a guard of
//   a few code units, multiplied on the byte instructions (AMX, AVX-512
//   VNNI, vpmaddubsw; the 16-bit ones where there are none): several times
//   cheaper, a margin about 64 times wider; 1 <= r <= kMaxInt8BoundRank.
// `automatic` is the default choice for float bounds: int8 from rank
// kMinAutoInt16BoundRank on where AMX, AVX-512 VNNI (the library on avx512)
// or AVX-VNNI (on avx2) multiply its bytes (for BoundPurpose::exclusion,
// below), else bf16 where it can run, else int16 from that
// rank on (below, the float GEMM of r + 2 columns is as fast, measured, and
// has no quantization margin), else float32.
// int8_mma: the CUDA backend's exact mode (byte codes on tensor cores,
// docs/CUDA.md); reported only, never a CPU preference.
enum class BoundKernel { automatic, float32, float64, bf16, int16, int8, int8_mma };
inline constexpr std::size_t kMaxInt16BoundRank = 4096;
inline constexpr std::size_t kMaxInt8BoundRank = 2048;
inline constexpr std::size_t kMinAutoInt16BoundRank = 16;

// "auto", "float32", "float64", "bf16", "int16", "int8", "int8-mma".
const char* bound_kernel_name(BoundKernel kernel);
// Inverse of bound_kernel_name; throws entgraph::Error for unknown names.
BoundKernel parse_bound_kernel(const std::string& name);
// The kernel float bounds constructed from now on prefer: `automatic` unless
// set_bound_kernel or $ENTGRAPH_BOUND_KERNEL (a name above) chose another.
// A preferred kernel that cannot run for some bounds (bf16 off the identity,
// int16 at rank 0) gives way to the automatic choice there.
BoundKernel bound_kernel();
// Forces the preference (tests, benchmarks: float32 is the reference);
// automatic restores the default. Throws entgraph::Error for float64 and for
// bf16 where this CPU or the ISA in use has none. Not thread-safe with
// respect to constructing bounds.
void set_bound_kernel(BoundKernel kernel);

// What bounds are for. `exclusion` (exact mode): a looser bound only costs
// the time of the keys it lets through, so the automatic choice may trade
// int8's wider margin for its cheaper products. `report` (certify mode): the
// bounds are the result (rows proven settled, the missed mass), so the
// automatic choice keeps the tighter kernels; a forced int8 still applies.
enum class BoundPurpose { exclusion, report };

template <class T>
class ScoreBounds {
 public:
  // Precomputes the keys' side: O(m d^2) for the covariance, O(d^2 r) for its
  // principal directions, O(m d r) for the projections. rank is clamped to d (rank =
  // d bounds every score to rounding; rank = 0 leaves the centred norm bound
  // q . mu + ||q - mu-part|| ||k_j - mu||); kAutoBoundRank chooses it (above). key_padding (m flags, optional):
  // keys flagged 0 do not shape the basis (their bounds stay valid).
  // Throws entgraph::Error on an empty or non-finite k, or a non-finite or
  // zero scale.
  ScoreBounds(ConstMatrix<T> k, double scale, std::size_t rank, const std::uint8_t* key_padding = nullptr,
              BoundPurpose purpose = BoundPurpose::exclusion);

  std::size_t rank() const { return rank_; }
  std::size_t keys() const { return m_; }
  // Columns of a query's bound vector: r projections, the residual norm and
  // the rounding term.
  std::size_t width() const { return rank_ + 2; }

  // The query side of one query q (d values): width() values into qt and the
  // offset q . mu returned; then bound(q, j) = offset + sum_x qt[x] kt(x, j).
  double prepare_query(const T* q, T* qt) const;
  // bounds (rows x (j1 - j0)) = qt (rows x width(), row stride ldq) times the
  // keys' side of keys [j0, j1), without the per-row offsets. One GEMM on the
  // library's kernels (SIMD for float). With group_max (rows x groups, row
  // stride ldg): also the largest bound of each group of kGroupKeys keys
  // [j0 + 64 g, j0 + 64 g + 64) ∩ [j0, j1), so that scans can skip groups.
  static constexpr std::size_t kGroupKeys = 64;
  void bound_block(const T* qt, std::size_t rows, std::size_t ldq, std::size_t j0, std::size_t j1, T* bounds,
                   std::size_t ldb, T* group_max = nullptr, std::size_t ldg = 0) const;
  // Convenience for tests: the bound on scale q . k_j for every key j of one query.
  std::vector<double> bound_all(const T* q) const;

  // The slack of key j's bound for the query side qt: the residual and
  // rounding terms, ||q⊥|| ||k⊥_j|| + c ||q|| (||k_j|| + ||k_j - mu||), rounded
  // up (in bfloat16, the query's margin). bound - 2 slack is a lower bound of
  // the score (minus the offset).
  double slack(const T* qt, std::size_t j) const { return slack(query_slack(qt), j); }
  // The query's share of slack(), computed once for a query whose keys'
  // slacks are all wanted (the integer kernels quantize the query for it).
  struct QuerySlack {
    const T* qt = nullptr;
    double margin = 0.0;                            // bf16: the whole slack
    double step = 0.0, add = 0.0, resid = 0.0, round = 0.0;  // int16 and int8
  };
  QuerySlack query_slack(const T* qt) const;
  double slack(const QuerySlack& q, std::size_t j) const;
  // The offset of prepare_query lowered so that it never exceeds q . mu.
  double lower_offset(double offset) const { return offset - 2.0 * margin_ * std::abs(offset); }

  // The kernel bound_block runs (never automatic), chosen at construction
  // from bound_kernel() and what this machine has.
  BoundKernel kernel() const { return kernel_; }
  // Whether bound_block runs in bfloat16 (identity bounds in float on a CPU
  // with AVX-512 BF16, blocks starting at a multiple of 16 keys): twice the
  // multiply-adds per instruction, and a margin per query instead of per key,
  // 2^-7 ||q|| max_j ||k_j - mu|| and a little more (score_bounds.cpp).
  bool uses_bf16() const { return kernel_ == BoundKernel::bf16; }

 private:
  std::size_t m_ = 0, d_ = 0, rank_ = 0;
  double scale_ = 1.0;
  double margin_ = 0.0;             // c of the rounding term
  std::vector<double> mean_;        // d
  std::vector<double> basis_;       // d x r, column x is the x-th principal direction
  bool identity_ = false;           // r = d with U = I: q^ = scale q, no residual
  std::vector<T> kt_;               // width() x m: k^ rows, then ||k⊥||, then ||k|| + ||k - mu||
  std::size_t kt_ld_ = 0;           // kt_'s row stride: m padded off a power of two (the
                                    // per-key loops write a column: rows 2^k apart share a cache set)
  BoundKernel kernel_ = BoundKernel::float32;
  std::vector<std::uint16_t> kbf_;  // bfloat16 path: the centred keys (pack_bf16_keys), else empty
  double kmax_ = 0.0;               // its margin's terms: max_j ||k_j - mu|| of the stored keys,
  double round_max_ = 0.0;          // and the largest rounding column entry
  double bf16_margin(const T* qt) const;
  // int16 and int8 paths: the keys' codes (pack_code_keys; for int8 also
  // pack_byte_keys) and, per key (padded to whole blocks), the integer
  // margin, the step and the two float columns.
  bool uses_codes() const { return kernel_ == BoundKernel::int16 || kernel_ == BoundKernel::int8; }
  std::int32_t code_limit_ = 0;  // the largest |code|: C(r) = min(32767, floor(sqrt(2^30 / r))), or 90 for bytes
  std::int32_t code_guard_ = 0;  // code units added to each query's margin for the kernel's own rounding
  std::vector<std::int16_t> kcode_;
  std::vector<std::int8_t> kbyte_;  // int8
  std::vector<std::int32_t> kadd_;
  std::vector<std::int32_t> kstart_;  // int8: kadd_ less the byte kernel's offset correction
  std::vector<float> kscale_, kresid_, kround_;
  void bound_block_codes(const T* qt, std::size_t rows, std::size_t ldq, std::size_t j0, std::size_t j1, T* bounds,
                         std::size_t ldb, T* group_max, std::size_t ldg) const;
};

}  // namespace entgraph
