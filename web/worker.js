// The page's compute, off the main thread (a module Web Worker). The page runs
// two of these (web/engine.js): one answers "update" (the teacher's forward
// pass on the text, every head's true graph, the chosen predictor on every
// head, the metrics, graph attention on the chosen head), the other "pareto"
// (every fitted setting on the same text), so that a Pareto recompute never
// delays a keystroke's update.
//
// Protocol (all messages are plain objects; arrays travel as transferred
// buffers):
//   in  { type: "init", isa, threads }                  -> { type: "ready", isa, threads, threadsNote }
//   in  { type: "update", id, teacher, text, file, window, layer, head, check }
//                                                       -> { type: "result", id, ... } | { type: "error", id, message }
//   in  { type: "pareto", id, teacher, text }           -> { type: "pareto", id, points, goldSparsity, legend, ms, threads }
//                                                          | { type: "pareto", id, cancelled: true }
//   in  { type: "cancel" }: stop the recompute running (the text changed)
//   out { type: "stale", reason }: the true graphs were redone (goldGraph differed
//       from the weights' support); the page asks for its update again
// A newer "pareto" or a "cancel" stops a recompute between methods, so that on
// a machine of few cores it does not slow the keystrokes' updates down.

import { loadEntgraph } from "./entgraph/entgraph.js";
import { Resources } from "./resources.js";
import {
  allowedMask, allowedPairs, markGoldFromProbs, markGoldFromGraph, markPredicted, metricsFromCounts,
  coveredRows, goldMatches,
} from "./cells.js";
import { PARETO_WINDOWS, frontier } from "./pareto-math.js";

let eg = null;
let res = null;
let ready = null; // Promise of the init

// The last forward pass: { kind, text, out, n, dim, causal, layers, headsPerLayer, glyphs, heads }
let run = null;
// What the last update predicted: "kind/file/window", or null after a new forward.
let predKey = null;

self.onmessage = (e) => {
  const msg = e.data;
  if (msg.type === "init") {
    ready = init(msg);
    ready.then((info) => self.postMessage({ type: "ready", ...info }), (err) => self.postMessage({ type: "error", id: 0, message: errorText(err) }));
    return;
  }
  if (msg.type === "pareto") paretoWanted = msg.id;
  if (msg.type === "cancel") {
    paretoWanted = -1; // the recompute running stops at its next method
    return;
  }
  const job = msg.type === "update" ? update(msg) : msg.type === "pareto" ? pareto(msg) : Promise.reject(new Error(`unknown message ${msg.type}`));
  job.catch((err) => self.postMessage({ type: "error", id: msg.id, kind: msg.type, message: errorText(err) }));
};

function errorText(err) {
  return String(err?.message ?? err);
}

async function init({ isa, threads }) {
  eg = await loadEntgraph({ threads });
  if (isa) eg.setIsa(isa);
  res = new Resources(eg, ".");
  return { isa: eg.isa, threads: eg.threads ?? 1, threadsNote: eg.threadsNote ?? "this build of the package has no threads" };
}

// ---------------------------------------------------------------------------
// The update

function forward(entry, kind, text) {
  const out = entry.teacher.forward(text, { probs: true });
  const n = out.tokens;
  const allowed = allowedMask(n, out.causal);
  const heads = [];
  for (let l = 0; l < out.layers; l++) {
    for (let h = 0; h < out.heads; h++) {
      const probs = out.probs(l, h);
      // The true graph is the support of the weights: marked from probs here, which is
      // cheaper than out.goldGraph(l, h) for every head; verifyGold() checks both agree.
      const goldCells = allowed.slice();
      const goldCount = markGoldFromProbs(goldCells, probs, n, out.causal);
      heads.push({ layer: l, head: h, q: out.queries(l, h), k: out.keys(l, h), probs, goldCells, goldCount });
    }
  }
  return {
    kind, text, out, n, dim: out.headDim, causal: out.causal, layers: out.layers, headsPerLayer: out.heads,
    glyphs: out.tokenLabels, heads,
  };
}

