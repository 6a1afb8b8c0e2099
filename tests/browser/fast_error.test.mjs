// Fast mode's error beside recall (issue 31, item 4): for the chosen head the page
// shows how many rows of attention on the predicted graph alone are proven exact
// (#fast-exact-rows) and the largest bound on the weight a row misses (#max-missed),
// with their definition (#def-missed), in window.entgraphDemo and in the live
// region. The numbers must equal what the page's own wasm package returns, loaded
// afresh in the page, for eg.graphAttention in mode "certify" on the same text,
// teacher, head, parameter file and union window, bit for bit; and they must be
// consistent with what the page measured (the rows it proves hold every true
// edge; fast mode's largest output error is under the error bound).
import { test } from "node:test";
import assert from "node:assert/strict";
import { afterUpdate, chooseMethod, demo, shownNumbers, useBrowserTab } from "./helpers.mjs";

const session = useBrowserTab();

// eg.graphAttention in mode "certify" on the page's state d, from a package and
// resources of its own (the page's worker holds the others).
function certifyInPage(page, d) {
  return page.evaluate(async (d) => {
    const { loadEntgraph } = await import("./entgraph/entgraph.js");
    const { Resources } = await import("./resources.js");
    const eg = await loadEntgraph({ threads: 1 });
    eg.setIsa(d.isa); // the page's kernels
    const res = new Resources(eg, ".");
    const { teacher } = await res.teacher(d.teacher);
    const predictor = await res.predictor(d.teacher, d.paramFile);
    const out = teacher.forward(d.text, { logits: false });
    try {
      const n = out.tokens;
      const dim = out.headDim;
      const q = out.queries(d.layer, d.head);
      const k = out.keys(d.layer, d.head);
      predictor.setUnionPatterns(d.window, 0);
      const graph = predictor.predict(q, k, { queries: n, keys: n, dim, layer: d.layer, head: d.head, causal: out.causal });
      const r = eg.graphAttention({
        q, k, v: out.values(d.layer, d.head), queries: n, keys: n, dim, valueDim: dim, graph,
        transform: out.alpha === 1.5 ? "entmax15" : "entmax", alpha: out.alpha, causal: out.causal, scale: out.scale,
        mode: "certify",
      });
      return {
        rows: n, graphRows: r.graphRows, boundedRows: r.boundedRows, maxMissedMass: r.maxMissedMass,
        meanMissedMass: r.meanMissedMass, outputErrorBound: r.outputErrorBound,
      };
    } finally {
      out.dispose();
      predictor.dispose();
      teacher.dispose();
    }
  }, d);
}

// The shown numbers against the state and the fresh package call.
async function checkFastError(page, label) {
  const d = await demo(page);
  assert.equal(d.error, null);
  const n = d.tokens;
  assert.ok(n > 0, `${label}: the page has tokens`);
  assert.ok(Number.isInteger(d.fastExactRows) && d.fastExactRows >= 0 && d.fastExactRows <= n,
    `${label}: fastExactRows ${d.fastExactRows} of ${n}`);
  assert.equal(d.boundedRows, n, `${label}: every entmax row has a missed-mass bound`);
  assert.ok(d.maxMissedMass >= 0 && d.maxMissedMass <= 1, `${label}: maxMissedMass ${d.maxMissedMass}`);
  assert.equal(d.maxMissedMass === 0, d.fastExactRows === n, `${label}: nothing missed iff every row is proven`);
  // Consistent with what the page measured: a row proven exact holds every true
  // edge, and the fast output's largest error is within the bound (up to float rounding).
  assert.ok(d.fastExactRows <= d.coveredRows, `${label}: ${d.fastExactRows} proven, ${d.coveredRows} covered`);
  assert.ok(d.maxAbsDiff <= d.outputErrorBound + 1e-5 * Math.max(1, d.maxAbsOut),
    `${label}: fast mode's error ${d.maxAbsDiff} above its bound ${d.outputErrorBound}`);

  // The package, called afresh on the same inputs, gives the same numbers.
  const fresh = await certifyInPage(page, d);
  assert.deepEqual(
    { rows: n, graphRows: d.fastExactRows, boundedRows: d.boundedRows, maxMissedMass: d.maxMissedMass,
      meanMissedMass: d.meanMissedMass, outputErrorBound: d.outputErrorBound },
    fresh, `${label}: the page vs eg.graphAttention(mode "certify")`);

  // What is shown: the values, and the text beside them.
  const shown = await shownNumbers(page, ["fast-exact-rows", "max-missed", "recall"]);
  assert.equal(shown["fast-exact-rows"], fresh.graphRows, `${label}: #fast-exact-rows data-value`);
  assert.equal(shown["max-missed"], fresh.maxMissedMass, `${label}: #max-missed data-value`);
  assert.equal(shown.recall, d.recall);
  assert.equal((await page.textContent("#fast-exact-rows")).trim(), `${fresh.graphRows}/${n}`);
  const text = (await page.textContent("#max-missed")).trim();
  if (fresh.maxMissedMass === 0) assert.equal(text, "0");
  else if (fresh.maxMissedMass >= 0.001) assert.equal(text, fresh.maxMissedMass.toPrecision(3));
  else assert.match(text, /^\d\.\d·10⁻[⁰¹²³⁴⁵⁶⁷⁸⁹]+$/);
  // The live region says it too, once the updates pause (announce.js).
  const said = `On the predicted graph alone, ${fresh.graphRows} of ${n} rows are proven exact; a row misses at most `;
  await page.waitForFunction((s) => document.getElementById("announce").textContent.includes(s), said, { timeout: 10000 });
  return d;
}

test("beside recall: the rows the graph alone proves exact and the largest missed weight, as eg.graphAttention gives them", async () => {
  const { page } = session.tab;
  const d = await checkFastError(page, "default state");
  assert.equal(d.method, "sparsefinder-distance");
  // Described on the page, not only in a hover title.
  const by = await page.$eval("#max-missed", (e) => e.closest("[aria-describedby]")?.getAttribute("aria-describedby"));
  assert.equal(by, "def-missed");
  assert.ok((await page.textContent("#def-missed")).length > 80);
  // Near recall: in the results panel, under the recall and sparsity numbers.
  assert.equal(await page.$eval("#max-missed", (e) => e.closest(".metrics") !== null), true);
});

test("another method, a union window and another head: still the package's numbers", async () => {
  const { page } = session.tab;
  await chooseMethod(page, "window", "3", -1);
  await checkFastError(page, "window 3");
  await chooseMethod(page, "sparsefinder-kmeans", "8", 3);
  await afterUpdate(page, () => page.click("#thumb-2-1"));
  const d = await checkFastError(page, "sparsefinder-kmeans 8 with window 3, L2H1");
  assert.deepEqual([d.layer, d.head], [2, 1]);
});

test("the masked teacher: its numbers follow the teacher", async () => {
  const { page } = session.tab;
  await afterUpdate(page, () => page.selectOption("#teacher", "masked"));
  const d = await checkFastError(page, "masked teacher");
  assert.equal(d.teacher, "masked");
});
