#!/usr/bin/env bash
# Exact attention on predicted graphs vs dense attention, on the long teacher's
# real attention (docs/PERFORMANCE.md, "Exact graph attention on the long
# teacher"). Captures held-out text at n = 2048, 4096 and 8192 bytes, fits the
# learned predictors on other held-out text, and runs `entgraph attend` for
# each predictor in exact and fast mode, one thread and all threads; prints
# one markdown table row per run. Every number of a row comes from one run of
# `attend`, which times dense and graph attention side by side.
#
# Usage: tools/bench_exact.sh [WORKDIR]   (default build/bench-exact)
# Environment: SIZES="2048 4096 8192", THREADS="1 0" (0 = all cores),
#              METHODS="window lowrank-threshold ..." (the predictors whose
#              name starts with one of them; default: all below),
#              MODES="exact fast". The bound kernel is the machine's
#              unless $ENTGRAPH_BOUND_KERNEL names one (docs/EXACT.md).
set -euo pipefail
cd "$(dirname "$0")/.."
E=./build/release/native/cli/entgraph
W=${1:-build/bench-exact}
MODEL=data/teacher-long
SIZES=${SIZES:-"2048 4096 8192"}
THREADS=${THREADS:-"1 0"}
METHODS=${METHODS:-""}
MODES=${MODES:-"exact fast"}
[ -x "$E" ] || { echo "bench_exact: build first (make build)" >&2; exit 1; }
[ -f "$MODEL/config.json" ] || { echo "bench_exact: $MODEL is missing" >&2; exit 1; }
mkdir -p "$W"

# Fit on the first 8 KiB of held-out text (4 x 2048 bytes); test on the next
# 16 KiB (data/heldout-long.txt), never seen by the predictors.
[ -f "$W/fit/capture.json" ] || $E capture --model $MODEL --text data/heldout.txt --sequence-bytes 2048 --out "$W/fit" >/dev/null
for n in $SIZES; do
  [ -f "$W/test-$n/capture.json" ] ||
    $E capture --model $MODEL --text data/heldout-long.txt --sequence-bytes "$n" \
      --max-sequences $((8192 / n > 1 ? 8192 / n : 1)) --out "$W/test-$n" >/dev/null
done

# name|how: --method with settings, or a parameter file fitted here.
PREDICTORS=(
  "window w=64|--method window --set window=64"
  "window w=256|--method window --set window=256"
  "sparsefinder-kmeans|--params $W/kmeans.json"
  "sparsefinder-distance|--params $W/distance.json"
  "lowrank-threshold|--params $W/lowrank.json"
)
wanted() {
  [ -z "$METHODS" ] && return 0
  local m
  for m in $METHODS; do [[ "$1" == "$m"* ]] && return 0; done
  return 1
}
fit() {
  wanted "$2" || return 0
  [ -f "$W/$1.json" ] || $E fit --quiet --capture "$W/fit" --method "$2" "${@:3}" --out "$W/$1.json" >/dev/null
}
fit kmeans sparsefinder-kmeans --set clusters=8 --set extra_window=32
fit distance sparsefinder-distance --set t=2.0 --set extra_window=32
fit lowrank lowrank-threshold

field() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p" | head -1; }
echo "| n | predictor | threads | mode | bound kernel | dense s | graph s | ratio | rows | by graph | repaired | dense rows | extra pairs / graph pairs | max abs err | max abs dense |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for n in $SIZES; do
  for entry in "${PREDICTORS[@]}"; do
    name=${entry%%|*}
    wanted "$name" || continue
    read -r -a how <<<"${entry#*|}"
    for t in $THREADS; do
      for mode in $MODES; do
        flag=()
        [ "$mode" = exact ] && flag=(--exact)
        json=$($E attend --capture "$W/test-$n" "${how[@]}" "${flag[@]}" --threads "$t" --repeat 2 --json)
        total=${json%%\"heads\"*}
        rows=$(field rows <<<"$total")
        certified=$(field rows_certified <<<"$total")
        repaired=$(field repaired_rows <<<"$total")
        dense_rows=$(field dense_rows <<<"$total")
        extra=$(awk -v a="$(field repair_pairs <<<"$total")" -v b="$(field graph_pairs <<<"$total")" 'BEGIN{printf "%.2f", (b > 0 ? a / b : 0)}')
        kernel=$(sed -n 's/.*"bound_kernel": "\([^"]*\)".*/\1/p' <<<"$total")
        printf "| %s | %s | %s | %s | %s | %.4f | %.4f | %.3f | %s | %s | %s | %s | %s | %.2g | %.3g |\n" "$n" "$name" \
          "$([ "$t" = 0 ] && echo all || echo "$t")" "$mode" "${kernel:--}" "$(field dense_s <<<"$total")" "$(field graph_s <<<"$total")" \
          "$(field ratio <<<"$total")" "$rows" "$certified" "$repaired" "$dense_rows" "$extra" \
          "$(field max_abs_err <<<"$total")" "$(field max_abs_dense <<<"$total")"
      done
    done
  done
done
