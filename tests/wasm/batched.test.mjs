// Training ops in the package: attentionBackward, batchedAttention(Backward),
// blockSparseAttention(Backward) and the block graph helpers.
// - Gradients of every transform (softmax, sparsemax, entmax15, entmax with
//   alpha 1.25, topk) against central finite differences of a float64
//   JavaScript forward: one head (causal and not), batched with grouped-query
//   heads and lengths, block-sparse on a sparse per-head block graph.
// - Batched attention is per-head attention: out and gradQ bit for bit per
//   (sequence, query head) on the valid rows (zeros past the lengths), gradK
//   and gradV the float32 sum in head order of the query heads sharing a
//   key/value head (batched_attention.hpp).
// - Block-sparse attention with every block kept equals batched attention,
//   and on a sparse block graph equals graph attention on its expansion.
// - Block graph helpers against plain JavaScript.
// - Bad input throws an Error with the core's message and code, and leaks nothing.
import assert from "node:assert/strict";
import { before, describe, test } from "node:test";

import { assertClose, loadPackage, randomNormal, rng } from "./helpers.mjs";

const TRANSFORMS = [
  { transform: "softmax" },
  { transform: "sparsemax" },
  { transform: "entmax15" },
  { transform: "entmax", alpha: 1.25 },
  { transform: "topk", topk: 2 },
];
const label = (t) => `${t.transform}${t.alpha ? ` alpha=${t.alpha}` : ""}${t.topk ? ` k=${t.topk}` : ""}`;

// Central differences: step and tolerance. The package's float32 gradients
// against float64 differences of float64 attention on the same float32
// inputs (relative above 1, absolute below: maxAbsDiff); measured: at most
// 4.8e-7 over every case here.
const STEP = 1e-5;
const FD_TOL = 1e-5;
// Two float32 computations of the same rows in other orders (block-sparse's
// GEMM per key block against batched attention's, or graph attention's
// gathered rows): the core's own bound (tests/attention).
const TOL = 1e-5;

// ---------------------------------------------------------------------------
// float64 reference.

const sum = (xs) => xs.reduce((a, b) => a + b, 0);

// alpha-entmax (alpha > 1; sparsemax is alpha 2) by bisection on the
// threshold tau of p_j = [(alpha - 1) z_j - tau]_+^(1 / (alpha - 1)), normalised.
function entmaxRow(z, alpha) {
  const a1 = alpha - 1;
  const x = z.map((s) => s * a1);
  const max = Math.max(...x);
  const probs = (tau) => x.map((s) => (s > tau ? (s - tau) ** (1 / a1) : 0));
  let lo = max - 1;
  let hi = max - (1 / z.length) ** a1;
  for (let it = 0; it < 200; ++it) {
    const mid = (lo + hi) / 2;
    if (sum(probs(mid)) >= 1) lo = mid;
    else hi = mid;
  }
  const p = probs((lo + hi) / 2);
  const total = sum(p);
  return p.map((x) => x / total);
}

function softmaxRow(z) {
  const max = Math.max(...z);
  const e = z.map((x) => Math.exp(x - max));
  const total = sum(e);
  return e.map((x) => x / total);
}

// Softmax over the k largest scores (all of them when the row has fewer).
function topkRow(z, k) {
  const kept = new Set([...z.keys()].sort((a, b) => z[b] - z[a]).slice(0, k));
  const p = softmaxRow(z.filter((_, j) => kept.has(j)));
  let next = 0;
  return z.map((_, j) => (kept.has(j) ? p[next++] : 0));
}

function transformRow(t, z) {
  switch (t.transform) {
    case "softmax": return softmaxRow(z);
    case "sparsemax": return entmaxRow(z, 2);
    case "entmax15": return entmaxRow(z, 1.5);
    case "entmax": return entmaxRow(z, t.alpha);
    case "topk": return topkRow(z, t.topk);
  }
  throw new Error(`no reference for ${t.transform}`);
}

