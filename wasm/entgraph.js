// entgraph: the JavaScript package (docs/JAVASCRIPT.md).
//
// A thin layer over the embind module (entgraph_core.js): it checks and
// converts JavaScript arguments, turns the core's error slot into thrown
// Errors carrying the core's message, and owns the wasm objects (Teacher,
// TeacherOutput, Capture, Predictor) behind dispose().
import * as render from "./render.js";
import { entgraphError } from "./errors.js";
import { fetchBytes, fetchText, inside, locate, readPlace, shown } from "./files.js";

export { render, fetchBytes, fetchText };

// Loads the WebAssembly module (embedded in entgraph_core.js) and returns the API.
// threads: 1 (the default), a whole number, or "auto" (the browser's
// navigator.hardwareConcurrency, at most 16). More than one runs the threaded
// module (entgraph_core_threads.js, a Web Worker per extra thread), which
// needs shared memory: a cross-origin isolated page (COOP/COEP headers) or a
// worker of one. Anywhere else the package runs on one thread; eg.threads is
// the count in use and eg.threadsNote says, in words, why only one.
export async function loadEntgraph({ threads = 1 } = {}) {
  const wanted = threadCount(threads);
  let note = wanted > 1 ? threadsUnavailable() : "one thread was asked for (loadEntgraph({ threads }))";
  if (!note) {
    try {
      const { default: createThreaded } = await import("./entgraph_core_threads.js");
      const core = await createThreaded({ entgraphWorkers: wanted - 1 });
      core.setNumThreads(wanted);
      const error = core.takeError();
      if (error) throw entgraphError(error.message, error.code);
      return withThreads(new Entgraph(core), wanted, "");
    } catch (err) {
      note = `the threaded module did not start (${err?.message ?? err})`;
    }
  }
  // Imported only here, so that a threaded load does not also fetch the one-thread module.
  const { default: createEntgraphCore } = await import("./entgraph_core.js");
  return withThreads(new Entgraph(await createEntgraphCore()), 1, note);
}

const MAX_AUTO_THREADS = 16;
const MAX_THREADS = 64;

function threadCount(threads) {
  if (threads === "auto") {
    const cores = globalThis.navigator?.hardwareConcurrency;
    return Number.isInteger(cores) && cores > 0 ? Math.min(cores, MAX_AUTO_THREADS) : 1;
  }
  if (typeof threads !== "number" || !Number.isInteger(threads) || threads < 1 || threads > MAX_THREADS)
    throw entgraphError(`threads: expected a whole number from 1 to ${MAX_THREADS} or "auto" (got ${describe(threads)})`);
  return threads;
}

// Why this context cannot run the threaded module ("" if it can).
function threadsUnavailable() {
  if (typeof process === "object" && typeof process.versions?.node === "string")
    return "node: the threaded module starts its threads as Web Workers, which emscripten 3.1.6's ES module output cannot do under node";
  // Browsers hide SharedArrayBuffer itself from a page that is not isolated.
  if (globalThis.crossOriginIsolated !== true)
    return "the page is not cross-origin isolated (COOP/COEP headers missing), so shared memory is not allowed";
  if (typeof SharedArrayBuffer !== "function") return "this browser has no SharedArrayBuffer";
  if (typeof Worker !== "function") return "this context cannot start Web Workers";
  return "";
}

function withThreads(eg, threads, note) {
  return Object.defineProperties(eg, {
    threads: { value: threads, enumerable: true },
    threadsNote: { value: note, enumerable: true },
  });
}

// ---- argument checks -------------------------------------------------------

function floats(value, name) {
  if (value instanceof Float32Array) return value;
  if (Array.isArray(value) || ArrayBuffer.isView(value)) return Float32Array.from(value);
  throw entgraphError(`${name}: expected a Float32Array (got ${describe(value)})`);
}

function bytes(value, name) {
  if (value instanceof Uint8Array) return value;
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  throw entgraphError(`${name}: expected a Uint8Array or ArrayBuffer (got ${describe(value)})`);
}

function count(value, name) {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0)
    throw entgraphError(`${name}: expected a whole number >= 0 (got ${describe(value)})`);
  return value;
}

function number(value, name) {
  if (typeof value !== "number" || Number.isNaN(value)) throw entgraphError(`${name}: expected a number (got ${describe(value)})`);
  return value;
}

// A whole number >= 1 (a block's rows).
function positive(value, name) {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1)
    throw entgraphError(`${name}: expected a whole number >= 1 (got ${describe(value)})`);
  return value;
}

// Per-sequence lengths: an Int32Array or an array of whole numbers (the core
// checks each against its range); null when not given.
function lengths(value, name) {
  if (value === undefined || value === null) return null;
  if (Array.isArray(value) || ArrayBuffer.isView(value)) return value;
  throw entgraphError(`${name}: expected an Int32Array or an array of whole numbers (got ${describe(value)})`);
}

