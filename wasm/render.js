// entgraph: small renderers that return SVG strings, for notebooks and pages.
// Pure JavaScript: usable without loading the WebAssembly module.

const SVG_NS = 'xmlns="http://www.w3.org/2000/svg"';
// Colour-blind-safe (Okabe–Ito) roles of a cell.
export const colours = {
  hit: "#0072b2",       // predicted and true
  extra: "#b9d3e8",     // predicted, not true
  miss: "#d55e00",      // true, not predicted
  forbidden: "#eeeeee", // outside the causal mask
  grid: "#cccccc",
  text: "#222222",
};
// One colour per method, in a fixed order (Tableau 10, as the core's pareto_svg).
export const methodColours = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                              "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

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

// A heatmap of one head's graph over tokens x tokens:
//   - without `predicted`: the true graph's cells shaded by probability (probs) or solid;
//   - with `predicted`: predicted cells shaded (hits dark, extra edges light),
//     true edges starred, misses (true, not predicted) marked in orange.
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
  const margin = { left: 46, top: 46 + (title ? 18 : 0), right: 12, bottom: 40 };
  const side = n * size;
  const width = margin.left + side + margin.right, height = margin.top + side + margin.bottom;
  const goldRows = rowSets(gold), predRows = rowSets(predicted);
  const out = [`<svg ${SVG_NS} width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="10">`];
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  if (title) out.push(`<text x="${margin.left}" y="16" font-size="13" fill="${colours.text}">${escapeXml(title)}</text>`);
  out.push(`<g transform="translate(${margin.left},${margin.top})">`);
  out.push(`<rect width="${side}" height="${side}" fill="white" stroke="${colours.grid}"/>`);
  if (causal && n > 1) {
    // The future (key > query): a staircase above the diagonal.
    let d = `M${size},0 H${side} V${(n - 1) * size}`;
    for (let r = n - 1; r >= 1; --r) d += ` H${r * size} V${(r - 1) * size}`;
    out.push(`<path d="${d} Z" fill="${colours.forbidden}"/>`);
  }
  const star = size >= 9;
  for (let i = 0; i < n; ++i) {
    const keys = new Set([...goldRows[i], ...(predRows ? predRows[i] : [])]);
    for (const j of keys) {
      if (causal && j > i) continue;  // the mask forbids the pair: nothing to draw over the grey
      const x = j * size, y = i * size;
      const isGold = goldRows[i].has(j), isPred = predRows ? predRows[i].has(j) : false;
      if (!predRows) {
        const p = probs ? probs[i * n + j] : 1;
        const opacity = probs ? Math.max(0.15, Math.sqrt(p)).toFixed(3) : "1";
        out.push(`<rect x="${x}" y="${y}" width="${size}" height="${size}" fill="${colours.hit}" fill-opacity="${opacity}"/>`);
        continue;
      }
      if (isPred) out.push(`<rect x="${x}" y="${y}" width="${size}" height="${size}" fill="${isGold ? colours.hit : colours.extra}"/>`);
      if (isGold && !isPred)
        out.push(`<rect x="${x + 0.5}" y="${y + 0.5}" width="${size - 1}" height="${size - 1}" fill="${colours.miss}" fill-opacity="0.35" stroke="${colours.miss}"/>`);
      if (isGold) {
        const cx = x + size / 2, cy = y + size / 2;
        const fill = isPred ? "white" : colours.miss;
        out.push(star
          ? `<text x="${cx}" y="${cy + size * 0.3}" font-size="${size * 0.8}" text-anchor="middle" fill="${fill}">★</text>`
          : `<circle cx="${cx}" cy="${cy}" r="${Math.max(0.8, size * 0.22)}" fill="${fill}"/>`);
      }
    }
  }
  // Axis labels: keys along the top, queries down the left.
  for (let t = 0; t < n; t += labelEvery) {
    const c = t * size + size / 2, label = escapeXml(tokens[t]);
    out.push(`<text x="${c}" y="-4" text-anchor="middle" font-size="${Math.min(10, size * 0.9 * labelEvery)}">${label}</text>`);
    out.push(`<text x="-4" y="${c + 3}" text-anchor="end" font-size="${Math.min(10, size * 0.9 * labelEvery)}">${label}</text>`);
  }
  out.push(`<text x="${side / 2}" y="-22" text-anchor="middle" fill="#555">key →</text>`);
  out.push(`<text x="-32" y="${side / 2}" text-anchor="middle" fill="#555" transform="rotate(-90 -32 ${side / 2})">query →</text>`);
  out.push("</g>");
  // Legend.
  const ly = margin.top + side + 22;
  const items = predRows
    ? [[colours.hit, "hit (true and predicted)"], [colours.extra, "predicted, not true"], [colours.miss, "missed (true, not predicted)"]]
    : [[colours.hit, probs ? "true edge (darker: larger weight)" : "true edge"]];
  let lx = margin.left;
  for (const [colour, label] of items) {
    out.push(`<rect x="${lx}" y="${ly - 9}" width="10" height="10" fill="${colour}"/>`);
    out.push(`<text x="${lx + 14}" y="${ly}">${escapeXml(label)}</text>`);
    lx += 24 + label.length * 5.6;
  }
  if (predRows) out.push(`<text x="${lx}" y="${ly}">${star ? "★" : "●"} true edge</text>`);
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