// Batched attention in float64 (batched_attention.hpp): for each sequence b
// and query head h, key/value head g = floor(h / (heads / kvHeads)); query i
// < n_b sees key j < m_b when keep(b, h, i, j) and, causal, j <= i + m_b - n_b.
// One head is batch = heads = 1.
function referenceAttention(x, keep = () => true) {
  const { q, k, v, batch: B = 1, heads: H = 1, queries: n, keys: m, dim: d, causal } = x;
  const G = x.kvHeads ?? H;
  const dv = x.valueDim ?? d;
  const scale = x.scale || 1 / Math.sqrt(d);
  const out = new Float64Array(B * H * n * dv);
  for (let b = 0; b < B; ++b)
    for (let h = 0; h < H; ++h) {
      const g = Math.floor(h / (H / G));
      const nb = x.queryLengths?.[b] ?? n;
      const mb = x.keyLengths?.[b] ?? m;
      const qh = ((b * H + h) * n) * d, kh = ((b * G + g) * m) * d, vh = ((b * G + g) * m) * dv, oh = ((b * H + h) * n) * dv;
      for (let i = 0; i < nb; ++i) {
        const keys = [];
        const z = [];
        for (let j = 0; j < mb; ++j) {
          if ((causal && j > i + mb - nb) || !keep(b, h, i, j)) continue;
          let s = 0;
          for (let c = 0; c < d; ++c) s += q[qh + i * d + c] * k[kh + j * d + c];
          keys.push(j);
          z.push(scale * s);
        }
        if (keys.length === 0) continue;
        const p = transformRow(x, z);
        keys.forEach((j, e) => {
          for (let c = 0; c < dv; ++c) out[oh + i * dv + c] += p[e] * v[vh + j * dv + c];
        });
      }
    }
  return out;
}

// d/dq, d/dk, d/dv of sum(gradOut * out) by central differences, in float64.
function finiteDifferences(x, keep) {
  const inputs = { q: Float64Array.from(x.q), k: Float64Array.from(x.k), v: Float64Array.from(x.v) };
  const at = { ...x, ...inputs };
  const loss = () => {
    const out = referenceAttention(at, keep);
    let total = 0;
    for (let i = 0; i < out.length; ++i) total += x.gradOut[i] * out[i];
    return total;
  };
  const grads = {};
  for (const [name, a] of Object.entries(inputs)) {
    const g = new Float64Array(a.length);
    for (let i = 0; i < a.length; ++i) {
      const saved = a[i];
      a[i] = saved + STEP;
      const up = loss();
      a[i] = saved - STEP;
      const down = loss();
      a[i] = saved;
      g[i] = (up - down) / (2 * STEP);
    }
    grads[`grad${name.toUpperCase()}`] = g;
  }
  return grads;
}

function assertGradients(got, fd, what) {
  for (const name of ["gradQ", "gradK", "gradV"]) {
    assert.ok(got[name] instanceof Float32Array, `${what}: ${name} is a Float32Array`);
    assertClose(got[name], fd[name], FD_TOL, `${what}: ${name}`, { relative: true });
  }
}

// ---------------------------------------------------------------------------
// Problems.

// Random inputs of batched attention's shapes (one head: batch = heads = 1).
function problem({ batch = 1, heads = 1, kvHeads = heads, queries, keys, dim, valueDim = dim, seed, spread = 1.5, ...rest }) {
  return {
    batch, heads, kvHeads, queries, keys, dim, valueDim, ...rest,
    q: randomNormal(batch * heads * queries * dim, seed, spread),
    k: randomNormal(batch * kvHeads * keys * dim, seed + 1, spread),
    v: randomNormal(batch * kvHeads * keys * valueDim, seed + 2),
    gradOut: randomNormal(batch * heads * queries * valueDim, seed + 3),
  };
}

// The bits of a Float32Array, for comparisons bit for bit (-0 and +0 differ).
const bits = (a) => new Uint32Array(a.buffer, a.byteOffset, a.length);

function assertBits(got, expected, what) {
  assert.equal(got.length, expected.length, `${what}: length`);
  const g = bits(got), e = bits(expected);
  for (let i = 0; i < g.length; ++i)
    if (g[i] !== e[i]) assert.fail(`${what}: differs at ${i} (got ${got[i]}, expected ${expected[i]})`);
}

// Rows [0, rows) of head (b, h) of a contiguous (B, H, n, cols) array.
function headRows(a, b, h, H, n, cols, rows = n) {
  const start = ((b * H + h) * n) * cols;
  return a.subarray(start, start + rows * cols);
}