// [q, k, v, ...sizes] of an attention call with gradOut after v, as the backward calls take them.
function withGradOut([q, k, v, ...sizes], { gradOut }) {
  return [q, k, v, floats(gradOut, "gradOut"), ...sizes];
}

function isObject(value) {
  return value !== null && typeof value === "object";
}

// A string argument, well-formed: each lone surrogate becomes U+FFFD, as
// TextEncoder encodes it. Embind's UTF-16 -> UTF-8 conversion pairs a high
// surrogate with whatever unit follows it, so a lone one would swallow the
// next character.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;
function text(value, name) {
  if (typeof value !== "string") throw entgraphError(`${name}: expected a string (got ${describe(value)})`);
  return value.replace(LONE_SURROGATE, "\ufffd");
}

// The transforms the package exposes (the core's others need spans or
// bounds): the core's list, [{name, kind, parameter}] (Entgraph's constructor).
// Throws unless `value` names one of them.
function transformName(transforms, value, name) {
  if (!transforms.some((t) => t.name === text(value, name))) {
    const names = transforms.map((t) => t.name);
    throw entgraphError(`${name}: unknown transform '${value}' (expected ${names.slice(0, -1).join(", ")} or ${names.at(-1)})`);
  }
  return value;
}

function describe(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (ArrayBuffer.isView(value)) return `a ${value.constructor.name}`;
  return typeof value === "object" ? `a ${value.constructor?.name ?? "object"}` : `${typeof value} ${String(value)}`;
}

// Settings as the core reads them: strings ("4", "0.5", "true").
function settingsText(settings, name) {
  if (settings === undefined) return "{}";
  if (settings === null || typeof settings !== "object" || Array.isArray(settings))
    throw entgraphError(`${name}: expected an object of settings (got ${describe(settings)})`);
  const out = {};
  for (const [key, value] of Object.entries(settings)) {
    if (!["number", "string", "boolean"].includes(typeof value))
      throw entgraphError(`${name}.${key}: expected a number or a string (got ${describe(value)})`);
    out[key] = String(value);
  }
  return JSON.stringify(out);
}

// One short, visible label per byte token of a text: a space is "␣", a
// newline "↵", a carriage return "⏎", a tab "⇥", other control bytes "¿"; a
// multi-byte character labels its first byte and its continuation bytes get
// "·" (a malformed sequence gets "¿").
const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder();
function tokenLabels(string) {
  const bytes = utf8Encoder.encode(string);
  const special = { 0x20: "␣", 0x0a: "↵", 0x0d: "⏎", 0x09: "⇥" };
  const labels = new Array(bytes.length);
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i];
    if (special[b]) labels[i] = special[b];
    else if (b < 0x20 || b === 0x7f) labels[i] = "¿";
    else if (b < 0x80) labels[i] = String.fromCharCode(b);
    else if ((b & 0xc0) === 0x80) labels[i] = "·";
    else {
      const length = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
      const ch = utf8Decoder.decode(bytes.subarray(i, Math.min(bytes.length, i + length)));
      labels[i] = ch.length > 0 && !ch.includes("\ufffd") ? ch : "¿";
    }
  }
  return labels;
}

// ---- the core's messages in the API's words ---------------------------------

// The core's messages name C++ things: the function that failed ("Teacher::forward:
// text is empty"), its options ("options.transform.alpha") and helpers ("split
// it with split_text"). Those words are right for the C++ API and the CLI, so
// the core keeps them, and hands each message over in parts (entgraph::Message):
// here the C++ locations (`where`) give way to the JavaScript call that failed,
// each C++ name (`name`) becomes its JavaScript name, and the words of C++'s
// JSON library about itself (`cpp_detail`) are left out. No message is read.

// C++ names the package spells otherwise; any other name stays as it is.
const JS_NAMES = new Map([
  ["ForwardOptions::attention_probs", "forward(text, { probs: true }) records them"],
  ["ForwardOptions::logits was false", "forward(text, { logits: false }) skips them"],
  ["ForwardOptions::layers", "layers"],
  ["split_text", "splitText"],
  ["max_bytes", "maxBytes"],
  ["extra_window", "extraWindow"],
  ["extra_global", "extraGlobal"],
  ["transform.k", "topk"],
  ["q.rows", "queries"],
  ["k.rows", "keys"],
  ["q.cols", "dim"],
  ["v.cols", "valueDim"],
  ["head_dim", "headDim"],
  ["grad_out", "gradOut"],
  ["q.batch", "batch"],
  ["q.heads", "heads"],
  ["k.heads", "kvHeads"],
  ["query_lengths", "queryLengths"],
  ["key_lengths", "keyLengths"],
]);
// The package's options are one flat object: options.attention.transform.alpha is alpha.
const CPP_OPTION_PREFIXES = ["options.attention.", "options."];

function jsName(cppName) {
  let name = cppName;
  for (const prefix of CPP_OPTION_PREFIXES) if (name.startsWith(prefix)) name = name.slice(prefix.length);
  if (JS_NAMES.has(name)) return JS_NAMES.get(name);
  return name.startsWith("transform.") ? name.slice("transform.".length) : name;
}

