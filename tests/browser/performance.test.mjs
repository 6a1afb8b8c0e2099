// The page's full update on a keystroke (teacher forward on 256 bytes, the
// predictor on every head, the metrics, attention over the predicted graph of the
// chosen head: in the update worker; the redraw on the page), in Chromium: after a
// warm-up, 10 characters typed one at a time at the start of a text longer than
// 256 bytes, so that the model reads 256 new bytes every time.
// window.entgraphDemo.updateMs, its phases (timings: load, forward, predict,
// attention in the worker, draw on the page), inputToPaintMs (from the keystroke
// to the paint of the update's first part: the text, the chosen head's graphs
// and numbers), inputToUpdateMs (to the end of its second part: every head,
// graph attention) and inputToCompleteMs (to the paint of the whole page, the 16
// thumbnails included) are written to <artifacts>/performance.json and their
// medians printed, with the main thread's long tasks (over 50 ms) while typing.
// The project's target is 50 ms from keystroke to paint; speed is reported
// here, not asserted (only that the updates happened). Measured for both teachers at the default method and at the
// settings that predict the most edges (the slowest ones found).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  afterUpdate, chooseMethod, demo, recordLongTasks, screenshot, typeText, useBrowserTab, waitPareto, webDir, writeArtifact,
} from "./helpers.mjs";

const TARGET_MS = 50;
const WARMUP = 3;
const KEYS = "abcdefghij"; // 10 keystrokes measured

// [method, value, layer]: the default setting on the first layer's head (the
// page's default view: the first paint needs one layer of the model) and on the
// last layer's (it needs the whole forward pass); ENTGRAPH_PAGE_BENCH=full adds
// the densest predictions (the slowest updates; docs/PERFORMANCE.md's table).
const LAST = -1; // the teacher's last layer
const ALL_SETTINGS = [
  ["sparsefinder-distance", "3.5", 0],
  ["sparsefinder-distance", "3.5", LAST],
  ["sparsefinder-quantization", "2", 0],
  ["reformer", "2", 0],
];
const SETTINGS = process.env.ENTGRAPH_PAGE_BENCH === "full" ? ALL_SETTINGS : ALL_SETTINGS.slice(0, 2);

const session = useBrowserTab({ init: recordLongTasks });
const results = [];

// Held-out text after the 4 KiB the predictors were fitted on: 320 ASCII bytes.
function longText() {
  const text = readFileSync(join(webDir, "heldout.txt"), "latin1").slice(5000, 5320);
  assert.ok(/^[\x00-\x7f]*$/.test(text) && text.length === 320, "320 ASCII bytes of heldout.txt");
  return text;
}

function stats(values) {
  const v = [...values].sort((a, b) => a - b);
  const at = (q) => v[Math.min(v.length - 1, Math.floor(q * (v.length - 1) + 0.5))];
  const r = (x) => Math.round(x * 100) / 100;
  return { median: r(at(0.5)), min: r(v[0]), p90: r(at(0.9)), max: r(v[v.length - 1]) };
}

// Types one character at the caret (kept near the start of the text); -> the update's numbers.
async function keystroke(page, ch) {
  const before = await demo(page);
  const d0 = await afterUpdate(page, () => page.keyboard.type(ch));
  // The paints are timed in the task after the next frame.
  await page.waitForFunction(
    (u) => (window.entgraphDemo.inputToPaintMs != null && window.entgraphDemo.inputToCompleteMs != null) || window.entgraphDemo.updates !== u,
    d0.updates, { timeout: 5000 });
  const d = await demo(page);
  assert.equal(d.tokens, 256, "the model reads 256 bytes");
  assert.notEqual(d.text, before.text, "the keystroke changed the bytes the model reads");
  assert.ok(d.updates > before.updates);
  assert.ok(d.timings.forward > 0, "the teacher ran");
  return {
    updateMs: d.updateMs,
    inputToUpdateMs: d.inputToUpdateMs,
    inputToPaintMs: d.inputToPaintMs,
    inputToCompleteMs: d.inputToCompleteMs,
    forward: d.timings.forward,
    forwardRest: d.timings.forwardRest ?? 0,
    predict: d.timings.predict,
    attention: d.timings.attention,
    draw: d.timings.draw,
    updates: d.updates - before.updates,
  };
}

