// entgraph: the JavaScript package (docs/JAVASCRIPT.md).
//
// A thin layer over the embind module (entgraph_core.js): it checks and
// converts JavaScript arguments, turns the core's error slot into thrown
// Errors carrying the core's message, and owns the wasm objects (Teacher,
// TeacherOutput, Capture, Predictor) behind dispose().
import createEntgraphCore from "./entgraph_core.js";
import * as render from "./render.js";

export { render };

// Loads the WebAssembly module (embedded in entgraph_core.js) and returns the API.
export async function loadEntgraph() {
  return new Entgraph(await createEntgraphCore());
}

// ---- argument checks -------------------------------------------------------

function floats(value, name) {
  if (value instanceof Float32Array) return value;
  if (Array.isArray(value) || ArrayBuffer.isView(value)) return Float32Array.from(value);
  throw new Error(`${name}: expected a Float32Array (got ${describe(value)})`);
}

function bytes(value, name) {
  if (value instanceof Uint8Array) return value;
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  throw new Error(`${name}: expected a Uint8Array or ArrayBuffer (got ${describe(value)})`);
}

function count(value, name) {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0)
    throw new Error(`${name}: expected a whole number >= 0 (got ${describe(value)})`);
  return value;
}

function number(value, name) {
  if (typeof value !== "number" || Number.isNaN(value)) throw new Error(`${name}: expected a number (got ${describe(value)})`);
  return value;
}

