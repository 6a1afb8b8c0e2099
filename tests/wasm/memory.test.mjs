// Memory: objects holding wasm memory are freed deterministically. Across
// 10,000 calls of each kind (transforms, predictions, forward + dispose,
// failing calls, ...) eg.allocatedBytes() comes back to its value before the
// loop (no growth beyond a small constant) and eg.heapBytes(), the size of
// the wasm memory, does not grow after a warm-up.
import assert from "node:assert/strict";
import { before, describe, test } from "node:test";

import { heldoutText, loadPackage, loadTeacher, paramsText, randomNormal } from "./helpers.mjs";

const CALLS = 10_000;
// Bytes malloc may keep for itself across a loop (none is expected).
const SLACK = 256;

describe("memory", () => {
  let eg;
  let teacher;

  before(async () => {
    eg = await loadPackage();
    teacher = loadTeacher(eg, "teacher-causal");
  });

  // Runs body warmup times, then CALLS times, checking malloc'd bytes and
  // the heap size around the loop.
  function noGrowth(t, what, body, { calls = CALLS, warmup = 20 } = {}) {
    for (let i = 0; i < warmup; ++i) body(i);
    const allocated = eg.allocatedBytes();
    const heap = eg.heapBytes();
    assert.equal(typeof allocated, "number");
    assert.ok(heap > 0 && heap % 65536 === 0, `heapBytes() is a whole number of wasm pages (got ${heap})`);
    const start = performance.now();
    for (let i = 0; i < calls; ++i) body(i);
    const ms = performance.now() - start;
    const grown = eg.allocatedBytes() - allocated;
    t.diagnostic(`${what}: ${calls} calls in ${ms.toFixed(0)} ms; allocatedBytes ${allocated} -> ${allocated + grown}; heapBytes ${heap} -> ${eg.heapBytes()}`);
    assert.ok(grown <= SLACK, `${what}: allocatedBytes grew by ${grown} bytes over ${calls} calls`);
    assert.equal(eg.heapBytes(), heap, `${what}: the wasm heap grew over ${calls} calls`);
  }

  test("allocatedBytes and heapBytes report numbers; a large call grows allocatedBytes only while it runs", () => {
    // The first large transform allocates about 12 KB once (measured: the
    // same for 4 MB and 16 MB of scores, and never again); warm that up.
    eg.transform("softmax", new Float32Array(1 << 20), { cols: 1024 });
    const a = eg.allocatedBytes();
    const big = eg.transform("softmax", new Float32Array(1 << 20), { cols: 1024 });
    assert.equal(big.length, 1 << 20);
    assert.ok(eg.allocatedBytes() - a <= SLACK);
    const cap = teacher.capture(["Some text to capture"]);
    assert.ok(eg.allocatedBytes() > a, "a live Capture holds wasm memory");
    cap.dispose();
    assert.ok(eg.allocatedBytes() - a <= SLACK, "dispose() frees it");
  });

  test(`${CALLS} transforms and backwards`, (t) => {
    const scores = randomNormal(8 * 64, 1, 2);
    const grad = randomNormal(8 * 64, 2);
    const names = ["softmax", "sparsemax", "entmax15", "entmax", "topk"];
    noGrowth(t, "transform", (i) => {
      const name = names[i % 5];
      const opts = { cols: 64, alpha: 1.3, k: 5 };
      const p = eg.transform(name, scores, name === "softmax" ? { ...opts, mask: new Uint8Array(8 * 64).fill(1) } : opts);
      eg.transformBackward(name, p, grad, { cols: 64, alpha: 1.3, k: 5 });
    });
  });

  test(`${CALLS} predictions of a fitted predictor, and graph helpers`, (t) => {
    const cap = teacher.capture(eg.splitText(heldoutText(0, 256), 64));
    const p = eg.Predictor.create("sparsefinder-kmeans", { clusters: 3 });
    p.fit(cap, { seed: 0 });
    const q = cap.queries(1, 2, 0);
    const k = cap.keys(1, 2, 0);
    const gold = cap.goldGraph(1, 2, 0);
    const opts = { queries: 64, keys: 64, dim: 32, layer: 1, head: 2, causal: true };
    try {
      noGrowth(t, "predict", () => {
        const g = p.predict(q, k, opts);
        eg.compareGraphs(g, gold, true);
        eg.graphUnion(g, gold);
      });
    } finally {
      p.dispose();
      cap.dispose();
    }
  });

  test(`${CALLS} teacher forwards, each disposed`, (t) => {
    const texts = ["a", "In", "God", "Noah"];
    noGrowth(t, "forward + dispose", (i) => {
      const out = teacher.forward(texts[i % 4], { probs: i % 2 === 0 });
      out.queries(3, 3);
      out.dispose();
    });
  });

  test(`${CALLS} attention and graph attention calls`, (t) => {
    const q = randomNormal(16 * 8, 3);
    const k = randomNormal(16 * 8, 4);
    const v = randomNormal(16 * 4, 5);
    const base = { q, k, v, queries: 16, keys: 16, dim: 8, valueDim: 4, transform: "entmax15", causal: true };
    const graph = eg.goldGraph(q, k, { queries: 16, keys: 16, dim: 8, alpha: 1.5, causal: true });
    noGrowth(t, "attention", (i) => {
      if (i % 2) eg.attention({ ...base, probs: true });
      else eg.graphAttention({ ...base, graph, mode: "exact" });
    });
  });

  test(`${CALLS} failing calls`, (t) => {
    const nan = new Float32Array([1, NaN, 3]);
    const g2 = { queries: 2, keys: 2, offsets: new Uint32Array([0, 2, 2]), indices: new Uint32Array([0, 1]) };
    const g3 = { queries: 3, keys: 3, offsets: new Uint32Array([0, 1, 1, 1]), indices: new Uint32Array([2]) };
    const bad = [
      () => eg.transform("entmax15", nan, { cols: 3 }),
      () => teacher.forward(""),
      () => eg.Predictor.create("reformer", { buckets: "7" }),
      () => eg.Predictor.load(paramsText("routing")),
      () => eg.graphUnion(g2, g3),
      // softmax has no threshold: exact mode throws after its inputs were copied in.
      () => eg.graphAttention({ q: new Float32Array(4), k: new Float32Array(4), v: new Float32Array(4), queries: 2, keys: 2,
                                dim: 2, transform: "softmax", graph: g2, mode: "exact" }),
    ];
    noGrowth(t, "failing calls", (i) => {
      assert.throws(bad[i % bad.length]);
    });
  });

  test("captures, predictors and evaluations created and disposed", (t) => {
    const cap = teacher.capture(["And God said, Let there be light: and there was light."]);
    const files = cap.toFiles({ dtype: "float32" });
    cap.dispose();
    const text = paramsText("bigbird", { random: "2" });
    noGrowth(
      t,
      "Capture.fromFiles + Predictor.load + evaluate + dispose",
      () => {
        const c = eg.Capture.fromFiles(files);
        const p = eg.Predictor.load(text);
        eg.evaluate(p, c);
        p.serialize();
        p.dispose();
        c.dispose();
      },
      { calls: 300 },
    );
  });
});