function emptyRun(entry, kind, text) {
  const layers = entry.config.layers;
  const heads = entry.config.heads;
  return {
    kind, text, out: null, n: 0, dim: 0, causal: entry.config.causal, layers, headsPerLayer: heads, glyphs: [],
    heads: Array.from({ length: layers * heads }, (_, i) => ({
      layer: Math.floor(i / heads), head: i % heads, goldCells: new Uint8Array(0), goldCount: 0,
      metrics: { recall: NaN, sparsity: NaN, goldSparsity: NaN, precision: NaN, gold: 0, predicted: 0, hits: 0 },
    })),
  };
}

async function update(msg) {
  await ready;
  const t0 = performance.now();
  const { teacher: kind, text, file } = msg;
  const entry = await res.teacher(kind);
  const predictor = await res.predictor(kind, file); // fetched the first time its method is chosen
  const t1 = performance.now();
  const timings = { load: t1 - t0, forward: 0, predict: 0, attention: 0 };

  // 1. The teacher (only when the text or the teacher changed).
  const textChanged = !run || run.kind !== kind || run.text !== text;
  if (textChanged) {
    run?.out?.dispose();
    run = text.length > 0 ? forward(entry, kind, text) : emptyRun(entry, kind, text);
    predKey = null;
    scheduleGoldCheck(run);
  }
  const t2 = performance.now();
  timings.forward = t2 - t1;

  // 2. The predictor on every head, and the metrics.
  const key = `${kind}/${file}/${msg.window}`;
  let states = null;
  let checks = null;
  if (predKey !== key && run.n > 0) {
    const { n, causal } = run;
    const allowed = allowedPairs(n, causal);
    predictor.setUnionPatterns(msg.window, 0);
    try {
      states = run.heads.map((h) => {
        h.pred = predictor.predict(h.q, h.k, { queries: n, keys: n, dim: run.dim, layer: h.layer, head: h.head, causal });
        const cells = h.goldCells.slice();
        const { predicted, hits } = markPredicted(cells, h.pred, n);
        h.metrics = metricsFromCounts({ gold: h.goldCount, predicted, hits, allowed, queries: n });
        h.covered = coveredRows(cells, n);
        return cells;
      });
    } finally {
      predictor.setUnionPatterns(-1, 0);
    }
    if (msg.check) checks = run.heads.map(checkMetrics);
    predKey = key;
  } else if (predKey !== key || textChanged) {
    states = run.heads.map(() => new Uint8Array(0));
    predKey = key;
  }
  const t3 = performance.now();
  timings.predict = t3 - t2;

  // 3. The chosen head: weights, scores, and attention over the predicted graph.
  const layer = Math.min(msg.layer, run.layers - 1);
  const head = Math.min(msg.head, run.headsPerLayer - 1);
  const chosen = run.heads[layer * run.headsPerLayer + head];
  let exactInfo = null;
  let probs = null;
  let scores = null;
  if (run.n > 0) {
    if (!chosen.v) {
      chosen.v = run.out.values(layer, head);
      chosen.dense = run.out.attention(layer, head);
    }
    exactInfo = graphAttentionCheck(chosen);
    probs = chosen.probs.slice();
    scores = run.out.scores(layer, head);
  }
  timings.attention = performance.now() - t3;

  const transfer = [];
  if (states) for (const s of states) transfer.push(s.buffer);
  if (probs) transfer.push(probs.buffer, scores.buffer);
  self.postMessage({
    type: "result",
    id: msg.id,
    kind,
    text,
    textChanged,
    n: run.n,
    dim: run.dim,
    causal: run.causal,
    layers: run.layers,
    headsPerLayer: run.headsPerLayer,
    glyphs: textChanged ? run.glyphs : null,
    key,
    states, // null: the same as the last result's
    metrics: run.heads.map((h) => h.metrics),
    checks,
    layer,
    head,
    probs,
    scores,
    exactInfo,
    timings,
  }, transfer);
}

// ?check=1: every head's metrics also from eg.compareGraphs on out.goldGraph (the
// documented path); -> the keys that differ.
function checkMetrics(h) {
  const official = eg.compareGraphs(h.pred, run.out.goldGraph(h.layer, h.head), run.causal);
  const differ = [];
  for (const key of ["gold", "predicted", "hits", "allowed", "queries", "sparsity", "goldSparsity", "recall", "precision"]) {
    if (official[key] !== h.metrics[key]) differ.push(`${key}: ${h.metrics[key]} here, ${official[key]} from compareGraphs`);
  }
  return differ;
}

