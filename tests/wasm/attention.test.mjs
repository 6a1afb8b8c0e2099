// Attention in the package: dense eg.attention vs a float64 JavaScript
// reference (softmax, sparsemax, entmax15), vs eg.graphAttention in its three
// modes: on the full graph (every row settled by the graph), on a window graph
// (fast: only complete rows settled; certify: the same output, certified rows
// exact; exact: every row equals dense attention, settled codes 1-3 adding up
// to the rows; softmax has no threshold and throws), exact mode on every head
// of both teachers with a predicted graph, and the graph helpers (goldGraph,
// compareGraphs, graphUnion) against plain JavaScript.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { assertClose, fullGraph, heldoutText, loadPackage, loadTeacher, plainGraph, randomNormal } from "./helpers.mjs";

// float32 attention vs float64: scores of a few units, rows of tens of keys.
const REF_TOL = 1e-5;
// Graph attention vs dense attention, two float32 computations of the same
// rows (gathered dot products vs the blocked matmul, other summation orders):
// 1e-5, the bound of the core's own tests (tests/attention). Measured here:
// up to 4.5e-6 on rows repaired or computed densely by mode "exact".
const TOL = 1e-5;

// Allowed (query, key) pairs: query i of n sees keys j < i + 1 + (m - n) when causal.
function allowedPairs(n, m, causal) {
  let total = 0;
  for (let i = 0; i < n; ++i) total += causal ? Math.max(0, Math.min(m, i + 1 + m - n)) : m;
  return total;
}

const count = (codes, code) => codes.reduce((a, c) => a + (c === code ? 1 : 0), 0);
const row = (out, i, cols) => out.subarray(i * cols, (i + 1) * cols);

// An exact-mode report: every row settled (1 graph, 2 repaired, 3 dense), the counts are the codes'.
function checkExactReport(r, queries, what = "exact") {
  assert.ok(r.settled instanceof Uint8Array, `${what}: settled is a Uint8Array`);
  assert.equal(r.settled.length, queries, `${what}: settled per row`);
  assert.ok(r.settled.every((c) => c === 1 || c === 2 || c === 3), `${what}: settled codes in {1, 2, 3}`);
  assert.equal(r.graphRows, count(r.settled, 1), `${what}: graphRows`);
  assert.equal(r.repairedRows, count(r.settled, 2), `${what}: repairedRows`);
  assert.equal(r.denseRows, count(r.settled, 3), `${what}: denseRows`);
  assert.equal(r.graphRows + r.repairedRows + r.denseRows, queries, `${what}: the counts add up to the rows`);
  // A repaired row gained a key with weight; rows exact by the graph alone may
  // still have cost scored pairs (keys that turned out to have weight 0).
  if (r.repairedRows + r.denseRows > 0) assert.ok(r.repairPairs > 0, `${what}: repaired rows added pairs`);
}

