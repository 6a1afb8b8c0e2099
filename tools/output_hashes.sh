#!/usr/bin/env bash
# Hashes of what the library computes, for "no behaviour change" claims of a
# restructuring: run it before and after, on the same build type, and diff.
#
#   tools/output_hashes.sh [ENTGRAPH_BINARY] > hashes.txt
#
# One line per output: "<sha256>  <what>". Covered: every transform kind
# the CLI runs (forward and backward, on data/sample_scores.npy, at every ISA
# this machine has, and in the JavaScript package where build/wasm/package is
# built: tools/wasm_hashes.mjs), `entgraph demo`, a capture of each shipped teacher on the
# start of data/heldout.txt, and a sweep of every predictor fitted on one of
# those captures and tested on another. Timings never enter a hash (the
# sweep's JSON is hashed without its seconds fields).
set -euo pipefail

BIN=${1:-./build/release/native/cli/entgraph}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$ROOT"

hash() { sha256sum "$1" | cut -d' ' -f1; }
# sha256 of a .npy's values: the bytes after its header (the CLI writes the
# sample's dtype, little-endian float32, in C order).
values_hash() { python3 -c 'import hashlib, struct, sys
b = open(sys.argv[1], "rb").read()
start = 10 + struct.unpack("<H", b[8:10])[0] if b[6] == 1 else 12 + struct.unpack("<I", b[8:12])[0]
assert b"<f4" in b[:start] and b"False" in b[:start], "expected C-order little-endian float32"
print(hashlib.sha256(b[start:]).hexdigest())' "$1"; }
say() { printf '%s  %s\n' "$1" "$2"; }

SAMPLE=data/sample_scores.npy
ISAS=$("$BIN" transform --help | sed -n 's/.*--isa NAME.*reference, \(.*\) (default.*/reference, \1/p' | tr -d ',')
[ -n "$ISAS" ] || ISAS="reference"
for isa in $ISAS; do
  "$BIN" transform --fn softmax --isa "$isa" "$SAMPLE" "$WORK/probe.npy" >/dev/null 2>&1 || continue
  for fn in "softmax" "sparsemax" "entmax15" "entmax --alpha 1.25" "entmax --alpha 3" "topk --k 3"; do
    # shellcheck disable=SC2086  # fn holds the transform's flags
    "$BIN" transform --fn $fn --isa "$isa" --grad "$SAMPLE" --grad-out "$WORK/grad.npy" "$SAMPLE" "$WORK/out.npy" \
      >/dev/null
    say "$(hash "$WORK/out.npy")" "transform $fn --isa $isa (forward)"
    say "$(hash "$WORK/grad.npy")" "transform $fn --isa $isa (backward)"
    if [ "$isa" = sse2 ]; then  # the values alone, to set beside the JavaScript package's (below)
      say "$(values_hash "$WORK/out.npy")" "transform $fn --isa $isa (forward values)"
      say "$(values_hash "$WORK/grad.npy")" "transform $fn --isa $isa (backward values)"
    fi
  done
done

# The JavaScript package's SIMD128 kernels do the arithmetic of sse2: where it
# is built, its values' hashes equal the sse2 lines' (forward values, backward values).
if [ -f build/wasm/package/entgraph.js ] && command -v node >/dev/null; then
  node tools/wasm_hashes.mjs build/wasm/package
fi

"$BIN" demo >"$WORK/demo.txt"
say "$(hash "$WORK/demo.txt")" "demo"

head -c 2048 data/heldout.txt >"$WORK/train.txt"
# (no pipe: with pipefail, tail killed by head's early exit would end the script)
tail -c +2049 data/heldout.txt >"$WORK/rest.txt"
head -c 1024 "$WORK/rest.txt" >"$WORK/test.txt"
for teacher in data/teacher-*; do
  name=$(basename "$teacher")
  for part in train test; do
    "$BIN" capture --model "$teacher" --text "$WORK/$part.txt" --out "$WORK/$name-$part" >/dev/null
    for f in "$WORK/$name-$part"/*; do say "$(hash "$f")" "capture $name $part: $(basename "$f")"; done
  done
done

"$BIN" sweep --train "$WORK/teacher-causal-train" --test "$WORK/teacher-causal-test" --out "$WORK/sweep" \
  --quiet --threads 1 >"$WORK/sweep.txt"
python3 - "$WORK/sweep/sweep.json" >"$WORK/sweep-no-times.json" <<'EOF'
import json, sys
def strip(x):
    if isinstance(x, dict): return {k: strip(v) for k, v in x.items() if "second" not in k}
    if isinstance(x, list): return [strip(v) for v in x]
    return x
json.dump(strip(json.load(open(sys.argv[1]))), sys.stdout, sort_keys=True)
EOF
say "$(hash "$WORK/sweep-no-times.json")" "sweep teacher-causal (sweep.json without times)"
