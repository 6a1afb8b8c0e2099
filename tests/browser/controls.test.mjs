// The controls: the method menu and the parameter slider change the recall and
// sparsity shown (#recall, #sparsity and their data-value attributes) and
// window.entgraphDemo; the union window adds edges; the teacher switch to the
// bidirectional (masked) model works; the layer / head pickers and the grid of
// heads choose the head; bound and repair (graph attention in mode "exact") makes
// every row of the chosen head exact, and the page shows by how much it needed
// repair. Screenshots: controls-*.png.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  afterUpdate, canvasInfo, chooseMethod, demo, graphHashes, openPage, screenshot, setSlider, shownNumbers, sliderMax, typeText, waitPareto,
  useBrowserTab,
} from "./helpers.mjs";

const session = useBrowserTab();

// The numbers shown equal the state object's, to the last bit.
async function assertShownMatchState(page, d) {
  const shown = await shownNumbers(page);
  assert.equal(shown.recall, d.recall, "#recall data-value");
  assert.equal(shown.sparsity, d.sparsity, "#sparsity data-value");
  assert.equal(shown["gold-sparsity"], d.goldSparsity, "#gold-sparsity data-value");
  assert.equal(shown.precision, d.precision, "#precision data-value");
  assert.equal(shown["mean-recall"], d.meanRecall, "#mean-recall data-value");
  assert.equal(shown["mean-sparsity"], d.meanSparsity, "#mean-sparsity data-value");
  assert.equal((await page.textContent("#recall")).trim(), d.recall.toFixed(3));
  assert.equal((await page.textContent("#sparsity")).trim(), d.sparsity.toFixed(3));
  const chosen = d.heads.find((h) => h.layer === d.layer && h.head === d.head);
  assert.equal(chosen.recall, d.recall);
  assert.equal(chosen.sparsity, d.sparsity);
  return shown;
}

test("the slider moves along the method's grid and trades recall for sparsity", async () => {
  const { page } = session.tab;
  const max = await sliderMax(page);
  assert.ok(max >= 5, `sparsefinder-distance has ${max + 1} values`);
  const low = await afterUpdate(page, () => setSlider(page, 0));
  assert.equal(low.valueIndex, 0);
  assert.equal(low.value, await page.textContent("#param-value"));
  await assertShownMatchState(page, low);
  const predLow = (await canvasInfo(page, "#graph-pred")).hash;

  const high = await afterUpdate(page, () => setSlider(page, max));
  assert.equal(high.valueIndex, max);
  assert.notEqual(high.value, low.value);
  assert.notEqual(high.paramFile, low.paramFile);
  await assertShownMatchState(page, high);
  assert.notEqual((await canvasInfo(page, "#graph-pred")).hash, predLow, "the predicted graph is redrawn");
  // sparsefinder-distance: a larger threshold t predicts more edges.
  assert.ok(high.meanRecall > low.meanRecall, `mean recall ${low.meanRecall} -> ${high.meanRecall}`);
  assert.ok(high.meanSparsity < low.meanSparsity, `mean sparsity ${low.meanSparsity} -> ${high.meanSparsity}`);
  assert.equal(high.text, low.text, "the slider does not touch the text");
  assert.equal(high.goldSparsity, low.goldSparsity, "nor the true graph");
});

test("the keyboard moves the slider one step", async () => {
  const { page } = session.tab;
  const before = await demo(page);
  await page.focus("#param-slider");
  const d = await afterUpdate(page, () => page.keyboard.press("ArrowLeft"));
  assert.equal(d.valueIndex, before.valueIndex - 1);
  assert.notEqual(d.paramFile, before.paramFile);
  await assertShownMatchState(page, d);
});

