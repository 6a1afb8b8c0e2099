// entgraph: small renderers that return SVG strings, for notebooks and pages.
// Pure JavaScript: usable without loading the WebAssembly module.

const SVG_NS = 'xmlns="http://www.w3.org/2000/svg"';

// ---- the palette and the words, shared with the demo page ------------------
// The page takes these from here (web/palette.js re-exports them from
// ./entgraph/render.js, the package inside the built page), so a notebook's
// figure and the page draw with the same colours and say the same words;
// web/style.css repeats the cell colours for its legends, and
// tests/wasm/render.test.mjs checks that it agrees. Chosen to stay apart under
// the common colour blindnesses: blue against orange for the cells, Paul Tol's
// "muted" scheme for the methods, viridis for weights.

// The roles of a cell, and the figure's ink.
export const colours = {
  hit: "#1c4e96",       // dark blue: a true edge the predictor found
  miss: "#e66101",      // orange: a true edge the predictor missed
  extra: "#a0bede",     // light grey-blue: predicted, but not a true edge
  predicted: "#1c4e96", // a predicted edge, drawn without the true graph
  empty: "#ffffff",     // an allowed pair with no edge
  masked: "#eceef2",    // a pair the causal mask forbids (a future key)
  grid: "#dde1e8",
  text: "#1b2230",
  muted: "#5d6778",
};

// One colour per predictor, whatever else is on the plot (Paul Tol "muted";
// near-black for entgraph's own lowrank-threshold); methodColour for others.
export const methodColours = {
  window: "#332288",
  global: "#88ccee",
  longformer: "#44aa99",
  bigbird: "#117733",
  reformer: "#999933",
  routing: "#ddcc77",
  "sparsefinder-distance": "#cc6677",
  "sparsefinder-quantization": "#882255",
  "sparsefinder-kmeans": "#aa4499",
  "lowrank-threshold": "#222222",
};
export function methodColour(method) {
  return methodColours[method] ?? "#555555";
}

// How the page names each predictor.
export const methodLabels = {
  window: "Local window",
  global: "Global tokens",
  longformer: "Longformer",
  bigbird: "BigBird",
  reformer: "Reformer (LSH)",
  routing: "Routing (k-means)",
  "sparsefinder-distance": "Sparsefinder: distance",
  "sparsefinder-quantization": "Sparsefinder: buckets",
  "sparsefinder-kmeans": "Sparsefinder: k-means",
  "lowrank-threshold": "Estimated scores + threshold",
};
export function methodLabel(method) {
  return methodLabels[method] ?? method;
}

// The words of the page's legends and axes.
export const terms = {
  trueGraph: "true graph",
  trueEdge: "true edge",
  trueSparsity: "true graph's sparsity",
  hit: "hit",
  miss: "miss",
  extra: "extra",
  hitMeaning: "a true edge that was predicted",
  missMeaning: "a true edge that was not predicted",
  extraMeaning: "a predicted edge that is not a true edge",
  sparsityAxis: "sparsity: fraction of pairs skipped →",
  recallAxis: "recall: true edges found →",
  keyAxis: "key →",
  queryAxis: "query →",
};

// Weights: reversed viridis, small ones light yellow-green, large ones dark
// purple; 256 steps of [r, g, b].
const VIRIDIS_STOPS = [
  [0.0, [253, 231, 37]],
  [0.125, [170, 220, 50]],
  [0.25, [94, 201, 98]],
  [0.375, [39, 173, 129]],
  [0.5, [33, 145, 140]],
  [0.625, [44, 114, 142]],
  [0.75, [59, 82, 139]],
  [0.875, [71, 44, 122]],
  [1.0, [68, 1, 84]],
];
function interpolate(stops, t) {
  for (let s = 1; s < stops.length; s++) {
    if (t <= stops[s][0]) {
      const [t0, c0] = stops[s - 1];
      const [t1, c1] = stops[s];
      const u = (t - t0) / (t1 - t0);
      return c0.map((v, k) => Math.round(v + u * (c1[k] - v)));
    }
  }
  return stops[stops.length - 1][1];
}
export const weightRamp = Object.freeze(Array.from({ length: 256 }, (_, i) => Object.freeze(interpolate(VIRIDIS_STOPS, i / 255))));
// A weight p in (0, 1] -> its step of the ramp (-1 for p <= 0): square root so
// that the many small weights stay visible, and at least 60 (green) so that no
// edge fades into white.
export function weightIndex(p) {
  if (!(p > 0)) return -1;
  return Math.min(255, 60 + Math.round(Math.sqrt(p) * 195));
}
// The ramp's colour of a weight as CSS; a true edge without a weight gets step 200.
export function weightColour(p) {
  const i = p === undefined ? 200 : weightIndex(p);
  return i < 0 ? colours.empty : `rgb(${weightRamp[i].join(",")})`;
}

