// Attention in the package: dense eg.attention vs a float64 JavaScript
// reference (softmax, sparsemax, entmax15), vs eg.graphAttention on the full
// graph (every row certified), graph attention on a sparse graph (certified
// rows exact, recomputeUncertified makes every row exact), and the graph
// helpers (goldGraph, compareGraphs, graphUnion) against plain JavaScript.
import assert from "node:assert/strict";
import { before, describe, test } from "node:test";

import { assertClose, fullGraph, loadPackage, plainGraph, randomNormal } from "./helpers.mjs";

// float32 attention vs float64: scores of a few units, rows of tens of keys.
const REF_TOL = 1e-5;
// Graph attention vs dense attention, two float32 computations of the same
// rows (gathered dot products vs the blocked matmul, other summation orders):
// 1e-5, the bound of the core's own tests (tests/attention). Measured here:
// up to 4.5e-6 on rows recomputed densely with recomputeUncertified.
const TOL = 1e-5;

// ---------------------------------------------------------------------------
// float64 reference transforms on one row (entries of -Infinity excluded).
function softmaxRow(z) {
  const max = Math.max(...z);
  const e = z.map((x) => Math.exp(x - max));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
}

function sparsemaxRow(z) {
  const sorted = [...z].sort((a, b) => b - a);
  let cum = 0;
  let tau = 0;
  for (let k = 1; k <= sorted.length; ++k) {
    cum += sorted[k - 1];
    if (1 + k * sorted[k - 1] > cum) tau = (cum - 1) / k;
  }
  return z.map((x) => Math.max(x - tau, 0));
}

// 1.5-entmax by sorting (Peters et al. 2019): p = [z/2 - tau]_+^2.
function entmax15Row(z) {
  const x = z.map((v) => v / 2);
  const sorted = [...x].sort((a, b) => b - a);
  let sum = 0;
  let sumSq = 0;
  let tauStar = 0;
  for (let k = 1; k <= sorted.length; ++k) {
    sum += sorted[k - 1];
    sumSq += sorted[k - 1] ** 2;
    const mean = sum / k;
    const ss = k * (sumSq / k - mean * mean);
    const delta = Math.max((1 - ss) / k, 0);
    const tau = mean - Math.sqrt(delta);
    if (tau <= sorted[k - 1]) tauStar = tau;
  }
  return x.map((v) => Math.max(v - tauStar, 0) ** 2);
}

const REFERENCES = { softmax: softmaxRow, sparsemax: sparsemaxRow, entmax15: entmax15Row };

// O = pi(scale Q K^T) V in float64; the causal rule of attention.hpp: query i
// of n sees keys j < i + 1 + (m - n).
function referenceAttention({ q, k, v, queries: n, keys: m, dim: d, valueDim: dv, transform, causal, scale }) {
  const out = new Float64Array(n * dv);
  const probs = new Float64Array(n * m);
  for (let i = 0; i < n; ++i) {
    const limit = causal ? Math.max(0, Math.min(m, i + 1 + m - n)) : m;
    if (limit === 0) continue;
    const z = [];
    for (let j = 0; j < limit; ++j) {
      let s = 0;
      for (let c = 0; c < d; ++c) s += q[i * d + c] * k[j * d + c];
      z.push(scale * s);
    }
    const p = REFERENCES[transform](z);
    for (let j = 0; j < limit; ++j) {
      probs[i * m + j] = p[j];
      for (let c = 0; c < dv; ++c) out[i * dv + c] += p[j] * v[j * dv + c];
    }
  }
  return { out, probs };
}

// query i linked to keys i - w ... i + w.
function windowGraph(n, m, w) {
  const offsets = new Uint32Array(n + 1);
  const idx = [];
  for (let i = 0; i < n; ++i) {
    for (let j = Math.max(0, i - w); j <= Math.min(m - 1, i + w); ++j) idx.push(j);
    offsets[i + 1] = idx.length;
  }
  return { queries: n, keys: m, offsets, indices: Uint32Array.from(idx) };
}

function edgeSet(g) {
  const s = new Set();
  for (let i = 0; i < g.queries; ++i) for (let e = g.offsets[i]; e < g.offsets[i + 1]; ++e) s.add(i * g.keys + g.indices[e]);
  return s;
}

const PROBLEMS = [
  { name: "self-attention 37x37", queries: 37, keys: 37, dim: 16, valueDim: 8, causal: false, seed: 11 },
  { name: "causal self-attention 37x37", queries: 37, keys: 37, dim: 16, valueDim: 8, causal: true, seed: 12 },
  { name: "causal decoding 5 queries over 40 keys", queries: 5, keys: 40, dim: 16, valueDim: 8, causal: true, seed: 13 },
  { name: "cross-attention 20x70, dim 33", queries: 20, keys: 70, dim: 33, valueDim: 5, causal: false, seed: 14 },
];

function makeProblem(p) {
  return {
    ...p,
    q: randomNormal(p.queries * p.dim, p.seed, 1.5),
    k: randomNormal(p.keys * p.dim, p.seed + 1, 1.5),
    v: randomNormal(p.keys * p.valueDim, p.seed + 2),
    scale: 1 / Math.sqrt(p.dim),
  };
}

