// The demo page: state, the update on every change, and the wiring of the
// controls. Modules: engine.js + worker.js (the compute, in Web Workers),
// text.js (bytes and labels), resources.js (the teachers' config and
// parameter manifests), heatmap.js (the three graphs), grid.js (all heads),
// pareto.js (the curves), methods.js and palette.js.
//
// One update: the page sends its state (teacher, text, predictor setting,
// chosen head) to the update worker, which runs the teacher forward on the
// text the model reads and answers in two parts: first the chosen head's
// cells (true and predicted graph), metrics and weights, which the page draws
// with the text at once; then every other head and graph attention on the
// chosen head (fast and exact modes), which fill the grid, the means and the
// exactness panel. At most one update is in flight; changes made meanwhile are
// sent together when its first part returns, so the main thread never waits
// for the model. The Pareto curves
// are recomputed by a second worker 300 ms after the text stops changing.

import { Engine } from "./engine.js";
import { Resources } from "./resources.js";
import { cutUtf8, snippet, byteHex, passages, utf8Bytes } from "./text.js";
import { GraphView } from "./heatmap.js";
import { Announcer, resultsMessage } from "./announce.js";
import { zeroShareText, errorScaleText } from "./describe.js";
import { TextWindow } from "./textwindow.js";
import { ALLOWED, GOLD, PRED, NO_METRICS } from "./cells.js";
import { HeadsGrid } from "./grid.js";
import { TokenStrip } from "./strip.js";
import { ParetoChart, pointLabel } from "./pareto.js";
import { METHOD_INFO, methodLabel } from "./methods.js";

const $ = (id) => document.getElementById(id);

const DEFAULT_METHOD = "sparsefinder-distance";
// A method's setting when it is first chosen: these, else the middle of its grid.
// (Sparsefinder's t is a distance: the middle of its grid, or a number kept from
// another method's slider, can predict no edge at all.)
const DEFAULT_VALUES = { "sparsefinder-distance": "3.5" };
const PARETO_DELAY_MS = 300;
const TEST_TEXT_OFFSET = 4096; // heldout.txt's first 4 KiB fitted the predictors; start after them
const PARAMS = new URLSearchParams(location.search);

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

let res = null; // config and manifests only: the main thread loads no WebAssembly
let engine = null; // the update worker
let paretoEngine = null; // the Pareto worker, started after the first update
let samples = [];
let sampleIndex = 0;

// The last update's result, as drawn: { kind, text, cut, inputBytes, bytes, glyphs, n, dim, causal,
// layers, headsPerLayer, heads: [{ layer, head, state, metrics }], chosen: { layer, head, probs, scores },
// exactInfo, timings }; scores and exactInfo come with the update's detail (null until then)
let run = null;

// ---------------------------------------------------------------------------
// Update scheduling: every change asks the update worker again, at most one
// request in flight; a change that only affects the drawing (zoom, grid
// mode) is redrawn here.

const DIRTY_COMPUTE = 1; // text, teacher, predictor or head: ask the worker
const DIRTY_VIEW = 2; // only redraw
let dirty = 0;
let inFlight = false;
let viewFrame = 0;
let inputAt = 0; // timeStamp of the first keystroke not yet shown
const loadedFiles = new Set(); // parameter files the worker has loaded
const infosNow = new Map(); // kind -> { config, manifest } once loaded (resources.js info())

function infoNow(kind) {
  return infosNow.get(kind);
}

function requestUpdate(flags) {
  dirty |= flags;
  demo.pending = true;
  if (dirty & DIRTY_COMPUTE) {
    if (!inFlight) queueMicrotask(sendUpdate); // the events of this task first
    return;
  }
  if (!viewFrame && run) {
    viewFrame = requestAnimationFrame(() => {
      viewFrame = 0;
      if (dirty & DIRTY_COMPUTE || inFlight) return; // the coming result redraws
      draw();
      dirty = 0;
      demo.pending = busy();
    });
  }
}

