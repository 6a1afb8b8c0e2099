// Errors: every failure of the core surfaces as a JavaScript Error whose
// message is the core's (compared with the native CLI's message for the same
// input where the CLI reaches the same core check), a failed call changes
// nothing, and objects holding wasm memory throw once disposed.
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  dataFile,
  encodeNpy,
  heldoutText,
  loadPackage,
  loadTeacher,
  makeTempDir,
  nativeCapture,
  paramsText,
  readFolderFiles,
  readNpy,
  runCliFailing,
  writeFolderFiles,
  writeNpy,
} from "./helpers.mjs";

// Runs fn, which must throw an Error; returns it.
function thrown(fn, what) {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof Error, `${what}: threw ${Object.prototype.toString.call(e)} (${e}), not an Error`);
    assert.ok(typeof e.message === "string" && e.message.length > 0, `${what}: empty message`);
    return e;
  }
  assert.fail(`${what}: did not throw`);
}

function assertThrowsMatching(fn, pattern, what) {
  const e = thrown(fn, what);
  assert.match(e.message, pattern, `${what}: message`);
  return e;
}

// The native message with the CLI's own context removed: everything up to
// and including `prefix` (e.g. the file path it adds); without the tag of
// C++'s JSON library ("[json.exception.parse_error.101] "), which the package
// leaves out.
function coreMessage(cliMessage, prefix) {
  const at = cliMessage.indexOf(prefix);
  assert.ok(at >= 0, `the CLI's message ${JSON.stringify(cliMessage)} holds ${JSON.stringify(prefix)}`);
  return cliMessage.slice(at + prefix.length).replace(/\[json\.exception\.[\w.]+\] /g, "");
}

