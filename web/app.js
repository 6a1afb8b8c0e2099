// The demo page: state, the update on every change, and the wiring of the
// controls. Modules: text.js (bytes and labels), resources.js (fetching the
// teachers and parameter files), heatmap.js (the three graphs), grid.js (all
// heads), pareto.js (the curves), methods.js and palette.js.
//
// One update (update()): teacher forward on the first 256 bytes of the text
// box, every head's gold graph, the chosen predictor on every head, the
// metrics, graph attention on the chosen head (fast and exact modes), and the redraw. It runs
// synchronously once per animation frame at most; its time is shown in
// #update-ms. The Pareto curves are heavier and run separately, in slices,
// 300 ms after the text stops changing.

import { loadEntgraph } from "./entgraph/entgraph.js";
import { Resources } from "./resources.js";
import { cutUtf8, snippet, byteHex, passages, utf8Bytes } from "./text.js";
import { GraphView } from "./heatmap.js";
import {
  ALLOWED, GOLD, PRED, allowedMask, allowedPairs, markGoldFromProbs, markGoldFromGraph, markPredicted,
  metricsFromCounts, coveredRows, goldMatches,
} from "./cells.js";
import { HeadsGrid } from "./grid.js";
import { TokenStrip } from "./strip.js";
import { ParetoChart, computePareto, pointLabel } from "./pareto.js";
import { METHOD_INFO, methodLabel } from "./methods.js";

const $ = (id) => document.getElementById(id);

const DEFAULT_METHOD = "sparsefinder-distance";
const DEFAULT_VALUE = "3.5";
const PARETO_DELAY_MS = 300;
const TEST_TEXT_OFFSET = 4096; // heldout.txt's first 4 KiB fitted the predictors; start after them

// ---------------------------------------------------------------------------
// State

const state = {
  teacher: "causal",
  layer: 0,
  head: 0,
  method: DEFAULT_METHOD,
  valueIndex: 0,
  window: -1,
  zoom: 0, // 0: all tokens
  row0: 0,
  col0: 0,
  gridMode: "true",
};

// What the tests read (see the comment at the top of index.html).
const demo = {
  ready: false,
  pending: true,
  updates: 0,
  error: null,
  paretoReady: false,
  paretoPoints: 0,
};
window.entgraphDemo = demo;

let eg = null;
let res = null;
let samples = [];
let sampleIndex = 0;

// The last forward pass: { kind, text, bytes, glyphs, out, n, dim, causal, heads: [...] }
let run = null;
// What the last update computed for the chosen predictor: { key, heads[].pred/metrics/state }
let predKey = null;

// ---------------------------------------------------------------------------
// Update scheduling: many input events per frame give one update.

const DIRTY_TEXT = 1; // re-run the teacher
const DIRTY_PRED = 2; // re-run the predictor on every head
const DIRTY_HEAD = 4; // the chosen head changed
const DIRTY_VIEW = 8; // only redraw
let dirty = DIRTY_TEXT | DIRTY_PRED | DIRTY_HEAD | DIRTY_VIEW;
let scheduled = false;
let loadingResources = false;
let inputAt = 0; // timeStamp of the first keystroke not yet shown

function requestUpdate(flags) {
  dirty |= flags;
  demo.pending = true;
  if (scheduled) return;
  scheduled = true;
  let done = false;
  const go = () => {
    if (done) return;
    done = true;
    scheduled = false;
    runUpdate();
  };
  requestAnimationFrame(go);
  setTimeout(go, 100); // hidden tabs get no animation frames
}

async function runUpdate() {
  if (!eg || loadingResources) return;
  // Make sure what the synchronous update needs is loaded.
  const entry = res.teacherNow(state.teacher);
  const file = entry && currentValue(entry)?.file;
  if (!entry || !res.predictorNow(state.teacher, file)) {
    loadingResources = true;
    setStatus(`Loading ${entry ? methodLabel(state.method) : `the ${state.teacher} teacher`}…`);
    try {
      const e = await res.teacher(state.teacher);
      syncMethodControls(e);
      await res.predictor(state.teacher, currentValue(e).file);
      setStatus("");
    } catch (err) {
      showError(err);
      loadingResources = false;
      return;
    }
    loadingResources = false;
    requestUpdate(0);
    return;
  }
  try {
    update();
    setStatus("");
  } catch (err) {
    showError(err);
  }
}

// ---------------------------------------------------------------------------
// The update

// ?check=1: also compute every head's metrics with eg.compareGraphs on out.goldGraph
// (the documented path) and count any difference in entgraphDemo.checkMismatches.
const CHECK = new URLSearchParams(location.search).has("check");