async function measure(t, teacher, method, value, layerWanted) {
  const { page } = session.tab;
  let d = await demo(page);
  if (d.teacher !== teacher) {
    await waitPareto(page); // switching the teacher during the Pareto computation logs an error (see controls.test.mjs)
    d = await afterUpdate(page, () => page.selectOption("#teacher", teacher), { timeout: 60000 });
  }
  d = await chooseMethod(page, method, value);
  const layer = layerWanted === LAST ? (await page.$$eval("#layer option", (o) => o.length)) - 1 : layerWanted;
  if (d.layer !== layer) d = await afterUpdate(page, () => page.selectOption("#layer", String(layer)));
  assert.equal(d.layer, layer);
  assert.equal(d.teacher, teacher);
  assert.equal(d.method, method);
  assert.equal(d.value, value);
  // (The Pareto curves start 300 ms after the text stops changing: the new text cancels
  // those of the last one, and the keystrokes below come faster than that.)
  d = await typeText(page, longText());
  assert.equal(d.tokens, 256);
  await page.focus("#text");
  await page.evaluate(() => document.getElementById("text").setSelectionRange(0, 0));
  for (let i = 0; i < WARMUP; i++) await keystroke(page, "xyz"[i % 3]);
  await page.evaluate(() => (window.__longTasks = []));
  const samples = [];
  for (const ch of KEYS) samples.push(await keystroke(page, ch));
  const longTasks = await page.evaluate(() => window.__longTasks.map((t) => Math.round(t)));
  d = await demo(page);
  assert.ok(d.text.startsWith("xyz".slice(0, WARMUP) + KEYS), "the keystrokes went into the text box");
  const summary = {
    teacher, method, value, layer, head: d.head, meanSparsity: d.meanSparsity, tokens: d.tokens, keystrokes: samples.length,
    updateMs: stats(samples.map((s) => s.updateMs)),
    forward: stats(samples.map((s) => s.forward)),
    forwardRest: stats(samples.map((s) => s.forwardRest)),
    predict: stats(samples.map((s) => s.predict)),
    attention: stats(samples.map((s) => s.attention)),
    draw: stats(samples.map((s) => s.draw)),
    inputToUpdateMs: stats(samples.map((s) => s.inputToUpdateMs)),
    inputToPaintMs: stats(samples.map((s) => s.inputToPaintMs)),
    inputToCompleteMs: stats(samples.map((s) => s.inputToCompleteMs)),
    longTasks,
    samples,
  };
  results.push(summary);
  const m = (k) => summary[k].median.toFixed(1);
  t.diagnostic(
    `${teacher} ${method} ${value}, layer ${layer} head ${d.head} (mean sparsity ${d.meanSparsity.toFixed(2)}): update median ${m("updateMs")} ms ` +
      `[${summary.updateMs.min.toFixed(1)}..${summary.updateMs.max.toFixed(1)}] (forward to the chosen layer ${m("forward")}, the rest ${m("forwardRest")}, predict ${m("predict")}, ` +
      `attention ${m("attention")}, draw ${m("draw")}); keystroke to paint ${m("inputToPaintMs")} ms (target ${TARGET_MS} ms), ` +
      `to the end of the update ${m("inputToUpdateMs")} ms, to the whole page painted ${m("inputToCompleteMs")} ms; ` +
      `main-thread long tasks: ${longTasks.length ? longTasks.join(", ") + " ms" : "none"}`,
  );
  return summary;
}

for (const teacher of ["causal", "masked"]) {
  for (const [method, value, layer] of SETTINGS) {
    test(`${teacher} teacher, ${method} ${value}, ${layer === LAST ? "the last layer" : `layer ${layer}`}: 10 keystrokes on 256 bytes`, async (t) => {
      const s = await measure(t, teacher, method, value, layer);
      assert.equal(s.samples.length, KEYS.length);
      for (const x of s.samples) assert.ok(x.updateMs > 0 && x.updateMs >= x.forward, "updateMs covers its phases");
    });
  }
}

test("timings written to the artefacts folder, no console or page errors", async (t) => {
  const path = writeArtifact("performance.json", {
    what: "demo page update on a keystroke, 256 tokens, window.entgraphDemo.updateMs and timings (ms)",
    targetMs: TARGET_MS,
    userAgent: await session.tab.page.evaluate(() => navigator.userAgent),
    isa: (await demo(session.tab.page)).isa,
    results,
  });
  t.diagnostic(`timings: ${path}`);
  await screenshot(session.tab.page, "performance");
  assert.equal(results.length, 2 * SETTINGS.length);
  assert.deepEqual(session.tab.errors, []);
});
