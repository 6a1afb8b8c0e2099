// All heads at once: a layers x heads table of small graphs, each with its
// true (gold) sparsity and the predictor's recall. Clicking one selects it.

import { fillCells } from "./heatmap.js";
import { setData } from "./dom.js";

export class HeadsGrid {
  // root: the grid's container; onSelect(layer, head)
  constructor(root, onSelect) {
    this.root = root;
    this.onSelect = onSelect;
    this.layers = 0;
    this.heads = 0;
    this.cells = [];
  }

  build(layers, heads) {
    if (layers === this.layers && heads === this.heads) return;
    this.layers = layers;
    this.heads = heads;
    this.root.textContent = "";
    this.root.style.setProperty("--heads", heads);
    this.cells = [];
    const corner = document.createElement("div");
    corner.className = "grid-corner";
    this.root.appendChild(corner);
    for (let h = 0; h < heads; h++) {
      const th = document.createElement("div");
      th.className = "grid-colhead";
      th.textContent = `head ${h}`;
      this.root.appendChild(th);
    }
    for (let l = 0; l < layers; l++) {
      const rh = document.createElement("div");
      rh.className = "grid-rowhead";
      rh.textContent = `layer ${l}`;
      this.root.appendChild(rh);
      for (let h = 0; h < heads; h++) {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "thumb";
        button.id = `thumb-${l}-${h}`;
        button.dataset.layer = l;
        button.dataset.head = h;
        button.title = `layer ${l}, head ${h}: click to show it above`;
        const canvas = document.createElement("canvas");
        const caption = document.createElement("span");
        caption.className = "thumb-caption";
        caption.innerHTML =
          `<b>L${l} H${h}</b> ` +
          `<span title="true (gold) sparsity: the fraction of allowed pairs with zero entmax weight">sparsity <i>–</i></span> ` +
          `<span title="recall of the predicted graph in this head">recall <i>–</i></span>`;
        const [sparsity, recall] = caption.querySelectorAll("i");
        button.append(canvas, caption);
        button.addEventListener("click", () => this.onSelect(l, h));
        this.root.appendChild(button);
        this.cells.push({ button, canvas, caption, sparsity, recall, ctx: canvas.getContext("2d"), image: null });
      }
    }
  }

  // heads: [{ layer, head, state, metrics }] in layer-major order; mode "true" | "overlay";
  // [from, to): the heads to redraw (the page spreads them over several tasks).
  update(heads, n, mode, from = 0, to = heads.length) {
    for (let idx = from; idx < to && idx < heads.length && idx < this.cells.length; idx++) {
      const cell = this.cells[idx];
      const head = heads[idx];
      if (n > 0) {
        // (no image after a clear, which left a 1-pixel canvas: a 1-token text must make one)
        if (cell.canvas.width !== n || !cell.image) {
          cell.canvas.width = n;
          cell.canvas.height = n;
          cell.image = cell.ctx.createImageData(n, n);
        }
        const data = { n, state: head.state, probs: null }; // true edges in one colour: cheap, and weights are too small to see here
        fillCells(new Uint32Array(cell.image.data.buffer), mode, data, 0, 0, n);
        cell.ctx.putImageData(cell.image, 0, 0);
      } else {
        // No text, no graph: clear the last text's picture (a resize clears the canvas).
        cell.canvas.width = 1;
        cell.canvas.height = 1;
        cell.image = null;
      }
      // Only the numbers' text changes (no new elements to style on a keystroke).
      setData(cell.sparsity.firstChild, fmt(head.metrics.goldSparsity));
      setData(cell.recall.firstChild, fmt(head.metrics.recall));
    }
  }

  select(layer, head) {
    for (const cell of this.cells) {
      const on = Number(cell.button.dataset.layer) === layer && Number(cell.button.dataset.head) === head;
      cell.button.classList.toggle("selected", on);
      cell.button.setAttribute("aria-pressed", on ? "true" : "false");
    }
  }
}

function fmt(x) {
  return Number.isFinite(x) ? x.toFixed(2) : "–";
}
