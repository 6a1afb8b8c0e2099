// Shared helpers of the node tests of entgraph's JavaScript package
// (docs/JAVASCRIPT.md): where the package and the native CLI are, a small
// .npy reader/writer, running the CLI, temporary folders, seeded random data.
//
// Locations (relative paths are taken from the repository root):
//   ENTGRAPH_WASM_PACKAGE  the package folder (default build/wasm/package)
//   ENTGRAPH_CLI           the native CLI (default build/release/native/cli/entgraph)
//   ENTGRAPH_TEST_NATIVE_ISA  --isa given to the native CLI in the tests that
//                          compare graphs and metrics exactly (default below)
// `make test` builds both; a test fails with a message naming what is missing.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const packageDir = resolve(repoRoot, process.env.ENTGRAPH_WASM_PACKAGE || "build/wasm/package");
export const cliPath = resolve(repoRoot, process.env.ENTGRAPH_CLI || "build/release/native/cli/entgraph");
export const dataDir = join(repoRoot, "data");

// The native CLI picks the best ISA of the machine (AVX2/AVX-512 with FMA);
// the wasm build runs SIMD128 kernels (4 floats, no FMA), the same shape of
// arithmetic as the SSE2 kernels. The exact comparisons run the CLI with
// --isa sse2 so that both sides round the same way (see the report in the
// tests that use it); set ENTGRAPH_TEST_NATIVE_ISA= (empty) for the default.
export const exactIsa = process.env.ENTGRAPH_TEST_NATIVE_ISA ?? "sse2";

// ---------------------------------------------------------------------------
// The package.

let packagePromise = null;

export function packageFile(name) {
  return join(packageDir, name);
}

function missingPackage(file) {
  return new Error(
    `entgraph's JavaScript package is missing: ${file} does not exist. ` +
      "Build it with `make wasm` (or `make test`), or set ENTGRAPH_WASM_PACKAGE to the folder holding entgraph.js.",
  );
}

// Throws the message above unless the package's name file exists.
export function requirePackageFile(name = "entgraph.js") {
  const file = packageFile(name);
  if (!existsSync(file)) throw missingPackage(file);
  return file;
}

// Imports a module of the package (entgraph.js, render.js, ...).
export async function importPackageModule(name) {
  return import(pathToFileURL(requirePackageFile(name)).href);
}

// The loaded package (loadEntgraph() once per test process).
export function loadPackage() {
  if (packagePromise === null) {
    packagePromise = (async () => {
      const mod = await importPackageModule("entgraph.js");
      if (typeof mod.loadEntgraph !== "function") throw new Error(`${packageFile("entgraph.js")} exports no loadEntgraph`);
      return mod.loadEntgraph();
    })();
  }
  return packagePromise;
}

// ---------------------------------------------------------------------------
// The native CLI.

export function requireCli() {
  if (!existsSync(cliPath))
    throw new Error(
      `entgraph's native CLI is missing: ${cliPath} does not exist. ` +
        "Build it with `make build` (or `make test`), or set ENTGRAPH_CLI to its path.",
    );
}

function cliEnv() {
  // Two threads at most: the machines running the tests are small and shared
  // (results are bit-identical for any thread count).
  return { ...process.env, ENTGRAPH_NUM_THREADS: process.env.ENTGRAPH_NUM_THREADS || "2" };
}

// Runs `entgraph command args...` and returns its stdout; with isa, adds
// --isa ISA (every command takes it). Throws with the CLI's stderr on failure.
export function runCli(command, args = [], { isa } = {}) {
  requireCli();
  const argv = [command, ...args, ...(isa ? ["--isa", isa] : [])];
  try {
    return execFileSync(cliPath, argv, {
      encoding: "utf8",
      env: cliEnv(),
      stdio: ["ignore", "pipe", "pipe"],
      maxBuffer: 1 << 28,
    });
  } catch (e) {
    throw new Error(`entgraph ${argv.join(" ")} failed (exit ${e.status}): ${e.stderr || e.message}`);
  }
}

