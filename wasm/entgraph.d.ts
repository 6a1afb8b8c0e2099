// entgraph: TypeScript declarations of the JavaScript package (docs/JAVASCRIPT.md).
// [Symbol.dispose] (for `using` declarations) needs TypeScript >= 5.2; this line
// brings its library declarations in whatever "lib" a project sets.
/// <reference lib="esnext.disposable" />
import * as render from "./render.js";
export { render };

/** An attention graph in CSR: row i's keys are indices[offsets[i] .. offsets[i+1]), sorted. */
export interface Graph {
  queries: number;
  keys: number;
  offsets: Uint32Array;
  indices: Uint32Array;
}

/** A predicted graph against the true one (the core's GraphMetrics). */
export interface GraphMetrics {
  gold: number; predicted: number; hits: number; allowed: number; queries: number;
  sparsity: number; goldSparsity: number; recall: number; precision: number;
}

export interface HeadSettings { alpha: number; causal: boolean; scale: number; }

/** The kind of failure: every Error the package throws carries it as `code` (wasm/errors.js). */
export type ErrorCode = "bad_argument" | "bad_value" | "bad_file" | "limit" | "io" | "device_unavailable" |
  "unsupported" | "out_of_memory" | "internal";
export interface EntgraphError extends Error {
  readonly code: ErrorCode;
  /** The message without the call in front ("maxBytes must be >= 1"). */
  readonly detail: string;
}

export type TransformName = "softmax" | "sparsemax" | "entmax15" | "entmax" | "topk";

/** Objects that hold wasm memory. dispose() frees it; using one afterwards throws.
 *  [Symbol.dispose] is dispose(), for `using` (runtimes that define Symbol.dispose). */
export interface Disposable {
  dispose(): void;
  [Symbol.dispose](): void;
  readonly disposed: boolean;
}

/** "fast": the graph's edges only; "certify": the same output and a proof per row that nothing left out
 *  has weight; "exact": bound and repair, every row equals dense attention. */
export type GraphAttentionMode = "fast" | "certify" | "exact";

/** How graphAttention settled each row: 0 unsettled (not proven equal to dense attention; fast and certify
 *  only), 1 by the graph alone, 2 repaired (keys the bounds could not exclude were added), 3 dense (every
 *  allowed key scored). */
export type RowSettlement = 0 | 1 | 2 | 3;

export interface GraphAttentionResult {
  /** queries x valueDim. */
  out: Float32Array;
  /** Per query, a RowSettlement code. */
  settled: Uint8Array;
  /** Rows settled by the graph alone (code 1). */
  graphRows: number;
  /** Rows settled after repair (code 2). */
  repairedRows: number;
  /** Rows computed densely (code 3). */
  denseRows: number;
  /** Allowed (query, key) pairs of the graph whose scores were computed. */
  graphPairs: number;
  /** Pairs scored beyond the graph, by repair (exact mode; 0 otherwise). */
  repairPairs: number;
  /** Pairs whose score was bounded (certify, exact). */
  boundPairs: number;
  /** Fast mode's error (docs/EXACT.md, "Fast mode's error"): per query, an upper bound on the weight dense
   *  attention gives to the allowed keys the row left out; 0 on rows proven exact, NaN where none is known
   *  (mode "fast" on rows that miss a key; "certify" bounds every entmax/sparsemax row, top-k only its proven
   *  rows). */
  missedMass: Float64Array;
  /** Rows whose missedMass is known. */
  boundedRows: number;
  /** Largest and mean missedMass over those rows (NaN when none). */
  maxMissedMass: number;
  meanMissedMass: number;
  /** An upper bound on max |out - dense attention| in exact arithmetic: maxMissedMass times the widest range of
   *  a column of v (max |v| if a row with no graph key misses weight); NaN unless every row has a bound. */
  outputErrorBound: number;
}