export function escapeXml(s) {
  return String(s).replace(/[<>&"']/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;", "'": "&apos;" })[c]);
}

function fmt(x) {
  return Number.isInteger(x) ? String(x) : x.toFixed(2).replace(/\.?0+$/, "");
}

// A membership test of a CSR graph: rows[i] is the set of keys of query i.
function rowSets(graph) {
  if (!graph) return null;
  const rows = [];
  for (let i = 0; i < graph.queries; ++i) rows.push(new Set(graph.indices.subarray(graph.offsets[i], graph.offsets[i + 1])));
  return rows;
}

function checkGraph(graph, name, n) {
  if (!graph) return;
  if (graph.queries !== n || !graph.offsets || !graph.indices)
    throw new Error(`${name}: expected a graph of ${n} queries ({queries, keys, offsets, indices})`);
}

// A heatmap of one head's graph over tokens x tokens, in the page's colours:
//   - without `predicted`: the true graph's cells, shaded by weight (probs, the
//     page's "true graphs" view) or in one colour;
//   - with `predicted` (the page's overlay): hits dark blue, misses orange, extra
//     edges light blue, and a white star (a dot on small cells) on every true edge.
// tokens: the axis labels (one per token); gold: the true graph; probs: optional
// Float32Array tokens x tokens; causal: grey out the future.
export function heatmap({ tokens, gold, predicted = null, probs = null, causal = false, title = "", cell } = {}) {
  if (!Array.isArray(tokens) || tokens.length === 0) throw new Error("tokens: expected a non-empty array of labels");
  const n = tokens.length;
  checkGraph(gold, "gold", n);
  checkGraph(predicted, "predicted", n);
  if (!gold) throw new Error("gold: expected a graph");
  if (probs && probs.length !== n * n) throw new Error(`probs: expected ${n * n} values, got ${probs.length}`);
  const size = cell ?? Math.max(3, Math.min(18, Math.floor(640 / n)));
  const labelEvery = Math.max(1, Math.ceil(9 / size));
  const goldRows = rowSets(gold), predRows = rowSets(predicted);
  const star = size >= 9;
  // The legend: one line per colour, in the page's words.
  const legend = predRows
    ? [[colours.hit, `${terms.hit}: ${terms.hitMeaning}`], [colours.miss, `${terms.miss}: ${terms.missMeaning}`],
       [colours.extra, `${terms.extra}: ${terms.extraMeaning}`], [null, `${star ? "★" : "●"} marks a ${terms.trueEdge}`]]
    : probs
      ? [[[0.02, 0.1, 0.3, 0.6, 1].map((p) => weightColour(p)), `${terms.trueEdge}, by its weight: small → large`]]
      : [[weightColour(), terms.trueEdge]];
  const margin = { left: 46, top: 46 + (title ? 18 : 0), right: 12, bottom: 16 + 16 * legend.length };
  const side = n * size;
  const width = Math.max(margin.left + side + margin.right, 360), height = margin.top + side + margin.bottom;
  const out = [`<svg ${SVG_NS} width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="10" fill="${colours.text}">`];
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  if (title) out.push(`<text x="${margin.left}" y="16" font-size="13">${escapeXml(title)}</text>`);
  out.push(`<g transform="translate(${margin.left},${margin.top})">`);
  out.push(`<rect width="${side}" height="${side}" fill="${colours.empty}" stroke="${colours.grid}"/>`);
  if (causal && n > 1) {
    // The future (key > query): a staircase above the diagonal.
    let d = `M${size},0 H${side} V${(n - 1) * size}`;
    for (let r = n - 1; r >= 1; --r) d += ` H${r * size} V${(r - 1) * size}`;
    out.push(`<path d="${d} Z" fill="${colours.masked}"/>`);
  }
  for (let i = 0; i < n; ++i) {
    const keys = new Set([...goldRows[i], ...(predRows ? predRows[i] : [])]);
    for (const j of keys) {
      if (causal && j > i) continue;  // the mask forbids the pair: nothing to draw over the grey
      const x = j * size, y = i * size;
      const isGold = goldRows[i].has(j), isPred = predRows ? predRows[i].has(j) : false;
      if (!predRows) {
        const fill = probs ? weightColour(probs[i * n + j]) : weightColour();
        out.push(`<rect x="${x}" y="${y}" width="${size}" height="${size}" fill="${fill}"/>`);
        continue;
      }
      const fill = isGold ? (isPred ? colours.hit : colours.miss) : colours.extra;
      out.push(`<rect x="${x}" y="${y}" width="${size}" height="${size}" fill="${fill}"/>`);
      if (isGold) {
        const cx = x + size / 2, cy = y + size / 2;
        out.push(star
          ? `<text x="${cx}" y="${cy + size * 0.3}" font-size="${size * 0.8}" text-anchor="middle" fill="white">★</text>`
          : `<circle cx="${cx}" cy="${cy}" r="${Math.max(0.8, size * 0.22)}" fill="white"/>`);
      }
    }
  }
  // Axis labels: keys along the top, queries down the left.
  for (let t = 0; t < n; t += labelEvery) {
    const c = t * size + size / 2, label = escapeXml(tokens[t]);
    out.push(`<text x="${c}" y="-4" text-anchor="middle" font-size="${Math.min(10, size * 0.9 * labelEvery)}">${label}</text>`);
    out.push(`<text x="-4" y="${c + 3}" text-anchor="end" font-size="${Math.min(10, size * 0.9 * labelEvery)}">${label}</text>`);
  }
  out.push(`<text x="${side / 2}" y="-22" text-anchor="middle" fill="${colours.muted}">${escapeXml(terms.keyAxis)}</text>`);
  out.push(`<text x="-32" y="${side / 2}" text-anchor="middle" fill="${colours.muted}" transform="rotate(-90 -32 ${side / 2})">${escapeXml(terms.queryAxis)}</text>`);
  out.push("</g>");
  legend.forEach(([swatch, label], k) => {
    const ly = margin.top + side + 24 + 16 * k;
    let lx = margin.left;
    for (const colour of swatch === null ? [] : Array.isArray(swatch) ? swatch : [swatch]) {
      out.push(`<rect x="${lx}" y="${ly - 9}" width="10" height="10" fill="${colour}" stroke="${colours.grid}" stroke-width="0.5"/>`);
      lx += 11;
    }
    out.push(`<text x="${lx + (swatch === null ? 0 : 4)}" y="${ly}">${escapeXml(label)}</text>`);
  });
  out.push("</svg>");
  return out.join("");
}