function assertThrowsMatching(fn, pattern, what) {
  let error = null;
  try {
    fn();
  } catch (e) {
    error = e;
  }
  assert.ok(error !== null, `${what}: did not throw`);
  assert.ok(error instanceof Error, `${what}: threw ${Object.prototype.toString.call(error)}, not an Error`);
  assert.match(error.message, pattern, `${what}: message`);
}

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
      const threshold = t.transform !== "softmax";
      test(`${spec.name}, ${label}: graph attention on the full graph equals dense attention`, () => {
        const dense = eg.attention({ ...base, ...t, scale });
        const allowed = allowedPairs(queries, keys, causal);
        for (const mode of threshold ? [undefined, "fast", "certify", "exact"] : [undefined, "fast"]) {
          const g = eg.graphAttention({ ...base, ...t, scale, graph: fullGraph(queries, keys), mode });
          assertClose(g.out, dense.out, TOL, `out, mode ${mode}`);
          assert.ok(g.settled instanceof Uint8Array);
          assert.equal(g.settled.length, queries);
          assert.ok(g.settled.every((c) => c === 1), "every row holds every allowed key, so the graph settles it");
          assert.equal(g.graphRows, queries);
          assert.equal(g.repairedRows, 0);
          assert.equal(g.denseRows, 0);
          assert.equal(g.graphPairs, allowed);
          assert.equal(g.repairPairs, 0);
          assert.equal(g.boundPairs, 0, "complete rows need no bounds");
        }
      });

      test(`${spec.name}, ${label}: graph attention on a window graph: fast, certify and exact`, () => {
        const dense = eg.attention({ ...base, ...t, scale });
        const graph = windowGraph(queries, keys, 6);
        const limitOf = (i) => (causal ? Math.max(0, Math.min(keys, i + 1 + keys - queries)) : keys);
        let windowPairs = 0;
        for (let i = 0; i < queries; ++i)
          for (let e = graph.offsets[i]; e < graph.offsets[i + 1]; ++e) windowPairs += graph.indices[e] < limitOf(i) ? 1 : 0;
        // fast (the default): only the rows holding every allowed key are settled, by the graph.
        const fast = eg.graphAttention({ ...base, ...t, scale, graph });
        assert.deepEqual(eg.graphAttention({ ...base, ...t, scale, graph, mode: "fast" }), fast);
        for (let i = 0; i < queries; ++i) {
          const full = Math.max(0, i - 6) === 0 && Math.min(keys - 1, i + 6) >= limitOf(i) - 1;
          assert.equal(fast.settled[i], full ? 1 : 0, `fast, row ${i}`);
        }
        assert.equal(fast.graphRows, count(fast.settled, 1));
        assert.deepEqual([fast.repairedRows, fast.denseRows, fast.repairPairs, fast.boundPairs], [0, 0, 0, 0]);
        assert.equal(fast.graphPairs, windowPairs);
        // Fast mode's error is known only on the rows it settles (0); certify bounds the others (below).
        assert.ok(fast.missedMass instanceof Float64Array);
        assert.equal(fast.missedMass.length, queries);
        for (let i = 0; i < queries; ++i)
          assert.ok(fast.settled[i] ? fast.missedMass[i] === 0 : Number.isNaN(fast.missedMass[i]), `fast, missedMass[${i}]`);
        assert.equal(fast.boundedRows, fast.graphRows);
        assert.equal(Number.isNaN(fast.outputErrorBound), fast.graphRows < queries);
        if (!threshold) {
          for (const mode of ["certify", "exact"])
            assertThrowsMatching(() => eg.graphAttention({ ...base, ...t, scale, graph, mode }), /no threshold/, `softmax, ${mode}`);
          return;
        }
        // certify: the same output; rows settled by the graph are dense attention.
        const cert = eg.graphAttention({ ...base, ...t, scale, graph, mode: "certify" });
        assert.deepEqual(cert.out, fast.out);
        assert.ok(cert.settled.every((c) => c === 0 || c === 1), "certify settles by the graph or not at all");
        assert.equal(cert.graphRows, count(cert.settled, 1));
        assert.ok(cert.graphRows >= fast.graphRows);
        assert.deepEqual([cert.repairedRows, cert.denseRows, cert.repairPairs], [0, 0, 0]);
        assert.equal(cert.graphPairs, windowPairs);
        for (let i = 0; i < queries; ++i)
          if (cert.settled[i]) assertClose(row(cert.out, i, valueDim), row(dense.out, i, valueDim), TOL, `certified row ${i}`);
        // Its missed-mass bounds: 0 exactly on certified rows, a bound on every other entmax row (top-k: none),
        // never under the float64 reference's weight outside the window, and the output error bound holds.
        for (let i = 0; i < queries; ++i) {
          const mu = cert.missedMass[i];
          if (cert.settled[i]) assert.equal(mu, 0, `certify, missedMass[${i}] of a certified row`);
          else if (t.transform === "topk") assert.ok(Number.isNaN(mu), `certify, top-k, missedMass[${i}]`);
          else assert.ok(mu > 0 && mu <= 1, `certify, missedMass[${i}] = ${mu}`);
        }
        if (REFERENCES[t.transform]) {
          const ref = referenceAttention({ ...prob, transform: t.transform });
          let maxDiff = 0;
          for (let i = 0; i < queries; ++i) {
            let missed = 0;
            for (let j = 0; j < limitOf(i); ++j) if (j < i - 6 || j > i + 6) missed += ref.probs[i * keys + j];
            assert.ok(cert.missedMass[i] >= missed - 1e-12, `row ${i}: bound ${cert.missedMass[i]} under the true ${missed}`);
            for (let c = 0; c < valueDim; ++c) maxDiff = Math.max(maxDiff, Math.abs(cert.out[i * valueDim + c] - ref.out[i * valueDim + c]));
          }
          assert.ok(maxDiff <= cert.outputErrorBound + REF_TOL, `max |out - ref| ${maxDiff} > outputErrorBound ${cert.outputErrorBound}`);
        }
        // exact: every row is dense attention, settled by the graph (as certify), repaired, or dense.
        const exact = eg.graphAttention({ ...base, ...t, scale, graph, mode: "exact" });
        assertClose(exact.out, dense.out, TOL, "out, mode exact");
        checkExactReport(exact, queries);
        for (let i = 0; i < queries; ++i)
          assert.equal(exact.settled[i] === 1, cert.settled[i] === 1, `row ${i}: settled by the graph in exact iff in certify`);
        assert.equal(exact.graphPairs, windowPairs);
        assert.equal(exact.boundPairs, cert.boundPairs);
        assert.ok(exact.graphPairs + exact.repairPairs <= allowedPairs(queries, keys, causal));
        if (exact.repairedRows + exact.denseRows > 0) assert.ok(exact.repairPairs > 0);
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

// Exact mode on real heads: every head of both teachers over held-out text the
// predictors were not fitted on, with a window predictor's graph (it misses
// most long-range edges, so rows need repair) and the empty graph (repair
// alone), against the package's dense attention.
for (const model of ["teacher-causal", "teacher-masked"]) {
  describe(`${model}: exact graph attention equals dense attention on every head`, () => {
    let eg;
    let teacher;
    let out;
    let predictor;
    before(async () => {
      eg = await loadPackage();
      teacher = loadTeacher(eg, model);
      out = teacher.forward(heldoutText(4096, 256));
      predictor = eg.Predictor.create("window", { window: 8 });
    });
    after(() => {
      for (const o of [predictor, out, teacher]) o?.dispose();
    });

    test("mode exact: settled codes 1-3, counts add up, out equals eg.attention to 1e-5", (t) => {
      const n = out.tokens;
      const dim = out.headDim;
      const allowed = allowedPairs(n, n, out.causal);
      const empty = { queries: n, keys: n, offsets: new Uint32Array(n + 1), indices: new Uint32Array(0) };
      const totals = { graphRows: 0, repairedRows: 0, denseRows: 0, graphPairs: 0, repairPairs: 0, maxDiff: 0 };
      for (let layer = 0; layer < out.layers; ++layer)
        for (let head = 0; head < out.heads; ++head) {
          const what = `layer ${layer} head ${head}`;
          const q = out.queries(layer, head);
          const k = out.keys(layer, head);
          const inputs = { q, k, v: out.values(layer, head), queries: n, keys: n, dim, valueDim: dim,
                          transform: "entmax", alpha: out.alpha, causal: out.causal, scale: out.scale };
          const dense = eg.attention(inputs);
          const graph = predictor.predict(q, k, { queries: n, keys: n, dim, layer, head, causal: out.causal });
          const exact = eg.graphAttention({ ...inputs, graph, mode: "exact" });
          assertClose(exact.out, dense.out, TOL, `${what}: out`);
          checkExactReport(exact, n, what);
          assert.ok(exact.graphPairs + exact.repairPairs <= allowed, `${what}: scored pairs within the allowed ones`);
          for (let x = 0; x < dense.out.length; ++x)
            totals.maxDiff = Math.max(totals.maxDiff, Math.abs(exact.out[x] - dense.out[x]));
          for (const key of ["graphRows", "repairedRows", "denseRows", "graphPairs", "repairPairs"]) totals[key] += exact[key];
          // softmax has no threshold: certify and exact throw, fast does not.
          eg.graphAttention({ ...inputs, graph, transform: "softmax" });
          for (const mode of ["certify", "exact"])
            assertThrowsMatching(() => eg.graphAttention({ ...inputs, graph, transform: "softmax", mode }), /no threshold/,
                                 `${what}: softmax, ${mode}`);
          if (layer === 0 && head === 0) {
            // The empty graph: repair alone finds every row's keys (in decreasing bound order,
            // until the bounds exclude the rest), so no row is settled by the graph.
            const e = eg.graphAttention({ ...inputs, graph: empty, mode: "exact" });
            assertClose(e.out, dense.out, TOL, `${what}, empty graph: out`);
            checkExactReport(e, n, `${what}, empty graph`);
            assert.equal(e.graphRows, 0);
            assert.equal(e.graphPairs, 0);
            assert.ok(e.repairPairs > 0 && e.repairPairs <= allowed, `${what}, empty graph: ${e.repairPairs} pairs repaired`);
            t.diagnostic(`empty graph, ${what}: ${e.repairedRows} rows repaired, ${e.denseRows} dense, ` +
                         `${e.repairPairs} of ${allowed} allowed pairs scored`);
          }
        }
      t.diagnostic(`window 8 over ${out.layers * out.heads} heads of ${n} tokens: ${JSON.stringify(totals)}`);
      // The window graph misses edges, so repair happened; the bounds excluded keys, so it was not all dense.
      assert.ok(totals.repairedRows > 0, "some rows were repaired");
      // Causal: the first 9 rows hold every allowed key, so the window alone settles them.
      if (out.causal) assert.ok(totals.graphRows >= 9 * out.layers * out.heads, "the complete rows are settled by the window alone");
      assert.ok(totals.repairPairs < out.layers * out.heads * allowed - totals.graphPairs, "the bounds excluded keys");
    });
  });
}