// The words of the core's message (parts: {role, text}) for JavaScript, to
// follow the call that failed; transforms: the package's ({name, kind}). A
// transform's kind names it in C++ and is the op of its checks
// ("topk_softmax: k must be at least 1"): it stays, as its name here.
function jsErrorWords(parts, transforms) {
  const transformName = (kind) => transforms.find((t) => t.kind === kind)?.name;
  let words = "";
  for (const { role, text } of parts) {
    if (role === "name") words += transformName(text) ?? jsName(text);
    else if (role === "text") words += text;
    else if (role === "where" && transformName(text) !== undefined) words += `${transformName(text)}: `;
    // Any other "where", and "cpp_detail": C++'s own words, not the package's.
  }
  return words;
}

// ---- objects that own wasm memory ------------------------------------------

// Frees a handle whose owner was garbage-collected without dispose(); a
// safety net only: wasm memory is not something the collector sees.
const finalizer =
  typeof FinalizationRegistry === "function" ? new FinalizationRegistry((handle) => handle.delete()) : null;

class Owned {
  #handle;
  #what;
  constructor(handle, what) {
    this.#handle = handle;
    this.#what = what;
    finalizer?.register(this, handle, this);
  }
  // The embind handle; throws once disposed.
  get handle() {
    if (this.#handle === null) throw entgraphError(`${this.#what}: used after dispose()`);
    return this.#handle;
  }
  get disposed() {
    return this.#handle === null;
  }
  dispose() {
    if (this.#handle === null) return;
    finalizer?.unregister(this);
    this.#handle.delete();
    this.#handle = null;
  }
}
if (typeof Symbol.dispose === "symbol") Owned.prototype[Symbol.dispose] = function () { this.dispose(); };

// Each loaded package (Entgraph) has its own subclass of each class below,
// whose static `pkg` holds that package's wasm core, its error check and its
// classes: objects of one package call only its core.
function bound(cls, pkg) {
  const sub = class extends cls {};
  Object.defineProperty(sub, "name", { value: cls.name });
  sub.pkg = pkg;
  // Static constructors work detached too (const { create } = eg.Predictor).
  for (const key of Object.getOwnPropertyNames(cls))
    if (typeof cls[key] === "function" && key !== "prototype") sub[key] = cls[key].bind(sub);
  return sub;
}
// The package of an object of the classes below.
function packageOf(object) {
  return object.constructor.pkg;
}
// result, unless the last call of the object's package failed (Entgraph's #checked).
function check(object, result, call) {
  return packageOf(object).checked(result, call);
}

class Capture extends Owned {
  constructor(handle) {
    super(handle, "Capture");
    this.layers = check(this, handle.layers(), "Capture");
    this.heads = check(this, handle.heads(), "Capture");
    this.headDim = check(this, handle.headDim(), "Capture");
    this.lengths = check(this, handle.lengths(), "Capture");
    this.texts = check(this, handle.texts(), "Capture");
  }
  // files: {name: Uint8Array | ArrayBuffer | string}, as in a capture folder.
  static fromFiles(files) {
    if (files === null || typeof files !== "object") throw entgraphError(`files: expected an object of files (got ${describe(files)})`);
    const converted = {};
    for (const [name, content] of Object.entries(files))
      converted[name] = typeof content === "string" ? content : bytes(content, `files['${name}']`);
    return new this(this.pkg.checked(this.pkg.core.Capture.fromFiles(converted), "Capture.fromFiles"));
  }
  toFiles({ dtype = "float32" } = {}) {
    return check(this, this.handle.toFiles(text(dtype, "dtype")), "Capture.toFiles");
  }
  head(layer, head) {
    return check(this, this.handle.head(count(layer, "layer"), count(head, "head")), "Capture.head");
  }
  queries(layer, head, sequence = 0) {
    return check(this, this.handle.queries(count(layer, "layer"), count(head, "head"), count(sequence, "sequence")), "Capture.queries");
  }
  keys(layer, head, sequence = 0) {
    return check(this, this.handle.keys(count(layer, "layer"), count(head, "head"), count(sequence, "sequence")), "Capture.keys");
  }
  values(layer, head, sequence = 0) {
    return check(this, this.handle.values(count(layer, "layer"), count(head, "head"), count(sequence, "sequence")), "Capture.values");
  }
  goldGraph(layer, head, sequence = 0) {
    return check(this, this.handle.goldGraph(count(layer, "layer"), count(head, "head"), count(sequence, "sequence")), "Capture.goldGraph");
  }
}

class TeacherOutput extends Owned {
  constructor(handle) {
    super(handle, "TeacherOutput");
    this.layers = check(this, handle.layers(), "TeacherOutput");
    this.heads = check(this, handle.heads(), "TeacherOutput");
    this.tokens = check(this, handle.tokens(), "TeacherOutput");
    this.headDim = check(this, handle.headDim(), "TeacherOutput");
    this.alpha = check(this, handle.alpha(), "TeacherOutput");
    this.causal = check(this, handle.causal(), "TeacherOutput");
    this.scale = check(this, handle.scale(), "TeacherOutput");
    this.text = check(this, handle.text(), "TeacherOutput");
    this.tokenLabels = tokenLabels(this.text);
  }
  #head(name, layer, head) {
    return check(this, this.handle[name](count(layer, "layer"), count(head, "head")), `TeacherOutput.${name}`);
  }
  queries(layer, head) { return this.#head("queries", layer, head); }
  keys(layer, head) { return this.#head("keys", layer, head); }
  values(layer, head) { return this.#head("values", layer, head); }
  attention(layer, head) { return this.#head("attention", layer, head); }
  scores(layer, head) { return this.#head("scores", layer, head); }
  probs(layer, head) { return this.#head("probs", layer, head); }
  goldGraph(layer, head) { return this.#head("goldGraph", layer, head); }
  // Heads as cells (eg.cellBits) of the recorded weights and of a predictor's
  // graph, with compareGraphs' metrics: one call, no weights copied out.
  graphCells({ predictor = null, heads = null, gold = "weights" } = {}) {
    const call = "TeacherOutput.graphCells";
    if (predictor !== null && !(predictor instanceof Predictor))
      throw entgraphError(`${call}: predictor: expected a Predictor or null (got ${describe(predictor)})`);
    if (heads !== null && !Array.isArray(heads) && !ArrayBuffer.isView(heads))
      throw entgraphError(`${call}: heads: expected an array of head indices or null (got ${describe(heads)})`);
    if (gold !== "weights" && gold !== "graph") throw entgraphError(`${call}: gold: expected "weights" or "graph" (got ${describe(gold)})`);
    const list = heads === null ? null : Array.from(heads, (h, i) => count(h, `heads[${i}]`));
    return check(this, this.handle.graphCells(predictor === null ? null : predictor.handle, list, gold === "graph"), call);
  }
  logits() { return check(this, this.handle.logits(), "TeacherOutput.logits"); }
  toCapture() {
    const { Capture: PackageCapture } = packageOf(this);
    return new PackageCapture(check(this, this.handle.toCapture(), "TeacherOutput.toCapture"));
  }
}

class Teacher extends Owned {
  #config;
  constructor(handle) {
    super(handle, "Teacher");
    this.#config = JSON.parse(check(this, handle.config(), "Teacher"));
  }
  // configJson: the text of config.json; weights: the bytes of its safetensors file.
  static fromFiles(configJson, weights) {
    return new this(this.pkg.checked(this.pkg.core.Teacher.fromFiles(text(configJson, "configJson"), bytes(weights, "weights")), "Teacher.fromFiles"));
  }
  get config() { return { ...this.#config }; }
  // probs: record every head's weights; logits: false stops after the last
  // layer's attention (the heads only, about a sixth less work); layers: k
  // runs the first k layers only (0: all), their heads bit-identical.
  forward(string, { probs = false, logits = true, layers = 0 } = {}) {
    const { TeacherOutput: PackageTeacherOutput } = packageOf(this);
    return new PackageTeacherOutput(check(this, this.handle.forward(text(string, "text"), Boolean(probs), Boolean(logits),
                                                                count(layers, "layers")), "Teacher.forward"));
  }
  capture(texts) {
    if (!Array.isArray(texts)) throw entgraphError(`texts: expected an array of strings (got ${describe(texts)})`);
    const wellFormed = texts.map((t, i) => text(t, `texts[${i}]`));
    const { Capture: PackageCapture } = packageOf(this);
    return new PackageCapture(check(this, this.handle.capture(wellFormed), "Teacher.capture"));
  }
}

class Predictor extends Owned {
  constructor(handle) {
    super(handle, "Predictor");
    this.method = check(this, handle.method(), "Predictor");
    this.learned = check(this, handle.learned(), "Predictor");
  }
  static create(method, settings = {}) {
    return new this(this.pkg.checked(this.pkg.core.Predictor.create(text(method, "method"), settingsText(settings, "settings")), "Predictor.create"));
  }
  // A parameter file written by `entgraph fit` or serialize().
  static load(json) {
    return new this(this.pkg.checked(this.pkg.core.Predictor.load(text(json, "json")), "Predictor.load"));
  }
  get settings() { return JSON.parse(check(this, this.handle.settings(), "Predictor.settings")); }
  fit(capture, { seed = 0 } = {}) {
    if (!(capture instanceof Capture)) throw entgraphError(`capture: expected a Capture (got ${describe(capture)})`);
    check(this, this.handle.fit(capture.handle, count(seed, "seed")), "Predictor.fit");
    return this;
  }
  predict(q, k, { queries, keys, dim, layer = 0, head = 0, causal = false } = {}) {
    return check(this, this.handle.predict(floats(q, "q"), floats(k, "k"), count(queries, "queries"), count(keys, "keys"),
                                       count(dim, "dim"), count(layer, "layer"), count(head, "head"), Boolean(causal)),
                   "Predictor.predict");
  }
  setUnionPatterns(extraWindow = -1, extraGlobal = 0) {
    check(this, this.handle.setUnionPatterns(number(extraWindow, "extraWindow"), count(extraGlobal, "extraGlobal")), "Predictor.setUnionPatterns");
    return this;
  }
  serialize() { return check(this, this.handle.serialize(), "Predictor.serialize"); }
}

// ---- the API -----------------------------------------------------------------

class Entgraph {
  #core;
  #transforms;

  constructor(core) {
    this.#core = core;
    const checked = (result, call) => this.#checked(result, call);

    this.render = render;
    this.version = checked(core.version(), "loadEntgraph");
    // The bits of TeacherOutput.graphCells' cells (entgraph/graph_cells.hpp).
    this.cellBits = Object.freeze({ allowed: 1, gold: 2, predicted: 4 });
    this.#transforms = checked(core.transforms(), "loadEntgraph");
    this.transformNames = this.#transforms.map((t) => t.name);
    this.transforms = Object.freeze(this.#transforms.map((t) => Object.freeze({ ...t })));
    this.predictorMethods = checked(core.predictorMethods(), "loadEntgraph");
    this.defaultWindows = checked(core.defaultWindows(), "loadEntgraph");

    // This package's classes: the module's, bound to its core (packageOf).
    const pkg = { core, checked };
    for (const cls of [Capture, TeacherOutput, Teacher, Predictor]) pkg[cls.name] = bound(cls, pkg);
    this.Capture = pkg.Capture;
    this.TeacherOutput = pkg.TeacherOutput;
    this.Teacher = pkg.Teacher;
    this.Predictor = pkg.Predictor;
  }

  // Throws the core's message if the last call failed (freeing what it returned),
  // worded for JavaScript (jsErrorWords) and led by the call that failed.
  #checked(result, call) {
    const error = this.#core.takeError();
    if (error) {
      if (result && typeof result.delete === "function") result.delete();
      const words = jsErrorWords(error.parts, this.#transforms ?? []);
      throw entgraphError(`${call}: ${words}`, error.code, words);
    }
    return result;
  }

  get isa() { return this.#checked(this.#core.isa(), "isa"); }
  // "reference" or "simd128": which kernels run (for comparisons).
  setIsa(name) { this.#checked(this.#core.setIsa(text(name, "isa")), "setIsa"); }
  heapBytes() { return this.#core.heapBytes(); }
  allocatedBytes() { return this.#core.allocatedBytes(); }

  // alpha is required where it is the transform's parameter ("entmax", as the CLI's --alpha).
  #alpha(name, alpha) {
    if (alpha === undefined && this.#transforms.some((t) => t.name === name && t.parameter === "alpha"))
      throw entgraphError(`alpha: required for ${name} (1 <= alpha <= 1000)`);
    return alpha === undefined ? 1.5 : number(alpha, "alpha");
  }

  #transformName(value, name) { return transformName(this.#transforms, value, name); }

  transform(name, scores, { cols, alpha, k = 0, mask } = {}) {
    const z = floats(scores, "scores");
    const c = cols === undefined ? z.length : count(cols, "cols");
    if (c === 0 || z.length % c !== 0) throw entgraphError(`cols: ${c} does not divide the ${z.length} scores`);
    const m = mask === undefined || mask === null ? null : bytes(mask, "mask");
    return this.#checked(this.#core.transform(this.#transformName(name, "name"), z, z.length / c, c, this.#alpha(name, alpha), count(k, "k"), m),
                        "transform");
  }

  transformBackward(name, probs, gradProbs, { cols, alpha, k = 0 } = {}) {
    const p = floats(probs, "probs");
    const c = cols === undefined ? p.length : count(cols, "cols");
    if (c === 0 || p.length % c !== 0) throw entgraphError(`cols: ${c} does not divide the ${p.length} probs`);
    return this.#checked(this.#core.transformBackward(this.#transformName(name, "name"), p, floats(gradProbs, "gradProbs"), p.length / c, c,
                                                      this.#alpha(name, alpha), count(k, "k")),
                        "transformBackward");
  }

  #heads({ q, k, v, queries, keys, dim, valueDim = dim }) {
    return [floats(q, "q"), floats(k, "k"), floats(v, "v"), count(queries, "queries"), count(keys, "keys"), count(dim, "dim"),
            count(valueDim, "valueDim")];
  }

  // [transform, alpha, topk, causal, scale]: the options every attention call takes.
  #attentionOptions({ transform = "entmax15", alpha = 1.5, topk = 0, causal = false, scale = 0 }) {
    return [this.#transformName(transform, "transform"), number(alpha, "alpha"), count(topk, "topk"), Boolean(causal),
            number(scale, "scale")];
  }

  attention(options) {
    return this.#checked(this.#core.attention(...this.#heads(options), ...this.#attentionOptions(options), Boolean(options.probs)),
                        "attention");
  }

  // dL/dq, dL/dk, dL/dv of attention() for dL/dout = gradOut (queries x valueDim), as the core's
  // attention_backward (P recomputed, nothing kept from the forward).
  attentionBackward(options) {
    return this.#checked(this.#core.attentionBackward(...withGradOut(this.#heads(options), options), ...this.#attentionOptions(options)),
                        "attentionBackward");
  }

  // mode: "fast" (the graph's edges only), "certify" (the same output, and a proof per row that nothing
  // left out has weight, or a bound on the weight it misses) or "exact" (bound and repair: every row equals
  // dense attention).
  // settled per row: 0 unsettled, 1 by the graph alone, 2 repaired, 3 dense (graph_attention.hpp);
  // missedMass per row: a bound on the weight the row misses, NaN where unknown.
  graphAttention(options) {
    const { graph, mode = "fast" } = options;
    for (const old of ["certify", "recomputeUncertified"])
      if (options[old] !== undefined)
        throw entgraphError(`graphAttention: ${old} is gone; use mode: "fast", "certify" or "exact"`);
    return this.#checked(this.#core.graphAttention(...this.#heads(options), graph, ...this.#attentionOptions(options),
                                                   text(mode, "mode")),
                        "graphAttention");
  }

  // ---- batched and block-sparse attention (batched_attention.hpp, block_sparse_attention.hpp) ----

  // [q, k, v, batch, heads, kvHeads, queries, keys, dim, valueDim]: contiguous [batch, heads, rows, cols]
  // Float32Arrays, q (batch, heads, queries, dim), k (batch, kvHeads, keys, dim), v (batch, kvHeads, keys, valueDim).
  #batch({ q, k, v, batch, heads, kvHeads = heads, queries, keys, dim, valueDim = dim }) {
    return [floats(q, "q"), floats(k, "k"), floats(v, "v"), count(batch, "batch"), count(heads, "heads"),
            count(kvHeads, "kvHeads"), count(queries, "queries"), count(keys, "keys"), count(dim, "dim"),
            count(valueDim, "valueDim")];
  }

  #batchOptions(options) {
    return [...this.#attentionOptions(options), lengths(options.queryLengths, "queryLengths"),
            lengths(options.keyLengths, "keyLengths")];
  }

  // Every sequence and query head at once: query head h reads key/value head floor(h / (heads / kvHeads));
  // queryLengths / keyLengths (one per sequence) leave rows past them zero and keys past them unseen.
  batchedAttention(options) {
    return this.#checked(this.#core.batchedAttention(...this.#batch(options), ...this.#batchOptions(options)), "batchedAttention");
  }

  // Its gradients for dL/dout = gradOut (batch, heads, queries, valueDim); a key/value head's are the float32
  // sum, in head order, of those of the query heads that share it.
  batchedAttentionBackward(options) {
    return this.#checked(this.#core.batchedAttentionBackward(...withGradOut(this.#batch(options), options), ...this.#batchOptions(options)),
                        "batchedAttentionBackward");
  }

  // Batched attention on the key blocks of a block graph ({ batch, heads, queries, keys, queryBlock, keyBlock,
  // offsets, blocks }; batch or heads 1: shared by every sequence or head).
  blockSparseAttention(options) {
    return this.#checked(this.#core.blockSparseAttention(...this.#batch(options), options.graph, ...this.#batchOptions(options)),
                        "blockSparseAttention");
  }

  blockSparseAttentionBackward(options) {
    return this.#checked(this.#core.blockSparseAttentionBackward(...withGradOut(this.#batch(options), options), options.graph,
                                                                 ...this.#batchOptions(options)),
                        "blockSparseAttentionBackward");
  }

  // The query x key blocks holding an edge of a key-level graph (one Graph: a block graph every sequence
  // and head shares), or of graphs[b * heads + h], all of one size.
  blockGraph(graphs, { queryBlock = 64, keyBlock = 64, batch = 1, heads } = {}) {
    const single = !Array.isArray(graphs);
    const b = count(batch, "batch");
    const h = heads === undefined ? (single ? 1 : b > 0 ? Math.floor(graphs.length / b) : 0) : count(heads, "heads");
    return this.#checked(this.#core.blockGraphCover(graphs, single, b, h, positive(queryBlock, "queryBlock"),
                                                    positive(keyBlock, "keyBlock")),
                        "blockGraph");
  }

