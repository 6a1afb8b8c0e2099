// web/serve.mjs on its own, over raw HTTP (no browser): the cross-origin
// isolation headers and --no-isolation, compression per Accept-Encoding (the
// bytes decompress to the file; Content-Length is the body's), precompressed
// copies beside a file (web/compress.mjs), HEAD, Range, and the paths it refuses.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, mkdirSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import zlib from "node:zlib";
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { freePort } from "./free_port.mjs";
import { compress } from "../../web/compress.mjs";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const serveScript = join(repoRoot, "web/serve.mjs");

// A folder with a page, a large script, small and large JSON, weights, and a
// secret beside it that a link inside points to.
const base = mkdtempSync(join(tmpdir(), "entgraph-serve-"));
const root = join(base, "site");
mkdirSync(join(root, "sub"), { recursive: true });
const bigScript = Buffer.from("export const words = [\n" + Array.from({ length: 4000 }, (_, i) => `  "word ${i}",\n`).join("") + "];\n");
const bigJson = Buffer.from(JSON.stringify({ values: Array.from({ length: 3000 }, (_, i) => i / 7) }));
const weights = Buffer.alloc(64 * 1024);
for (let i = 0; i < weights.length; i += 4) weights.writeFloatLE(Math.sin(i) * 3, i);
writeFileSync(join(root, "index.html"), "<!doctype html><title>t</title>" + "<p>hello</p>".repeat(200));
writeFileSync(join(root, "app.js"), bigScript);
writeFileSync(join(root, "sub", "data.json"), bigJson);
writeFileSync(join(root, "small.json"), '{"a":1}');
writeFileSync(join(root, "model.safetensors"), weights);
writeFileSync(join(root, "core.worker.js"), "self.onmessage = () => {};\n".repeat(100));
// A teacher's weights with the copies web/compress.mjs writes at build time (half-precision numbers: little to gain).
mkdirSync(join(root, "teacher"));
const model = Buffer.alloc(48 * 1024);
for (let i = 0; i < model.length; i += 2) model.writeUInt16LE(0x3c00 + ((Math.sin(i) * 900) & 0x3ff), i);
writeFileSync(join(root, "teacher", "model.safetensors"), model);
const modelBr = await compress(model, "br", { best: true });
const modelGz = await compress(model, "gzip", { best: true });
writeFileSync(join(root, "teacher", "model.safetensors.br"), modelBr);
writeFileSync(join(root, "teacher", "model.safetensors.gz"), modelGz);
writeFileSync(join(base, "secret.txt"), "secret\n");
symlinkSync(join(base, "secret.txt"), join(root, "leak.txt"));


// Starts the server with extra arguments and environment -> { port, stop }.
async function serve(extraArgs = [], env = {}) {
  const port = await freePort();
  const child = spawn(process.execPath, [serveScript, root, String(port), ...extraArgs], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (d) => (output += d));
  child.stderr.on("data", (d) => (output += d));
  const exited = new Promise((ok) => child.once("exit", ok));
  const deadline = Date.now() + 10000;
  for (;;) {
    try {
      await request(port, "/", { method: "HEAD" });
      break;
    } catch (e) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`serve.mjs did not start: ${output} ${e.message}`);
      await new Promise((ok) => setTimeout(ok, 50));
    }
  }
  return {
    port,
    output: () => output,
    stop: async () => {
      if (child.exitCode === null) {
        child.kill("SIGTERM");
        await exited;
      }
    },
  };
}

