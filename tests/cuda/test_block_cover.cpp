// Block graphs in device memory (DeviceBlockGraph, block_cover) and
// block-sparse attention on device tensors from them: the cover of device
// graphs equals BlockGraph::cover of the same graphs, block for block;
// attention from a device block graph gives the host entry point's output
// and gradients on the same blocks, bit for bit; and a predictor's graph goes
// to blocks and to attention without leaving the device.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "batched_tensors.hpp"
#include "entgraph/attention.hpp"
#include "entgraph/backend.hpp"
#include "entgraph/block_graph.hpp"
#include "entgraph/block_sparse_attention.hpp"
#include "entgraph/cuda/batched_attention.hpp"
#include "entgraph/cuda/device.hpp"
#include "entgraph/cuda/device_block_graph.hpp"
#include "entgraph/cuda/device_graph.hpp"
#include "entgraph/cuda/predictors.hpp"
#include "entgraph/device.hpp"
#include "entgraph/error.hpp"
#include "entgraph/graph.hpp"
#include "entgraph/transforms.hpp"

namespace entgraph::cuda {
namespace {

using namespace test_batched;

// An n x m graph: each allowed pair an edge with probability `keep`, except
// rows i % 7 == 3 (none) and i % 7 == 5 (every allowed key).
Graph random_graph(std::size_t n, std::size_t m, double keep, bool causal, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution edge(keep);
  Graph g = Graph::empty(n, m);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t limit = causal ? causal_key_limit(i, n, m) : m;
    for (std::size_t j = 0; j < limit; ++j)
      if (i % 7 == 5 || (i % 7 != 3 && edge(rng))) g.indices.push_back(static_cast<std::uint32_t>(j));
    g.offsets[i + 1] = g.indices.size();
  }
  return g;
}

struct DeviceGraphs {
  std::vector<DeviceGraph> graphs;
  std::vector<const DeviceGraph*> pointers;
  explicit DeviceGraphs(const std::vector<Graph>& host) {
    for (const Graph& g : host) graphs.push_back(DeviceGraph::upload(g));
    for (const DeviceGraph& g : graphs) pointers.push_back(&g);
  }
};

void check_same(const BlockGraph& got, const BlockGraph& want) {
  CHECK(got.batch == want.batch);
  CHECK(got.heads == want.heads);
  CHECK(got.queries == want.queries);
  CHECK(got.keys == want.keys);
  CHECK(got.query_block == want.query_block);
  CHECK(got.key_block == want.key_block);
  CHECK(got.offsets == want.offsets);
  CHECK(got.blocks == want.blocks);
}

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "no exception";
}

// A host tensor's bytes on the device, and its view there.
struct OnDevice {
  DeviceArray<unsigned char> bytes;
  ConstBatchedTensor view;
  explicit OnDevice(const HostTensor& t)
      : bytes(t.bytes.data(), t.bytes.size()), view(t.view<const void*>(bytes.data())) {}
};