// The true graphs as the CLI computes them (gold_graph on Q and K) against the
// support of the weights marked by forward(): checked once per text, when the
// worker is idle. Should they differ, the gold cells are redone and the page
// told to ask again.
let goldCheckTimer = 0;
function scheduleGoldCheck(snapshot) {
  clearTimeout(goldCheckTimer);
  if (snapshot.n === 0) return;
  goldCheckTimer = setTimeout(() => {
    if (run !== snapshot) return;
    let differs = false;
    for (const h of snapshot.heads) {
      const gold = snapshot.out.goldGraph(h.layer, h.head);
      if (!goldMatches(h.goldCells, gold, snapshot.n)) {
        differs = true;
        h.goldCells = allowedMask(snapshot.n, snapshot.causal).slice();
        h.goldCount = markGoldFromGraph(h.goldCells, gold, snapshot.n);
      }
    }
    if (differs) {
      predKey = null;
      self.postMessage({ type: "stale", reason: "the support of the weights differs from goldGraph; redone with goldGraph" });
    }
  }, 50);
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
  let maxAbsOut = 0;
  for (let t = 0; t < dense.length; t++) {
    const d = Math.abs(fast.out[t] - dense[t]);
    if (d > maxAbsDiff) maxAbsDiff = d;
    const e = Math.abs(exact.out[t] - dense[t]);
    if (e > exactMaxAbsDiff) exactMaxAbsDiff = e;
    const a = Math.abs(dense[t]);
    if (a > maxAbsOut) maxAbsOut = a;
  }
  return {
    rows: n,
    maxAbsDiff,
    maxAbsOut, // the scale of the errors: the largest |output| of full attention
    coveredRows: h.covered,
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

// ---------------------------------------------------------------------------
// The Pareto curves: every (method, grid value, window) of the teacher's
// manifest on this text, recall and sparsity averaged over heads.

let paretoWanted = 0; // the id of the newest "pareto" request; -1 after a "cancel"

// A promise settled in a later task (a message to ourselves: no timer clamping).
const nextTask = (() => {
  const channel = new MessageChannel();
  const queue = [];
  channel.port1.onmessage = () => queue.shift()?.();
  return () => new Promise((resolve) => {
    queue.push(resolve);
    channel.port2.postMessage(0);
  });
})();

async function pareto(msg) {
  await ready;
  const { id, teacher: kind, text } = msg;
  const cancelled = () => paretoWanted !== id;
  const stop = () => self.postMessage({ type: "pareto", id, cancelled: true });
  const entry = await res.teacher(kind);
  if (cancelled()) return stop();
  if (text.length === 0) {
    self.postMessage({ type: "pareto", id, points: [], goldSparsity: null, legend: {} });
    return;
  }
  const t0 = performance.now();
  const out = entry.teacher.forward(text, { probs: false });
  let capture = null;
  try {
    capture = out.toCapture();
    const methods = entry.manifest.methods;
    // Per method, its grid's predictors (every file fetched at once).
    const predictors = await Promise.all(methods.map((m) => Promise.all(m.values.map((v) => res.predictor(kind, v.file)))));
    if (cancelled()) return stop();
    // One call per method: the gold graphs once per call, every (setting, head)
    // on the package's threads; one report per (setting, window), setting-major.
    const points = [];
    let goldSparsity = NaN;
    for (const [i, m] of methods.entries()) {
      for (const r of eg.evaluateMany(predictors[i], capture, { windows: PARETO_WINDOWS })) {
        const v = m.values[r.predictor];
        goldSparsity = r.goldSparsity;
        points.push({ method: m.method, parameter: m.parameter, value: v.value, file: v.file, window: r.window, recall: r.recall, sparsity: r.sparsity });
      }
      await nextTask(); // lets a "cancel" in
      if (cancelled()) return stop();
    }
    const legend = {};
    for (const m of methods) {
      const own = points.filter((p) => p.method === m.method);
      legend[m.method] = eg.recallAtSparsity(frontier(own).map((i) => own[i]), goldSparsity);
    }
    self.postMessage({ type: "pareto", id, points, goldSparsity, legend, ms: performance.now() - t0, threads: eg.threads ?? 1 });
  } finally {
    capture?.dispose();
    out.dispose();
  }
}