// A block graph of batch x heads graphs with a random choice of key blocks
// per block row (some rows empty).
function randomBlockGraph({ batch, heads, queries, keys, queryBlock, keyBlock, seed }) {
  const r = rng(seed);
  const rows = batch * heads * Math.ceil(queries / queryBlock);
  const keyBlocks = Math.ceil(keys / keyBlock);
  const offsets = new Uint32Array(rows + 1);
  const blocks = [];
  for (let row = 0; row < rows; ++row) {
    for (let j = 0; j < keyBlocks; ++j) if (r.uniform() < 0.5) blocks.push(j);
    offsets[row + 1] = blocks.length;
  }
  return { batch, heads, queries, keys, queryBlock, keyBlock, offsets, blocks: Uint32Array.from(blocks) };
}

// Whether graph g (a block graph object) keeps the block of (i, j) in graph (b, h).
function blockKept(g, b, h, i, j) {
  const row = ((g.batch === 1 ? 0 : b) * g.heads + (g.heads === 1 ? 0 : h)) * Math.ceil(g.queries / g.queryBlock) +
              Math.floor(i / g.queryBlock);
  const key = Math.floor(j / g.keyBlock);
  for (let e = g.offsets[row]; e < g.offsets[row + 1]; ++e) if (g.blocks[e] === key) return true;
  return false;
}

const plainBlockGraph = (g) => ({ ...g, offsets: Array.from(g.offsets), blocks: Array.from(g.blocks) });
const plainGraph = (g) => ({ queries: g.queries, keys: g.keys, offsets: Array.from(g.offsets), indices: Array.from(g.indices) });

// ---------------------------------------------------------------------------

