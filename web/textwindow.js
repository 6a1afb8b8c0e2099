// The text window's controls: the teacher reads at most `context` bytes, and a
// longer text is read through a window the reader slides over it (#text-window,
// a range over byte offsets, snapped to character starts by text.js). The part
// read is highlighted in place: #text-mirror lies behind the textarea (which is
// transparent), holds the same text in the same font and wrapping, with the
// window in a <mark>, and scrolls with it. (A mirror rather than a separate
// preview: the reader sees which words are read where they type them.)
// #cut-note says "bytes A–B of C read" (1-based, inclusive).

import { windowUtf8, charIndexAtByte } from "./text.js";
import { setData } from "./dom.js";

export class TextWindow {
  // els: { textarea, mirror, slider, row, note }; onChange() when the slider moves.
  constructor(els, onChange) {
    Object.assign(this, els);
    this.start = 0;
    this.shown = null;
    this.follow = false; // scroll the text box to the window once it is shown
    this.slider.addEventListener("input", () => {
      this.start = Number(this.slider.value);
      this.follow = true;
      onChange();
    });
    this.textarea.addEventListener("scroll", () => this.syncScroll());
    new ResizeObserver(() => this.syncBox()).observe(this.textarea);
  }

  // The bytes the model reads now: windowUtf8's { text, bytes, start, end, totalBytes, cut }.
  read(context) {
    const info = windowUtf8(this.textarea.value, this.start, context);
    this.start = info.start;
    return info;
  }

  // Shows a window read (the slider, the note and the highlight).
  show(info, context) {
    const follow = this.follow;
    this.follow = false;
    const long = info.totalBytes > context;
    this.row.hidden = !long;
    this.note.hidden = !info.cut;
    const fmt = (x) => x.toLocaleString("en-US");
    this.note.textContent = `bytes ${fmt(info.start + 1)}–${fmt(info.end)} of ${fmt(info.totalBytes)} read`;
    if (long) {
      this.slider.max = String(Math.max(0, info.totalBytes - context));
      this.slider.value = String(info.start);
      this.slider.setAttribute("aria-valuetext", this.note.textContent);
    }
    const text = this.textarea.value;
    const key = `${info.start}/${info.end}/${text}`;
    if (key === this.shown) return;
    this.shown = key;
    const wasCut = this.textarea.classList.contains("windowed");
    this.textarea.classList.toggle("windowed", info.cut);
    if (!info.cut) {
      this.mirror.textContent = "";
      return;
    }
    const a = charIndexAtByte(text, info.start);
    const b = charIndexAtByte(text, info.end);
    // a trailing newline needs a character after it to take its line
    const parts = [text.slice(0, a), text.slice(a, b), text.slice(b) + "\u200b"];
    const [before, mark, after] = this.mirror.childNodes;
    if (this.mirror.childNodes.length === 3 && mark.nodeName === "MARK") {
      // The same nodes with new text: no new elements to style on a keystroke.
      setData(before, parts[0]);
      setData(mark.firstChild, parts[1]);
      setData(after, parts[2]);
    } else {
      const m = document.createElement("mark");
      m.append(document.createTextNode(parts[1]));
      this.mirror.replaceChildren(document.createTextNode(parts[0]), m, document.createTextNode(parts[2]));
    }
    // The box follows the textarea's size (the ResizeObserver) and its scrolling
    // (its scroll events); the mirror's new text may still move its scroll
    // position, which is set again before the next frame, where the page is laid
    // out anyway (reading it now would lay the page out twice).
    if (!wasCut) this.syncBox();
    requestAnimationFrame(() => (follow ? this.scrollToWindow() : this.syncScroll()));
  }

  // The mirror covers the textarea's box less its scrollbar, and scrolls with it.
  syncBox() {
    const t = this.textarea;
    const cs = getComputedStyle(t);
    const bx = parseFloat(cs.borderLeftWidth) + parseFloat(cs.borderRightWidth);
    const by = parseFloat(cs.borderTopWidth) + parseFloat(cs.borderBottomWidth);
    this.mirror.style.width = `${t.clientWidth + bx}px`;
    this.mirror.style.height = `${t.clientHeight + by}px`;
    this.syncScroll();
  }

  syncScroll() {
    this.mirror.scrollTop = this.textarea.scrollTop;
    this.mirror.scrollLeft = this.textarea.scrollLeft;
  }

  // Scrolls the text box so that the window's first line shows (after the slider moved it).
  scrollToWindow() {
    const mark = this.mirror.querySelector("mark");
    if (!mark) return;
    const top = mark.offsetTop - 8;
    if (top < this.textarea.scrollTop || top > this.textarea.scrollTop + this.textarea.clientHeight - 24)
      this.textarea.scrollTop = Math.max(0, top);
    this.syncScroll();
  }
}