// Sparsity (x) vs recall (y), one colour per method with its frontier as a
// line; the gold sparsity dashed; `current` ({sparsity, recall, method,
// label}) ringed. points: [{method, sparsity, recall, ...}] as from sweep().
export function pareto({ points, goldSparsity = null, current = null, title = "", width = 640, height = 400 } = {}) {
  if (!Array.isArray(points)) throw new Error("points: expected an array of {method, sparsity, recall}");
  const methods = [...new Set(points.map((p) => p.method))];
  const m = { left: 52, right: 190, top: title ? 34 : 16, bottom: 44 };
  const pw = width - m.left - m.right, ph = height - m.top - m.bottom;
  let xmin = Math.min(1, goldSparsity ?? 1, ...points.map((p) => p.sparsity), current ? current.sparsity : 1);
  xmin = Math.max(0, Math.floor(xmin * 10) / 10);
  if (xmin >= 1) xmin = 0.9;
  const x = (s) => m.left + ((s - xmin) / (1 - xmin)) * pw;
  const y = (r) => m.top + (1 - r) * ph;
  const out = [`<svg ${SVG_NS} width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`];
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
  out.push(`<text x="${m.left + pw / 2}" y="${height - 8}" text-anchor="middle">sparsity of the predicted graph →</text>`);
  out.push(`<text x="14" y="${m.top + ph / 2}" text-anchor="middle" transform="rotate(-90 14 ${m.top + ph / 2})">recall of true edges →</text>`);
  if (goldSparsity !== null && goldSparsity !== undefined) {
    out.push(`<line x1="${x(goldSparsity)}" y1="${m.top}" x2="${x(goldSparsity)}" y2="${m.top + ph}" stroke="#444" stroke-dasharray="5,4"/>`);
    out.push(`<text x="${x(goldSparsity) - 4}" y="${m.top + 12}" text-anchor="end" fill="#444">gold sparsity ${goldSparsity.toFixed(3)}</text>`);
  }
  methods.forEach((method, k) => {
    const colour = methodColours[k % methodColours.length];
    const own = points.filter((p) => p.method === method);
    for (const p of own) out.push(`<circle cx="${x(p.sparsity).toFixed(2)}" cy="${y(p.recall).toFixed(2)}" r="2.5" fill="${colour}" fill-opacity="0.45"/>`);
    const line = frontier(own).map((i) => `${x(own[i].sparsity).toFixed(2)},${y(own[i].recall).toFixed(2)}`).join(" ");
    if (line) out.push(`<polyline points="${line}" fill="none" stroke="${colour}" stroke-width="2"/>`);
    const ly = m.top + 8 + k * 16;
    out.push(`<line x1="${m.left + pw + 12}" y1="${ly}" x2="${m.left + pw + 30}" y2="${ly}" stroke="${colour}" stroke-width="3"/>`);
    out.push(`<text x="${m.left + pw + 36}" y="${ly + 4}">${escapeXml(method)}</text>`);
  });
  if (current) {
    const cx = x(current.sparsity), cy = y(current.recall);
    out.push(`<circle cx="${cx}" cy="${cy}" r="8" fill="none" stroke="black" stroke-width="2.5"/>`);
    out.push(`<circle cx="${cx}" cy="${cy}" r="2.5" fill="black"/>`);
    const label = current.label ?? `${current.method ?? "current"}: ${current.sparsity.toFixed(3)}, ${current.recall.toFixed(3)}`;
    out.push(`<text x="${Math.min(cx + 11, m.left + pw - 4)}" y="${cy - 10}" text-anchor="${cx + 11 > m.left + pw - 150 ? "end" : "start"}" font-weight="bold">${escapeXml(label)}</text>`);
  }
  out.push("</svg>");
  return out.join("");
}
