// One attention graph as a canvas heatmap: rows are queries i, columns keys j.
// Cells are drawn into an offscreen image at one pixel per cell and scaled up
// without smoothing (65,536 cells as SVG elements would be far too slow); axes,
// token labels and the hover crosshair are drawn on top.
//
// Data shared by the three views (set by the page after each update):
//   { n, glyphs, state: Uint8Array(n * n), probs: Float32Array(n * n) }
// state bits (cells.js): ALLOWED (the mask allows the pair), GOLD (true entmax
// edge), PRED (predicted edge). Modes: "true" (probabilities of the gold edges),
// "pred" (predicted edges), "overlay" (hits, misses, extra edges).
//
// Each graph is focusable: arrow keys move a cell cursor, shared by the three
// graphs, that drives the same tooltip and token strip as the pointer (the
// hover handler gets an event-like position from the cell's rectangle). On a
// touch screen a tap shows a cell (a second tap on it zooms), and a tap
// elsewhere hides it.

import { WORDS, PROB_RAMP, probIndex } from "./palette.js";
import { ALLOWED, GOLD, PRED } from "./cells.js";

const GOLD_WORD = PROB_RAMP[200];


const LEFT = 30; // px for query labels
const TOP = 20; // px for key labels
const PAD = 4;
// Cells at least this wide get their characters on the axes (a 57-byte
// sentence in one of three graphs at 1440 px: 7.2 px). The row of graphs keeps
// its columns whatever the text's length (style.css): a layout that changed
// with the length made the page jump while typing.
export const GLYPH_CELL = 7;
// Cells the cursor moves with Shift+arrows, Page Up and Page Down.
export const BIG_STEP = 8;

// The cursor the three graphs share: the cell last shown (by keyboard or pointer),
// and whether it is shown now.
const cursor = { cell: null, shown: false, by: null };

// A tap outside every graph hides what a tap on a graph showed.
let touchShownBy = null;
document.addEventListener("pointerdown", (e) => {
  if (e.pointerType === "mouse" || !touchShownBy) return;
  if (e.target instanceof Element && e.target.closest(".graph-canvas")) return;
  const view = touchShownBy;
  touchShownBy = null;
  cursor.shown = false;
  view.handlers.leave();
});

// Colour words by state bits, per mode ("gold": the true graph without weights).
function lut(word) {
  const t = new Uint32Array(8);
  for (let s = 0; s < 8; s++) t[s] = s & ALLOWED ? word(s) : WORDS.masked;
  return t;
}
const LUTS = {
  gold: lut((s) => (s & GOLD ? GOLD_WORD : WORDS.empty)),
  pred: lut((s) => (s & PRED ? WORDS.predicted : WORDS.empty)),
  overlay: lut((s) => (s & GOLD ? (s & PRED ? WORDS.hit : WORDS.miss) : s & PRED ? WORDS.extra : WORDS.empty)),
};

// Fills a Uint32Array (rows of `stride` words) with the colours of the cells
// [row0, row0+size) x [col0, col0+size). Mode "true" shades the true edges by
// their weight (data.probs); without probs it draws them in one colour.
export function fillCells(words, mode, data, row0, col0, size, stride = size) {
  const { n, state, probs } = data;
  if (mode === "true" && probs) {
    const masked = WORDS.masked;
    const empty = WORDS.empty;
    for (let r = 0; r < size; r++) {
      let at = (row0 + r) * n + col0;
      let o = r * stride;
      for (let c = 0; c < size; c++, at++, o++) {
        const p = probs[at];
        words[o] = !(state[at] & ALLOWED) ? masked : p > 0 ? PROB_RAMP[probIndex(p)] : empty;
      }
    }
    return;
  }
  const table = LUTS[mode === "true" ? "gold" : mode];
  for (let r = 0; r < size; r++) {
    let at = (row0 + r) * n + col0;
    let o = r * stride;
    for (let c = 0; c < size; c++, at++, o++) words[o] = table[state[at]];
  }
}

