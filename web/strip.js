// The text as the model reads it, one box per byte token. While a graph's cell
// is shown (hovered, tapped, or under the keyboard cursor), the row of its query
// is painted onto the text: each key
// token shaded by its entmax weight, the query boxed, the hovered key underlined.

import { PROB_RAMP_CSS_FULL, probIndex } from "./palette.js";
import { setData } from "./dom.js";

export class TokenStrip {
  // hint: holds two sentences in one place (index.html), the idle one and the
  // shown cell's; only their visibility changes, so the page below never moves.
  constructor(root, hint) {
    this.root = root;
    this.hint = hint;
    this.cellHint = hint.querySelector(".strip-cell");
    this.cellHint.textContent = " ";
    this.glyphs = [];
    this.spans = [];
    this.lit = [];
  }

  // Keeps the boxes it has and changes only the text of those whose token
  // changed: on a keystroke, new boxes would cost the page a style pass over
  // all of them (hundreds) besides the layout that changed text costs anyway.
  setTokens(glyphs) {
    this.clear();
    this.glyphs = glyphs;
    const shown = (g) => (g === "␣" ? "\u00a0" : g);
    const keep = Math.min(glyphs.length, this.spans.length);
    for (let k = 0; k < keep; k++) setData(this.spans[k].firstChild, shown(glyphs[k]));
    for (const span of this.spans.splice(glyphs.length)) span.remove();
    if (glyphs.length > keep) {
      const frag = document.createDocumentFragment();
      for (let k = keep; k < glyphs.length; k++) {
        const span = document.createElement("span");
        span.className = "tok";
        span.textContent = shown(glyphs[k]);
        frag.appendChild(span);
        this.spans.push(span);
      }
      this.root.appendChild(frag);
    }
  }

  // weights: row i of the head's entmax weights (length n).
  show(i, j, weights) {
    if (!this.glyphs.length) return;
    this.clearMarks();
    for (let k = 0; k < weights.length; k++) {
      const w = weights[k];
      if (w > 0) {
        const idx = probIndex(w);
        const span = this.spans[k];
        span.style.background = PROB_RAMP_CSS_FULL[idx];
        span.style.color = idx > 150 ? "#fff" : "";
        this.lit.push(k);
      }
    }
    this.spans[i].classList.add("query");
    this.spans[j].classList.add("key");
    this.lit.push(i, j);
    this.root.classList.add("active");
    setData(this.cellHint.firstChild, `Token ${i} (boxed) looks at the shaded tokens; key ${j} is underlined.`);
    this.hint.classList.add("showing");
  }

  clearMarks() {
    for (const k of this.lit) {
      const span = this.spans[k];
      span.style.background = "";
      span.style.color = "";
      span.classList.remove("query", "key");
    }
    this.lit = [];
  }

  clear() {
    this.clearMarks();
    this.root.classList.remove("active");
    this.hint.classList.remove("showing");
  }
}
