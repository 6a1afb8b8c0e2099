// Shared helpers of the browser tests of entgraph's demo page (web/, built into
// build/web by tools/build_web.sh): where things are, the static server, the
// browser (playwright-core driving Debian's chromium headless), waiting for the
// page's updates, reading its canvases, screenshots, and the native CLI.
//
// Locations (relative paths are taken from the repository root):
//   ENTGRAPH_WEB        the built page (default build/web)
//   ENTGRAPH_CLI        the native CLI (default build/release/native/cli/entgraph)
//   CHROMIUM            the browser (default /usr/bin/chromium)
//   ENTGRAPH_ARTIFACTS  where screenshots and timings go (default build/test-artifacts/browser)
//   ENTGRAPH_TEST_NATIVE_ISA  --isa of the CLI in the exact comparisons (default sse2: the
//                       wasm SIMD128 kernels round like the native SSE2 ones)
import { spawn, execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { after, before } from "node:test";
import { freePort } from "./free_port.mjs";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const webDir = resolve(repoRoot, process.env.ENTGRAPH_WEB || "build/web");
export const cliPath = resolve(repoRoot, process.env.ENTGRAPH_CLI || "build/release/native/cli/entgraph");
export const chromiumPath = resolve(repoRoot, process.env.CHROMIUM || "/usr/bin/chromium");
export const artifactsDir = resolve(repoRoot, process.env.ENTGRAPH_ARTIFACTS || "build/test-artifacts/browser");
export const exactIsa = process.env.ENTGRAPH_TEST_NATIVE_ISA || "sse2";
export const dataDir = join(repoRoot, "data");

export const WIDE = { width: 1280, height: 900 };
export const NARROW = { width: 420, height: 900 };
// The sizes issue 16 asks screenshots at: a desktop and a phone.
export const DESKTOP = { width: 1440, height: 900 };
export const PHONE = { width: 390, height: 844 };

// ---------------------------------------------------------------------------
// What the tests need, with a clear message when something is missing.

export function requireWeb() {
  for (const f of ["index.html", "app.js", "entgraph/entgraph.js", "teachers/causal/config.json", "params/causal/index.json"]) {
    if (!existsSync(join(webDir, f)))
      throw new Error(
        `the demo page is not built: ${join(webDir, f)} does not exist. ` +
          "Build it with `make web` (tools/build_web.sh build/web), or set ENTGRAPH_WEB to the built folder.",
      );
  }
}

export function requireCli() {
  if (!existsSync(cliPath))
    throw new Error(
      `entgraph's native CLI is missing: ${cliPath} does not exist. ` +
        "Build it with `make build`, or set ENTGRAPH_CLI to its path.",
    );
}

export function requireChromium() {
  if (!existsSync(chromiumPath))
    throw new Error(
      `chromium is missing: ${chromiumPath} does not exist. ` +
        "Install Debian's chromium (apt-get install chromium), or set CHROMIUM to a Chromium binary.",
    );
}

async function loadPlaywright() {
  try {
    return await import("playwright-core");
  } catch (e) {
    throw new Error(`playwright-core is not installed (run \`npm ci\` in ${repoRoot}): ${e.message}`);
  }
}

// ---------------------------------------------------------------------------
// The static server (web/serve.mjs) on a free port of 127.0.0.1.


// -> { url, stop() }. Fails with the server's output if it does not answer.
// args: serve.mjs's options after the folder and port (e.g. ["--no-isolation"]).
export async function startServer({ args = [] } = {}) {
  requireWeb();
  let lastError = null;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const child = spawn(process.execPath, [join(repoRoot, "web/serve.mjs"), webDir, String(port), ...args], {
      cwd: repoRoot,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (d) => (output += d));
    child.stderr.on("data", (d) => (output += d));
    const exited = new Promise((ok) => child.once("exit", (code) => ok(code)));
    const url = `http://127.0.0.1:${port}/`;
    const deadline = Date.now() + 10000;
    let up = false;
    while (Date.now() < deadline && child.exitCode === null) {
      try {
        const r = await fetch(url, { method: "HEAD" });
        if (r.ok) {
          up = true;
          break;
        }
      } catch {
        // not listening yet
      }
      await new Promise((ok) => setTimeout(ok, 50));
    }
    const stop = async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        await exited;
      }
    };
    if (up) return { url, port, stop };
    await stop();
    lastError = new Error(`web/serve.mjs ${webDir} ${port} did not answer on ${url}: ${output.trim() || "(no output)"}`);
  }
  throw lastError;
}

