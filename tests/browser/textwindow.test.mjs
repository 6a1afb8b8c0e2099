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
import { afterUpdate, demo, repoRoot, screenshot, typeText, useBrowserTab } from "./helpers.mjs";

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
