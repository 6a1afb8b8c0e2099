// The JavaScript package's transforms on data/sample_scores.npy, hashed as
// tools/output_hashes.sh hashes the CLI's (sha256 of the float32 values,
// row-major): forward and backward (the upstream gradient is the scores
// themselves, as the script's --grad). Prints "<sha256>  <what>" lines.
//
//   node tools/wasm_hashes.mjs build/wasm/package
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [packageDir = "build/wasm/package"] = process.argv.slice(2);
const { loadEntgraph } = await import(pathToFileURL(resolve(packageDir, "entgraph.js")).href);
const eg = await loadEntgraph();

// The sample: a 2-D float32 .npy, version 1 header.
const bytes = new Uint8Array(readFileSync(new URL("../data/sample_scores.npy", import.meta.url)));
const headerLength = new DataView(bytes.buffer).getUint16(8, true);
const header = new TextDecoder().decode(bytes.subarray(10, 10 + headerLength));
const [rows, cols] = /'shape':\s*\((\d+),\s*(\d+)\)/.exec(header).slice(1).map(Number);
if (!/'descr':\s*'<f4'/.test(header)) throw new Error("sample_scores.npy is not little-endian float32");
const scores = new Float32Array(bytes.slice(10 + headerLength).buffer, 0, rows * cols);

const hash = (array) => createHash("sha256").update(new Uint8Array(array.buffer, array.byteOffset, array.byteLength)).digest("hex");
const cases = [["softmax"], ["sparsemax"], ["entmax15"], ["entmax", { alpha: 1.25 }, "--alpha 1.25"],
               ["entmax", { alpha: 3 }, "--alpha 3"], ["topk", { k: 3 }, "--k 3"]];
for (const [name, options = {}, flags = ""] of cases) {
  const what = `transform ${name}${flags ? ` ${flags}` : ""} --isa ${eg.isa}`;
  const p = eg.transform(name, scores, { cols, ...options });
  console.log(`${hash(p)}  ${what} (forward values)`);
  const g = eg.transformBackward(name, p, scores, { cols, ...options });
  console.log(`${hash(g)}  ${what} (backward values)`);
}
