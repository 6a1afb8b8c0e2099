// Sweeps: eg.sweep with two methods equals `entgraph sweep --methods` on the
// same captures: every point's method, parameter, value, window, sparsity,
// recall and Pareto flag exactly, and the gold sparsity; the frontier and
// recall-at-sparsity helpers agree with the CLI's summary, and eg.paretoSvg
// is the CLI's pareto.svg byte for byte.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { exactIsa, heldoutText, loadPackage, makeTempDir, nativeCapture, readFolderFiles, runCli, runCliFailing } from "./helpers.mjs";

const WINDOWS = [0, 1, 3, 5, 7, 9, 11, 15, 19, 23, 27];

// The CLI's "recall at the gold sparsity" line of each method (4 decimals).
function nativeRecalls(stdout) {
  const out = {};
  for (const m of stdout.matchAll(/^\s+(\S+)\s+recall at the gold sparsity: ([0-9.]+)$/gm)) out[m[1]] = Number(m[2]);
  for (const m of stdout.matchAll(/^\s+(\S+)\s+does not reach the gold sparsity$/gm)) out[m[1]] = -1;
  return out;
}

const SWEEPS = [
  {
    name: "window and sparsefinder-quantization, default union windows",
    methods: ["window", "sparsefinder-quantization"],
    cli: [],
    options: { windows: WINDOWS },
    settings: {},
  },
  {
    name: "bigbird and routing, no union window, 2 global tokens, seed=3",
    methods: ["bigbird", "routing"],
    cli: ["--no-window", "--global", "2", "--set", "seed=3"],
    options: { windows: [-1], global: 2 },
    settings: { seed: "3" },
  },
];

describe(`sweeps: eg.sweep vs entgraph sweep (--isa ${exactIsa || "default"})`, () => {
  let eg;
  let train;
  let testCap;
  let testDir;
  let trainDir;
  const dir = makeTempDir();

  before(async () => {
    eg = await loadPackage();
    trainDir = nativeCapture(join(dir, "train"), { text: heldoutText(0, 512), sequenceBytes: 128 });
    testDir = nativeCapture(join(dir, "test"), { text: heldoutText(4096, 384), sequenceBytes: 128 });
    train = eg.Capture.fromFiles(readFolderFiles(trainDir));
    testCap = eg.Capture.fromFiles(readFolderFiles(testDir));
  });
  after(() => {
    train?.dispose();
    testCap?.dispose();
  });

  test("defaultWindows and defaultGrid", () => {
    assert.deepEqual(Array.from(eg.defaultWindows), WINDOWS);
    const g = eg.defaultGrid("bigbird");
    assert.equal(g.method, "bigbird");
    assert.equal(g.parameter, "random");
    assert.ok(g.values.every((v) => typeof v === "string"));
    assert.equal(eg.defaultGrid("window").parameter, "window");
    assert.throws(() => eg.defaultGrid("nope"), (e) => e instanceof Error && e.message === "defaultGrid: no grid for method 'nope'");
    // The CLI checks --methods itself and lists the valid names.
    const native = runCliFailing("sweep", ["--train", trainDir, "--test", testDir, "--out", join(dir, "never"), "--methods", "nope"]);
    assert.match(native, /^sweep: --methods: unknown method 'nope' \(valid: window, .*lowrank-threshold\)$/);
  });

  for (const sweep of SWEEPS) {
    test(sweep.name, (t) => {
      const out = join(dir, sweep.methods.join("-"));
      const stdout = runCli(
        "sweep",
        ["--train", trainDir, "--test", testDir, "--out", out, "--methods", sweep.methods.join(","), "--quiet", ...sweep.cli],
        { isa: exactIsa },
      );
      const native = JSON.parse(readFileSync(join(out, "sweep.json"), "utf8"));

      const grids = sweep.methods.map((m) => {
        const g = eg.defaultGrid(m);
        return { ...g, settings: { ...g.settings, ...sweep.settings } };
      });
      const start = performance.now();
      const result = eg.sweep(grids, train, testCap, sweep.options);
      t.diagnostic(`eg.sweep: ${result.points.length} points in ${(performance.now() - start).toFixed(0)} ms`);

      assert.equal(result.goldSparsity, native.gold_sparsity);
      assert.equal(result.points.length, native.points.length);
      const strip = (p) => ({
        method: p.method,
        parameter: p.parameter,
        value: p.value,
        window: p.window,
        sparsity: p.sparsity,
        recall: p.recall,
        pareto: p.pareto,
      });
      assert.deepEqual(result.points.map(strip), native.points.map(strip));
      for (const p of result.points) {
        assert.equal(typeof p.fitSeconds, "number");
        assert.equal(typeof p.predictSeconds, "number");
      }
      // The grid values are the native ones, in order.
      for (const g of grids) {
        const values = [...new Set(native.points.filter((p) => p.method === g.method).map((p) => p.value))];
        assert.deepEqual(Array.from(g.values), values, `${g.method}'s grid`);
      }

      // Frontier and recall at the gold sparsity, per method.
      const recalls = nativeRecalls(stdout);
      for (const method of sweep.methods) {
        const own = result.points.filter((p) => p.method === method);
        const front = Array.from(eg.paretoFront(own));
        const flagged = own.flatMap((p, i) => (p.pareto ? [i] : []));
        assert.deepEqual([...front].sort((a, b) => a - b), flagged, `${method}: paretoFront = the pareto flags`);
        for (let i = 1; i < front.length; ++i) assert.ok(own[front[i - 1]].sparsity <= own[front[i]].sparsity);
        const r = eg.recallAtSparsity(own, result.goldSparsity);
        assert.ok(method in recalls, `the CLI printed ${method}'s recall at the gold sparsity`);
        if (recalls[method] < 0) assert.equal(r, -1);
        else assert.equal(r.toFixed(4), recalls[method].toFixed(4), `${method}: recall at the gold sparsity`);
      }

      // The plot, as the CLI draws it.
      const title = `Sparsity-recall Pareto curves (${testDir})`;
      assert.equal(eg.paretoSvg(result.points, result.goldSparsity, title), readFileSync(join(out, "pareto.svg"), "utf8"));
      const svg = eg.render.pareto({ points: result.points, goldSparsity: result.goldSparsity, title: "a sweep" });
      assert.equal(typeof svg, "string");
      assert.ok(svg.includes("<svg"), "render.pareto returns an SVG string");
      assert.match(svg, /<\/svg>\s*$/);
    });
  }
});