export class GraphView {
  // root: an element holding a <canvas>; handlers: { hover(cell, event, view), leave(),
  // click(cell), panTo(row0, col0), reset() }
  constructor(root, mode, handlers) {
    this.root = root;
    this.mode = mode;
    this.handlers = handlers;
    this.canvas = root.querySelector("canvas") ?? root.appendChild(document.createElement("canvas"));
    this.ctx = this.canvas.getContext("2d");
    this.makeFocusable();
    this.off = document.createElement("canvas");
    this.offCtx = this.off.getContext("2d");
    this.data = null;
    this.view = { row0: 0, col0: 0, size: 0 };
    this.hover = null;
    this.imageDirty = true;
    this.width = 0;
    this.drag = null;
    this.lastPointer = null; // the pointerType of the last press: a double tap is no double click
    new ResizeObserver(() => this.resize()).observe(root);
    this.resize();
    this.bindPointer();
    this.bindKeys();
  }

  // tabindex, a role and a name that says how to use the graph by keyboard.
  makeFocusable() {
    const c = this.canvas;
    const name = c.getAttribute("aria-label") || `${this.mode} attention graph`;
    c.tabIndex = 0;
    c.setAttribute("role", "application");
    c.setAttribute("aria-roledescription", "attention graph");
    c.setAttribute(
      "aria-label",
      `${name}. Arrow keys move a cell cursor (query row, key column) and show its score and weight; ` +
        `Shift+arrows or Page Up/Down move ${BIG_STEP}; Home/End: first/last key of the row; ` +
        `Enter zooms in; Escape hides the cursor, then zooms out.`,
    );
  }

  setData(data) {
    this.data = data;
    this.imageDirty = true;
  }

  setView(view) {
    this.view = view;
    this.imageDirty = true;
    this.canvas.classList.toggle("zoomed", this.data != null && view.size < this.data.n);
  }

  setHover(cell) {
    this.hover = cell;
  }

  resize() {
    const width = Math.floor(this.root.clientWidth);
    if (width <= 0 || width === this.width) return;
    this.width = width;
    this.draw();
  }

  geometry() {
    const plot = Math.max(40, this.width - LEFT - PAD);
    const size = this.view.size || (this.data ? this.data.n : 1);
    return { plot, size, cell: plot / size, x0: LEFT, y0: TOP };
  }

  buildImage() {
    const { row0, col0 } = this.view;
    const size = this.view.size;
    if (this.off.width !== size || this.off.height !== size) {
      this.off.width = size;
      this.off.height = size;
      this.image = this.offCtx.createImageData(size, size);
    }
    fillCells(new Uint32Array(this.image.data.buffer), this.mode, this.data, row0, col0, size);
    this.offCtx.putImageData(this.image, 0, 0);
    this.imageDirty = false;
  }

  draw() {
    if (!this.width) return;
    const dpr = window.devicePixelRatio || 1;
    const { plot, size, cell, x0, y0 } = this.geometry();
    const cssHeight = TOP + plot + PAD;
    if (this.canvas.width !== Math.round(this.width * dpr) || this.canvas.height !== Math.round(cssHeight * dpr)) {
      this.canvas.width = Math.round(this.width * dpr);
      this.canvas.height = Math.round(cssHeight * dpr);
      this.canvas.style.height = `${cssHeight}px`;
    }
    const ctx = this.ctx;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, this.width, cssHeight);
    if (!this.data || this.data.n === 0) {
      ctx.fillStyle = "#f4f5f7";
      ctx.fillRect(x0, y0, plot, plot);
      ctx.fillStyle = "#5d6778";
      ctx.font = "14px system-ui, sans-serif";
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText(this.data ? "type some text" : "loading…", x0 + plot / 2, y0 + plot / 2);
      return;
    }
    if (this.imageDirty) this.buildImage();
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(this.off, x0, y0, plot, plot);

