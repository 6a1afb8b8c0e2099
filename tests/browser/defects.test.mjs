// The page's defects of issue 29 (Chromium, 1440 x 900 and a 390 x 844 phone),
// each with a test that failed before its fix:
//  1. showing a cell changed the height of the hint above the graphs: the page
//     moved under a still pointer;
//  2. one character typed into an emptied text box threw in grid.js and left
//     the page pending;
//  3. the wheel scrolled the page under a still pointer and the tooltip kept
//     naming the old row;
//  4. a double tap on a phone zoomed in and straight out (the browser's dblclick);
//  5. switching the method kept the slider's number, not its meaning;
//  6. the keyboard cursor's announcement ran its lines together;
//  7. the thumbnails' captions were clipped on a phone;
//  8. the graphs' columns flipped with the text's length, the graphs started
//     below the first view at 1440 x 900, and smooth scrolling ignored
//     prefers-reduced-motion.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  DESKTOP, PHONE, afterUpdate, canvasInfo, chooseMethod, demo, focusSettled, framesLater, methodValues, openPage,
  resizeTo, scrollSettled, typeText, useBrowserTab, waitGraphsLaidOut, waitSettled,
} from "./helpers.mjs";

const session = useBrowserTab({ viewport: DESKTOP });

const SENTENCE = "The quick brown fox jumps over the lazy dog by the river bank.";

// Where a graph's cell (i, j) is and which cell is at a viewport point; the
// geometry of heatmap.js (30 px of labels on the left, 20 on top, 4 of padding), unzoomed.
function cellCentre(page, selector, i, j) {
  return page.evaluate(([sel, i, j]) => {
    const r = document.querySelector(`${sel} canvas`).getBoundingClientRect();
    const cell = (r.width - 34) / window.entgraphDemo.tokens;
    return { x: r.left + 30 + (j + 0.5) * cell, y: r.top + 20 + (i + 0.5) * cell, top: r.top };
  }, [selector, i, j]);
}

function cellAt(page, selector, x, y) {
  return page.evaluate(([sel, x, y]) => {
    const r = document.querySelector(`${sel} canvas`).getBoundingClientRect();
    const n = window.entgraphDemo.tokens;
    const cell = (r.width - 34) / n;
    const i = Math.floor((y - r.top - 20) / cell);
    const j = Math.floor((x - r.left - 30) / cell);
    return i >= 0 && j >= 0 && i < n && j < n ? { i, j } : null;
  }, [selector, x, y]);
}

// The tooltip's query and key (null when hidden).
function tooltipCell(page) {
  return page.evaluate(() => {
    const tip = document.getElementById("tooltip");
    if (tip.hidden) return null;
    return { i: Number(tip.textContent.match(/query (\d+)/)[1]), j: Number(tip.textContent.match(/key (\d+)/)[1]) };
  });
}

async function toTop(page) {
  await page.evaluate(() => window.scrollTo(0, 0));
  await waitSettled(page, "#graph-true canvas");
}

test("1. showing a cell moves nothing on the page: the tooltip names the cell under the still pointer", async () => {
  const { page } = session.tab;
  await typeText(page, SENTENCE.repeat(5).slice(0, 256)); // the text box, with its strip of tokens, is the panel's tallest column

  await waitGraphsLaidOut(page);
  for (const [i, j] of [[2, 1], [5, 3]]) {
    await page.mouse.move(0, 0);
    await toTop(page);
    const at = await cellCentre(page, "#graph-true", i, j);
    assert.ok(at.y < DESKTOP.height - 10, `cell (${i}, ${j}) is in the first view (at y ${at.y.toFixed(0)})`);
    const height = await page.evaluate(() => document.documentElement.scrollHeight);
    const hint = await page.$eval("#strip-hint", (e) => e.getBoundingClientRect().height);
    await page.mouse.move(at.x, at.y);
    await framesLater(page);
    assert.equal(await page.$eval("#strip-hint", (e) => e.getBoundingClientRect().height), hint, "the hint above the graphs kept its height");
    const now = await cellCentre(page, "#graph-true", i, j);
    assert.equal(now.top, at.top, "the graph did not move when the cell was shown");
    assert.equal(await page.evaluate(() => document.documentElement.scrollHeight), height, "nor did the page's height change");
    assert.deepEqual(await tooltipCell(page), { i, j });
  }
  await page.mouse.move(0, 0);
  await typeText(page, SENTENCE);
});

