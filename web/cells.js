// The cells of one head: a Uint8Array(n * n) of state bits (ALLOWED by the
// mask, GOLD = a true entmax edge, PRED = a predicted edge), built once per
// update and shared by the heatmaps, the grid and the tooltip; and the metrics
// counted while building it.
//
// The metrics are the core's GraphMetrics (graph.hpp, compare_graphs) with the
// same integer counts and the same double formulas, so they are equal, bit for
// bit, to eg.compareGraphs(predicted, gold, causal) — counting them here saves
// copying both graphs back into the wasm heap for every head on every keystroke.
// (Checked against eg.compareGraphs with ?check=1 in the URL.)

export const ALLOWED = 1;
export const GOLD = 2;
export const PRED = 4;

let allowedCache = { n: -1, causal: null, mask: null };

// ALLOWED on every pair the mask allows: j <= i under a causal mask, else all.
export function allowedMask(n, causal) {
  if (allowedCache.n !== n || allowedCache.causal !== causal) {
    const mask = new Uint8Array(n * n);
    for (let i = 0; i < n; i++) mask.fill(ALLOWED, i * n, causal ? i * n + i + 1 : i * n + n);
    allowedCache = { n, causal, mask };
  }
  return allowedCache.mask;
}

export function allowedPairs(n, causal) {
  return causal ? (n * (n + 1)) / 2 : n * n;
}

// One buffer per head, reused while the number of tokens stays the same.
const buffers = [];
export function cellBuffer(index, n, causal) {
  const allowed = allowedMask(n, causal);
  let b = buffers[index];
  if (!b || b.length !== allowed.length) b = buffers[index] = new Uint8Array(allowed.length);
  b.set(allowed);
  return b;
}

// GOLD on the support of the entmax weights (p > 0 on an allowed pair), which is
// what gold_graph computes. -> the number of gold edges.
export function markGoldFromProbs(cells, probs, n, causal) {
  let gold = 0;
  for (let i = 0; i < n; i++) {
    const row = i * n;
    const end = row + (causal ? i + 1 : n);
    for (let at = row; at < end; at++) {
      if (probs[at] > 0) {
        cells[at] |= GOLD;
        gold++;
      }
    }
  }
  return gold;
}

// GOLD on the allowed edges of a graph (CSR). -> the number of gold edges.
export function markGoldFromGraph(cells, graph, n) {
  let gold = 0;
  const { offsets, indices } = graph;
  for (let i = 0; i < n; i++) {
    const row = i * n;
    for (let e = offsets[i]; e < offsets[i + 1]; e++) {
      const at = row + indices[e];
      if (cells[at] & ALLOWED) {
        cells[at] |= GOLD;
        gold++;
      }
    }
  }
  return gold;
}

// PRED on the predicted edges; counts the allowed ones and the hits (edges
// outside the mask are not pairs and do not count, as in compare_graphs).
export function markPredicted(cells, graph, n) {
  let predicted = 0;
  let hits = 0;
  const { offsets, indices } = graph;
  for (let i = 0; i < n; i++) {
    const row = i * n;
    for (let e = offsets[i]; e < offsets[i + 1]; e++) {
      const at = row + indices[e];
      const s = cells[at];
      if (s & ALLOWED) {
        cells[at] = s | PRED;
        predicted++;
        if (s & GOLD) hits++;
      }
    }
  }
  return { predicted, hits };
}

// The core's GraphMetrics from the counts (graph.cpp: the same formulas).
export function metricsFromCounts({ gold, predicted, hits, allowed, queries }) {
  return {
    gold,
    predicted,
    hits,
    allowed,
    queries,
    sparsity: allowed === 0 ? 0 : 1 - predicted / allowed,
    goldSparsity: allowed === 0 ? 0 : 1 - gold / allowed,
    recall: gold === 0 ? 1 : hits / gold,
    precision: predicted === 0 ? 1 : hits / predicted,
  };
}

// Rows (queries) whose every gold edge is predicted.
export function coveredRows(cells, n) {
  let rows = 0;
  for (let i = 0; i < n; i++) {
    const row = i * n;
    let ok = true;
    for (let at = row; at < row + n; at++) {
      if ((cells[at] & (GOLD | PRED)) === GOLD) {
        ok = false;
        break;
      }
    }
    if (ok) rows++;
  }
  return rows;
}

// Whether the GOLD bits equal a graph's allowed edges.
export function goldMatches(cells, graph, n) {
  let count = 0;
  const { offsets, indices } = graph;
  for (let i = 0; i < n; i++) {
    for (let e = offsets[i]; e < offsets[i + 1]; e++) {
      const s = cells[i * n + indices[e]];
      if (!(s & ALLOWED)) continue;
      if (!(s & GOLD)) return false;
      count++;
    }
  }
  let marked = 0;
  for (let at = 0; at < n * n; at++) if (cells[at] & GOLD) marked++;
  return marked === count;
}
