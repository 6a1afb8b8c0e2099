// The numbers the page shows equal the native CLI's for the same text, teacher,
// head and method, exactly (no tolerance): the page's text (window.entgraphDemo.text,
// the <= 256 bytes the model read) goes through
//   entgraph capture --model data/teacher-<kind> --text FILE --sequence-bytes 256 --max-sequences 1
//   entgraph eval --capture DIR --params build/web/params/<kind>/<paramFile>
//   entgraph attend --capture DIR --params ... --layer L --head H --exact --json   (bound and repair)
// with --isa sse2 (ENTGRAPH_TEST_NATIVE_ISA): the page's wasm SIMD128 kernels do the
// same arithmetic as the native SSE2 ones, so every per-head recall, sparsity, true
// sparsity and precision must be bit-identical, and so must the means over heads.
// With a local window (#union-window = w) the parameter file is given
// "extra_window": "w" in its settings, which is what the page's
// predictor.setUnionPatterns(w, 0) does.
// The same comparison runs once with the portable kernels on both sides
// (?isa=reference and --isa reference).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  afterUpdate, chooseMethod, dataDir, demo, exactIsa, launchBrowser, makeTempDir, openPage, requireCli, runCli,
  screenshot, shownNumbers, startServer, typeText, waitPareto, webDir,
} from "./helpers.mjs";

let server;
let browser;
let tmp;

