// The package itself (docs/JAVASCRIPT.md, "Loading"): the files `make wasm`
// writes, the WebAssembly embedded in entgraph_core.js (no .wasm to locate),
// version and ISA, loading twice, and render.js usable without WebAssembly.
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";

import { importPackageModule, loadPackage, packageDir, packageFile, runCli } from "./helpers.mjs";

test("the package folder holds the documented files and no separate .wasm", () => {
  for (const f of ["entgraph.js", "entgraph_core.js", "errors.js", "files.js", "render.js", "entgraph.d.ts", "render.d.ts", "package.json"])
    assert.ok(existsSync(packageFile(f)), `${packageDir} holds ${f}`);
  assert.deepEqual(
    readdirSync(packageDir).filter((f) => f.endsWith(".wasm")),
    [],
    "the .wasm is embedded in entgraph_core.js (SINGLE_FILE)",
  );
  const pkg = JSON.parse(readFileSync(packageFile("package.json"), "utf8"));
  assert.equal(pkg.type, "module");
});

test("version is the native CLI's; isa is simd128 or reference", async () => {
  const eg = await loadPackage();
  assert.equal(`entgraph ${eg.version}`, runCli("--version").trim());
  assert.ok(["simd128", "reference"].includes(eg.isa), `isa ${eg.isa}`);
});

test("loadEntgraph twice gives two independent instances", async () => {
  const { loadEntgraph } = await importPackageModule("entgraph.js");
  const [a, b] = await Promise.all([loadEntgraph(), loadEntgraph()]);
  const p = a.Predictor.create("window", { window: 1 });
  // Each instance has its own heap: a's predictor is not in b's.
  assert.ok(a.allocatedBytes() > b.allocatedBytes());
  const q = b.transform("entmax15", new Float32Array([1, 2, 3, 0.5]), { cols: 4 });
  assert.deepEqual(Array.from(q), Array.from(a.transform("entmax15", new Float32Array([1, 2, 3, 0.5]), { cols: 4 })));
  assert.equal(JSON.parse(p.serialize()).method, "window");
  p.dispose();
});

test("render.js works without loading WebAssembly and is eg.render", async () => {
  const render = await importPackageModule("render.js");
  const eg = await loadPackage();
  const gold = { queries: 3, keys: 3, offsets: new Uint32Array([0, 1, 3, 5]), indices: new Uint32Array([0, 0, 1, 1, 2]) };
  const predicted = eg.graphUnion(gold, { queries: 3, keys: 3, offsets: new Uint32Array([0, 1, 1, 1]), indices: new Uint32Array([2]) });
  const options = { tokens: ["a", "b", "c"], gold, predicted, causal: true, title: "t <&>" };
  const svg = render.heatmap(options);
  assert.ok(svg.includes("<svg"));
  assert.ok(!svg.includes("t <&>"), "the title is escaped");
  assert.equal(eg.render.heatmap(options), svg);
  // The predicted pair (0, 2) lies in the causal future: drawn without the
  // mask, hidden under it (no cell at key 2 of query 0).
  const size = 18;
  const cellAt = (text, i, j) => text.includes(`<rect x="${j * size}" y="${i * size}" width="${size}" height="${size}"`);
  assert.equal(cellAt(render.heatmap({ ...options, causal: false, cell: size }), 0, 2), true);
  assert.equal(cellAt(render.heatmap({ ...options, cell: size }), 0, 2), false);
  assert.equal(cellAt(render.heatmap({ ...options, cell: size }), 1, 0), true);
  const points = [
    { method: "window", sparsity: 0.5, recall: 0.6 },
    { method: "window", sparsity: 0.8, recall: 0.3 },
  ];
  assert.ok(render.pareto({ points, goldSparsity: 0.7 }).includes("<svg"));
});