async function sendUpdate() {
  if (inFlight || !(dirty & DIRTY_COMPUTE) || !engine) return;
  inFlight = true;
  dirty &= ~DIRTY_COMPUTE;
  const kind = state.teacher;
  try {
    const info = await res.info(kind);
    infosNow.set(kind, info);
    syncMethodControls(info);
    const context = info.config.context ?? 256;
    const textInfo = textWindow.read(context); // the bytes under the text window
    const value = currentValue(info);
    const fileKey = `${kind}/${value.source ?? value.file}`;
    const loading = !loadedFiles.has(fileKey);
    if (loading) setStatus(`Loading ${run ? methodLabel(state.method) : `the ${kind} teacher`}…`);
    const sent = { teacher: kind, text: textInfo.text, file: value.file, window: state.window, layer: state.layer, head: state.head };
    const since = inputAt; // the first keystroke this update shows
    inputAt = 0;
    const result = await engine.request("update", { ...sent, check: PARAMS.has("check") });
    inFlight = false;
    loadedFiles.add(fileKey);
    if (loading) setStatus("");
    apply(result, { textInfo, info, value, window: sent.window, since });
    detailPending = true; // the other heads and graph attention follow (onWorkerMessage)
  } catch (err) {
    inFlight = false;
    showError(err);
  }
  if (dirty & DIRTY_COMPUTE) sendUpdate();
  else if (dirty & DIRTY_VIEW) requestUpdate(0);
}

// Takes a worker's result as the new run and draws it.
// The longest piece of the page's own script in one task (applying a result,
// a slice of the grid, the Pareto plot), ms: entgraphDemo.scriptMaxMs, for the
// test that typing never blocks the page's thread (the browser's own layout
// and paint come on top: the longtask API sees both).
function timed(name, fn) {
  return (...args) => {
    const t0 = performance.now();
    try {
      return fn(...args);
    } finally {
      const ms = performance.now() - t0;
      demo.scriptMaxMs = Math.max(demo.scriptMaxMs ?? 0, ms);
      demo.scriptMs = { ...demo.scriptMs, [name]: Math.max(demo.scriptMs?.[name] ?? 0, ms) };
    }
  };
}

// An update arrives in two parts (worker.js): "result", the chosen head, drawn
// at once with the text; then "detail", every other head and graph attention
// on the chosen head. The keystroke's latency is that of the first part's paint
// (entgraphDemo.inputToPaintMs); the whole page's is inputToCompleteMs.
let detailPending = false;
let completeSince = 0; // the keystroke whose whole update is being drawn (for inputToCompleteMs)

// Whether something the page will show is still to come.
function busy() {
  return dirty !== 0 || inFlight || gridPending || detailPending;
}


// sent: { textInfo, info, value, window, since } of the request.
const apply = timed("apply", applyResult);
function applyResult(result, { textInfo, info, value, window, since }) {
  const textChanged = !run || result.textChanged || run.kind !== result.kind;
  const n = result.n;
  const chosenIndex = result.layer * result.headsPerLayer + result.head;
  // The chosen head's cells come with this part (unless the page has them: the
  // worker then sends null); the other heads show the last ones until the detail.
  const heads = result.metrics.map((metrics, i) => {
    const old = run?.heads[i];
    // (the last text's cells only while they have this text's size: a thumbnail redrawn before the detail comes)
    let state = old && old.state.length === n * n ? old.state : new Uint8Array(0);
    if (i === chosenIndex && result.cells) state = result.cells;
    return { layer: Math.floor(i / result.headsPerLayer), head: i % result.headsPerLayer, metrics: metrics ?? old?.metrics ?? NO_METRICS, state };
  });
  const glyphs = result.glyphs ?? run.glyphs;
  run = {
    id: result.id,
    kind: result.kind, text: result.text, cut: textInfo.cut, inputBytes: textInfo.totalBytes, bytes: utf8Bytes(result.text),
    start: textInfo.start, end: textInfo.end, context: info.config.context ?? 256,
    glyphs, n, dim: result.dim, causal: result.causal, layers: result.layers, headsPerLayer: result.headsPerLayer,
    heads, chosen: n > 0 ? { layer: result.layer, head: result.head, probs: result.probs, scores: null } : null, // scores: with the detail
    exactInfo: null, // with the detail
    timings: result.timings, info, value, window,
  };
  if (textChanged) {
    strip.setTokens(run.glyphs);
    grid.build(run.layers, run.headsPerLayer);
    scheduleParetoSoon();
  }
  const t0 = performance.now();
  drawChosen();
  refreshTooltip();
  run.drawMs = performance.now() - t0;
  // From the keystroke to the paint that shows this part (the task after the
  // next animation frame runs once that frame is painted).
  demo.inputToPaintMs = null;
  const id = run.id;
  // The worker computes the rest once this is painted (or at once in a hidden
  // tab, which paints nothing; a frame that does not come within 100 ms does not hold it up).
  let asked = false;
  const askDetail = () => {
    if (!asked) engine.tell("continue", { id });
    asked = true;
  };
  if (document.hidden) askDetail();
  else setTimeout(askDetail, 100);
  afterPaint(() => {
    if (since) demo.inputToPaintMs = run.id === id ? performance.now() - since : null; // null: a newer update was drawn first
    askDetail();
  });
  run.since = since;
}