test("every method can be chosen and gives its own recall and sparsity", async () => {
  const { page } = session.tab;
  const methods = await page.$$eval("#method option", (os) => os.map((o) => o.value));
  assert.ok(methods.length >= 9, `methods: ${methods}`);
  const seen = new Map();
  for (const method of methods) {
    const d = await afterUpdate(page, () => page.selectOption("#method", method));
    assert.equal(d.method, method);
    assert.ok(d.paramFile.startsWith(method + "-") || d.paramFile.startsWith(method), `${method}: file ${d.paramFile}`);
    assert.equal(await page.inputValue("#method"), method);
    await assertShownMatchState(page, d);
    for (const h of d.heads) {
      assert.ok(h.recall >= 0 && h.recall <= 1 && h.sparsity >= 0 && h.sparsity <= 1, `${method} L${h.layer}H${h.head}`);
    }
    seen.set(`${d.meanRecall}/${d.meanSparsity}`, method);
  }
  assert.ok(seen.size >= methods.length - 1, `methods give distinct (mean recall, mean sparsity): ${[...seen.keys()]}`);
  await afterUpdate(page, () => page.selectOption("#method", "sparsefinder-distance"));
  await screenshot(page, "controls-methods");
});

test("a union window only adds edges: recall up, sparsity down", async () => {
  const { page } = session.tab;
  const d0 = await afterUpdate(page, () => page.selectOption("#method", "reformer"));
  assert.equal(d0.window, -1);
  const d1 = await afterUpdate(page, () => page.selectOption("#union-window", "5"));
  assert.equal(d1.window, 5);
  assert.equal(d1.paramFile, d0.paramFile);
  await assertShownMatchState(page, d1);
  for (let i = 0; i < d0.heads.length; i++) {
    assert.ok(d1.heads[i].recall >= d0.heads[i].recall, `head ${i}: recall ${d0.heads[i].recall} -> ${d1.heads[i].recall}`);
    assert.ok(d1.heads[i].sparsity <= d0.heads[i].sparsity, `head ${i}: sparsity`);
  }
  assert.ok(d1.meanRecall > d0.meanRecall && d1.meanSparsity < d0.meanSparsity);
  assert.match(await page.textContent("#pred-caption"), /\+ window 5/);
  const back = await afterUpdate(page, () => page.selectOption("#union-window", "-1"));
  assert.deepEqual(back.heads, d0.heads, "back to no window: the same numbers");
});

test("the layer and head pickers and the grid choose the head", async () => {
  const { page } = session.tab;
  const d0 = await demo(page);
  const hashes0 = await graphHashes(page);
  const d1 = await afterUpdate(page, () => page.selectOption("#layer", "2"));
  assert.equal(d1.layer, 2);
  const d2 = await afterUpdate(page, () => page.selectOption("#head", "3"));
  assert.equal(d2.layer, 2);
  assert.equal(d2.head, 3);
  const h = d2.heads.find((x) => x.layer === 2 && x.head === 3);
  assert.equal(d2.recall, h.recall);
  assert.equal(d2.sparsity, h.sparsity);
  assert.deepEqual(d2.heads, d0.heads, "choosing a head does not change any head's numbers");
  await assertShownMatchState(page, d2);
  const hashes2 = await graphHashes(page);
  for (let i = 0; i < 3; i++) assert.notEqual(hashes2[i], hashes0[i], `graph ${i} shows the new head`);
  assert.equal(await page.getAttribute("#thumb-2-3", "aria-pressed"), "true");
  assert.equal(await page.getAttribute("#thumb-0-0", "aria-pressed"), "false");
  assert.deepEqual(await page.$$eval(".cur-layer", (els) => els.map((e) => e.textContent)), ["2", "2"]);
  assert.deepEqual(await page.$$eval(".cur-head", (els) => els.map((e) => e.textContent)), ["3", "3"]);

  const d3 = await afterUpdate(page, () => page.click("#thumb-1-2"));
  assert.equal(d3.layer, 1);
  assert.equal(d3.head, 2);
  assert.equal(await page.inputValue("#layer"), "1");
  assert.equal(await page.inputValue("#head"), "2");
  await assertShownMatchState(page, d3);
});

