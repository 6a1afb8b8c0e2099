// The page loads: it becomes ready with no console or page error, draws the
// true / predicted / overlay graphs, the grid of all heads and the Pareto curves,
// and holds the explanation for students. Screenshots: load.png (1280 x 900,
// full page) and load-narrow.png (420 wide).
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  NARROW, WIDE, canvasInfo, demo, narrowScreenshot, resizeTo, screenshot, waitPareto,
  useBrowserTab,
} from "./helpers.mjs";

const session = useBrowserTab();

test("the page becomes ready with the default text, teacher and method", async () => {
  const d = await demo(session.tab.page);
  assert.equal(d.ready, true);
  assert.equal(d.pending, false);
  assert.equal(d.error, null);
  assert.ok(d.updates >= 1);
  assert.equal(d.teacher, "causal");
  assert.equal(d.method, "sparsefinder-distance");
  assert.equal(d.window, -1, "no union window by default");
  assert.ok(d.tokens > 40 && d.tokens <= 256, `tokens ${d.tokens}`);
  assert.equal(d.tokens, Buffer.byteLength(d.text, "utf8"));
  assert.equal(d.text, await session.tab.page.inputValue("#text"), "the default text is shown whole (it fits in 256 bytes)");
  assert.equal(d.heads.length, 16, "4 layers x 4 heads");
  for (const h of d.heads) {
    assert.ok(h.recall >= 0 && h.recall <= 1, `L${h.layer}H${h.head} recall ${h.recall}`);
    assert.ok(h.sparsity >= 0 && h.sparsity <= 1, `L${h.layer}H${h.head} sparsity ${h.sparsity}`);
  }
  assert.ok(d.updateMs > 0 && Number.isFinite(d.updateMs));
  assert.match(await session.tab.page.textContent("#status"), /^\s*$/, "no status line once loaded");
  assert.equal(await session.tab.page.isHidden("#status"), true);
  assert.equal(d.graphRows + d.repairedRows + d.denseRows, d.tokens, "bound and repair settles every row of the chosen head");
  assert.match(await session.tab.page.textContent("#graph-rows"), new RegExp(`^${d.graphRows}/${d.tokens}$`));
  for (const id of ["recall", "sparsity", "gold-sparsity", "precision", "mean-recall", "mean-sparsity"]) {
    const text = (await session.tab.page.textContent(`#${id}`)).trim();
    assert.match(text, /^[01]\.\d{3}$/, `#${id} shows a number (${text})`);
  }
  assert.match(await session.tab.page.textContent("#byte-count"), new RegExp(`^${d.inputBytes} bytes$`));
});

test("the three graphs of the chosen head are drawn", async () => {
  const hashes = new Set();
  for (const id of ["graph-true", "graph-pred", "graph-overlay"]) {
    const c = await canvasInfo(session.tab.page, `#${id}`);
    assert.ok(c.width > 100 && c.height > 100, `#${id} canvas is ${c.width} x ${c.height}`);
    assert.ok(c.drawn > (c.width * c.height) / 10, `#${id}: only ${c.drawn} of ${c.width * c.height} pixels drawn`);
    assert.ok(c.distinct >= 3, `#${id}: ${c.distinct} colours`);
    hashes.add(c.hash);
  }
  assert.equal(hashes.size, 3, "the true, predicted and overlay graphs differ");
});

test("the grid of all heads shows 16 drawn thumbnails with captions", async () => {
  const d = await demo(session.tab.page);
  const thumbs = await session.tab.page.$$eval("#heads-grid button.thumb", (bs) => bs.map((b) => b.id));
  assert.equal(thumbs.length, 16);
  for (let l = 0; l < 4; l++) {
    for (let h = 0; h < 4; h++) {
      const c = await canvasInfo(session.tab.page, `#thumb-${l}-${h}`);
      assert.equal(c.width, d.tokens, `#thumb-${l}-${h}: one pixel per token`);
      assert.ok(c.drawn > 0, `#thumb-${l}-${h} is blank`);
      const caption = await session.tab.page.textContent(`#thumb-${l}-${h} .thumb-caption`);
      assert.match(caption, new RegExp(`L${l} H${h} sparsity [01]\\.\\d\\d recall [01]\\.\\d\\d`));
    }
  }
  assert.equal(await session.tab.page.getAttribute("#thumb-0-0", "aria-pressed"), "true", "the chosen head is marked");
});

test("the Pareto plot draws every setting as a dot", async () => {
  await waitPareto(session.tab.page);
  const d = await demo(session.tab.page);
  assert.ok(d.paretoPoints > 100, `${d.paretoPoints} points`);
  const svg = await session.tab.page.$eval("#pareto svg", (s) => ({
    points: s.querySelectorAll("circle[data-point]").length,
    lines: s.querySelectorAll("path, polyline, line").length,
    width: s.getBoundingClientRect().width,
    height: s.getBoundingClientRect().height,
  }));
  assert.equal(svg.points, d.paretoPoints);
  assert.ok(svg.lines > 0, "the front lines and axes are drawn");
  assert.ok(svg.width > 200 && svg.height > 100, `svg ${svg.width} x ${svg.height}`);
  const legend = await session.tab.page.$$eval("#pareto-legend [data-method]", (els) => els.map((e) => e.dataset.method));
  assert.ok(legend.includes("sparsefinder-distance") && legend.length >= 9, `legend: ${legend}`);
  assert.match(await session.tab.page.textContent("#pareto-status"), new RegExp(`^${d.paretoPoints} points`));
});

test("the explanation for students is present", async () => {
  const text = await session.tab.page.textContent("#explain");
  for (const words of ["Attention", "entmax", "Recall", "sparsity", "Exactness", "Bound and repair", "Pareto"])
    assert.ok(text.includes(words), `#explain mentions ${words}`);
  // Bound and repair, as the runtime does it: a bound below the threshold proves a left-out key zero.
  assert.match(text.replace(/\s+/g, " "), /upper bound on its score .*falls below the row's threshold/);
  assert.match(text.replace(/\s+/g, " "), /so every row equals full attention/);
  assert.ok(text.length > 1500, `#explain holds ${text.length} characters`);
  assert.equal(await session.tab.page.isVisible("#explain"), true);
});

test("screenshots, and no console or page errors", async () => {
  await screenshot(session.tab.page, "load");
  await narrowScreenshot(session.tab.page, "load-narrow");
  // At 420 pixels the page must not scroll sideways.
  await resizeTo(session.tab.page, NARROW);
  const overflow = await session.tab.page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  await resizeTo(session.tab.page, WIDE);
  assert.ok(overflow <= 0, `at 420 pixels wide the page is ${overflow} pixels too wide`);
  assert.deepEqual(session.tab.errors, []);
});