// The second part of the update of run.id (worker.js "detail").
const applyDetail = timed("detail", (detail) => {
  detailPending = false;
  const nn = run.n * run.n;
  for (const [at, i] of detail.heads.entries()) run.heads[i].state = detail.cells.subarray(at * nn, (at + 1) * nn);
  for (const [i, metrics] of detail.metrics.entries()) run.heads[i].metrics = metrics;
  run.exactInfo = detail.exactInfo;
  if (run.chosen) run.chosen.scores = detail.scores;
  run.timings = detail.timings;
  if (detail.checks) {
    demo.checked = (demo.checked ?? 0) + detail.checks.length;
    for (const differ of detail.checks) {
      for (const line of differ) console.warn(`check: ${line}`);
      demo.checkMismatches = (demo.checkMismatches ?? 0) + differ.length;
    }
  }
  const t0 = performance.now();
  drawHeads({ grid: true });
  drawExactness();
  if (detail.scores) refreshTooltip(); // the score line
  const drawMs = run.drawMs + performance.now() - t0;
  publish(drawMs, run.since);
});

function onWorkerMessage(msg) {
  if (msg.type === "stale") {
    console.warn(msg.reason);
    demo.goldMismatches = (demo.goldMismatches ?? 0) + 1;
    requestUpdate(DIRTY_COMPUTE);
  } else if (msg.type === "detail") {
    if (run && msg.id === run.id) applyDetail(msg);
  } else if (msg.type === "error") {
    detailPending = false;
    showError(new Error(msg.message));
  }
}

// fn() in the task after the next animation frame: once that frame is painted.
function afterPaint(fn) {
  requestAnimationFrame(() => setTimeout(fn, 0));
}

function currentValue(info) {
  const m = info.manifest.methods.find((x) => x.method === state.method) ?? info.manifest.methods[0];
  return m.values[Math.min(state.valueIndex, m.values.length - 1)];
}

function currentMethodEntry(info) {
  return info.manifest.methods.find((x) => x.method === state.method);
}

// Each method keeps its own slider setting (an index into its grid): switching
// methods and back restores it; a slider's number means something else in
// another method (a margin of 0.5 is not a distance of 0.5).
const valueIndexOf = new Map(); // method -> valueIndex last shown