// Runs a CLI command that must fail; returns its stderr without the
// "entgraph: " prefix and the final newline.
export function runCliFailing(command, args = []) {
  requireCli();
  const r = spawnSync(cliPath, [command, ...args], { encoding: "utf8", env: cliEnv() });
  if (r.status === 0) throw new Error(`entgraph ${command} ${args.join(" ")} succeeded; a failure was expected`);
  return r.stderr.replace(/^entgraph: /, "").trimEnd();
}

// `entgraph eval` as parsed JSON.
export function nativeEval(captureDir, paramsFile, { isa = exactIsa } = {}) {
  return JSON.parse(runCli("eval", ["--capture", captureDir, "--params", paramsFile], { isa }));
}

// `entgraph fit`: returns the parameter file's text.
export function nativeFit(captureDir, method, settings, outFile, { isa = exactIsa } = {}) {
  const sets = Object.entries(settings).flatMap(([k, v]) => ["--set", `${k}=${v}`]);
  runCli("fit", ["--capture", captureDir, "--method", method, ...sets, "--out", outFile, "--quiet"], { isa });
  return readFileSync(outFile, "utf8");
}

// `entgraph capture` of text (a string or bytes) into dir; returns dir.
export function nativeCapture(dir, { model = "teacher-causal", text, sequenceBytes, maxSequences, isa = exactIsa }) {
  const textFile = `${dir}.txt`;
  writeFileSync(textFile, text);
  const args = ["--model", join(dataDir, model), "--text", textFile, "--out", dir];
  if (sequenceBytes !== undefined) args.push("--sequence-bytes", String(sequenceBytes));
  if (maxSequences !== undefined) args.push("--max-sequences", String(maxSequences));
  runCli("capture", args, { isa });
  return dir;
}

// ---------------------------------------------------------------------------
// Files.

const tempDirs = [];
process.on("exit", () => {
  if (process.env.ENTGRAPH_TEST_KEEP_TEMP) return;
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
});

// A fresh temporary folder, removed when the process exits
// (kept if ENTGRAPH_TEST_KEEP_TEMP is set).
export function makeTempDir(prefix = "entgraph-wasm-test-") {
  const d = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(d);
  return d;
}

// Every plain file of a folder, by name, as bytes (what Capture.fromFiles takes).
export function readFolderFiles(dir) {
  const files = {};
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isFile()) files[name] = new Uint8Array(readFileSync(p));
  }
  return files;
}

// Writes { name: Uint8Array | string } into dir (created by the caller).
export function writeFolderFiles(dir, files) {
  for (const [name, bytes] of Object.entries(files)) writeFileSync(join(dir, name), bytes);
  return dir;
}

export function dataFile(...parts) {
  return join(dataDir, ...parts);
}

// A shipped teacher ("teacher-causal" or "teacher-masked") loaded from its files.
export function loadTeacher(eg, name) {
  const config = readFileSync(dataFile(name, "config.json"), "utf8");
  const weights = new Uint8Array(readFileSync(dataFile(name, "model.safetensors")));
  return eg.Teacher.fromFiles(config, weights);
}

// The held-out text's bytes [start, start + length) as a string (ASCII).
export function heldoutText(start = 0, length = 8192) {
  return readFileSync(dataFile("heldout.txt")).subarray(start, start + length).toString("latin1");
}

// ---------------------------------------------------------------------------
// .npy (NumPy format 1.0 to write; 1.0, 2.0 and 3.0 to read), little-endian,
// C order, float16 / float32 / float64.

const DTYPES = {
  "<f4": { name: "float32", size: 4, Array: Float32Array },
  "<f8": { name: "float64", size: 8, Array: Float64Array },
  "<f2": { name: "float16", size: 2, Array: Float32Array },
};

