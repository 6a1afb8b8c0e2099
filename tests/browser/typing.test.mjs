// Typing text changes the graphs: the text the model reads, its token count,
// the drawn graphs and the numbers all follow the text box. Screenshot: typing.png.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  afterUpdate, canvasInfo, demo, graphHashes, screenshot, shownNumbers, typeText, waitPareto,
  useBrowserTab,
} from "./helpers.mjs";

const session = useBrowserTab();

const SENTENCE = "The quick brown fox jumps over the lazy dog, and the dog sleeps on.";

test("filling the text box with a new sentence changes the text, tokens, graphs and numbers", async () => {
  const { page } = session.tab;
  const before = await demo(page);
  const beforeHashes = await graphHashes(page);
  const beforeShown = await shownNumbers(page);

  const d = await typeText(page, SENTENCE);
  assert.equal(d.text, SENTENCE);
  assert.equal(d.tokens, SENTENCE.length);
  assert.notEqual(d.tokens, before.tokens);
  assert.equal(d.cut, false);
  assert.match(await page.textContent("#byte-count"), new RegExp(`^${SENTENCE.length} bytes$`));

  const afterHashes = await graphHashes(page);
  for (let i = 0; i < 3; i++) assert.notEqual(afterHashes[i], beforeHashes[i], `graph ${i} is redrawn for the new text`);
  assert.equal(await page.textContent("#zoom-info"), `${SENTENCE.length} tokens`);
  const strip = await page.$$eval("#token-strip > *", (els) => els.length);
  assert.ok(strip >= SENTENCE.length, `the token strip shows ${strip} tokens`);

  const shown = await shownNumbers(page);
  assert.equal(shown.recall, d.recall);
  assert.equal(shown.sparsity, d.sparsity);
  assert.equal(shown["mean-recall"], d.meanRecall);
  assert.equal(shown["mean-sparsity"], d.meanSparsity);
  assert.ok(
    shown.recall !== beforeShown.recall || shown.sparsity !== beforeShown.sparsity,
    "the chosen head's recall or sparsity changes with the text",
  );
  assert.notEqual(d.meanRecall, before.meanRecall);
  assert.notEqual(d.meanSparsity, before.meanSparsity);
  await waitPareto(page);
  await screenshot(page, "typing");
});

test("typing key by key updates after each keystroke", async () => {
  const { page } = session.tab;
  await page.focus("#text");
  await page.evaluate(() => {
    const t = document.getElementById("text");
    t.setSelectionRange(t.value.length, t.value.length);
  });
  let previous = await demo(page);
  const hashes = new Set([(await canvasInfo(page, "#graph-true")).hash]);
  for (const ch of " Amen") {
    const d = await afterUpdate(page, () => page.keyboard.type(ch));
    assert.equal(d.text, previous.text + ch);
    assert.equal(d.tokens, previous.tokens + 1);
    hashes.add((await canvasInfo(page, "#graph-true")).hash);
    previous = d;
  }
  assert.equal(hashes.size, 1 + " Amen".length, "every keystroke redraws the true graph with one more token");
  assert.equal(await page.inputValue("#text"), SENTENCE + " Amen");
});

test("text over 256 bytes is cut at a character boundary", async () => {
  const { page } = session.tab;
  // 85 x "aé" = 255 bytes... then "é" would straddle byte 256: the cut keeps 255 bytes.
  const text = "aé".repeat(85) + "é" + " tail";
  const d = await typeText(page, text);
  assert.equal(d.inputBytes, Buffer.byteLength(text));
  assert.equal(d.cut, true);
  assert.equal(d.tokens, 255);
  assert.equal(d.text, "aé".repeat(85));
  assert.equal(await page.isVisible("#cut-note"), true);
  // The model reads a window of the text (#text-window slides it); from the start by default.
  assert.equal((await page.textContent("#cut-note")).trim(), `bytes 1–255 of ${d.inputBytes} read`);
  assert.equal(await page.isVisible("#text-window"), true);
});

test("emptying the text box shows no graph and no error", async () => {
  const { page } = session.tab;
  const d = await typeText(page, "");
  assert.equal(d.tokens, 0);
  assert.equal(d.recall, null, "no recall (NaN, null in JSON) without tokens");
  assert.match(await page.textContent("#exactness"), /Type some text/);
  assert.equal((await page.textContent("#recall")).trim(), "–");
  for (const id of ["max-diff", "graph-rows", "repaired-rows", "repair-cost", "exact-diff"])
    assert.equal((await page.textContent(`#${id}`)).trim(), "–", `#${id} without tokens`);
  assert.equal((await page.textContent("#repair-summary")).trim(), "");
  const back = await typeText(page, SENTENCE);
  assert.equal(back.tokens, SENTENCE.length);
  assert.ok(back.recall >= 0 && back.recall <= 1);
});

test("the sample button loads another held-out passage", async () => {
  const { page } = session.tab;
  const before = await demo(page);
  const d = await afterUpdate(page, () => page.click("#sample"));
  assert.notEqual(d.text, before.text);
  assert.ok(d.tokens > 40 && d.tokens <= 256, `${d.tokens} tokens`);
  assert.equal(await page.inputValue("#text"), d.text);
});

test("no console or page errors", () => {
  assert.deepEqual(session.tab.errors, []);
});