test("2. one character after an emptied text box: no error, the grid shows its numbers, nothing left pending", async () => {
  const tab = await openPage(session.browser, session.server.url); // its own page: the error left it pending
  try {
    const { page } = tab;
    await typeText(page, "");
    const d = await afterUpdate(page, () => page.fill("#text", "a"), { timeout: 15000 });
    assert.equal(d.tokens, 1);
    for (const id of ["#thumb-0-0", "#thumb-3-3"]) {
      const c = await canvasInfo(page, id);
      assert.equal(c.width, 1, `${id}: one token, one pixel`);
      assert.equal(c.drawn, 1, `${id}: the token's edge to itself is drawn`);
      assert.match(await page.textContent(`${id} .thumb-caption`), /sparsity \d\.\d\d\s+recall \d\.\d\d/);
    }
    assert.deepEqual(tab.errors, []);
  } finally {
    await tab.close();
  }
});

test("3. the wheel scrolls the page under a still pointer: the tooltip names the cell now under it, or hides", async () => {
  const { page } = session.tab;
  await toTop(page);
  const at = await cellCentre(page, "#graph-true", 4, 2);
  await page.mouse.move(at.x, at.y);
  assert.deepEqual(await tooltipCell(page), { i: 4, j: 2 });
  await page.mouse.wheel(0, 60);
  await waitSettled(page, "#graph-true canvas");
  await framesLater(page);
  const under = await cellAt(page, "#graph-true", at.x, at.y);
  assert.ok(under && under.i > 4, `the scroll moved another row under the pointer (${JSON.stringify(under)})`);
  assert.deepEqual(await tooltipCell(page), under, "the tooltip names the cell under the pointer");
  // A scroll that leaves the pointer off the graphs hides it.
  await page.mouse.wheel(0, -2000);
  await waitSettled(page, "#graph-true canvas");
  await framesLater(page);
  if (!(await cellAt(page, "#graph-true", at.x, at.y))) assert.equal(await tooltipCell(page), null);
  await page.mouse.move(0, 0);
});

test("4. a double tap on a phone zooms in and stays zoomed", async () => {
  const tab = await openPage(session.browser, session.server.url, { viewport: PHONE, contextOptions: { hasTouch: true, isMobile: true } });
  try {
    const { page } = tab;
    await typeText(page, SENTENCE);
    await scrollSettled(page, "#graph-true canvas");
    const at = await cellCentre(page, "#graph-true", 20, 10);
    await page.touchscreen.tap(at.x, at.y);
    await page.touchscreen.tap(at.x, at.y);
    await framesLater(page, 3);
    assert.equal(await page.evaluate(() => window.entgraphDemo.debug.state.zoom), 32, "the second tap zoomed in");
    assert.match(await page.textContent("#zoom-info"), /^queries \d+–\d+, keys \d+–\d+$/);
    assert.equal(await page.inputValue("#zoom"), "32");
    assert.deepEqual(tab.errors, []);
  } finally {
    await tab.close();
  }
});

test("4b. a double click with the mouse still zooms out", async () => {
  const { page } = session.tab;
  await toTop(page);
  const at = await cellCentre(page, "#graph-true", 10, 5);
  await page.mouse.click(at.x, at.y);
  await page.waitForFunction(() => /queries/.test(document.getElementById("zoom-info").textContent));
  await page.mouse.dblclick(at.x, at.y);
  await page.waitForFunction(() => /^\d+ tokens$/.test(document.getElementById("zoom-info").textContent));
  assert.equal(await page.inputValue("#zoom"), "0");
  await page.mouse.move(0, 0);
});

test("5. each method keeps its own setting; a method chosen first starts at its default", async () => {
  const { page } = session.tab;
  const teacher = (await demo(page)).teacher;
  const lowrank = await methodValues(page, teacher, "lowrank-threshold");
  const distance = await methodValues(page, teacher, "sparsefinder-distance");
  // A lowrank margin whose number is also a distance t (the 0.5), else the smallest margin.
  const margin = lowrank.find((v) => distance.includes(v)) ?? lowrank[0];
  await chooseMethod(page, "sparsefinder-distance", "3.5");
  await chooseMethod(page, "lowrank-threshold", margin);
  const back = await afterUpdate(page, () => page.selectOption("#method", "sparsefinder-distance"));
  assert.equal(back.value, "3.5", `Sparsefinder's t is its own, not lowrank's margin ${margin}`);
  assert.ok(back.meanRecall > 0.2, `a graph with edges (mean recall ${back.meanRecall})`);
  assert.equal(await page.textContent("#param-value"), "3.5");
  const again = await afterUpdate(page, () => page.selectOption("#method", "lowrank-threshold"));
  assert.equal(again.value, margin, "lowrank's margin came back with it");
  // A method not chosen before: the middle of its grid.
  const reformer = await methodValues(page, teacher, "reformer");
  const fresh = await afterUpdate(page, () => page.selectOption("#method", "reformer"));
  assert.equal(fresh.value, reformer[Math.floor((reformer.length - 1) / 2)]);
  await chooseMethod(page, "sparsefinder-distance", "3.5");
});