/** What every attention call takes besides its arrays. */
export interface AttentionSettings {
  queries: number; keys: number; dim: number;
  /** Columns of v (default: dim). */
  valueDim?: number;
  transform?: TransformName;
  alpha?: number;
  topk?: number;
  /** Key j is visible to query i iff j <= i + (keys - queries); in batched calls per sequence, with its lengths. */
  causal?: boolean;
  /** 0 (default): 1 / sqrt(dim). */
  scale?: number;
}

export interface AttentionInputs extends AttentionSettings {
  q: Float32Array; k: Float32Array; v: Float32Array;
}

/** dL/dq, dL/dk, dL/dv: shaped as q, k and v. */
export interface AttentionGradients {
  gradQ: Float32Array;
  gradK: Float32Array;
  gradV: Float32Array;
}

/** Batched attention's inputs: contiguous row-major [batch, heads, rows, cols] arrays (PyTorch's [B, H, n, d]). */
export interface BatchedAttentionInputs extends AttentionSettings {
  /** batch x heads x queries x dim. */
  q: Float32Array;
  /** batch x kvHeads x keys x dim. */
  k: Float32Array;
  /** batch x kvHeads x keys x valueDim. */
  v: Float32Array;
  batch: number;
  /** Query heads. */
  heads: number;
  /** Key/value heads (default: heads); heads must be a multiple of it: query head h reads key/value head
   *  floor(h / (heads / kvHeads)) (grouped-query attention; 1: multi-query). */
  kvHeads?: number;
  /** One per sequence, 0 .. queries: rows past it are zeros (default: every sequence has all queries). */
  queryLengths?: Int32Array | ArrayLike<number> | null;
  /** One per sequence, 0 .. keys: keys past it are seen by no query. */
  keyLengths?: Int32Array | ArrayLike<number> | null;
}

/** A block-sparse attention graph (the core's BlockGraph): for each of batch x heads graphs of queries x keys,
 *  the key blocks (keyBlock keys each) that each query block (queryBlock queries) attends to. Block row
 *  r = (b * heads + h) * ceil(queries / queryBlock) + I holds blocks[offsets[r] .. offsets[r + 1]), ascending.
 *  batch or heads 1: one graph that every sequence or every head shares. A plain object, nothing to free. */
export interface BlockGraph {
  batch: number; heads: number;
  queries: number; keys: number;
  queryBlock: number; keyBlock: number;
  /** batch x heads x ceil(queries / queryBlock) + 1 entries, offsets[0] = 0. */
  offsets: Uint32Array;
  /** Key block indices, each < ceil(keys / keyBlock). */
  blocks: Uint32Array;
}

export interface PredictOptions {
  queries: number; keys: number; dim: number;
  layer?: number; head?: number; causal?: boolean;
}

export interface EvalHeadReport {
  layer: number; head: number;
  sparsity: number; recall: number; precision: number; gold_sparsity: number;
  gold_edges: number; predicted_edges: number; hits: number;
}
/** The report of `entgraph eval`. */
export interface EvalReport {
  method: string; settings: Record<string, string>;
  sparsity: number; recall: number; gold_sparsity: number; predict_seconds: number;
  heads: EvalHeadReport[];
}

export interface SweepGrid {
  method: string;
  parameter?: string;
  values?: Array<string | number>;
  settings?: Record<string, string | number | boolean>;
}
export interface SweepPoint {
  method: string; parameter: string; value: string; window: number;
  sparsity: number; recall: number; pareto: boolean;
  fitSeconds: number; predictSeconds: number;
}

export declare class Capture implements Disposable {
  private constructor();
  /** The files of a capture folder by name (capture.json, queries.npy, keys.npy, values.npy). */
  static fromFiles(files: Record<string, Uint8Array | ArrayBuffer | string>): Capture;
  toFiles(options?: { dtype?: "float32" | "float16" }): Record<string, Uint8Array>;
  readonly layers: number; readonly heads: number; readonly headDim: number;
  readonly lengths: number[]; readonly texts: string[];
  head(layer: number, head: number): HeadSettings;
  queries(layer: number, head: number, sequence?: number): Float32Array;
  keys(layer: number, head: number, sequence?: number): Float32Array;
  values(layer: number, head: number, sequence?: number): Float32Array;
  goldGraph(layer: number, head: number, sequence?: number): Graph;
  dispose(): void;
  [Symbol.dispose](): void;
  readonly disposed: boolean;
}