describe("training ops: attention backward, batched and block-sparse attention", () => {
  let eg;
  before(async () => {
    eg = await loadPackage();
  });

  for (const t of TRANSFORMS) {
    for (const causal of [false, true]) {
      test(`attentionBackward, ${label(t)}${causal ? ", causal" : ""}: central differences of a float64 forward`, () => {
        // 4 queries over 6 keys: causal query i sees keys j <= i + 2.
        const x = { ...problem({ queries: 4, keys: 6, dim: 3, valueDim: 2, seed: causal ? 20 : 10 }), ...t, causal };
        const got = eg.attentionBackward(x);
        assertGradients(got, finiteDifferences(x), "attentionBackward");
        // The forward it differentiates: attention()'s, the reference to float32 rounding.
        assertClose(eg.attention(x).out, referenceAttention(x), TOL, "attention out");
        // The transforms with a threshold left weights at zero here (the sparse case is the one tested).
        if (t.transform !== "softmax")
          assert.ok(eg.attention({ ...x, probs: true }).probs.some((p) => p === 0), "some weight is zero");
        // An explicit scale, as the forward takes it.
        const scaled = { ...x, scale: 0.7 };
        assertGradients(eg.attentionBackward(scaled), finiteDifferences(scaled), "attentionBackward, scale 0.7");
      });
    }
  }

  // Two sequences, four query heads sharing two key/value heads, padded.
  const batched = { batch: 2, heads: 4, kvHeads: 2, queries: 5, keys: 7, dim: 3, valueDim: 2 };

  for (const t of TRANSFORMS) {
    test(`batchedAttentionBackward, ${label(t)}: central differences (grouped heads, lengths, causal)`, () => {
      const x = { ...problem({ ...batched, seed: 30 }), ...t, causal: true, queryLengths: new Int32Array([5, 3]), keyLengths: [7, 4] };
      assertGradients(eg.batchedAttentionBackward(x), finiteDifferences(x), "batchedAttentionBackward");
      assertClose(eg.batchedAttention(x).out, referenceAttention(x), TOL, "batchedAttention out");
    });

    test(`blockSparseAttentionBackward, ${label(t)}: central differences on a sparse per-head block graph`, () => {
      const shape = { batch: 2, heads: 2, kvHeads: 1, queries: 5, keys: 6, dim: 3, valueDim: 2 };
      const graph = randomBlockGraph({ ...shape, queryBlock: 2, keyBlock: 2, seed: 41 });
      const keep = (b, h, i, j) => blockKept(graph, b, h, i, j);
      for (const causal of [false, true]) {
        const x = { ...problem({ ...shape, seed: 40 }), ...t, causal, graph, queryLengths: [5, 4], keyLengths: [6, 5] };
        const what = `blockSparseAttention${causal ? ", causal" : ""}`;
        assertGradients(eg.blockSparseAttentionBackward(x), finiteDifferences(x, keep), what);
        assertClose(eg.blockSparseAttention(x).out, referenceAttention(x, keep), TOL, `${what}: out`);
      }
    });
  }

  // Per (sequence, head): attention() and attentionBackward() on the head's valid rows.
  const lengthCases = [
    { name: "full lengths", causal: false },
    { name: "causal, full lengths", causal: true },
    { name: "causal, lengths [5, 3] x [7, 4]", causal: true, queryLengths: [5, 3], keyLengths: new Int32Array([7, 4]) },
    { name: "lengths [2, 0] x [0, 7] (sequences without queries or keys)", causal: false, queryLengths: [2, 0], keyLengths: [0, 7] },
  ];
  for (const t of TRANSFORMS) {
    for (const c of lengthCases) {
      test(`batchedAttention, ${label(t)}, ${c.name}: per-head attention bit for bit, GQA sums in head order`, () => {
        const x = { ...problem({ ...batched, seed: 50 }), ...t, ...c };
        const { batch: B, heads: H, kvHeads: G, queries: n, keys: m, dim: d, valueDim: dv } = x;
        const { out } = eg.batchedAttention(x);
        const grads = eg.batchedAttentionBackward(x);
        assert.equal(out.length, B * H * n * dv);
        for (let b = 0; b < B; ++b) {
          const nb = x.queryLengths?.[b] ?? n;
          const mb = x.keyLengths?.[b] ?? m;
          const live = nb > 0 && mb > 0;
          for (let g = 0; g < G; ++g) {
            // Key/value gradients: the float32 sum in head order, starting from +0 as the core's does.
            const sumK = new Float32Array(mb * d);
            const sumV = new Float32Array(mb * dv);
            for (let h = g * (H / G); h < (g + 1) * (H / G); ++h) {
              const where = `sequence ${b}, head ${h}`;
              const head = {
                ...t, causal: x.causal, queries: nb, keys: mb, dim: d, valueDim: dv,
                q: headRows(x.q, b, h, H, n, d, nb), k: headRows(x.k, b, g, G, m, d, mb), v: headRows(x.v, b, g, G, m, dv, mb),
                gradOut: headRows(x.gradOut, b, h, H, n, dv, nb),
              };
              const rowsOut = headRows(out, b, h, H, n, dv);
              const rowsGradQ = headRows(grads.gradQ, b, h, H, n, d);
              if (live) {
                assertBits(rowsOut.subarray(0, nb * dv), eg.attention(head).out, `${where}: out`);
                const one = eg.attentionBackward(head);
                assertBits(rowsGradQ.subarray(0, nb * d), one.gradQ, `${where}: gradQ`);
                for (let e = 0; e < sumK.length; ++e) sumK[e] = Math.fround(sumK[e] + one.gradK[e]);
                for (let e = 0; e < sumV.length; ++e) sumV[e] = Math.fround(sumV[e] + one.gradV[e]);
              }
              // Rows past the sequence's queries (all of them without keys) are zeros.
              assertBits(rowsOut.subarray(live ? nb * dv : 0), new Float32Array(live ? (n - nb) * dv : n * dv), `${where}: padded out`);
              assertBits(rowsGradQ.subarray(live ? nb * d : 0), new Float32Array(live ? (n - nb) * d : n * d), `${where}: padded gradQ`);
            }
            const where = `sequence ${b}, key/value head ${g}`;
            const rowsK = headRows(grads.gradK, b, g, G, m, d), rowsV = headRows(grads.gradV, b, g, G, m, dv);
            const keptK = live ? mb * d : 0, keptV = live ? mb * dv : 0;
            if (live) {
              assertBits(rowsK.subarray(0, keptK), sumK, `${where}: gradK`);
              assertBits(rowsV.subarray(0, keptV), sumV, `${where}: gradV`);
            }
            assertBits(rowsK.subarray(keptK), new Float32Array(m * d - keptK), `${where}: padded gradK`);
            assertBits(rowsV.subarray(keptV), new Float32Array(m * dv - keptV), `${where}: padded gradV`);
          }
        }
      });
    }
  }

  for (const t of TRANSFORMS) {
    test(`blockSparseAttention, ${label(t)}: every block kept equals batched attention, forward and backward`, () => {
      // 9 queries and 11 keys in blocks of 4 and 3: partial last blocks.
      const shape = { batch: 2, heads: 4, kvHeads: 2, queries: 9, keys: 11, dim: 4, valueDim: 3 };
      for (const causal of [false, true]) {
        const x = { ...problem({ ...shape, seed: 60 }), ...t, causal, queryLengths: [9, 6], keyLengths: [11, 8] };
        const dense = eg.batchedAttention(x).out;
        const denseGrads = eg.batchedAttentionBackward(x);
        const graphs = [
          ["shared full graph", eg.fullBlockGraph({ queries: 9, keys: 11, queryBlock: 4, keyBlock: 3 })],
          ["per-head full graphs", eg.fullBlockGraph({ batch: 2, heads: 4, queries: 9, keys: 11, queryBlock: 4, keyBlock: 3 })],
        ];
        for (const [name, graph] of graphs) {
          const what = `${name}${causal ? ", causal" : ""}`;
          assertClose(eg.blockSparseAttention({ ...x, graph }).out, dense, TOL, `${what}: out`);
          const grads = eg.blockSparseAttentionBackward({ ...x, graph });
          for (const g of ["gradQ", "gradK", "gradV"]) assertClose(grads[g], denseGrads[g], TOL, `${what}: ${g}`, { relative: true });
        }
        // Causal blocks only: the blocks left out hold no pair the causal rule allows over n x m
        // (a sequence's lengths shift the rule, so at full lengths).
        if (causal) {
          const full = { ...x, queryLengths: undefined, keyLengths: undefined };
          const graph = eg.fullBlockGraph({ queries: 9, keys: 11, queryBlock: 4, keyBlock: 3, causal: true });
          assertClose(eg.blockSparseAttention({ ...full, graph }).out, eg.batchedAttention(full).out, TOL, "causal blocks: out");
        }
      }
    });

    test(`blockSparseAttention, ${label(t)}: a sparse block graph equals graph attention on its expansion`, () => {
      const shape = { batch: 1, heads: 2, queries: 12, keys: 12, dim: 4, valueDim: 3 };
      const x = { ...problem({ ...shape, seed: 70 }), ...t, causal: true };
      // A window graph per head, rounded up to blocks of 4 x 4.
      const window = (w) => {
        const offsets = new Uint32Array(13);
        const indices = [];
        for (let i = 0; i < 12; ++i) {
          for (let j = Math.max(0, i - w); j <= Math.min(11, i + w); ++j) indices.push(j);
          offsets[i + 1] = indices.length;
        }
        return { queries: 12, keys: 12, offsets, indices: Uint32Array.from(indices) };
      };
      const graph = eg.blockGraph([window(1), window(5)], { queryBlock: 4, keyBlock: 4, heads: 2 });
      const { out } = eg.blockSparseAttention({ ...x, graph });
      for (let h = 0; h < 2; ++h) {
        const expanded = eg.expandBlockGraph(graph, { head: h });
        const one = eg.graphAttention({ ...t, causal: true, queries: 12, keys: 12, dim: 4, valueDim: 3, graph: expanded,
                                        q: headRows(x.q, 0, h, 2, 12, 4), k: headRows(x.k, 0, h, 2, 12, 4), v: headRows(x.v, 0, h, 2, 12, 3) });
        assertClose(headRows(out, 0, h, 2, 12, 3), one.out, TOL, `head ${h}`);
      }
    });
  }

  test("block graph helpers: blockGraph (cover), fullBlockGraph, expandBlockGraph against plain JavaScript", () => {
    // A graph of 5 queries over 7 keys; blocks of 2 queries x 3 keys.
    const graph = { queries: 5, keys: 7, offsets: new Uint32Array([0, 2, 2, 3, 5, 6]), indices: new Uint32Array([0, 6, 4, 1, 2, 5]) };
    const cover = eg.blockGraph(graph, { queryBlock: 2, keyBlock: 3 });
    assert.ok(cover.offsets instanceof Uint32Array && cover.blocks instanceof Uint32Array);
    // Block rows: queries {0, 1} -> keys 0, 6 -> blocks 0, 2; {2, 3} -> keys 4, 1, 2 -> blocks 0, 1; {4} -> key 5 -> block 1.
    assert.deepEqual(plainBlockGraph(cover), { batch: 1, heads: 1, queries: 5, keys: 7, queryBlock: 2, keyBlock: 3,
                                               offsets: [0, 2, 4, 5], blocks: [0, 2, 0, 1, 1] });
    // Expanded: every key of every kept block, cut at the keys.
    const expanded = eg.expandBlockGraph(cover);
    assert.deepEqual(plainGraph(expanded), {
      queries: 5, keys: 7, offsets: [0, 4, 8, 14, 20, 23],
      indices: [0, 1, 2, 6, 0, 1, 2, 6, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 3, 4, 5],
    });
    // Over the first 3 queries and 5 keys.
    assert.deepEqual(plainGraph(eg.expandBlockGraph(cover, { queries: 3, keys: 5 })),
                     { queries: 3, keys: 5, offsets: [0, 3, 6, 11], indices: [0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4] });
    // Several graphs: graphs[b * heads + h]; heads defaults to graphs / batch.
    const empty = { queries: 5, keys: 7, offsets: new Uint32Array(6), indices: new Uint32Array(0) };
    const two = eg.blockGraph([graph, empty, empty, graph], { queryBlock: 2, keyBlock: 3, batch: 2 });
    assert.equal(two.batch, 2);
    assert.equal(two.heads, 2);
    assert.deepEqual(Array.from(two.offsets), [0, 2, 4, 5, 5, 5, 5, 5, 5, 5, 7, 9, 10]);
    assert.deepEqual(plainGraph(eg.expandBlockGraph(two, { sequence: 1, head: 1 })), plainGraph(expanded));
    // Full: every block; causal: the blocks holding a pair j <= i + (keys - queries).
    const full = eg.fullBlockGraph({ batch: 2, heads: 3, queries: 5, keys: 7, queryBlock: 2, keyBlock: 3 });
    assert.deepEqual([full.batch, full.heads, full.offsets.length, full.blocks.length], [2, 3, 2 * 3 * 3 + 1, 2 * 3 * 3 * 3]);
    const causal = eg.fullBlockGraph({ queries: 5, keys: 7, queryBlock: 2, keyBlock: 3, causal: true });
    // Query blocks end at queries 1, 3, 4, seeing keys up to 3, 5, 6: key blocks [0, 1], [0, 1], [0, 1, 2].
    assert.deepEqual(plainBlockGraph(causal), { batch: 1, heads: 1, queries: 5, keys: 7, queryBlock: 2, keyBlock: 3,
                                                offsets: [0, 2, 4, 7], blocks: [0, 1, 0, 1, 0, 1, 2] });
    // Defaults: blocks of 64.
    const big = eg.fullBlockGraph({ queries: 130, keys: 65 });
    assert.deepEqual([big.queryBlock, big.keyBlock, big.offsets.length, big.blocks.length], [64, 64, 4, 6]);
    // A block graph from the package goes back in as it came out (plain arrays too).
    assert.deepEqual(plainGraph(eg.expandBlockGraph(plainBlockGraph(cover))), plainGraph(expanded));
  });

  // -------------------------------------------------------------------------
  // Bad input: the core's message after the call's name, its code, nothing returned or kept.

  function thrown(fn, what) {
    let result;
    try {
      result = fn();
    } catch (e) {
      assert.ok(e instanceof Error, `${what}: threw ${Object.prototype.toString.call(e)}, not an Error`);
      return e;
    }
    assert.fail(`${what}: did not throw (returned ${result})`);
  }

  test("bad input throws an Error with the core's message and code", () => {
    const x = { ...problem({ ...batched, seed: 80 }), transform: "entmax15" };
    const one = { ...problem({ queries: 4, keys: 6, dim: 3, valueDim: 2, seed: 81 }) };
    const graph = eg.fullBlockGraph({ batch: 2, heads: 4, queries: 5, keys: 7, queryBlock: 2, keyBlock: 3 });
    const nan = (a, at) => {
      const b = Float32Array.from(a);
      b[at] = NaN;
      return b;
    };
    const cases = [
      // Shapes: the package's check of each array against the sizes given.
      ["q of the wrong size", () => eg.batchedAttention({ ...x, q: x.q.subarray(1) }),
       "batchedAttention: q: expected 120 values, got 119", "bad_argument"],
      ["v of the wrong size", () => eg.batchedAttentionBackward({ ...x, valueDim: 3 }),
       "batchedAttentionBackward: v: expected 84 values, got 56", "bad_argument"],
      ["gradOut of the wrong size", () => eg.batchedAttentionBackward({ ...x, gradOut: x.gradOut.subarray(2) }),
       "batchedAttentionBackward: gradOut: expected 80 values, got 78", "bad_argument"],
      ["one head's gradOut of the wrong size", () => eg.attentionBackward({ ...one, gradOut: new Float32Array(7) }),
       "attentionBackward: gradOut: expected 8 values, got 7", "bad_argument"],
      ["lengths of the wrong count", () => eg.batchedAttention({ ...x, keyLengths: [7] }),
       "batchedAttention: keyLengths: expected 2 values (one per sequence), got 1", "bad_argument"],
      // The core's checks.
      ["Hq not a multiple of Hkv", () => eg.batchedAttention({ ...x, heads: 3, q: new Float32Array(2 * 3 * 5 * 3) }),
       "batchedAttention: q.heads is not a multiple of k.heads (got 3 query heads and 2 key/value heads, expected Hq a multiple of Hkv)",
       "bad_argument"],
      ["zero sequences", () => eg.batchedAttention({ ...x, batch: 0, q: [], k: [], v: [] }),
       "batchedAttention: q.batch is 0 (got 0, expected batch >= 1)", "bad_argument"],
      ["a query length past n", () => eg.batchedAttention({ ...x, queryLengths: new Int32Array([5, 6]) }),
       "batchedAttention: options.query_lengths[1] is out of range (got 6, expected 0 <= length <= n = 5)", "bad_argument"],
      ["a negative key length", () => eg.batchedAttentionBackward({ ...x, keyLengths: [-1, 7] }),
       "batchedAttentionBackward: options.key_lengths[0] is out of range (got -1, expected 0 <= length <= m = 7)", "bad_argument"],
      ["NaN in q", () => eg.batchedAttention({ ...x, q: nan(x.q, 17) }),
       "batchedAttention: q has a non-finite entry at [0, 1, 0, 2] (got NaN, expected a finite number)", "bad_value"],
      ["NaN in v", () => eg.blockSparseAttention({ ...x, graph, v: nan(x.v, 3) }),
       "blockSparseAttention: v has a non-finite entry at [0, 0, 1, 1] (got NaN, expected a finite number)", "bad_value"],
      ["NaN in gradOut", () => eg.batchedAttentionBackward({ ...x, gradOut: nan(x.gradOut, 10) }),
       "batchedAttentionBackward: grad_out has a non-finite entry at [0, 1, 0, 0] (got NaN, expected a finite number)", "bad_value"],
      ["NaN in one head's gradOut", () => eg.attentionBackward({ ...one, gradOut: nan(one.gradOut, 3) }),
       "attentionBackward: gradOut has a non-finite entry at (1, 1) (got NaN, expected a finite number)", "bad_value"],
      ["NaN in one head's k", () => eg.attentionBackward({ ...one, k: nan(one.k, 4) }),
       "attentionBackward: k has a non-finite entry at (1, 1) (got NaN, expected a finite number)", "bad_value"],
      ["entmax alpha 0.5", () => eg.batchedAttention({ ...x, transform: "entmax", alpha: 0.5 }),
       "batchedAttention: alpha is out of range (got 0.5, expected 1 <= alpha <= 1000)", "bad_argument"],
      ["topk without k", () => eg.blockSparseAttentionBackward({ ...x, graph, transform: "topk" }),
       "blockSparseAttentionBackward: topk is 0 for topk (got 0, expected k >= 1)", "bad_argument"],
      // Block graphs: their fit to the tensors, their invariants.
      ["a graph of other queries", () => eg.blockSparseAttention({ ...x, graph: { ...graph, queries: 6 } }),
       "blockSparseAttention: graph.queries does not match queries (got 6, expected 5)", "bad_argument"],
      ["a graph of other heads", () => eg.blockSparseAttention({ ...x, graph: eg.fullBlockGraph({ heads: 2, queries: 5, keys: 7 }) }),
       "blockSparseAttention: graph.heads does not match heads (got 2, expected 4 or 1)", "bad_argument"],
      ["unsorted key blocks", () => eg.blockSparseAttentionBackward({ ...x, graph: { ...graph, blocks: graph.blocks.map((b, i) => (i === 1 ? 0 : b)) } }),
       "blockSparseAttentionBackward: graph: the key blocks of block row 0 are not sorted and unique", "bad_argument"],
      ["a key block out of range", () => eg.blockSparseAttention({ ...x, graph: { ...graph, blocks: graph.blocks.map((b, i) => (i === 2 ? 3 : b)) } }),
       "blockSparseAttention: graph: block row 0 has key block 3, not below 3 = ceil(keys / key_block)", "bad_argument"],
      ["offsets of the wrong count", () => eg.blockSparseAttention({ ...x, graph: { ...graph, offsets: graph.offsets.subarray(1) } }),
       "blockSparseAttention: graph: offsets has 24 entries, expected batch x heads x query blocks + 1 = 25", "bad_argument"],
      ["a block size of 0", () => eg.blockSparseAttention({ ...x, graph: { ...graph, keyBlock: 0 } }),
       "blockSparseAttention: graph.keyBlock: expected a whole number >= 1 (got 0)", "bad_argument"],
      ["no graph", () => eg.blockSparseAttention(x),
       "blockSparseAttention: graph: not a block graph (expected {batch, heads, queries, keys, queryBlock, keyBlock, offsets, blocks})",
       "bad_argument"],
      ["cover of too few graphs", () => eg.blockGraph([eg.expandBlockGraph(graph)], { heads: 2 }),
       "blockGraph: graphs has 1 entries, expected batch x heads = 2 >= 1", "bad_argument"],
      ["expand outside the graphs", () => eg.expandBlockGraph(graph, { head: 4 }),
       "expandBlockGraph: graph (0, 4) over 5 x 7 is outside 2 x 4 graphs of 5 x 7", "bad_argument"],
      // The package's own checks of its arguments.
      ["a fractional length", () => eg.batchedAttention({ ...x, queryLengths: [2.5, 1] }),
       "batchedAttention: queryLengths[0]: expected a whole number of 32 bits (got 2.5)", "bad_argument"],
      ["lengths not an array", () => eg.batchedAttention({ ...x, queryLengths: 5 }),
       "queryLengths: expected an Int32Array or an array of whole numbers (got number 5)", "bad_argument"],
      ["a block size of 0 asked for", () => eg.fullBlockGraph({ queries: 5, keys: 7, queryBlock: 0 }),
       "queryBlock: expected a whole number >= 1 (got number 0)", "bad_argument"],
      ["heads missing", () => eg.batchedAttention({ ...x, heads: undefined }),
       "heads: expected a whole number >= 0 (got undefined undefined)", "bad_argument"],
    ];
    for (const [what, fn, message, code] of cases) {
      const e = thrown(fn, what);
      assert.equal(e.message, message, what);
      assert.equal(e.code, code, `${what}: code`);
    }
  });

  test("failing calls keep no wasm memory", () => {
    const x = { ...problem({ ...batched, seed: 90 }), transform: "sparsemax" };
    const graph = eg.fullBlockGraph({ batch: 2, heads: 4, queries: 5, keys: 7, queryBlock: 2, keyBlock: 3 });
    const q = Float32Array.from(x.q);
    q[5] = NaN;
    const bad = [
      () => eg.batchedAttention({ ...x, q }),
      () => eg.batchedAttentionBackward({ ...x, queryLengths: [9, 0] }),
      () => eg.blockSparseAttention({ ...x, graph: { ...graph, queries: 4 } }),
      () => eg.blockSparseAttentionBackward({ ...x, graph, gradOut: x.gradOut.map(() => Infinity) }),
      () => eg.attentionBackward({ ...x, batch: undefined, queries: 5, keys: 7, q: x.q.subarray(0, 15), k: x.k.subarray(0, 21),
                                   v: x.v.subarray(0, 14), gradOut: new Float32Array(10).fill(NaN) }),
    ];
    const run = (calls) => {
      for (let i = 0; i < calls; ++i) assert.throws(bad[i % bad.length]);
    };
    run(20);
    const allocated = eg.allocatedBytes();
    run(500);
    assert.ok(eg.allocatedBytes() - allocated <= 256, `allocatedBytes grew by ${eg.allocatedBytes() - allocated} bytes over 500 failing calls`);
  });
});
