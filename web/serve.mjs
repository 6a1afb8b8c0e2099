#!/usr/bin/env node
// A tiny dependency-free static server for the demo page.
//   node web/serve.mjs [FOLDER] [PORT] [--no-isolation]     (default: build/web 8000)
// Serves FOLDER on http://127.0.0.1:PORT/ only (not on other interfaces), GET and HEAD,
// never outside FOLDER. Ctrl-C stops it.
//
// Cross-origin isolation: every response carries COOP same-origin and COEP
// require-corp (and CORP same-origin), so the page may use SharedArrayBuffer
// and the package's threaded module. --no-isolation (or ENTGRAPH_NO_ISOLATION=1)
// leaves them out: the page then runs on one thread and says why.
//
// Compression: a file is sent with brotli or gzip, whichever the request's
// Accept-Encoding prefers (brotli on a tie), with Vary: Accept-Encoding, when
//  - a precompressed FILE.br / FILE.gz lies beside it, at least as new
//    (web/compress.mjs writes them for the teachers' weights and the .wasm
//    binaries at build time: brotli 11 takes the 1.8 MB model to 87.5%, too
//    slow to do per request), or
//  - it is text, JSON, JavaScript, SVG or WebAssembly of 1 KiB or more: then it
//    is compressed here (brotli 5), once, and kept in memory until it changes.
// Other files (weights without a precompressed copy) are sent as they are.
// The ETag names the encoding. Range requests are not served: the whole file
// comes with a 200 (Accept-Ranges: none), the same body as without Range.
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { compress, SUFFIX } from "./compress.mjs";

const args = process.argv.slice(2);
const flags = new Set(args.filter((a) => a.startsWith("--")));
const positional = args.filter((a) => !a.startsWith("--"));
for (const flag of flags)
  if (flag !== "--no-isolation") {
    console.error(`serve: unknown option '${flag}' (expected --no-isolation)`);
    process.exit(2);
  }
const isolated = !flags.has("--no-isolation") && !["1", "true", "yes"].includes(process.env.ENTGRAPH_NO_ISOLATION ?? "");

const root = path.resolve(positional[0] ?? "build/web");
const port = Number(positional[1] ?? 8000);
const host = "127.0.0.1";

const MIME = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".txt": "text/plain; charset=utf-8",
  ".md": "text/plain; charset=utf-8",
  ".csv": "text/csv; charset=utf-8",
  ".ts": "text/plain; charset=utf-8",
  ".wasm": "application/wasm",
  ".safetensors": "application/octet-stream",
  ".npy": "application/octet-stream",
};
const COMPRESSIBLE = /^(text\/|application\/(json|wasm)|image\/svg\+xml)/;
// Smaller bodies fit in one packet anyway.
const MIN_COMPRESS_BYTES = 1024;

if (!fs.existsSync(path.join(root, "index.html"))) {
  console.error(`serve: ${root}/index.html not found (run make web first)`);
  process.exit(1);
}
if (!Number.isInteger(port) || port < 1 || port > 65535) {
  console.error(`serve: bad port '${positional[1]}'`);
  process.exit(2);
}

const ISOLATION_HEADERS = isolated
  ? {
      "Cross-Origin-Opener-Policy": "same-origin",
      "Cross-Origin-Embedder-Policy": "require-corp",
      "Cross-Origin-Resource-Policy": "same-origin",
    }
  : {};

function send(res, status, text) {
  res.writeHead(status, {
    ...ISOLATION_HEADERS,
    "Content-Type": "text/plain; charset=utf-8",
    "Content-Length": Buffer.byteLength(text),
  });
  res.end(text);
}

// The encoding to send: "br", "gzip" or null (identity), from Accept-Encoding
// with its q-values ("gzip;q=0" refuses gzip; "*" stands for any other), among
// the `offered` ones.
function chooseEncoding(acceptEncoding, offered) {
  const q = new Map();
  for (const part of String(acceptEncoding ?? "").split(",")) {
    const [name, ...params] = part.trim().toLowerCase().split(";");
    if (!name) continue;
    let weight = 1;
    for (const p of params) {
      const m = /^\s*q\s*=\s*([0-9.]+)\s*$/.exec(p);
      if (m) weight = Number(m[1]);
    }
    q.set(name, Number.isFinite(weight) ? weight : 0);
  }
  const weight = (name) => (!offered.includes(name) ? 0 : q.has(name) ? q.get(name) : q.has("*") ? q.get("*") : 0);
  const br = weight("br"), gzip = weight("gzip");
  if (br > 0 && br >= gzip) return "br";
  if (gzip > 0) return "gzip";
  return null;
}

// Compressed bodies by "encoding:file" (promises, so that concurrent requests
// share one compression), valid while the file's size and mtime hold.
// Compression runs on libuv's threads: the server keeps answering meanwhile.
const compressedCache = new Map();
function compressed(file, stat, encoding) {
  const key = `${encoding}:${file}`;
  const hit = compressedCache.get(key);
  if (hit && hit.size === stat.size && hit.mtimeMs === stat.mtimeMs) return hit.body;
  const body = fs.promises.readFile(file).then((raw) => compress(raw, encoding));
  body.catch(() => compressedCache.delete(key));
  compressedCache.set(key, { size: stat.size, mtimeMs: stat.mtimeMs, body });
  return body;
}