// data: Float32Array or Float64Array; shape: an array of sizes.
export function encodeNpy(data, shape) {
  const descr = data instanceof Float64Array ? "<f8" : data instanceof Float32Array ? "<f4" : null;
  if (descr === null) throw new Error("encodeNpy: data must be a Float32Array or a Float64Array");
  const count = shape.reduce((a, b) => a * b, 1);
  if (count !== data.length) throw new Error(`encodeNpy: shape (${shape}) holds ${count} values, data ${data.length}`);
  const shapeText = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(", ")})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shapeText}, }`;
  const total = 10 + header.length + 1;
  header += " ".repeat((64 - (total % 64)) % 64) + "\n";
  const out = new Uint8Array(10 + header.length + data.byteLength);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0], 0);
  new DataView(out.buffer).setUint16(8, header.length, true);
  for (let i = 0; i < header.length; ++i) out[10 + i] = header.charCodeAt(i);
  out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), 10 + header.length);
  return out;
}

export function writeNpy(path, data, shape) {
  writeFileSync(path, encodeNpy(data, shape));
}

function halfToFloat(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * f * 2 ** -24;
  if (e === 31) return f ? NaN : s * Infinity;
  return s * (1 + f / 1024) * 2 ** (e - 15);
}

// bytes (Uint8Array) or a path -> { dtype, shape, data } (float16 widened to float32).
export function readNpy(source) {
  const bytes = typeof source === "string" ? new Uint8Array(readFileSync(source)) : source;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes[0] !== 0x93 || String.fromCharCode(...bytes.subarray(1, 6)) !== "NUMPY") throw new Error("readNpy: not a .npy file");
  const major = bytes[6];
  const headerLength = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  const header = new TextDecoder().decode(bytes.subarray(start, start + headerLength));
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error("readNpy: Fortran order is not supported");
  const shape = (/'shape':\s*\(([^)]*)\)/.exec(header)?.[1] ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "")
    .map(Number);
  const dtype = DTYPES[descr];
  if (!dtype) throw new Error(`readNpy: unsupported dtype ${descr}`);
  const count = shape.reduce((a, b) => a * b, 1);
  const offset = start + headerLength;
  if (bytes.byteLength < offset + count * dtype.size) throw new Error("readNpy: truncated data");
  const data = new dtype.Array(count);
  for (let i = 0; i < count; ++i) {
    const at = offset + i * dtype.size;
    data[i] =
      dtype.size === 4 ? view.getFloat32(at, true) : dtype.size === 8 ? view.getFloat64(at, true) : halfToFloat(view.getUint16(at, true));
  }
  return { dtype: dtype.name, shape, data };
}

// ---------------------------------------------------------------------------
// Figures.

// The lines of a render.pareto SVG that its ringed point's label (class
// "current-label") runs over: frontier segments and the true graph's sparsity,
// found by walking each line in half-pixel steps through the label's box. The
// box is estimated independently of render.js: 6.8 px a character (bold 11 px
// sans-serif), 10 px above the baseline and 3 below.
export function currentLabelCrossings(svg) {
  const label = /<text class="current-label" x="([\d.-]+)" y="([\d.-]+)" text-anchor="(\w+)"[^>]*>([^<]*)<\/text>/.exec(svg);
  if (!label) throw new Error("the SVG has no current-label text");
  const [x, y] = [Number(label[1]), Number(label[2])];
  const width = label[4].replace(/&\w+;/g, "_").length * 6.8;
  const left = label[3] === "start" ? x : label[3] === "end" ? x - width : x - width / 2;
  const box = { left, right: left + width, top: y - 10, bottom: y + 3 };
  const segments = [];
  for (const [, points] of svg.matchAll(/<polyline class="frontier" points="([^"]*)"/g)) {
    const xy = points.split(" ").map((p) => p.split(",").map(Number));
    for (let i = 1; i < xy.length; ++i) segments.push(["frontier", ...xy[i - 1], ...xy[i]]);
  }
  for (const [, x1, y1, x2, y2] of svg.matchAll(/<line class="true-sparsity" x1="([\d.-]+)" y1="([\d.-]+)" x2="([\d.-]+)" y2="([\d.-]+)"/g))
    segments.push(["true sparsity", Number(x1), Number(y1), Number(x2), Number(y2)]);
  const crossings = [];
  for (const [what, x1, y1, x2, y2] of segments) {
    const steps = Math.max(1, Math.ceil(2 * Math.hypot(x2 - x1, y2 - y1)));
    for (let k = 0; k <= steps; ++k) {
      const px = x1 + ((x2 - x1) * k) / steps, py = y1 + ((y2 - y1) * k) / steps;
      if (px >= box.left && px <= box.right && py >= box.top && py <= box.bottom) {
        crossings.push(`${what} (${x1}, ${y1})-(${x2}, ${y2})`);
        break;
      }
    }
  }
  return { label: label[4], box, segments: segments.length, crossings };
}

// ---------------------------------------------------------------------------
// Numbers.

// A seeded generator of uniforms in [0, 1) (mulberry32) with normals.
export function rng(seed) {
  let a = seed >>> 0;
  const uniform = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const normal = () => {
    const u = 1 - uniform();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * uniform());
  };
  return { uniform, normal };
}

export function randomNormal(count, seed, scale = 1) {
  const r = rng(seed);
  const out = new Float32Array(count);
  for (let i = 0; i < count; ++i) out[i] = scale * r.normal();
  return out;
}

// The largest |a[i] - b[i]| and where; equal infinities count as 0, any other
// mismatch of non-finite values as Infinity. With relative, each difference
// is divided by max(1, |b[i]|) (an absolute tolerance for values up to 1, a
// relative one above: float32 cannot hold 1e-6 of a gradient of 1e6).
export function maxAbsDiff(a, b, { relative = false } = {}) {
  if (a.length !== b.length) throw new Error(`maxAbsDiff: lengths ${a.length} and ${b.length} differ`);
  let max = 0;
  let at = -1;
  for (let i = 0; i < a.length; ++i) {
    const x = a[i];
    const y = b[i];
    let d;
    if (x === y) d = 0;
    else if (Number.isFinite(x) && Number.isFinite(y)) d = Math.abs(x - y) / (relative ? Math.max(1, Math.abs(y)) : 1);
    else d = Infinity;
    if (d > max) {
      max = d;
      at = i;
    }
  }
  return { max, at };
}

// Asserts max |a - b| <= tol (see maxAbsDiff for relative) with a message
// naming the first worst index; returns the max.
export function assertClose(actual, expected, tol, what, { relative = false } = {}) {
  const { max, at } = maxAbsDiff(actual, expected, { relative });
  if (!(max <= tol))
    throw new Error(
      `${what}: max ${relative ? "relative" : "abs"} diff ${max} > ${tol} at index ${at} (got ${actual[at]}, expected ${expected[at]})`,
    );
  return max;
}

// An eval report without its timing (the only field that may differ).
export function withoutTiming(report) {
  const { predict_seconds: _, ...rest } = report;
  return rest;
}

// A graph as plain arrays, for deepEqual between graphs from different places.
export function plainGraph(g) {
  return { queries: g.queries, keys: g.keys, offsets: Array.from(g.offsets), indices: Array.from(g.indices) };
}

// The full graph of n queries over m keys (every key in every row).
export function fullGraph(n, m) {
  const offsets = new Uint32Array(n + 1);
  const indices = new Uint32Array(n * m);
  for (let i = 0; i < n; ++i) {
    offsets[i + 1] = (i + 1) * m;
    for (let j = 0; j < m; ++j) indices[i * m + j] = j;
  }
  return { queries: n, keys: m, offsets, indices };
}

// The parameter file's text of `method` with settings (what Predictor.load takes).
export function paramsText(method, settings = {}) {
  return JSON.stringify({ format: "entgraph-predictor", version: 1, method, settings, parameters: {} });
}