describe("attention", () => {
  let eg;
  before(async () => {
    eg = await loadPackage();
  });

  for (const spec of PROBLEMS) {
    const prob = makeProblem(spec);
    const { q, k, v, queries, keys, dim, valueDim, causal, scale } = prob;
    const base = { q, k, v, queries, keys, dim, valueDim, causal };

    for (const transform of ["softmax", "sparsemax", "entmax15"]) {
      test(`${spec.name}, ${transform}: dense attention equals the float64 reference to ${REF_TOL}`, () => {
        const ref = referenceAttention({ ...prob, transform });
        const r = eg.attention({ ...base, transform, scale, probs: true });
        assert.ok(r.out instanceof Float32Array);
        assert.equal(r.out.length, queries * valueDim);
        assert.equal(r.probs.length, queries * keys);
        assertClose(r.out, ref.out, REF_TOL, "out");
        assertClose(r.probs, ref.probs, REF_TOL, "probs");
        // scale omitted = 1/sqrt(dim); probs omitted = none returned.
        const d = eg.attention({ ...base, transform });
        assert.deepEqual(d.out, r.out);
        assert.equal(d.probs, undefined);
      });
    }

    const transforms = [
      { transform: "softmax" },
      { transform: "sparsemax" },
      { transform: "entmax15" },
      { transform: "entmax", alpha: 1.3 },
      { transform: "entmax", alpha: 3 },
      { transform: "topk", topk: 4 },
    ];
    for (const t of transforms) {
      const label = `${t.transform}${t.alpha ? ` alpha=${t.alpha}` : ""}${t.topk ? ` k=${t.topk}` : ""}`;
      test(`${spec.name}, ${label}: graph attention on the full graph equals dense attention`, () => {
        const dense = eg.attention({ ...base, ...t, scale });
        const g = eg.graphAttention({ ...base, ...t, scale, graph: fullGraph(queries, keys) });
        assertClose(g.out, dense.out, TOL, "out");
        assert.ok(g.certified instanceof Uint8Array);
        assert.equal(g.certified.length, queries);
        assert.equal(g.certifiedRows, queries, "every row holds every allowed key, so every row is certified");
        assert.ok(g.certified.every((c) => c === 1));
        assert.equal(g.recomputedRows, 0);
      });

      test(`${spec.name}, ${label}: graph attention on a window graph: certified rows exact, recomputed rows exact`, () => {
        const dense = eg.attention({ ...base, ...t, scale });
        const graph = windowGraph(queries, keys, 6);
        const g = eg.graphAttention({ ...base, ...t, scale, graph });
        for (let i = 0; i < queries; ++i)
          if (g.certified[i])
            assertClose(
              g.out.subarray(i * valueDim, (i + 1) * valueDim),
              dense.out.subarray(i * valueDim, (i + 1) * valueDim),
              TOL,
              `certified row ${i}`,
            );
        assert.equal(
          g.certifiedRows,
          g.certified.reduce((a, b) => a + b, 0),
        );
        const r = eg.graphAttention({ ...base, ...t, scale, graph, recomputeUncertified: true });
        assertClose(r.out, dense.out, TOL, "out with recomputeUncertified");
        assert.equal(r.certifiedRows + r.recomputedRows, queries);
        // certify: false certifies only the rows holding every allowed key.
        const fast = eg.graphAttention({ ...base, ...t, scale, graph, certify: false });
        for (let i = 0; i < queries; ++i) {
          const limit = causal ? Math.max(0, Math.min(keys, i + 1 + keys - queries)) : keys;
          const full = Math.max(0, i - 6) === 0 && Math.min(keys - 1, i + 6) >= limit - 1;
          assert.equal(fast.certified[i], full ? 1 : 0, `certify: false, row ${i}`);
        }
      });
    }

    test(`${spec.name}: goldGraph is the support of entmax15 attention; compareGraphs and graphUnion`, () => {
      const gold = eg.goldGraph(q, k, { queries, keys, dim, alpha: 1.5, causal, scale });
      assert.equal(gold.queries, queries);
      assert.equal(gold.keys, keys);
      assert.ok(gold.offsets instanceof Uint32Array);
      assert.ok(gold.indices instanceof Uint32Array);
      const { probs } = eg.attention({ ...base, transform: "entmax15", scale, probs: true });
      const support = new Set();
      for (let i = 0; i < queries; ++i) for (let j = 0; j < keys; ++j) if (probs[i * keys + j] > 0) support.add(i * keys + j);
      assert.deepEqual(edgeSet(gold), support);
      // Sorted rows.
      for (let i = 0; i < queries; ++i)
        for (let e = gold.offsets[i] + 1; e < gold.offsets[i + 1]; ++e) assert.ok(gold.indices[e - 1] < gold.indices[e]);

      const pred = windowGraph(queries, keys, 3);
      const m = eg.compareGraphs(pred, gold, causal);
      const allowedOf = (i) => (causal ? Math.max(0, Math.min(keys, i + 1 + keys - queries)) : keys);
      let allowed = 0;
      for (let i = 0; i < queries; ++i) allowed += allowedOf(i);
      const predSet = [...edgeSet(pred)].filter((e) => e % keys < allowedOf(Math.floor(e / keys)));
      const hits = predSet.filter((e) => support.has(e)).length;
      assert.equal(m.gold, support.size);
      assert.equal(m.predicted, predSet.length);
      assert.equal(m.hits, hits);
      assert.equal(m.allowed, allowed);
      assert.equal(m.queries, queries);
      assert.equal(m.sparsity, 1 - predSet.length / allowed);
      assert.equal(m.goldSparsity, 1 - support.size / allowed);
      assert.equal(m.recall, hits / support.size);
      assert.equal(m.precision, hits / predSet.length);

      const u = eg.graphUnion(pred, gold);
      assert.deepEqual(edgeSet(u), new Set([...edgeSet(pred), ...support]));
      assert.deepEqual(plainGraph(eg.graphUnion(gold, gold)), plainGraph(gold));
    });
  }
});