function checkMetrics(h) {
  const official = eg.compareGraphs(h.pred, run.out.goldGraph(h.layer, h.head), run.causal);
  for (const key of ["gold", "predicted", "hits", "allowed", "queries", "sparsity", "goldSparsity", "recall", "precision"]) {
    if (official[key] !== h.metrics[key]) {
      demo.checkMismatches = (demo.checkMismatches ?? 0) + 1;
      console.warn(`check: layer ${h.layer} head ${h.head}: ${key} ${h.metrics[key]} here, ${official[key]} from compareGraphs`);
    }
  }
  demo.checked = (demo.checked ?? 0) + 1;
}

function currentValue(entry) {
  const m = entry.manifest.methods.find((x) => x.method === state.method) ?? entry.manifest.methods[0];
  return m.values[Math.min(state.valueIndex, m.values.length - 1)];
}

function currentMethodEntry(entry) {
  return entry.manifest.methods.find((x) => x.method === state.method);
}

// Buffers reused from one update to the next (one per head and purpose).
const pools = { gold: [], cells: [] };
function pooled(pool, index, length) {
  let b = pools[pool][index];
  if (!b || b.length !== length) b = pools[pool][index] = new Uint8Array(length);
  return b;
}

function forward(entry, textInfo) {
  const out = entry.teacher.forward(textInfo.text, { probs: true });
  const n = out.tokens;
  const allowed = allowedMask(n, out.causal);
  const heads = [];
  for (let l = 0; l < out.layers; l++) {
    for (let h = 0; h < out.heads; h++) {
      const index = heads.length;
      const probs = out.probs(l, h);
      // The gold graph is the support of the weights: marked from probs here, which is
      // cheaper than out.goldGraph(l, h) for 16 heads; the Pareto step checks both agree.
      const goldCells = pooled("gold", index, n * n);
      goldCells.set(allowed);
      const goldCount = markGoldFromProbs(goldCells, probs, n, out.causal);
      heads.push({ layer: l, head: h, q: out.queries(l, h), k: out.keys(l, h), probs, goldCells, goldCount, gold: null });
    }
  }
  return {
    kind: state.teacher,
    text: textInfo.text,
    cut: textInfo.cut,
    inputBytes: textInfo.totalBytes,
    bytes: textInfo.bytes,
    glyphs: out.tokenLabels,
    out,
    n,
    dim: out.headDim,
    causal: out.causal,
    layers: out.layers,
    headsPerLayer: out.heads,
    heads,
  };
}

function update() {
  const t0 = performance.now();
  const entry = res.teacherNow(state.teacher);
  const context = entry.config.context ?? 256;
  const textInfo = cutUtf8($("text").value, context);
  const timings = { forward: 0, predict: 0, attention: 0, draw: 0 };

  // 1. The teacher (only when the text or the teacher changed).
  if (!run || run.kind !== state.teacher || run.text !== textInfo.text) dirty |= DIRTY_TEXT;
  if (dirty & DIRTY_TEXT) {
    const previous = run;
    run = textInfo.bytes.length > 0 ? forward(entry, textInfo) : emptyRun(entry, textInfo);
    previous?.out?.dispose();
    strip.setTokens(run.glyphs);
    predKey = null;
    grid.build(run.layers, run.headsPerLayer);
    scheduleParetoSoon();
  }
  const t1 = performance.now();
  timings.forward = t1 - t0;

  // 2. The predictor on every head, and the metrics.
  const value = currentValue(entry);
  const key = `${state.teacher}/${value.file}/${state.window}`;
  if (predKey !== key || (dirty & DIRTY_TEXT)) dirty |= DIRTY_PRED;
  if ((dirty & DIRTY_PRED) && run.n > 0) {
    const predictor = res.predictorNow(state.teacher, value.file);
    predictor.setUnionPatterns(state.window, 0);
    const { n, causal } = run;
    const allowed = allowedPairs(n, causal);
    run.heads.forEach((h, index) => {
      h.pred = predictor.predict(h.q, h.k, { queries: n, keys: n, dim: run.dim, layer: h.layer, head: h.head, causal });
      h.state = pooled("cells", index, n * n);
      h.state.set(h.goldCells);
      const { predicted, hits } = markPredicted(h.state, h.pred, n);
      h.metrics = metricsFromCounts({ gold: h.goldCount, predicted, hits, allowed, queries: n });
      if (CHECK) checkMetrics(h);
    });
    predictor.setUnionPatterns(-1, 0);
    predKey = key;
  }
  const t2 = performance.now();
  timings.predict = t2 - t1;

  // 3. The chosen head: probabilities, scores, and attention over the predicted graph.
  const layer = Math.min(state.layer, run.layers - 1);
  const headIndex = Math.min(state.head, run.headsPerLayer - 1);
  const chosen = run.heads[layer * run.headsPerLayer + headIndex];
  let exactInfo = null;
  if (chosen && run.n > 0) {
    if (dirty & (DIRTY_TEXT | DIRTY_HEAD) || !chosen.v) {
      chosen.v = run.out.values(layer, headIndex);
      chosen.dense = run.out.attention(layer, headIndex);
    }
    exactInfo = graphAttentionCheck(chosen);
  }
  const t3 = performance.now();
  timings.attention = t3 - t2;

  // 4. Redraw.
  draw(chosen, exactInfo);
  const t4 = performance.now();
  timings.draw = t4 - t3;

  dirty = 0;
  publish(chosen, exactInfo, value, t4 - t0, timings);
}

