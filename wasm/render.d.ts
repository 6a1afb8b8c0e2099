// entgraph/render: SVG renderers (pure JavaScript, no WebAssembly needed).
import type { Graph, SweepPoint } from "./entgraph.js";

export declare const colours: {
  hit: string; extra: string; miss: string; forbidden: string; grid: string; text: string;
};
export declare const methodColours: readonly string[];
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
