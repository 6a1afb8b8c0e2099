// The package's SVG renderers (render.js) and the demo page share one palette
// and one vocabulary: the page's palette.js and methods.js take them from
// ./entgraph/render.js (as in the built page, build/web/entgraph/), style.css
// repeats the cell colours, and the page's Pareto plot and legends use the same
// words. And render.pareto puts the ringed point's label where it crosses no line.
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";

import { currentLabelCrossings, importPackageModule, loadPackage, makeTempDir, packageFile, repoRoot } from "./helpers.mjs";

const web = (name) => join(repoRoot, "web", name);

function rgbOfHex(hex) {
  return [1, 3, 5].map((at) => parseInt(hex.slice(at, at + 2), 16));
}

// The page's modules as the built page has them: web/*.js beside entgraph/render.js.
async function pageModules() {
  const dir = makeTempDir("entgraph-page-palette-");
  mkdirSync(join(dir, "entgraph"));
  copyFileSync(packageFile("render.js"), join(dir, "entgraph", "render.js"));
  for (const f of ["palette.js", "methods.js"]) copyFileSync(web(f), join(dir, f));
  const load = (f) => import(pathToFileURL(join(dir, f)).href);
  return { palette: await load("palette.js"), methods: await load("methods.js") };
}

test("the page's colours and method names are the renderers'", async () => {
  const render = await importPackageModule("render.js");
  const { palette, methods } = await pageModules();
  for (const role of ["hit", "miss", "extra", "predicted", "empty", "masked"]) {
    assert.deepEqual(palette.COLORS[role], rgbOfHex(render.colours[role]), `palette.js ${role}`);
    assert.equal(palette.CSS[role], `rgb(${rgbOfHex(render.colours[role]).join(",")})`, `palette.js CSS ${role}`);
  }
  // style.css repeats the cell colours as custom properties for its legends.
  const css = readFileSync(web("style.css"), "utf8");
  for (const role of ["hit", "miss", "extra", "predicted", "masked"]) {
    const m = new RegExp(`--${role}:\\s*rgb\\((\\d+),\\s*(\\d+),\\s*(\\d+)\\)`).exec(css);
    assert.ok(m, `style.css sets --${role}`);
    assert.deepEqual(m.slice(1).map(Number), rgbOfHex(render.colours[role]), `style.css --${role}`);
  }
  const eg = await loadPackage();
  for (const method of eg.predictorMethods) {
    assert.ok(render.methodColours[method], `render.js has a colour for ${method}`);
    assert.ok(render.methodLabels[method], `render.js has a name for ${method}`);
    assert.equal(palette.methodColor(method), render.methodColour(method), `the page's colour of ${method}`);
    assert.equal(methods.methodLabel(method), render.methodLabel(method), `the page's name of ${method}`);
    assert.ok(methods.METHOD_INFO[method]?.blurb, `the page explains ${method}`);
  }
  // The weight ramp, as ImageData words and as CSS.
  assert.equal(palette.PROB_RAMP.length, 256);
  for (const i of [0, 60, 200, 255]) {
    const [r, g, b] = render.weightRamp[i];
    assert.equal(palette.PROB_RAMP[i], (((255 << 24) | (b << 16) | (g << 8) | r) >>> 0), `ramp step ${i}`);
    assert.equal(palette.PROB_RAMP_CSS_FULL[i], `rgb(${r},${g},${b})`);
  }
  for (const p of [0, 1e-4, 0.3, 1]) assert.equal(palette.probIndex(p), render.weightIndex(p), `weight ${p}`);
});

test("the page's Pareto plot and legends say the renderers' words", async () => {
  const { terms } = await importPackageModule("render.js");
  const pareto = readFileSync(web("pareto.js"), "utf8");
  for (const word of [terms.trueSparsity, terms.sparsityAxis, terms.recallAxis])
    assert.ok(pareto.includes(word), `web/pareto.js says "${word}"`);
  const html = readFileSync(web("index.html"), "utf8");
  for (const word of [terms.hitMeaning, terms.missMeaning, terms.extraMeaning, terms.trueSparsity])
    assert.ok(html.includes(word), `web/index.html says "${word}"`);
});