// The setting method entry m starts at: its last one, else its default.
function startIndex(m) {
  if (valueIndexOf.has(m.method)) return valueIndexOf.get(m.method);
  const i = m.values.findIndex((v) => v.value === DEFAULT_VALUES[m.method]);
  return i >= 0 ? i : Math.floor((m.values.length - 1) / 2);
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

// A missed-mass bound (a share of a row's weight, 0..1): three digits, "0" when none is missed.
function formatMissed(x) {
  if (!Number.isFinite(x)) return "–";
  return x === 0 ? "0" : x >= 0.001 ? x.toPrecision(3) : formatDiff(x);
}

function formatDiff(x) {
  if (x === 0) return "0";
  return x >= 0.01 ? x.toPrecision(3) : x.toExponential(1).replace("e-", "·10⁻").replace(/⁻(\d+)/, (_, d) => "⁻" + [...d].map((c) => "⁰¹²³⁴⁵⁶⁷⁸⁹"[c]).join(""));
}

function setBar(id, value) {
  $(id).style.transform = `scaleX(${Number.isFinite(value) ? Math.max(0, Math.min(1, value)) : 0})`;
}

function mean(heads, f) {
  let s = 0;
  for (const h of heads) s += f(h);
  return heads.length ? s / heads.length : NaN;
}

// The 16 thumbnails are redrawn a few per task after the chosen head's graphs,
// so that no task of the page's thread grows long (tests/browser/worker.test.mjs).
const GRID_HEADS_PER_TASK = 4;
let gridTimer = 0;
let gridPending = false;

function drawGridSoon() {
  clearTimeout(gridTimer);
  gridPending = true;
  demo.pending = true;
  const mode = state.gridMode;
  let from = 0;
  // Each step draws the latest run: a newer result that changes the thumbnails
  // restarts this; one that does not (another head) shows the same ones.
  const step = timed("grid", () => {
    grid.update(run.heads, run.n, mode, from, from + GRID_HEADS_PER_TASK);
    from += GRID_HEADS_PER_TASK;
    if (from < run.heads.length) {
      gridTimer = setTimeout(step, 0);
      return;
    }
    grid.mode = mode;
    gridPending = false;
    demo.pending = busy();
    if (!demo.pending && completeSince) {
      const since = completeSince;
      const id = run.id;
      completeSince = 0;
      afterPaint(() => {
        if (run.id === id) demo.inputToCompleteMs = performance.now() - since;
      });
    }
  });
  gridTimer = setTimeout(step, 0);
}

function chosenHead() {
  const c = run?.chosen;
  return c ? run.heads[c.layer * run.headsPerLayer + c.head] : null;
}

// Draws the run; grid: also redraw the heads grid (its thumbnails changed).
function draw({ grid: redrawGrid = false } = {}) {
  drawChosen();
  drawHeads({ grid: redrawGrid });
  drawExactness();
}

// The chosen head's graphs and numbers, and the text's notes.
function drawChosen() {
  const n = run.n;
  const chosen = chosenHead();
  // graphs
  const data = { n, glyphs: run.glyphs, state: chosen?.state ?? new Uint8Array(0), probs: run.chosen?.probs ?? null };
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
    ? `<span class="chip hit">${m.hits} hits</span> <span class="chip miss">${m.gold - m.hits} misses</span> <span class="chip extra">${m.predicted - m.hits} extra</span>` +
      // on the page, not in a hover title: a phone has no hover
      ` <span class="edge-totals">of ${m.gold} true edges; ${m.predicted} predicted of ${m.allowed} allowed pairs</span>`
    : "–";

  // text box notes
  $("byte-count").textContent = `${run.inputBytes} byte${run.inputBytes === 1 ? "" : "s"}`;
  textWindow.show({ start: run.start, end: run.end, totalBytes: run.inputBytes, cut: run.cut }, run.context);
}

// What every head gives: the grid (grid: its thumbnails changed; drawn in later
// tasks), the means over heads, the point on the Pareto plot.
function drawHeads({ grid: redrawGrid = false } = {}) {
  if (redrawGrid || grid.mode !== state.gridMode) drawGridSoon();
  setNumber("mean-recall", mean(run.heads, (h) => h.metrics.recall));
  setNumber("mean-sparsity", mean(run.heads, (h) => h.metrics.sparsity));
  chart.setCurrent(currentPoint());
  // the explanation's share of zero pairs, from this text
  $("zero-share").textContent = zeroShareText(run.n > 0 ? mean(run.heads, (h) => h.metrics.goldSparsity) : NaN);
}

// Graph attention on the chosen head: exact on the graph alone, and after bound and repair.
function drawExactness() {
  const m = chosenHead()?.metrics;
  const exactInfo = run.exactInfo;
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
    $("max-diff-scale").textContent = errorScaleText(exactInfo.maxAbsDiff, exactInfo.maxAbsOut);
    setNumber("covered-rows", exactInfo.coveredRows, `${exactInfo.coveredRows}/${exactInfo.rows}`);
    const x = exactInfo;
    // Fast mode's error, beside recall: what the bounds prove about the graph alone.
    setNumber("fast-exact-rows", x.fastExactRows, Number.isFinite(x.fastExactRows) ? `${x.fastExactRows}/${x.rows}` : "–");
    setNumber("max-missed", x.maxMissedMass, formatMissed(x.maxMissedMass));
    $("max-missed").closest(".fast-error").title =
      `Attention on the predicted graph alone (mode fast): ${x.fastExactRows} of ${x.rows} rows proven equal to full ` +
      `attention; the others miss at most ${formatMissed(x.maxMissedMass)} of a row's weight (mean bound ` +
      `${formatMissed(x.meanMissedMass)}), so no output number is off by more than ${formatMissed(x.outputErrorBound)}`;
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
    for (const id of ["max-diff", "covered-rows", "graph-rows", "repaired-rows", "repair-cost", "exact-diff", "fast-exact-rows", "max-missed"])
      setNumber(id, NaN);
    $("max-diff-scale").textContent = "";
    $("repair-summary").textContent = "";
  }
}