test("6. the keyboard cursor's announcement keeps the tooltip's lines apart", async () => {
  const { page } = session.tab;
  await focusSettled(page, "#graph-true canvas");
  await page.keyboard.press("Control+Home");
  await page.keyboard.press("ArrowDown");
  const lines = await page.$$eval("#tooltip > div", (ds) => ds.map((d) => d.textContent.replace(/\s+/g, " ").trim()));
  assert.equal(lines.length, 4);
  const said = (await page.textContent("#announce")).trim();
  assert.match(said, /probability [\d.e+-]+\. \S/, `"${said}"`);
  for (let k = 0; k + 1 < lines.length; k++) assert.ok(said.includes(`${lines[k]}. ${lines[k + 1]}`), `line ${k} and ${k + 1} apart in "${said}"`);
  await page.keyboard.press("Escape");
});

test("7. on a phone every thumbnail caption fits in its thumbnail", async () => {
  const tab = await openPage(session.browser, session.server.url, { viewport: PHONE, contextOptions: { hasTouch: true, isMobile: true } });
  try {
    const { page } = tab;
    await scrollSettled(page, "#heads-grid");
    const clipped = await page.$$eval("#heads-grid .thumb", (thumbs) => thumbs.flatMap((t) => {
      const box = t.getBoundingClientRect();
      return [...t.querySelectorAll(".thumb-caption span, .thumb-caption b")]
        .filter((s) => s.getBoundingClientRect().right > box.right - 2 + 0.5 || s.scrollWidth > Math.ceil(s.getBoundingClientRect().width))
        .map((s) => `${t.id}: "${s.textContent}" ends at ${s.getBoundingClientRect().right.toFixed(1)}, the thumbnail at ${box.right.toFixed(1)}`);
    }));
    assert.deepEqual(clipped, []);
    assert.deepEqual(tab.errors, []);
  } finally {
    await tab.close();
  }
});

test("8a. the graphs keep their columns and size whatever the text's length", async () => {
  const { page } = session.tab;
  await resizeTo(page, DESKTOP);
  const seen = [];
  for (const length of [1, 20, 41, 42, 50, 57, 64, 65, 66, 100, 200, 256]) {
    await typeText(page, SENTENCE.repeat(5).slice(0, length));
    await waitGraphsLaidOut(page);
    seen.push(await page.evaluate((length) => {
      const c = document.querySelector("#graph-true canvas").getBoundingClientRect();
      return { length, cols: getComputedStyle(document.getElementById("graph-row")).gridTemplateColumns.split(" ").length, width: c.width, height: c.height };
    }, length));
  }
  const first = seen[0];
  for (const s of seen) assert.deepEqual([s.cols, s.width, s.height], [first.cols, first.width, first.height], `at ${s.length} bytes: ${JSON.stringify(seen)}`);
  assert.equal(first.cols, 3, "three graphs a row at 1440 px");
});

test("8b. at 1440 x 900 the graphs are in the first view", async () => {
  const { page } = session.tab;
  await resizeTo(page, DESKTOP);
  await typeText(page, SENTENCE.repeat(5).slice(0, 256));
  await waitGraphsLaidOut(page);
  await toTop(page);
  const r = await page.$eval("#graph-true canvas", (c) => {
    const b = c.getBoundingClientRect();
    return { top: b.top, bottom: b.bottom, height: b.height };
  });
  const seen = Math.min(r.bottom, DESKTOP.height) - Math.max(r.top, 0);
  assert.ok(seen >= 0.9 * r.height, `90% of the graph in the first view: ${r.top.toFixed(0)}–${r.bottom.toFixed(0)} px of ${DESKTOP.height}`);
  assert.ok(r.height >= 300, `and not shrunk away (${r.height.toFixed(0)} px)`);
});

test("8c. smooth scrolling only where the reader has not asked for less motion", async () => {
  for (const [reducedMotion, want] of [["reduce", "auto"], ["no-preference", "smooth"]]) {
    const tab = await openPage(session.browser, session.server.url, { contextOptions: { reducedMotion } });
    try {
      assert.equal(await tab.page.evaluate(() => getComputedStyle(document.documentElement).scrollBehavior), want, reducedMotion);
    } finally {
      await tab.close();
    }
  }
});

test("no console or page errors", () => {
  assert.deepEqual(session.tab.errors, []);
});