test("render.heatmap draws with the page's colours and words", async () => {
  const render = await importPackageModule("render.js");
  const { colours, terms } = render;
  const gold = { queries: 3, keys: 3, offsets: new Uint32Array([0, 1, 3, 5]), indices: new Uint32Array([0, 0, 1, 1, 2]) };
  const predicted = { queries: 3, keys: 3, offsets: new Uint32Array([0, 1, 2, 4]), indices: new Uint32Array([0, 0, 0, 2]) };
  const tokens = ["a", "b", "c"];
  const fills = (svg) => new Set([...svg.matchAll(/<rect [^>]*fill="([^"]+)"/g)].map((m) => m[1]));
  const overlay = render.heatmap({ tokens, gold, predicted, causal: true });
  // hits (0,0), (1,0), (2,2); a miss (1,1) and (2,1); an extra edge (2,0).
  for (const role of ["hit", "miss", "extra"]) assert.ok(fills(overlay).has(colours[role]), `the overlay draws ${role} in ${colours[role]}`);
  assert.ok(overlay.includes(`fill="${colours.masked}"`), "the causal future in the page's masked colour");
  for (const word of [terms.hitMeaning, terms.missMeaning, terms.extraMeaning, terms.keyAxis, terms.queryAxis])
    assert.ok(overlay.includes(render.escapeXml(word)), `the overlay's legend says "${word}"`);
  assert.ok(!/gold/i.test(overlay), "no 'gold' in the figure's words");
  const probs = new Float32Array([1, 0, 0, 0.25, 0.75, 0, 0, 0.5, 0.5]);
  const weights = render.heatmap({ tokens, gold, probs, causal: true });
  for (const p of [1, 0.25, 0.75, 0.5]) assert.ok(fills(weights).has(render.weightColour(p)), `weight ${p} in the page's ramp`);
  assert.ok(!fills(weights).has(colours.miss) && !fills(weights).has(colours.extra), "the true graph alone has no misses or extras");
});

test("render.pareto: the page's words and colours; the ringed point's label crosses no line", async () => {
  const render = await importPackageModule("render.js");
  // A frontier runs just above and to the right of the ringed point, where
  // the label went before (12 px right, 11 px up).
  const points = [
    { method: "window", sparsity: 0.5, recall: 0.62 }, { method: "window", sparsity: 0.9, recall: 0.3 },
    { method: "sparsefinder-kmeans", sparsity: 0.55, recall: 0.9 }, { method: "sparsefinder-kmeans", sparsity: 0.95, recall: 0.1 },
  ];
  const current = { sparsity: 0.7, recall: 0.44, method: "sparsefinder-kmeans", label: "clusters=4" };
  const svg = render.pareto({ points, goldSparsity: 0.74, current, title: "t" });
  for (const word of [render.terms.trueSparsity, render.terms.sparsityAxis, render.terms.recallAxis])
    assert.ok(svg.includes(render.escapeXml(word)), `the plot says "${word}"`);
  assert.ok(!/gold/i.test(svg), "no 'gold' in the plot's words");
  for (const method of ["window", "sparsefinder-kmeans"]) {
    assert.ok(svg.includes(`stroke="${render.methodColour(method)}"`), `${method} in the page's colour`);
    assert.ok(svg.includes(`>${render.methodLabel(method)}</text>`), `${method} under the page's name`);
  }
  const placed = currentLabelCrossings(svg);
  assert.equal(placed.label, "clusters=4");
  assert.ok(placed.segments >= 3, `the plot has its lines (${placed.segments})`);
  assert.deepEqual(placed.crossings, [], `the label's box ${JSON.stringify(placed.box)} crosses no line`);
  // Where the label used to go, it would cross one: the check can fail.
  const ring = /<circle cx="([\d.]+)" cy="([\d.]+)" r="8"/.exec(svg);
  const before = svg.replace(/(<text class="current-label") x="[^"]*" y="[^"]*" text-anchor="\w+"/,
                             `$1 x="${Number(ring[1]) + 12}" y="${Number(ring[2]) - 11}" text-anchor="start"`);
  assert.notDeepEqual(currentLabelCrossings(before).crossings, [], "the old place of the label crosses a line");
});
