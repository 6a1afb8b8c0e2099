// Access (issue 16): the graphs take a keyboard cell cursor that drives the
// tooltip and the token strip (and pans a zoomed view); the Pareto points are
// focusable buttons with names, picked with Enter; a polite live region says
// recall and sparsity after an update, without flooding while typing; the
// definitions are reachable without hovering; a tap on a graph shows a cell on a
// touch screen; the Pareto plot stays legible at 390 px. Screenshots:
// access-desktop.png (1440 x 900), access-phone.png (390 x 844), access-keyboard.png.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  DESKTOP, PHONE, afterUpdate, demo, focusSettled, framesLater, openPage, screenshot, scrollSettled, typeText,
  useBrowserTab, waitPareto, waitSettled,
} from "./helpers.mjs";

const session = useBrowserTab();

// The graph's geometry as heatmap.js draws it (LEFT 30, TOP 20, PAD 4 px): the
// viewport centre of cell (i, j) of the canvas under `selector`.
async function cellCentre(page, selector, i, j) {
  return page.evaluate(([sel, i, j]) => {
    const c = document.querySelector(`${sel} canvas`);
    const r = c.getBoundingClientRect();
    const { row0, col0 } = window.entgraphDemo.debug.state;
    const info = document.getElementById("zoom-info").textContent;
    const n = window.entgraphDemo.tokens;
    const size = /queries (\d+)–(\d+)/.test(info) ? Number(info.match(/queries (\d+)–(\d+)/)[2]) - row0 + 1 : n;
    const cell = (r.width - 34) / size;
    return { x: r.left + 30 + (j - col0 + 0.5) * cell, y: r.top + 20 + (i - row0 + 0.5) * cell, cell };
  }, [selector, i, j]);
}

// What the tooltip and the strip show: { query, key, text } (null when hidden).
async function shown(page) {
  return page.evaluate(() => {
    const tip = document.getElementById("tooltip");
    if (tip.hidden) return null;
    const toks = [...document.querySelectorAll("#token-strip .tok")];
    return {
      query: Number(tip.textContent.match(/query (\d+)/)[1]),
      key: Number(tip.textContent.match(/key (\d+)/)[1]),
      text: tip.textContent,
      stripQuery: toks.findIndex((t) => t.classList.contains("query")),
      stripKey: toks.findIndex((t) => t.classList.contains("key")),
    };
  });
}

test("the graphs are focusable, with a role and a name that says how to use them", async () => {
  const { page } = session.tab;
  for (const id of ["graph-true", "graph-pred", "graph-overlay"]) {
    const a = await page.$eval(`#${id} canvas`, (c) => ({ tab: c.tabIndex, role: c.getAttribute("role"), name: c.getAttribute("aria-label") }));
    assert.equal(a.tab, 0, `#${id} canvas is in the tab order`);
    assert.equal(a.role, "application");
    assert.match(a.name, /Arrow keys move a cell cursor/);
    assert.match(a.name, /Enter zooms in/);
  }
});

test("arrow keys move a cell cursor; the tooltip and the strip follow it, as the pointer would show them", async () => {
  const { page } = session.tab;
  // Focusing the graph scrolls it into view (smoothly): the cells' places are read once it stops.
  await focusSettled(page, "#graph-true canvas");
  await page.keyboard.press("Control+Home");
  let s = await shown(page);
  assert.deepEqual([s.query, s.key], [0, 0], "Ctrl+Home: the first cell");
  for (let k = 0; k < 3; k++) await page.keyboard.press("ArrowDown");
  await page.keyboard.press("ArrowRight");
  await page.keyboard.press("ArrowRight");
  s = await shown(page);
  assert.deepEqual([s.query, s.key], [3, 2]);
  assert.deepEqual([s.stripQuery, s.stripKey], [3, 2], "the strip boxes the query and underlines the key");
  await page.keyboard.press("Shift+ArrowDown");
  s = await shown(page);
  assert.deepEqual([s.query, s.key], [11, 2], "Shift+arrow moves 8");
  await page.keyboard.press("PageDown");
  await page.keyboard.press("End");
  s = await shown(page);
  const n = (await demo(page)).tokens;
  assert.deepEqual([s.query, s.key], [19, n - 1], "Page Down moves 8 rows, End goes to the row's last key");
  await page.keyboard.press("Home");
  s = await shown(page);
  assert.deepEqual([s.query, s.key], [19, 0]);
  const keyboardText = s.text;
  // The announcement for a screen reader says the same, each line a sentence (defects.test.mjs, 6).
  const lines = await page.$$eval("#tooltip > div", (ds) => ds.map((d) => d.textContent.replace(/\s+/g, " ").trim()));
  assert.equal((await page.textContent("#announce")).trim(), lines.join(". ") + ".");

  // The pointer on the same cell shows the same tooltip.
  await page.keyboard.press("Escape");
  assert.equal(await shown(page), null, "Escape hides the cursor");
  await waitSettled(page, "#graph-true canvas");
  const at = await cellCentre(page, "#graph-true", 19, 0);
  await page.mouse.move(at.x, at.y);
  s = await shown(page);
  assert.deepEqual([s.query, s.key], [19, 0]);
  assert.equal(s.text, keyboardText, "keyboard and pointer show the same values");
  await page.mouse.move(0, 0);
  assert.equal(await shown(page), null);
});