// One raw request (the path is sent as written: no normalisation) -> { status, headers, body }.
function request(port, path, { method = "GET", headers = {} } = {}) {
  return new Promise((ok, fail) => {
    const req = http.request({ host: "127.0.0.1", port, path, method, headers }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => ok({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on("error", fail);
    req.end();
  });
}

function decode(response) {
  const encoding = response.headers["content-encoding"];
  if (encoding === "br") return zlib.brotliDecompressSync(response.body);
  if (encoding === "gzip") return zlib.gunzipSync(response.body);
  assert.equal(encoding, undefined, `unexpected Content-Encoding ${encoding}`);
  return response.body;
}

after(() => rmSync(base, { recursive: true, force: true }));

describe("web/serve.mjs, cross-origin isolated (the default)", () => {
  let server;
  before(async () => (server = await serve()));
  after(() => server.stop());

  test("every response carries COOP, COEP and CORP, errors included", async () => {
    for (const path of ["/", "/app.js", "/model.safetensors", "/missing.js"]) {
      const r = await request(server.port, path, { headers: { "accept-encoding": "gzip, br" } });
      assert.equal(r.headers["cross-origin-opener-policy"], "same-origin", path);
      assert.equal(r.headers["cross-origin-embedder-policy"], "require-corp", path);
      assert.equal(r.headers["cross-origin-resource-policy"], "same-origin", path);
    }
    assert.match(server.output(), /cross-origin isolated/);
  });

  test("a copy the browser holds is revalidated with a 304: per file and encoding, and not after the file changes", async () => {
    const first = await request(server.port, "/app.js", { headers: { "accept-encoding": "br" } });
    const tag = first.headers.etag;
    assert.match(tag ?? "", /^".+-br"$/, "an ETag naming the encoding");
    const again = await request(server.port, "/app.js", { headers: { "accept-encoding": "br", "if-none-match": tag } });
    assert.equal(again.status, 304);
    assert.equal(again.body.length, 0);
    assert.equal(again.headers["cross-origin-embedder-policy"], "require-corp", "a 304 keeps the isolation headers");
    const other = await request(server.port, "/app.js", { headers: { "if-none-match": tag } });
    assert.equal(other.status, 200, "the uncompressed body is another representation");
    const plainTag = other.headers.etag;
    assert.notEqual(plainTag, tag);
    assert.equal((await request(server.port, "/app.js", { headers: { "if-none-match": `"x", W/${plainTag}` } })).status, 304);
    const file = join(root, "changing.txt");
    writeFileSync(file, "one");
    const before = (await request(server.port, "/changing.txt")).headers.etag;
    writeFileSync(file, "three");
    const after = await request(server.port, "/changing.txt", { headers: { "if-none-match": before } });
    assert.equal(after.status, 200, "a changed file is sent again");
    assert.equal(after.body.toString(), "three");
  });

  test("brotli and gzip per Accept-Encoding round-trip to the file, with the body's Content-Length", async () => {
    const cases = [
      ["/app.js", bigScript, "text/javascript; charset=utf-8"],
      ["/sub/data.json", bigJson, "application/json; charset=utf-8"],
      ["/core.worker.js", null, "text/javascript; charset=utf-8"],
    ];
    for (const [path, content, type] of cases) {
      const plain = await request(server.port, path);
      assert.equal(plain.headers["content-encoding"], undefined, `${path}: no Accept-Encoding, no compression`);
      assert.equal(plain.headers["content-type"], type);
      const expected = content ?? plain.body;
      assert.deepEqual(plain.body, expected);
      for (const [accept, encoding] of [["gzip, deflate, br", "br"], ["gzip", "gzip"], ["br;q=0.5, gzip;q=0.8", "gzip"],
                                        ["gzip;q=0, br", "br"], ["*", "br"], ["identity", undefined], ["br;q=0, gzip;q=0", undefined]]) {
        const r = await request(server.port, path, { headers: { "accept-encoding": accept } });
        assert.equal(r.status, 200);
        assert.equal(r.headers["content-encoding"], encoding, `${path} with Accept-Encoding: ${accept}`);
        assert.equal(r.headers.vary, "Accept-Encoding");
        assert.equal(Number(r.headers["content-length"]), r.body.length, `${path} ${accept}: Content-Length is the body's`);
        assert.deepEqual(decode(r), expected, `${path} ${accept}: decompresses to the file`);
        if (encoding) assert.ok(r.body.length < expected.length / 2, `${path} ${accept}: ${r.body.length} of ${expected.length} bytes`);
      }
    }
  });

  test("small files and weights are sent as they are", async () => {
    for (const [path, content] of [["/small.json", Buffer.from('{"a":1}')], ["/model.safetensors", weights]]) {
      const r = await request(server.port, path, { headers: { "accept-encoding": "br, gzip" } });
      assert.equal(r.headers["content-encoding"], undefined, path);
      assert.equal(Number(r.headers["content-length"]), content.length);
      assert.deepEqual(r.body, content);
    }
  });

  test("weights with precompressed copies beside them: the copy the request prefers, its bytes; a stale copy is not sent", async () => {
    const path = "/teacher/model.safetensors";
    assert.ok(modelBr.length < model.length && modelGz.length < model.length, "the fixture compresses");
    for (const [accept, encoding, body] of [["gzip, deflate, br", "br", modelBr], ["gzip", "gzip", modelGz], ["br;q=0.1, gzip", "gzip", modelGz],
                                            ["identity", undefined, model], ["", undefined, model]]) {
      const r = await request(server.port, path, { headers: { "accept-encoding": accept } });
      assert.equal(r.status, 200);
      assert.equal(r.headers["content-encoding"], encoding, `Accept-Encoding: ${accept}`);
      assert.equal(r.headers.vary, "Accept-Encoding", "the body depends on Accept-Encoding");
      assert.equal(r.headers["content-type"], "application/octet-stream");
      assert.equal(Number(r.headers["content-length"]), body.length);
      assert.deepEqual(r.body, body, `${accept}: the precompressed file's bytes`);
      assert.deepEqual(decode(r), model);
      if (encoding) assert.match(r.headers.etag, new RegExp(`-${encoding}"$`));
      const head = await request(server.port, path, { method: "HEAD", headers: { "accept-encoding": accept } });
      assert.equal(head.body.length, 0);
      for (const name of ["content-length", "content-encoding", "etag", "vary"]) assert.equal(head.headers[name], r.headers[name], `HEAD ${name}`);
      const again = await request(server.port, path, { headers: { "accept-encoding": accept, "if-none-match": r.headers.etag } });
      assert.equal(again.status, 304, `${accept}: revalidated`);
    }
    // The weights changed after their copies were written: the copies are stale.
    const file = join(root, "teacher", "model.safetensors");
    const later = new Date(Date.now() + 60000);
    utimesSync(file, later, later);
    try {
      const r = await request(server.port, path, { headers: { "accept-encoding": "br, gzip" } });
      assert.equal(r.headers["content-encoding"], undefined, "a copy older than the file is not sent");
      assert.deepEqual(r.body, model);
    } finally {
      const now = new Date(Date.now() - 60000);
      utimesSync(file, now, now);
    }
  });

  test("a Range request gets the whole representation with a 200 (ranges are not served)", async () => {
    for (const [path, accept] of [["/teacher/model.safetensors", "br"], ["/app.js", "gzip"], ["/model.safetensors", ""]]) {
      const full = await request(server.port, path, { headers: { "accept-encoding": accept } });
      const r = await request(server.port, path, { headers: { "accept-encoding": accept, range: "bytes=0-99" } });
      assert.equal(r.status, 200, `${path}: no 206`);
      assert.equal(r.headers["accept-ranges"], "none");
      assert.equal(r.headers["content-range"], undefined);
      assert.deepEqual(r.body, full.body, `${path}: the same bytes as without Range`);
    }
  });

  test("HEAD has GET's headers and no body", async () => {
    for (const accept of ["br", "gzip", ""]) {
      const get = await request(server.port, "/app.js", { headers: { "accept-encoding": accept } });
      const head = await request(server.port, "/app.js", { method: "HEAD", headers: { "accept-encoding": accept } });
      assert.equal(head.status, 200);
      assert.equal(head.body.length, 0);
      for (const name of ["content-length", "content-encoding", "content-type", "vary", "cross-origin-embedder-policy"])
        assert.equal(head.headers[name], get.headers[name], `${name} with Accept-Encoding '${accept}'`);
    }
  });

  test("paths outside the folder, links out of it, NUL, bad escapes and other methods are refused", async () => {
    // Dot segments are resolved by the URL parser or the folder check: either
    // way nothing outside is found (404) or it is refused (403).
    const outside = [403, 404];
    const refused = [
      ["/../secret.txt", outside], ["/sub/../../secret.txt", outside], ["/%2e%2e/secret.txt", outside],
      ["/..%2fsecret.txt", outside], ["/sub/..%2f..%2fsecret.txt", outside], ["/leak.txt", [403]], ["/a%00b", [400]],
      ["/%zz", [400]], ["/nothing.js", [404]], ["/sub/", [404]],
    ];
    for (const [path, statuses] of refused) {
      const r = await request(server.port, path, { headers: { "accept-encoding": "br" } });
      assert.ok(statuses.includes(r.status), `${path}: HTTP ${r.status}, expected ${statuses.join(" or ")}`);
      assert.ok(!r.body.toString().includes("secret\n"), `${path} leaked the file`);
    }
    const post = await request(server.port, "/app.js", { method: "POST" });
    assert.equal(post.status, 405);
    const index = await request(server.port, "/", { headers: { "accept-encoding": "gzip" } });
    assert.equal(index.status, 200);
    assert.match(decode(index).toString(), /<title>t<\/title>/);
  });
});

describe("web/compress.mjs", () => {
  test("writes .br and .gz beside weights and WebAssembly (.wasm, the package's core modules) only, each decompressing to the file; refuses a missing folder", () => {
    const dir = mkdtempSync(join(tmpdir(), "entgraph-compress-"));
    try {
      mkdirSync(join(dir, "teachers", "causal"), { recursive: true });
      mkdirSync(join(dir, "entgraph"));
      const files = {
        "teachers/causal/model.safetensors": model, "core.wasm": bigScript, "entgraph/entgraph_core.js": bigScript,
        "entgraph/entgraph_core_threads.js": bigScript, "app.js": bigScript, "entgraph/entgraph_core_threads.worker.js": bigScript,
      };
      for (const [name, body] of Object.entries(files)) writeFileSync(join(dir, name), body);
      const run = spawnSync(process.execPath, [join(repoRoot, "web/compress.mjs"), dir], { encoding: "utf8" });
      assert.equal(run.status, 0, run.stderr);
      for (const [name, body] of Object.entries(files)) {
        const wanted = !/(app|worker)\.js$/.test(name);
        assert.equal(existsSync(join(dir, name + ".br")), wanted, `${name}.br`);
        assert.equal(existsSync(join(dir, name + ".gz")), wanted, `${name}.gz`);
        if (!wanted) continue;
        assert.deepEqual(zlib.brotliDecompressSync(readFileSync(join(dir, name + ".br"))), body);
        assert.deepEqual(zlib.gunzipSync(readFileSync(join(dir, name + ".gz"))), body);
        assert.match(run.stdout, new RegExp(`${name.replace(/[./]/g, "\\$&")}: ${body.length} bytes, brotli \\d+, gzip \\d+`));
      }
      const bad = spawnSync(process.execPath, [join(repoRoot, "web/compress.mjs"), join(dir, "missing")], { encoding: "utf8" });
      assert.equal(bad.status, 2);
      assert.match(bad.stderr, /not a folder: '.*missing'/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("web/serve.mjs without isolation", () => {
  test("--no-isolation and ENTGRAPH_NO_ISOLATION=1 leave out COOP, COEP and CORP; compression stays", async () => {
    for (const [args, env] of [[["--no-isolation"], {}], [[], { ENTGRAPH_NO_ISOLATION: "1" }]]) {
      const server = await serve(args, env);
      try {
        const r = await request(server.port, "/app.js", { headers: { "accept-encoding": "gzip" } });
        assert.equal(r.status, 200);
        for (const name of ["cross-origin-opener-policy", "cross-origin-embedder-policy", "cross-origin-resource-policy"])
          assert.equal(r.headers[name], undefined, `${name} with ${JSON.stringify({ args, env })}`);
        assert.equal(r.headers["content-encoding"], "gzip");
        assert.deepEqual(decode(r), bigScript);
        assert.match(server.output(), /not cross-origin isolated/);
      } finally {
        await server.stop();
      }
    }
  });

  test("an unknown option is refused", async () => {
    const child = spawn(process.execPath, [serveScript, root, "0", "--isolation-off"], { stdio: ["ignore", "pipe", "pipe"] });
    let err = "";
    child.stderr.on("data", (d) => (err += d));
    const code = await new Promise((ok) => child.once("exit", ok));
    assert.equal(code, 2);
    assert.match(err, /unknown option '--isolation-off'/);
  });
});
