// docs/NOTEBOOKS.md cannot rot, and its code runs away from the repository:
// its ```js blocks, in order, are one program; this copies the package and the
// data (the teacher and heldout.txt, nothing else) into a temporary folder
// outside the repository, writes the program there as notebook.mjs and runs
// it with node, unchanged, twice:
//   - from that folder, with the doc's own DATA ("data", from the current folder);
//   - from another empty folder, with DATA a file: URL (ENTGRAPH_DATA);
// and checks that each run exits cleanly and shows its figures as SVG strings
// (written by its `show` as .svg files into $FIGURES_DIR), the same in both,
// the Pareto plot's "clusters=4" label clear of its lines.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";

import { currentLabelCrossings, dataFile, makeTempDir, packageDir, repoRoot, requirePackageFile } from "./helpers.mjs";

const DOC = join(repoRoot, "docs", "NOTEBOOKS.md");

// The ```js blocks of a markdown text.
function jsBlocks(markdown) {
  return [...markdown.matchAll(/^```js[ \t]*\n([\s\S]*?)^```[ \t]*$/gm)].map((m) => m[1]);
}

// Runs notebook.mjs of `dir` from `cwd`; returns the SVG files it wrote, by name.
function runNotebook(t, dir, cwd, env) {
  const figures = makeTempDir("entgraph-figures-");
  const clean = { ...process.env };
  for (const name of ["ENTGRAPH_DATA", "NODE_PATH", "NODE_OPTIONS"]) delete clean[name];
  const r = spawnNode(join(dir, "notebook.mjs"), cwd, { ...clean, ...env, FIGURES_DIR: figures });
  for (const line of r.stdout.trimEnd().split("\n")) t.diagnostic(line);
  assert.equal(r.status, 0, `the notebook's code failed from ${cwd} (exit ${r.status}, signal ${r.signal}):\n${r.stderr}`);
  const svgs = {};
  for (const f of readdirSync(figures).filter((f) => f.endsWith(".svg"))) svgs[f] = readFileSync(join(figures, f), "utf8");
  return svgs;
}

function spawnNode(program, cwd, env) {
  return spawnSync(process.execPath, [program], { cwd, env, encoding: "utf8", timeout: 120_000 });
}

test("docs/NOTEBOOKS.md: its js blocks run from a folder holding only the package and the data", (t) => {
  requirePackageFile("entgraph.js");
  const markdown = readFileSync(DOC, "utf8");
  const blocks = jsBlocks(markdown);
  assert.ok(blocks.length >= 5, `docs/NOTEBOOKS.md has ${blocks.length} js blocks`);
  // The page tells each kind of notebook how to show a figure and where the data is.
  for (const word of ["Observable", "Jupyter", "Deno", "node", "DATA"]) assert.ok(markdown.includes(word), `the page mentions ${word}`);
  const code = blocks.join("\n");
  assert.doesNotMatch(code, /build\/|\.\.\//, "the code names no place in the repository");

  // The folder: entgraph/ (the package as built), data/ (what the code reads), notebook.mjs.
  const dir = makeTempDir("entgraph-notebook-");
  assert.ok(relative(repoRoot, dir).startsWith(".."), `${dir} is outside the repository`);
  cpSync(packageDir, join(dir, "entgraph"), { recursive: true });
  mkdirSync(join(dir, "data", "teacher-causal"), { recursive: true });
  for (const f of ["config.json", "model.safetensors"]) copyFileSync(dataFile("teacher-causal", f), join(dir, "data", "teacher-causal", f));
  copyFileSync(dataFile("heldout.txt"), join(dir, "data", "heldout.txt"));
  writeFileSync(join(dir, "notebook.mjs"), code);

  const runs = [
    ["from the notebook's folder, DATA as written", runNotebook(t, dir, dir, {})],
    ["from another folder, DATA a file: URL", runNotebook(t, dir, makeTempDir("entgraph-elsewhere-"),
                                                          { ENTGRAPH_DATA: pathToFileURL(join(dir, "data")).href })],
  ];
  for (const [what, svgs] of runs) {
    assert.deepEqual(Object.keys(svgs).sort(), ["heatmap.svg", "pareto.svg"], what);
    for (const [f, svg] of Object.entries(svgs)) {
      assert.match(svg, /^<svg [^>]*xmlns="http:\/\/www\.w3\.org\/2000\/svg"/, `${what}: ${f} is an SVG string`);
      assert.match(svg, /<\/svg>\s*$/, `${what}: ${f} ends its SVG`);
    }
  }
  // Both runs read the same data: the same figures.
  assert.deepEqual(runs[0][1], runs[1][1], "the figures do not depend on where the notebook runs");
  // The ringed point's label ("clusters=4") runs over no line of the plot.
  const placed = currentLabelCrossings(runs[0][1]["pareto.svg"]);
  assert.deepEqual(placed.crossings, [], `the label ${placed.label} at ${JSON.stringify(placed.box)} crosses no line`);
});
