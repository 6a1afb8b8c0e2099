// Block-sparse attention on the GPU (block_sparse_attention_forward and
// _backward on Device::cuda: the batched tensor-core kernels restricted to
// the block rows of a BlockGraph of 64 x 64 blocks) against the CPU's
// block-sparse attention on the same 16-bit inputs widened to float32 (itself
// tested against float64 in tests/attention): outputs within 1e-4 and
// gradients within 1e-3 of the largest |entry|, plus half an ulp of a 16-bit
// result. Every result entry starts as NaN, so an entry the GPU did not
// write fails.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "batched_tensors.hpp"
#include "entgraph/block_graph.hpp"
#include "entgraph/block_sparse_attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/device.hpp"
#include "entgraph/error.hpp"
#include "entgraph/transforms.hpp"
#include "support.hpp"

namespace entgraph::cuda {
namespace {

using namespace test_batched;

// Each block row keeps each key block with probability `keep`; causal: only
// blocks holding an allowed pair (as BlockGraph::full), so rows stay useful.
BlockGraph random_blocks(std::size_t batch, std::size_t heads, std::size_t n, std::size_t m, double keep,
                         bool causal, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution kept(keep);
  const BlockGraph full = BlockGraph::full(batch, heads, n, m, 64, 64, causal);
  BlockGraph g = BlockGraph::empty(batch, heads, n, m, 64, 64);
  g.offsets.assign(1, 0);
  for (std::size_t r = 0; r < batch * heads * full.query_blocks(); ++r) {
    for (const std::uint32_t* j = full.row_begin(r); j != full.row_end(r); ++j)
      if (kept(rng)) g.blocks.push_back(*j);
    g.offsets.push_back(g.blocks.size());
  }
  return g;
}

// A float32 copy of a 16-bit tensor (exact), same layout.
HostTensor widened(const HostTensor& t) {
  HostTensor w(DType::float32, Layout::bhnd, t.batch, t.heads, t.rows, t.cols);
  for (std::size_t b = 0; b < t.batch; ++b)
    for (std::size_t h = 0; h < t.heads; ++h)
      for (std::size_t i = 0; i < t.rows; ++i)
        for (std::size_t c = 0; c < t.cols; ++c) w.set(b, h, i, c, t.get(b, h, i, c));
  return w;
}

// got against want (a float32 tensor): within `relative` of want's largest
// |entry| plus half an ulp of got's dtype.
void check_close(const char* name, const HostTensor& got, const HostTensor& want, double relative) {
  double largest = 0.0, worst = 0.0;
  for (std::size_t b = 0; b < want.batch; ++b)
    for (std::size_t h = 0; h < want.heads; ++h)
      for (std::size_t i = 0; i < want.rows; ++i)
        for (std::size_t c = 0; c < want.cols; ++c) largest = std::max(largest, std::abs(want.get(b, h, i, c)));
  std::size_t bad = 0;
  for (std::size_t b = 0; b < want.batch; ++b)
    for (std::size_t h = 0; h < want.heads; ++h)
      for (std::size_t i = 0; i < want.rows; ++i)
        for (std::size_t c = 0; c < want.cols; ++c) {
          const double g = got.get(b, h, i, c), w = want.get(b, h, i, c), err = std::abs(g - w);
          if (!(err <= relative * largest + half_ulp(got.dtype, std::max(std::abs(g), std::abs(w))))) ++bad;
          if (std::isfinite(err)) worst = std::max(worst, err);
        }
  CAPTURE(name);
  CAPTURE(largest);
  CAPTURE(worst);
  CHECK(bad == 0);
}

struct Case {
  std::size_t batch = 2, hq = 4, hkv = 2, n = 200, m = 230, d = 64;
  DType dtype = DType::bfloat16;
  BatchedAttentionOptions options;
  Lengths lengths;
};

// Forward and backward on the GPU and on the CPU (float32 copies), compared.
void check_case(const Case& c, const BlockGraph& graph, std::uint64_t seed) {
  CAPTURE(test::describe(c.options.transform));
  CAPTURE(c.options.causal);
  CAPTURE(dtype_name(c.dtype));
  CAPTURE(c.d);
  const HostTensor q = random_tensor(c.dtype, Layout::bhnd, c.batch, c.hq, c.n, c.d, 1.0, seed);
  const HostTensor k = random_tensor(c.dtype, Layout::bhnd, c.batch, c.hkv, c.m, c.d, 1.0, seed + 1);
  const HostTensor v = random_tensor(c.dtype, Layout::bhnd, c.batch, c.hkv, c.m, c.d, 1.0, seed + 2);
  const HostTensor go = random_tensor(c.dtype, Layout::bhnd, c.batch, c.hq, c.n, c.d, 1.0, seed + 3);
  const HostTensor q32 = widened(q), k32 = widened(k), v32 = widened(v), go32 = widened(go);
  BatchedAttentionOptions o = c.options;
  o.query_lengths = c.lengths.query.empty() ? nullptr : c.lengths.query.data();
  o.key_lengths = c.lengths.key.empty() ? nullptr : c.lengths.key.data();
  const auto cv = [](const HostTensor& t) { return t.view<const void*>(t.bytes.data()); };
  const auto mv = [](HostTensor& t) { return t.view<void*>(t.bytes.data()); };

  HostTensor out(DType::float32, Layout::padded, c.batch, c.hq, c.n, c.d);
  HostTensor want_out(DType::float32, Layout::bhnd, c.batch, c.hq, c.n, c.d);
  block_sparse_attention_forward(Device::cuda, cv(q), cv(k), cv(v), graph, mv(out), o);
  block_sparse_attention_forward(Device::cpu, cv(q32), cv(k32), cv(v32), graph, mv(want_out), o);
  check_close("out", out, want_out, 1e-4);

  HostTensor gq(c.dtype, Layout::bhnd, c.batch, c.hq, c.n, c.d), gk(DType::float32, Layout::bhnd, c.batch, c.hkv,
                                                                        c.m, c.d),
      gv(c.dtype, Layout::bnhd, c.batch, c.hkv, c.m, c.d);
  HostTensor wq(DType::float32, Layout::bhnd, c.batch, c.hq, c.n, c.d), wk(DType::float32, Layout::bhnd, c.batch,
                                                                             c.hkv, c.m, c.d),
      wv(DType::float32, Layout::bhnd, c.batch, c.hkv, c.m, c.d);
  block_sparse_attention_backward(Device::cuda, cv(q), cv(k), cv(v), graph, cv(go), mv(gq), mv(gk), mv(gv), o);
  block_sparse_attention_backward(Device::cpu, cv(q32), cv(k32), cv(v32), graph, cv(go32), mv(wq), mv(wk), mv(wv),
                                  o);
  check_close("grad_q", gq, wq, 1e-3);
  check_close("grad_k", gk, wk, 1e-3);
  check_close("grad_v", gv, wv, 1e-3);
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("block-sparse attention: tensor cores on 64 x 64 blocks match the CPU, forward and backward") {
    // Top-k: the k largest scores of the blocks kept (the CPU's contract).
    Case c;
    std::uint64_t seed = 100;
    for (DType t : {DType::bfloat16, DType::float16})
      for (std::size_t d : {64, 128})
        for (const Transform& tr :
             {Transform::softmax(), Transform::entmax15(), Transform::sparsemax(), Transform::topk_softmax(9)})
          for (bool causal : {false, true}) {
            c.dtype = t;
            c.d = d;
            c.options.transform = tr;
            c.options.causal = causal;
            // Per-head graphs, and one graph every sequence and head shares.
            check_case(c, random_blocks(c.batch, c.hq, c.n, c.m, 0.5, causal, seed), seed);
            check_case(c, random_blocks(1, 1, c.n, c.m, 0.6, causal, seed + 7), seed + 8);
            seed += 16;
          }
  }

  TEST_CASE("block-sparse attention: every block kept, no block, lengths, entmax(1.25)") {
    Case c;
    c.options.transform = Transform::entmax(1.25);
    for (bool causal : {false, true}) {
      c.options.causal = causal;
      check_case(c, BlockGraph::full(1, 1, c.n, c.m, 64, 64, causal), 300);
      check_case(c, BlockGraph::empty(c.batch, c.hq, c.n, c.m, 64, 64), 310);
      c.lengths = {{200, 70}, {0, 129}};  // sequence 0 has no key; sequence 1's rows past 70 are padding
      check_case(c, random_blocks(c.batch, c.hq, c.n, c.m, 0.7, causal, 320), 330);
      c.lengths = {};
    }
  }

  TEST_CASE("block-sparse attention: what the GPU cannot run is refused, naming it, before any output") {
    Case c;
    c.n = c.m = 64;
    const HostTensor q = random_tensor(DType::bfloat16, Layout::bhnd, c.batch, c.hq, c.n, c.d, 1.0, 1);
    const HostTensor k = random_tensor(DType::bfloat16, Layout::bhnd, c.batch, c.hkv, c.m, c.d, 1.0, 2);
    HostTensor out(DType::bfloat16, Layout::bhnd, c.batch, c.hq, c.n, c.d);
    const std::vector<unsigned char> before = out.bytes;
    const auto forward = [&](const HostTensor& qq, const HostTensor& kk, const BlockGraph& g, HostTensor& o) {
      try {
        block_sparse_attention_forward(Device::cuda, qq.view<const void*>(qq.bytes.data()),
                                       kk.view<const void*>(kk.bytes.data()), kk.view<const void*>(kk.bytes.data()),
                                       g, o.view<void*>(o.bytes.data()), c.options);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("no exception");
    };
    CHECK(forward(q, k, BlockGraph::full(1, 1, c.n, c.m, 32, 32, false), out)
              .find("graph.query_block and graph.key_block are not supported (got 32 and 32, expected 64 and 64") !=
          std::string::npos);
    // float32 in and out (a bfloat16 out would be refused first, for its dtype).
    const HostTensor q32 = widened(q), k32 = widened(k);
    HostTensor out32(DType::float32, Layout::bhnd, c.batch, c.hq, c.n, c.d);
    const std::vector<unsigned char> before32 = out32.bytes;
    CHECK(forward(q32, k32, BlockGraph::full(1, 1, c.n, c.m, 64, 64, false), out32)
              .find("q.dtype is not supported (got float32") != std::string::npos);
    CHECK(out.bytes == before);
    CHECK(out32.bytes == before32);
  }
}

}  // namespace entgraph::cuda