before(async () => {
  requireCli();
  server = await startServer();
  browser = await launchBrowser();
  tmp = makeTempDir();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

// Typed text: UTF-8 of 1 to 4 bytes per character, over 256 bytes, with a 3-byte
// character on bytes 255..257, so that the page's cut at a character boundary (to
// 255 bytes) is part of what is compared.
const TYPED_HEAD =
  "Then said Jesus unto them, «Verily, verily» — the café's naïve señor paid 12€ for 日本 tea 🍵; " +
  "and the LORD spake unto Moses, saying, Speak unto the children of Israel. ";
const TYPED = TYPED_HEAD.padEnd(TYPED_HEAD.length + 255 - Buffer.byteLength(TYPED_HEAD), ".") + "語 and more words after the cut.";

// Settings compared: [method, value, union window (-1: none)].
const SETTINGS = [
  ["sparsefinder-distance", "3.5", -1],
  ["sparsefinder-distance", "1.0", 3],
  ["sparsefinder-quantization", "4", -1],
  ["sparsefinder-kmeans", "8", -1],
  ["routing", "4", -1],
  ["reformer", "6", 1],
  ["bigbird", "4", -1],
  ["longformer", "4", -1],
  ["window", "3", -1],
  ["global", "2", -1],
];

// A capture of the page's text, made once per (teacher, text, isa).
const captures = new Map();
function captureOf(kind, text, isa) {
  const key = `${kind}\0${text}\0${isa}`;
  if (!captures.has(key)) {
    const dir = join(tmp, `capture-${captures.size}`);
    const textFile = `${dir}.txt`;
    writeFileSync(textFile, text); // UTF-8, as the page's bytes
    runCli("capture", [
      "--model", join(dataDir, `teacher-${kind}`), "--text", textFile, "--out", dir,
      "--sequence-bytes", "256", "--max-sequences", "1",
    ], { isa });
    captures.set(key, dir);
  }
  return captures.get(key);
}

// The parameter file the page used, with its settings (a value that shares
// another's fit) and the page's union window applied.
function paramsOf(kind, d) {
  const file = join(webDir, "params", kind, d.paramSource);
  assert.ok(existsSync(file), `${file} is missing`);
  if (d.window < 0 && d.paramSettings === null) return file;
  const params = JSON.parse(readFileSync(file, "utf8"));
  params.settings = { ...(d.paramSettings ?? params.settings) };
  if (d.window >= 0) params.settings.extra_window = String(d.window);
  const dir = join(tmp, "params");
  mkdirSync(dir, { recursive: true });
  const out = join(dir, `${kind}-w${d.window}-${d.paramFile}`);
  writeFileSync(out, JSON.stringify(params));
  return out;
}

// Compares the page's current state with `entgraph eval` on the same text; -> the report.
async function compareWithCli(page, isa, label) {
  const d = await demo(page);
  assert.equal(d.error, null);
  const dir = captureOf(d.teacher, d.text, isa);
  const capture = JSON.parse(readFileSync(join(dir, "capture.json"), "utf8"));
  assert.deepEqual(capture.lengths, [d.tokens], `${label}: the CLI read ${capture.lengths} tokens, the page ${d.tokens}`);
  assert.equal(capture.texts[0], d.text, `${label}: the same text`);
  const report = JSON.parse(runCli("eval", ["--capture", dir, "--params", paramsOf(d.teacher, d)], { isa }));
  assert.equal(report.method, d.method);
  assert.equal(report.heads.length, d.heads.length);
  const diffs = [];
  for (const r of report.heads) {
    const p = d.heads.find((h) => h.layer === r.layer && h.head === r.head);
    assert.ok(p, `${label}: the page has no head L${r.layer}H${r.head}`);
    for (const [name, mine, theirs] of [
      ["recall", p.recall, r.recall],
      ["sparsity", p.sparsity, r.sparsity],
      ["gold sparsity", p.goldSparsity, r.gold_sparsity],
      ["precision", p.precision, r.precision],
    ]) {
      if (!Object.is(mine, theirs)) diffs.push(`L${r.layer}H${r.head} ${name}: page ${mine}, CLI ${theirs}`);
    }
  }
  assert.deepEqual(diffs, [], `${label}: per-head numbers differ from entgraph eval --isa ${isa}`);
  // The means over heads.
  assert.equal(d.meanRecall, report.recall, `${label}: mean recall`);
  assert.equal(d.meanSparsity, report.sparsity, `${label}: mean sparsity`);
  assert.equal(d.meanGoldSparsity, report.gold_sparsity, `${label}: mean gold sparsity`);
  // What is shown: the chosen head's and the means' data-value attributes.
  const shown = await shownNumbers(page);
  const chosen = report.heads.find((h) => h.layer === d.layer && h.head === d.head);
  assert.equal(shown.recall, chosen.recall, `${label}: #recall data-value`);
  assert.equal(shown.sparsity, chosen.sparsity, `${label}: #sparsity data-value`);
  assert.equal(shown["gold-sparsity"], chosen.gold_sparsity, `${label}: #gold-sparsity data-value`);
  assert.equal(shown.precision, chosen.precision, `${label}: #precision data-value`);
  assert.equal(shown["mean-recall"], report.recall, `${label}: #mean-recall data-value`);
  assert.equal(shown["mean-sparsity"], report.sparsity, `${label}: #mean-sparsity data-value`);
  assert.equal((await page.textContent("#recall")).trim(), chosen.recall.toFixed(3));
  assert.equal((await page.textContent("#sparsity")).trim(), chosen.sparsity.toFixed(3));
  await compareExactWithCli(page, d, dir, isa, label);
  return report;
}

// The chosen head's bound and repair numbers (graph attention in mode "exact") vs
// `entgraph attend --exact --json` on the same capture, head and parameter file: how
// each row was settled and how many pairs were scored and bounded, exactly.
async function compareExactWithCli(page, d, dir, isa, label) {
  const attend = JSON.parse(runCli("attend", [
    "--capture", dir, "--params", paramsOf(d.teacher, d), "--layer", String(d.layer),
    "--head", String(d.head), "--exact", "--json",
  ], { isa }));
  assert.equal(attend.mode, "exact");
  const cli = attend.heads[0];
  assert.equal(cli.rows, d.tokens);
  assert.equal(cli.rows_exact, d.tokens, `${label}: the CLI's exact mode settles every row`);
  assert.deepEqual(
    { graphRows: d.graphRows, repairedRows: d.repairedRows, denseRows: d.denseRows, graphPairs: d.graphPairs,
      repairPairs: d.repairPairs, boundPairs: d.boundPairs },
    { graphRows: cli.rows_certified, repairedRows: cli.repaired_rows, denseRows: cli.dense_rows, graphPairs: cli.graph_pairs,
      repairPairs: cli.repair_pairs, boundPairs: cli.bound_pairs },
    `${label}: page vs entgraph attend --exact --isa ${isa}, L${d.layer}H${d.head}`,
  );
  assert.ok(d.exactMaxAbsDiff <= 1e-5, `${label}: exact mode's largest error ${d.exactMaxAbsDiff}`);
  const shown = await shownNumbers(page, ["graph-rows", "repaired-rows", "repair-cost"]);
  assert.equal(shown["graph-rows"], cli.rows_certified, `${label}: #graph-rows data-value`);
  assert.equal(shown["repaired-rows"], cli.repaired_rows + cli.dense_rows, `${label}: #repaired-rows data-value`);
  if (cli.graph_pairs > 0) assert.equal(shown["repair-cost"], cli.repair_pairs / cli.graph_pairs, `${label}: #repair-cost data-value`);
}

async function checkAll(page, kind, textName, isa, settings = SETTINGS) {
  let k = 0;
  let compared = 0;
  for (const [method, value, window] of settings) {
    // Walk over the heads too, so that several heads' shown numbers are compared.
    const layer = k % 4;
    const head = (k * 3 + 1) % 4;
    k++;
    let d = await chooseMethod(page, method, value, window);
    if (d.layer !== layer || d.head !== head) d = await afterUpdate(page, () => page.click(`#thumb-${layer}-${head}`));
    assert.equal(d.layer, layer);
    assert.equal(d.head, head);
    await compareWithCli(page, isa, `${kind}, ${textName}, ${method} ${d.value}, window ${window}, L${layer}H${head}`);
    compared++;
  }
  return compared;
}

describe(`page (SIMD128) vs entgraph --isa ${exactIsa}`, () => {
  let tab;
  let defaultText;
  before(async () => {
    tab = await openPage(browser, server.url);
    defaultText = (await demo(tab.page)).text;
  });
  after(() => tab?.close());

  test("causal teacher, the default text, at the page's default method", async () => {
    const d = await demo(tab.page);
    assert.equal(d.teacher, "causal");
    assert.equal(d.method, "sparsefinder-distance");
    assert.equal(d.value, "3.5");
    assert.equal(d.window, -1);
    await compareWithCli(tab.page, exactIsa, "causal, default text, default method");
  });

  test("causal teacher, the default text, several methods, values, windows and heads", async () => {
    assert.equal(await checkAll(tab.page, "causal", "default text", exactIsa), SETTINGS.length);
  });

  test("causal teacher, a typed text over 256 bytes with multi-byte characters", async () => {
    const d = await typeText(tab.page, TYPED);
    assert.equal(d.cut, true);
    assert.equal(d.tokens, 255, "cut before the 3-byte character on bytes 255..257");
    assert.equal(Buffer.byteLength(d.text), d.tokens);
    assert.ok(TYPED.startsWith(d.text));
    assert.equal(await checkAll(tab.page, "causal", "typed text", exactIsa), SETTINGS.length);
  });

  test("masked teacher, the typed text", async () => {
    // (Switching the teacher while the Pareto curves still compute logs an error: see controls.test.mjs.)
    await waitPareto(tab.page);
    const d = await afterUpdate(tab.page, () => tab.page.selectOption("#teacher", "masked"), { timeout: 60000 });
    assert.equal(d.teacher, "masked");
    assert.ok(TYPED.startsWith(d.text));
    assert.equal(await checkAll(tab.page, "masked", "typed text", exactIsa), SETTINGS.length);
    await screenshot(tab.page, "native-masked-typed");
  });

  test("masked teacher, the default text", async () => {
    const d = await typeText(tab.page, defaultText);
    assert.equal(d.teacher, "masked");
    assert.equal(d.text, defaultText);
    assert.equal(await checkAll(tab.page, "masked", "default text", exactIsa), SETTINGS.length);
  });

  test("no console or page errors", () => {
    assert.deepEqual(tab.errors, []);
  });
});

describe("portable kernels: page ?isa=reference vs entgraph --isa reference", () => {
  let tab;
  before(async () => {
    tab = await openPage(browser, server.url, { query: "?isa=reference" });
  });
  after(() => tab?.close());

  test("the page runs the reference kernels", async () => {
    assert.equal((await demo(tab.page)).isa, "reference");
  });

  test("the causal and masked teachers on a typed text agree exactly", async () => {
    const settings = [SETTINGS[0], SETTINGS[5]];
    await typeText(tab.page, TYPED);
    await checkAll(tab.page, "causal", "typed text", "reference", settings);
    await waitPareto(tab.page); // see above
    await afterUpdate(tab.page, () => tab.page.selectOption("#teacher", "masked"), { timeout: 60000 });
    await checkAll(tab.page, "masked", "typed text", "reference", settings);
  });

  test("no console or page errors", () => {
    assert.deepEqual(tab.errors, []);
  });
});