function text(value, name) {
  if (typeof value !== "string") throw new Error(`${name}: expected a string (got ${describe(value)})`);
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
    throw new Error(`${name}: expected an object of settings (got ${describe(settings)})`);
  const out = {};
  for (const [key, value] of Object.entries(settings)) {
    if (!["number", "string", "boolean"].includes(typeof value))
      throw new Error(`${name}.${key}: expected a number or a string (got ${describe(value)})`);
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
    if (this.#handle === null) throw new Error(`${this.#what}: used after dispose()`);
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

// ---- the API -----------------------------------------------------------------

class Entgraph {
  #core;

  constructor(core) {
    this.#core = core;
    const api = this;
    const checked = (result) => this.#checked(result);

    this.render = render;
    this.version = checked(core.version());
    this.transformNames = ["softmax", "sparsemax", "entmax15", "entmax", "topk"];
    this.predictorMethods = checked(core.predictorMethods());
    this.defaultWindows = checked(core.defaultWindows());

    class Capture extends Owned {
      constructor(handle) {
        super(handle, "Capture");
        this.layers = checked(handle.layers());
        this.heads = checked(handle.heads());
        this.headDim = checked(handle.headDim());
        this.lengths = checked(handle.lengths());
        this.texts = checked(handle.texts());
      }
      // files: {name: Uint8Array | ArrayBuffer | string}, as in a capture folder.
      static fromFiles(files) {
        if (files === null || typeof files !== "object") throw new Error(`files: expected an object of files (got ${describe(files)})`);
        const converted = {};
        for (const [name, content] of Object.entries(files))
          converted[name] = typeof content === "string" ? content : bytes(content, `files['${name}']`);
        return new Capture(api.#checked(core.Capture.fromFiles(converted)));
      }
      toFiles({ dtype = "float32" } = {}) {
        return checked(this.handle.toFiles(text(dtype, "dtype")));
      }
      head(layer, head) {
        return checked(this.handle.head(count(layer, "layer"), count(head, "head")));
      }
      queries(layer, head, sequence = 0) {
        return checked(this.handle.queries(count(layer, "layer"), count(head, "head"), count(sequence, "sequence")));
      }
      keys(layer, head, sequence = 0) {
        return checked(this.handle.keys(count(layer, "layer"), count(head, "head"), count(sequence, "sequence")));
      }
      values(layer, head, sequence = 0) {
        return checked(this.handle.values(count(layer, "layer"), count(head, "head"), count(sequence, "sequence")));
      }
      goldGraph(layer, head, sequence = 0) {
        return checked(this.handle.goldGraph(count(layer, "layer"), count(head, "head"), count(sequence, "sequence")));
      }
    }

    class TeacherOutput extends Owned {
      constructor(handle) {
        super(handle, "TeacherOutput");
        this.layers = checked(handle.layers());
        this.heads = checked(handle.heads());
        this.tokens = checked(handle.tokens());
        this.headDim = checked(handle.headDim());
        this.alpha = checked(handle.alpha());
        this.causal = checked(handle.causal());
        this.scale = checked(handle.scale());
        this.text = checked(handle.text());
        this.tokenLabels = tokenLabels(this.text);
      }
      #head(name, layer, head) {
        return checked(this.handle[name](count(layer, "layer"), count(head, "head")));
      }
      queries(layer, head) { return this.#head("queries", layer, head); }
      keys(layer, head) { return this.#head("keys", layer, head); }
      values(layer, head) { return this.#head("values", layer, head); }
      attention(layer, head) { return this.#head("attention", layer, head); }
      scores(layer, head) { return this.#head("scores", layer, head); }
      probs(layer, head) { return this.#head("probs", layer, head); }
      goldGraph(layer, head) { return this.#head("goldGraph", layer, head); }
      logits() { return checked(this.handle.logits()); }
      toCapture() { return new Capture(checked(this.handle.toCapture())); }
    }

    class Teacher extends Owned {
      #config;
      constructor(handle) {
        super(handle, "Teacher");
        this.#config = JSON.parse(checked(handle.config()));
      }
      // configJson: the text of config.json; weights: the bytes of its safetensors file.
      static fromFiles(configJson, weights) {
        return new Teacher(api.#checked(core.Teacher.fromFiles(text(configJson, "configJson"), bytes(weights, "weights"))));
      }
      get config() { return { ...this.#config }; }
      forward(string, { probs = false } = {}) {
        return new TeacherOutput(checked(this.handle.forward(text(string, "text"), Boolean(probs))));
      }
      capture(texts) {
        if (!Array.isArray(texts)) throw new Error(`texts: expected an array of strings (got ${describe(texts)})`);
        texts.forEach((t, i) => text(t, `texts[${i}]`));
        return new Capture(checked(this.handle.capture(texts)));
      }
    }

    class Predictor extends Owned {
      constructor(handle) {
        super(handle, "Predictor");
        this.method = checked(handle.method());
        this.learned = checked(handle.learned());
      }
      static create(method, settings = {}) {
        return new Predictor(api.#checked(core.Predictor.create(text(method, "method"), settingsText(settings, "settings"))));
      }
      // A parameter file written by `entgraph fit` or serialize().
      static load(json) {
        return new Predictor(api.#checked(core.Predictor.load(text(json, "json"))));
      }
      get settings() { return JSON.parse(checked(this.handle.settings())); }
      fit(capture, { seed = 0 } = {}) {
        if (!(capture instanceof Capture)) throw new Error(`capture: expected a Capture (got ${describe(capture)})`);
        checked(this.handle.fit(capture.handle, count(seed, "seed")));
        return this;
      }
      predict(q, k, { queries, keys, dim, layer = 0, head = 0, causal = false } = {}) {
        return checked(this.handle.predict(floats(q, "q"), floats(k, "k"), count(queries, "queries"), count(keys, "keys"),
                                           count(dim, "dim"), count(layer, "layer"), count(head, "head"), Boolean(causal)));
      }
      setUnionPatterns(extraWindow = -1, extraGlobal = 0) {
        checked(this.handle.setUnionPatterns(number(extraWindow, "extraWindow"), count(extraGlobal, "extraGlobal")));
        return this;
      }
      serialize() { return checked(this.handle.serialize()); }
    }

    this.Capture = Capture;
    this.TeacherOutput = TeacherOutput;
    this.Teacher = Teacher;
    this.Predictor = Predictor;
  }

  // Throws the core's message if the last call failed (freeing what it returned).
  #checked(result) {
    const message = this.#core.takeError();
    if (message) {
      if (result && typeof result.delete === "function") result.delete();
      throw new Error(message);
    }
    return result;
  }

  get isa() { return this.#checked(this.#core.isa()); }
  // "reference" or "simd128": which kernels run (for comparisons).
  setIsa(name) { this.#checked(this.#core.setIsa(text(name, "isa"))); }
  heapBytes() { return this.#core.heapBytes(); }
  allocatedBytes() { return this.#core.allocatedBytes(); }

  // alpha is required for "entmax" (as the CLI's --alpha), k for "topk".
  #alpha(name, alpha) {
    if (alpha === undefined && name === "entmax") throw new Error("alpha: required for entmax (1 <= alpha <= 1000)");
    return alpha === undefined ? 1.5 : number(alpha, "alpha");
  }

  transform(name, scores, { cols, alpha, k = 0, mask } = {}) {
    const z = floats(scores, "scores");
    const c = cols === undefined ? z.length : count(cols, "cols");
    if (c === 0 || z.length % c !== 0) throw new Error(`cols: ${c} does not divide the ${z.length} scores`);
    const m = mask === undefined || mask === null ? null : bytes(mask, "mask");
    return this.#checked(this.#core.transform(text(name, "name"), z, z.length / c, c, this.#alpha(name, alpha), count(k, "k"), m));
  }

  transformBackward(name, probs, gradProbs, { cols, alpha, k = 0 } = {}) {
    const p = floats(probs, "probs");
    const c = cols === undefined ? p.length : count(cols, "cols");
    if (c === 0 || p.length % c !== 0) throw new Error(`cols: ${c} does not divide the ${p.length} probs`);
    return this.#checked(this.#core.transformBackward(text(name, "name"), p, floats(gradProbs, "gradProbs"), p.length / c, c,
                                                      this.#alpha(name, alpha), count(k, "k")));
  }

  #heads({ q, k, v, queries, keys, dim, valueDim = dim }) {
    return [floats(q, "q"), floats(k, "k"), floats(v, "v"), count(queries, "queries"), count(keys, "keys"), count(dim, "dim"),
            count(valueDim, "valueDim")];
  }

  attention(options) {
    const { transform = "entmax15", alpha = 1.5, topk = 0, causal = false, scale = 0, probs = false } = options;
    return this.#checked(this.#core.attention(...this.#heads(options), text(transform, "transform"), number(alpha, "alpha"),
                                              count(topk, "topk"), Boolean(causal), number(scale, "scale"), Boolean(probs)));
  }

  // mode: "fast" (the graph's edges only), "certify" (the same output, and a proof per row that nothing
  // left out has weight) or "exact" (bound and repair: every row equals dense attention).
  // settled per row: 0 unsettled, 1 by the graph alone, 2 repaired, 3 dense (graph_attention.hpp).
  graphAttention(options) {
    const { graph, transform = "entmax15", alpha = 1.5, topk = 0, causal = false, scale = 0, mode = "fast" } = options;
    for (const old of ["certify", "recomputeUncertified"])
      if (options[old] !== undefined)
        throw new Error(`graphAttention: ${old} is gone; use mode: "fast", "certify" or "exact"`);
    return this.#checked(this.#core.graphAttention(...this.#heads(options), graph, text(transform, "transform"),
                                                   number(alpha, "alpha"), count(topk, "topk"), Boolean(causal),
                                                   number(scale, "scale"), text(mode, "mode")));
  }

  goldGraph(q, k, { queries, keys, dim, alpha = 1.5, causal = false, scale } = {}) {
    const s = scale === undefined ? 1 / Math.sqrt(count(dim, "dim")) : number(scale, "scale");
    return this.#checked(this.#core.goldGraph(floats(q, "q"), floats(k, "k"), count(queries, "queries"), count(keys, "keys"),
                                              count(dim, "dim"), number(alpha, "alpha"), Boolean(causal), s));
  }

  compareGraphs(predicted, gold, causal = false) {
    return this.#checked(this.#core.compareGraphs(predicted, gold, Boolean(causal)));
  }

  graphUnion(a, b) { return this.#checked(this.#core.graphUnion(a, b)); }

  splitText(string, maxBytes) { return this.#checked(this.#core.splitText(text(string, "text"), count(maxBytes, "maxBytes"))); }

  // The report of `entgraph eval`, parsed.
  evaluate(predictor, capture) {
    if (!(predictor instanceof this.Predictor)) throw new Error(`predictor: expected a Predictor (got ${describe(predictor)})`);
    if (!(capture instanceof this.Capture)) throw new Error(`capture: expected a Capture (got ${describe(capture)})`);
    return JSON.parse(this.#checked(this.#core.evaluate(predictor.handle, capture.handle)));
  }

  defaultGrid(method) { return JSON.parse(this.#checked(this.#core.defaultGrid(text(method, "method")))); }

  // grids: method names or {method, parameter, values, settings}; the native `sweep`.
  sweep(grids, train, test, { windows, global = 0 } = {}) {
    if (!Array.isArray(grids)) throw new Error(`grids: expected an array (got ${describe(grids)})`);
    for (const [name, c] of [["train", train], ["test", test]])
      if (!(c instanceof this.Capture)) throw new Error(`${name}: expected a Capture (got ${describe(c)})`);
    const list = grids.map((g) =>
      typeof g === "string" ? g : { ...g, ...(g.values ? { values: g.values.map(String) } : {}),
                                    ...(g.settings ? { settings: JSON.parse(settingsText(g.settings, "grids[].settings")) } : {}) });
    if (windows !== undefined && !Array.isArray(windows)) throw new Error(`windows: expected an array (got ${describe(windows)})`);
    const result = JSON.parse(this.#checked(this.#core.sweep(JSON.stringify(list), train.handle, test.handle,
                                                             JSON.stringify(windows ?? null), count(global, "global"))));
    return {
      goldSparsity: result.gold_sparsity,
      points: result.points.map((p) => ({ method: p.method, parameter: p.parameter, value: p.value, window: p.window,
                                          sparsity: p.sparsity, recall: p.recall, pareto: p.pareto,
                                          fitSeconds: p.fit_seconds, predictSeconds: p.predict_seconds })),
    };
  }

  #points(points) {
    if (!Array.isArray(points)) throw new Error(`points: expected an array (got ${describe(points)})`);
    return JSON.stringify(points);
  }

  paretoFront(points) { return this.#checked(this.#core.paretoFront(this.#points(points))); }
  recallAtSparsity(points, sparsity) {
    return this.#checked(this.#core.recallAtSparsity(this.#points(points), number(sparsity, "sparsity")));
  }
  paretoSvg(points, goldSparsity, title = "") {
    return this.#checked(this.#core.paretoSvg(this.#points(points), number(goldSparsity, "goldSparsity"), text(title, "title")));
  }
}