    const { row0, col0 } = this.view;
    if (cell >= 7) {
      // cell borders, so that single edges read as cells
      ctx.strokeStyle = "rgba(255,255,255,0.85)";
      ctx.lineWidth = 1;
      ctx.beginPath();
      for (let t = 1; t < size; t++) {
        const p = Math.round(t * cell) + 0.5;
        ctx.moveTo(x0 + p, y0);
        ctx.lineTo(x0 + p, y0 + plot);
        ctx.moveTo(x0, y0 + p);
        ctx.lineTo(x0 + plot, y0 + p);
      }
      ctx.stroke();
    }
    ctx.strokeStyle = "#8a93a3";
    ctx.lineWidth = 1;
    ctx.strokeRect(x0 - 0.5, y0 - 0.5, plot + 1, plot + 1);

    const hover = this.hover;
    const inRows = hover && hover.i >= row0 && hover.i < row0 + size;
    const inCols = hover && hover.j >= col0 && hover.j < col0 + size;
    if (inRows) {
      ctx.fillStyle = "rgba(20,30,50,0.10)";
      ctx.fillRect(x0, y0 + (hover.i - row0) * cell, plot, Math.max(cell, 1));
    }
    if (inCols) {
      ctx.fillStyle = "rgba(20,30,50,0.10)";
      ctx.fillRect(x0 + (hover.j - col0) * cell, y0, Math.max(cell, 1), plot);
    }
    if (inRows && inCols) {
      const s = Math.max(cell, document.activeElement === this.canvas ? 7 : 3); // the keyboard cursor stays visible on small cells
      const x = x0 + (hover.j - col0) * cell + cell / 2 - s / 2;
      const y = y0 + (hover.i - row0) * cell + cell / 2 - s / 2;
      ctx.lineWidth = 2;
      ctx.strokeStyle = "#ffffff";
      ctx.strokeRect(x - 1, y - 1, s + 2, s + 2);
      ctx.lineWidth = 1.5;
      ctx.strokeStyle = "#111111";
      ctx.strokeRect(x - 1, y - 1, s + 2, s + 2);
    }
    this.drawLabels(ctx, { plot, size, cell, x0, y0, inRows, inCols });
  }

  drawLabels(ctx, { size, cell, x0, y0, inRows, inCols }) {
    const { row0, col0 } = this.view;
    const { glyphs } = this.data;
    ctx.textBaseline = "middle";
    ctx.fillStyle = "#3d4656";
    const hover = this.hover;
    if (cell >= GLYPH_CELL) {
      // every token, as its glyph
      const font = Math.max(8, Math.min(15, Math.floor(cell * 0.95)));
      ctx.font = `${font}px ui-monospace, "DejaVu Sans Mono", monospace`;
      ctx.textAlign = "center";
      for (let t = 0; t < size; t++) {
        ctx.fillStyle = inCols && col0 + t === hover.j ? "#000000" : "#3d4656";
        ctx.fillText(glyphs[col0 + t], x0 + (t + 0.5) * cell, y0 - TOP / 2);
      }
      ctx.textAlign = "right";
      for (let t = 0; t < size; t++) {
        ctx.fillStyle = inRows && row0 + t === hover.i ? "#000000" : "#3d4656";
        ctx.fillText(glyphs[row0 + t], x0 - 6, y0 + (t + 0.5) * cell);
      }
    } else {
      // token positions every `step` tokens
      let step = 1;
      while (step * cell < 26) step *= 2;
      ctx.font = `10px system-ui, sans-serif`;
      ctx.textAlign = "center";
      ctx.strokeStyle = "#8a93a3";
      ctx.beginPath();
      for (let t = Math.ceil(col0 / step) * step; t < col0 + size; t += step) {
        const x = x0 + (t - col0 + 0.5) * cell;
        ctx.moveTo(x, y0 - 3);
        ctx.lineTo(x, y0);
        ctx.fillText(String(t), x, y0 - 10);
      }
      ctx.textAlign = "right";
      for (let t = Math.ceil(row0 / step) * step; t < row0 + size; t += step) {
        const y = y0 + (t - row0 + 0.5) * cell;
        ctx.moveTo(x0 - 3, y);
        ctx.lineTo(x0, y);
        ctx.fillText(String(t), x0 - 5, y);
      }
      ctx.stroke();
    }
    // the hovered tokens, boxed on both axes
    ctx.font = `bold 13px ui-monospace, "DejaVu Sans Mono", monospace`;
    ctx.textAlign = "center";
    if (inCols) {
      const x = Math.min(Math.max(x0 + (hover.j - col0 + 0.5) * cell, x0 + 9), x0 + size * cell - 9);
      this.badge(ctx, glyphs[hover.j], x, y0 - TOP / 2);
    }
    if (inRows) {
      const y = Math.min(Math.max(y0 + (hover.i - row0 + 0.5) * cell, y0 + 9), y0 + size * cell - 9);
      this.badge(ctx, glyphs[hover.i], x0 - 15, y);
    }
  }

  badge(ctx, text, x, y) {
    const w = Math.max(18, ctx.measureText(text).width + 8);
    ctx.fillStyle = "#111827";
    ctx.fillRect(x - w / 2, y - 9, w, 18);
    ctx.fillStyle = "#ffffff";
    ctx.fillText(text, x, y + 1);
  }

  cellAt(event) {
    if (!this.data || this.data.n === 0) return null;
    const rect = this.canvas.getBoundingClientRect();
    const { cell, x0, y0, size } = this.geometry();
    const c = Math.floor((event.clientX - rect.left - x0) / cell);
    const r = Math.floor((event.clientY - rect.top - y0) / cell);
    if (r < 0 || c < 0 || r >= size || c >= size) return null;
    return { i: this.view.row0 + r, j: this.view.col0 + c };
  }

  bindPointer() {
    const c = this.canvas;
    c.addEventListener("pointerdown", (e) => {
      this.lastPointer = e.pointerType;
      if (e.button !== 0) return;
      this.drag = { x: e.clientX, y: e.clientY, row0: this.view.row0, col0: this.view.col0, moved: false };
      c.setPointerCapture(e.pointerId);
    });
    c.addEventListener("pointermove", (e) => {
      const d = this.drag;
      if (d && this.data && this.view.size < this.data.n) {
        const dx = e.clientX - d.x;
        const dy = e.clientY - d.y;
        if (d.moved || Math.abs(dx) + Math.abs(dy) > 4) {
          d.moved = true;
          const { cell } = this.geometry();
          this.handlers.panTo(d.row0 - Math.round(dy / cell), d.col0 - Math.round(dx / cell));
        }
      }
      if (e.pointerType !== "mouse") return; // touch: taps only (pointerup)
      const cell = this.cellAt(e);
      if (cell) {
        cursor.cell = cell;
        cursor.by = "pointer";
        this.handlers.hover(cell, e, this);
      } else this.handlers.leave();
    });
    c.addEventListener("pointerup", (e) => {
      const d = this.drag;
      this.drag = null;
      if (d && !d.moved) {
        const cell = this.cellAt(e);
        if (!cell) return;
        if (e.pointerType === "mouse") {
          this.handlers.click(cell);
          return;
        }
        // Touch and pen have no hover: a tap shows the cell; a second tap on it zooms in.
        const again = touchShownBy && cursor.shown && sameCell(cursor.cell, cell);
        cursor.cell = cell;
        cursor.shown = true;
        cursor.by = "touch";
        touchShownBy = this;
        if (again) this.handlers.click(cell);
        this.handlers.hover(cell, e, this);
      }
    });
    c.addEventListener("pointercancel", () => (this.drag = null));
    c.addEventListener("pointerleave", (e) => {
      // A finger lifted "leaves" too: what a tap shows stays until a tap elsewhere.
      if (!this.drag && e.pointerType === "mouse") this.handlers.leave();
    });
    // A double click zooms out; a double tap is the second tap's zoom in (the
    // browser sends dblclick after two quick taps too: it must not undo that).
    c.addEventListener("dblclick", () => {
      if (this.lastPointer === "mouse") this.handlers.reset();
    });
  }

  // The position (viewport px) just below and right of a cell, for the tooltip.
  eventAt(cell) {
    const rect = this.canvas.getBoundingClientRect();
    const { cell: px, x0, y0 } = this.geometry();
    return {
      clientX: rect.left + x0 + (cell.j - this.view.col0 + 1) * px,
      clientY: rect.top + y0 + (cell.i - this.view.row0 + 1) * px,
      pointerType: "keyboard",
    };
  }

  // Shows the shared cursor's cell (panning a zoomed view to it first).
  showCursor(cell) {
    const n = this.data.n;
    cell = { i: clamp(cell.i, 0, n - 1), j: clamp(cell.j, 0, n - 1) };
    cursor.cell = cell;
    cursor.shown = true;
    cursor.by = "keyboard";
    const { row0, col0 } = this.view;
    const size = this.view.size || n;
    if (size < n) {
      const r = cell.i < row0 ? cell.i : cell.i >= row0 + size ? cell.i - size + 1 : row0;
      const k = cell.j < col0 ? cell.j : cell.j >= col0 + size ? cell.j - size + 1 : col0;
      if (r !== row0 || k !== col0) this.handlers.panTo(r, k);
    }
    this.handlers.hover(cell, this.eventAt(cell), this);
  }

  // Where the cursor starts on focus: where it was, if it is in view; else the view's first cell.
  startCell() {
    const { row0, col0 } = this.view;
    const size = this.view.size || this.data.n;
    const c = cursor.cell;
    if (c && c.i >= row0 && c.i < row0 + size && c.j >= col0 && c.j < col0 + size && c.i < this.data.n && c.j < this.data.n) return c;
    return { i: row0, j: col0 };
  }

  bindKeys() {
    const c = this.canvas;
    c.addEventListener("focus", () => {
      // Only a keyboard focus shows the cursor: a click focuses the canvas too, and hovers by itself.
      if (!this.data || this.data.n === 0 || !c.matches(":focus-visible")) return;
      // Tabbing from one graph to the next keeps the cursor where it was.
      this.showCursor(this.startCell());
    });
    c.addEventListener("blur", (e) => {
      const next = e.relatedTarget;
      if (cursor.by === "keyboard" && !(next instanceof Element && next.closest(".graph-canvas"))) {
        cursor.shown = false;
        this.handlers.leave();
      } else this.draw(); // the focused cursor's box shrinks back
    });
    c.addEventListener("keydown", (e) => {
      if (!this.data || this.data.n === 0 || e.altKey || e.metaKey) return;
      const n = this.data.n;
      const at = cursor.shown && cursor.cell ? cursor.cell : this.startCell();
      let { i, j } = at;
      const step = e.shiftKey ? BIG_STEP : 1;
      switch (e.key) {
        case "ArrowUp": i -= step; break;
        case "ArrowDown": i += step; break;
        case "ArrowLeft": j -= step; break;
        case "ArrowRight": j += step; break;
        case "PageUp": if (e.shiftKey) j -= BIG_STEP; else i -= BIG_STEP; break;
        case "PageDown": if (e.shiftKey) j += BIG_STEP; else i += BIG_STEP; break;
        case "Home": if (e.ctrlKey) i = 0; j = 0; break;
        case "End": if (e.ctrlKey) i = n - 1; j = n - 1; break;
        case "Enter":
        case " ":
          e.preventDefault();
          this.handlers.click(at);
          // A zoom redraws on the next frame: show the cell again where it then is.
          requestAnimationFrame(() => requestAnimationFrame(() => {
            if (document.activeElement === c) this.showCursor(at);
          }));
          return;
        case "Escape":
          e.preventDefault();
          e.stopPropagation();
          if (cursor.shown) {
            cursor.shown = false;
            this.handlers.leave();
          } else if ((this.view.size || n) < n) this.handlers.reset();
          return;
        default:
          return;
      }
      e.preventDefault();
      this.showCursor({ i, j });
    });
  }
}

// The cell the keyboard cursor or a tap shows now (null when none): for the page,
// to show it again after an update.
export function shownCell() {
  return cursor.shown ? cursor.cell : null;
}

function sameCell(a, b) {
  return a != null && b != null && a.i === b.i && a.j === b.j;
}

function clamp(x, lo, hi) {
  return Math.max(lo, Math.min(hi, x));
}
