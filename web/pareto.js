// Pareto curves for the text on the page: every predictor at every saved grid
// value (and with a few local windows added), recall and sparsity averaged over
// all heads; the frontier of each method drawn as a line, the current setting
// marked. Computed off the main thread (worker.js); this module draws them.

import { methodColor } from "./palette.js";
import { methodLabel } from "./methods.js";
import { frontier } from "./pareto-math.js";


const W = 640;
const H = 380;
const M = { left: 54, right: 14, top: 14, bottom: 44 };

function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

export function pointLabel(p) {
  const param = p.parameter ? `${p.parameter} = ${p.value}` : "";
  const win = p.window >= 0 ? ` + window ${p.window}` : "";
  return `${methodLabel(p.method)} ${param}${win}`.trim();
}

export class ParetoChart {
  // root: a container for the <svg>; legend: a container for the legend;
  // onPick(point) when a point is clicked.
  // recallAt(points, sparsity): recall of the points' frontier at a sparsity, or < 0
  // when the frontier does not reach it (eg.recallAtSparsity).
  constructor(root, legend, onPick, recallAt = null) {
    this.root = root;
    this.legend = legend;
    this.onPick = onPick;
    this.recallAt = recallAt;
    this.points = [];
    this.current = null;
    this.goldSparsity = null;
    root.addEventListener("click", (e) => {
      const idx = e.target.closest?.("[data-point]")?.dataset.point;
      if (idx != null) this.onPick(this.points[Number(idx)]);
    });
    legend.addEventListener("click", (e) => {
      const method = e.target.closest?.("[data-method]")?.dataset.method;
      if (method) this.onPick({ method });
    });
  }

  // The x axis starts at 0.5 or lower, to show every point (lo is fixed by render()).
  lowestSparsity() {
    const xs = this.points.map((p) => p.sparsity);
    if (Number.isFinite(this.current?.sparsity)) xs.push(this.current.sparsity);
    if (this.goldSparsity != null) xs.push(this.goldSparsity);
    return Math.max(0, Math.floor(Math.min(0.5, ...xs) * 10) / 10);
  }

  scales() {
    const lo = this.lo;
    const x = (s) => M.left + ((s - lo) / (1 - lo)) * (W - M.left - M.right);
    const y = (r) => M.top + (1 - r) * (H - M.top - M.bottom);
    return { x, y, lo };
  }

  render(points, goldSparsity, current) {
    this.points = points;
    this.goldSparsity = goldSparsity;
    this.current = current;
    this.lo = this.lowestSparsity();
    const { x, y, lo } = this.scales();
    const parts = [];
    parts.push(`<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="Pareto curves: recall against sparsity for every method" xmlns="http://www.w3.org/2000/svg">`);
    // grid and axes
    for (let t = 0; t <= 10; t++) {
      const r = t / 10;
      parts.push(`<line class="grid" x1="${M.left}" x2="${W - M.right}" y1="${y(r)}" y2="${y(r)}"/>`);
      if (t % 2 === 0) parts.push(`<text class="tick" x="${M.left - 6}" y="${y(r) + 4}" text-anchor="end">${r.toFixed(1)}</text>`);
    }
    for (let s = Math.round(lo * 20); s <= 20; s++) {
      const v = s / 20;
      parts.push(`<line class="grid" x1="${x(v)}" x2="${x(v)}" y1="${M.top}" y2="${H - M.bottom}"/>`);
      if (s % 2 === 0) parts.push(`<text class="tick" x="${x(v)}" y="${H - M.bottom + 16}" text-anchor="middle">${v.toFixed(1)}</text>`);
    }
    parts.push(`<rect class="frame" x="${M.left}" y="${M.top}" width="${W - M.left - M.right}" height="${H - M.top - M.bottom}"/>`);
    parts.push(`<text class="axis" x="${(M.left + W - M.right) / 2}" y="${H - 6}" text-anchor="middle">sparsity: fraction of pairs skipped →</text>`);
    parts.push(`<text class="axis" transform="translate(14 ${(M.top + H - M.bottom) / 2}) rotate(-90)" text-anchor="middle">recall: true edges found →</text>`);
    if (goldSparsity != null) {
      const gx = x(goldSparsity);
      parts.push(`<line class="gold" x1="${gx}" x2="${gx}" y1="${M.top}" y2="${H - M.bottom}"><title>sparsity of the true graph: ${goldSparsity.toFixed(3)}</title></line>`);
      parts.push(`<text class="gold-label" x="${gx - 4}" y="${y(0.03)}" text-anchor="end">true graph's sparsity</text>`);
    }
    // each method: all points faint, the frontier as a line with dots
    const byMethod = new Map();
    points.forEach((p, i) => {
      if (!byMethod.has(p.method)) byMethod.set(p.method, []);
      byMethod.get(p.method).push(i);
    });
    const active = current?.method;
    for (const [method, idxs] of byMethod) {
      const color = methodColor(method);
      const mine = idxs.map((i) => points[i]);
      const front = frontier(mine).map((k) => idxs[k]);
      const onFront = new Set(front);
      const cls = method === active ? "method active" : "method";
      parts.push(`<g class="${cls}" data-method-group="${esc(method)}" style="--c:${color}">`);
      parts.push(`<polyline class="front" points="${front.map((i) => `${x(points[i].sparsity).toFixed(1)},${y(points[i].recall).toFixed(1)}`).join(" ")}"/>`);
      for (const i of idxs) {
        const p = points[i];
        const r = onFront.has(i) ? 3.6 : 2.4;
        parts.push(
          `<circle class="${onFront.has(i) ? "pt on" : "pt"}" data-point="${i}" cx="${x(p.sparsity).toFixed(1)}" cy="${y(p.recall).toFixed(1)}" r="${r}">` +
            `<title>${esc(pointLabel(p))}\nsparsity ${p.sparsity.toFixed(3)}, recall ${p.recall.toFixed(3)}\n(click to choose)</title></circle>`,
        );
      }
      parts.push(`</g>`);
    }
    parts.push(`<g id="pareto-current"></g>`);
    parts.push(`</svg>`);
    this.root.innerHTML = parts.join("");
    this.renderLegend(byMethod);
    this.setCurrent(current);
  }

