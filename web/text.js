// Text and tokens: the teachers read bytes (one token per UTF-8 byte), at most
// `context` of them. Helpers to cut the text box's text and show tokens in
// context (their labels are TeacherOutput.tokenLabels of the package).

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function utf8Bytes(text) {
  return encoder.encode(text);
}

// The longest prefix of `text` of at most maxBytes UTF-8 bytes that ends on a
// character boundary. -> { text, bytes, cut, totalBytes }
export function cutUtf8(text, maxBytes) {
  const all = encoder.encode(text);
  if (all.length <= maxBytes) return { text, bytes: all, cut: false, totalBytes: all.length };
  let end = maxBytes;
  while (end > 0 && (all[end] & 0xc0) === 0x80) end--; // all[end] continues a character: cut before it
  const bytes = all.slice(0, end);
  return { text: decoder.decode(bytes), bytes, cut: true, totalBytes: all.length };
}

// The text window: the teachers read at most `context` bytes, and a long text
// is read through a window the reader slides over it (#text-window). Offsets are
// byte offsets into the text's UTF-8; a window starts on a character's first
// byte and ends on a character boundary, so it decodes to whole characters.

// The start of the character holding byte `offset` (offset clamped to the bytes).
export function charStartAtOrBefore(bytes, offset) {
  let at = Math.max(0, Math.min(Math.floor(offset), bytes.length));
  while (at > 0 && at < bytes.length && (bytes[at] & 0xc0) === 0x80) at--; // a continuation byte
  return at;
}

// The last start a full window can have: the earliest character start from which
// maxBytes reach the end (0 when the text fits).
export function lastWindowStart(bytes, maxBytes) {
  if (bytes.length <= maxBytes) return 0;
  let at = bytes.length - maxBytes;
  while (at < bytes.length && (bytes[at] & 0xc0) === 0x80) at++; // a window may not start mid-character
  return at;
}

// The bytes [start, end) the model reads when the window starts at byte `start`
// (snapped back to a character start, and clamped so that the window stays as
// full as the text allows). -> { text, bytes, start, end, totalBytes, cut }
// (cut: some of the text lies outside the window).
export function windowUtf8(text, start, maxBytes) {
  if (!(maxBytes >= 0)) throw new RangeError(`windowUtf8: maxBytes must be a number >= 0 (got ${maxBytes})`);
  const all = encoder.encode(text);
  const from = charStartAtOrBefore(all, Math.min(Number.isFinite(start) ? start : 0, lastWindowStart(all, maxBytes)));
  let end = Math.min(all.length, from + maxBytes);
  while (end > from && end < all.length && (all[end] & 0xc0) === 0x80) end--; // all[end] continues a character: cut before it
  const bytes = all.slice(from, end);
  return { text: decoder.decode(bytes), bytes, start: from, end, totalBytes: all.length, cut: from > 0 || end < all.length };
}

// The index in `text` (UTF-16 code units) of the character that starts at UTF-8
// byte `offset` (or the text's length past its end): to highlight a byte window
// in the text box.
export function charIndexAtByte(text, offset) {
  let bytes = 0;
  let i = 0;
  while (i < text.length && bytes < offset) {
    const code = text.codePointAt(i);
    bytes += code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
    i += code >= 0x10000 ? 2 : 1;
  }
  return i;
}

// The byte offset of the character at `index` in `text` (UTF-16 code units):
// where a caret or a click in the text box lies, in the model's bytes.
export function byteAtCharIndex(text, index) {
  return encoder.encode(text.slice(0, Math.max(0, index))).length;
}

// A few characters of context around token i, the token itself bracketed:
// "…went ou[t] from…". Newlines shown as "↵".
export function snippet(bytes, glyphs, i, radius = 7) {
  const from = Math.max(0, i - radius);
  const to = Math.min(bytes.length, i + radius + 1);
  const show = (k) => (bytes[k] === 0x20 ? " " : glyphs[k] === "·" ? "" : glyphs[k]);
  let s = from > 0 ? "…" : "";
  for (let k = from; k < to; k++) s += k === i ? `[${glyphs[k]}]` : show(k);
  return s + (to < bytes.length ? "…" : "");
}

export function byteHex(b) {
  return "0x" + b.toString(16).padStart(2, "0");
}

// Passages of held-out text that start at a line start, for the "another
// passage" button: each at most maxBytes, cut at a word boundary.
export function passages(heldout, maxBytes, from = 0) {
  const out = [];
  let pos = heldout.indexOf("\n", from);
  while (pos >= 0 && pos + 1 < heldout.length && out.length < 24) {
    const start = pos + 1;
    let { text } = cutUtf8(heldout.slice(start, start + maxBytes + 8), maxBytes);
    const space = text.lastIndexOf(" ");
    if (text.length >= maxBytes - 8 && space > maxBytes / 2) text = text.slice(0, space);
    if (text.trim().length > 40) out.push(text.replace(/\s+$/, ""));
    pos = heldout.indexOf("\n", start + text.length); // the next line start after this passage
  }
  return out;
}
