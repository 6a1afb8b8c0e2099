// entgraph/render: SVG renderers (pure JavaScript, no WebAssembly needed).
import type { Graph, SweepPoint } from "./entgraph.js";

/** The roles of a cell and the figure's ink, as CSS colours: the demo page's palette. */
export declare const colours: {
  readonly hit: string; readonly miss: string; readonly extra: string; readonly predicted: string;
  readonly empty: string; readonly masked: string; readonly grid: string; readonly text: string; readonly muted: string;
};
/** One colour per predictor method (the page's). */
export declare const methodColours: Readonly<Record<string, string>>;
/** A method's colour (grey for a method without one). */
export declare function methodColour(method: string): string;
/** How the page names each predictor method ("Sparsefinder: k-means"). */
export declare const methodLabels: Readonly<Record<string, string>>;
export declare function methodLabel(method: string): string;
/** The words of the page's legends and axes. */
export declare const terms: {
  readonly trueGraph: string; readonly trueEdge: string; readonly trueSparsity: string;
  readonly hit: string; readonly miss: string; readonly extra: string;
  readonly hitMeaning: string; readonly missMeaning: string; readonly extraMeaning: string;
  readonly sparsityAxis: string; readonly recallAxis: string; readonly keyAxis: string; readonly queryAxis: string;
};
/** Weights' colours: 256 steps of [r, g, b] (reversed viridis, small weights light). */
export declare const weightRamp: ReadonlyArray<readonly [number, number, number]>;
/** A weight's step of weightRamp (-1 for a weight <= 0). */
export declare function weightIndex(p: number): number;
/** A weight's colour as CSS (no weight: the colour of a true edge drawn without weights). */
export declare function weightColour(p?: number): string;
/** Where pareto() puts the ringed point's label: a place around the ring whose box meets no line or dot. */
export declare function placeLabel(text: string, cx: number, cy: number, obstacles: {
  lines: Array<[number, number, number, number]>; dots: Array<[number, number]>;
  plot: { left: number; right: number; top: number; bottom: number };
}): { x: number; y: number; anchor: "start" | "middle" | "end"; box: { left: number; right: number; top: number; bottom: number } };
export declare function escapeXml(s: string): string;

export interface HeatmapOptions {
  /** One label per token (TeacherOutput.tokenLabels). */
  tokens: string[];
  /** The true graph. */
  gold: Graph;
  /** The predicted graph: its cells are shaded, true edges starred, misses marked. */
  predicted?: Graph | null;
  /** tokens x tokens weights, to shade the true graph when no prediction is given. */
  probs?: Float32Array | null;
  /** Grey out the future (key > query). */
  causal?: boolean;
  title?: string;
  /** Cell size in pixels (default: fits about 640 pixels). */
  cell?: number;
}
/** A heatmap of one head's graph as an SVG string. */
export declare function heatmap(options: HeatmapOptions): string;

export interface ParetoOptions {
  points: Array<Pick<SweepPoint, "method" | "sparsity" | "recall">>;
  goldSparsity?: number | null;
  /** A point to ring, e.g. the page's current method and setting. */
  current?: { sparsity: number; recall: number; method?: string; label?: string } | null;
  title?: string;
  width?: number;
  height?: number;
}
/** Sparsity-recall points with each method's frontier, as an SVG string. */
export declare function pareto(options: ParetoOptions): string;
