#!/usr/bin/env node
// WebAssembly vs native, in one run on one machine (docs/PERFORMANCE.md,
// "WebAssembly vs native"; `make bench-wasm`).
//
// 1. Transforms: native/bench/transform_timing.cpp, built natively
//    (build/release/native/bench/entgraph_transform_timing) and with em++
//    (build/wasm/native/bench/wasm/entgraph_transform_timing.js, run by this
//    node), on the same N(0, 1) inputs. Case by case, the builds run back to
//    back (native at its best ISA, wasm SIMD128, native SSE2 for the same
//    4-wide shape without FMA), the order rotating from case to case, so that
//    a burst of load from other processes hits the builds alike.
//    Target: wasm <= 1.5 x native SSE2 (the same vector width) at n = 512;
//    the native best-ISA column is shown too.
//    The wasm program runs under node --no-liftoff (the module compiled by
//    the top tier up front; --liftoff leaves node's tiering on): on a busy
//    machine the warm-up can end before V8's background compile has tiered a
//    kernel up, and the first timed loops then run baseline code.
//    All of it runs --rounds times (the rounds outermost, so that a burst of
//    load spreads across cases); each cell is the best round's median: on a
//    shared machine other processes only ever add time.
// 2. The JavaScript API path: eg.transform / eg.transformBackward of the
//    package (build/wasm/package/entgraph.js) on 64 x 512 scores, copies
//    across the boundary included, against the wasm program's ns per row.
// 3. The teacher forward pass on the first 256 bytes of data/heldout.txt:
//    native (entgraph_bench BM_teacher_forward, one thread, and the timing
//    program), the wasm program, and eg.Teacher.fromFiles(...).forward(text)
//    in node (median of >= 20 runs).
//
// Usage: node tools/bench_wasm.mjs [--rounds 3] [--min-ms 50] [--reps 5] [--no-sse2] [--out run.json]
//                                  [--wasm FILE.js] [--native FILE] [--bench FILE] [--pkg FILE.js]
//                                  [--clock wall|cpu] [--liftoff] [--transforms-only]
// Prints markdown; --out also writes every measurement as JSON. --wasm times
// another em++ build of transform_timing.cpp (e.g. other flags or emscripten)
// in place of the wasm preset's, --native another native build of it (e.g.
// build/release-perf/native/bench/entgraph_transform_timing), --bench and
// --pkg other builds of entgraph_bench and of the package. --clock cpu times
// with the CPU time the programs use instead of the wall clock (for a
// machine shared with other work). --transforms-only skips parts 2 and 3.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const paths = {
  native: join(root, "build/release/native/bench/entgraph_transform_timing"),
  wasm: join(root, "build/wasm/native/bench/wasm/entgraph_transform_timing.js"),
  bench: join(root, "build/release/native/bench/entgraph_bench"),
  pkg: join(root, "build/wasm/package/entgraph.js"),
};
const TARGET = 1.5; // wasm / native SSE2
const TARGET_N = 512;
const BATCH = 1 << 17; // elements per call, as in transform_timing.cpp
const TEACHER_BYTES = 256;

