#!/usr/bin/env node
// Compression of the demo page's files, for web/serve.mjs.
//   node web/compress.mjs FOLDER     (tools/build_web.sh runs it on build/web)
// writes FILE.br and FILE.gz beside every teacher's weights (.safetensors) and
// WebAssembly binary under FOLDER (a .wasm file, or the package's modules
// entgraph_core.js and entgraph_core_threads.js, which embed theirs), at the
// best settings (brotli 11 with a 16 MiB window, gzip -9): too slow to run per
// request (brotli 11 takes 6 s for a 1.8 MB model, 9 s for a 2.3 MB module),
// once at build time it costs nothing. serve.mjs sends such a file when it is
// at least as new as the original; other text files it compresses itself,
// faster (brotli 5), once, and keeps in memory.
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { fileURLToPath } from "node:url";

// The files worth compressing ahead: large and read by the page on every load.
export const PRECOMPRESSED = /\.(safetensors|wasm)$|^entgraph_core(_threads)?\.js$/;
// Sibling file suffix per Content-Encoding.
export const SUFFIX = { br: ".br", gzip: ".gz" };

// raw (a Buffer) compressed with `encoding` ("br" or "gzip"), on libuv's
// threads. best: the build's settings; else the server's (fast).
export function compress(raw, encoding, { best = false } = {}) {
  return new Promise((ok, fail) => {
    const done = (err, out) => (err ? fail(err) : ok(out));
    if (encoding === "br")
      zlib.brotliCompress(raw, {
        params: {
          // Quality 5: the 2.2 MB JavaScript module to 26% of its size in
          // 1.6 s on a busy 2-core machine, once (quality 9: 25%, 4.3 s;
          // 11: 22%, 45 s; gzip -9: 31%, 0.6 s).
          [zlib.constants.BROTLI_PARAM_QUALITY]: best ? 11 : 5,
          [zlib.constants.BROTLI_PARAM_LGWIN]: best ? 24 : zlib.constants.BROTLI_DEFAULT_WINDOW,
          [zlib.constants.BROTLI_PARAM_SIZE_HINT]: raw.length,
        },
      }, done);
    else if (encoding === "gzip") zlib.gzip(raw, { level: 9 }, done);
    else fail(new Error(`compress: unknown encoding '${encoding}' (expected br or gzip)`));
  });
}

// Writes the siblings of every PRECOMPRESSED file under `folder`. -> [{ file, bytes, br, gzip }]
export async function precompressFolder(folder) {
  const out = [];
  for (const entry of fs.readdirSync(folder, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !PRECOMPRESSED.test(entry.name)) continue;
    const file = path.join(entry.parentPath ?? entry.path, entry.name);
    const raw = fs.readFileSync(file);
    const row = { file: path.relative(folder, file), bytes: raw.length };
    for (const [encoding, suffix] of Object.entries(SUFFIX)) {
      const body = await compress(raw, encoding, { best: true });
      // Written beside, then renamed: a server never sends half a file.
      const tmp = `${file}${suffix}.tmp`;
      fs.writeFileSync(tmp, body);
      fs.renameSync(tmp, file + suffix);
      row[encoding] = body.length;
    }
    out.push(row);
  }
  return out;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const folder = process.argv[2];
  if (!folder || !fs.existsSync(folder) || !fs.statSync(folder).isDirectory()) {
    console.error(`compress: usage: node web/compress.mjs FOLDER (not a folder: '${folder ?? ""}')`);
    process.exit(2);
  }
  for (const r of await precompressFolder(folder))
    console.log(`compress: ${r.file}: ${r.bytes} bytes, brotli ${r.br}, gzip ${r.gzip}`);
}
