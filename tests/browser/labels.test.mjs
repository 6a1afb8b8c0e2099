// Confusing labels of issue 16, at 1440 x 900: a short sentence gets its
// characters on the axes (cells of 7 px or more), in the same three graphs a
// row as long text (issue 29: a column count that changed with the text's
// length made the page jump while typing); the largest output error has a scale (the largest |output|
// of full attention); the explanation's share of zero pairs comes from the text's
// true graphs, not fixed words. Screenshots: labels-short.png, labels-long.png.
import { test } from "node:test";
import assert from "node:assert/strict";
import { DESKTOP, artifactPath, demo, resizeTo, typeText, useBrowserTab, waitGraphsLaidOut } from "./helpers.mjs";

const session = useBrowserTab();

const SHORT = "The quick brown fox jumps over the lazy dog by the river."; // 57 characters

// The graphs' columns and the width of a cell (heatmap.js: 34 px of the canvas are labels and padding).
function layout(page) {
  return page.evaluate(() => {
    const row = document.getElementById("graph-row");
    const c = document.querySelector("#graph-true canvas");
    const n = window.entgraphDemo.tokens;
    return {
      cols: getComputedStyle(row).gridTemplateColumns.split(" ").length,
      cell: (c.getBoundingClientRect().width - 34) / n,
    };
  });
}

// Dark pixels in the band above the plot, where the key labels are drawn, per
// column of cells: how many columns have a label.
function labelledColumns(page) {
  return page.evaluate(() => {
    const c = document.querySelector("#graph-true canvas");
    const n = window.entgraphDemo.tokens;
    const k = c.width / c.getBoundingClientRect().width;
    const cell = (c.width / k - 34) / n;
    const data = c.getContext("2d").getImageData(0, 0, c.width, Math.round(18 * k)).data;
    let labelled = 0;
    for (let t = 0; t < n; t++) {
      const x0 = Math.round((30 + t * cell) * k);
      const x1 = Math.round((30 + (t + 1) * cell) * k);
      let dark = 0;
      for (let y = 0; y < Math.round(18 * k); y++)
        for (let x = x0; x < x1; x++) {
          const at = (y * c.width + x) * 4;
          if (data[at + 3] > 128 && data[at] < 150) dark++;
        }
      if (dark > 0) labelled++;
    }
    return labelled;
  });
}

test("a 57-character sentence: cells of 7 px or more, three graphs a row, and its characters on the axes", async () => {
  const { page } = session.tab;
  await resizeTo(page, DESKTOP);
  const d = await typeText(page, SHORT);
  assert.equal(d.tokens, 57);
  await waitGraphsLaidOut(page); // a change of the row's columns redraws the graphs (ResizeObserver)
  const l = await layout(page);
  assert.ok(l.cell >= 7, `cells are ${l.cell.toFixed(1)} px`);
  assert.equal(l.cols, 3, "three graphs a row, as for long text");
  // Every column but the spaces has its character drawn above it.
  const spaces = [...SHORT].filter((ch) => ch === " ").length;
  assert.ok(await labelledColumns(page) >= 57 - spaces - 1, "the characters are on the key axis");
  await page.locator("#graph-row").screenshot({ path: artifactPath("labels-short.png") });
});

test("long text keeps three graphs a row, with positions on the axes", async () => {
  const { page } = session.tab;
  await page.click("#sample");
  await page.waitForFunction(() => window.entgraphDemo.tokens > 200 && !window.entgraphDemo.pending);
  await waitGraphsLaidOut(page);
  const l = await layout(page);
  assert.equal(l.cols, 3);
  assert.ok(l.cell < 7);
  await page.locator("#graph-row").screenshot({ path: artifactPath("labels-long.png") });
});

test("the largest output error says what it is compared with", async () => {
  const { page } = session.tab;
  const d = await demo(page);
  assert.ok(d.maxAbsOut > 0, `largest |output| ${d.maxAbsOut}`);
  const scale = (await page.textContent("#max-diff-scale")).trim();
  assert.ok(scale.includes(`of full attention's largest |output|, ${d.maxAbsOut.toPrecision(3)}`), scale);
  const pct = (100 * d.maxAbsDiff) / d.maxAbsOut;
  const shown = Number(scale.match(/\(([\d.]+)%/)?.[1] ?? NaN);
  assert.ok(Math.abs(shown - pct) <= 0.51 || (d.maxAbsDiff === 0 && /\(0%/.test(scale)), `${scale} vs ${pct}%`);
});

test("the share of zero pairs in the explanation comes from the text", async () => {
  const { page } = session.tab;
  const shares = new Set();
  for (const text of [SHORT, "a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a"]) {
    const d = await typeText(page, text);
    const said = (await page.textContent("#zero-share")).trim();
    const pct = (100 * d.meanGoldSparsity).toFixed(0);
    assert.ok(said.includes(`(${pct}% of the pairs the mask allows`), `"${said}" for true sparsity ${d.meanGoldSparsity}`);
    const words = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"][Math.round(d.meanGoldSparsity * 10)];
    if (d.meanGoldSparsity > 0.05 && d.meanGoldSparsity < 0.95) assert.ok(said.includes(`about ${words} pair`), said);
    shares.add(said);
  }
  assert.equal(shares.size, 2, "two texts, two sentences");
  const text = await page.textContent("#explain");
  assert.equal(text.includes("about nine pairs in ten are zero") && !text.includes("%"), false, "no fixed share");
});

test("no console or page errors", () => {
  assert.deepEqual(session.tab.errors, []);
});
