#!/usr/bin/env bash
# Assembles the demo page as a self-contained static folder, build/web/:
#   index.html, *.js, style.css      the page (web/)
#   entgraph/                        the JavaScript package (build/wasm/package/, `make wasm`)
#   teachers/<kind>/                 config.json and model.safetensors of both teachers
#   heldout.txt                      the held-out text the text box starts with
#   params/<kind>/*.json             every predictor of every grid point, fitted NATIVELY on
#                                    the first 4 KiB of heldout.txt (`entgraph sweep --save-params`)
#   params/<kind>/index.json         manifest: per method its parameter and grid values in order
#   sweep/<kind>/                    the native sweep (fitted on the first 4 KiB, tested on the last)
# and, in build/web-work/, the captures and each sweep's printed Pareto table
# (<kind>-sweep.txt), which `make demo` shows.
# Needs `make build` (the native CLI) and `make wasm` (the package). Usage:
#   tools/build_web.sh [OUT_DIR]        (default build/web)
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-build/web}
WORK=build/web-work
ENTGRAPH=${ENTGRAPH:-./build/release/native/cli/entgraph}
PACKAGE=build/wasm/package

[[ -x $ENTGRAPH ]] || { echo "build_web: $ENTGRAPH missing (run make build)" >&2; exit 1; }
[[ -f $PACKAGE/entgraph.js ]] || { echo "build_web: $PACKAGE/entgraph.js missing (run make wasm)" >&2; exit 1; }

rm -rf "$OUT"
mkdir -p "$OUT/entgraph" "$WORK"

# The page (the server and its compression, web/*.mjs, stay in web/; they are not part of the static folder).
for f in web/*; do
  case $(basename "$f") in
    *.mjs) ;;
    *) cp -R "$f" "$OUT/" ;;
  esac
done
cp -R "$PACKAGE"/. "$OUT/entgraph/"
cp data/heldout.txt "$OUT/heldout.txt"

head -c 4096 data/heldout.txt >"$WORK/train.txt"
tail -c 4096 data/heldout.txt >"$WORK/test.txt"

# Both teachers at once (each sweep is about a minute on one core).
fit() {
  local kind=$1
  mkdir -p "$OUT/teachers/$kind" "$OUT/params/$kind" "$OUT/sweep/$kind"
  cp "data/teacher-$kind/config.json" "data/teacher-$kind/model.safetensors" "$OUT/teachers/$kind/"
  rm -rf "$WORK/$kind-train" "$WORK/$kind-test"
  "$ENTGRAPH" capture --model "data/teacher-$kind" --text "$WORK/train.txt" --out "$WORK/$kind-train" >/dev/null
  "$ENTGRAPH" capture --model "data/teacher-$kind" --text "$WORK/test.txt" --out "$WORK/$kind-test" >/dev/null
  "$ENTGRAPH" sweep --train "$WORK/$kind-train" --test "$WORK/$kind-test" \
    --out "$OUT/sweep/$kind" --save-params "$OUT/params/$kind" --quiet >"$WORK/$kind-sweep.txt"
}
echo "build_web: capture, sweep and fit every predictor for both teachers (a minute or two)"
pids=()
for kind in causal masked; do
  fit "$kind" &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid" || { echo "build_web: fitting the predictors failed" >&2; exit 1; }
done

# The manifest: the page needs no directory listing. Grid values sorted numerically.
node - "$OUT/params" <<'EOF'
const fs = require("fs");
const path = require("path");
const root = process.argv[2];
for (const kind of ["causal", "masked"]) {
  const dir = path.join(root, kind);
  const methods = {};
  for (const file of fs.readdirSync(dir).sort()) {
    if (!file.endsWith(".json") || file === "index.json") continue;
    const json = JSON.parse(fs.readFileSync(path.join(dir, file), "utf8"));
    const method = json.method;
    const m = (methods[method] ??= { method, parameter: null, values: [] });
    const stem = file.slice(0, -".json".length);
    if (stem === method) {
      m.values.push({ value: null, file });
      continue;
    }
    // METHOD-PARAMETER-VALUE: the parameter is the setting whose value ends the name.
    const rest = stem.slice(method.length + 1);
    const parameter = Object.keys(json.settings).find((key) => rest === `${key}-${json.settings[key]}`);
    if (!parameter) throw new Error(`build_web: cannot read the parameter of ${file}`);
    m.parameter = parameter;
    m.values.push({ value: json.settings[parameter], file });
  }
  for (const m of Object.values(methods)) m.values.sort((a, b) => Number(a.value) - Number(b.value));
  // Grid values that only change a predict-time setting (lowrank-threshold's
  // margin, the distance threshold t) share one fit: keep one file, and give
  // the others its name as `source` and their own `settings`, which the page
  // applies when it loads them (web/resources.js).
  for (const m of Object.values(methods)) {
    const seen = new Map();  // parameters text -> file
    for (const v of m.values) {
      const json = JSON.parse(fs.readFileSync(path.join(dir, v.file), "utf8"));
      const key = JSON.stringify(json.parameters);
      if (key === "{}") continue;  // fixed patterns: nothing to share
      const source = seen.get(key);
      if (source === undefined) {
        seen.set(key, v.file);
        continue;
      }
      v.source = source;
      v.settings = json.settings;
      fs.unlinkSync(path.join(dir, v.file));
    }
  }
  const sweep = JSON.parse(fs.readFileSync(path.join(root, "..", "sweep", kind, "sweep.json"), "utf8"));
  const order = [...new Set(sweep.points.map((p) => p.method))];
  const list = Object.values(methods).sort((a, b) => order.indexOf(a.method) - order.indexOf(b.method));
  const manifest = {
    format: "entgraph-web-params",
    version: 1,
    teacher: kind,
    fitted_on: "first 4096 bytes of heldout.txt (native entgraph sweep --save-params)",
    methods: list,
  };
  fs.writeFileSync(path.join(dir, "index.json"), JSON.stringify(manifest, null, 1) + "\n");
  console.log(`build_web: ${kind}: ${list.length} methods, ${list.reduce((s, m) => s + m.values.length, 0)} parameter files`);
}
EOF
# Brotli and gzip copies of the weights and the .wasm binaries, which
# web/serve.mjs sends to browsers that accept them (docs/PERFORMANCE.md).
node web/compress.mjs "$OUT"
echo "build_web: wrote $OUT ($(du -sh "$OUT" | cut -f1))"
