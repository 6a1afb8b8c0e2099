// eg.evaluateMany under node: one report per (predictor, window),
// predictor-major, each equal bit for bit to eg.evaluate of that predictor
// with that union window; clear errors for bad arguments; and threads under
// node fall back to one, saying why.
import assert from "node:assert/strict";
import { before, describe, test } from "node:test";

import { heldoutText, importPackageModule, loadPackage, loadTeacher } from "./helpers.mjs";

describe("evaluateMany", () => {
  let eg, train, test_, predictors;
  const windows = [-1, 0, 2, 7];
  before(async () => {
    eg = await loadPackage();
    const teacher = loadTeacher(eg, "teacher-causal");
    train = teacher.capture([heldoutText(0, 256), heldoutText(256, 256)]);
    test_ = teacher.capture([heldoutText(4096, 200), heldoutText(4400, 120)]);
    teacher.dispose();
    predictors = [
      eg.Predictor.create("window", { window: 1 }),
      eg.Predictor.create("longformer", { global: 2, window: 0 }),
      eg.Predictor.create("reformer", { buckets: 4 }).fit(train),
      eg.Predictor.create("sparsefinder-kmeans", { r: 4, clusters: 4 }).fit(train),
    ];
  });

  test("equals evaluate for each predictor and window, bit for bit", () => {
    const many = eg.evaluateMany(predictors, test_, { windows });
    assert.equal(many.length, predictors.length * windows.length);
    many.forEach((r, i) => {
      assert.equal(r.predictor, Math.floor(i / windows.length));
      assert.equal(r.window, windows[i % windows.length]);
      const p = predictors[r.predictor];
      p.setUnionPatterns(r.window, 0);
      const one = eg.evaluate(p, test_);
      p.setUnionPatterns(-1, 0);
      assert.deepEqual([r.recall, r.sparsity, r.goldSparsity], [one.recall, one.sparsity, one.gold_sparsity],
                       `${p.method} window ${r.window}`);
    });
    // Not all the same numbers: the ordering is what is tested.
    assert.notEqual(many[0].sparsity, many[windows.length].sparsity);
    // The default windows: [-1], evaluate() as the predictor stands.
    const plain = eg.evaluateMany([predictors[2]], test_);
    assert.equal(plain.length, 1);
    assert.equal(plain[0].recall, eg.evaluate(predictors[2], test_).recall);
  });

  test("bad arguments get errors that name them", () => {
    const gone = eg.Predictor.create("window", { window: 1 });
    gone.dispose();
    const cases = [
      [() => eg.evaluateMany([], test_), /^Error: predictors: expected a non-empty array of Predictors/],
      [() => eg.evaluateMany(predictors[0], test_), /^Error: predictors: expected a non-empty array/],
      [() => eg.evaluateMany([predictors[0], gone], test_), /^Error: predictors\[1\]: the Predictor was disposed/],
      [() => eg.evaluateMany([predictors[0], "window"], test_), /^Error: predictors\[1\]: expected a Predictor/],
      [() => eg.evaluateMany(predictors, {}), /^Error: capture: expected a Capture/],
      [() => eg.evaluateMany(predictors, test_, { windows: [] }), /^Error: windows: expected a non-empty array/],
      [() => eg.evaluateMany(predictors, test_, { windows: [1, 2.5] }), /^Error: windows\[1\]: expected a whole number >= -1/],
      [() => eg.evaluateMany(predictors, test_, { windows: [-2] }), /^Error: windows\[0\]: expected a whole number >= -1/],
      [() => eg.evaluateMany(predictors, test_, { windows: ["3"] }), /^Error: windows\[0\]: expected a whole number >= -1/],
    ];
    for (const [call, message] of cases) assert.throws(call, message);
  });
});

describe("threads under node", () => {
  test("loadEntgraph({ threads }) runs one thread under node and says why; bad counts are refused", async () => {
    const { loadEntgraph } = await importPackageModule("entgraph.js");
    const eg = await loadEntgraph({ threads: 4 });
    assert.equal(eg.threads, 1);
    assert.match(eg.threadsNote, /^node: /);
    const plain = await loadEntgraph();
    assert.equal(plain.threads, 1);
    assert.match(plain.threadsNote, /one thread was asked for/);
    for (const bad of [0, 1.5, -1, 65, "4", "all", null])
      await assert.rejects(loadEntgraph({ threads: bad }), /^Error: threads: expected a whole number from 1 to 64 or "auto"/);
  });
});