  // Every block of batch x heads graphs of queries x keys; causal: the blocks holding a pair the causal
  // rule allows (key j <= query i + keys - queries).
  fullBlockGraph({ batch = 1, heads = 1, queries, keys, queryBlock = 64, keyBlock = 64, causal = false } = {}) {
    return this.#checked(this.#core.blockGraphFull(count(batch, "batch"), count(heads, "heads"), count(queries, "queries"),
                                                   count(keys, "keys"), positive(queryBlock, "queryBlock"),
                                                   positive(keyBlock, "keyBlock"), Boolean(causal)),
                        "fullBlockGraph");
  }

  // Graph (sequence, head) of a block graph at key level over its first queries x keys: every key of every kept block.
  expandBlockGraph(graph, { sequence = 0, head = 0, queries, keys } = {}) {
    if (!isObject(graph))
      throw entgraphError(`graph: not a block graph (expected {batch, heads, queries, keys, queryBlock, keyBlock, offsets, blocks})`);
    return this.#checked(this.#core.blockGraphExpand(graph, count(sequence, "sequence"), count(head, "head"),
                                                     count(queries ?? graph.queries, "queries"), count(keys ?? graph.keys, "keys")),
                        "expandBlockGraph");
  }

  goldGraph(q, k, { queries, keys, dim, alpha = 1.5, causal = false, scale } = {}) {
    const s = scale === undefined ? 1 / Math.sqrt(count(dim, "dim")) : number(scale, "scale");
    return this.#checked(this.#core.goldGraph(floats(q, "q"), floats(k, "k"), count(queries, "queries"), count(keys, "keys"),
                                              count(dim, "dim"), number(alpha, "alpha"), Boolean(causal), s),
                        "goldGraph");
  }

  compareGraphs(predicted, gold, causal = false) {
    return this.#checked(this.#core.compareGraphs(predicted, gold, Boolean(causal)), "compareGraphs");
  }

  graphUnion(a, b) { return this.#checked(this.#core.graphUnion(a, b), "graphUnion"); }

  splitText(string, maxBytes) { return this.#checked(this.#core.splitText(text(string, "text"), count(maxBytes, "maxBytes")), "splitText"); }

  // ---- teachers and predictors from a folder or a URL (files.js) -------------

  // A file's bytes or text: a path or file: URL from disk in node and Deno, a URL fetched in a browser.
  fetchBytes(source) { return fetchBytes(source); }
  fetchText(source) { return fetchText(source); }

  // A teacher folder: config.json and model.safetensors (data/teacher-causal, build/web/teachers/causal).
  async loadTeacher(source) {
    const folder = await locate(source, "loadTeacher");
    const [config, weights] = await Promise.all([
      readPlace(await inside(folder, "config.json"), "loadTeacher", folder),
      readPlace(await inside(folder, "model.safetensors"), "loadTeacher", folder),
    ]);
    try {
      return this.Teacher.fromFiles(new TextDecoder().decode(config), weights);
    } catch (e) {
      throw entgraphError(`loadTeacher: ${shown(folder)}: ${e.detail ?? e.message}`, e.code);
    }
  }

  // One parameter file (written by `entgraph fit`, `entgraph sweep --save-params` or serialize()).
  async loadPredictor(source) {
    const place = await locate(source, "loadPredictor");
    const json = new TextDecoder().decode(await readPlace(place, "loadPredictor"));
    try {
      return this.Predictor.load(json);
    } catch (e) {
      throw entgraphError(`loadPredictor: ${shown(place)}: ${e.detail ?? e.message}`, e.code);
    }
  }

  // A folder of parameter files with the index.json manifest that tools/build_web.sh
  // writes (build/web/params/causal): every grid value of every method, or of
  // `methods` only, in the manifest's order, as { method, parameter, value, file,
  // predictor }. A value that shares another's fit names that file as `source`
  // and has its own `settings`; each file is read once.
  async loadPredictors(source, { methods } = {}) {
    const folder = await locate(source, "loadPredictors");
    const indexText = new TextDecoder().decode(await readPlace(await inside(folder, "index.json"), "loadPredictors", folder));
    let manifest;
    try {
      manifest = JSON.parse(indexText);
    } catch (e) {
      throw entgraphError(`loadPredictors: ${shown(folder)}: index.json is not valid JSON (${e.message})`);
    }
    if (manifest?.format !== "entgraph-web-params" || manifest.version !== 1 || !Array.isArray(manifest.methods))
      throw entgraphError(`loadPredictors: ${shown(folder)}: index.json is not a manifest of parameter files ` +
                      `(expected format "entgraph-web-params", version 1, as tools/build_web.sh writes)`);
    const listed = manifest.methods.map((m) => m.method);
    if (methods !== undefined) {
      if (!Array.isArray(methods)) throw entgraphError(`methods: expected an array of method names (got ${describe(methods)})`);
      const unknown = methods.filter((m) => !listed.includes(m));
      if (unknown.length)
        throw entgraphError(`loadPredictors: ${shown(folder)}: index.json lists no ${unknown.join(", ")} (it lists ${listed.join(", ")})`);
    }
    const entries = manifest.methods
      .filter((m) => methods === undefined || methods.includes(m.method))
      .flatMap((m) => m.values.map((v) => ({ method: m.method, parameter: m.parameter, value: v.value, file: v.file,
                                             source: v.source ?? v.file, settings: v.settings })));
    const texts = new Map();  // file -> Promise of its text
    for (const { source: file } of entries)
      if (!texts.has(file))
        texts.set(file, inside(folder, file).then((place) => readPlace(place, "loadPredictors", folder)).then((b) => new TextDecoder().decode(b)));
    const loaded = [];
    try {
      for (const { method, parameter, value, file, source: from, settings } of entries) {
        let json = await texts.get(from);
        if (settings) json = JSON.stringify({ ...JSON.parse(json), settings });
        try {
          loaded.push({ method, parameter, value, file, predictor: this.Predictor.load(json) });
        } catch (e) {
          throw entgraphError(`loadPredictors: ${shown(await inside(folder, from))}: ${e.detail ?? e.message}`, e.code);
        }
      }
    } catch (e) {
      for (const entry of loaded) entry.predictor.dispose();
      throw e;
    }
    return loaded;
  }

  // The report of `entgraph eval`, parsed.
  evaluate(predictor, capture) {
    if (!(predictor instanceof this.Predictor)) throw entgraphError(`predictor: expected a Predictor (got ${describe(predictor)})`);
    if (!(capture instanceof this.Capture)) throw entgraphError(`capture: expected a Capture (got ${describe(capture)})`);
    return JSON.parse(this.#checked(this.#core.evaluate(predictor.handle, capture.handle), "evaluate"));
  }

  // Several predictors on one capture, each also united with each window of
  // `windows` (-1: the prediction alone): the gold graphs once, every
  // (predictor, head) on the package's threads. One report per (predictor,
  // window), predictor-major; window -1 gives evaluate()'s numbers exactly.
  evaluateMany(predictors, capture, { windows = [-1] } = {}) {
    if (!Array.isArray(predictors) || predictors.length === 0)
      throw entgraphError(`predictors: expected a non-empty array of Predictors (got ${describe(predictors)})`);
    const handles = predictors.map((p, i) => {
      if (!(p instanceof this.Predictor)) throw entgraphError(`predictors[${i}]: expected a Predictor (got ${describe(p)})`);
      if (p.disposed) throw entgraphError(`predictors[${i}]: the Predictor was disposed`);
      return p.handle;
    });
    if (!(capture instanceof this.Capture)) throw entgraphError(`capture: expected a Capture (got ${describe(capture)})`);
    if (!Array.isArray(windows) || windows.length === 0)
      throw entgraphError(`windows: expected a non-empty array of whole numbers >= -1 (got ${describe(windows)})`);
    windows.forEach((w, i) => {
      if (typeof w !== "number" || !Number.isInteger(w) || w < -1)
        throw entgraphError(`windows[${i}]: expected a whole number >= -1 (-1: none) (got ${describe(w)})`);
    });
    const numbers = this.#checked(this.#core.evaluateMany(handles, capture.handle, windows), "evaluateMany");
    return Array.from({ length: numbers.length / 3 }, (_, r) => ({
      predictor: Math.floor(r / windows.length), window: windows[r % windows.length],
      recall: numbers[3 * r], sparsity: numbers[3 * r + 1], goldSparsity: numbers[3 * r + 2],
    }));
  }

  defaultGrid(method) { return JSON.parse(this.#checked(this.#core.defaultGrid(text(method, "method")), "defaultGrid")); }

  // grids: method names or {method, parameter, values, settings}; the native `sweep`.
  sweep(grids, train, test, { windows, global = 0 } = {}) {
    if (!Array.isArray(grids)) throw entgraphError(`grids: expected an array (got ${describe(grids)})`);
    for (const [name, c] of [["train", train], ["test", test]])
      if (!(c instanceof this.Capture)) throw entgraphError(`${name}: expected a Capture (got ${describe(c)})`);
    const list = grids.map((g) =>
      typeof g === "string" ? g : { ...g, ...(g.values ? { values: g.values.map(String) } : {}),
                                    ...(g.settings ? { settings: JSON.parse(settingsText(g.settings, "grids[].settings")) } : {}) });
    if (windows !== undefined && !Array.isArray(windows)) throw entgraphError(`windows: expected an array (got ${describe(windows)})`);
    const result = JSON.parse(this.#checked(this.#core.sweep(JSON.stringify(list), train.handle, test.handle,
                                                             JSON.stringify(windows ?? null), count(global, "global")),
                                            "sweep"));
    return {
      goldSparsity: result.gold_sparsity,
      points: result.points.map((p) => ({ method: p.method, parameter: p.parameter, value: p.value, window: p.window,
                                          sparsity: p.sparsity, recall: p.recall, pareto: p.pareto,
                                          fitSeconds: p.fit_seconds, predictSeconds: p.predict_seconds })),
    };
  }

  #points(points) {
    if (!Array.isArray(points)) throw entgraphError(`points: expected an array (got ${describe(points)})`);
    return JSON.stringify(points);
  }

  paretoFront(points) { return this.#checked(this.#core.paretoFront(this.#points(points)), "paretoFront"); }
  recallAtSparsity(points, sparsity) {
    return this.#checked(this.#core.recallAtSparsity(this.#points(points), number(sparsity, "sparsity")), "recallAtSparsity");
  }
  paretoSvg(points, goldSparsity, title = "") {
    return this.#checked(this.#core.paretoSvg(this.#points(points), number(goldSparsity, "goldSparsity"), text(title, "title")), "paretoSvg");
  }
}
