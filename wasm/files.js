// entgraph: reading a file, or a file of a folder, from a path or a URL, the
// same code wherever the package runs (docs/JAVASCRIPT.md, "Files and folders").
//
//   node, Deno, Bun   a path (a relative one from the current folder) or a
//                     file: URL is read from disk; http(s) URLs are fetched
//   browsers, workers, Observable
//                     everything is fetched; a relative path is a URL relative
//                     to the page (document.baseURI, or the worker's location)
//
// A missing file is an Error that names the file and the folder or URL that
// was searched.

import { entgraphError } from "./errors.js";

// "https:", "file:", "data:", ... but not a Windows drive ("C:\data").
const SCHEME = /^[a-zA-Z][a-zA-Z\d+.-]*:/;
const WINDOWS_DRIVE = /^[a-zA-Z]:[\\/]/;

// Runtimes with a file system of their own (node, Deno, Bun all answer to node:fs).
function hasDisk() {
  return Boolean(globalThis.Deno?.version || globalThis.process?.versions?.node);
}

// node's built-in modules, imported only where they exist: the specifier is
// built at run time so that bundlers for browsers leave it alone.
function builtin(name) {
  return import(/* webpackIgnore: true */ /* @vite-ignore */ `node:${name}`);
}

function describe(value) {
  if (value === null) return "null";
  return typeof value === "object" ? `a ${value.constructor?.name ?? "object"}` : `${typeof value} ${String(value)}`;
}

// Where a source is: { path } on disk or { url } to fetch. call names the API
// function in messages.
export async function locate(source, call) {
  const text = source instanceof URL ? source.href : source;
  if (typeof text !== "string" || text === "")
    throw entgraphError(`${call}: expected a path or a URL (got ${describe(source)})`);
  const isUrl = SCHEME.test(text) && !WINDOWS_DRIVE.test(text);
  if (hasDisk()) {
    if (isUrl && !text.startsWith("file:")) return { url: text };
    const [{ resolve }, { fileURLToPath }] = await Promise.all([builtin("path"), builtin("url")]);
    return { path: isUrl ? fileURLToPath(text) : resolve(text) };
  }
  const base = globalThis.document?.baseURI ?? globalThis.location?.href;
  return { url: base ? new URL(text, base).href : text };
}

// The place of a file `name` inside the folder `folder` (a located source).
export async function inside(folder, name) {
  if (folder.path !== undefined) return { path: (await builtin("path")).join(folder.path, name) };
  return { url: new URL(name, folder.url.endsWith("/") ? folder.url : `${folder.url}/`).href };
}

async function isFolder(path) {
  try {
    return (await (await builtin("fs/promises")).stat(path)).isDirectory();
  } catch {
    return false;
  }
}

// How a place is shown in messages: the absolute path or the URL.
export function shown(place) {
  return place.path ?? place.url;
}

// The bytes of a located file. A missing one: "NAME is missing from FOLDER"
// when the folder searched is given, "PATH does not exist" otherwise.
export async function readPlace(place, call, folder = null) {
  const missing = (detail) => {
    const name = place.path !== undefined ? place.path.split(/[\\/]/).pop() : new URL(place.url).pathname.split("/").pop();
    return entgraphError(folder ? `${call}: ${name} is missing from ${shown(folder)} (${detail})`
                                : `${call}: ${shown(place)} does not exist${place.url ? ` (${detail})` : ""}`, "io");
  };
  if (place.path !== undefined) {
    const { readFile } = await builtin("fs/promises");
    try {
      return new Uint8Array(await readFile(place.path));
    } catch (e) {
      if (e?.code === "ENOENT" || e?.name === "NotFound") {
        if (folder && !(await isFolder(folder.path))) throw entgraphError(`${call}: the folder ${folder.path} does not exist`, "io");
        throw missing("no such file");
      }
      throw entgraphError(`${call}: cannot read ${place.path} (${e?.message ?? e})`, "io");
    }
  }
  let response;
  try {
    response = await fetch(place.url);
  } catch (e) {
    throw entgraphError(`${call}: cannot fetch ${place.url} (${e?.message ?? e})`, "io");
  }
  if (response.status === 404 || response.status === 410) throw missing(`HTTP ${response.status}`);
  if (!response.ok)
    throw entgraphError(`${call}: cannot fetch ${place.url} (HTTP ${response.status} ${response.statusText})`, "io");
  return new Uint8Array(await response.arrayBuffer());
}

// A file's bytes, from a path or a URL (see the top of this file).
export async function fetchBytes(source) {
  return readPlace(await locate(source, "fetchBytes"), "fetchBytes");
}

// A file's text (UTF-8), from a path or a URL.
export async function fetchText(source) {
  return new TextDecoder().decode(await readPlace(await locate(source, "fetchText"), "fetchText"));
}
