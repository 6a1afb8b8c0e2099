// Block-sparse attention (entgraph/block_sparse_attention.hpp), forward and
// backward, against the float64 reference of attention/batched_reference.hpp
// restricted to the blocks of the graph: every transform, dtype and layout
// on every ISA, per-head and shared graphs, grouped-query heads, lengths,
// causal; rows that attend to nothing; every block kept equals batched
// attention; the errors of the graph, with nothing written.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include "attention/attention_support.hpp"
#include "attention/batched_reference.hpp"
#include "attention/batched_support.hpp"
#include "entgraph/backend.hpp"
#include "entgraph/block_sparse_attention.hpp"
#include "entgraph/device.hpp"
#include "entgraph/error.hpp"
#include "support.hpp"

using namespace entgraph;
using namespace entgraph::test;

namespace {

// Each block row keeps each key block with probability `keep`.
BlockGraph random_blocks(std::size_t batch, std::size_t heads, std::size_t n, std::size_t m, std::size_t qb,
                         std::size_t kb, double keep, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution kept(keep);
  BlockGraph g = BlockGraph::empty(batch, heads, n, m, qb, kb);
  g.offsets.assign(1, 0);  // rows are appended below
  for (std::size_t r = 0; r < batch * heads * g.query_blocks(); ++r) {
    for (std::size_t j = 0; j < g.key_blocks(); ++j)
      if (kept(rng)) g.blocks.push_back(static_cast<std::uint32_t>(j));
    g.offsets.push_back(g.blocks.size());
  }
  return g;
}

// The reference's mask: key j's block in the row of query i's block.
std::function<bool(std::size_t, std::size_t, std::size_t, std::size_t)> mask_of(const BlockGraph& g) {
  return [&g](std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
    const std::size_t r = g.row(g.batch == 1 ? 0 : b, g.heads == 1 ? 0 : h, i / g.query_block);
    for (const std::uint32_t* p = g.row_begin(r); p != g.row_end(r); ++p)
      if (*p == j / g.key_block) return true;
    return false;
  };
}

void run_forward(Batched& p, const BlockGraph& g) {
  block_sparse_attention_forward(p.q.cview(), p.k.cview(), p.v.cview(), g, p.grad_q.view(), p.o);
}
void run_backward(Batched& p, const BlockGraph& g) {
  block_sparse_attention_backward(p.q.cview(), p.k.cview(), p.v.cview(), g, p.grad_out.cview(), p.grad_q.view(),
                                  p.grad_k.view(), p.grad_v.view(), p.o);
}

// The forward writes into a tensor shaped like out: Batched's grad_q has
// q's shape, so the tests use d = dv.
BatchedShape shape() {
  BatchedShape s;
  s.batch = 4;
  s.hq = 4;
  s.hkv = 2;
  s.n = 21;
  s.m = 26;
  s.d = s.dv = 8;
  s.qlen = {21, 0, 13, 9};
  s.klen = {10, 26, 26, 0};
  return s;
}

const Transform kTransforms[] = {Transform::softmax(),    Transform::sparsemax(), Transform::entmax15(),
                                 Transform::entmax(1.25), Transform::entmax(3.0), Transform::topk_softmax(3)};

std::string message_of(const std::function<void()>& f) { return error_message(f); }

}  // namespace