// ---------------------------------------------------------------------------
// The browser and pages.

export async function launchBrowser() {
  requireChromium();
  const { chromium } = await loadPlaywright();
  return chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
}

// Opens the page at url + query; collects console errors and page errors (in
// `errors`) and warnings (in `warnings`) for the whole life of the page.
// -> { page, errors, warnings }
// contextOptions: more options of the browser context (e.g. { hasTouch: true } for taps).
// init: a function run in the page before its scripts (page.addInitScript).
export async function openPage(browser, url, { query = "", viewport = WIDE, contextOptions = {}, init = null } = {}) {
  const context = await browser.newContext({ viewport, deviceScaleFactor: 1, ...contextOptions });
  const page = await context.newPage();
  if (init) await page.addInitScript(init);
  const errors = [];
  const warnings = [];
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(`console.error: ${m.text()}`);
    else if (m.type() === "warning") warnings.push(m.text());
  });
  page.on("pageerror", (e) => errors.push(`pageerror: ${e.stack || e.message}`));
  page.on("requestfailed", (r) => errors.push(`request failed: ${r.url()} ${r.failure()?.errorText ?? ""}`));
  page.on("response", (r) => {
    if (r.status() >= 400) errors.push(`HTTP ${r.status()}: ${r.url()}`);
  });
  await page.goto(url + query);
  await waitReady(page);
  return { page, errors, warnings, close: () => context.close() };
}

// An init script (openPage's init): the main thread's long tasks (over 50 ms),
// their durations in ms, collected in window.__longTasks from the page's start.
export function recordLongTasks() {
  window.__longTasks = [];
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__longTasks.push(e.duration);
  }).observe({ type: "longtask", buffered: true });
}

// The page's state object (window.entgraphDemo), copied.
export function demo(page) {
  return page.evaluate(() => JSON.parse(JSON.stringify(window.entgraphDemo)));
}

function failOnPageError(d) {
  if (d && d.error) throw new Error(`the page reports an error: ${d.error}`);
}

// Waits for the first update (ready) and no update or load due.
export async function waitReady(page, timeout = 60000) {
  await page.waitForFunction(() => {
    const d = window.entgraphDemo;
    return d && (d.error || (d.ready && !d.pending));
  }, null, { timeout });
  failOnPageError(await demo(page));
}

// Runs action() (which changes something on the page), then waits until the page
// has updated (its counter grew) and has nothing pending. -> the new state.
export async function afterUpdate(page, action, { timeout = 30000 } = {}) {
  const before = await page.evaluate(() => window.entgraphDemo.updates);
  await action();
  try {
    await page.waitForFunction((b) => {
      const d = window.entgraphDemo;
      return d.error || (d.updates > b && !d.pending);
    }, before, { timeout });
  } catch (e) {
    const d = await page.evaluate(() => {
      const { updates, pending, error, teacher, method, value, window: w } = window.entgraphDemo;
      return { updates, pending, error, teacher, method, value, window: w };
    });
    throw new Error(`the page did not update within ${timeout} ms (before: ${before} updates; now ${JSON.stringify(d)}): ${e.message}`);
  }
  const d = await demo(page);
  failOnPageError(d);
  return d;
}

// Sets the range input #param-slider to index and dispatches input and change.
export function setSlider(page, index) {
  return page.evaluate((i) => {
    const s = document.getElementById("param-slider");
    s.value = String(i);
    s.dispatchEvent(new Event("input", { bubbles: true }));
    s.dispatchEvent(new Event("change", { bubbles: true }));
  }, index);
}

export function sliderMax(page) {
  return page.evaluate(() => Number(document.getElementById("param-slider").max));
}

// Chooses a method, one of its values (its string in the manifest; undefined: keep
// the page's) and a union window (-1: none; undefined: keep), each through its
// control, waiting for each update. -> the new state.
export async function chooseMethod(page, method, value, window) {
  let d = await demo(page);
  if (d.method !== method) d = await afterUpdate(page, () => page.selectOption("#method", method));
  if (value !== undefined && value !== null && d.value !== value) {
    const values = await methodValues(page, d.teacher, method);
    const i = values.indexOf(value);
    assert.ok(i >= 0, `${method} has no value ${value} (values: ${values.join(", ")})`);
    d = await afterUpdate(page, () => setSlider(page, i));
  }
  if (window !== undefined && d.window !== window)
    d = await afterUpdate(page, () => page.selectOption("#union-window", String(window)));
  assert.equal(d.method, method);
  if (value !== undefined && value !== null) assert.equal(d.value, value);
  if (window !== undefined) assert.equal(d.window, window);
  return d;
}