function emptyRun(entry, textInfo) {
  const layers = entry.config.layers;
  const heads = entry.config.heads;
  return {
    kind: state.teacher, text: textInfo.text, cut: false, inputBytes: 0, bytes: textInfo.bytes, glyphs: [],
    out: null, n: 0, dim: 0, causal: entry.config.causal, layers, headsPerLayer: heads,
    heads: Array.from({ length: layers * heads }, (_, i) => ({
      layer: Math.floor(i / heads), head: i % heads, state: new Uint8Array(0),
      metrics: { recall: NaN, sparsity: NaN, goldSparsity: NaN, precision: NaN, gold: 0, predicted: 0, hits: 0 },
    })),
  };
}

// Attention over the predicted graph vs dense attention, for the chosen head, twice:
// mode "fast" (the predicted edges only: what a sparse kernel would output, shown as
// the largest output error) and mode "exact" (bound and repair: rows proven exact by
// the graph alone, rows repaired, and the extra pairs repair scored).
function graphAttentionCheck(h) {
  const n = run.n;
  const alpha = run.out.alpha;
  const inputs = {
    q: h.q, k: h.k, v: h.v, queries: n, keys: n, dim: run.dim, valueDim: run.dim, graph: h.pred,
    // the teacher's own transform (entmax15 for alpha 1.5), so that the dense output compared is the same function
    transform: alpha === 1.5 ? "entmax15" : "entmax", alpha, causal: run.causal, scale: run.out.scale,
  };
  const t0 = performance.now();
  const fast = eg.graphAttention({ ...inputs, mode: "fast" });
  const t1 = performance.now();
  const exact = eg.graphAttention({ ...inputs, mode: "exact" });
  const t2 = performance.now();
  const dense = h.dense;
  let maxAbsDiff = 0;
  let exactMaxAbsDiff = 0;
  for (let t = 0; t < dense.length; t++) {
    const d = Math.abs(fast.out[t] - dense[t]);
    if (d > maxAbsDiff) maxAbsDiff = d;
    const e = Math.abs(exact.out[t] - dense[t]);
    if (e > exactMaxAbsDiff) exactMaxAbsDiff = e;
  }
  return {
    rows: n,
    maxAbsDiff,
    coveredRows: coveredRows(h.state, n),
    // exact mode
    graphRows: exact.graphRows,
    repairedRows: exact.repairedRows,
    denseRows: exact.denseRows,
    graphPairs: exact.graphPairs,
    repairPairs: exact.repairPairs,
    boundPairs: exact.boundPairs,
    repairShare: exact.graphPairs > 0 ? exact.repairPairs / exact.graphPairs : NaN,
    exactMaxAbsDiff,
    fastMs: t1 - t0,
    exactMs: t2 - t1,
  };
}

function formatShare(x) {
  if (!Number.isFinite(x)) return "–";
  const pct = 100 * x;
  return `${pct === 0 ? "0" : pct < 0.1 ? "<0.1" : pct < 10 ? pct.toFixed(1) : pct.toFixed(0)}%`;
}

// ---------------------------------------------------------------------------
// Drawing and the numbers

const fmt = (x, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : "–");

function setNumber(id, value, text) {
  const el = $(id);
  el.textContent = text ?? fmt(value);
  el.dataset.value = Number.isFinite(value) ? String(value) : "";
}

function formatDiff(x) {
  if (x === 0) return "0";
  return x >= 0.01 ? x.toPrecision(3) : x.toExponential(1).replace("e-", "·10⁻").replace(/⁻(\d+)/, (_, d) => "⁻" + [...d].map((c) => "⁰¹²³⁴⁵⁶⁷⁸⁹"[c]).join(""));
}

function setBar(id, value) {
  $(id).style.width = `${Number.isFinite(value) ? Math.max(0, Math.min(1, value)) * 100 : 0}%`;
}

function mean(heads, f) {
  let s = 0;
  for (const h of heads) s += f(h);
  return heads.length ? s / heads.length : NaN;
}