// ---- options ----------------------------------------------------------------
const opts = { rounds: 3, minMs: 50, reps: 5, sse2: true, out: null, clock: "wall", liftoff: false, transformsOnly: false };
for (let i = 2; i < process.argv.length; ++i) {
  const a = process.argv[i];
  if (a === "--rounds") opts.rounds = Math.max(1, Number(process.argv[++i]));
  else if (a === "--min-ms") opts.minMs = Number(process.argv[++i]);
  else if (a === "--reps") opts.reps = Number(process.argv[++i]);
  else if (a === "--no-sse2") opts.sse2 = false;
  else if (a === "--out") opts.out = process.argv[++i];
  else if (a === "--wasm") paths.wasm = resolve(process.argv[++i]);
  else if (a === "--native") paths.native = resolve(process.argv[++i]);
  else if (a === "--bench") paths.bench = resolve(process.argv[++i]);
  else if (a === "--pkg") paths.pkg = resolve(process.argv[++i]);
  else if (a === "--clock") opts.clock = process.argv[++i];
  else if (a === "--liftoff") opts.liftoff = true;
  else if (a === "--transforms-only") opts.transformsOnly = true;
  else {
    console.error(
      `bench_wasm: unknown argument ${a} (expected --rounds R, --min-ms MS, --reps N, --no-sse2, --out FILE, --wasm FILE.js, ` +
        "--native FILE, --bench FILE, --pkg FILE.js, --clock wall|cpu, --liftoff, --transforms-only)",
    );
    process.exit(2);
  }
}
if (opts.clock !== "wall" && opts.clock !== "cpu") {
  console.error(`bench_wasm: --clock must be wall or cpu (got ${opts.clock})`);
  process.exit(2);
}
if (opts.transformsOnly) {
  delete paths.bench;
  delete paths.pkg;
}
const missing = Object.entries(paths).filter(([, p]) => !existsSync(p));
if (missing.length) {
  console.error(
    `bench_wasm: missing ${missing.map(([, p]) => p).join(", ")}\n` +
      "Build both with `make build wasm` (release preset with ENTGRAPH_BUILD_BENCHMARKS=ON, and the wasm preset).",
  );
  process.exit(1);
}

// ---- running the timing program ----------------------------------------------
const timingArgs = ["--min-ms", String(opts.minMs), "--reps", String(opts.reps), "--clock", opts.clock];
const nodeArgs = opts.liftoff ? [] : ["--no-liftoff"];

