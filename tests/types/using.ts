// Type-checks `using` with the package's objects (they declare [Symbol.dispose]),
// and the loaders of teachers and predictors; compiled by `tsc -p tests/types`
// under --strict with the project's plain ES2022 settings. Never executed.
import { fetchText, loadEntgraph, type LoadedPredictor } from "../../wasm/entgraph.js";

export async function notebook(data: string): Promise<number> {
  const eg = await loadEntgraph();
  using teacher = await eg.loadTeacher(`${data}/teacher-causal`);
  using out = teacher.forward("In the beginning", { probs: true });
  using capture = out.toCapture();
  using predictor = eg.Predictor.create("window", { window: 2 });
  const heldout: string = await fetchText(new URL("heldout.txt", `file://${data}/`));
  const loaded: LoadedPredictor[] = await eg.loadPredictors(`${data}/params`, { methods: ["window"] });
  for (const { predictor: p } of loaded) p[Symbol.dispose]();
  const bytes: Uint8Array = await eg.fetchBytes(`${data}/heldout.txt`);
  return eg.evaluate(predictor, capture).recall + out.probs(0, 0).length + heldout.length + bytes.length;
}