function draw(chosen, exactInfo) {
  const n = run.n;
  // graphs
  const data = { n, glyphs: run.glyphs, state: chosen?.state ?? new Uint8Array(0), probs: chosen?.probs ?? null };
  clampView();
  for (const view of views) {
    view.setData(data);
    view.setView({ row0: state.row0, col0: state.col0, size: viewSize() });
    view.draw();
  }
  for (const el of document.querySelectorAll(".cur-layer")) el.textContent = state.layer;
  for (const el of document.querySelectorAll(".cur-head")) el.textContent = state.head;
  const size = viewSize();
  $("zoom-info").textContent = n === 0 ? "" : size >= n ? `${n} tokens` :
    `queries ${state.row0}–${state.row0 + size - 1}, keys ${state.col0}–${state.col0 + size - 1}`;
  document.body.classList.toggle("bidirectional", !run.causal);

  // grid of heads (only when something it shows changed)
  if (dirty & (DIRTY_TEXT | DIRTY_PRED | DIRTY_VIEW)) grid.update(run.heads, n, state.gridMode);
  grid.select(state.layer, state.head);

  // numbers
  const m = chosen?.metrics;
  setNumber("recall", m?.recall);
  setNumber("sparsity", m?.sparsity);
  setBar("recall-bar", m?.recall);
  setBar("sparsity-bar", m?.sparsity);
  setNumber("gold-sparsity", m?.goldSparsity);
  setNumber("precision", m?.precision);
  $("edge-counts").innerHTML = m && Number.isFinite(m.recall)
    ? `<span class="chip hit">${m.hits} hits</span> <span class="chip miss">${m.gold - m.hits} misses</span> <span class="chip extra">${m.predicted - m.hits} extra</span>`
    : "–";
  $("edge-counts").title = m ? `true edges ${m.gold}, predicted ${m.predicted} of ${m.allowed} allowed pairs` : "";
  setNumber("mean-recall", mean(run.heads, (h) => h.metrics.recall));
  setNumber("mean-sparsity", mean(run.heads, (h) => h.metrics.sparsity));

  const ex = $("exactness");
  if (exactInfo) {
    const exact = m.recall === 1;
    ex.className = `exactness ${exact ? "yes" : "no"}`;
    ex.dataset.value = String(exact);
    ex.innerHTML = exact
      ? `<b>Exact on the graph alone:</b> every true edge is predicted, so attention over the predicted graph equals full attention (up to float rounding).`
      : `<b>Not exact on the graph alone:</b> the rows that miss a true edge give a different output than full attention, ` +
        `until bound and repair adds the keys they need.`;
    setNumber("max-diff", exactInfo.maxAbsDiff, formatDiff(exactInfo.maxAbsDiff));
    setNumber("covered-rows", exactInfo.coveredRows, `${exactInfo.coveredRows}/${exactInfo.rows}`);
    const x = exactInfo;
    const fixed = x.repairedRows + x.denseRows;
    setNumber("graph-rows", x.graphRows, `${x.graphRows}/${x.rows}`);
    setNumber("repaired-rows", fixed, `${fixed}/${x.rows}`);
    $("repaired-rows").parentElement.title =
      `rows that bound and repair made exact by adding keys to the predicted graph: ${x.repairedRows} repaired ` +
      `(only the keys the bounds could not rule out), ${x.denseRows} scored whole; with the ${x.graphRows} rows ` +
      `proven by the graph alone, all ${x.graphRows + fixed} of ${x.rows} rows equal full attention`;
    setNumber("repair-cost", x.repairShare, x.graphPairs > 0 ? `+${formatShare(x.repairShare)}` : `${x.repairPairs} pairs`);
    $("repair-cost").parentElement.title =
      `repair scored ${x.repairPairs} extra (query, key) pairs, ${formatShare(x.repairShare)} of the ${x.graphPairs} ` +
      `pairs of the predicted graph; the bounds cost ${x.boundPairs} cheap pair bounds. Time on this head: exact ` +
      `${x.exactMs.toFixed(2)} ms, graph only ${x.fastMs.toFixed(2)} ms`;
    setNumber("exact-diff", x.exactMaxAbsDiff, formatDiff(x.exactMaxAbsDiff));
    const extra =
      `scoring ${x.repairPairs} extra pairs (` +
      (x.graphPairs > 0 ? `${formatShare(x.repairShare)} of the graph's ${x.graphPairs}` : "the predicted graph has no edge here") +
      ")";
    // Exact mode may score keys beyond the graph that then get weight 0: the
    // rows stay exact by the graph alone, and the proof still cost the pairs.
    $("repair-summary").textContent = x.repairPairs === 0
      ? `Bound and repair: all ${x.rows} rows proven exact from the predicted graph alone; nothing to repair.`
      : fixed === 0
        ? `Bound and repair: all ${x.rows} rows proven exact by the graph alone, after ${extra}. Every row equals full attention.`
        : `Bound and repair: ${x.graphRows} of ${x.rows} rows proven exact by the graph alone; ${fixed} repaired by ` +
          `${extra}. Every row then equals full attention.`;
  } else {
    ex.className = "exactness";
    ex.textContent = run.n === 0 ? "Type some text to see its attention." : "–";
    ex.dataset.value = "false";
    for (const id of ["max-diff", "covered-rows", "graph-rows", "repaired-rows", "repair-cost", "exact-diff"]) setNumber(id, NaN);
    $("repair-summary").textContent = "";
  }

  // the marker on the Pareto plot
  chart.setCurrent(currentPoint());

  // text box notes
  $("byte-count").textContent = `${run.inputBytes} byte${run.inputBytes === 1 ? "" : "s"}`;
  $("cut-note").hidden = !run.cut;
  $("cut-note").textContent = `first ${run.bytes.length} bytes used`;
}

