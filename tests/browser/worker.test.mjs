// The page's compute runs in Web Workers (web/worker.js, web/engine.js): the
// main thread loads no WebAssembly, typing never blocks it for more than 50 ms,
// a Pareto recompute does not hold up a keystroke's update, and the first load
// fetches only what the first graph needs (the rest when first used). The first
// load's requests, bytes and time to the first graph are written to
// <artifacts>/first-load.json.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import {
  afterUpdate, demo, launchBrowser, openPage, recordLongTasks, startServer, typeText, waitPareto, waitReady, webDir,
  writeArtifact,
} from "./helpers.mjs";
import { after, before } from "node:test";

let server = null;
let browser = null;
before(async () => {
  server = await startServer();
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

// 400 ASCII bytes of held-out text after the 4 KiB the predictors were fitted on.
function longText() {
  return readFileSync(join(webDir, "heldout.txt"), "latin1").slice(5000, 5400);
}

test("first load: only the teacher and the default setting's parameters before the first graph", async (t) => {
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const page = await context.newPage();
  const requests = [];
  let firstGraphAt = null;
  // Responses of the page and of its workers (Chromium reports both to the page).
  page.on("requestfinished", async (r) => {
    const sizes = await r.sizes().catch(() => null);
    requests.push({ url: new URL(r.url()).pathname, at: Date.now(), bytes: sizes ? sizes.responseBodySize + sizes.responseHeadersSize : 0,
      encoding: (await r.response())?.headers()["content-encoding"] ?? "" });
  });
  const t0 = Date.now();
  await page.goto(server.url);
  await waitReady(page);
  firstGraphAt = Date.now();
  const d = await demo(page);
  const before = requests.filter((r) => r.at <= firstGraphAt);
  const params = before.filter((r) => r.url.startsWith("/params/") && !r.url.endsWith("/index.json"));
  assert.ok(params.length >= 1, "the default setting's parameter file was fetched");
  assert.deepEqual(
    params.map((r) => r.url),
    [`/params/causal/${d.paramSource}`],
    "no other parameter file is fetched before the first graph",
  );
  assert.ok(!before.some((r) => r.url.startsWith("/teachers/masked/")), "the other teacher is not fetched");
  // The teacher's weights and the WebAssembly binary (embedded in the package's core module) come compressed
  // (the build's brotli copies, web/compress.mjs).
  const heavy = before.filter((r) => /\.(safetensors|wasm)$|\/entgraph_core(_threads)?\.js$/.test(r.url));
  assert.ok(heavy.some((r) => r.url === "/teachers/causal/model.safetensors"), "the teacher was fetched");
  assert.ok(heavy.some((r) => /entgraph_core/.test(r.url)), "the core module was fetched");
  // (A second fetch of the same file may be a 304, which has no body to encode.)
  for (const url of new Set(heavy.map((r) => r.url)))
    assert.ok(heavy.some((r) => r.url === url && r.encoding === "br"), `${url} sent with brotli: ${JSON.stringify(heavy.filter((r) => r.url === url))}`);
  await waitPareto(page);
  const all = requests.slice();
  const sum = (list) => list.reduce((s, r) => s + r.bytes, 0);
  const report = {
    what: "the demo page's first load in Chromium: requests and bytes (response bodies as sent, headers included) until the first graph, and until the Pareto curves",
    untilFirstGraph: { requests: before.length, bytes: sum(before), ms: firstGraphAt - t0 },
    untilPareto: { requests: all.length, bytes: sum(all), paretoMs: (await demo(page)).paretoMs },
    requests: all.map((r) => ({ url: r.url, bytes: r.bytes, encoding: r.encoding, ms: r.at - t0 })),
  };
  const path = writeArtifact("first-load.json", report);
  t.diagnostic(
    `first graph after ${report.untilFirstGraph.ms} ms: ${report.untilFirstGraph.requests} requests, ` +
      `${(report.untilFirstGraph.bytes / 1e6).toFixed(2)} MB; with the Pareto curves: ${report.untilPareto.requests} requests, ` +
      `${(report.untilPareto.bytes / 1e6).toFixed(2)} MB (${path})`,
  );
  await context.close();
});

// An init script: counts the WebAssembly modules compiled on the page's own
// thread (workers have their own WebAssembly object and are not counted).
function countMainThreadWasm() {
  window.__wasmCompiles = 0;
  for (const name of ["compile", "instantiate", "compileStreaming", "instantiateStreaming"]) {
    const original = WebAssembly[name];
    if (!original) continue;
    WebAssembly[name] = function (...args) {
      window.__wasmCompiles++;
      return original.apply(this, args);
    };
  }
  const OriginalModule = WebAssembly.Module;
  WebAssembly.Module = function (...args) {
    window.__wasmCompiles++;
    return new OriginalModule(...args);
  };
}

test("the model runs in workers: the page's own thread compiles no WebAssembly", async () => {
  const tab = await openPage(browser, server.url, { init: countMainThreadWasm });
  try {
    const { page } = tab;
    const workers = page.workers().map((w) => new URL(w.url()).pathname);
    assert.ok(workers.includes("/worker.js"), `a compute worker runs (workers: ${workers.join(", ")})`);
    const d = await demo(page);
    assert.ok(d.ready && d.tokens > 0 && Number.isFinite(d.recall), "the page shows a result");
    assert.equal(await page.evaluate(() => window.__wasmCompiles), 0, "no WebAssembly compiled on the page's thread");
    assert.deepEqual(tab.errors, []);
  } finally {
    await tab.close();
  }
});

test("typing, while the Pareto curves recompute: the page's thread only draws (its tasks and long tasks recorded)", async (t) => {
  const tab = await openPage(browser, server.url, { init: recordLongTasks });
  try {
    const { page } = tab;
    await typeText(page, longText());
    await page.focus("#text");
    await page.evaluate(() => document.getElementById("text").setSelectionRange(0, 0));
    for (const ch of "warm") await afterUpdate(page, () => page.keyboard.type(ch));
    await waitPareto(page);
    await page.evaluate(() => document.getElementById("text").setSelectionRange(0, 0));
    await page.evaluate(() => {
      window.__longTasks = [];
      window.entgraphDemo.scriptMaxMs = 0;
      window.entgraphDemo.scriptMs = {};
    });
    const before = await demo(page);
    // 30 keystrokes at a brisk typist's pace; a pause lets a Pareto recompute start in the middle.
    await page.keyboard.type("In the beginning God created", { delay: 80 });
    // The pause: until the Pareto recompute of the text so far has started.
    await page.waitForFunction(() => /computing/.test(document.getElementById("pareto-status").textContent), null, { timeout: 10000 });
    await page.keyboard.type(" the heaven", { delay: 80 });
    await page.waitForFunction(() => !window.entgraphDemo.pending, null, { timeout: 30000 });
    const d = await demo(page);
    const longTasks = await page.evaluate(() => window.__longTasks);
    t.diagnostic(
      `${d.updates - before.updates} updates for 39 keystrokes; the page's script: at most ${d.scriptMaxMs.toFixed(1)} ms ` +
        `(${Object.entries(d.scriptMs).map(([k, v]) => `${k} ${v.toFixed(1)}`).join(", ")}) ` +
        `a task; long tasks, the browser's layout and paint included: ${longTasks.length ? longTasks.map(Math.round).join(", ") + " ms" : "none"}`,
    );
    assert.ok(d.updates - before.updates >= 5, "the page updated while typing");
    assert.ok(d.text.startsWith("In the beginning God created the heaven"), "every keystroke reached the model's text");
    // The issue's target: no task over 50 ms on the page's thread while typing,
    // the browser's layout and paint included. The model is off this thread, and
    // what remains is drawing (measured: at most 5-7 ms of script a task, and no
    // long task, docs/PERFORMANCE.md "The demo page in workers"). On a loaded
    // machine every task stretches alike, so the bound is 50 ms or twice the
    // model's own time in the worker in this run, whichever is larger: a page
    // that ran the model on its thread fails it on any machine (issue 29).
    const modelMs = d.timings.forward + (d.timings.forwardRest ?? 0);
    const bound = Math.max(50, 2 * modelMs);
    assert.ok(d.scriptMaxMs < bound, `the page's script took ${d.scriptMaxMs.toFixed(1)} ms in one task (bound ${bound.toFixed(1)} ms)`);
    assert.deepEqual(longTasks.filter((ms) => ms > bound).map(Math.round), [], `tasks over ${bound.toFixed(1)} ms while typing`);
    assert.deepEqual(tab.errors, []);
  } finally {
    await tab.close();
  }
});

test("a keystroke's update does not wait for a Pareto recompute", async (t) => {
  const tab = await openPage(browser, server.url);
  try {
    const { page } = tab;
    await typeText(page, longText());
    const { paretoWorkerMs } = await (waitPareto(page).then(() => demo(page)));
    // The next text starts a recompute 300 ms after it settles; a keystroke during
    // it is answered by the other worker, long before the recompute could end.
    await typeText(page, "Q" + longText());
    await page.waitForFunction(() => /computing/.test(document.getElementById("pareto-status").textContent), null, { timeout: 10000 });
    await page.focus("#text");
    await page.evaluate(() => document.getElementById("text").setSelectionRange(0, 0));
    const d = await afterUpdate(page, () => page.keyboard.type("R"));
    assert.equal(d.text.slice(0, 2), "RQ");
    t.diagnostic(`keystroke to update ${d.inputToUpdateMs.toFixed(1)} ms during a recompute that takes ${paretoWorkerMs.toFixed(0)} ms`);
    if (paretoWorkerMs > 400) assert.ok(d.inputToUpdateMs < paretoWorkerMs / 2, "the update did not wait for the recompute");
    await waitPareto(page); // the recompute of the newer text finishes too
    assert.deepEqual(tab.errors, []);
  } finally {
    await tab.close();
  }
});

// The threads the workers use, once the update worker has started.
async function threadsOf(page) {
  await page.waitForFunction(() => window.entgraphDemo.threads !== undefined, null, { timeout: 30000 });
  return page.evaluate(() => ({
    threads: window.entgraphDemo.threads,
    note: document.getElementById("threads-note").textContent,
    noteShown: !document.getElementById("threads-note").hidden,
    isolated: window.crossOriginIsolated,
  }));
}

test("threads: several when the page is cross-origin isolated, one with a visible note when not, same numbers", async (t) => {
  const threaded = existsSync(join(webDir, "entgraph", "entgraph_core_threads.js"));
  const text = longText();
  const on = await openPage(browser, server.url);
  const plain = await startServer({ args: ["--no-isolation"] });
  const off = await openPage(browser, plain.url);
  try {
    const a = await threadsOf(on.page);
    const b = await threadsOf(off.page);
    t.diagnostic(`isolated: ${a.threads} threads ("${a.note}"); not isolated: ${b.threads} ("${b.note}")`);
    assert.equal(a.isolated, true, "serve.mjs makes the page cross-origin isolated");
    assert.equal(b.isolated, false, "--no-isolation turns it off");
    if (threaded) assert.ok(a.threads > 1, "the threaded module runs when the page is isolated");
    else t.diagnostic("the package has no threaded module (entgraph_core_threads.js): one thread everywhere");
    assert.equal(b.threads, 1);
    assert.ok(b.noteShown, "the fallback is shown on the page");
    assert.match(b.note, /one thread/);
    assert.match(b.note, /isolat/);
    // Threads change nothing in the results.
    const da = await typeText(on.page, text);
    const db = await typeText(off.page, text);
    for (const key of ["recall", "sparsity", "goldSparsity", "meanRecall", "meanSparsity", "maxAbsDiff", "repairPairs"]) {
      assert.equal(da[key], db[key], `${key} with and without threads`);
    }
    await waitPareto(on.page);
    await waitPareto(off.page);
    const pa = await demo(on.page);
    const pb = await demo(off.page);
    assert.equal(pa.paretoPoints, pb.paretoPoints);
    t.diagnostic(`Pareto recompute: ${pa.paretoWorkerMs?.toFixed(0)} ms on ${pa.paretoThreads} threads, ${pb.paretoWorkerMs?.toFixed(0)} ms on ${pb.paretoThreads}`);
    assert.deepEqual(on.errors, []);
    assert.deepEqual(off.errors, []);
  } finally {
    await on.close();
    await off.close();
    await plain.stop();
  }
});