// Whether a real path lies inside the served folder (links must not lead out).
function insideRoot(file) {
  const real = fs.realpathSync(file);
  const realRoot = fs.realpathSync(root);
  return real === realRoot || real.startsWith(realRoot + path.sep);
}

// The precompressed siblings of `file` that are regular files inside the
// folder and at least as new as it: { br: { file, stat }, gzip: ... }.
function siblings(file, stat) {
  const found = {};
  for (const [encoding, suffix] of Object.entries(SUFFIX)) {
    try {
      const sib = fs.statSync(file + suffix);
      if (sib.isFile() && sib.mtimeMs >= stat.mtimeMs && insideRoot(file + suffix)) found[encoding] = { file: file + suffix, stat: sib };
    } catch {
      // none
    }
  }
  return found;
}

// Sends a file's bytes: at most the size Content-Length promised (a file that
// grows while it is sent must not spill into the next response on a
// kept-alive connection).
function sendFile(res, file, size) {
  if (size === 0) return res.end();
  fs.createReadStream(file, { start: 0, end: size - 1 }).on("error", () => res.destroy()).pipe(res);
}

const server = http.createServer((req, res) => {
  if (req.method !== "GET" && req.method !== "HEAD") return send(res, 405, "method not allowed\n");
  let pathname;
  try {
    pathname = decodeURIComponent(new URL(req.url, "http://localhost").pathname);
  } catch {
    return send(res, 400, "bad request\n");
  }
  if (pathname.includes("\0")) return send(res, 400, "bad request\n");
  // Resolve inside the root; anything that lands outside it (../, absolute paths) is refused.
  let file = path.resolve(root, "." + path.posix.normalize("/" + pathname));
  if (file !== root && !file.startsWith(root + path.sep)) return send(res, 403, "forbidden\n");
  let stat;
  try {
    stat = fs.statSync(file);
    if (stat.isDirectory()) {
      file = path.join(file, "index.html");
      stat = fs.statSync(file);
    }
  } catch {
    return send(res, 404, "not found\n");
  }
  if (!stat.isFile()) return send(res, 404, "not found\n");
  // Symbolic links inside the folder must not lead out of it either.
  if (!insideRoot(file)) return send(res, 403, "forbidden\n");
  const type = MIME[path.extname(file).toLowerCase()] ?? "application/octet-stream";
  const ready = siblings(file, stat);
  const onTheFly = COMPRESSIBLE.test(type) && stat.size >= MIN_COMPRESS_BYTES;
  const offered = onTheFly ? ["br", "gzip"] : Object.keys(ready);
  const compressible = offered.length > 0;
  const encoding = compressible ? chooseEncoding(req.headers["accept-encoding"], offered) : null;
  // "no-cache" makes the browser ask each time; the ETag (the file's size and
  // mtime, and the encoding) lets it keep its copy with a 304. The page's two
  // workers and each pthread worker load the same module: once over the wire.
  const etag = `"${stat.size.toString(36)}-${Math.floor(stat.mtimeMs).toString(36)}${encoding ? `-${encoding}` : ""}"`;
  const headers = {
    ...ISOLATION_HEADERS,
    "Content-Type": type,
    "Cache-Control": "no-cache",
    "ETag": etag,
    "X-Content-Type-Options": "nosniff",
    "Accept-Ranges": "none",
  };
  if (compressible) headers["Vary"] = "Accept-Encoding";
  const known = req.headers["if-none-match"];
  if (known && known.split(",").some((tag) => tag.trim().replace(/^W\//, "") === etag)) {
    res.writeHead(304, headers);
    return res.end();
  }
  const sibling = encoding && ready[encoding];
  if (sibling) {
    res.writeHead(200, { ...headers, "Content-Encoding": encoding, "Content-Length": sibling.stat.size });
    if (req.method === "HEAD") return res.end();
    return sendFile(res, sibling.file, sibling.stat.size);
  }
  if (encoding) {
    compressed(file, stat, encoding).then(
      (body) => {
        res.writeHead(200, { ...headers, "Content-Encoding": encoding, "Content-Length": body.length });
        res.end(req.method === "HEAD" ? undefined : body);
      },
      () => send(res, 500, "could not read the file\n"),
    );
    return;
  }
  res.writeHead(200, { ...headers, "Content-Length": stat.size });
  if (req.method === "HEAD") return res.end();
  sendFile(res, file, stat.size);
});

server.on("error", (err) => {
  console.error(`serve: ${err.code === "EADDRINUSE" ? `port ${port} is in use` : err.message}`);
  process.exit(1);
});
server.listen(port, host, () => {
  console.log(
    `entgraph demo: serving ${path.relative(process.cwd(), root) || "."} on http://localhost:${port}/ ` +
      `(${isolated ? "cross-origin isolated" : "not cross-origin isolated: --no-isolation"}; Ctrl-C stops)`,
  );
});
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    server.close();
    process.exit(0);
  });
}
