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
//                                                       -> { type: "result", id, ... } (the chosen head)
//   in  { type: "continue", id } (the page painted it)  -> { type: "detail", id, ... } (the other heads, graph
//                                                          attention), unless a newer update came first
//                                                          | { type: "error", id, message }
//   in  { type: "pareto", id, teacher, text }           -> { type: "pareto", id, points, goldSparsity, legend, ms, threads }
//                                                          | { type: "pareto", id, cancelled: true }
//   in  { type: "cancel" }: stop the recompute running (the text changed)
//   out { type: "stale", reason }: the true graphs were redone (goldGraph differed
//       from the weights' support); the page asks for its update again
// A newer "pareto" or a "cancel" stops a recompute between methods, so that on
// a machine of few cores it does not slow the keystrokes' updates down.

import { loadEntgraph } from "./entgraph/entgraph.js";
import { Resources } from "./resources.js";
import { PARETO_WINDOWS, frontier } from "./pareto-math.js";
import { NO_METRICS } from "./cells.js";

let eg = null;
let res = null;
let ready = null; // Promise of the init

// The last forward pass: { kind, text, entry, out, n, dim, causal, layers, headsPerLayer, glyphs, gold, heads }
// (out may hold the first layers only until the update's second part),
// heads[i] = { layer, head, metrics, covered, fresh, chosen: { q, k, v, dense, pred } }; gold: where the
// true graph comes from ("weights": their support; "graph": goldGraph, after the idle check found a difference).
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
  if (msg.type === "continue" || msg.type === "update") {
    if (resume && (msg.type === "update" || resume.id === msg.id)) {
      resume.go();
      resume = null;
    }
    if (msg.type === "continue") return;
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


// A run of the teacher on the text, its forward pass up to layer `upTo` (the
// chosen head's: the rest waits for the update's second part, extendForward).
function newRun(entry, kind, text, upTo) {
  const { layers, heads: headsPerLayer, causal } = entry.config;
  const out = text.length > 0 ? forwardLayers(entry, text, upTo + 1) : null;
  return {
    kind, text, entry, out, n: out?.tokens ?? 0, dim: out?.headDim ?? 0, causal, layers, headsPerLayer,
    glyphs: out?.tokenLabels ?? [], gold: "weights",
    heads: Array.from({ length: layers * headsPerLayer }, (_, i) => ({
      layer: Math.floor(i / headsPerLayer), head: i % headsPerLayer, metrics: NO_METRICS, covered: 0, chosen: null,
      fresh: out === null, // whether metrics and covered are this prediction's (and the page has its cells)
    })),
  };
}

// The heads only (the page shows no logits, so the last layer's MLP and the
// output head are skipped) of the first `layers` layers: bit-identical to
// those of the whole forward pass.
function forwardLayers(entry, text, layers) {
  return entry.teacher.forward(text, { probs: true, logits: false, layers: Math.min(layers, entry.config.layers) });
}

// Makes the run's forward pass reach layer `upTo`, or every layer; -> ms spent.
function extendForward(upTo = Infinity) {
  if (!run.out || run.out.layers > Math.min(upTo, run.layers - 1)) return 0;
  const t0 = performance.now();
  run.out.dispose();
  run.out = forwardLayers(run.entry, run.text, run.layers); // the whole pass: a second extension would cost more
  if (run.out.layers === run.layers) scheduleGoldCheck(run);
  return performance.now() - t0;
}

// fn() with the predictor's union window set to `window`, then none again.
function withWindow(predictor, window, fn) {
  predictor.setUnionPatterns(window, 0);
  try {
    return fn();
  } finally {
    predictor.setUnionPatterns(-1, 0);
  }
}

let updateWanted = 0; // the id of the newest "update": an older one skips its second part
let resume = null; // { id, go }: the update waiting for the page's "continue"

// Resolves when the page says "continue" for update `id`, or when a newer
// update arrives (which then goes first).
function continued(id) {
  resume?.go();
  return new Promise((go) => (resume = { id, go }));
}

// Two parts, two messages. "result": the chosen head only (its cells, metrics
// and weights), so that the page can paint what the reader looks at as soon
// as the teacher has run up to that head's layer. Then, when the page says
// "continue" (a newer "update" that arrives first stops this one), "detail":
// the rest of the forward pass, every other head's cells and metrics, graph
// attention and the scores of the chosen head.
async function update(msg) {
  updateWanted = msg.id;
  await ready;
  const t0 = performance.now();
  const { teacher: kind, text, file } = msg;
  const entry = await res.teacher(kind);
  const predictor = await res.predictor(kind, file); // fetched the first time its method is chosen
  const t1 = performance.now();
  const timings = { load: t1 - t0, forward: 0, predict: 0, attention: 0 };

  // 1. The teacher (only when the text or the teacher changed), up to the
  // chosen head's layer.
  const layer = Math.min(msg.layer, entry.config.layers - 1);
  const head = Math.min(msg.head, entry.config.heads - 1);
  const textChanged = !run || run.kind !== kind || run.text !== text;
  if (textChanged) {
    run?.out?.dispose();
    run = newRun(entry, kind, text, layer);
    predKey = null;
    if (run.out?.layers === run.layers) scheduleGoldCheck(run);
  } else {
    extendForward(layer); // a head in a layer not run yet
  }
  const t2 = performance.now();
  timings.forward = t2 - t1;

  // 2. The chosen head's cells (true and predicted graph) and metrics: one
  // call into the package, which copies nothing out but the cells.
  const key = `${kind}/${file}/${msg.window}`;
  if (predKey !== key) {
    for (const h of run.heads) Object.assign(h, { metrics: NO_METRICS, covered: 0, chosen: null, fresh: run.n === 0 });
    predKey = key;
  }
  const index = layer * run.headsPerLayer + head;
  const chosen = run.heads[index];
  let cells = null; // the chosen head's, when the page does not have them yet
  let probs = null;
  if (run.n > 0) {
    if (!chosen.fresh) cells = markCells(predictor, msg.window, [index]);
    probs = run.out.probs(layer, head);
  }
  timings.predict = performance.now() - t2;

  const reply = { id: msg.id, kind, text, n: run.n, layer, head };
  send({
    type: "result",
    ...reply,
    textChanged,
    dim: run.dim,
    causal: run.causal,
    layers: run.layers,
    headsPerLayer: run.headsPerLayer,
    glyphs: textChanged ? run.glyphs : null,
    cells, // the chosen head's n x n cells; null: the page has them
    metrics: run.heads.map((h) => (h.fresh ? h.metrics : null)), // null: not computed yet for this text and prediction
    probs,
    timings,
  }, [cells, probs]);

  // 3. The rest, once the page has painted the first part (its "continue"),
  // so that this work does not compete with that paint for a small machine's
  // cores; not at all if a newer update came first.
  await continued(msg.id);
  if (updateWanted !== msg.id || run.kind !== kind || run.text !== text) return;
  timings.forwardRest = extendForward();
  const t3 = performance.now();
  const rest = run.heads.flatMap((h, i) => (h.fresh ? [] : [i]));
  const restCells = rest.length > 0 ? markCells(predictor, msg.window, rest) : null;
  const checks = msg.check && run.n > 0 ? withWindow(predictor, msg.window, () => run.heads.map((h) => checkMetrics(h, predictor))) : null;
  const t4 = performance.now();
  let exactInfo = null;
  let scores = null; // for the tooltip: scale q.k of every pair of the chosen head
  if (run.n > 0) {
    if (!chosen.chosen) chosen.chosen = chosenArrays(chosen, predictor, msg.window);
    exactInfo = graphAttentionCheck(chosen);
    scores = run.out.scores(layer, head);
  }
  const t5 = performance.now();
  send({
    type: "detail",
    ...reply,
    heads: rest, // the heads whose cells follow, in this order
    cells: restCells,
    metrics: run.heads.map((h) => h.metrics),
    checks,
    exactInfo,
    scores,
    timings: { ...timings, predict: timings.predict + (t4 - t3), attention: t5 - t4 },
  }, [restCells, scores]);
}

// Posts a message, its arrays (null: none) transferred rather than copied.
function send(message, arrays) {
  self.postMessage(message, arrays.filter((a) => a).map((a) => a.buffer));
}

// The cells of some heads (flat indices), their metrics and covered rows kept
// in the run: -> their cells, head after head.
function markCells(predictor, window, heads) {
  const got = withWindow(predictor, window, () => run.out.graphCells({ predictor, heads, gold: run.gold }));
  for (const [at, i] of heads.entries()) {
    Object.assign(run.heads[i], { metrics: got.heads[at].metrics, covered: got.heads[at].coveredRows, fresh: true });
  }
  return got.cells;
}

// What graph attention on the chosen head needs, copied out of the heap once
// per (text, prediction): its Q, K, V, the dense output and the predicted graph.
function chosenArrays(h, predictor, window) {
  const { layer, head } = h;
  const q = run.out.queries(layer, head);
  const k = run.out.keys(layer, head);
  const pred = withWindow(predictor, window, () =>
    predictor.predict(q, k, { queries: run.n, keys: run.n, dim: run.dim, layer, head, causal: run.causal }));
  return { q, k, v: run.out.values(layer, head), dense: run.out.attention(layer, head), pred };
}

// ?check=1: every head's metrics also from eg.compareGraphs on out.goldGraph and
// Predictor.predict on the copied Q and K (the documented path); -> the keys that differ.
function checkMetrics(h, predictor) {
  const { layer, head } = h;
  const pred = predictor.predict(run.out.queries(layer, head), run.out.keys(layer, head), {
    queries: run.n, keys: run.n, dim: run.dim, layer, head, causal: run.causal,
  });
  const official = eg.compareGraphs(pred, run.out.goldGraph(layer, head), run.causal);
  const differ = [];
  for (const key of ["gold", "predicted", "hits", "allowed", "queries", "sparsity", "goldSparsity", "recall", "precision"]) {
    if (official[key] !== h.metrics[key]) differ.push(`${key}: ${h.metrics[key]} here, ${official[key]} from compareGraphs`);
  }
  return differ;
}

// The true graphs as the CLI computes them (goldGraph, from Q and K) against
// the support of the weights that graphCells marks: checked once per text,
// when the worker is idle. Should they differ, the run takes goldGraph's and
// the page is told to ask again.
let goldCheckTimer = 0;
function scheduleGoldCheck(snapshot) {
  clearTimeout(goldCheckTimer);
  if (snapshot.n === 0) return;
  goldCheckTimer = setTimeout(() => {
    if (run !== snapshot || snapshot.gold === "graph") return;
    const fromWeights = snapshot.out.graphCells({ gold: "weights" }).cells;
    const fromGraph = snapshot.out.graphCells({ gold: "graph" }).cells;
    if (fromWeights.every((c, i) => c === fromGraph[i])) return;
    snapshot.gold = "graph";
    predKey = null;
    self.postMessage({ type: "stale", reason: "the support of the weights differs from goldGraph; redone with goldGraph" });
  }, 50);
}

// Attention over the predicted graph vs dense attention, for the chosen head, three
// times: mode "fast" (the predicted edges only: what a sparse kernel would output, shown
// as the largest output error), mode "certify" (the same output and fast mode's error
// report: rows proven exact, and a bound on the weight each other row misses) and mode
// "exact" (bound and repair: rows proven exact by the graph alone, rows repaired, and
// the extra pairs repair scored).
function graphAttentionCheck(head) {
  const h = head.chosen;
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
  // Certify needs a threshold: a softmax teacher (alpha 1) has none, and no bound.
  const cert = alpha > 1 ? eg.graphAttention({ ...inputs, mode: "certify" }) : null;
  const t3 = performance.now();
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
    coveredRows: head.covered,
    // fast mode's error (from mode certify): rows proven exact, the missed-mass bounds over the others
    fastExactRows: cert?.graphRows ?? NaN,
    boundedRows: cert?.boundedRows ?? 0,
    maxMissedMass: cert?.maxMissedMass ?? NaN,
    meanMissedMass: cert?.meanMissedMass ?? NaN,
    outputErrorBound: cert?.outputErrorBound ?? NaN,
    certifyMs: t3 - t2,
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
  const out = entry.teacher.forward(text, { logits: false }); // the capture needs Q, K and V only
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