// Bound and repair on the chosen head (graph attention in mode "exact"): every row is
// exact, by the graph alone or after repair; the numbers shown are the state's; the
// predicted graph alone (mode "fast") is exact where recall is 1.
async function assertRepairShown(page, d, label) {
  const n = d.tokens;
  const fixed = d.repairedRows + d.denseRows;
  assert.equal(d.graphRows + fixed, n, `${label}: rows by the graph alone + repaired + dense = ${n}`);
  assert.ok(d.graphRows <= d.coveredRows, `${label}: a row proven by the graph alone holds every true edge`);
  assert.ok(d.exactMaxAbsDiff <= 1e-5, `${label}: exact mode's largest error ${d.exactMaxAbsDiff}`);
  if (d.recall === 1) assert.ok(d.maxAbsDiff <= 1e-5, `${label}: recall 1, the graph alone is exact (${d.maxAbsDiff})`);
  // An empty predicted graph (a strict setting on a quiet head) leaves everything to repair: no share to show.
  assert.equal(d.repairShare, d.graphPairs > 0 ? d.repairPairs / d.graphPairs : null);
  // A repaired row gained a key with weight, so pairs were added; rows exact by
  // the graph alone may still have cost a few scored pairs to prove.
  if (fixed > 0) assert.ok(d.repairPairs > 0, `${label}: ${fixed} rows repaired by adding pairs`);
  const shown = await shownNumbers(page, ["max-diff", "covered-rows", "graph-rows", "repaired-rows", "repair-cost", "exact-diff"]);
  assert.equal(shown["max-diff"], d.maxAbsDiff);
  assert.equal(shown["covered-rows"], d.coveredRows);
  assert.equal(shown["graph-rows"], d.graphRows);
  assert.equal(shown["repaired-rows"], fixed);
  assert.equal(shown["repair-cost"], d.repairShare ?? NaN);
  assert.equal(shown["exact-diff"], d.exactMaxAbsDiff);
  assert.equal((await page.textContent("#graph-rows")).trim(), `${d.graphRows}/${n}`);
  assert.equal((await page.textContent("#repaired-rows")).trim(), `${fixed}/${n}`);
  const cost = (await page.textContent("#repair-cost")).trim();
  if (d.graphPairs > 0) assert.match(cost, /^\+(0|<0\.1|\d\.\d|\d+)%$/);
  else assert.equal(cost, `${d.repairPairs} pairs`);
  const summary = (await page.textContent("#repair-summary")).trim();
  if (d.repairPairs === 0) assert.match(summary, new RegExp(`all ${n} rows proven exact from the predicted graph alone`));
  else if (fixed === 0) {
    assert.ok(summary.includes(`all ${n} rows proven exact by the graph alone, after scoring ${d.repairPairs} extra pairs (`), summary);
    assert.match(summary, /Every row equals full attention\.$/);
  } else {
    assert.ok(summary.includes(`${d.graphRows} of ${n} rows proven exact by the graph alone; ${fixed} repaired`), summary);
    assert.ok(summary.includes(`scoring ${d.repairPairs} extra pairs (`), summary);
    assert.match(summary, /Every row then equals full attention\.$/);
  }
}