// The values of a method in the page's manifest (params/<teacher>/index.json).
export async function methodValues(page, teacher, method) {
  const manifest = await manifestOf(page, teacher);
  const m = manifest.methods.find((x) => x.method === method);
  assert.ok(m, `params/${teacher}/index.json has no method ${method}`);
  return m.values.map((v) => v.value);
}

export function manifestOf(page, teacher) {
  return page.evaluate((t) => fetch(`params/${t}/index.json`).then((r) => r.json()), teacher);
}

// Sets the text box (as typing would: an input event) and waits for the update.
export function typeText(page, text) {
  return afterUpdate(page, () => page.fill("#text", text));
}

// The metric elements' data-value attributes, as numbers (NaN for "").
export function shownNumbers(page, ids = ["recall", "sparsity", "gold-sparsity", "precision", "mean-recall", "mean-sparsity"]) {
  return page.evaluate((list) => {
    const out = {};
    for (const id of list) {
      const v = document.getElementById(id).dataset.value;
      out[id] = v === undefined || v === "" ? NaN : Number(v);
    }
    return out;
  }, ids);
}

// ---------------------------------------------------------------------------
// Canvases and the Pareto SVG.

// A canvas (the first <canvas> under selector): its size, how many pixels are
// drawn (not fully transparent and not white), and a hash of its pixels.
export async function canvasInfo(page, selector) {
  const info = await page.evaluate((sel) => {
    const c = document.querySelector(sel)?.querySelector("canvas") ?? document.querySelector(sel);
    if (!c || c.tagName !== "CANVAS") return null;
    if (c.width === 0 || c.height === 0) return { width: c.width, height: c.height, drawn: 0, distinct: 0, pixels: "" };
    const data = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let drawn = 0;
    const colours = new Set();
    for (let i = 0; i < data.length; i += 4) {
      const [r, g, b, a] = [data[i], data[i + 1], data[i + 2], data[i + 3]];
      if (a !== 0 && !(r === 255 && g === 255 && b === 255)) drawn++;
      if (colours.size < 64) colours.add((r << 24) | (g << 16) | (b << 8) | a);
    }
    // Base64 of the raw pixels, hashed on the node side.
    let s = "";
    for (let i = 0; i < data.length; i += 0x8000) s += String.fromCharCode.apply(null, data.subarray(i, i + 0x8000));
    return { width: c.width, height: c.height, drawn, distinct: colours.size, pixels: btoa(s) };
  }, selector);
  assert.ok(info, `no canvas at ${selector}`);
  const hash = createHash("sha256").update(info.pixels, "base64").digest("hex");
  return { width: info.width, height: info.height, drawn: info.drawn, distinct: info.distinct, hash };
}

export function graphHashes(page) {
  return Promise.all(["#graph-true", "#graph-pred", "#graph-overlay"].map((s) => canvasInfo(page, s).then((i) => i.hash)));
}

// Waits for the Pareto curves of the current text (they start 300 ms after the text settles).
export async function waitPareto(page, timeout = 60000) {
  await page.waitForFunction(() => {
    const d = window.entgraphDemo;
    return d.error || (d.paretoReady && !d.pending);
  }, null, { timeout });
  failOnPageError(await demo(page));
}

// ---------------------------------------------------------------------------
// Layout that has settled. A test that reads where something is (to point at
// it) or how it is laid out waits for these first: a smooth scroll (focus(),
// scrollTo() and scrollIntoView() animate for a few hundred ms while
// scroll-behavior is smooth), a ResizeObserver's redraw, a late status line.

// Waits until the page's scroll position and the box of every element matching
// `selector` (none: the scroll position alone) are the same over three
// consecutive animation frames. Polls; no fixed sleep.
export async function waitSettled(page, selector = null, { timeout = 15000 } = {}) {
  const deadline = Date.now() + timeout;
  let last = "";
  for (;;) {
    const { still, sample } = await page.evaluate(async (sel) => {
      const frame = () => new Promise((ok) => requestAnimationFrame(() => ok()));
      const take = () => {
        const boxes = sel ? [...document.querySelectorAll(sel)].map((e) => {
          const r = e.getBoundingClientRect();
          return [r.left, r.top, r.width, r.height];
        }) : [];
        return JSON.stringify([scrollX, scrollY, boxes]);
      };
      await frame();
      const a = take();
      await frame();
      const b = take();
      await frame();
      const c = take();
      return { still: a === b && b === c, sample: c };
    }, selector);
    if (still) return;
    last = sample;
    if (Date.now() > deadline) throw new Error(`the page kept moving for ${timeout} ms (${selector ?? "scroll"}: ${last})`);
  }
}