test("the three graphs share the cursor; Enter zooms, the cursor pans the zoomed view, Escape unzooms", async () => {
  const { page } = session.tab;
  await focusSettled(page, "#graph-true canvas");
  await page.keyboard.press("Control+Home");
  await page.keyboard.press("ArrowDown");
  await page.keyboard.press("ArrowRight");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.closest(".graph-canvas")?.id), "graph-pred");
  let s = await shown(page);
  assert.deepEqual([s.query, s.key], [1, 1], "Tab to the next graph keeps the cursor's cell");
  await page.screenshot({ path: (await import("./helpers.mjs")).artifactPath("access-keyboard.png") });

  // A zoom only redraws (no new update): wait for the view to say so.
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => /queries/.test(document.getElementById("zoom-info").textContent));
  assert.match(await page.textContent("#zoom-info"), /^queries 0–31, keys 0–31$/, "Enter zooms to 32 tokens around the cell");
  await page.waitForFunction(() => !document.getElementById("tooltip").hidden);
  for (let k = 0; k < 5; k++) await page.keyboard.press("PageDown"); // row 41: past the view
  s = await shown(page);
  assert.equal(s.query, 41);
  const info = await page.textContent("#zoom-info");
  const [, r0, r1] = info.match(/queries (\d+)–(\d+)/).map(Number);
  assert.ok(r0 <= 41 && 41 <= r1, `the view (${info}) pans to keep the cursor in it`);
  await page.keyboard.press("Escape");
  assert.equal(await shown(page), null);
  await page.keyboard.press("Escape");
  await page.waitForFunction(() => !/queries/.test(document.getElementById("zoom-info").textContent));
  assert.match(await page.textContent("#zoom-info"), /^\d+ tokens$/, "a second Escape zooms out");
});

test("Pareto points: one in the tab order, named, arrow keys move, Enter picks the setting", async () => {
  const { page } = session.tab;
  await waitPareto(page);
  const inTab = await page.$$eval('#pareto [data-point][tabindex="0"]', (els) => els.length);
  assert.equal(inTab, 1, "a roving tabindex: one point in the tab order");
  const all = await page.$$eval("#pareto [data-point]", (els) => els.map((e) => [e.getAttribute("role"), e.getAttribute("aria-label")]));
  for (const [role, name] of all) {
    assert.equal(role, "button");
    assert.match(name, /: recall [01]\.\d{3}, sparsity [01]\.\d{3} \(mean of all heads\)$/);
  }
  await page.focus('#pareto [data-point][tabindex="0"]');
  const first = await page.evaluate(() => document.activeElement.getAttribute("aria-label"));
  await page.keyboard.press("ArrowDown");
  await page.keyboard.press("ArrowLeft");
  const name = await page.evaluate(() => document.activeElement.getAttribute("aria-label"));
  assert.notEqual(name, first, "arrow keys move the focus to another point");
  assert.equal(await page.$$eval('#pareto [data-point][tabindex="0"]', (els) => els.length), 1);
  assert.match(await page.textContent("#pareto-readout"), /recall [01]\.\d{3}, sparsity/, "the focused point is described on screen");
  const d = await afterUpdate(page, () => page.keyboard.press("Enter"));
  const label = await page.$eval(`#method option[value="${d.method}"]`, (o) => o.textContent);
  assert.ok(name.startsWith(label), `picked ${d.method} from "${name}"`);
  if (d.parameter) assert.ok(name.includes(`= ${d.value},`), `value ${d.value} in "${name}"`);
  assert.ok(d.window >= 0 ? name.includes(`window of ${d.window}:`) : name.includes("no added window"), `window ${d.window} in "${name}"`);
  // The focus outlives the redraw that moves the marker.
  assert.equal(await page.evaluate(() => document.activeElement.getAttribute("aria-label")), name);
});