  renderLegend(byMethod) {
    const items = [];
    const gold = this.goldSparsity;
    let best = null;
    for (const [method, idxs] of byMethod) {
      const on = this.current?.method === method ? " active" : "";
      let at = -1;
      if (this.recallAt && gold != null) {
        try {
          at = this.recallAt(idxs.map((i) => this.points[i]), gold);
        } catch {
          at = -1;
        }
      }
      if (at >= 0 && (!best || at > best.at)) best = { method, at };
      const value = at >= 0 ? `<span class="legend-value">${at.toFixed(2)}</span>` : "";
      items.push(
        `<button type="button" class="legend-item${on}" data-method="${esc(method)}" ` +
          `title="choose ${esc(methodLabel(method))}${at >= 0 ? `; recall ${at.toFixed(3)} at the true graph's sparsity` : ""}">` +
          `<span class="swatch" style="background:${methodColor(method)}"></span>${esc(methodLabel(method))}${value}</button>`,
      );
    }
    const note = best
      ? `<p class="legend-note">Numbers: recall of each curve at the true graph's sparsity (${gold.toFixed(2)}), where a perfect predictor would reach 1. ` +
        `Best on this text: <b>${esc(methodLabel(best.method))}</b>, ${best.at.toFixed(2)}.</p>`
      : "";
    this.legend.innerHTML = items.join("") + note;
  }

  // Moves the marker of the current setting (cheap; called on every update).
  setCurrent(current) {
    this.current = current;
    const g = this.root.querySelector("#pareto-current");
    if (!g) return;
    for (const el of this.root.querySelectorAll("[data-method-group]")) {
      el.classList.toggle("active", el.dataset.methodGroup === current?.method);
    }
    for (const el of this.legend.querySelectorAll("[data-method]")) {
      el.classList.toggle("active", el.dataset.method === current?.method);
    }
    if (!current || !Number.isFinite(current.sparsity)) {
      g.innerHTML = "";
      return;
    }
    if (current.sparsity < this.lo) {
      this.render(this.points, this.goldSparsity, current); // the axis must reach further left
      return;
    }
    const { x, y } = this.scales();
    const cx = x(current.sparsity);
    const cy = y(current.recall);
    const right = cx > W - 170;
    g.innerHTML =
      `<circle class="current-halo" cx="${cx}" cy="${cy}" r="9"/>` +
      `<circle class="current" cx="${cx}" cy="${cy}" r="6" style="fill:${methodColor(current.method)}">` +
      `<title>now: ${esc(pointLabel(current))}\nsparsity ${current.sparsity.toFixed(3)}, recall ${current.recall.toFixed(3)}</title></circle>` +
      `<text class="current-label" x="${right ? cx - 13 : cx + 13}" y="${cy < 30 ? cy + 16 : cy - 8}" text-anchor="${right ? "end" : "start"}">you are here</text>`;
  }
}