// Indices of the points no other point beats in both sparsity and recall.
function frontier(points) {
  const order = points.map((_, i) => i).sort((a, b) => points[b].sparsity - points[a].sparsity || points[b].recall - points[a].recall);
  const keep = [];
  let best = -Infinity;
  for (const i of order) if (points[i].recall > best) { keep.push(i); best = points[i].recall; }
  return keep.sort((a, b) => points[a].sparsity - points[b].sparsity);
}

// Whether the segment (x1, y1)-(x2, y2) meets the box [left, right] x [top, bottom] (Liang-Barsky).
function segmentMeetsBox(x1, y1, x2, y2, { left, right, top, bottom }) {
  let t0 = 0, t1 = 1;
  const dx = x2 - x1, dy = y2 - y1;
  for (const [p, q] of [[-dx, x1 - left], [dx, right - x1], [-dy, y1 - top], [dy, bottom - y1]]) {
    if (p === 0) {
      if (q < 0) return false;
    } else {
      const t = q / p;
      if (p < 0) t0 = Math.max(t0, t);
      else t1 = Math.min(t1, t);
      if (t0 > t1) return false;
    }
  }
  return true;
}

// Bold 11 px sans-serif: about 0.68 em a character, wide enough for DejaVu Sans Bold.
const LABEL_CHAR_WIDTH = 7.5;
const LABEL_HEIGHT = 13;

