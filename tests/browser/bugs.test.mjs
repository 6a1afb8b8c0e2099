// Two bugs of issue 16, each with a test that failed before its fix:
// (a) the 16-head grid kept the previous text's graphs when the text box was
//     emptied (grid.js drew nothing for 0 tokens and left the old pictures);
// (b) after changing the head or the teacher by keyboard while the pointer rested
//     on a graph, the tooltip and the token strip showed the old head's values
//     (app.js now shows the cell again from the new result, or hides it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { afterUpdate, canvasInfo, demo, focusSettled, resizeTo, typeText, useBrowserTab, waitSettled } from "./helpers.mjs";

const session = useBrowserTab();

test("(a) emptying the text box clears the grid of heads", async () => {
  const { page } = session.tab;
  await typeText(page, "In the beginning was the word, and the word was with the page.");
  const before = await canvasInfo(page, "#thumb-1-2");
  assert.ok(before.drawn > 0, "the thumbnail shows the sentence's graph");
  const d = await typeText(page, "");
  assert.equal(d.tokens, 0);
  for (let l = 0; l < 4; l++) {
    for (let h = 0; h < 4; h++) {
      const c = await canvasInfo(page, `#thumb-${l}-${h}`);
      assert.equal(c.drawn, 0, `#thumb-${l}-${h} still shows ${c.drawn} pixels of the previous text's graph`);
    }
  }
  for (const caption of await page.$$eval("#heads-grid .thumb-caption", (els) => els.map((e) => e.textContent)))
    assert.match(caption, /sparsity – recall –/, "no numbers without text");
  await typeText(page, "And the text came back, and the grid with it.");
  assert.ok((await canvasInfo(page, "#thumb-1-2")).drawn > 0, "typing again draws the grid again");
});

// The pointer on cell (i, j) of the true graph: -> the tooltip's text.
async function hoverCell(page, i, j) {
  // The page at its top: the head and teacher menus and the graph's first rows are all in view,
  // so that focusing a menu does not scroll the graph from under the pointer.
  await resizeTo(page, { width: 1280, height: 1200 });
  await page.evaluate(() => window.scrollTo(0, 0)); // smooth where the page scrolls smoothly
  await waitSettled(page, "#graph-true canvas");
  const at = await page.evaluate(([i, j]) => {
    const c = document.querySelector("#graph-true canvas");
    const r = c.getBoundingClientRect();
    const n = window.entgraphDemo.tokens;
    const cell = (r.width - 34) / n; // heatmap.js: 30 px of labels on the left, 4 of padding
    return { x: r.left + 30 + (j + 0.5) * cell, y: r.top + 20 + (i + 0.5) * cell };
  }, [i, j]);
  assert.ok(at.y < (await page.viewportSize()).height - 10, `cell (${i}, ${j}) is in view`);
  await page.mouse.move(at.x, at.y);
  return tooltip(page);
}

function tooltip(page) {
  return page.evaluate(() => {
    const tip = document.getElementById("tooltip");
    const lit = [...document.querySelectorAll("#token-strip .tok")].map((t) => t.style.background).join("|");
    return tip.hidden ? null : { text: tip.textContent, lit };
  });
}

// A cell of row `i` with weight in the chosen head, so that another head's values differ there.
function weightedCell(page, i) {
  return page.evaluate((i) => {
    const { run } = window.entgraphDemo.debug;
    let best = 0;
    for (let j = 0; j < run.n; j++) if (run.chosen.probs[i * run.n + j] > run.chosen.probs[i * run.n + best]) best = j;
    return best;
  }, i);
}

for (const [what, control, expect] of [
  ["head", "#head", (d) => d.head === 1],
  ["teacher", "#teacher", (d) => d.teacher === "masked"],
]) {
  test(`(b) changing the ${what} by keyboard under a resting pointer refreshes the tooltip and the strip`, async () => {
    const { page } = session.tab;
    await typeText(page, "The pointer rests on the graph while the keyboard changes the head.");
    if ((await demo(page)).head !== 0) await afterUpdate(page, () => page.selectOption("#head", "0"));
    const i = 6;
    const j = await weightedCell(page, i);
    const old = await hoverCell(page, i, j);
    assert.ok(old && old.text.includes(`query ${i}`), "the pointer shows the cell");
    // The keyboard changes the control; the pointer does not move.
    await focusSettled(page, control);
    const d = await afterUpdate(page, () => page.keyboard.press("ArrowDown"), { timeout: 60000 });
    assert.ok(expect(d), `the ${what} changed (head ${d.head}, teacher ${d.teacher})`);
    const now = await tooltip(page);
    assert.ok(now, "the tooltip is still shown for the cell under the pointer");
    assert.notEqual(now.text, old.text, `the tooltip still shows the old ${what}'s values: ${old.text}`);
    // What a fresh hover of the same cell shows now.
    await page.mouse.move(0, 0);
    const fresh = await hoverCell(page, i, j);
    assert.equal(now.text, fresh.text, "the tooltip after the change equals a fresh hover");
    assert.equal(now.lit, fresh.lit, "and the token strip too");
    await page.mouse.move(0, 0);
    if (d.teacher !== "causal") await afterUpdate(page, () => page.selectOption("#teacher", "causal"), { timeout: 60000 });
  });
}

test("no console or page errors", () => {
  assert.deepEqual(session.tab.errors, []);
});
