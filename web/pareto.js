// Pareto curves for the text on the page: every predictor at every saved grid
// value (and with a few local windows added), recall and sparsity averaged over
// all heads; the frontier of each method drawn as a line, the current setting
// marked. Computed off the main thread (worker.js); this module draws them.

import { methodColor } from "./palette.js";
import { METHOD_INFO, methodLabel } from "./methods.js";
import { frontier } from "./pareto-math.js";

// The plot is drawn at the size it is shown (the viewBox in CSS pixels, redrawn
// when its box resizes), so that its text keeps its size on a phone.
const MAX_W = 640;
const MIN_W = 280;
const M = { left: 46, right: 12, top: 14, bottom: 42 };
// A click or tap picks the nearest point within this radius (px): a 24 px target
// around each dot, however small the dot is drawn.
const HIT_RADIUS = 12;

function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

// "Sparsefinder: buckets (bins per coordinate B = 10) + window 3": the setting in
// the slider's words, so that the method's name and its parameter do not repeat.
export function pointLabel(p) {
  const name = METHOD_INFO[p.method]?.slider ?? p.parameter;
  const param = p.parameter ? ` (${name} = ${p.value})` : "";
  const win = p.window >= 0 ? ` + window ${p.window}` : "";
  return `${methodLabel(p.method)}${param}${win}`;
}

// A point's accessible name: method, setting, window, recall and sparsity.
export function pointName(p) {
  const setting = p.parameter ? `, ${p.parameter} = ${p.value}` : "";
  const win = p.window >= 0 ? `, plus a local window of ${p.window}` : ", no added window";
  return `${methodLabel(p.method)}${setting}${win}: recall ${p.recall.toFixed(3)}, sparsity ${p.sparsity.toFixed(3)} (mean of all heads)`;
}

const pointKey = (p) => `${p.method}|${p.value ?? ""}|${p.window}`;

export class ParetoChart {
  // root: a container for the <svg>; legend: a container for the legend;
  // onPick(point) when a point is clicked, tapped, or chosen with Enter or Space.
  // recallAt(points, sparsity): recall of the points' frontier at a sparsity, or < 0
  // when the frontier does not reach it (eg.recallAtSparsity).
  //
  // Keyboard: one point is in the tab order (a roving tabindex); Left/Right move
  // along its method by sparsity, Up/Down to the next method, Home/End to the
  // method's ends; Enter or Space picks it. #pareto-readout (made here, after the
  // root) says what the focused or hovered point is.
  constructor(root, legend, onPick, recallAt = null) {
    this.root = root;
    this.legend = legend;
    this.onPick = onPick;
    this.recallAt = recallAt;
    this.points = [];
    this.current = null;
    this.goldSparsity = null;
    this.focusKey = null;
    this.rows = []; // per method (legend order): point indices by increasing sparsity
    this.width = 0;
    this.readout = document.createElement("p");
    this.readout.id = "pareto-readout";
    this.readout.className = "pareto-readout";
    this.readout.setAttribute("aria-hidden", "true"); // the focused point's own name is what a screen reader reads
    root.after(this.readout);
    root.addEventListener("click", (e) => {
      const i = this.nearest(e.clientX, e.clientY);
      if (i >= 0) this.onPick(this.points[i]);
    });
    root.addEventListener("pointermove", (e) => {
      if (e.pointerType !== "mouse") return;
      const i = this.nearest(e.clientX, e.clientY);
      this.root.classList.toggle("near-point", i >= 0);
      this.showReadout(i, "click to choose");
    });
    root.addEventListener("pointerleave", () => this.showReadout(this.focusedIndex(), "Enter to choose"));
    root.addEventListener("keydown", (e) => this.onKey(e));
    root.addEventListener("focusin", (e) => {
      const i = pointIndexOf(e.target);
      if (i < 0) return;
      this.focusKey = pointKey(this.points[i]);
      this.setRoving(i);
      this.showReadout(i, "Enter to choose");
    });
    root.addEventListener("focusout", () => this.showReadout(-1));
    legend.addEventListener("click", (e) => {
      const method = e.target.closest?.("[data-method]")?.dataset.method;
      if (method) this.onPick({ method });
    });
    new ResizeObserver(() => {
      const w = this.measure();
      if (w !== this.width && this.drawn) this.render(this.points, this.goldSparsity, this.current);
    }).observe(root);
  }