// Waits until the three graphs have redrawn at their container's width (they
// redraw from a ResizeObserver after a resize or a new column count), and the
// layout has settled.
export async function waitGraphsLaidOut(page, { timeout = 15000 } = {}) {
  await page.waitForFunction(() => [...document.querySelectorAll(".graph-canvas")].every((root) => {
    const c = root.querySelector("canvas");
    return c && c.width === Math.round(Math.floor(root.clientWidth) * (window.devicePixelRatio || 1));
  }), null, { timeout, polling: "raf" });
  await waitSettled(page, ".graph-canvas canvas", { timeout });
}

// Sets the viewport and waits for the graphs to be redrawn at the new size.
export async function resizeTo(page, size) {
  await page.setViewportSize(size);
  await waitGraphsLaidOut(page);
}

// Scrolls the element into view and waits for the scroll to end there.
export async function scrollSettled(page, selector) {
  await page.locator(selector).scrollIntoViewIfNeeded();
  await waitSettled(page, selector);
}

// Focuses the element (which scrolls it into view, smoothly where the page
// scrolls smoothly) and waits for the scroll to end.
export async function focusSettled(page, selector) {
  await page.focus(selector);
  await waitSettled(page, selector);
}

// The page after `count` more animation frames and the task after them: what
// the browser does for input it already sent (a touch's pointerleave) is done.
export function framesLater(page, count = 2) {
  return page.evaluate(async (k) => {
    for (let i = 0; i < k; i++) await new Promise((ok) => requestAnimationFrame(() => ok()));
    await new Promise((ok) => setTimeout(ok, 0));
  }, count);
}

// ---------------------------------------------------------------------------
// Screenshots.

export function artifactPath(name) {
  mkdirSync(artifactsDir, { recursive: true });
  return join(artifactsDir, name);
}

// Full-page screenshot at the page's viewport: <name>.png.
export async function screenshot(page, name) {
  const path = artifactPath(`${name}.png`);
  await page.mouse.move(0, 0);
  await page.screenshot({ path, fullPage: true });
  return path;
}

// The page resized to 420 pixels wide (a phone), waited until redrawn, and
// saved as <name>.png; the viewport is set back afterwards.
export async function narrowScreenshot(page, name) {
  const old = page.viewportSize();
  await resizeTo(page, NARROW);
  const path = await screenshot(page, name);
  await resizeTo(page, old);
  return path;
}

export function writeArtifact(name, value) {
  const path = artifactPath(name);
  writeFileSync(path, typeof value === "string" ? value : JSON.stringify(value, null, 1) + "\n");
  return path;
}

// ---------------------------------------------------------------------------
// The native CLI.

const tempDirs = [];
process.on("exit", () => {
  if (process.env.ENTGRAPH_TEST_KEEP_TEMP) return;
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
});

export function makeTempDir(prefix = "entgraph-browser-test-") {
  const d = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(d);
  return d;
}

export function runCli(command, args, { isa = exactIsa } = {}) {
  requireCli();
  const argv = [command, ...args, ...(isa ? ["--isa", isa] : [])];
  try {
    return execFileSync(cliPath, argv, {
      encoding: "utf8",
      env: { ...process.env, ENTGRAPH_NUM_THREADS: process.env.ENTGRAPH_NUM_THREADS || "1" },
      stdio: ["ignore", "pipe", "pipe"],
      maxBuffer: 1 << 26,
    });
  } catch (e) {
    throw new Error(`entgraph ${argv.join(" ")} failed (exit ${e.status}): ${e.stderr || e.message}`);
  }
}

// The file's server, browser and one open page: started before its tests,
// stopped after them. The fields are set once `before` has run.
// options: openPage's (init, query, viewport, contextOptions).
export function useBrowserTab(options = {}) {
  const session = { server: null, browser: null, tab: null };
  before(async () => {
    session.server = await startServer();
    session.browser = await launchBrowser();
    session.tab = await openPage(session.browser, session.server.url, options);
  });
  after(async () => {
    await session.browser?.close();
    await session.server?.stop();
  });
  return session;
}
