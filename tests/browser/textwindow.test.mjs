// The text window (issue 16): a text longer than the teacher's context is read
// through a window the reader slides over it (#text-window, by byte offset,
// snapped to UTF-8 character starts); the part read is highlighted in the text
// box (#text-mirror, behind the textarea) and #cut-note says "bytes A–B of C
// read". The byte-window helpers of web/text.js are tested first, without a
// browser; then the page. Screenshot: text-window.png.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterUpdate, repoRoot, screenshot, typeText, useBrowserTab } from "./helpers.mjs";

const { windowUtf8, charStartAtOrBefore, lastWindowStart, charIndexAtByte, byteAtCharIndex } = await import(
  pathToFileURL(join(repoRoot, "web/text.js")).href
);
const utf8 = (s) => new TextEncoder().encode(s);

test("text.js: a window starts on a character start and ends on a character boundary", () => {
  const text = "aé".repeat(85) + "é tail"; // 262 bytes: 'é' is 2
  const first = windowUtf8(text, 0, 256);
  assert.equal(first.start, 0);
  assert.equal(first.end, 255, "byte 256 would split an 'é': the window stops before it");
  assert.equal(first.text, "aé".repeat(85));
  assert.equal(first.cut, true);
  assert.equal(first.totalBytes, 262);
  // Byte 2 is the second byte of the first 'é': the window starts at its first byte.
  const mid = windowUtf8(text, 2, 256);
  assert.equal(mid.start, 1);
  assert.equal(mid.text.startsWith("é"), true);
  assert.deepEqual(mid.bytes, utf8(mid.text));
  // Past the last full window: clamped, so that the window still holds as much as it can.
  const last = windowUtf8(text, 1000, 256);
  assert.equal(last.end, 262);
  assert.equal(last.start, 6);
  assert.equal(last.text, text.slice(4));
  // A text that fits is read whole, whatever the start.
  const short = windowUtf8("hello", 3, 256);
  assert.deepEqual([short.start, short.end, short.cut, short.text], [0, 5, false, "hello"]);
  assert.throws(() => windowUtf8("x", 0, NaN), /maxBytes/);
});

test("text.js: every window of a mixed text decodes to whole characters of the text", () => {
  const text = "Grüße, 世界! 😀 done. ".repeat(20);
  const all = utf8(text);
  for (let start = 0; start < all.length; start += 7) {
    const w = windowUtf8(text, start, 64);
    assert.ok(w.start <= Math.max(start, 0) || w.start === lastWindowStart(all, 64), `start ${start} -> ${w.start}`);
    assert.equal((all[w.start] & 0xc0) === 0x80, false, `window at ${w.start} starts mid-character`);
    assert.ok(w.end - w.start <= 64 && w.end - w.start >= 61, `window ${w.start}-${w.end}`);
    assert.deepEqual(w.bytes, all.slice(w.start, w.end));
    // The characters of the window are the text's, from charIndexAtByte(start) to charIndexAtByte(end).
    assert.equal(w.text, text.slice(charIndexAtByte(text, w.start), charIndexAtByte(text, w.end)));
    assert.equal(byteAtCharIndex(text, charIndexAtByte(text, w.start)), w.start);
  }
  assert.equal(charStartAtOrBefore(utf8("😀"), 3), 0);
  assert.equal(charStartAtOrBefore(utf8("😀"), 4), 4);
  assert.equal(lastWindowStart(utf8("short"), 256), 0);
});

// ---------------------------------------------------------------------------
// The page

const session = useBrowserTab();

// A long text of distinct lines, so that every window reads other words.
const LONG = Array.from({ length: 160 }, (_, k) => `Line ${k}: and the ${k % 2 ? "river" : "mountain"} went on, é ${k}.`).join("\n");

test("a long text shows whole, the model reads a window of it, and the slider moves the window", async () => {
  const { page } = session.tab;
  const total = utf8(LONG).length;
  assert.ok(total > 5000, `${total} bytes`);
  const d0 = await typeText(page, LONG);
  assert.equal(await page.inputValue("#text"), LONG, "the text box keeps the whole text");
  assert.equal(d0.inputBytes, total);
  assert.equal(d0.textStart, 0);
  assert.equal(d0.text, windowUtf8(LONG, 0, 256).text);
  assert.equal(await page.isVisible("#text-window"), true, "the slider shows for a long text");
  assert.equal(Number(await page.getAttribute("#text-window", "max")), total - 256);
  assert.equal((await page.textContent("#cut-note")).trim(), `bytes 1–${d0.textEnd.toLocaleString("en-US")} of ${total.toLocaleString("en-US")} read`);
  assert.equal(await page.textContent("#text-mirror mark"), d0.text, "the part read is highlighted");

  // Slide to the middle: the model reads bytes from there, cut on character boundaries.
  const want = windowUtf8(LONG, 3001, 256);
  const d1 = await afterUpdate(page, () => page.evaluate(() => {
    const s = document.getElementById("text-window");
    s.value = "3001";
    s.dispatchEvent(new Event("input", { bubbles: true }));
  }));
  assert.equal(d1.textStart, want.start);
  assert.equal(d1.textEnd, want.end);
  assert.equal(d1.text, want.text);
  assert.notEqual(d1.text, d0.text);
  assert.equal(d1.tokens, want.end - want.start);
  assert.equal((await page.textContent("#cut-note")).trim(), `bytes ${(want.start + 1).toLocaleString("en-US")}–${want.end.toLocaleString("en-US")} of ${total.toLocaleString("en-US")} read`);
  assert.equal(await page.textContent("#text-mirror mark"), want.text);
  assert.equal(await page.inputValue("#text-window"), String(want.start));
  assert.match(await page.getAttribute("#text-window", "aria-valuetext"), /^bytes [\d,]+–[\d,]+ of [\d,]+ read$/);
  // The highlight lies where the text box shows those characters: the mirror has the textarea's text and box.
  const box = await page.evaluate(() => {
    const t = document.getElementById("text").getBoundingClientRect();
    const m = document.getElementById("text-mirror");
    const r = m.getBoundingClientRect();
    return { dx: Math.abs(r.left - t.left), dy: Math.abs(r.top - t.top), text: m.textContent.replace(/\u200b$/, ""), scroll: [m.scrollTop, document.getElementById("text").scrollTop] };
  });
  assert.ok(box.dx < 1 && box.dy < 1, `the mirror sits under the text box (${box.dx}, ${box.dy})`);
  assert.equal(box.text, LONG);
  assert.equal(box.scroll[0], box.scroll[1], "the mirror scrolls with the text box");
  assert.ok(box.scroll[1] > 0, "the text box scrolled to the window");
  await screenshot(page, "text-window");

  // Typing keeps the window where it is; a short text hides the slider.
  const short = await typeText(page, "Short again.");
  assert.equal(short.cut, false);
  assert.equal(await page.isVisible("#text-window"), false);
  assert.equal(await page.isVisible("#cut-note"), false);
  assert.equal(await page.$("#text-mirror mark"), null, "no highlight when all of the text is read");
});

test("no console or page errors", () => {
  assert.deepEqual(session.tab.errors, []);
});