// Where the ringed point's label goes: of the places around the ring, the first
// whose box stays inside the plot and meets no line (frontiers, the true graph's
// sparsity) and no dot; if none is free, the one meeting the fewest.
// -> { x, y, anchor, box }
export function placeLabel(text, cx, cy, { lines, dots, plot }) {
  const w = text.length * LABEL_CHAR_WIDTH;
  const places = [
    [cx + 12, cy - 11, "start"], [cx - 12, cy - 11, "end"], [cx + 12, cy + 20, "start"], [cx - 12, cy + 20, "end"],
    [cx, cy - 14, "middle"], [cx, cy + 25, "middle"], [cx + 14, cy + 4, "start"], [cx - 14, cy + 4, "end"],
  ];
  let best = null;
  for (const [x, y, anchor] of places) {
    const left = anchor === "start" ? x : anchor === "end" ? x - w : x - w / 2;
    const box = { left: left - 2, right: left + w + 2, top: y - LABEL_HEIGHT + 2, bottom: y + 3 };
    const outside = box.left < plot.left || box.right > plot.right || box.top < plot.top || box.bottom > plot.bottom;
    const crossed = lines.filter(([x1, y1, x2, y2]) => segmentMeetsBox(x1, y1, x2, y2, box)).length;
    const covered = dots.filter(([dx, dy]) => dx >= box.left && dx <= box.right && dy >= box.top && dy <= box.bottom).length;
    const cost = (outside ? 1000 : 0) + 10 * crossed + covered;
    if (best === null || cost < best.cost) best = { x, y, anchor, box, cost };
    if (cost === 0) break;
  }
  return { x: best.x, y: best.y, anchor: best.anchor, box: best.box };
}