test("the live region says recall and sparsity once typing pauses, not at every keystroke", async () => {
  const { page } = session.tab;
  await page.evaluate(() => {
    window.__announced = [];
    new MutationObserver(() => window.__announced.push(document.getElementById("announce").textContent)).observe(
      document.getElementById("announce"), { childList: true, characterData: true, subtree: true });
  });
  await page.focus("#text");
  await page.evaluate(() => {
    const t = document.getElementById("text");
    t.setSelectionRange(t.value.length, t.value.length);
  });
  await page.keyboard.type(" and so on", { delay: 60 });
  await page.waitForFunction(() => !window.entgraphDemo.pending);
  // The message comes once the updates pause (announce.js): wait for the one of the last update.
  await page.waitForFunction(() => {
    const d = window.entgraphDemo;
    return document.getElementById("announce").textContent.startsWith(
      `Layer ${d.layer}, head ${d.head}: recall ${d.recall.toFixed(2)}, sparsity ${d.sparsity.toFixed(2)}.`);
  }, null, { timeout: 10000 });
  const d = await demo(page);
  const said = await page.evaluate(() => window.__announced);
  assert.ok(said.length >= 1 && said.length <= 2, `announced ${said.length} times for 10 keystrokes: ${JSON.stringify(said)}`);
  const text = (await page.textContent("#announce")).trim();
  assert.ok(text.startsWith(`Layer ${d.layer}, head ${d.head}: recall ${d.recall.toFixed(2)}, sparsity ${d.sparsity.toFixed(2)}.`), text);
  assert.ok(text.includes(`mean: recall ${d.meanRecall.toFixed(2)}, sparsity ${d.meanSparsity.toFixed(2)}`), text);
  assert.equal(await page.getAttribute("#announce", "aria-live"), "polite");
});