describe("errors", () => {
  let eg;
  let teacher;
  let capDir;
  let capFiles;
  const dir = makeTempDir();

  before(async () => {
    eg = await loadPackage();
    teacher = loadTeacher(eg, "teacher-causal");
    capDir = nativeCapture(join(dir, "cap"), { text: heldoutText(0, 160), sequenceBytes: 80 });
    capFiles = readFolderFiles(capDir);
  });
  after(() => teacher?.dispose());

  test("transforms: NaN scores give the core's message, as the CLI reports it", () => {
    const scores = new Float32Array([1, 2, NaN, 4, 5, 6]);
    const file = join(dir, "nan.npy");
    writeNpy(file, scores, [2, 3]);
    for (const fn of ["softmax", "sparsemax", "entmax15"]) {
      const native = runCliFailing("transform", ["--fn", fn, file, join(dir, "out.npy")]);
      const core = coreMessage(native, `${file}: `);
      const e = thrown(() => eg.transform(fn, scores, { cols: 3 }), `${fn} on NaN`);
      assert.ok(e.message.includes(core), `message ${JSON.stringify(e.message)} holds the core's ${JSON.stringify(core)}`);
    }
    assertThrowsMatching(() => eg.transform("softmax", new Float32Array([1, Infinity]), { cols: 2 }), /non-finite/, "+inf");
  });

  test("transforms: bad alpha, bad k, bad shapes, unknown name, bad mask", () => {
    const s = new Float32Array(6);
    assertThrowsMatching(() => eg.transform("entmax", s, { cols: 3, alpha: 0.5 }), /^transform: entmax: alpha out of range/, "alpha 0.5");
    assertThrowsMatching(() => eg.transform("entmax", s, { cols: 3, alpha: NaN }), /alpha/, "alpha NaN");
    assertThrowsMatching(() => eg.transform("entmax", s, { cols: 3, alpha: 1001 }), /alpha/, "alpha 1001");
    assertThrowsMatching(() => eg.transform("topk", s, { cols: 3, k: 0 }), /\bk\b/, "k 0");
    assertThrowsMatching(() => eg.transform("softmax", new Float32Array(7), { cols: 3 }), /cols/, "7 values in rows of 3");
    assertThrowsMatching(() => eg.transform("softmax", s, { cols: 0 }), /cols/, "cols 0");
    assertThrowsMatching(() => eg.transform("bogus", s, { cols: 3 }), /bogus/, "unknown transform");
    assertThrowsMatching(() => eg.transform("softmax", s, { cols: 3, mask: new Uint8Array(5) }), /mask/, "mask of 5 entries");
    assertThrowsMatching(
      () => eg.transformBackward("entmax15", new Float32Array(6), new Float32Array(3), { cols: 3 }),
      /gradProbs/,
      "gradient of the wrong size",
    );
  });

  test("attention: shapes, scale and graphs, named in the message", () => {
    const q = new Float32Array(4 * 8);
    const k = new Float32Array(5 * 8);
    const v = new Float32Array(5 * 2);
    const ok = { q, k, v, queries: 4, keys: 5, dim: 8, valueDim: 2, transform: "softmax" };
    eg.attention(ok);
    assertThrowsMatching(() => eg.attention({ ...ok, keys: 6 }), /\bk\b/, "keys 6 with 5 rows of k");
    assertThrowsMatching(() => eg.attention({ ...ok, q: new Float32Array(4 * 8).fill(NaN) }), /\bq has a non-finite entry/, "NaN in q");
    assertThrowsMatching(() => eg.attention({ ...ok, scale: Infinity }), /scale/, "infinite scale");
    assertThrowsMatching(() => eg.attention({ ...ok, transform: "entmax", alpha: 0 }), /alpha/, "alpha 0");
    const unsorted = { queries: 4, keys: 5, offsets: new Uint32Array([0, 2, 2, 2, 2]), indices: new Uint32Array([3, 1]) };
    assertThrowsMatching(() => eg.graphAttention({ ...ok, graph: unsorted }), /not sorted and unique/, "unsorted graph");
    const outOfRange = { queries: 4, keys: 5, offsets: new Uint32Array([0, 1, 1, 1, 1]), indices: new Uint32Array([9]) };
    assertThrowsMatching(() => eg.graphAttention({ ...ok, graph: outOfRange }), /key 9/, "key out of range");
    const wrongShape = { queries: 3, keys: 5, offsets: new Uint32Array([0, 0, 0, 0]), indices: new Uint32Array([]) };
    assertThrowsMatching(() => eg.graphAttention({ ...ok, graph: wrongShape }), /graph/, "graph of 3 queries");
    const valid = { queries: 4, keys: 5, offsets: new Uint32Array([0, 2, 2, 2, 2]), indices: new Uint32Array([1, 3]) };
    // Modes: softmax has no threshold (certify and exact need one), unknown modes, the options modes replaced.
    eg.graphAttention({ ...ok, graph: valid });
    for (const mode of ["certify", "exact"])
      assertThrowsMatching(() => eg.graphAttention({ ...ok, graph: valid, mode }), /no threshold/, `softmax, mode ${mode}`);
    eg.graphAttention({ ...ok, transform: "sparsemax", graph: valid, mode: "exact" });
    assertThrowsMatching(() => eg.graphAttention({ ...ok, graph: valid, mode: "dense" }), /mode must be "fast", "certify" or "exact"/,
                         "unknown mode");
    assertThrowsMatching(() => eg.graphAttention({ ...ok, graph: valid, mode: true }), /^mode: expected a string/, "mode true");
    assertThrowsMatching(() => eg.graphAttention({ ...ok, graph: valid, certify: true }), /certify is gone; use mode/, "certify: true");
    assertThrowsMatching(() => eg.graphAttention({ ...ok, graph: valid, recomputeUncertified: true }),
                         /recomputeUncertified is gone; use mode/, "recomputeUncertified: true");
    assertThrowsMatching(() => eg.graphUnion(wrongShape, valid), /^graphUnion: graphs of different shapes/, "union of different shapes");
    assertThrowsMatching(() => eg.graphUnion(valid, unsorted), /not sorted and unique/, "union with an unsorted graph");
    assertThrowsMatching(() => eg.compareGraphs(outOfRange, valid), /key 9/, "compareGraphs with a key out of range");
    assertThrowsMatching(() => eg.goldGraph(q, k, { queries: 4, keys: 5, dim: 8, alpha: 0.5 }), /^goldGraph: .*alpha/, "gold graph alpha 0.5");
  });

  test("predictors: unknown method and bad settings give the CLI's message", () => {
    const cases = [
      ["nope", {}],
      ["reformer", { buckets: "7" }],
      ["window", { foo: "1" }],
      ["bigbird", { random: "-1" }],
      ["sparsefinder-kmeans", { lr: "0" }],
    ];
    for (const [method, settings] of cases) {
      const sets = Object.entries(settings).flatMap(([k, v]) => ["--set", `${k}=${v}`]);
      const native = runCliFailing("fit", ["--capture", capDir, "--method", method, ...sets, "--out", join(dir, "x.json")]);
      const e = thrown(() => eg.Predictor.create(method, settings), `create ${method} ${JSON.stringify(settings)}`);
      // The CLI names its option, the API its call; the rest is the same text.
      assert.match(native, /^fit: --(method|set): /);
      assert.match(e.message, /^Predictor\.create: /);
      assert.equal(e.message.replace(/^Predictor\.create: /, ""), native.replace(/^fit: --(method|set): /, ""));
    }
    // Numbers are accepted as settings and checked the same way.
    assertThrowsMatching(() => eg.Predictor.create("reformer", { buckets: 7 }), /buckets/, "buckets: 7");
  });

  test("predictors: bad parameter files give the core's message", () => {
    const cases = [
      ["{bad", /not valid JSON/],
      ['{"format": "other", "version": 1}', /not a predictor file/],
      [paramsText("routing"), /routing: parameters: missing 'centroids'/],
      [paramsText("nope"), /unknown predictor method 'nope'/],
    ];
    for (const [text, pattern] of cases) {
      const file = join(dir, "bad-params.json");
      writeFileSync(file, text);
      const native = runCliFailing("eval", ["--capture", capDir, "--params", file]);
      const core = coreMessage(native, `${file}: `);
      const e = assertThrowsMatching(() => eg.Predictor.load(text), pattern, `load ${text}`);
      assert.ok(e.message.includes(core), `message ${JSON.stringify(e.message)} holds the core's ${JSON.stringify(core)}`);
      assert.match(e.message, /^Predictor\.load: /);
    }
  });

  test("predictors: predict before fit, outside the fitted heads, wrong dim", () => {
    const cap = eg.Capture.fromFiles(capFiles);
    const p = eg.Predictor.create("routing", { clusters: 2 });
    try {
      const q = cap.queries(0, 0, 0);
      const opts = { queries: 80, keys: 80, dim: 32, layer: 0, head: 0, causal: true };
      assertThrowsMatching(() => p.predict(q, q, opts), /fitted/, "predict before fit");
      p.fit(cap, { seed: 0 });
      p.predict(q, q, opts);
      assertThrowsMatching(() => p.predict(q, q, { ...opts, layer: 9 }), /^Predictor\.predict: routing: /, "layer 9 of 4");
      assertThrowsMatching(() => p.predict(q.subarray(0, 80 * 16), q.subarray(0, 80 * 16), { ...opts, dim: 16 }), /^Predictor\.predict: routing: /, "dim 16");
      // The package checks this argument itself (its message names extraWindow;
      // the core's would be "routing: extra_window must be >= -1 (-1: none)").
      assertThrowsMatching(() => p.setUnionPatterns(-2, 0), /extra_?window/i, "extra_window -2");
    } finally {
      p.dispose();
      cap.dispose();
    }
  });

  test("captures: corrupt files give the core's message, as the CLI reports it", () => {
    const meta = JSON.parse(new TextDecoder().decode(capFiles["capture.json"]));
    const keys = readNpy(capFiles["keys.npy"]);
    const nanKeys = Float32Array.from(keys.data);
    nanKeys[(1 * meta.heads + 0) * 160 * 32 + 17 * 32 + 3] = NaN; // layer 1, head 0, token 17, dim 3
    const cases = [
      ["unknown key", { "capture.json": JSON.stringify({ ...meta, casual: true }) }],
      ["truncated keys.npy", { "keys.npy": capFiles["keys.npy"].subarray(0, 1000) }],
      ["NaN in keys", { "keys.npy": encodeNpy(nanKeys, keys.shape) }],
      ["lengths that do not add up", { "capture.json": JSON.stringify({ ...meta, lengths: [80, 81] }) }],
      ["a wrong format", { "capture.json": JSON.stringify({ ...meta, format: "nope" }) }],
      ["invalid JSON", { "capture.json": "{" }],
      ["alpha below 1", { "capture.json": JSON.stringify({ ...meta, alpha: 0.5 }) }],
      ["not a .npy file", { "queries.npy": new TextEncoder().encode("hello") }],
    ];
    for (const [what, changes] of cases) {
      const bad = join(dir, `bad-${what.replaceAll(" ", "-").replaceAll(".", "")}`);
      mkdirSync(bad);
      const files = { ...capFiles, ...changes };
      writeFolderFiles(bad, files);
      const native = runCliFailing("info", [bad]);
      const core = coreMessage(native, `${bad}: `);
      const e = assertThrowsMatching(() => eg.Capture.fromFiles(files), /^Capture\.fromFiles: /, what);
      assert.ok(e.message.endsWith(core), `${what}: message ${JSON.stringify(e.message)} ends with the core's ${JSON.stringify(core)}`);
    }
    const { "queries.npy": _, ...withoutQueries } = capFiles;
    assertThrowsMatching(() => eg.Capture.fromFiles(withoutQueries), /queries\.npy/, "missing queries.npy");
  });

  test("teachers: truncated or corrupt weights, bad config, bad text", () => {
    const config = readFileSync(dataFile("teacher-causal", "config.json"), "utf8");
    const weights = new Uint8Array(readFileSync(dataFile("teacher-causal", "model.safetensors")));
    const cases = [
      ["header cut", weights.subarray(0, 1000), /^Teacher\.fromFiles: .*header size \d+ exceeds the file/],
      ["data cut", weights.subarray(0, weights.length - 10), /^Teacher\.fromFiles: /],
      ["empty", new Uint8Array(0), /^Teacher\.fromFiles: /],
    ];
    for (const [what, bytes, pattern] of cases) {
      const model = join(dir, `teacher-${what.replace(" ", "-")}`);
      mkdirSync(model);
      writeFolderFiles(model, { "config.json": config, "model.safetensors": bytes });
      writeFileSync(join(dir, "hi.txt"), "hi");
      const native = runCliFailing("capture", ["--model", model, "--text", join(dir, "hi.txt"), "--out", join(dir, "never")]);
      const core = coreMessage(native, `${join(model, "model.safetensors")}: `);
      const e = assertThrowsMatching(() => eg.Teacher.fromFiles(config, bytes), pattern, `weights ${what}`);
      assert.ok(e.message.endsWith(core), `${what}: message ${JSON.stringify(e.message)} ends with the core's ${JSON.stringify(core)}`);
    }
    assertThrowsMatching(() => eg.Teacher.fromFiles("{", weights), /./, "config not JSON");
    const cfg = JSON.parse(config);
    assertThrowsMatching(() => eg.Teacher.fromFiles(JSON.stringify({ ...cfg, layers: 5 }), weights), /layers\.4/, "5 layers in config, 4 in weights");
    assertThrowsMatching(() => eg.Teacher.fromFiles(JSON.stringify({ ...cfg, format: "x" }), weights), /format/, "wrong format");

    assertThrowsMatching(() => teacher.forward(""), /^Teacher\.forward: text is empty/, "empty text");
    assertThrowsMatching(() => teacher.forward("x".repeat(257)), /^Teacher\.forward: text has 257 tokens, more than the model's context of 256/, "257 bytes");
    // 86 three-byte characters are 258 bytes: the limit is in bytes.
    assertThrowsMatching(() => teacher.forward("€".repeat(86)), /258 tokens/, "258 UTF-8 bytes");
    assertThrowsMatching(() => teacher.capture([]), /texts is empty/, "capture of no text");
    const out = teacher.forward("abc");
    try {
      assertThrowsMatching(() => out.probs(0, 0), /not recorded/, "probs not recorded");
      assertThrowsMatching(() => out.queries(4, 0), /layer 4/, "layer 4 of 4");
      assertThrowsMatching(() => out.keys(0, 4), /head 4/, "head 4 of 4");
    } finally {
      out.dispose();
    }
    assertThrowsMatching(() => eg.splitText("abc", 0), /^splitText: maxBytes must be >= 1/, "splitText 0");
  });

  test("messages name the JavaScript API, not the C++ one", () => {
    // The core words its messages for C++ and the CLI (Teacher::forward, split_text,
    // ForwardOptions::attention_probs, options.transform.alpha, ...); the package
    // leads each with the call that failed and gives the names it mentions their
    // JavaScript spelling.
    const config = readFileSync(dataFile("teacher-causal", "config.json"), "utf8");
    const z = new Float32Array(8);
    const heads = { q: z, k: z, v: z, queries: 2, keys: 2, dim: 4 };
    const graph = { queries: 2, keys: 2, offsets: new Uint32Array([0, 1, 2]), indices: new Uint32Array([0, 1]) };
    const out = teacher.forward("abc");
    const cap = out.toCapture();
    const unfitted = eg.Predictor.create("routing");
    const kmeans = eg.Predictor.create("sparsefinder-kmeans", { clusters: 2 }).fit(cap, { seed: 0 });
    const cases = [
      ["splitText 0", () => eg.splitText("abc", 0), /^splitText: maxBytes must be >= 1$/],
      ["forward of 300 bytes", () => teacher.forward("x".repeat(300)), /^Teacher\.forward: text has 300 tokens.*\(split it with splitText\)$/],
      ["probs not recorded", () => out.probs(0, 0), /^TeacherOutput\.probs: not recorded \(forward\(text, \{ probs: true \}\) records them\)$/],
      ["output layer 9", () => out.queries(9, 0), /^TeacherOutput\.queries: layer 9, head 0 out of range/],
      ["capture of nothing", () => teacher.capture([]), /^Teacher\.capture: texts is empty$/],
      ["capture head 9", () => cap.head(0, 9), /^Capture\.head: head out of range/],
      ["capture gold graph of head 9", () => cap.goldGraph(0, 9, 0), /^Capture\.goldGraph: layer 0, head 9: head out of range/],
      ["capture sequence 3", () => cap.keys(0, 0, 3), /^Capture\.keys: sequence out of range/],
      ["capture without files", () => eg.Capture.fromFiles({}), /^Capture\.fromFiles: .*capture\.json/],
      ["empty weights", () => eg.Teacher.fromFiles(config, new Uint8Array(0)), /^Teacher\.fromFiles: model\.safetensors: file too short/],
      ["config not JSON", () => eg.Teacher.fromFiles("{", new Uint8Array(0)), /^Teacher\.fromFiles: .*config\.json: the file is not valid JSON \(parse error/],
      ["attention alpha 0.2", () => eg.attention({ ...heads, transform: "entmax", alpha: 0.2 }), /^attention: alpha is out of range/],
      ["attention topk 0", () => eg.attention({ ...heads, transform: "topk", topk: 0 }), /^attention: topk is 0 for topk \(got 0, expected k >= 1\)$/],
      ["attention scale infinite", () => eg.attention({ ...heads, scale: Infinity }), /^attention: scale is not finite/],
      ["attentionBackward NaN gradOut", () => eg.attentionBackward({ ...heads, gradOut: new Float32Array(8).fill(NaN) }),
       /^attentionBackward: gradOut has a non-finite entry at \(0, 0\) \(got NaN, expected a finite number\)$/],
      ["block graph of 2 heads", () => eg.blockSparseAttention({ ...heads, batch: 1, heads: 1, graph: eg.fullBlockGraph({ heads: 2, queries: 2, keys: 2 }) }),
       /^blockSparseAttention: graph\.heads does not match heads \(got 2, expected 1\)$/],
      ["certify softmax", () => eg.graphAttention({ ...heads, graph, transform: "softmax", mode: "certify" }),
       /^graphAttention: mode is certify but softmax has no threshold.*: sparsemax, entmax15, entmax with alpha > 1, topk\)$/],
      ["graph of 3 queries", () => eg.graphAttention({ ...heads, graph: { ...graph, queries: 3, offsets: new Uint32Array([0, 1, 2, 2]) } }),
       /^graphAttention: graph\.queries does not match queries \(got 3, expected 2\)$/],
      ["unknown transform", () => eg.transform("adaptive", z), /^name: unknown transform 'adaptive' \(expected softmax, sparsemax, entmax15, entmax or topk\)$/],
      ["unknown mode", () => eg.graphAttention({ ...heads, graph, mode: "dense" }), /^graphAttention: mode must be "fast", "certify" or "exact" \(got "dense"\)$/],
      ["attention's unknown transform", () => eg.attention({ ...heads, transform: "adaptive" }), /^transform: unknown transform 'adaptive'/],
      ["unknown method", () => eg.Predictor.create("nope"), /^Predictor\.create: unknown predictor method 'nope'/],
      ["parameter file not JSON", () => eg.Predictor.load("{bad"), /^Predictor\.load: parameter file: the file is not valid JSON \(parse error/],
      ["serialize unfitted", () => unfitted.serialize(), /^Predictor\.serialize: routing: the predictor is not fitted/],
      ["predict unfitted", () => unfitted.predict(z, z, { queries: 2, keys: 2, dim: 4 }), /^Predictor\.predict: routing: /],
      ["predict with another head size", () => kmeans.predict(z, z, { queries: 2, keys: 2, dim: 4 }),
       /^Predictor\.predict: sparsefinder-kmeans: predict: rows have 4 columns, fitted on headDim 32$/],
      ["evaluate unfitted", () => eg.evaluate(unfitted, cap), /^evaluate: layer 0, head 0: routing: /],
      ["gold graph alpha 0.5", () => eg.goldGraph(z, z, { queries: 2, keys: 2, dim: 4, alpha: 0.5 }), /^goldGraph: settings need alpha >= 1/],
      ["union of shapes", () => eg.graphUnion(graph, { ...graph, keys: 3 }), /^graphUnion: graphs of different shapes/],
      ["compare shapes", () => eg.compareGraphs(graph, { ...graph, keys: 3 }), /^compareGraphs: graphs of different shapes/],
      ["no grid", () => eg.defaultGrid("nope"), /^defaultGrid: no grid for method 'nope'$/],
      ["sweep of no grid", () => eg.sweep(["nope"], cap, cap), /^sweep: no grid for method 'nope'$/],
    ];
    // C++ names of the core's functions, options and library.
    const cpp = /::|\boptions\.|\b[qkv]\.(rows|cols)\b|json\.exception|\bForwardOptions\b/;
    const snakeCase = /\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b/;
    try {
      for (const [what, fn, pattern] of cases) {
        const e = assertThrowsMatching(fn, pattern, what);
        assert.doesNotMatch(e.message, cpp, `${what}: a C++ name in ${JSON.stringify(e.message)}`);
        assert.doesNotMatch(e.message, snakeCase, `${what}: a snake_case name in ${JSON.stringify(e.message)}`);
      }
    } finally {
      for (const o of [unfitted, kmeans]) o.dispose();
      cap.dispose();
      out.dispose();
    }
  });

  // The code of each kind of failure (wasm/errors.js), the core's or the package's own.
  test("every error carries its code", async () => {
    const z = new Float32Array([0.5, 1, -2, 0.25]);
    const badConfig = JSON.stringify({ format: "entgraph-teacher" });
    const cases = [
      ["unknown transform (the package's check)", () => eg.transform("adaptive", z), "bad_argument"],
      ["bad alpha (the core's check)", () => eg.transform("entmax", z, { alpha: 0.5 }), "bad_argument"],
      ["NaN score", () => eg.transform("softmax", new Float32Array([0.5, NaN])), "bad_value"],
      ["capture.json not JSON", () => eg.Capture.fromFiles({ ...capFiles, "capture.json": new TextEncoder().encode("{") }), "bad_file"],
      ["teacher config not a config", () => eg.Teacher.fromFiles(badConfig, new Uint8Array(0)), "bad_file"],
      ["parameter file not JSON", () => eg.Predictor.load("{bad"), "bad_file"],
      ["text over the context", () => teacher.forward("a".repeat(300)), "limit"],
    ];
    for (const [what, fn, code] of cases) assert.equal(thrown(fn, what).code, code, what);
    await assert.rejects(eg.loadTeacher(join(dir, "no-such-teacher")), (e) => e.code === "io");
    // A call that wraps another puts its own name before the inner one's detail and keeps its code.
    const bad = join(dir, "bad-teacher");
    mkdirSync(bad, { recursive: true });
    writeFileSync(join(bad, "config.json"), badConfig);
    writeFileSync(join(bad, "model.safetensors"), new Uint8Array(0));
    const inner = thrown(() => eg.Teacher.fromFiles(badConfig, new Uint8Array(0)), "teacher config not a config");
    assert.equal(inner.message, `Teacher.fromFiles: ${inner.detail}`);
    await assert.rejects(eg.loadTeacher(bad), (e) => {
      assert.equal(e.code, "bad_file");
      assert.ok(e.message.startsWith("loadTeacher: ") && e.message.endsWith(`: ${inner.detail}`), e.message);
      return true;
    });
  });

  test("messages are worded from the core's parts: C++ locations and names give way to JavaScript's", () => {
    // The core says "split_text: max_bytes must be >= 1", "attention_forward: options.transform.alpha ...",
    // (more in "messages name the JavaScript API" above).
    assert.equal(thrown(() => eg.splitText("abc", 0), "splitText 0").detail, "maxBytes must be >= 1");
    const q = new Float32Array(8), k = new Float32Array(8), v = new Float32Array(4);
    const heads = { q, k, v, queries: 2, keys: 2, dim: 4, valueDim: 2 };
    assert.match(thrown(() => eg.attention({ ...heads, transform: "entmax", alpha: 0.5 }), "alpha 0.5").message,
                 /^attention: alpha is out of range \(got 0\.5, expected 1 <= alpha <= 1000\)$/);
    // The JSON library's tag is C++'s, not the package's; the CLI keeps it.
    const e = thrown(() => eg.Predictor.load("{bad"), "parameter file not JSON");
    assert.ok(!e.message.includes("[json.exception"), e.message);
    assert.match(e.message, /^Predictor\.load: .*is not valid JSON \(parse error at line 1/);
  });

  test("a failed call changes nothing", () => {
    const before = teacher.forward("In the beginning");
    const q = before.queries(1, 1);
    before.dispose();
    thrown(() => teacher.forward(""), "empty text");
    const again = teacher.forward("In the beginning");
    assert.deepEqual(again.queries(1, 1), q);
    again.dispose();

    const p = eg.Predictor.create("window", { window: 2 });
    try {
      const text = p.serialize();
      thrown(() => p.setUnionPatterns(-5, 0), "extra_window -5");
      assert.equal(p.serialize(), text);
    } finally {
      p.dispose();
    }
  });

  test("disposed objects throw; dispose twice is harmless; Symbol.dispose where defined", () => {
    const t2 = loadTeacher(eg, "teacher-masked");
    const out = t2.forward("abc", { probs: true });
    const cap = out.toCapture();
    const p = eg.Predictor.create("window");
    const objects = [
      ["Teacher", t2, () => t2.forward("abc")],
      ["TeacherOutput", out, () => out.queries(0, 0)],
      ["Capture", cap, () => cap.goldGraph(0, 0, 0)],
      ["Predictor", p, () => p.serialize()],
    ];
    for (const [what, obj, use] of objects) {
      use();
      assert.equal(typeof obj.dispose, "function", `${what}.dispose`);
      if (typeof Symbol.dispose === "symbol") assert.equal(typeof obj[Symbol.dispose], "function", `${what}[Symbol.dispose]`);
      obj.dispose();
      thrown(use, `${what} used after dispose()`);
      obj.dispose();
    }
    // eg.evaluate with a disposed predictor or capture throws too.
    const live = eg.Predictor.create("window");
    const liveCap = eg.Capture.fromFiles(capFiles);
    thrown(() => eg.evaluate(p, liveCap), "evaluate with a disposed predictor");
    thrown(() => eg.evaluate(live, cap), "evaluate on a disposed capture");
    live.dispose();
    liveCap.dispose();
    if (typeof Symbol.dispose === "symbol") {
      const p2 = eg.Predictor.create("global");
      p2[Symbol.dispose]();
      thrown(() => p2.serialize(), "Predictor used after [Symbol.dispose]()");
    }
  });

  test("`using` disposes at the end of the block (where the runtime has explicit resource management)", (t) => {
    let run;
    try {
      run = new Function("eg", "let kept; { using p = eg.Predictor.create('window'); kept = p; p.serialize(); } return kept;");
    } catch (e) {
      if (!(e instanceof SyntaxError)) throw e;
      t.skip(`node ${process.versions.node} has no \`using\` declarations`);
      return;
    }
    const p = run(eg);
    thrown(() => p.serialize(), "Predictor used after its using block");
  });
});