TEST_SUITE("attention") {
  TEST_CASE("block-sparse attention: forward and backward match float64 on the graph's blocks, on every ISA") {
    const BatchedShape s = shape();
    const BlockGraph per_head = random_blocks(s.batch, s.hq, s.n, s.m, 4, 5, 0.5, 3);
    const BlockGraph shared = random_blocks(1, 1, s.n, s.m, 8, 3, 0.6, 4);
    for (CpuIsa isa : available_cpu_isas()) {
      IsaScope scope(isa);
      const std::string isa_name = scope.name();
      CAPTURE(isa_name);
      for (const Transform& t : kTransforms)
        for (bool causal : {false, true})
          for (DType dtype : {DType::float32, DType::bfloat16, DType::float16})
            for (const BlockGraph* g : {&per_head, &shared}) {
              CAPTURE(describe(t));
              CAPTURE(causal);
              const std::string dtype_text = dtype_name(dtype);
              CAPTURE(dtype_text);
              const bool is_shared = g == &shared;
              CAPTURE(is_shared);
              const Layout layout = dtype == DType::float16 ? Layout::padded : Layout::bnhd;
              Batched p(s, dtype, dtype, layout);
              p.o.transform = t;
              p.o.causal = causal;
              p.o.scale = 2.0 / std::sqrt(static_cast<double>(s.d));
              p.fill(19);
              Problem64 ref = p.as_float64();
              ref.allowed = mask_of(*g);
              // Forward into grad_q's tensor (q's shape, d = dv).
              run_forward(p, *g);
              check_grad("out", p.grad_q, reference_out(ref), s, true, 1e-5);
              run_backward(p, *g);
              const Grads64 want = reference_grads(ref);
              check_grad("grad_q", p.grad_q, want.q, s, true, 1e-4);
              check_grad("grad_k", p.grad_k, want.k, s, false, 1e-4);
              check_grad("grad_v", p.grad_v, want.v, s, false, 1e-4);
            }
    }
  }

  TEST_CASE("block-sparse attention: the reference's masked gradients are the central differences of its loss") {
    BatchedShape s = shape();
    s.batch = 1;
    s.qlen = {17};
    s.klen = {23};
    const BlockGraph g = random_blocks(1, s.hq, s.n, s.m, 4, 5, 0.5, 8);
    for (const Transform& t : {Transform::entmax15(), Transform::softmax()}) {
      CAPTURE(describe(t));
      Batched p(s, DType::float32, DType::float32, Layout::bhnd);
      p.o.transform = t;
      p.fill(5);
      Problem64 ref = p.as_float64();
      ref.allowed = mask_of(g);
      const Grads64 grads = reference_grads(ref);
      std::mt19937_64 rng(6);
      std::normal_distribution<double> dist(0.0, 1.0);
      Problem64 plus = ref, minus = ref;
      double analytic = 0.0;
      const double h = 1e-6;
      for (std::size_t x = 0; x < ref.k.size(); ++x) {
        const double dir = dist(rng);
        plus.k[x] += h * dir;
        minus.k[x] -= h * dir;
        analytic += grads.k[x] * dir;
      }
      CHECK(std::abs((loss(plus) - loss(minus)) / (2 * h) - analytic) <= 1e-6 * std::max(1.0, std::abs(analytic)));
    }
  }

  TEST_CASE("block-sparse attention: every block kept is batched attention; rows with no block are zeros") {
    const BatchedShape s = shape();
    // Blocks of 16, and blocks as large as a size can be (one block; ceil(n /
    // block) must not overflow).
    for (const std::size_t block : {std::size_t{16}, std::numeric_limits<std::size_t>::max()})
      for (bool causal : {false, true}) {
        CAPTURE(causal);
        CAPTURE(block);
        Batched dense(s, DType::bfloat16, DType::float32, Layout::bhnd),
            sparse(s, DType::bfloat16, DType::float32, Layout::bhnd);
        dense.o.causal = sparse.o.causal = causal;
        dense.fill(7);
        sparse.fill(7);
        batched_attention_forward(dense.q.cview(), dense.k.cview(), dense.v.cview(), dense.grad_q.view(), dense.o);
        const BlockGraph all = BlockGraph::full(1, 1, s.n, s.m, block, block, causal);
        CHECK(all.query_blocks() == (block == 16 ? (s.n + 15) / 16 : 1));
        run_forward(sparse, all);
        double worst = 0.0;
        for (std::size_t b = 0; b < s.batch; ++b)
          for (std::size_t h = 0; h < s.hq; ++h)
            for (std::size_t i = 0; i < s.n; ++i)
              for (std::size_t c = 0; c < s.d; ++c)
                worst = std::max(worst, std::abs(dense.grad_q.get(b, h, i, c) - sparse.grad_q.get(b, h, i, c)));
        CHECK(worst <= 1e-5);
      }
    // A graph without blocks: every row attends to nothing.
    Batched p(s, DType::float32, DType::float32, Layout::bhnd);
    p.fill(8);
    run_forward(p, BlockGraph::empty(1, 1, s.n, s.m, 4, 4));
    std::size_t nonzero = 0;
    for (std::size_t b = 0; b < s.batch; ++b)
      for (std::size_t h = 0; h < s.hq; ++h)
        for (std::size_t i = 0; i < s.n; ++i)
          for (std::size_t c = 0; c < s.d; ++c) nonzero += p.grad_q.get(b, h, i, c) != 0.0;
    CHECK(nonzero == 0);
  }

  TEST_CASE("block-sparse attention: a head whose kept pairs fill several backward groups has batched attention's gradients") {
    // Every block of a 2100 x 2100 head: 4.4 million pairs, past the 2^22 a
    // group of the backward holds, so the key gradients add up over groups.
    BatchedShape s;
    s.batch = s.hq = s.hkv = 1;
    s.n = s.m = 2100;
    s.d = s.dv = 4;
    Batched dense(s, DType::float32, DType::float32, Layout::bhnd), blocks(s, DType::float32, DType::float32,
                                                                         Layout::bhnd);
    dense.fill(21);
    blocks.fill(21);
    dense.backward();
    run_backward(blocks, BlockGraph::full(1, 1, s.n, s.m, 64, 64, false));
    for (const auto& pair : {std::make_pair(&dense.grad_q, &blocks.grad_q), std::make_pair(&dense.grad_k, &blocks.grad_k),
                             std::make_pair(&dense.grad_v, &blocks.grad_v)}) {
      double biggest = 0.0, worst = 0.0;
      for (std::size_t i = 0; i < s.n; ++i)
        for (std::size_t c = 0; c < s.d; ++c) {
          biggest = std::max(biggest, std::abs(pair.first->get(0, 0, i, c)));
          worst = std::max(worst, std::abs(pair.first->get(0, 0, i, c) - pair.second->get(0, 0, i, c)));
        }
      CAPTURE(biggest);
      CHECK(worst <= 1e-4 * biggest);
    }
  }

  // The name matches tests/wasm/main.cpp's "*2 and 3 threads*" filter: that
  // build has no threads.
  TEST_CASE("block-sparse attention: forward and backward are the same with 1, 2 and 3 threads") {
    // One sequence and one head (its query blocks on the pool) and the whole batch (its heads on the pool).
    for (std::size_t heads : {std::size_t{1}, std::size_t{4}}) {
      CAPTURE(heads);
      BatchedShape s = shape();
      s.batch = heads == 1 ? 1 : s.batch;
      s.hq = heads;
      s.hkv = heads == 1 ? 1 : s.hkv;
      s.qlen.resize(s.batch);
      s.klen.resize(s.batch);
      s.klen[0] = 26;
      const BlockGraph g = random_blocks(1, 1, s.n, s.m, 4, 4, 0.6, 12);
      auto run = [&](std::size_t threads) {
        ThreadsScope scope(threads);
        auto p = std::make_unique<Batched>(s, DType::bfloat16, DType::bfloat16, Layout::bnhd);
        p->o.causal = true;
        p->fill(13);
        run_backward(*p, g);
        run_forward(*p, g);  // grad_q then holds the forward's output, grad_k and grad_v the backward's
        return p;
      };
      const auto one = run(1);
      for (std::size_t threads : {2, 3}) {
        CAPTURE(threads);
        const auto more = run(threads);
        CHECK(one->grad_q.same_bits(more->grad_q));
        CHECK(one->grad_k.same_bits(more->grad_k));
        CHECK(one->grad_v.same_bits(more->grad_v));
      }
    }
  }

  TEST_CASE("block-sparse attention: a graph that does not fit is refused, naming it, and nothing is written") {
    const BatchedShape s = shape();
    Batched p(s, DType::float32, DType::float32, Layout::bhnd);
    p.fill(9);
    const Tensor4 sentinel = p.grad_q;
    const BlockGraph good = random_blocks(s.batch, s.hq, s.n, s.m, 4, 4, 0.5, 1);
    auto forward = [&](const BlockGraph& g) {
      const std::string got = message_of([&] { run_forward(p, g); });
      CHECK(p.grad_q.same_bits(sentinel));
      return got;
    };
    BlockGraph g = good;
    g.batch = 2;
    g.heads = 8;  // same number of rows
    CHECK(forward(g) == "block_sparse_attention_forward: graph.batch does not match q.batch (got 2, expected 4 or 1)");
    g = good;
    g.queries = 20;
    CHECK(forward(g) == "block_sparse_attention_forward: graph.queries does not match q.rows (got 20, expected 21)");
    g = good;
    g.keys = 27;
    CHECK(forward(g) == "block_sparse_attention_forward: graph.keys does not match k.rows (got 27, expected 26)");
    g = good;
    g.blocks[0] = 99;
    CHECK(forward(g).find("block_sparse_attention_forward: graph: block row 0 has key block 99") == 0);
    // The backward checks the same, and batched attention's own checks come first.
    g = good;
    g.heads = 3;
    const std::string backward = message_of([&] { run_backward(p, g); });
    CHECK(backward == "block_sparse_attention_backward: graph.heads does not match q.heads (got 3, expected 4 or 1)");
    p.q.set(0, 0, 0, 0, std::numeric_limits<float>::quiet_NaN());
    CHECK(forward(good).find("block_sparse_attention_forward: q has a non-finite entry at [0, 0, 0, 0]") == 0);
  }

  TEST_CASE("block-sparse attention: Device dispatch runs the backend's kernels after the core's checks") {
    const BatchedShape s = shape();
    Batched p(s, DType::float32, DType::float32, Layout::bhnd);
    p.fill(10);
    const BlockGraph g = random_blocks(s.batch, s.hq, s.n, s.m, 4, 4, 0.5, 2);
    static int forwards = 0, backwards = 0;
    static bool usable = true;
    BackendKernels table;
    table.available = [](std::string* why) {
      if (!usable && why) *why = "the block-sparse test backend is switched off";
      return usable;
    };
    register_backend(Device::cuda, table);
    const auto forward = [&](Device device, const BlockGraph& graph) {
      block_sparse_attention_forward(device, p.q.cview(), p.k.cview(), p.v.cview(), graph, p.grad_q.view(), p.o);
    };
    const auto backward = [&](Device device, const BlockGraph& graph) {
      block_sparse_attention_backward(device, p.q.cview(), p.k.cview(), p.v.cview(), graph, p.grad_out.cview(),
                                      p.grad_q.view(), p.grad_k.view(), p.grad_v.view(), p.o);
    };
    CHECK(message_of([&] { forward(Device::cuda, g); }) ==
          "block_sparse_attention_forward: device cuda has no kernel for this op; run it on cpu");
    CHECK(message_of([&] { backward(Device::cuda, g); }) ==
          "block_sparse_attention_backward: device cuda has no kernel for this op; run it on cpu");
    CHECK_FALSE(device_supports(Device::cuda, BackendOp::block_sparse_attention_forward, {}));
    table.block_sparse_attention_forward = [](ConstBatchedTensor, ConstBatchedTensor, ConstBatchedTensor,
                                              const BlockGraph&, BatchedTensor out, const BatchedAttentionOptions&) {
      ++forwards;
      static_cast<float*>(out.data)[0] = -7.0f;
    };
    table.block_sparse_attention_backward = [](ConstBatchedTensor, ConstBatchedTensor, ConstBatchedTensor,
                                               const BlockGraph&, ConstBatchedTensor, BatchedTensor gq, BatchedTensor,
                                               BatchedTensor, const BatchedAttentionOptions&) {
      ++backwards;
      static_cast<float*>(gq.data)[0] = -8.0f;
    };
    register_backend(Device::cuda, table);
    CHECK(device_supports(Device::cuda, BackendOp::block_sparse_attention_forward, {}));
    CHECK(device_supports(Device::cuda, BackendOp::block_sparse_attention_backward, {}));
    OpArguments on_device;
    on_device.memory = Memory::device;
    CHECK_FALSE(device_supports(Device::cuda, BackendOp::block_sparse_attention_forward, on_device));
    forward(Device::cuda, g);
    CHECK((forwards == 1 && p.grad_q.get(0, 0, 0, 0) == -7.0));
    backward(Device::cuda, g);
    CHECK((backwards == 1 && p.grad_q.get(0, 0, 0, 0) == -8.0));
    // The graph's checks and the values' come first, with the CPU's messages; the kernels never see them.
    BlockGraph bad = g;
    bad.blocks[0] = 99;
    const std::string on_cpu = message_of([&] { forward(Device::cpu, bad); });
    CHECK(on_cpu.find("graph: block row 0 has key block 99") != std::string::npos);
    CHECK(message_of([&] { forward(Device::cuda, bad); }) == on_cpu);
    p.grad_out.set(0, 0, 3, 1, std::numeric_limits<float>::quiet_NaN());
    const std::string nan_on_cpu = message_of([&] { backward(Device::cpu, g); });
    CHECK(nan_on_cpu.find("grad_out has a non-finite entry at [0, 0, 3, 1]") != std::string::npos);
    CHECK(message_of([&] { backward(Device::cuda, g); }) == nan_on_cpu);
    CHECK((forwards == 1 && backwards == 1));
    usable = false;  // Device::cuda unavailable again for the other tests
    CHECK(message_of([&] { forward(Device::cuda, g); }).find("device cuda is not available") != std::string::npos);
  }
}