function currentPoint() {
  if (!run || run.n === 0) return null;
  // Right after a teacher switch its files may still be loading, and the
  // last run belongs to the other teacher: no current point yet.
  const entry = res.teacherNow(state.teacher);
  if (!entry || run.kind !== state.teacher) return null;
  const m = currentMethodEntry(entry);
  const v = currentValue(entry);
  return {
    method: state.method, parameter: m?.parameter, value: v.value, window: state.window,
    recall: mean(run.heads, (h) => h.metrics.recall), sparsity: mean(run.heads, (h) => h.metrics.sparsity),
  };
}

function publish(chosen, exactInfo, value, ms, timings) {
  const m = chosen?.metrics;
  const entry = res.teacherNow(state.teacher);
  Object.assign(demo, {
    ready: true,
    pending: dirty !== 0 || scheduled,
    updates: demo.updates + 1,
    error: null,
    text: run.text,
    inputBytes: run.inputBytes,
    tokens: run.n,
    cut: run.cut,
    teacher: state.teacher,
    layer: state.layer,
    head: state.head,
    method: state.method,
    parameter: currentMethodEntry(entry)?.parameter ?? null,
    value: value.value,
    valueIndex: state.valueIndex,
    paramFile: value.file,
    paramSource: value.source ?? value.file, // the file fetched: values of a predict-time setting share one
    paramSettings: value.settings ?? null, // and then apply their own settings
    window: state.window,
    recall: m?.recall ?? NaN,
    sparsity: m?.sparsity ?? NaN,
    goldSparsity: m?.goldSparsity ?? NaN,
    precision: m?.precision ?? NaN,
    meanRecall: mean(run.heads, (h) => h.metrics.recall),
    meanSparsity: mean(run.heads, (h) => h.metrics.sparsity),
    meanGoldSparsity: mean(run.heads, (h) => h.metrics.goldSparsity),
    exact: m ? m.recall === 1 : false,
    maxAbsDiff: exactInfo?.maxAbsDiff ?? NaN,
    coveredRows: exactInfo?.coveredRows ?? 0,
    // graph attention in mode "exact" on the chosen head (bound and repair)
    graphRows: exactInfo?.graphRows ?? 0,
    repairedRows: exactInfo?.repairedRows ?? 0,
    denseRows: exactInfo?.denseRows ?? 0,
    graphPairs: exactInfo?.graphPairs ?? 0,
    repairPairs: exactInfo?.repairPairs ?? 0,
    boundPairs: exactInfo?.boundPairs ?? 0,
    repairShare: exactInfo?.repairShare ?? NaN,
    exactMaxAbsDiff: exactInfo?.exactMaxAbsDiff ?? NaN,
    exactMs: exactInfo?.exactMs ?? NaN,
    fastMs: exactInfo?.fastMs ?? NaN,
    updateMs: ms,
    timings,
    heads: run.heads.map((h) => ({
      layer: h.layer, head: h.head, recall: h.metrics.recall, sparsity: h.metrics.sparsity,
      goldSparsity: h.metrics.goldSparsity, precision: h.metrics.precision,
    })),
  });
  const el = $("update-ms");
  el.textContent = demo.updates === 1 ? `${ms.toFixed(1)} ms (the first, warming up)` : `${ms.toFixed(1)} ms`;
  el.dataset.value = String(ms);
  // From the keystroke to the end of its update, waiting for the frame included.
  demo.inputToUpdateMs = inputAt ? performance.now() - inputAt : null;
  inputAt = 0;
  el.title =
    `last update: teacher ${timings.forward.toFixed(1)} ms, predictor on all heads ${timings.predict.toFixed(1)} ms, ` +
    `attention check ${timings.attention.toFixed(1)} ms, drawing ${timings.draw.toFixed(1)} ms`;
}

// ---------------------------------------------------------------------------
// Zoom

function viewSize() {
  if (!run || run.n === 0) return 0;
  return state.zoom > 0 ? Math.min(state.zoom, run.n) : run.n;
}

function clampView() {
  const n = run ? run.n : 0;
  const size = viewSize();
  state.row0 = Math.max(0, Math.min(state.row0, n - size));
  state.col0 = Math.max(0, Math.min(state.col0, n - size));
}