test("bound and repair: every row exact, by the graph alone or after repair, and what repair cost", async () => {
  const { page } = session.tab;
  const seen = [];
  for (const [method, at] of [["sparsefinder-distance", 0], ["sparsefinder-distance", "max"], ["window", 0], ["reformer", 0]]) {
    let d = await chooseMethod(page, method);
    const index = at === "max" ? await sliderMax(page) : at;
    if (d.valueIndex !== index) d = await afterUpdate(page, () => setSlider(page, index));
    for (const [layer, head] of [[0, 0], [2, 1], [3, 3]]) {
      if (d.layer !== layer || d.head !== head) d = await afterUpdate(page, () => page.click(`#thumb-${layer}-${head}`));
      const label = `${method} ${d.value} L${layer}H${head}`;
      await assertRepairShown(page, d, label);
      seen.push({ label, recall: d.recall, graphRows: d.graphRows, repaired: d.repairedRows + d.denseRows, share: d.repairShare });
    }
  }
  assert.ok(seen.some((x) => x.repaired > 0), `some setting needed repair: ${JSON.stringify(seen)}`);
  assert.ok(seen.some((x) => x.graphRows > 0), `some rows were settled by the graph alone: ${JSON.stringify(seen)}`);
  await afterUpdate(page, () => page.click("#thumb-0-0"));
  await chooseMethod(page, "sparsefinder-distance");
  await screenshot(page, "controls-repair");
});

test("switching to the bidirectional (masked) teacher and back", async () => {
  const { page } = session.tab;
  // Not while the Pareto curves still compute: see the last test.
  await waitPareto(page);
  const causal = await demo(page);
  const masked = await afterUpdate(page, () => page.selectOption("#teacher", "masked"), { timeout: 60000 });
  assert.equal(masked.teacher, "masked");
  assert.equal(masked.text, causal.text);
  assert.equal(masked.tokens, causal.tokens);
  assert.equal(masked.layer, causal.layer);
  assert.equal(masked.head, causal.head);
  await assertShownMatchState(page, masked);
  await assertRepairShown(page, masked, "masked teacher");
  assert.notEqual(masked.meanRecall, causal.meanRecall);
  assert.notEqual(masked.goldSparsity, causal.goldSparsity);
  assert.equal(await page.evaluate(() => document.body.classList.contains("bidirectional")), true);
  // The bidirectional model attends to later tokens too: the upper triangle of the true graph has edges.
  const upper = await page.evaluate(() => {
    const { run } = window.entgraphDemo.debug;
    const probs = run.chosen.probs; // the chosen head's weights, as drawn
    let count = 0;
    for (let i = 0; i < run.n; i++) for (let j = i + 1; j < run.n; j++) if (probs[i * run.n + j] > 0) count++;
    return count;
  });
  assert.ok(upper > 0, "masked teacher: edges above the diagonal");
  await waitPareto(page);
  await screenshot(page, "controls-masked");

  const methods = await page.$$eval("#method option", (os) => os.map((o) => o.value));
  assert.ok(methods.includes("sparsefinder-kmeans"));
  const max = await sliderMax(page);
  const m1 = await afterUpdate(page, () => setSlider(page, max));
  assert.equal(m1.teacher, "masked");
  await assertShownMatchState(page, m1);

  const back = await afterUpdate(page, () => page.selectOption("#teacher", "causal"));
  assert.equal(back.teacher, "causal");
  assert.equal(await page.evaluate(() => document.body.classList.contains("bidirectional")), false);
  await assertShownMatchState(page, back);
});

test("no console or page errors", () => {
  assert.deepEqual(session.tab.errors, []);
});

// A regression test: the Pareto computation's progress callback used to read
// the new teacher's manifest before its files had loaded ("Cannot read
// properties of undefined (reading 'manifest')").
test(
  "switching the teacher while the Pareto curves compute gives no error",
  async () => {
    const fresh = await openPage(session.browser, session.server.url);
    try {
      const { page } = fresh;
      await typeText(page, "Some new text, typed here to start the Pareto curves again. ".repeat(3));
      await page.waitForFunction(() => /computing/.test(document.getElementById("pareto-status").textContent));
      const d = await afterUpdate(page, () => page.selectOption("#teacher", "masked"), { timeout: 60000 });
      assert.equal(d.teacher, "masked");
      await waitPareto(page);
      assert.equal((await demo(page)).error, null);
      assert.deepEqual(fresh.errors, []);
    } finally {
      await fresh.close();
    }
  },
);
