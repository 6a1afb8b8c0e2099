// Teachers and predictors from a folder or a URL (wasm/files.js, docs/JAVASCRIPT.md
// "Files and folders"): a relative path from the current folder, an absolute
// path, a file: URL (string or URL object) and an http URL give the same
// teacher and predictors; a missing file's message names the file and the
// folder or URL searched. In Chromium (playwright-core, as tests/browser),
// a relative path is a URL relative to the page.
import assert from "node:assert/strict";
import { copyFileSync, cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { extname, join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, describe, test } from "node:test";

import { dataFile, importPackageModule, loadPackage, loadTeacher, makeTempDir, packageDir, repoRoot } from "./helpers.mjs";

const TYPES = { ".js": "text/javascript", ".html": "text/html", ".json": "application/json" };

// Serves the files of `root` over http on 127.0.0.1 (404 for anything missing).
function serveFolder(root) {
  const server = createServer((request, response) => {
    try {
      const path = decodeURIComponent(new URL(request.url, "http://x").pathname);
      const body = readFileSync(join(root, path));
      response.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream" });
      response.end(body);
    } catch {
      response.writeHead(404);
      response.end("not found");
    }
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

async function rejection(call, what) {
  try {
    await call();
  } catch (e) {
    assert.ok(e instanceof Error, `${what}: rejected with ${e}, not an Error`);
    return e;
  }
  assert.fail(`${what}: did not reject`);
}

describe("loading from a folder or a URL", () => {
  let eg;
  let root;
  let server;
  let http;
  let reference;
  const windowFile = "window-window-1.json", sharedFile = "window-window-3.json";

  before(async () => {
    eg = await loadPackage();
    root = makeTempDir("entgraph-loading-");
    mkdirSync(join(root, "teacher"));
    for (const f of ["config.json", "model.safetensors"]) copyFileSync(dataFile("teacher-causal", f), join(root, "teacher", f));
    // A manifest as tools/build_web.sh writes: window 5 shares window 3's file with its own settings.
    mkdirSync(join(root, "params"));
    for (const [file, w] of [[windowFile, 1], [sharedFile, 3], ["global-global-2.json", null]]) {
      const p = w === null ? eg.Predictor.create("global", { global: 2 }) : eg.Predictor.create("window", { window: w });
      writeFileSync(join(root, "params", file), p.serialize());
      p.dispose();
    }
    const manifest = {
      format: "entgraph-web-params", version: 1, teacher: "causal", fitted_on: "test",
      methods: [
        { method: "window", parameter: "window", values: [
          { value: "1", file: windowFile }, { value: "3", file: sharedFile },
          { value: "5", file: "window-window-5.json", source: sharedFile, settings: { window: "5" } }] },
        { method: "global", parameter: "global", values: [{ value: "2", file: "global-global-2.json" }] },
      ],
    };
    writeFileSync(join(root, "params", "index.json"), JSON.stringify(manifest));
    mkdirSync(join(root, "only-config"));
    copyFileSync(dataFile("teacher-causal", "config.json"), join(root, "only-config", "config.json"));
    mkdirSync(join(root, "bad-params"));
    writeFileSync(join(root, "bad-params", "index.json"), JSON.stringify({ ...manifest, methods: manifest.methods.slice(1) }));
    writeFileSync(join(root, "bad-params", "global-global-2.json"), '{"format": "entgraph-predictor", "version": 1, "method": "nope"}');
    mkdirSync(join(root, "not-a-manifest"));
    writeFileSync(join(root, "not-a-manifest", "index.json"), '{"format": "other"}');
    server = await serveFolder(root);
    http = `http://127.0.0.1:${server.address().port}`;
    reference = loadTeacher(eg, "teacher-causal");
  });
  after(() => {
    server?.close();
    reference?.dispose();
  });

  function sameTeacher(teacher, what) {
    const a = teacher.forward("In the beginning"), b = reference.forward("In the beginning");
    try {
      assert.deepEqual(teacher.config, reference.config, `${what}: config`);
      assert.deepEqual(a.queries(3, 2), b.queries(3, 2), `${what}: queries of layer 3, head 2`);
    } finally {
      a.dispose();
      b.dispose();
      teacher.dispose();
    }
  }

  test("a teacher from a relative path, an absolute path, a file: URL and an http URL", async () => {
    const cwd = process.cwd();
    process.chdir(join(root, "params"));
    try {
      sameTeacher(await eg.loadTeacher(join("..", "teacher")), "relative path");
    } finally {
      process.chdir(cwd);
    }
    sameTeacher(await eg.loadTeacher(join(root, "teacher")), "absolute path");
    sameTeacher(await eg.loadTeacher(pathToFileURL(join(root, "teacher")).href), "file: URL");
    sameTeacher(await eg.loadTeacher(pathToFileURL(join(root, "teacher/"))), "file: URL object with a slash");
    sameTeacher(await eg.loadTeacher(`${http}/teacher`), "http URL");
    sameTeacher(await eg.loadTeacher(`${http}/teacher/`), "http URL with a slash");
  });

  test("predictors from a manifest, on disk and over http; a shared fit takes its own settings", async () => {
    for (const source of [join(root, "params"), relative(process.cwd(), join(root, "params")), `${http}/params`]) {
      const loaded = await eg.loadPredictors(source);
      try {
        assert.deepEqual(loaded.map((e) => [e.method, e.value, e.file]), [
          ["window", "1", windowFile], ["window", "3", sharedFile], ["window", "5", "window-window-5.json"],
          ["global", "2", "global-global-2.json"]], source);
        assert.deepEqual(loaded.map((e) => e.predictor.settings), [{ window: "1" }, { window: "3" }, { window: "5" }, { global: "2" }]);
        const g = loaded[2].predictor.predict(new Float32Array(8 * 4), new Float32Array(8 * 4), { queries: 8, keys: 8, dim: 4 });
        assert.deepEqual([...g.indices.subarray(g.offsets[0], g.offsets[1])], [0, 1, 2, 3, 4, 5], "window 5 around query 0");
      } finally {
        for (const e of loaded) e.predictor.dispose();
      }
    }
    const some = await eg.loadPredictors(`${http}/params`, { methods: ["global"] });
    assert.deepEqual(some.map((e) => e.file), ["global-global-2.json"]);
    some[0].predictor.dispose();
    const one = await eg.loadPredictor(pathToFileURL(join(root, "params", sharedFile)));
    assert.deepEqual(one.settings, { window: "3" });
    one.dispose();
  });

  test("files: fetchBytes and fetchText from the package and from the module", async () => {
    const { fetchBytes, fetchText } = await importPackageModule("entgraph.js");
    const bytes = readFileSync(join(root, "teacher", "config.json"));
    assert.deepEqual(await fetchBytes(join(root, "teacher", "config.json")), new Uint8Array(bytes));
    assert.equal(await eg.fetchText(`${http}/teacher/config.json`), bytes.toString("utf8"));
    assert.equal(await fetchText(pathToFileURL(join(root, "teacher", "config.json"))), bytes.toString("utf8"));
  });

  test("a missing file is named with the folder or URL searched", async () => {
    const cases = [
      [() => eg.loadTeacher(join(root, "only-config")),
       `loadTeacher: model.safetensors is missing from ${join(root, "only-config")} (no such file)`],
      [() => eg.loadTeacher(`${http}/only-config`), `loadTeacher: model.safetensors is missing from ${http}/only-config (HTTP 404)`],
      [() => eg.loadTeacher(join(root, "nowhere")), `loadTeacher: the folder ${join(root, "nowhere")} does not exist`],
      [() => eg.loadPredictors(join(root, "teacher")), `loadPredictors: index.json is missing from ${join(root, "teacher")} (no such file)`],
      [() => eg.loadPredictors(`${http}/teacher`), `loadPredictors: index.json is missing from ${http}/teacher (HTTP 404)`],
      [() => eg.fetchBytes(join(root, "nothing.txt")), `fetchBytes: ${join(root, "nothing.txt")} does not exist`],
      [() => eg.fetchText(`${http}/nothing.txt`), `fetchText: ${http}/nothing.txt does not exist (HTTP 404)`],
      [() => eg.loadPredictor(`${http}/params/nothing.json`), `loadPredictor: ${http}/params/nothing.json does not exist (HTTP 404)`],
    ];
    for (const [call, message] of cases) assert.equal((await rejection(call, message)).message, message);
  });

  test("in a browser, relative paths are URLs relative to the page", async (t) => {
    const chromiumPath = resolve(repoRoot, process.env.CHROMIUM || "/usr/bin/chromium");
    let chromium;
    try {
      ({ chromium } = await import("playwright-core"));
    } catch {
      chromium = null;
    }
    if (!chromium || !existsSync(chromiumPath)) {
      t.skip(`needs playwright-core and Chromium (${chromiumPath}), as the browser tests do`);
      return;
    }
    cpSync(packageDir, join(root, "entgraph"), { recursive: true });
    writeFileSync(join(root, "page.html"), `<!doctype html><script type="module">
      import { loadEntgraph } from "./entgraph/entgraph.js";
      try {
        const eg = await loadEntgraph();
        const teacher = await eg.loadTeacher("teacher");
        const out = teacher.forward("In the beginning");
        const loaded = await eg.loadPredictors("params", { methods: ["window"] });
        let missing = null;
        try { await eg.loadTeacher("only-config"); } catch (e) { missing = e.message; }
        window.result = { queries: Array.from(out.queries(3, 2)), files: loaded.map((e) => e.file),
                          settings: loaded.map((e) => e.predictor.settings), missing,
                          text: (await eg.fetchText("teacher/config.json")).length };
      } catch (e) {
        window.result = { error: String(e?.stack ?? e) };
      }
    </script>`);
    const browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
    try {
      const page = await browser.newPage();
      await page.goto(`${http}/page.html`);
      const result = await (await page.waitForFunction(() => window.result, null, { timeout: 60_000 })).jsonValue();
      assert.equal(result.error, undefined, result.error);
      const expected = reference.forward("In the beginning");
      assert.deepEqual(result.queries, Array.from(expected.queries(3, 2)), "the teacher read over http gives node's queries");
      expected.dispose();
      assert.deepEqual(result.files, [windowFile, sharedFile, "window-window-5.json"]);
      assert.deepEqual(result.settings, [{ window: "1" }, { window: "3" }, { window: "5" }]);
      assert.equal(result.missing, `loadTeacher: model.safetensors is missing from ${http}/only-config (HTTP 404)`);
      assert.equal(result.text, readFileSync(join(root, "teacher", "config.json"), "utf8").length);
    } finally {
      await browser.close();
    }
  });

  test("bad manifests, bad parameter files and bad arguments say so", async () => {
    const cases = [
      [() => eg.loadPredictors(join(root, "not-a-manifest")), /^loadPredictors: .*not-a-manifest: index\.json is not a manifest of parameter files/],
      [() => eg.loadPredictors(join(root, "params"), { methods: ["routing"] }), /index\.json lists no routing \(it lists window, global\)$/],
      [() => eg.loadPredictors(join(root, "bad-params")), /^loadPredictors: .*bad-params[\\/]global-global-2\.json: .*unknown predictor method 'nope'/],
      [() => eg.loadTeacher(42), /^loadTeacher: expected a path or a URL \(got number 42\)$/],
      [() => eg.loadPredictors(""), /^loadPredictors: expected a path or a URL/],
    ];
    for (const [call, pattern] of cases) assert.match((await rejection(call, String(pattern))).message, pattern);
  });
});