function runTiming(build, extra) {
  const [cmd, args] =
    build === "wasm"
      ? [process.execPath, [...nodeArgs, paths.wasm, ...timingArgs, ...extra]]
      : [paths.native, [...timingArgs, ...extra]];
  const env = { ...process.env, ENTGRAPH_NUM_THREADS: "1" };
  delete env.ENTGRAPH_CPU_ISA;
  const r = spawnSync(cmd, args, { cwd: root, env, encoding: "utf8", maxBuffer: 1 << 24 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed (${r.status}): ${r.stderr}`);
  const lines = r.stdout.trim().split("\n").map((l) => JSON.parse(l));
  return { header: lines[0], results: lines.slice(1) };
}

// The cases: the timing program's own list (the kTiming cases of
// tests/support/cases.hpp), from its header line.
const listed = runTiming("native", ["--list"]).header;
const TRANSFORMS = listed.transforms.split(",");
const SIZES = listed.sizes.split(",").map(Number);

const builds = [
  { id: "native", extra: [] },
  { id: "wasm", extra: [] },
  ...(opts.sse2 ? [{ id: "sse2", extra: ["--isa", "sse2"] }] : []),
];
const buildOf = (id) => (id === "wasm" ? "wasm" : "native");

const run = {
  date: new Date().toISOString(),
  git: gitRev(),
  cpu: cpuModel(),
  cpus: os.cpus().length,
  node: process.version,
  loadStart: os.loadavg().map((x) => x.toFixed(2)).join(", "),
  options: opts,
  headers: {},
  transforms: [],
  js: [],
  teacher: [],
};

function gitRev() {
  try {
    const rev = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: root, encoding: "utf8" }).trim();
    const dirty = execFileSync("git", ["status", "--porcelain", "--untracked-files=no"], { cwd: root, encoding: "utf8" }).trim();
    return dirty ? `${rev} (+ uncommitted changes)` : rev;
  } catch {
    return "unknown";
  }
}

function cpuModel() {
  try {
    const m = readFileSync("/proc/cpuinfo", "utf8").match(/^model name\s*:\s*(.*)$/m);
    if (m) return m[1];
  } catch {}
  return os.cpus()[0]?.model ?? "unknown";
}

// The best of the rounds' results (lowest ns_per_row); every round must
// have computed the same output.
function best(results, what) {
  for (const r of results)
    if (r.hash !== results[0].hash) throw new Error(`${what}: the output changed between rounds (${r.hash} vs ${results[0].hash})`);
  const b = results.reduce((x, y) => (y.ns_per_row < x.ns_per_row ? y : x));
  return { ...b, rounds: results.map((r) => r.ns_per_row) };
}

const byKey = {};
let rotation = 0;
for (let round = 1; round <= opts.rounds; ++round) {
  process.stderr.write(`bench_wasm: transforms, round ${round}/${opts.rounds} `);
  for (const n of SIZES) {
    for (const t of TRANSFORMS) {
      for (const dir of ["fwd", "bwd"]) {
        const key = `${t}/${dir}/n:${n}`;
        const row = (byKey[key] ??= { key, transform: t, dir, n, all: {} });
        const order = builds.map((_, i) => builds[(i + rotation) % builds.length]);
        rotation += 1;
        for (const b of order) {
          const { header, results } = runTiming(buildOf(b.id), ["--case", key, ...b.extra]);
          run.headers[b.id] ??= header;
          if (results.length !== 1) throw new Error(`${b.id} ${key}: expected one result, got ${results.length}`);
          (row.all[b.id] ??= []).push(results[0]);
        }
        process.stderr.write(".");
      }
    }
  }
  process.stderr.write("\n");
}
for (const row of Object.values(byKey)) {
  for (const b of builds) row[b.id] = best(row.all[b.id], `${b.id} ${row.key}`);
  delete row.all;
  run.transforms.push(row);
}

// ---- the same inputs in JavaScript (transform_timing.cpp's generator) ----------
const MASK64 = (1n << 64n) - 1n;
function splitmix(seed) {
  let state = BigInt(seed);
  return () => {
    state = (state + 0x9e3779b97f4a7c15n) & MASK64;
    let z = state;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
    return z ^ (z >> 31n);
  };
}
const f64 = new DataView(new ArrayBuffer(8));
function portableLog(x) {
  // frexp: x = m 2^e, m in [0.5, 1) (x is a normal positive double here)
  f64.setFloat64(0, x);
  const hi = f64.getUint32(0);
  let e = ((hi >>> 20) & 0x7ff) - 1022;
  f64.setUint32(0, (hi & 0x800fffff) | (1022 << 20));
  let m = f64.getFloat64(0);
  if (m < 0.7071067811865476) {
    m *= 2.0;
    e -= 1;
  }
  const s = (m - 1.0) / (m + 1.0);
  const s2 = s * s;
  let term = s;
  let sum = 0.0;
  for (let k = 1; k <= 41; k += 2) {
    sum += term / k;
    term *= s2;
  }
  return 2.0 * sum + e * 0.6931471805599453;
}
function gaussian(count, seed) {
  const next = splitmix(seed);
  const uniform = () => Number(next() >> 11n) * 2 ** -53;
  const out = new Float32Array(count);
  let i = 0;
  while (i < count) {
    const u = 2.0 * uniform() - 1.0;
    const v = 2.0 * uniform() - 1.0;
    const s = u * u + v * v;
    if (s >= 1.0 || s === 0.0) continue;
    const f = Math.sqrt((-2.0 * portableLog(s)) / s);
    out[i++] = u * f;
    if (i < count) out[i++] = v * f;
  }
  return out;
}
function fnv(floats) {
  const bytes = new Uint8Array(floats.buffer, floats.byteOffset, floats.byteLength);
  let h = 0xcbf29ce484222325n;
  for (const b of bytes) h = ((h ^ BigInt(b)) * 0x100000001b3n) & MASK64;
  return h.toString(16).padStart(16, "0");
}
function weightedSum(out, weights) {
  let s = 0;
  for (let i = 0; i < out.length; ++i) s += out[i] * weights[i % weights.length];
  return s;
}
// transform_timing.cpp's loop: double the calls until one loop lasts minMs,
// then reps loops; the median time per call, in ns.
function timeCalls(call) {
  const target = opts.minMs * 1e6;
  let iters = 1;
  for (;;) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < iters; ++i) call();
    const ns = Number(process.hrtime.bigint() - t0);
    if (ns >= target) break;
    iters = Math.ceil(iters * (ns > 0 ? Math.min(10, Math.max(2, (1.2 * target) / ns)) : 10));
  }
  const per = [];
  for (let r = 0; r < opts.reps; ++r) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < iters; ++i) call();
    per.push(Number(process.hrtime.bigint() - t0) / iters);
  }
  return { median: median(per), min: Math.min(...per), max: Math.max(...per), iterations: iters };
}
function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length;
  return m % 2 ? s[(m - 1) / 2] : 0.5 * (s[m / 2 - 1] + s[m / 2]);
}

if (!opts.transformsOnly) {
  // ---- the JavaScript API path ---------------------------------------------------
  process.stderr.write("bench_wasm: JavaScript API\n");
  const { loadEntgraph } = await import(pathToFileURL(paths.pkg).href);
  const eg = await loadEntgraph();
  {
    const N = 512;
    const ROWS = 64;
    const scores = gaussian(BATCH, 42);
    const grad = gaussian(BATCH, 43);
    if (fnv(scores) !== run.headers.wasm.input_hash) throw new Error("bench_wasm: the JavaScript generator does not reproduce the C++ inputs");
    const z = scores.slice(0, ROWS * N);
    const dp = grad.slice(0, ROWS * N);
    // The full batch once through the package: its output must be the wasm program's.
    const pAll = eg.transform("entmax15", scores, { cols: N });
    const dzAll = eg.transformBackward("entmax15", pAll, grad, { cols: N });
    const p = pAll.slice(0, ROWS * N);
    const bestOf = (f) => {
      const all = Array.from({ length: opts.rounds }, f);
      return { ...all.reduce((x, y) => (y.median < x.median ? y : x)), rounds: all.map((r) => r.median) };
    };
    const fwd = bestOf(() => timeCalls(() => eg.transform("entmax15", z, { cols: N })));
    const bwd = bestOf(() => timeCalls(() => eg.transformBackward("entmax15", p, dp, { cols: N })));
    run.js.push({
      key: "entmax15/fwd/n:512", call: 'eg.transform("entmax15", scores, { cols: 512 })', rows: ROWS, timing: fwd,
      ns_per_row: fwd.median / ROWS, hash: fnv(pAll), checksum: weightedSum(pAll, scores), program: byKey["entmax15/fwd/n:512"],
    });
    run.js.push({
      key: "entmax15/bwd/n:512", call: 'eg.transformBackward("entmax15", probs, gradProbs, { cols: 512 })', rows: ROWS, timing: bwd,
      ns_per_row: bwd.median / ROWS, hash: fnv(dzAll), checksum: weightedSum(dzAll, grad), program: byKey["entmax15/bwd/n:512"],
    });
  }

  // ---- the teacher ---------------------------------------------------------------
  process.stderr.write("bench_wasm: teacher\n");
  const heldout = join(root, "data/heldout.txt");
  const text = readFileSync(heldout).subarray(0, TEACHER_BYTES).toString("latin1");
  if (!/^[\x00-\x7f]*$/.test(text)) throw new Error("bench_wasm: the first 256 bytes of data/heldout.txt are not ASCII");
  const weights4096 = gaussian(4096, 42);
  const benchJson = JSON.parse(
    execFileSync(
      paths.bench,
      [
        "--benchmark_filter=BM_teacher_forward/.*/bytes:256/threads:1",
        "--benchmark_min_time=0.3",
        `--benchmark_repetitions=${opts.reps}`,
        "--benchmark_format=json",
      ],
      { cwd: root, encoding: "utf8", env: { ...process.env, ENTGRAPH_NUM_THREADS: "1" }, stdio: ["ignore", "pipe", "ignore"] },
    ),
  );
  for (const kind of ["causal", "masked"]) {
    const dir = `data/teacher-${kind}`;
    const row = { kind, bytes: TEACHER_BYTES };
    // The best repetition (unit: ms, the benchmark's Unit).
    const reps = benchJson.benchmarks.filter((b) => b.name.startsWith(`BM_teacher_forward/${kind}/`) && b.run_type === "iteration");
    row.gbench_ms = reps.length ? Math.min(...reps.map((b) => b.real_time)) : null;
    for (const b of builds) {
      const all = [];
      for (let round = 0; round < opts.rounds; ++round) {
        const args = ["--teacher", dir, "--text", "data/heldout.txt", "--bytes", String(TEACHER_BYTES), ...b.extra];
        all.push(runTiming(buildOf(b.id), args).results[0]);
      }
      row[b.id] = best(all, `${b.id} teacher ${kind}`);
    }
    const teacher = eg.Teacher.fromFiles(readFileSync(join(root, dir, "config.json"), "utf8"), readFileSync(join(root, dir, "model.safetensors")));
    const once = teacher.forward(text);
    const logits = once.logits();
    once.dispose();
    for (let i = 0; i < 3; ++i) teacher.forward(text).dispose(); // warm-up
    const medians = [];
    let runs = 0;
    for (let round = 0; round < opts.rounds; ++round) {
      const times = [];
      const deadline = performance.now() + 1000;
      while (times.length < 20 || (performance.now() < deadline && times.length < 200)) {
        const t0 = performance.now();
        const out = teacher.forward(text);
        times.push(performance.now() - t0);
        out.dispose();
      }
      medians.push(median(times));
      runs = Math.min(runs || times.length, times.length);
    }
    row.js = { ms: Math.min(...medians), rounds: medians, runs, hash: fnv(logits), checksum: weightedSum(logits, weights4096) };
    teacher.dispose();
    run.teacher.push(row);
  }
}
run.loadEnd = os.loadavg().map((x) => x.toFixed(2)).join(", ");

// ---- report --------------------------------------------------------------------
const fmt = (x, d = 0) => (x === null || x === undefined ? "—" : x.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d }));
function same(a, b) {
  if (a.hash === b.hash) return "bit-identical";
  const rel = Math.abs(a.checksum - b.checksum) / Math.max(Math.abs(a.checksum), Math.abs(b.checksum), 1e-300);
  return `rel. diff ${rel.toExponential(1)}`;
}
// The range of wasm / native (or native SSE2) over the rounds (each round's
// own pair), as a measure of how much the run was disturbed.
function roundRange(r, base = "native") {
  if (opts.rounds < 2) return "";
  const q = r.wasm.rounds.map((w, i) => w / r[base].rounds[i]);
  return ` (${Math.min(...q).toFixed(2)}–${Math.max(...q).toFixed(2)})`;
}
const out = [];
const h = run.headers;
out.push("### Run", "");
out.push(`- date: ${run.date}`, `- git: ${run.git}`, `- CPU: ${run.cpu}, ${run.cpus} logical CPUs`);
out.push(`- native: ${h.native.compiler}, ISA ${h.native.isa} (available: ${h.native.available_isas}), one thread`);
out.push(`- wasm: ${h.wasm.compiler} (emscripten), ISA ${h.wasm.isa}, node ${run.node}, ${paths.wasm.startsWith(root + "/") ? paths.wasm.slice(root.length + 1) : paths.wasm}`);
out.push(`- inputs: N(0, 1) batches of ${BATCH} floats (rows = ${BATCH} / n), input hash native ${h.native.input_hash}, wasm ${h.wasm.input_hash}`);
out.push(
  `- timing: ${opts.clock === "cpu" ? "CPU time used" : "wall clock"}; per round, the median of ${opts.reps} loops of >= ${opts.minMs} ms ` +
    `each after a warm-up; each cell is the best of ${opts.rounds} rounds` +
    `${opts.transformsOnly ? "" : ` (teacher via entgraph_bench: the best of ${opts.reps} repetitions)`}; ` +
    `wasm under node ${nodeArgs.join(" ") || "(default tiering)"}`,
);
out.push(`- load average at start: ${run.loadStart}; at end: ${run.loadEnd}`, "");

out.push("### Transforms (ns per row, one thread)", "");
const sse = opts.sse2;
const rr = opts.rounds > 1 ? " (range over rounds)" : "";
out.push(
  `| case | n | native ${h.native.isa} | wasm simd128 | wasm / native ${h.native.isa}${rr} | ` +
    `${sse ? `native sse2 | wasm / sse2${rr} | ` : ""}wasm output vs native ${h.native.isa} | ` +
    `${sse ? `vs native sse2 | target (n = ${TARGET_N}: wasm / sse2 <= ${TARGET}) |` : ""}`,
);
out.push(`|---|---|---|---|---|${sse ? "---|---|---|---|" : ""}---|`);
let pass = 0;
let miss = 0;
for (const r of run.transforms) {
  const cells = [
    `${r.transform} ${r.dir}`, r.n, fmt(r.native.ns_per_row), fmt(r.wasm.ns_per_row),
    `${(r.wasm.ns_per_row / r.native.ns_per_row).toFixed(2)}${roundRange(r)}`,
  ];
  if (sse) cells.push(fmt(r.sse2.ns_per_row), `${(r.wasm.ns_per_row / r.sse2.ns_per_row).toFixed(2)}${roundRange(r, "sse2")}`);
  cells.push(same(r.native, r.wasm));
  if (sse) {
    const ratio = r.wasm.ns_per_row / r.sse2.ns_per_row;
    let verdict = "(not judged)";
    if (r.n === TARGET_N) {
      verdict = ratio <= TARGET ? "PASS" : "**MISS**";
      ratio <= TARGET ? ++pass : ++miss;
    }
    cells.push(same(r.sse2, r.wasm), verdict);
  }
  out.push(`| ${cells.join(" | ")} |`);
}
if (sse) out.push("", `n = ${TARGET_N}: ${pass} PASS, ${miss} MISS (wasm <= ${TARGET} x native SSE2).`);
out.push("");
if (!opts.transformsOnly) {
  out.push("### JavaScript API (package, 64 x 512 scores, copies in and out included)", "");
  out.push("| call | JS API ns/row | wasm program ns/row | JS / program | native ns/row | JS / native | output vs wasm program |");
  out.push("|---|---|---|---|---|---|---|");
  for (const j of run.js) {
    out.push(
      `| \`${j.call}\` | ${fmt(j.ns_per_row)} | ${fmt(j.program.wasm.ns_per_row)} | ${(j.ns_per_row / j.program.wasm.ns_per_row).toFixed(2)} | ` +
        `${fmt(j.program.native.ns_per_row)} | ${(j.ns_per_row / j.program.native.ns_per_row).toFixed(2)} | ${same(j, j.program.wasm)} |`,
    );
  }
  out.push("");

  out.push(`### Teacher forward, ${TEACHER_BYTES} bytes of data/heldout.txt (ms, one thread)`, "");
  out.push(
    `| teacher | native ${h.native.isa}, entgraph_bench | native ${h.native.isa}, timing program | ${sse ? "native sse2, timing program | " : ""}` +
      "wasm, timing program | wasm, JS API (`Teacher.forward`) | wasm program / native | JS API / native | " +
      `logits: wasm vs native ${h.native.isa} | ${sse ? "vs native sse2 | " : ""}JS vs wasm program |`,
  );
  out.push(`|---|---|---|${sse ? "---|" : ""}---|---|---|---|---|${sse ? "---|" : ""}---|`);
  for (const t of run.teacher) {
    const nat = t.native.ms;
    out.push(
      `| ${t.kind} | ${fmt(t.gbench_ms, 2)} | ${fmt(nat, 2)} | ${sse ? `${fmt(t.sse2.ms, 2)} | ` : ""}${fmt(t.wasm.ms, 2)} | ` +
        `${fmt(t.js.ms, 2)} (medians of >= ${t.js.runs} runs) | ${(t.wasm.ms / nat).toFixed(2)} | ${(t.js.ms / nat).toFixed(2)} | ` +
        `${same(t.native, t.wasm)} | ${sse ? `${same(t.sse2, t.wasm)} | ` : ""}${same(t.js, t.wasm)} |`,
    );
  }
  out.push("");
}
console.log(out.join("\n"));
if (opts.out) writeFileSync(opts.out, JSON.stringify(run, null, 1));