  measure() {
    const w = Math.floor(this.root.clientWidth);
    return w > 0 ? Math.max(MIN_W, Math.min(MAX_W * 2, w)) : MAX_W;
  }

  // The x axis starts at 0.5 or lower, to show every point (lo is fixed by render()).
  lowestSparsity() {
    const xs = this.points.map((p) => p.sparsity);
    if (Number.isFinite(this.current?.sparsity)) xs.push(this.current.sparsity);
    if (this.goldSparsity != null) xs.push(this.goldSparsity);
    return Math.max(0, Math.floor(Math.min(0.5, ...xs) * 10) / 10);
  }

  scales() {
    const { lo, W, H } = this;
    const x = (s) => M.left + ((s - lo) / (1 - lo)) * (W - M.left - M.right);
    const y = (r) => M.top + (1 - r) * (H - M.top - M.bottom);
    return { x, y, lo };
  }

  render(points, goldSparsity, current) {
    const hadFocus = this.root.contains(document.activeElement) && pointIndexOf(document.activeElement) >= 0;
    this.drawn = true;
    this.points = points;
    this.goldSparsity = goldSparsity;
    this.current = current;
    this.lo = this.lowestSparsity();
    this.width = this.measure();
    this.W = this.width;
    this.H = Math.round(Math.max(260, Math.min(380, this.W * 0.62)));
    const { W, H } = this;
    const { x, y, lo } = this.scales();
    const parts = [];
    parts.push(
      `<svg viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="group" xmlns="http://www.w3.org/2000/svg" ` +
        `aria-label="Pareto curves: recall against sparsity for every setting of every method, means over all heads. ` +
        `Tab to the settings, arrow keys move between them, Enter chooses one.">`,
    );
    // grid and axes (a label every 0.1 of sparsity while they are 34 px apart, else every 0.2)
    for (let t = 0; t <= 10; t++) {
      const r = t / 10;
      parts.push(`<line class="grid" x1="${M.left}" x2="${W - M.right}" y1="${y(r)}" y2="${y(r)}"/>`);
      if (t % 2 === 0) parts.push(`<text class="tick" x="${M.left - 6}" y="${y(r) + 4}" text-anchor="end">${r.toFixed(1)}</text>`);
    }
    const every = x(0.1) - x(0) >= 34 ? 2 : 4;
    for (let s = Math.round(lo * 20); s <= 20; s++) {
      const v = s / 20;
      parts.push(`<line class="grid" x1="${x(v)}" x2="${x(v)}" y1="${M.top}" y2="${H - M.bottom}"/>`);
      if (s % every === 0) parts.push(`<text class="tick" x="${x(v)}" y="${H - M.bottom + 16}" text-anchor="middle">${v.toFixed(1)}</text>`);
    }
    parts.push(`<rect class="frame" x="${M.left}" y="${M.top}" width="${W - M.left - M.right}" height="${H - M.top - M.bottom}"/>`);
    parts.push(`<text class="axis" x="${(M.left + W - M.right) / 2}" y="${H - 6}" text-anchor="middle">sparsity: fraction of pairs skipped →</text>`);
    parts.push(`<text class="axis" transform="translate(13 ${(M.top + H - M.bottom) / 2}) rotate(-90)" text-anchor="middle">recall: true edges found →</text>`);
    if (goldSparsity != null) {
      const gx = x(goldSparsity);
      const left = gx - M.left > 150;
      parts.push(`<line class="gold" x1="${gx}" x2="${gx}" y1="${M.top}" y2="${H - M.bottom}"><title>sparsity of the true graph: ${goldSparsity.toFixed(3)}</title></line>`);
      parts.push(`<text class="gold-label" x="${left ? gx - 4 : gx + 4}" y="${y(0.03)}" text-anchor="${left ? "end" : "start"}">true graph's sparsity</text>`);
    }
    // each method: all points faint, the frontier as a line with dots
    const byMethod = new Map();
    points.forEach((p, i) => {
      if (!byMethod.has(p.method)) byMethod.set(p.method, []);
      byMethod.get(p.method).push(i);
    });
    this.rows = [...byMethod.values()].map((idxs) => [...idxs].sort((a, b) => points[a].sparsity - points[b].sparsity || points[a].recall - points[b].recall));
    const active = current?.method;
    const dot = W < 480 ? 1.25 : 1; // a little bigger on a phone
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
        const r = (onFront.has(i) ? 3.6 : 2.6) * dot;
        parts.push(
          `<circle class="${onFront.has(i) ? "pt on" : "pt"}" data-point="${i}" cx="${x(p.sparsity).toFixed(1)}" cy="${y(p.recall).toFixed(1)}" r="${r}" ` +
            `tabindex="-1" role="button" aria-label="${esc(pointName(p))}">` +
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
    // The roving tabindex: the focused point if it is still there, else the current setting's, else the first.
    const keep = this.indexOfKey(this.focusKey);
    const start = keep >= 0 ? keep : this.indexOfKey(current ? pointKey(current) : null);
    this.setRoving(start >= 0 ? start : this.rows[0]?.[0] ?? -1);
    if (hadFocus && keep >= 0) this.pointEl(keep)?.focus({ preventScroll: true });
  }

  indexOfKey(key) {
    return key == null ? -1 : this.points.findIndex((p) => pointKey(p) === key);
  }

  pointEl(i) {
    return this.root.querySelector(`[data-point="${i}"]`);
  }

  focusedIndex() {
    return this.root.contains(document.activeElement) ? pointIndexOf(document.activeElement) : -1;
  }

  setRoving(i) {
    for (const el of this.root.querySelectorAll('[data-point][tabindex="0"]')) el.setAttribute("tabindex", "-1");
    this.pointEl(i)?.setAttribute("tabindex", "0");
  }

  // The point nearest a viewport position, if within HIT_RADIUS px; else -1.
  nearest(clientX, clientY) {
    const svg = this.root.querySelector("svg");
    if (!svg || !this.points.length) return -1;
    const rect = svg.getBoundingClientRect();
    const k = rect.width / this.W; // CSS px per plot unit (1 unless the box was squeezed)
    const px = (clientX - rect.left) / k;
    const py = (clientY - rect.top) / k;
    const { x, y } = this.scales();
    let best = -1;
    let bestD = (HIT_RADIUS / k) ** 2;
    this.points.forEach((p, i) => {
      const d = (x(p.sparsity) - px) ** 2 + (y(p.recall) - py) ** 2;
      if (d <= bestD) {
        best = i;
        bestD = d;
      }
    });
    return best;
  }

  onKey(e) {
    const i = pointIndexOf(e.target);
    if (i < 0) return;
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      this.onPick(this.points[i]);
      return;
    }
    const m = this.rows.findIndex((row) => row.includes(i));
    const row = this.rows[m];
    const k = row.indexOf(i);
    let next = -1;
    if (e.key === "ArrowRight") next = row[Math.min(k + 1, row.length - 1)];
    else if (e.key === "ArrowLeft") next = row[Math.max(k - 1, 0)];
    else if (e.key === "Home") next = row[0];
    else if (e.key === "End") next = row[row.length - 1];
    else if (e.key === "ArrowUp" || e.key === "ArrowDown") {
      // the next method's point nearest in sparsity
      const other = this.rows[(m + (e.key === "ArrowDown" ? 1 : this.rows.length - 1)) % this.rows.length];
      const s = this.points[i].sparsity;
      next = other.reduce((a, b) => (Math.abs(this.points[b].sparsity - s) < Math.abs(this.points[a].sparsity - s) ? b : a));
    } else return;
    e.preventDefault();
    this.setRoving(next);
    this.pointEl(next)?.focus();
  }

