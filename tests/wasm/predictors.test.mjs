// Every predictor of eg.predictorMethods with the same parameter files as the
// native CLI:
// - a file fitted natively (`entgraph fit`) loads in the package
//   (eg.Predictor.load) and eg.evaluate on the native capture (read with
//   eg.Capture.fromFiles) equals `entgraph eval` exactly, per head
//   (gold / predicted edges, hits, sparsities, recall, precision);
// - the reverse: fitted in the package, serialize()d to a file, `entgraph
//   eval --params` on it equals eg.evaluate;
// - the package's fit writes the same file as the native fit of the same
//   settings and seed;
// - predict() agrees with evaluate() (the counts of compareGraphs summed over
//   sequences), and setUnionPatterns gives what the extra_window /
//   extra_global settings give natively.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  exactIsa,
  heldoutText,
  loadPackage,
  makeTempDir,
  nativeCapture,
  nativeEval,
  nativeFit,
  readFolderFiles,
  runCli,
  withoutTiming,
} from "./helpers.mjs";

// Non-default settings, so that the files carry settings; the learned
// methods get a seed other than 0 and more than one epoch.
const SETTINGS = {
  window: { window: "5" },
  global: { global: "3" },
  longformer: { window: "2", global: "4" },
  bigbird: { window: "1", global: "1", random: "3", seed: "7" },
  reformer: { buckets: "6", rounds: "3", seed: "2" },
  routing: { clusters: "5", iterations: "4", seed: "1" },
  "sparsefinder-distance": { r: "4", epochs: "2", t: "2.5", seed: "3" },
  "sparsefinder-quantization": { r: "3", buckets: "5", seed: "4" },
  "sparsefinder-kmeans": { r: "4", clusters: "6", top: "2", seed: "5" },
  "lowrank-threshold": { r: "4", bits: "3", margin: "0.05" },
};
const LEARNED = new Set(["routing", "sparsefinder-distance", "sparsefinder-quantization", "sparsefinder-kmeans", "lowrank-threshold"]);

// Small captures: 4 sequences of 96 bytes to fit, 3 of 128 to test.
const TRAIN_TEXT = heldoutText(0, 384);
const TEST_TEXT = heldoutText(4096, 384);

const NATIVE_METHODS = /Methods: ([^.]+)\./.exec(runCli("fit", ["--help"]))[1].split(", ");

test("eg.predictorMethods are the native CLI's methods, in its order", async () => {
  const eg = await loadPackage();
  assert.deepEqual(Array.from(eg.predictorMethods), NATIVE_METHODS);
});

