#!/usr/bin/env node
// Threads' speedup on the demo page's Pareto recompute (docs/PERFORMANCE.md,
// "Threads: the Pareto recompute"), measured the way the page runs it: in
// Chromium, in a module Web Worker of a page that web/serve.mjs serves
// cross-origin isolated.
//
// The work: the causal teacher (WEB/teachers/causal) captures the first 256
// bytes of WEB/heldout.txt after offset 4096 (teacher.capture([text])); every
// parameter file of WEB/params/causal/index.json is loaded (a value with a
// `source` loads that file with its own `settings`, as web/resources.js does);
// one eg.evaluateMany(predictors, capture, { windows: [-1, 1, 3, 7] }) call.
// For comparison, the same reports from one eg.evaluate per (predictor,
// window), as a page without evaluateMany does.
//
// One worker per thread count, all loaded first; then --rounds rounds, the
// rounds outermost and the order of the workers rotating, so that load from
// other processes spreads across them. Each cell is the median of all its
// timed calls (one untimed call first), and the best of them. The reports must be identical across
// thread counts (the core's results do not depend on them): checked.
//
// Usage: node tools/bench_threads.mjs [--threads 1,2,auto] [--rounds 5] [--no-loop] [--out run.json]
// Environment: ENTGRAPH_WEB (default build/web), ENTGRAPH_WASM_PACKAGE (default
// build/wasm/package; it must hold entgraph_core_threads.js), CHROMIUM.
import { spawn } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "../tests/browser/free_port.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const webDir = resolve(root, process.env.ENTGRAPH_WEB || "build/web");
const packageDir = resolve(root, process.env.ENTGRAPH_WASM_PACKAGE || "build/wasm/package");
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";

function option(name, fallback) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}
const threadList = option("--threads", "1,2,auto").split(",").map((t) => (t === "auto" ? "auto" : Number(t)));
const rounds = Number(option("--rounds", "5"));
const loop = !process.argv.includes("--no-loop");
const outFile = option("--out", null);
for (const t of threadList)
  if (t !== "auto" && !(Number.isInteger(t) && t >= 1)) throw new Error(`--threads: expected whole numbers or auto (got ${t})`);
if (!(Number.isInteger(rounds) && rounds >= 1)) throw new Error(`--rounds: expected a whole number >= 1`);

for (const [path, what] of [
  [join(webDir, "teachers/causal/model.safetensors"), "the demo page (make web)"],
  [join(webDir, "params/causal/index.json"), "the demo page (make web)"],
  [join(packageDir, "entgraph_core_threads.js"), "the threaded package (make wasm)"],
])
  if (!existsSync(path)) throw new Error(`${path} is missing: build ${what}`);

const PAGE = `<!doctype html><meta charset="utf-8"><title>threads bench</title>
<script type="module">
  // start(threads) -> a worker id once its package is loaded; run(id, job) -> its answer.
  const workers = [];
  const ask = (w, msg) => new Promise((ok, fail) => {
    w.onmessage = (e) => (e.data.error ? fail(new Error(e.data.error)) : ok(e.data));
    w.onerror = (e) => fail(new Error(e.message || "worker error"));
    w.postMessage(msg);
  });
  window.start = async (threads) => {
    const w = new Worker("bench-worker.js", { type: "module" });
    const info = await ask(w, { type: "load", threads });
    workers.push(w);
    return { id: workers.length - 1, ...info };
  };
  window.run = (id, job) => ask(workers[id], { type: "run", job });
</script>`;

const WORKER = `import { loadEntgraph } from "./entgraph/entgraph.js";
let eg, capture, predictors;
const WINDOWS = [-1, 1, 3, 7];
async function get(path, as) {
  const r = await fetch(path);
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return as === "bytes" ? new Uint8Array(await r.arrayBuffer()) : r.text();
}
async function load(threads) {
  const t0 = performance.now();
  eg = await loadEntgraph({ threads });
  const loadMs = performance.now() - t0;
  const teacher = eg.Teacher.fromFiles(await get("teachers/causal/config.json"), await get("teachers/causal/model.safetensors", "bytes"));
  const heldout = await get("heldout.txt", "bytes");
  const text = new TextDecoder().decode(heldout.subarray(4096, 4096 + 256));
  capture = teacher.capture([text]);
  const manifest = JSON.parse(await get("params/causal/index.json"));
  const values = manifest.methods.flatMap((m) => m.values);
  const sources = new Map();
  predictors = [];
  for (const v of values) {
    const source = v.source ?? v.file;
    if (!sources.has(source)) sources.set(source, await get("params/causal/" + source));
    let json = sources.get(source);
    if (v.settings) { const j = JSON.parse(json); j.settings = v.settings; json = JSON.stringify(j); }
    predictors.push(eg.Predictor.load(json));
  }
  eg.evaluateMany(predictors, capture, { windows: WINDOWS }); // untimed: first touches
  return { threads: eg.threads, threadsNote: eg.threadsNote, isolated: globalThis.crossOriginIsolated === true,
           hardwareConcurrency: navigator.hardwareConcurrency, loadMs, predictors: predictors.length,
           heads: capture.layers * capture.heads, tokens: capture.lengths.reduce((a, b) => a + b, 0) };
}
function run(job) {
  const t0 = performance.now();
  let reports;
  if (job === "many") {
    reports = eg.evaluateMany(predictors, capture, { windows: WINDOWS });
  } else {
    reports = [];
    for (const p of predictors)
      for (const w of WINDOWS) {
        p.setUnionPatterns(w, 0);
        const r = eg.evaluate(p, capture);
        reports.push({ recall: r.recall, sparsity: r.sparsity, goldSparsity: r.gold_sparsity });
        p.setUnionPatterns(-1, 0);
      }
  }
  const ms = performance.now() - t0;
  return { ms, numbers: reports.map((r) => [r.recall, r.sparsity, r.goldSparsity]) };
}
self.onmessage = async (e) => {
  try {
    self.postMessage(e.data.type === "load" ? await load(e.data.threads) : run(e.data.job));
  } catch (err) {
    self.postMessage({ error: String(err && err.stack || err) });
  }
};`;


