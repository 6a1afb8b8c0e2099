// The threaded module in Chromium, loaded as the demo page loads the package:
// inside a module Web Worker. A page served by web/serve.mjs with its
// cross-origin isolation headers runs more than one thread; served with
// --no-isolation it falls back to one and says why. evaluateMany gives
// evaluate()'s numbers bit for bit, on one thread and on several.
//
// The site is a temporary folder: the fixture (tests/browser/fixtures/threads/),
// a copy of the package (ENTGRAPH_WASM_PACKAGE, default build/wasm/package),
// the shipped causal teacher and data/heldout.txt.
import { spawn } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { dataDir, launchBrowser, repoRoot } from "./helpers.mjs";
import { freePort } from "./free_port.mjs";

const packageDir = resolve(repoRoot, process.env.ENTGRAPH_WASM_PACKAGE || "build/wasm/package");
const fixtureDir = join(repoRoot, "tests/browser/fixtures/threads");

function site() {
  for (const file of ["entgraph.js", "entgraph_core.js", "entgraph_core_threads.js", "entgraph_core_threads.worker.js"])
    if (!existsSync(join(packageDir, file)))
      throw new Error(`${join(packageDir, file)} is missing: build the package with \`make wasm\` ` +
                      "(or set ENTGRAPH_WASM_PACKAGE to a folder holding it)");
  const dir = mkdtempSync(join(tmpdir(), "entgraph-threads-"));
  cpSync(fixtureDir, dir, { recursive: true });
  cpSync(packageDir, join(dir, "entgraph"), { recursive: true });
  mkdirSync(join(dir, "teacher"));
  for (const file of ["config.json", "model.safetensors"])
    cpSync(join(dataDir, "teacher-causal", file), join(dir, "teacher", file));
  cpSync(join(dataDir, "heldout.txt"), join(dir, "heldout.txt"));
  return dir;
}


async function serve(dir, args) {
  const port = await freePort();
  const child = spawn(process.execPath, [join(repoRoot, "web/serve.mjs"), dir, String(port), ...args],
                      { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout.on("data", (d) => (output += d));
  child.stderr.on("data", (d) => (output += d));
  const exited = new Promise((ok) => child.once("exit", ok));
  const url = `http://127.0.0.1:${port}/`;
  for (const deadline = Date.now() + 10000; ; ) {
    try {
      if ((await fetch(url, { method: "HEAD" })).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`web/serve.mjs did not start: ${output}`);
    await new Promise((ok) => setTimeout(ok, 50));
  }
  return { url, stop: async () => { if (child.exitCode === null) { child.kill("SIGTERM"); await exited; } } };
}

// One worker's answer for { threads, job } on a fresh page of `url`.
async function inWorker(browser, url, request) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const consoleErrors = [];
  page.on("pageerror", (e) => consoleErrors.push(e.message));
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  try {
    await page.goto(url);
    await page.waitForFunction(() => typeof window.run === "function");
    const answer = await page.evaluate((r) => window.run(r), request);
    const pageIsolated = await page.evaluate(() => window.pageIsolated);
    if (answer.error) throw new Error(`the worker failed: ${answer.error}`);
    return { ...answer, pageIsolated, consoleErrors };
  } finally {
    await context.close();
  }
}

function checkArgumentErrors(errors) {
  assert.match(errors.empty, /^predictors: expected a non-empty array/);
  assert.match(errors.disposed, /^predictors\[1\]: the Predictor was disposed/);
  assert.match(errors.fraction, /^windows\[0\]: expected a whole number >= -1/);
  assert.match(errors.belowNone, /^windows\[1\]: expected a whole number >= -1/);
  assert.match(errors.notPredictor, /^predictors\[0\]: expected a Predictor/);
}

let dir, browser;
before(async () => {
  dir = site();
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("threads in a module worker", () => {
  let isolated, plain;
  before(async () => {
    isolated = await serve(dir, []);
    plain = await serve(dir, ["--no-isolation"]);
  });
  after(async () => {
    await isolated?.stop();
    await plain?.stop();
  });

  test("cross-origin isolated: the threads asked for, and evaluateMany equals evaluate on them", async () => {
    const three = await inWorker(browser, isolated.url, { threads: 3, job: "check" });
    assert.equal(three.pageIsolated, true);
    assert.equal(three.isolated, true);
    assert.equal(three.threads, 3, three.threadsNote);
    assert.equal(three.threadsNote, "");
    assert.deepEqual(three.consoleErrors, []);
    const one = await inWorker(browser, isolated.url, { threads: 1, job: "check" });
    assert.equal(one.threads, 1);
    assert.match(one.threadsNote, /one thread was asked for/);
    for (const run of [three, one]) {
      assert.equal(run.many.length, 4 * 4);
      run.many.forEach((r, i) => {
        assert.equal(r.predictor, Math.floor(i / 4));
        assert.equal(r.window, [-1, 1, 3, 7][i % 4]);
        const s = run.single[i];
        // Bit for bit: the same sums in the same order.
        assert.deepEqual([r.recall, r.sparsity, r.goldSparsity], [s.recall, s.sparsity, s.goldSparsity],
                         `report ${i} (${run.threads} threads)`);
      });
      // The windows add edges: sparsity never rises with the window.
      for (let p = 0; p < 4; p++)
        for (let w = 1; w < 4; w++) assert.ok(run.many[4 * p + w].sparsity <= run.many[4 * p + w - 1].sparsity + 1e-12);
    }
    // The threaded and the single-thread module agree exactly.
    assert.deepEqual(three.many, one.many);
    checkArgumentErrors(three.errors);
  });

  test("auto: navigator.hardwareConcurrency threads (this machine has 2 cores)", async () => {
    const auto = await inWorker(browser, isolated.url, { threads: "auto" });
    assert.equal(auto.threads, Math.min(auto.hardwareConcurrency, 16));
    if (auto.hardwareConcurrency > 1) assert.equal(auto.threadsNote, "");
  });

  test("more threads than the module's pool of workers: an error, not a deadlock, and the pool still works", async () => {
    const answer = await inWorker(browser, isolated.url, { job: "overPool" });
    assert.match(answer.tooMany?.message ?? "", /could not start worker thread 2 of 2/);
    assert.equal(typeof answer.tooMany.code, "string");
    assert.equal(answer.afterwards, null);
    assert.ok(Math.abs(answer.firstRowSum - 1) < 1e-4, `softmax row sum ${answer.firstRowSum}`);
  });

  test("not isolated (--no-isolation): one thread, and a note that says why", async () => {
    const answer = await inWorker(browser, plain.url, { threads: 4, job: "check" });
    assert.equal(answer.pageIsolated, false);
    assert.equal(answer.threads, 1);
    assert.match(answer.threadsNote, /not cross-origin isolated \(COOP\/COEP headers missing\)/);
    assert.deepEqual(answer.consoleErrors, []);
    // The one-thread module still evaluates, and argument errors name the argument.
    assert.equal(answer.many.length, 16);
    checkArgumentErrors(answer.errors);
  });
});