function currentPoint() {
  if (!run || run.n === 0) return null;
  // Right after a teacher switch the last run belongs to the other teacher: no current point yet.
  if (run.kind !== state.teacher) return null;
  const m = currentMethodEntry(run.info);
  const v = run.value;
  return {
    method: m?.method ?? state.method, parameter: m?.parameter, value: v.value, window: state.window,
    recall: mean(run.heads, (h) => h.metrics.recall), sparsity: mean(run.heads, (h) => h.metrics.sparsity),
    heads: run.heads.length, // "you are here" is this mean: the plot says over how many heads
  };
}

// since: the timeStamp of the first keystroke this update shows (0: none).
function publish(drawMs, since) {
  const chosen = chosenHead();
  const m = chosen?.metrics;
  const exactInfo = run.exactInfo;
  const value = run.value;
  const timings = { ...run.timings, draw: drawMs };
  const ms = timings.load + timings.forward + (timings.forwardRest ?? 0) + timings.predict + timings.attention + drawMs;
  Object.assign(demo, {
    ready: true,
    pending: busy(),
    updates: demo.updates + 1,
    error: null,
    text: run.text,
    inputBytes: run.inputBytes,
    tokens: run.n,
    cut: run.cut,
    textStart: run.start,
    textEnd: run.end,
    teacher: run.kind,
    layer: run.chosen?.layer ?? state.layer,
    head: run.chosen?.head ?? state.head,
    method: currentMethodEntry(run.info)?.method ?? state.method,
    parameter: currentMethodEntry(run.info)?.parameter ?? null,
    value: value.value,
    valueIndex: currentMethodEntry(run.info)?.values.indexOf(value) ?? state.valueIndex,
    paramFile: value.file,
    paramSource: value.source ?? value.file, // the file fetched: values of a predict-time setting share one
    paramSettings: value.settings ?? null, // and then apply their own settings
    window: run.window,
    recall: m?.recall ?? NaN,
    sparsity: m?.sparsity ?? NaN,
    goldSparsity: m?.goldSparsity ?? NaN,
    precision: m?.precision ?? NaN,
    meanRecall: mean(run.heads, (h) => h.metrics.recall),
    meanSparsity: mean(run.heads, (h) => h.metrics.sparsity),
    meanGoldSparsity: mean(run.heads, (h) => h.metrics.goldSparsity),
    exact: m ? m.recall === 1 : false,
    maxAbsDiff: exactInfo?.maxAbsDiff ?? NaN,
    maxAbsOut: exactInfo?.maxAbsOut ?? NaN,
    coveredRows: exactInfo?.coveredRows ?? 0,
    // fast mode's error on the chosen head (graph attention in mode "certify")
    fastExactRows: exactInfo?.fastExactRows ?? NaN,
    boundedRows: exactInfo?.boundedRows ?? 0,
    maxMissedMass: exactInfo?.maxMissedMass ?? NaN,
    meanMissedMass: exactInfo?.meanMissedMass ?? NaN,
    outputErrorBound: exactInfo?.outputErrorBound ?? NaN,
    certifyMs: exactInfo?.certifyMs ?? NaN,
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
  announcer.say(resultsMessage({
    layer: demo.layer, head: demo.head, m, tokens: run.n,
    means: { recall: demo.meanRecall, sparsity: demo.meanSparsity },
    fast: exactInfo && Number.isFinite(exactInfo.fastExactRows)
      ? { exactRows: exactInfo.fastExactRows, rows: exactInfo.rows, maxMissed: exactInfo.maxMissedMass } : null,
  }));
  const el = $("update-ms");
  el.textContent = demo.updates === 1 ? `${ms.toFixed(1)} ms (the first, warming up)` : `${ms.toFixed(1)} ms`;
  el.dataset.value = String(ms);
  // From the keystroke to the end of its whole update (both parts), and to the
  // paint of the whole page, its 16 thumbnails included (drawGridSoon).
  demo.inputToUpdateMs = since ? performance.now() - since : null;
  demo.inputToCompleteMs = null;
  completeSince = since;
  el.title =
    `last update (in the worker): teacher ${timings.forward.toFixed(1)} ms up to the chosen head's layer, ` +
    `${(timings.forwardRest ?? 0).toFixed(1)} ms for the rest, predictor on all heads ${timings.predict.toFixed(1)} ms, ` +
    `attention check ${timings.attention.toFixed(1)} ms; drawing here ${timings.draw.toFixed(1)} ms`;
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

// The cell shown and where (a pointer event, or any { clientX, clientY }), so
// that a new result (another head, another text) refreshes the tooltip.
let hovered = null;

function showTooltip(cell, event, view = hovered?.view) {
  for (const v of views) {
    v.setHover(cell);
    v.draw();
  }
  // The head drawn (run.chosen), which is the chosen one once its update is back.
  const h = chosenHead();
  const c = run?.chosen;
  if (!cell || !h || !h.state || cell.i >= run.n || cell.j >= run.n) return hideTooltip();
  hovered = { cell, view, at: { clientX: event.clientX, clientY: event.clientY, pointerType: event.pointerType } };
  const { i, j } = cell;
  const n = run.n;
  const s = h.state[i * n + j];
  const allowed = (s & ALLOWED) !== 0;
  const score = c.scores ? c.scores[i * n + j] : null; // null: the update's detail is still to come
  const p = c.probs[i * n + j];
  let kind;
  if (!allowed) kind = `<span class="tag masked">future key: the causal mask forbids it</span>`;
  else if (s & GOLD) kind = s & PRED ? `<span class="tag hit">hit</span> true edge, predicted` : `<span class="tag miss">miss</span> true edge, not predicted`;
  else kind = s & PRED ? `<span class="tag extra">extra</span> predicted, weight 0` : `<span class="tag none">no edge</span> weight 0, not predicted`;
  const tok = (t) => `<code>${escapeHtml(run.glyphs[t])}</code> <span class="muted">${byteHex(run.bytes[t])}</span>`;
  const tip = $("tooltip");
  tip.innerHTML =
    `<div><b>query ${i}</b> ${tok(i)} <span class="ctx">${escapeHtml(snippet(run.bytes, run.glyphs, i))}</span></div>` +
    `<div><b>key ${j}</b> ${tok(j)} <span class="ctx">${escapeHtml(snippet(run.bytes, run.glyphs, j))}</span></div>` +
    `<div>score ${!allowed ? "−∞ (masked)" : score === null ? "…" : Number.isFinite(score) ? score.toFixed(3) : "−∞ (masked)"} · probability ${p > 0 ? p.toPrecision(3) : "0"}</div>` +
    `<div>${kind}</div>`;
  tip.hidden = false;
  // The keyboard cursor's cell, said to a screen reader (the pointer's is seen):
  // its lines as sentences, not run together ("0.884hit").
  if (event.pointerType === "keyboard") announcer.sayNow(spokenLines(tip));
  strip.show(i, j, c.probs.subarray(i * n, i * n + n));
  placeTooltip(event);
}

// The tooltip below and right of a viewport point (above or left of it near the edges).
function placeTooltip(at) {
  const tip = $("tooltip");
  const pad = 14;
  const w = tip.offsetWidth;
  const hgt = tip.offsetHeight;
  let x = at.clientX + pad;
  let y = at.clientY + pad;
  if (x + w > window.innerWidth - 4) x = at.clientX - w - pad;
  if (y + hgt > window.innerHeight - 4) y = at.clientY - hgt - pad;
  tip.style.left = `${Math.max(4, x)}px`;
  tip.style.top = `${Math.max(4, y)}px`;
}

// The element's lines (its child elements) joined as sentences.
function spokenLines(el) {
  return [...el.children].map((line) => line.textContent.replace(/\s+/g, " ").trim()).filter(Boolean).join(". ") + ".";
}

// The page scrolled (the wheel, the keyboard, a link) under a shown cell. The
// pointer's: the cell now under the still pointer, or none. The keyboard
// cursor's or a tap's: the same cell, the tooltip moved along with it.
function followScroll() {
  if (!hovered || $("tooltip").hidden) return;
  const { at, view } = hovered;
  if (at.pointerType === "mouse") {
    const under = views.find((v) => v.canvas === document.elementFromPoint(at.clientX, at.clientY));
    const cell = under?.cellAt(at);
    if (cell) showTooltip(cell, at, under);
    else hideTooltip();
  } else if (view) {
    const moved = view.eventAt(hovered.cell);
    hovered.at = { ...at, clientX: moved.clientX, clientY: moved.clientY };
    placeTooltip(hovered.at);
  }
}

// After a new result: the tooltip and token strip show the new head's values.
function refreshTooltip() {
  if (hovered && !$("tooltip").hidden) showTooltip(hovered.cell, hovered.at);
}

function hideTooltip() {
  hovered = null;
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
// Pareto curves: recomputed by the Pareto worker on the text the model read,
// 300 ms after it stops changing; a newer request cancels an older one there.

let paretoTimer = 0;
let paretoId = 0; // the newest request
let paretoLegend = {}; // method -> recall of its frontier at the true graph's sparsity

function scheduleParetoSoon() {
  clearTimeout(paretoTimer);
  paretoId = -1; // results of older requests are ignored from now on
  paretoEngine?.tell("cancel"); // and the running one stops, not to slow the typing down
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
  if (!paretoEngine) {
    paretoEngine = new Engine({ isa: PARAMS.get("isa"), threads: threadsWanted() });
    paretoEngine.ready.then(showThreads, () => {});
  }
  const snapshot = run;
  const total = snapshot.info.manifest.methods.reduce((sum, m) => sum + m.values.length, 0);
  $("pareto-status").textContent = `computing ${total} settings…`;
  const t0 = performance.now();
  const request = paretoEngine.request("pareto", { teacher: snapshot.kind, text: snapshot.text });
  paretoId = paretoEngine.lastId;
  const id = paretoId;
  try {
    const result = await request;
    if (result.cancelled || id !== paretoId) return;
    paretoLegend = result.legend;
    const r0 = performance.now();
    timed("pareto", () => chart.render(result.points, result.goldSparsity, currentPoint()))();
    const renderMs = performance.now() - r0;
    const ms = performance.now() - t0;
    $("pareto-status").textContent = `${result.points.length} points · ${(ms / 1000).toFixed(1)} s`;
    Object.assign(demo, {
      paretoReady: true, paretoPoints: result.points.length, paretoMs: ms, paretoWorkerMs: result.ms,
      paretoThreads: result.threads, paretoRenderMs: renderMs,
    });
  } catch (err) {
    if (id === paretoId) showError(err);
  }
}

function pickPoint(p) {
  const entry = run?.kind === state.teacher ? run.info : null;
  if (!entry) return;
  state.method = p.method;
  const m = currentMethodEntry(entry);
  if (p.value != null && m) {
    const idx = m.values.findIndex((v) => v.value === p.value);
    state.valueIndex = idx >= 0 ? idx : startIndex(m);
  } else if (m) {
    state.valueIndex = startIndex(m); // a method alone (no parameter)
  }
  if (p.window != null) state.window = p.window;
  syncMethodControls(entry);
  requestUpdate(DIRTY_COMPUTE);
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
  valueIndexOf.set(m.method, state.valueIndex);
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
  requestUpdate(DIRTY_COMPUTE);
}

function bindControls() {
  $("text").addEventListener("input", (e) => {
    if (!inputAt) inputAt = e.timeStamp;
    requestUpdate(DIRTY_COMPUTE);
  });
  $("sample").addEventListener("click", () => {
    if (!samples.length) return;
    sampleIndex = (sampleIndex + 1) % samples.length;
    $("text").value = samples[sampleIndex];
    textWindow.start = 0; // a new passage is read from its start
    requestUpdate(DIRTY_COMPUTE);
  });
  $("teacher").addEventListener("change", (e) => {
    state.teacher = e.target.value;
    const entry = infoNow(state.teacher);
    if (entry) syncMethodControls(entry);
    requestUpdate(DIRTY_COMPUTE);
  });
  $("layer").addEventListener("change", (e) => selectHead(Number(e.target.value), state.head));
  $("head").addEventListener("change", (e) => selectHead(state.layer, Number(e.target.value)));
  $("method").addEventListener("change", (e) => {
    const entry = infoNow(state.teacher);
    state.method = e.target.value;
    const m = entry && currentMethodEntry(entry);
    if (m) {
      state.valueIndex = startIndex(m);
      syncMethodControls(entry);
    }
    requestUpdate(DIRTY_COMPUTE);
  });
  $("param-slider").addEventListener("input", (e) => {
    state.valueIndex = Number(e.target.value);
    const entry = infoNow(state.teacher);
    if (entry) syncMethodControls(entry);
    requestUpdate(DIRTY_COMPUTE);
  });
  $("union-window").addEventListener("change", (e) => {
    state.window = Number(e.target.value);
    const entry = infoNow(state.teacher);
    if (entry) syncMethodControls(entry);
    requestUpdate(DIRTY_COMPUTE);
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
  window.addEventListener("scroll", followScroll, { passive: true });
}

// ---------------------------------------------------------------------------
// Start

const handlers = {
  hover: (cell, event, view) => showTooltip(cell, event, view),
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
const announcer = new Announcer($("announce"));
const textWindow = new TextWindow(
  { textarea: $("text"), mirror: $("text-mirror"), slider: $("text-window"), row: $("text-window-row"), note: $("cut-note") },
  () => requestUpdate(DIRTY_COMPUTE),
);
// The legend's recall at the true graph's sparsity comes computed from the Pareto worker.
const chart = new ParetoChart($("pareto"), $("pareto-legend"), pickPoint, (points) => paretoLegend[points[0]?.method] ?? -1);

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

// Threads for the Pareto worker: as many as the machine has when the page is
// cross-origin isolated (web/serve.mjs sends the headers), else one; the
// package says why when it runs on one (eg.threadsNote, shown in #threads-note).
// ?threads=N asks for N. The update worker runs on one thread: on a machine of
// few cores, its threads would compete with the Pareto worker's and with the
// page's own, and its work per keystroke is small.
function threadsWanted() {
  const asked = Number(PARAMS.get("threads"));
  if (Number.isInteger(asked) && asked >= 1) return asked;
  return Math.max(1, Math.min(8, navigator.hardwareConcurrency || 1));
}

function showThreads(info) {
  Object.assign(demo, { threads: info.threads, threadsNote: info.threads > 1 ? "" : info.threadsNote });
  const el = $("threads-note");
  if (!el) return;
  el.textContent = info.threads > 1
    ? `Pareto curves on ${info.threads} threads`
    : `Pareto curves on one thread: ${info.threadsNote}`;
  el.classList.toggle("warn", info.threads <= 1);
  el.hidden = false;
}

async function main() {
  bindControls();
  try {
    res = new Resources(null, ".");
    // ?isa=reference: the portable kernels, bit-identical to the native CLI's --isa reference.
    engine = new Engine({
      isa: PARAMS.get("isa"),
      threads: 1,
      onMessage: onWorkerMessage,
    });
    const [heldout, info] = await Promise.all([res.text("heldout.txt"), res.info(state.teacher)]);
    infosNow.set(state.teacher, info);
    const context = info.config.context ?? 256;
    samples = passages(heldout, context, TEST_TEXT_OFFSET);
    if (samples.length === 0) samples = [cutUtf8(heldout, context).text];
    if (!$("text").value) $("text").value = samples[0];
    const m = info.manifest.methods.find((x) => x.method === DEFAULT_METHOD);
    if (m) state.valueIndex = startIndex(m);
    syncMethodControls(info);
    requestUpdate(DIRTY_COMPUTE);
    demo.isa = (await engine.ready).isa;
  } catch (err) {
    showError(err);
  }
}

main();

// Handy from the console and for tests: the state and the current run.
Object.defineProperty(demo, "debug", { enumerable: false, value: { state, get run() { return run; }, utf8Bytes } });