// Sparsity (x) vs recall (y), one colour per method (the page's) with its
// frontier as a line; the true graph's sparsity dashed; `current` ({sparsity,
// recall, method, label}) ringed, its label where it crosses no line.
// points: [{method, sparsity, recall, ...}] as from sweep().
export function pareto({ points, goldSparsity = null, current = null, title = "", width = 640, height = 400 } = {}) {
  if (!Array.isArray(points)) throw new Error("points: expected an array of {method, sparsity, recall}");
  const methods = [...new Set(points.map((p) => p.method))];
  const longest = Math.max(0, ...methods.map((method) => methodLabel(method).length));
  const m = { left: 52, right: Math.max(120, 44 + Math.ceil(longest * 6.2)), top: title ? 34 : 16, bottom: 44 };
  const pw = width - m.left - m.right, ph = height - m.top - m.bottom;
  let xmin = Math.min(1, goldSparsity ?? 1, ...points.map((p) => p.sparsity), current ? current.sparsity : 1);
  xmin = Math.max(0, Math.floor(xmin * 10) / 10);
  if (xmin >= 1) xmin = 0.9;
  const x = (s) => m.left + ((s - xmin) / (1 - xmin)) * pw;
  const y = (r) => m.top + (1 - r) * ph;
  const lines = [], dots = [];
  const out = [`<svg ${SVG_NS} width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11" fill="${colours.text}">`];
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  if (title) out.push(`<text x="${m.left}" y="20" font-size="13">${escapeXml(title)}</text>`);
  for (let k = 0; k <= 10; ++k) {
    const s = xmin + ((1 - xmin) * k) / 10, r = k / 10;
    out.push(`<line x1="${x(s)}" y1="${m.top}" x2="${x(s)}" y2="${m.top + ph}" stroke="#eee"/>`);
    out.push(`<line x1="${m.left}" y1="${y(r)}" x2="${m.left + pw}" y2="${y(r)}" stroke="#eee"/>`);
    if (k % 2 === 0) {
      out.push(`<text x="${x(s)}" y="${m.top + ph + 14}" text-anchor="middle">${fmt(Math.round(s * 100) / 100)}</text>`);
      out.push(`<text x="${m.left - 6}" y="${y(r) + 4}" text-anchor="end">${fmt(r)}</text>`);
    }
  }
  out.push(`<rect x="${m.left}" y="${m.top}" width="${pw}" height="${ph}" fill="none" stroke="#888"/>`);
  out.push(`<text x="${m.left + pw / 2}" y="${height - 8}" text-anchor="middle">${escapeXml(terms.sparsityAxis)}</text>`);
  out.push(`<text x="14" y="${m.top + ph / 2}" text-anchor="middle" transform="rotate(-90 14 ${m.top + ph / 2})">${escapeXml(terms.recallAxis)}</text>`);
  if (goldSparsity !== null && goldSparsity !== undefined) {
    const gx = x(goldSparsity);
    lines.push([gx, m.top, gx, m.top + ph]);
    out.push(`<line class="true-sparsity" x1="${gx}" y1="${m.top}" x2="${gx}" y2="${m.top + ph}" stroke="#444" stroke-dasharray="5,4"/>`);
    out.push(`<text x="${gx - 4}" y="${m.top + 12}" text-anchor="end" fill="#444">${escapeXml(terms.trueSparsity)} ${goldSparsity.toFixed(3)}</text>`);
  }
  methods.forEach((method, k) => {
    const colour = methodColour(method);
    const own = points.filter((p) => p.method === method);
    for (const p of own) {
      dots.push([x(p.sparsity), y(p.recall)]);
      out.push(`<circle cx="${x(p.sparsity).toFixed(2)}" cy="${y(p.recall).toFixed(2)}" r="2.5" fill="${colour}" fill-opacity="0.45"/>`);
    }
    const front = frontier(own).map((i) => [x(own[i].sparsity), y(own[i].recall)]);
    for (let i = 1; i < front.length; ++i) lines.push([...front[i - 1], ...front[i]]);
    const line = front.map(([px, py]) => `${px.toFixed(2)},${py.toFixed(2)}`).join(" ");
    if (line) out.push(`<polyline class="frontier" points="${line}" fill="none" stroke="${colour}" stroke-width="2"/>`);
    const ly = m.top + 8 + k * 16;
    out.push(`<line x1="${m.left + pw + 12}" y1="${ly}" x2="${m.left + pw + 30}" y2="${ly}" stroke="${colour}" stroke-width="3"/>`);
    out.push(`<text x="${m.left + pw + 36}" y="${ly + 4}">${escapeXml(methodLabel(method))}</text>`);
  });
  if (current) {
    const cx = x(current.sparsity), cy = y(current.recall);
    out.push(`<circle cx="${cx}" cy="${cy}" r="8" fill="none" stroke="black" stroke-width="2.5"/>`);
    out.push(`<circle cx="${cx}" cy="${cy}" r="2.5" fill="black"/>`);
    const label = current.label ?? `${methodLabel(current.method ?? "current")}: ${current.sparsity.toFixed(3)}, ${current.recall.toFixed(3)}`;
    const at = placeLabel(label, cx, cy, { lines, dots, plot: { left: m.left, right: m.left + pw, top: m.top, bottom: m.top + ph } });
    out.push(`<text class="current-label" x="${at.x.toFixed(2)}" y="${at.y.toFixed(2)}" text-anchor="${at.anchor}" font-weight="bold" ` +
             `stroke="white" stroke-width="3" paint-order="stroke">${escapeXml(label)}</text>`);
  }
  out.push("</svg>");
  return out.join("");
}