test("definitions are on the page, not only in hover titles", async () => {
  const { page } = session.tab;
  await page.click("#glossary summary");
  assert.equal(await page.isVisible("#def-recall"), true);
  for (const [el, def] of [["#recall", "def-recall"], ["#sparsity", "def-sparsity"], ["#gold-sparsity", "def-gold-sparsity"], ["#precision", "def-precision"]]) {
    const by = await page.$eval(el, (e) => e.closest("[aria-describedby]")?.getAttribute("aria-describedby"));
    assert.equal(by, def, `${el} is described by #${def}`);
    assert.ok((await page.textContent(`#${def}`)).length > 40);
  }
  assert.match(await page.textContent("#def-means"), /big numbers above are the chosen head's/);
  await page.click("#glossary summary");
});

test("a tap on a graph cell shows its tooltip and strip; a tap elsewhere hides them", async () => {
  const tab = await openPage(session.browser, session.server.url, { viewport: PHONE, contextOptions: { hasTouch: true, isMobile: true } });
  try {
    const { page } = tab;
    await scrollSettled(page, "#graph-true canvas");
    const at = await cellCentre(page, "#graph-true", 30, 12);
    await page.touchscreen.tap(at.x, at.y);
    let s = await shown(page);
    assert.ok(s, "the tap shows the tooltip");
    assert.deepEqual([s.query, s.key], [30, 12]);
    assert.deepEqual([s.stripQuery, s.stripKey], [30, 12]);
    await framesLater(page); // no hover-out when the finger lifts
    assert.deepEqual([(await shown(page))?.query, (await shown(page))?.key], [30, 12]);
    const h2 = await page.$eval(".graphs-head h2", (e) => {
      const r = e.getBoundingClientRect();
      return { x: r.left + 5, y: r.top + r.height / 2 };
    });
    await page.touchscreen.tap(h2.x, h2.y);
    assert.equal(await shown(page), null, "a tap elsewhere hides it");
    assert.deepEqual(tab.errors, []);
  } finally {
    await tab.close();
  }
});

test("the Pareto plot at 390 px: text of 11 px or more, 24 px tap targets, a legend apart, every method numbered", async () => {
  const tab = await openPage(session.browser, session.server.url, { viewport: PHONE, contextOptions: { hasTouch: true, isMobile: true } });
  try {
    const { page } = tab;
    await waitPareto(page);
    await scrollSettled(page, "#pareto");
    const sizes = await page.$$eval("#pareto svg text", (ts) => {
      const svg = ts[0].ownerSVGElement;
      const k = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
      return ts.map((t) => ({ text: t.textContent, px: parseFloat(getComputedStyle(t).fontSize) * k }));
    });
    for (const s of sizes) assert.ok(s.px >= 11, `"${s.text}" is ${s.px.toFixed(1)} px`);
    const overlap = await page.evaluate(() => {
      const a = document.querySelector("#pareto svg").getBoundingClientRect();
      return [...document.querySelectorAll("#pareto-legend .legend-item")].some((el) => {
        const b = el.getBoundingClientRect();
        return b.top < a.bottom && b.bottom > a.top && b.left < a.right && b.right > a.left;
      });
    });
    assert.equal(overlap, false, "the legend does not overlap the plot");
    const values = await page.$$eval("#pareto-legend .legend-item", (els) => els.map((e) => [e.dataset.method, e.querySelector(".legend-value")?.textContent ?? ""]));
    for (const [m, v] of values) assert.match(v, /^[01]\.\d\d\*?$/, `${m} has a number in the legend`);
    assert.match(await page.textContent("#pareto svg"), /mean of \d+ heads/, "“you are here” says it is a mean over the heads");
    // A tap 10 px above a dot picks it (a 24 px target): a dot with no other dot within the hit radius of that spot.
    const target = await page.evaluate(() => {
      const dots = [...document.querySelectorAll("#pareto [data-point]")].map((el) => {
        const r = el.getBoundingClientRect();
        return { x: r.left + r.width / 2, y: r.top + r.height / 2, name: el.getAttribute("aria-label"), r: r.width / 2 };
      });
      const alone = dots.find((a) => dots.every((b) => b === a || Math.hypot(b.x - a.x, b.y - a.y + 10) > 13));
      return alone && { x: alone.x, y: alone.y - 10, name: alone.name, r: alone.r };
    });
    assert.ok(target, "some dot stands apart");
    assert.ok(target.r * 2 < 24, `the dot itself is smaller than the target (${(target.r * 2).toFixed(1)} px)`);
    const d = await afterUpdate(page, () => page.touchscreen.tap(target.x, target.y));
    const label = await page.$eval(`#method option[value="${d.method}"]`, (o) => o.textContent);
    assert.ok(target.name.startsWith(label), `tapped near "${target.name}", chose ${d.method} ${d.value} window ${d.window}`);
    if (d.parameter) assert.ok(target.name.includes(`= ${d.value},`), `value ${d.value} in "${target.name}"`);
    await page.screenshot({ path: (await import("./helpers.mjs")).artifactPath("access-pareto-phone.png") });
    assert.deepEqual(tab.errors, []);
  } finally {
    await tab.close();
  }
});

test("screenshots at 1440 x 900 and 390 x 844, and no console or page errors", async () => {
  for (const [size, name] of [[DESKTOP, "access-desktop"], [PHONE, "access-phone"]]) {
    const tab = await openPage(session.browser, session.server.url, { viewport: size });
    try {
      await waitPareto(tab.page);
      await screenshot(tab.page, name);
      const overflow = await tab.page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
      assert.ok(overflow <= 0, `${name}: ${overflow} px too wide`);
      assert.deepEqual(tab.errors, []);
    } finally {
      await tab.close();
    }
  }
  assert.deepEqual(session.tab.errors, []);
});
