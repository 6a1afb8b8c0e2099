// docs/NOTEBOOKS.md cannot rot: its ```js blocks, in order, are one program;
// this runs it with node from the repository root (the package import
// pointed at the package under test) and checks that it exits cleanly and
// that the figures it shows are SVG strings (written by its `show` as
// .svg files into $FIGURES_DIR).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";

import { makeTempDir, packageDir, repoRoot, requirePackageFile } from "./helpers.mjs";

const DOC = join(repoRoot, "docs", "NOTEBOOKS.md");

// The ```js blocks of a markdown text.
function jsBlocks(markdown) {
  return [...markdown.matchAll(/^```js[ \t]*\n([\s\S]*?)^```[ \t]*$/gm)].map((m) => m[1]);
}

test("docs/NOTEBOOKS.md: its js blocks run in node and show SVG figures", (t) => {
  requirePackageFile("entgraph.js");
  const markdown = readFileSync(DOC, "utf8");
  const blocks = jsBlocks(markdown);
  assert.ok(blocks.length >= 5, `docs/NOTEBOOKS.md has ${blocks.length} js blocks`);
  // The page tells each kind of notebook how to show a figure.
  for (const word of ["Observable", "Jupyter", "Deno", "node"]) assert.ok(markdown.includes(word), `the page mentions ${word}`);

  // The page imports the package as a notebook at the repository root does;
  // the program runs from a temporary file, so the import becomes absolute.
  let imports = 0;
  const code = blocks.join("\n").replace(/(["'])\.\/build\/wasm\/package\/([\w.-]+\.js)\1/g, (_, quote, file) => {
    ++imports;
    return JSON.stringify(pathToFileURL(join(packageDir, file)).href);
  });
  assert.ok(imports >= 1, "the page imports ./build/wasm/package/entgraph.js");

  const dir = makeTempDir();
  const program = join(dir, "notebook.mjs");
  writeFileSync(program, code);
  const figures = join(dir, "figures");
  mkdirSync(figures);
  const r = spawnSync(process.execPath, [program], {
    cwd: repoRoot,
    env: { ...process.env, FIGURES_DIR: figures },
    encoding: "utf8",
    timeout: 90_000,
  });
  for (const line of r.stdout.trimEnd().split("\n")) t.diagnostic(line);
  assert.equal(r.status, 0, `the notebook's code failed (exit ${r.status}, signal ${r.signal}):\n${r.stderr}`);

  const svgs = readdirSync(figures).filter((f) => f.endsWith(".svg"));
  assert.deepEqual(svgs.sort(), ["heatmap.svg", "pareto.svg"]);
  for (const f of svgs) {
    const svg = readFileSync(join(figures, f), "utf8");
    assert.ok(svg.includes("<svg"), `${f} is an SVG string`);
    assert.match(svg, /<\/svg>\s*$/, `${f} ends its SVG`);
  }
});