function zoomTo(size, centre) {
  state.zoom = size;
  $("zoom").value = String(size);
  if (centre) {
    const s = viewSize();
    state.row0 = Math.round(centre.i - s / 2);
    state.col0 = Math.round(centre.j - s / 2);
  }
  requestUpdate(DIRTY_VIEW);
}

// ---------------------------------------------------------------------------
// Hover tooltip

function showTooltip(cell, event) {
  for (const v of views) {
    v.setHover(cell);
    v.draw();
  }
  const h = run?.heads[state.layer * run.headsPerLayer + state.head];
  if (!cell || !h || !h.state) return hideTooltip();
  const { i, j } = cell;
  const n = run.n;
  const s = h.state[i * n + j];
  const allowed = (s & ALLOWED) !== 0;
  if (!h.scores) h.scores = run.out.scores(h.layer, h.head); // on the first hover only
  const score = h.scores[i * n + j];
  const p = h.probs[i * n + j];
  let kind;
  if (!allowed) kind = `<span class="tag masked">future key: the causal mask forbids it</span>`;
  else if (s & GOLD) kind = s & PRED ? `<span class="tag hit">hit</span> true edge, predicted` : `<span class="tag miss">miss</span> true edge, not predicted`;
  else kind = s & PRED ? `<span class="tag extra">extra</span> predicted, weight 0` : `<span class="tag none">no edge</span> weight 0, not predicted`;
  const tok = (t) => `<code>${escapeHtml(run.glyphs[t])}</code> <span class="muted">${byteHex(run.bytes[t])}</span>`;
  const tip = $("tooltip");
  tip.innerHTML =
    `<div><b>query ${i}</b> ${tok(i)} <span class="ctx">${escapeHtml(snippet(run.bytes, run.glyphs, i))}</span></div>` +
    `<div><b>key ${j}</b> ${tok(j)} <span class="ctx">${escapeHtml(snippet(run.bytes, run.glyphs, j))}</span></div>` +
    `<div>score ${allowed && Number.isFinite(score) ? score.toFixed(3) : "−∞ (masked)"} · probability ${p > 0 ? p.toPrecision(3) : "0"}</div>` +
    `<div>${kind}</div>`;
  tip.hidden = false;
  strip.show(i, j, h.probs.subarray(i * n, i * n + n));
  const pad = 14;
  const w = tip.offsetWidth;
  const hgt = tip.offsetHeight;
  let x = event.clientX + pad;
  let y = event.clientY + pad;
  if (x + w > window.innerWidth - 4) x = event.clientX - w - pad;
  if (y + hgt > window.innerHeight - 4) y = event.clientY - hgt - pad;
  tip.style.left = `${Math.max(4, x)}px`;
  tip.style.top = `${Math.max(4, y)}px`;
}

function hideTooltip() {
  $("tooltip").hidden = true;
  strip.clear();
  for (const v of views) {
    if (v.hover) {
      v.setHover(null);
      v.draw();
    }
  }
}