// Forward and backward of block-sparse attention from the host entry point
// (host tensors, host graph) and from the device one (device tensors, the
// device graph); outputs and gradients must be the same bytes.
void check_device_path(const BlockGraph& host_graph, const DeviceBlockGraph& device_graph, std::size_t batch,
                       std::size_t hq, std::size_t hkv, std::size_t n, std::size_t m, BatchedAttentionOptions options,
                       const Lengths& lengths, std::uint64_t seed) {
  const std::size_t d = 64;
  const HostTensor q = random_tensor(DType::bfloat16, Layout::bhnd, batch, hq, n, d, 1.0, seed);
  const HostTensor k = random_tensor(DType::bfloat16, Layout::bhnd, batch, hkv, m, d, 1.0, seed + 1);
  const HostTensor v = random_tensor(DType::bfloat16, Layout::bhnd, batch, hkv, m, d, 1.0, seed + 2);
  const HostTensor go = random_tensor(DType::bfloat16, Layout::bhnd, batch, hq, n, d, 1.0, seed + 3);
  const OnDevice dq(q), dk(k), dv(v), dgo(go);
  const auto cv = [](const HostTensor& t) { return t.view<const void*>(t.bytes.data()); };
  const auto mv = [](HostTensor& t) { return t.view<void*>(t.bytes.data()); };

  BatchedAttentionOptions host_options = options, device_options = options;
  const std::vector<std::int32_t> ql = lengths.query.empty() ? std::vector<std::int32_t>{0} : lengths.query,
                                  kl = lengths.key.empty() ? std::vector<std::int32_t>{0} : lengths.key;
  const DeviceArray<std::int32_t> query_lengths(ql.data(), ql.size()), key_lengths(kl.data(), kl.size());
  if (!lengths.query.empty()) {
    host_options.query_lengths = lengths.query.data();
    host_options.key_lengths = lengths.key.data();
    device_options.query_lengths = query_lengths.data();
    device_options.key_lengths = key_lengths.data();
  }

  HostTensor want(DType::bfloat16, Layout::bhnd, batch, hq, n, d), got = want;
  block_sparse_attention_forward(Device::cuda, cv(q), cv(k), cv(v), host_graph, mv(want), host_options);
  DeviceArray<unsigned char> out(got.bytes.data(), got.bytes.size());
  cuda::block_sparse_attention_forward(dq.view, dk.view, dv.view, device_graph, got.view<void*>(out.data()),
                                       device_options);
  out.download(got.bytes.data());
  CHECK(got.bytes == want.bytes);

  HostTensor wq(DType::float32, Layout::bhnd, batch, hq, n, d), wk(DType::float32, Layout::bhnd, batch, hkv, m, d),
      wv(DType::float32, Layout::bhnd, batch, hkv, m, d);
  HostTensor gq = wq, gk = wk, gv = wv;
  block_sparse_attention_backward(Device::cuda, cv(q), cv(k), cv(v), host_graph, cv(go), mv(wq), mv(wk), mv(wv),
                                  host_options);
  DeviceArray<unsigned char> dgq(gq.bytes.data(), gq.bytes.size()), dgk(gk.bytes.data(), gk.bytes.size()),
      dgv(gv.bytes.data(), gv.bytes.size());
  cuda::block_sparse_attention_backward(dq.view, dk.view, dv.view, device_graph, dgo.view, gq.view<void*>(dgq.data()),
                                        gk.view<void*>(dgk.data()), gv.view<void*>(dgv.data()), device_options);
  dgq.download(gq.bytes.data());
  dgk.download(gk.bytes.data());
  dgv.download(gv.bytes.data());
  CHECK(gq.bytes == wq.bytes);
  CHECK(gk.bytes == wk.bytes);
  CHECK(gv.bytes == wv.bytes);
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("block_cover: equals BlockGraph::cover for any block sizes, with empty, full and sparse rows") {
    struct Shape {
      std::size_t n, m, query_block, key_block;
    };
    // Sizes not multiples of the blocks; blocks of one key (more bitmap
    // words than the 256 threads); blocks wider than the graph.
    const Shape shapes[] = {{150, 200, 64, 64},  {150, 200, 16, 32}, {40, 70, 1, 1},
                            {150, 200, 128, 64}, {30, 9000, 7, 1},   {50, 60, 300, 100}};
    std::uint64_t seed = 1;
    for (const Shape& s : shapes)
      for (bool causal : {false, true})
        for (double keep : {0.01, 0.3}) {
          CAPTURE(s.n);
          CAPTURE(s.m);
          CAPTURE(s.query_block);
          CAPTURE(s.key_block);
          CAPTURE(causal);
          CAPTURE(keep);
          std::vector<Graph> graphs;
          for (std::size_t x = 0; x < 6; ++x) graphs.push_back(random_graph(s.n, s.m, keep, causal, seed++));
          const DeviceGraphs device(graphs);
          const BlockGraph want = BlockGraph::cover(graphs, 2, 3, s.query_block, s.key_block);
          check_same(block_cover(device.pointers, 2, 3, s.query_block, s.key_block).download(), want);
          want.validate("BlockGraph::cover");
        }
    // A graph without edges, and one of no queries.
    const std::vector<Graph> none = {Graph::empty(100, 80)}, no_rows = {Graph::empty(0, 80)};
    check_same(block_cover(DeviceGraphs(none).pointers, 1, 1, 64, 64).download(),
               BlockGraph::cover(none, 1, 1, 64, 64));
    check_same(block_cover(DeviceGraphs(no_rows).pointers, 1, 1, 64, 64).download(),
               BlockGraph::cover(no_rows, 1, 1, 64, 64));
  }

  TEST_CASE("DeviceBlockGraph: upload and download round-trip; bad graphs and calls are refused, naming them") {
    const BlockGraph g = BlockGraph::cover({random_graph(150, 200, 0.05, true, 9)}, 1, 1, 64, 32);
    check_same(DeviceBlockGraph::upload(g).download(), g);
    BlockGraph unsorted = g;
    REQUIRE(unsorted.offsets[1] >= 2);
    std::swap(unsorted.blocks[0], unsorted.blocks[1]);
    CHECK(error_of([&] { DeviceBlockGraph::upload(unsorted); }).find("DeviceBlockGraph::upload") != std::string::npos);

    const DeviceGraphs two({random_graph(20, 30, 0.3, false, 1), random_graph(20, 31, 0.3, false, 2)});
    const std::string op = "cuda::block_cover: ";
    CHECK(error_of([&] { block_cover({}, 1, 1, 64, 64); }) ==
          op + "graphs has 0 entries, expected batch x heads = 1 >= 1");
    CHECK(error_of([&] { block_cover(two.pointers, 1, 1, 64, 64); }) ==
          op + "graphs has 2 entries, expected batch x heads = 1 >= 1");
    CHECK(error_of([&] { block_cover(two.pointers, 1, 2, 64, 64); }) ==
          op + "graphs[1] is 20 x 31, expected the size of graphs[0], 20 x 30");
    CHECK(error_of([&] { block_cover({two.pointers[0], nullptr}, 2, 1, 64, 64); }) == op + "graphs[1] is null");
    CHECK(error_of([&] { block_cover({two.pointers[0]}, 1, 1, 0, 64); }) ==
          op + "query_block and key_block must be >= 1 (got 0 and 64)");
    const DeviceGraphs wide({Graph::empty(1, kMaxCoverKeyBlocks + 1)});
    CHECK(error_of([&] { block_cover(wide.pointers, 1, 1, 1, 1); }).find("above the GPU cover's") != std::string::npos);
    CHECK_NOTHROW(block_cover(wide.pointers, 1, 1, 1, 2));
  }

  TEST_CASE("block-sparse attention on device tensors from a device block graph: the host path's bytes") {
    BatchedAttentionOptions o;
    o.transform = Transform::entmax15();
    std::uint64_t seed = 40;
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      o.causal = causal;
      // Per (sequence, head) graphs, covered on the device; Hkv = 1 of Hq = 2.
      std::vector<Graph> graphs;
      for (std::size_t x = 0; x < 4; ++x) graphs.push_back(random_graph(130, 150, 0.02, causal, seed++));
      const DeviceGraphs device(graphs);
      check_device_path(BlockGraph::cover(graphs, 2, 2, 64, 64), block_cover(device.pointers, 2, 2, 64, 64), 2, 2, 1,
                        130, 150, o, {}, seed++);
      // One shared graph, uploaded, with lengths (device pointers on the device path).
      const BlockGraph shared = BlockGraph::cover({random_graph(130, 150, 0.05, causal, seed++)}, 64, 64);
      check_device_path(shared, DeviceBlockGraph::upload(shared), 2, 2, 1, 130, 150, o, {{130, 70}, {150, 100}},
                        seed++);
    }
  }

  TEST_CASE("a predictor's graph to blocks to attention, all on the device: lowrank-threshold's graph covered") {
    const std::size_t n = 130, d = 64;
    const HostTensor q = random_tensor(DType::bfloat16, Layout::bhnd, 1, 1, n, d, 1.0, 70);
    const HostTensor k = random_tensor(DType::bfloat16, Layout::bhnd, 1, 1, n, d, 1.0, 71);
    std::vector<float> q32(n * d), k32(n * d), identity(d * d, 0.0f);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < d; ++c) {
        q32[i * d + c] = static_cast<float>(q.get(0, 0, i, c) * 0.125);  // the attention's scale, 1 / sqrt(d)
        k32[i * d + c] = static_cast<float>(k.get(0, 0, i, c));
      }
    for (std::size_t c = 0; c < d; ++c) identity[c * d + c] = 1.0f;
    LowRankThresholdHead head;
    head.wq = head.wk = ConstMatrix<float>(identity.data(), d, d);
    const DeviceArray<float> dq(q32.data(), q32.size()), dk(k32.data(), k32.size());
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      const DeviceGraph predicted = lowrank_threshold_device_graph(head, dq.data(), n, dk.data(), n, d, causal);
      const Graph on_host = predicted.download();
      CHECK(on_host.edges() > n);
      CHECK(on_host.edges() < n * n / 4);  // sparse: the blocks are a real selection
      const DeviceBlockGraph blocks = block_cover({&predicted}, 1, 1, 64, 64);
      const BlockGraph want = BlockGraph::cover(on_host, 64, 64);
      check_same(blocks.download(), want);
      BatchedAttentionOptions o;
      o.transform = Transform::entmax15();
      o.causal = causal;
      check_device_path(want, blocks, 1, 1, 1, n, n, o, {}, 72);
    }
  }

  TEST_CASE("block-sparse attention from a device graph: what it cannot run is refused, naming it") {
    const HostTensor q = random_tensor(DType::bfloat16, Layout::bhnd, 1, 2, 64, 64, 1.0, 1);
    const OnDevice dq(q);
    HostTensor out(DType::bfloat16, Layout::bhnd, 1, 2, 64, 64);
    DeviceArray<unsigned char> d_out(out.bytes.data(), out.bytes.size());
    const BatchedTensor o = out.view<void*>(d_out.data());
    BatchedAttentionOptions options;
    const auto forward = [&](const DeviceBlockGraph& g) {
      return error_of([&] { cuda::block_sparse_attention_forward(dq.view, dq.view, dq.view, g, o, options); });
    };
    const std::string op = "cuda::block_sparse_attention_forward: ";
    CHECK(forward(DeviceBlockGraph::upload(BlockGraph::full(1, 1, 64, 64, 32, 32, false)))
              .find(op + "graph.query_block and graph.key_block are not supported (got 32 and 32") == 0);
    CHECK(forward(DeviceBlockGraph::upload(BlockGraph::full(1, 3, 64, 64, 64, 64, false)))
              .find("graph.heads does not match q.heads (got 3, expected 2 or 1)") != std::string::npos);
    CHECK(forward(DeviceBlockGraph::upload(BlockGraph::full(1, 1, 64, 65, 64, 64, false)))
              .find("graph.keys does not match k.rows (got 65, expected 64)") != std::string::npos);
    std::vector<unsigned char> after(out.bytes.size());
    d_out.download(after.data());
    CHECK(after == out.bytes);  // nothing written
  }
}

}  // namespace entgraph::cuda