  showReadout(i, action = "") {
    if (i < 0) {
      const f = this.focusedIndex();
      if (f < 0) {
        this.readout.textContent = "";
        return;
      }
      i = f;
      action = "Enter to choose";
    }
    const p = this.points[i];
    this.readout.textContent = `${pointLabel(p)}: recall ${p.recall.toFixed(3)}, sparsity ${p.sparsity.toFixed(3)} (mean of all heads)${action ? ` · ${action}` : ""}`;
  }

  renderLegend(byMethod) {
    const items = [];
    const gold = this.goldSparsity;
    let best = null;
    let short = false;
    for (const [method, idxs] of byMethod) {
      const on = this.current?.method === method ? " active" : "";
      const mine = idxs.map((i) => this.points[i]);
      let at = -1;
      if (this.recallAt && gold != null) {
        try {
          at = this.recallAt(mine, gold);
        } catch {
          at = -1;
        }
      }
      if (at >= 0 && (!best || at > best.at)) best = { method, at };
      let value = "";
      let title = "";
      if (at >= 0) {
        value = `<span class="legend-value">${at.toFixed(2)}</span>`;
        title = `; recall ${at.toFixed(3)} at the true graph's sparsity`;
      } else if (gold != null && mine.length) {
        // Never as sparse as the true graph: its recall at its sparsest setting, starred.
        const front = frontier(mine);
        const last = mine[front[front.length - 1]];
        short = true;
        value = `<span class="legend-value">${last.recall.toFixed(2)}*</span>`;
        title = `; never as sparse as the true graph (${gold.toFixed(3)}): recall ${last.recall.toFixed(3)} at its sparsest, sparsity ${last.sparsity.toFixed(3)}`;
      }
      items.push(
        `<button type="button" class="legend-item${on}" data-method="${esc(method)}" ` +
          `title="choose ${esc(methodLabel(method))}${esc(title)}" aria-label="choose ${esc(methodLabel(method))}${esc(title)}">` +
          `<span class="swatch" style="background:${methodColor(method)}"></span>${esc(methodLabel(method))}${value}</button>`,
      );
    }
    const note = best
      ? `<p class="legend-note">Numbers: recall of each curve at the true graph's sparsity (${gold.toFixed(2)}), where a perfect predictor would reach 1` +
        `${short ? "; * a method that is never that sparse: its recall at its sparsest setting" : ""}. ` +
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
    const heads = current.heads ? `${current.heads} heads` : "all heads";
    const right = cx > this.W - 190;
    const below = cy < 44;
    const tx = right ? cx - 13 : cx + 13;
    g.innerHTML =
      `<circle class="current-halo" cx="${cx}" cy="${cy}" r="9"/>` +
      `<circle class="current" cx="${cx}" cy="${cy}" r="6" style="fill:${methodColor(current.method)}">` +
      `<title>now: ${esc(pointLabel(current))}\nmean of ${heads}: sparsity ${current.sparsity.toFixed(3)}, recall ${current.recall.toFixed(3)}</title></circle>` +
      `<text class="current-label" x="${tx}" y="${below ? cy + 18 : cy - 20}" text-anchor="${right ? "end" : "start"}">` +
      `<tspan x="${tx}" dy="0">you are here</tspan><tspan class="current-sub" x="${tx}" dy="13">mean of ${heads}</tspan></text>`;
  }
}

function pointIndexOf(el) {
  const v = el instanceof Element ? el.getAttribute("data-point") : null;
  return v == null ? -1 : Number(v);
}
