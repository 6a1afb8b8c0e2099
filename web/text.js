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
