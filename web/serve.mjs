#!/usr/bin/env node
// A tiny dependency-free static server for the demo page.
//   node web/serve.mjs [FOLDER] [PORT]      (default: build/web 8000)
// Serves FOLDER on http://127.0.0.1:PORT/ only (not on other interfaces), GET and HEAD,
// never outside FOLDER. Ctrl-C stops it.
import http from "node:http";
import fs from "node:fs";
import path from "node:path";

const root = path.resolve(process.argv[2] ?? "build/web");
const port = Number(process.argv[3] ?? 8000);
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

if (!fs.existsSync(path.join(root, "index.html"))) {
  console.error(`serve: ${root}/index.html not found (run make web first)`);
  process.exit(1);
}
if (!Number.isInteger(port) || port < 1 || port > 65535) {
  console.error(`serve: bad port '${process.argv[3]}'`);
  process.exit(2);
}

function send(res, status, text) {
  res.writeHead(status, { "Content-Type": "text/plain; charset=utf-8", "Content-Length": Buffer.byteLength(text) });
  res.end(text);
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
  const real = fs.realpathSync(file);
  const realRoot = fs.realpathSync(root);
  if (real !== realRoot && !real.startsWith(realRoot + path.sep)) return send(res, 403, "forbidden\n");
  res.writeHead(200, {
    "Content-Type": MIME[path.extname(file).toLowerCase()] ?? "application/octet-stream",
    "Content-Length": stat.size,
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
  });
  if (req.method === "HEAD") return res.end();
  fs.createReadStream(file).on("error", () => res.destroy()).pipe(res);
});

server.on("error", (err) => {
  console.error(`serve: ${err.code === "EADDRINUSE" ? `port ${port} is in use` : err.message}`);
  process.exit(1);
});
server.listen(port, host, () => {
  console.log(`entgraph demo: serving ${path.relative(process.cwd(), root) || "."} on http://localhost:${port}/ (Ctrl-C stops)`);
});
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    server.close();
    process.exit(0);
  });
}