function escapeHtml(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

// ---------------------------------------------------------------------------
// Pareto curves (debounced, in slices)

let paretoTimer = 0;
let paretoGen = 0;

function scheduleParetoSoon() {
  clearTimeout(paretoTimer);
  paretoGen++;
  demo.paretoReady = false;
  $("pareto-status").textContent = "waiting for typing to stop…";
  paretoTimer = setTimeout(startPareto, PARETO_DELAY_MS);
}

async function startPareto() {
  if (!run || run.n === 0) {
    chart.render([], null, null);
    $("pareto-status").textContent = "type some text";
    return;
  }
  const gen = ++paretoGen;
  const snapshot = run;
  const kind = snapshot.kind;
  // The gold graphs as the CLI computes them (gold_graph on Q and K); the fast update
  // marked the support of the weights instead. Should they ever differ, the update
  // is redone with these.
  let differs = false;
  for (const h of snapshot.heads) {
    h.gold = snapshot.out.goldGraph(h.layer, h.head);
    if (!goldMatches(h.goldCells, h.gold, snapshot.n)) {
      differs = true;
      console.warn(`layer ${h.layer} head ${h.head}: the support of the weights differs from goldGraph; using goldGraph`);
      h.goldCells.set(allowedMask(snapshot.n, snapshot.causal));
      h.goldCount = markGoldFromGraph(h.goldCells, h.gold, snapshot.n);
    }
  }
  if (differs) {
    demo.goldMismatches = (demo.goldMismatches ?? 0) + 1;
    predKey = null;
    requestUpdate(DIRTY_PRED);
  }
  const entry = res.teacherNow(kind);
  const t0 = performance.now();
  const total = entry.manifest.methods.reduce((s, m) => s + m.values.length, 0);
  $("pareto-status").textContent = `computing ${total} settings…`;
  const goldSparsity = mean(snapshot.heads, (h) => h.metrics?.goldSparsity ?? NaN);
  try {
    const points = await computePareto({
      eg, heads: snapshot.heads, n: snapshot.n, dim: snapshot.dim, causal: snapshot.causal,
      methods: entry.manifest.methods,
      predictor: (file) => res.predictor(kind, file),
      cancelled: () => gen !== paretoGen || run !== snapshot,
      progress: (pts, done, all) => {
        if (gen !== paretoGen) return;
        $("pareto-status").textContent = `computing… ${Math.round((100 * done) / all)} %`;
        chart.render(pts, goldSparsity, currentPoint());
      },
    });
    if (!points) return;
    chart.render(points, goldSparsity, currentPoint());
    const ms = performance.now() - t0;
    $("pareto-status").textContent = `${points.length} points · ${(ms / 1000).toFixed(1)} s`;
    Object.assign(demo, { paretoReady: true, paretoPoints: points.length, paretoMs: ms });
  } catch (err) {
    if (gen === paretoGen) showError(err);
  }
}

function pickPoint(p) {
  const entry = res.teacherNow(state.teacher);
  if (!entry) return;
  state.method = p.method;
  const m = currentMethodEntry(entry);
  if (p.value != null && m) {
    const idx = m.values.findIndex((v) => v.value === p.value);
    if (idx >= 0) state.valueIndex = idx;
  } else if (m) {
    state.valueIndex = Math.floor((m.values.length - 1) / 2); // a method alone: the middle of its grid
  }
  if (p.window != null) state.window = p.window;
  syncMethodControls(entry);
  requestUpdate(DIRTY_PRED);
}

// ---------------------------------------------------------------------------
// Controls

function syncMethodControls(entry) {
  const methods = entry.manifest.methods;
  const select = $("method");
  const names = methods.map((m) => m.method).join(",");
  if (select.dataset.methods !== names) {
    select.textContent = "";
    for (const m of methods) select.add(new Option(methodLabel(m.method), m.method));
    select.dataset.methods = names;
  }
  if (!methods.some((m) => m.method === state.method)) state.method = methods[0].method;
  select.value = state.method;
  const m = currentMethodEntry(entry);
  state.valueIndex = Math.max(0, Math.min(state.valueIndex, m.values.length - 1));
  const slider = $("param-slider");
  slider.max = String(Math.max(0, m.values.length - 1));
  slider.value = String(state.valueIndex);
  slider.disabled = m.values.length <= 1;
  const v = m.values[state.valueIndex];
  $("param-name").textContent = m.parameter ? `${METHOD_INFO[m.method]?.slider ?? m.parameter}` : "no parameter";
  $("param-value").textContent = v.value ?? "–";
  $("param-min").textContent = m.values[0].value ?? "";
  $("param-max").textContent = m.values[m.values.length - 1].value ?? "";
  $("method-help").textContent = METHOD_INFO[m.method]?.blurb ?? "";
  $("pred-caption").textContent = `(${methodLabel(m.method)}${m.parameter ? `, ${m.parameter} = ${v.value}` : ""}${state.window >= 0 ? `, + window ${state.window}` : ""})`;
  $("union-window").value = String(state.window);

  const layerSelect = $("layer");
  const headSelect = $("head");
  if (layerSelect.options.length !== entry.config.layers) {
    layerSelect.textContent = "";
    for (let l = 0; l < entry.config.layers; l++) layerSelect.add(new Option(String(l), String(l)));
  }
  if (headSelect.options.length !== entry.config.heads) {
    headSelect.textContent = "";
    for (let h = 0; h < entry.config.heads; h++) headSelect.add(new Option(String(h), String(h)));
  }
  state.layer = Math.min(state.layer, entry.config.layers - 1);
  state.head = Math.min(state.head, entry.config.heads - 1);
  layerSelect.value = String(state.layer);
  headSelect.value = String(state.head);
  $("teacher").value = state.teacher;
}

function selectHead(layer, head) {
  state.layer = layer;
  state.head = head;
  $("layer").value = String(layer);
  $("head").value = String(head);
  requestUpdate(DIRTY_HEAD);
}

function bindControls() {
  $("text").addEventListener("input", (e) => {
    if (!inputAt) inputAt = e.timeStamp;
    requestUpdate(DIRTY_TEXT);
  });
  $("sample").addEventListener("click", () => {
    if (!samples.length) return;
    sampleIndex = (sampleIndex + 1) % samples.length;
    $("text").value = samples[sampleIndex];
    requestUpdate(DIRTY_TEXT);
  });
  $("teacher").addEventListener("change", (e) => {
    state.teacher = e.target.value;
    const entry = res.teacherNow(state.teacher);
    if (entry) syncMethodControls(entry);
    requestUpdate(DIRTY_TEXT);
    res.teacher(state.teacher).then(() => res.prefetchAll(state.teacher)).catch(() => {});
  });
  $("layer").addEventListener("change", (e) => selectHead(Number(e.target.value), state.head));
  $("head").addEventListener("change", (e) => selectHead(state.layer, Number(e.target.value)));
  $("method").addEventListener("change", (e) => {
    const entry = res.teacherNow(state.teacher);
    const old = entry && currentValue(entry);
    state.method = e.target.value;
    // keep the slider near the same place of the new grid
    const m = entry && currentMethodEntry(entry);
    if (m) {
      const byValue = m.values.findIndex((v) => v.value === old?.value);
      state.valueIndex = byValue >= 0 ? byValue : Math.floor((m.values.length - 1) / 2);
      syncMethodControls(entry);
    }
    requestUpdate(DIRTY_PRED);
  });
  $("param-slider").addEventListener("input", (e) => {
    state.valueIndex = Number(e.target.value);
    const entry = res.teacherNow(state.teacher);
    if (entry) syncMethodControls(entry);
    requestUpdate(DIRTY_PRED);
  });
  $("union-window").addEventListener("change", (e) => {
    state.window = Number(e.target.value);
    const entry = res.teacherNow(state.teacher);
    if (entry) syncMethodControls(entry);
    requestUpdate(DIRTY_PRED);
  });
  $("zoom").addEventListener("change", (e) => {
    const size = Number(e.target.value);
    const n = run ? run.n : 0;
    // zoom around the centre of the current view
    const s = state.zoom > 0 ? Math.min(state.zoom, n) : n;
    zoomTo(size, { i: state.row0 + s / 2, j: state.col0 + s / 2 });
  });
  $("grid-mode").addEventListener("change", (e) => {
    state.gridMode = e.target.value;
    requestUpdate(DIRTY_VIEW);
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape") hideTooltip();
  });
}

// ---------------------------------------------------------------------------
// Start

const handlers = {
  hover: (cell, event) => showTooltip(cell, event),
  leave: () => hideTooltip(),
  click: (cell) => {
    if (viewSize() >= (run?.n ?? 0)) zoomTo(32, cell);
  },
  panTo: (row0, col0) => {
    state.row0 = row0;
    state.col0 = col0;
    clampView();
    for (const v of views) {
      v.setView({ row0: state.row0, col0: state.col0, size: viewSize() });
      v.draw();
    }
    const size = viewSize();
    $("zoom-info").textContent = `queries ${state.row0}–${state.row0 + size - 1}, keys ${state.col0}–${state.col0 + size - 1}`;
  },
  reset: () => zoomTo(0, null),
};
const views = [
  new GraphView($("graph-true"), "true", handlers),
  new GraphView($("graph-pred"), "pred", handlers),
  new GraphView($("graph-overlay"), "overlay", handlers),
];
const grid = new HeadsGrid($("heads-grid"), selectHead);
const strip = new TokenStrip($("token-strip"), $("strip-hint"));
const chart = new ParetoChart($("pareto"), $("pareto-legend"), pickPoint, (points, sparsity) => eg.recallAtSparsity(points, sparsity));

function setStatus(text) {
  const el = $("status");
  el.textContent = text;
  el.classList.toggle("error", false);
  el.hidden = !text;
}

function showError(err) {
  console.error(err);
  demo.error = String(err?.message ?? err);
  demo.pending = false;
  const el = $("status");
  el.textContent = `Error: ${demo.error}`;
  el.classList.add("error");
  el.hidden = false;
}

async function main() {
  bindControls();
  try {
    eg = await loadEntgraph();
    // ?isa=reference: the portable kernels, bit-identical to the native CLI's --isa reference.
    const isa = new URLSearchParams(location.search).get("isa");
    if (isa) eg.setIsa(isa);
    demo.isa = eg.isa;
    res = new Resources(eg, ".");
    const [heldout, entry] = await Promise.all([res.text("heldout.txt"), res.teacher(state.teacher)]);
    const context = entry.config.context ?? 256;
    samples = passages(heldout, context, TEST_TEXT_OFFSET);
    if (samples.length === 0) samples = [cutUtf8(heldout, context).text];
    if (!$("text").value) $("text").value = samples[0];
    const m = entry.manifest.methods.find((x) => x.method === DEFAULT_METHOD);
    if (m) {
      const idx = m.values.findIndex((v) => v.value === DEFAULT_VALUE);
      state.valueIndex = idx >= 0 ? idx : Math.floor(m.values.length / 2);
    }
    syncMethodControls(entry);
    requestUpdate(DIRTY_TEXT);
    res.prefetchAll(state.teacher);
  } catch (err) {
    showError(err);
  }
}

main();

// Handy from the console and for tests: eg and the current run.
Object.defineProperty(demo, "debug", { enumerable: false, value: { state, get eg() { return eg; }, get run() { return run; }, utf8Bytes } });