export declare class TeacherOutput implements Disposable {
  private constructor();
  readonly layers: number; readonly heads: number; readonly tokens: number; readonly headDim: number;
  readonly alpha: number; readonly causal: boolean; readonly scale: number; readonly text: string;
  /** One printable label per byte token. */
  readonly tokenLabels: string[];
  queries(layer: number, head: number): Float32Array;
  keys(layer: number, head: number): Float32Array;
  values(layer: number, head: number): Float32Array;
  /** The attention output a = P v (before the output projection). */
  attention(layer: number, head: number): Float32Array;
  /** tokens x tokens: scale * q.k, -Infinity where the causal mask forbids. */
  scores(layer: number, head: number): Float32Array;
  /** tokens x tokens entmax weights; needs forward(text, { probs: true }). */
  probs(layer: number, head: number): Float32Array;
  goldGraph(layer: number, head: number): Graph;
  /**
   * Heads as cells: for each head asked (flat index layer * heads + head; all by
   * default), tokens x tokens bytes of Entgraph.cellBits: allowed by the mask, an
   * edge of the true graph, predicted by `predictor` (its union patterns
   * included). The true graph is the support of the recorded weights (gold:
   * "weights", needs forward(text, { probs: true })) or goldGraph's, recomputed
   * from Q and K (gold: "graph"). The metrics are
   * compareGraphs(predicted graph, true graph, causal)'s; coveredRows counts the
   * queries whose every true edge is predicted. One call: the predictor reads Q
   * and K in the wasm heap, and only the cells are copied out.
   */
  graphCells(options?: { predictor?: Predictor | null; heads?: ArrayLike<number> | null; gold?: "weights" | "graph" }): {
    cells: Uint8Array;
    heads: { layer: number; head: number; metrics: GraphMetrics; coveredRows: number }[];
  };
  /** tokens x outputs; throws if forward ran with { logits: false }. */
  logits(): Float32Array;
  toCapture(): Capture;
  dispose(): void;
  [Symbol.dispose](): void;
  readonly disposed: boolean;
}

export interface TeacherConfig {
  name: string; kind: "causal" | "masked"; causal: boolean; vocab: number; outputs: number; maskToken: number;
  context: number; dModel: number; layers: number; heads: number; headDim: number; dMlp: number;
  alpha: number; layerNormEps: number;
}

export declare class Teacher implements Disposable {
  private constructor();
  static fromFiles(configJson: string, weights: Uint8Array | ArrayBuffer): Teacher;
  readonly config: TeacherConfig;
  /**
   * Runs the model on the UTF-8 bytes of text (1 .. context bytes). probs: record
   * every head's weights; logits: false stops after the last layer's attention
   * (every head is there; logits() then throws), about a sixth less work;
   * layers: k runs the first k layers only (0: all; fewer: no logits), whose
   * heads equal the full forward's bit for bit.
   */
  forward(text: string, options?: { probs?: boolean; logits?: boolean; layers?: number }): TeacherOutput;
  capture(texts: string[]): Capture;
  dispose(): void;
  [Symbol.dispose](): void;
  readonly disposed: boolean;
}

export declare class Predictor implements Disposable {
  private constructor();
  static create(method: string, settings?: Record<string, string | number | boolean>): Predictor;
  /** A parameter file written by `entgraph fit` or serialize(). */
  static load(json: string): Predictor;
  readonly method: string;
  readonly learned: boolean;
  readonly settings: Record<string, string>;
  fit(capture: Capture, options?: { seed?: number }): this;
  predict(q: Float32Array, k: Float32Array, options: PredictOptions): Graph;
  setUnionPatterns(extraWindow?: number, extraGlobal?: number): this;
  serialize(): string;
  dispose(): void;
  [Symbol.dispose](): void;
  readonly disposed: boolean;
}

