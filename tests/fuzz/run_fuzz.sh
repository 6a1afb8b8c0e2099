#!/usr/bin/env bash
# Runs every fuzz target of a libFuzzer build (`make fuzz`; docs/FUZZING.md)
# for a bounded time, one after the other, each on a copy of its seed corpus
# (tests/fuzz/corpus/<name>) in <build>/corpus/<name>, which keeps what the
# target finds between runs without touching the source tree.
# Usage: tests/fuzz/run_fuzz.sh [build-dir [seconds-per-target]]
#   defaults: build/fuzz, $FUZZ_SECONDS or 60; FUZZ_TARGETS="npy capture"
#   runs only those targets.
# Prints the executions of each target (libFuzzer's stat::number_of_executed_units)
# and exits 1 if any target reported a crash, a sanitizer error, a broken
# invariant, a timeout (-timeout=10) or running out of memory (-rss_limit_mb=2048);
# the input is then in <build>/fuzz-findings/<name>/ and the log in
# <build>/fuzz-logs/<name>.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/fuzz}
seconds=${2:-${FUZZ_SECONDS:-60}}
targets=${FUZZ_TARGETS:-npy safetensors capture predictor teacher_config}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=0
summary=()
for name in $targets; do
  bin=$build/tests/fuzz/entgraph_fuzz_$name
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin not found (cmake --preset fuzz && cmake --build --preset fuzz)" >&2
    exit 2
  fi
  corpus=$build/corpus/$name
  findings=$build/fuzz-findings/$name
  log=$build/fuzz-logs/$name.log
  mkdir -p "$corpus" "$findings" "$(dirname "$log")"
  cp -f tests/fuzz/corpus/"$name"/* "$corpus"/
  dict=()
  [ -f tests/fuzz/dict/"$name".dict ] && dict=(-dict=tests/fuzz/dict/"$name".dict)
  echo "fuzz: $name for ${seconds}s (log: $log)"
  "$bin" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$findings/" "${dict[@]}" "$corpus" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    result="ok"
  else
    failed=1
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    reason=$(grep -m1 -oE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer): [^ ]+( [^ ]+)?|fuzz: invariant failed at [^ ]+|runtime error: .*' "$log" | head -n 1)
    result="FAILED (exit $rc${reason:+: $reason})${artifact:+, input: $artifact}"
    echo "fuzz: $name failed; the end of its log:" >&2
    tail -n 40 "$log" >&2
  fi
  summary+=("$(printf '%-16s %12s executions  %s' "$name" "${execs:-?}" "$result")")
done

echo
echo "fuzz: ${seconds}s per target"
printf '%s\n' "${summary[@]}"
if [ $failed -ne 0 ]; then
  echo "fuzz: a target reported a finding (docs/FUZZING.md: reproduce it, then add it to tests/fuzz/corpus/<name>/)" >&2
  exit 1
fi