for (const model of ["teacher-causal", "teacher-masked"]) {
  describe(`predictors on ${model} captures (native --isa ${exactIsa || "default"})`, () => {
    let eg;
    const dir = makeTempDir();
    let trainDir, testDir, train, testCap;

    before(async () => {
      eg = await loadPackage();
      trainDir = nativeCapture(join(dir, "train"), { model, text: TRAIN_TEXT, sequenceBytes: 96 });
      testDir = nativeCapture(join(dir, "test"), { model, text: TEST_TEXT, sequenceBytes: 128 });
      train = eg.Capture.fromFiles(readFolderFiles(trainDir));
      testCap = eg.Capture.fromFiles(readFolderFiles(testDir));
    });
    after(() => {
      train?.dispose();
      testCap?.dispose();
    });

    for (const method of NATIVE_METHODS) {
      const settings = SETTINGS[method] ?? {};
      describe(method, () => {
        let nativeText;
        let nativeFile;

        before(() => {
          nativeFile = join(dir, `${method}-native.json`);
          nativeText = nativeFit(trainDir, method, settings, nativeFile);
        });

        test("native fit -> Predictor.load -> evaluate equals `entgraph eval`", () => {
          const p = eg.Predictor.load(nativeText);
          try {
            assert.equal(p.method, method);
            assert.equal(p.learned, LEARNED.has(method));
            assert.deepEqual({ ...p.settings }, settings);
            // A loaded file writes itself back unchanged.
            assert.equal(p.serialize().trimEnd(), nativeText.trimEnd());
            const report = eg.evaluate(p, testCap);
            const native = nativeEval(testDir, nativeFile);
            assert.deepEqual(withoutTiming(report), withoutTiming(native));
            assert.equal(typeof report.predict_seconds, "number");
          } finally {
            p.dispose();
          }
        });

        test("wasm fit -> serialize -> `entgraph eval --params` equals evaluate", () => {
          const p = eg.Predictor.create(method, settings);
          try {
            assert.equal(p.method, method);
            assert.equal(p.learned, LEARNED.has(method));
            p.fit(train, { seed: 0 });
            const text = p.serialize();
            const file = join(dir, `${method}-wasm.json`);
            writeFileSync(file, text);
            const native = nativeEval(testDir, file);
            assert.deepEqual(withoutTiming(eg.evaluate(p, testCap)), withoutTiming(native));
            const reloaded = eg.Predictor.load(readFileSync(file, "utf8"));
            try {
              assert.deepEqual(withoutTiming(eg.evaluate(reloaded, testCap)), withoutTiming(native));
            } finally {
              reloaded.dispose();
            }
          } finally {
            p.dispose();
          }
        });

        test("wasm fit writes the same parameter file as the native fit", () => {
          const p = eg.Predictor.create(method, settings);
          try {
            p.fit(train, { seed: 0 });
            const text = p.serialize().trimEnd();
            if (text !== nativeText.trimEnd()) {
              const a = text.split("\n");
              const b = nativeText.trimEnd().split("\n");
              const line = a.findIndex((l, i) => l !== b[i]);
              assert.fail(
                `${method}: the wasm fit's file differs from the native fit's at line ${line + 1}: ` +
                  `wasm ${JSON.stringify(a[line])}, native ${JSON.stringify(b[line])}`,
              );
            }
          } finally {
            p.dispose();
          }
        });

        test("predict() per head and sequence sums to evaluate()'s counts", () => {
          const p = eg.Predictor.load(nativeText);
          try {
            const report = eg.evaluate(p, testCap);
            for (const [l, h] of [
              [0, 1],
              [2, 3],
            ]) {
              const { causal } = testCap.head(l, h);
              const sum = { gold: 0, predicted: 0, hits: 0, allowed: 0 };
              testCap.lengths.forEach((n, s) => {
                const g = p.predict(testCap.queries(l, h, s), testCap.keys(l, h, s), {
                  queries: n,
                  keys: n,
                  dim: testCap.headDim,
                  layer: l,
                  head: h,
                  causal,
                });
                assert.equal(g.queries, n);
                assert.equal(g.offsets.length, n + 1);
                const m = eg.compareGraphs(g, testCap.goldGraph(l, h, s), causal);
                for (const key of Object.keys(sum)) sum[key] += m[key];
              });
              const head = report.heads.find((x) => x.layer === l && x.head === h);
              assert.equal(sum.gold, head.gold_edges);
              assert.equal(sum.predicted, head.predicted_edges);
              assert.equal(sum.hits, head.hits);
              assert.equal(1 - sum.gold / sum.allowed, head.gold_sparsity);
            }
          } finally {
            p.dispose();
          }
        });

        test("setUnionPatterns(2, 1) equals the extra_window=2 extra_global=1 settings natively", () => {
          const extra = { ...settings, extra_window: "2", extra_global: "1" };
          const file = join(dir, `${method}-union.json`);
          const text = nativeFit(trainDir, method, extra, file);
          const p = eg.Predictor.load(nativeText);
          try {
            p.setUnionPatterns(2, 1);
            assert.deepEqual({ ...p.settings }, extra);
            if (!LEARNED.has(method)) assert.equal(p.serialize().trimEnd(), text.trimEnd());
            assert.deepEqual(withoutTiming(eg.evaluate(p, testCap)), withoutTiming(nativeEval(testDir, file)));
          } finally {
            p.dispose();
          }
        });
      });
    }
  });
}
