// Type-checks the package's declarations (wasm/*.d.ts) against typical use;
// `tsc -p tests/types` runs in `make test`. Never executed.
import {
  loadEntgraph, type AttentionGradients, type BatchedAttentionInputs, type BlockGraph, type Entgraph, type Graph, type GraphMetrics,
  type SweepPoint,
} from "../../wasm/entgraph.js";
import { heatmap, pareto } from "../../wasm/render.js";

export async function notebook(configJson: string, weights: Uint8Array): Promise<string[]> {
  const eg = await loadEntgraph();
  const probs: Float32Array = eg.transform("entmax", new Float32Array([1, 2, 3]), { alpha: 1.25 });
  const grad: Float32Array = eg.transformBackward("entmax", probs, new Float32Array(3), { alpha: 1.25 });
  const teacher = eg.Teacher.fromFiles(configJson, weights);
  const out = teacher.forward("In the beginning", { probs: true });
  const gold: Graph = out.goldGraph(0, 1);
  const p = eg.Predictor.create("sparsefinder-kmeans", { clusters: 4, r: 4 });
  const capture = out.toCapture();
  p.fit(capture, { seed: 1 }).setUnionPatterns(3, 0);
  const predicted = p.predict(out.queries(0, 1), out.keys(0, 1),
                              { queries: out.tokens, keys: out.tokens, dim: out.headDim, layer: 0, head: 1, causal: out.causal });
  const metrics: GraphMetrics = eg.compareGraphs(predicted, gold, out.causal);
  const attention = eg.graphAttention({ q: out.queries(0, 1), k: out.keys(0, 1), v: out.values(0, 1), queries: out.tokens,
                                        keys: out.tokens, dim: out.headDim, graph: predicted, alpha: out.alpha,
                                        transform: "entmax", causal: out.causal, mode: "exact" });
  const report = eg.evaluate(eg.Predictor.load(p.serialize()), capture);
  const sweep = eg.sweep(["window", { method: "sparsefinder-distance", values: [1, 2] }], capture, capture, { windows: [0] });
  const points: SweepPoint[] = sweep.points;
  const svgs = [
    heatmap({ tokens: out.tokenLabels, gold, predicted, causal: out.causal, title: `recall ${metrics.recall}` }),
    pareto({ points, goldSparsity: sweep.goldSparsity, current: { sparsity: report.sparsity, recall: report.recall } }),
    eg.render.heatmap({ tokens: out.tokenLabels, gold, probs: out.probs(0, 1) }),
    eg.paretoSvg(points, sweep.goldSparsity, "title"),
  ];
  const settled: number = attention.graphRows + attention.repairedRows + attention.denseRows + grad.length;
  const missed: Float64Array = attention.missedMass;
  const error: number = attention.outputErrorBound + attention.maxMissedMass + attention.meanMissedMass + missed.length;
  for (const o of [out, capture, teacher, p]) o.dispose();
  return settled >= 0 && attention.boundedRows <= error ? svgs : [];
}

// A training step's attention calls: one head, batched with grouped-query heads and lengths, block-sparse.
export function train(eg: Entgraph, q: Float32Array, k: Float32Array, v: Float32Array, gradOut: Float32Array, graph: Graph): number {
  const head = { q, k, v, queries: 4, keys: 4, dim: 8, transform: "entmax" as const, alpha: 1.25, causal: true };
  const one: AttentionGradients = eg.attentionBackward({ ...head, gradOut });
  const batch: BatchedAttentionInputs = {
    q, k, v, batch: 2, heads: 4, kvHeads: 2, queries: 4, keys: 4, dim: 8, valueDim: 8, transform: "topk", topk: 2,
    queryLengths: new Int32Array([4, 3]), keyLengths: [4, 2],
  };
  const out: Float32Array = eg.batchedAttention(batch).out;
  const grads: AttentionGradients = eg.batchedAttentionBackward({ ...batch, gradOut });
  const blocks: BlockGraph = eg.blockGraph(graph, { queryBlock: 2, keyBlock: 2 });
  const perHead: BlockGraph = eg.blockGraph([graph, graph], { heads: 2 });
  const full: BlockGraph = eg.fullBlockGraph({ batch: 2, heads: 4, queries: 4, keys: 4, queryBlock: 2, keyBlock: 2, causal: true });
  const sparse: Float32Array = eg.blockSparseAttention({ ...batch, graph: blocks }).out;
  const sparseGrads = eg.blockSparseAttentionBackward({ ...batch, graph: full, gradOut });
  const expanded: Graph = eg.expandBlockGraph(perHead, { head: 1 });
  return one.gradQ.length + out.length + grads.gradK.length + sparse.length + sparseGrads.gradV.length + expanded.queries +
    blocks.offsets.length + perHead.blocks.length;
}