export interface Entgraph {
  readonly version: string;
  /** The bits of TeacherOutput.graphCells' cells. */
  readonly cellBits: { readonly allowed: 1; readonly gold: 2; readonly predicted: 4 };
  readonly isa: string;
  setIsa(name: "reference" | "simd128"): void;
  readonly render: typeof render;
  readonly transformNames: TransformName[];
  /** The same transforms with the core's kind and the parameter each takes (alpha for entmax, k for topk). */
  readonly transforms: ReadonlyArray<{ readonly name: TransformName; readonly kind: string;
                                       readonly parameter: "none" | "alpha" | "k" }>;
  readonly predictorMethods: string[];
  readonly defaultWindows: number[];

  transform(name: TransformName, scores: Float32Array | number[],
            options?: { cols?: number; alpha?: number; k?: number; mask?: Uint8Array }): Float32Array;
  transformBackward(name: TransformName, probs: Float32Array, gradProbs: Float32Array,
                    options?: { cols?: number; alpha?: number; k?: number }): Float32Array;
  attention(inputs: AttentionInputs & { probs?: boolean }): { out: Float32Array; probs?: Float32Array };
  /** Attention on the graph's edges; mode "exact" makes every row equal dense attention (bound and repair).
   *  "certify" and "exact" need a transform with a threshold: softmax throws ("no threshold"). */
  graphAttention(inputs: AttentionInputs & { graph: Graph; mode?: GraphAttentionMode }): GraphAttentionResult;
  /** The gradients of attention() for dL/dout = gradOut (queries x valueDim). */
  attentionBackward(inputs: AttentionInputs & { gradOut: Float32Array }): AttentionGradients;

  /** Every sequence and query head in one call; out is batch x heads x queries x valueDim. */
  batchedAttention(inputs: BatchedAttentionInputs): { out: Float32Array };
  /** Its gradients for gradOut (batch x heads x queries x valueDim); a key/value head's are the float32 sum, in
   *  head order, of those of the query heads that share it. Zeros past the lengths. */
  batchedAttentionBackward(inputs: BatchedAttentionInputs & { gradOut: Float32Array }): AttentionGradients;
  /** Batched attention where each query attends only to the keys of its block row of graph (and what
   *  causal and the lengths allow); a query with no key gets a zero row. Every block kept: batchedAttention. */
  blockSparseAttention(inputs: BatchedAttentionInputs & { graph: BlockGraph }): { out: Float32Array };
  blockSparseAttentionBackward(inputs: BatchedAttentionInputs & { graph: BlockGraph; gradOut: Float32Array }): AttentionGradients;
  /** The blocks holding an edge of a key-level graph (one Graph: batch = heads = 1, shared), or of
   *  graphs[b * heads + h], all of one size (heads defaults to graphs.length / batch). Blocks of 64 by default. */
  blockGraph(graphs: Graph | Graph[],
             options?: { queryBlock?: number; keyBlock?: number; batch?: number; heads?: number }): BlockGraph;
  /** Every block (causal: only those holding a pair j <= i + keys - queries). */
  fullBlockGraph(options: { batch?: number; heads?: number; queries: number; keys: number; queryBlock?: number;
                            keyBlock?: number; causal?: boolean }): BlockGraph;
  /** Graph (sequence, head) at key level over its first queries x keys (default: all): every key of every kept block. */
  expandBlockGraph(graph: BlockGraph, options?: { sequence?: number; head?: number; queries?: number; keys?: number }): Graph;

  goldGraph(q: Float32Array, k: Float32Array,
            options: { queries: number; keys: number; dim: number; alpha?: number; causal?: boolean; scale?: number }): Graph;
  compareGraphs(predicted: Graph, gold: Graph, causal?: boolean): GraphMetrics;
  graphUnion(a: Graph, b: Graph): Graph;
  splitText(text: string, maxBytes: number): string[];