function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

const loadBefore = os.loadavg()[0].toFixed(1);
const site = mkdtempSync(join(os.tmpdir(), "entgraph-bench-threads-"));
let server = null;
let browser = null;
try {
  writeFileSync(join(site, "index.html"), PAGE);
  writeFileSync(join(site, "bench-worker.js"), WORKER);
  cpSync(packageDir, join(site, "entgraph"), { recursive: true });
  mkdirSync(join(site, "teachers"));
  mkdirSync(join(site, "params"));
  cpSync(join(webDir, "teachers/causal"), join(site, "teachers/causal"), { recursive: true });
  cpSync(join(webDir, "params/causal"), join(site, "params/causal"), { recursive: true });
  cpSync(join(webDir, "heldout.txt"), join(site, "heldout.txt"));

  const port = await freePort();
  server = spawn(process.execPath, [join(root, "web/serve.mjs"), site, String(port)], { stdio: ["ignore", "pipe", "inherit"] });
  const url = `http://127.0.0.1:${port}/`;
  for (const deadline = Date.now() + 10000; ; await new Promise((ok) => setTimeout(ok, 50))) {
    try {
      if ((await fetch(url, { method: "HEAD" })).ok) break;
    } catch {
      if (Date.now() > deadline) throw new Error("web/serve.mjs did not start");
    }
  }
  const { chromium } = await import(join(root, "node_modules/playwright-core/index.mjs"));
  browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
  const page = await browser.newPage();
  page.on("pageerror", (e) => console.error(`page error: ${e.message}`));
  await page.goto(url);
  await page.waitForFunction(() => typeof window.start === "function");

  const workers = [];
  for (const threads of threadList) {
    const info = await page.evaluate((t) => window.start(t), threads);
    if (threads !== 1 && info.threads === 1) throw new Error(`threads ${threads}: one thread only (${info.threadsNote})`);
    workers.push({ asked: threads, ...info, many: [], loop: [], numbers: null });
  }
  const jobs = loop ? ["many", "loop"] : ["many"];
  for (let r = 0; r < rounds; r++)
    for (let k = 0; k < workers.length; k++) {
      const w = workers[(k + r) % workers.length];
      for (const job of jobs) {
        const { ms, numbers } = await page.evaluate(([id, j]) => window.run(id, j), [w.id, job]);
        w[job].push(ms);
        const text = JSON.stringify(numbers);
        if (job === "many") w.numbers ??= text;
        if (text !== workers[0].numbers && workers[0].numbers !== null)
          throw new Error(`threads ${w.asked} (${job}): the reports differ from ${workers[0].asked} thread(s)'`);
      }
    }

  // Best and median: on a shared machine other processes only ever add time,
  // and they take cores from the threads first.
  const best = (xs) => Math.min(...xs);
  const info = workers[0];
  console.log(`Pareto recompute: ${info.predictors} predictors x 4 windows on ${info.heads} heads x ${info.tokens} tokens; ` +
              `Chromium ${browser.version()}, navigator.hardwareConcurrency ${info.hardwareConcurrency}, ` +
              `${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? "?"}); ${rounds} rounds; ` +
              `load average ${loadBefore} before, ${os.loadavg()[0].toFixed(1)} after\n`);
  console.log(`| threads | evaluateMany, best (ms) | speedup | median (ms) | speedup | ` +
              `one evaluate per (predictor, window), best (ms) | package load (ms) |`);
  console.log(`|---|---|---|---|---|---|---|`);
  for (const w of workers) {
    console.log(`| ${w.threads}${w.asked === "auto" ? " (auto)" : ""} | ${best(w.many).toFixed(0)} | ` +
                `${(best(info.many) / best(w.many)).toFixed(2)}x | ${median(w.many).toFixed(0)} | ` +
                `${(median(info.many) / median(w.many)).toFixed(2)}x | ${loop ? best(w.loop).toFixed(0) : "-"} | ` +
                `${w.loadMs.toFixed(0)} |`);
  }
  if (outFile)
    writeFileSync(outFile, JSON.stringify({ chromium: browser.version(), cpus: os.cpus().length, rounds,
                                            workers: workers.map(({ numbers, ...w }) => w) }, null, 1));
} finally {
  await browser?.close();
  server?.kill("SIGTERM");
  rmSync(site, { recursive: true, force: true });
}