  /** A teacher folder (config.json and model.safetensors): a path or file: URL from disk in node and Deno
   *  (relative: from the current folder), an http(s) URL (relative: to the page) fetched in a browser. */
  loadTeacher(source: FileSource): Promise<Teacher>;
  /** A folder of parameter files with the index.json manifest of tools/build_web.sh: every grid value of
   *  every method (or of `methods`), in the manifest's order. Each predictor is the caller's to dispose. */
  loadPredictors(source: FileSource, options?: { methods?: string[] }): Promise<LoadedPredictor[]>;
  /** One parameter file (entgraph fit, sweep --save-params, Predictor.serialize). */
  loadPredictor(source: FileSource): Promise<Predictor>;
  /** A file's bytes or text from a path or a URL, as loadTeacher reads them. */
  fetchBytes(source: FileSource): Promise<Uint8Array>;
  fetchText(source: FileSource): Promise<string>;

  readonly Teacher: typeof Teacher;
  readonly TeacherOutput: typeof TeacherOutput;
  readonly Capture: typeof Capture;
  readonly Predictor: typeof Predictor;

  evaluate(predictor: Predictor, capture: Capture): EvalReport;
  /** Several predictors on one capture, each also united with each window (-1: the prediction alone);
   *  the gold graphs once, all (predictor, head) pairs on the package's threads. One report per
   *  (predictor, window), predictor-major; window -1 gives evaluate()'s numbers exactly. */
  evaluateMany(predictors: Predictor[], capture: Capture, options?: { windows?: number[] }): EvalManyReport[];
  /** Threads in use (1 unless loadEntgraph({ threads }) asked for more and the context allows shared memory). */
  readonly threads: number;
  /** Why one thread, in words ("" when more than one runs). */
  readonly threadsNote: string;
  defaultGrid(method: string): { method: string; parameter: string; values: string[]; settings: Record<string, string> };
  sweep(grids: Array<string | SweepGrid>, train: Capture, test: Capture,
        options?: { windows?: number[]; global?: number }): { points: SweepPoint[]; goldSparsity: number };
  paretoFront(points: Array<Pick<SweepPoint, "sparsity" | "recall">>): number[];
  recallAtSparsity(points: Array<Pick<SweepPoint, "sparsity" | "recall">>, sparsity: number): number;
  paretoSvg(points: SweepPoint[], goldSparsity: number, title?: string): string;

  /** Bytes of the wasm memory (it grows, never shrinks). */
  heapBytes(): number;
  /** Bytes currently allocated by malloc in the wasm heap. */
  allocatedBytes(): number;
}

/** A path (node, Deno: from disk, relative to the current folder), a file: URL, or an http(s) URL
 *  (fetched; in a browser a relative path is a URL relative to the page). */
export type FileSource = string | URL;

/** One grid value of a manifest (index.json) with its predictor. */
export interface LoadedPredictor {
  method: string;
  /** The setting the grid varies (null for a method without one). */
  parameter: string | null;
  value: string | null;
  /** The manifest's file name of this value (a value sharing another's fit names its own). */
  file: string;
  predictor: Predictor;
}

/** A file's bytes from a path or a URL (see FileSource); a missing file's Error names it and where it looked. */
export declare function fetchBytes(source: FileSource): Promise<Uint8Array>;
/** A file's text (UTF-8) from a path or a URL. */
export declare function fetchText(source: FileSource): Promise<string>;

/** Loads the WebAssembly module (embedded in entgraph_core.js). */
export declare function loadEntgraph(options?: LoadOptions): Promise<Entgraph>;

export interface LoadOptions {
  /** 1 (default), a whole number up to 64, or "auto" (navigator.hardwareConcurrency, at most 16).
   *  More than one needs a cross-origin isolated page (or a worker of one); elsewhere one thread runs
   *  and Entgraph.threadsNote says why. */
  threads?: number | "auto";
}

export interface EvalManyReport {
  /** Index into the predictors given. */
  predictor: number;
  /** The union window (-1: none). */
  window: number;
  recall: number;
  sparsity: number;
  goldSparsity: number;
}
