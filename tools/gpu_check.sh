#!/bin/bash
# The GPU check of the CUDA backend (docs/CUDA.md), in stages that each fit
# one call of the device machine (10 minutes a command, 15 minutes of device
# time a session, start-up included): run one stage per call, tests first.
#   tools/gpu_check.sh [BUILD] [OUT] [STAGE...]
# Stages (default: tests):
#   tests     the CUDA tests and the C API test with the CUDA backend (<= 5 min)
#   bench     every CUDA benchmark, the batched tensor-core ones, and the CPU
#             transforms beside them (<= 8 min)
#   sanitize  compute-sanitizer: memcheck over the fused attention tests,
#             memcheck, racecheck and synccheck over the batched tensor-core
#             ones (<= 8 min)
#   peers     entgraph beside torch SDPA and AdaSplash (tools/gpu_peers.py,
#             where torch is installed; <= 8 min: the forward's run, 5 min,
#             GPU_PEERS_TIMEOUT, then a training step's, 3 min,
#             GPU_PEERS_BACKWARD_TIMEOUT)
#   all       every stage, for a machine of one's own
# Built binaries are taken from BUILD (default build/release); results go to
# OUT (default gpu-check/): machine.txt, cuda_tests.log, c_api_cuda.log,
# cuda_bench.{txt,json}, cuda_batched_bench.{txt,json},
# cuda_batched_backward_bench.{txt,json}, cpu_bench.{txt,json},
# memcheck.log, {memcheck,racecheck,synccheck}_batched.log, peers/ with
# peers.log, and peers-backward/ with peers-backward.log. Every stage's limits are set so that a hang leaves the rest of
# the call's time. Exits non-zero if a test fails.
set -u
build=${1:-build/release}
out=${2:-gpu-check}
shift 2 2>/dev/null || shift $#
stages=" ${*:-tests} "
[ "$stages" = " all " ] && stages=" tests bench sanitize peers "
for stage in $stages; do
  case $stage in
    tests | bench | sanitize | peers) ;;
    *) echo "gpu_check: unknown stage '$stage' (expected tests, bench, sanitize, peers or all)" >&2; exit 2 ;;
  esac
done
want() { [[ "$stages" == *" $1 "* ]]; }
mkdir -p "$out"
tests=$build/tests/entgraph_cuda_tests
bench=$build/native/cuda/entgraph_cuda_bench
cpu_bench=$build/native/bench/entgraph_bench
for f in "$tests" "$bench" "$cpu_bench"; do
  [ -x "$f" ] || { echo "gpu_check: $f is missing (build with CUDA and benchmarks first: make build)" >&2; exit 2; }
done
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

status=0
if want tests; then
  # The shared conformance suites on the cuda target only (the CPU targets run in entgraph_tests).
  ENTGRAPH_TEST_TARGETS=cuda timeout 240 "$tests" --no-version=true --duration=true > "$out/cuda_tests.log" 2>&1
  status=$?
  echo "cuda tests: exit $status"
  grep -E "ERROR|FAILED|test cases|assertions|Status" "$out/cuda_tests.log" | head -40
  c_api=$build/tests/c/entgraph_c_api_cuda_test
  if [ -x "$c_api" ]; then
    timeout 30 "$c_api" > "$out/c_api_cuda.log" 2>&1
    c_status=$?
    echo "C API test with the CUDA backend: exit $c_status"
    tail -1 "$out/c_api_cuda.log"
    [ $c_status -eq 0 ] || status=$c_status
  fi
fi

if want bench; then
  timeout 120 "$bench" --benchmark_min_time=0.1 --benchmark_filter='-cuda_batched_attention|cuda_exact' \
    --benchmark_out="$out/cuda_bench.json" --benchmark_out_format=json > "$out/cuda_bench.txt" 2>&1
  echo "cuda benchmarks: exit $?"
  # Batched attention on tensor cores (bench_batched_attention.cpp: bf16, issue
  # 30's shapes, TFLOP/s in the flops counter); its largest shapes take a
  # second a call, so it runs on its own, with its own time limit; the JSON
  # holds what finished.
  timeout 240 "$bench" --benchmark_min_time=0.05 --benchmark_filter=^cuda_batched_attention/ \
    --benchmark_out="$out/cuda_batched_bench.json" --benchmark_out_format=json > "$out/cuda_batched_bench.txt" 2>&1
  echo "cuda batched attention benchmarks: exit $?"
  # Its gradients (bench_batched_attention.cpp's cuda_batched_attention_backward/).
  timeout 60 "$bench" --benchmark_min_time=0.05 --benchmark_filter=^cuda_batched_attention_backward/ \
    --benchmark_out="$out/cuda_batched_backward_bench.json" --benchmark_out_format=json \
    > "$out/cuda_batched_backward_bench.txt" 2>&1
  echo "cuda batched attention backward benchmarks: exit $?"
  # Exact mode against dense attention on the long teacher's 16 heads
  # (bench_exact.cpp; its capture at 8192 bytes runs the teacher on the CPU
  # first).
  timeout 120 "$bench" --benchmark_min_time=0.05 --benchmark_filter=^cuda_exact/ \
    --benchmark_out="$out/cuda_exact_bench.json" --benchmark_out_format=json > "$out/cuda_exact_bench.txt" 2>&1
  echo "cuda exact-mode benchmarks: exit $?"
  # The CPU path at the GPU transforms' shapes, one thread and every thread.
  threads=$(nproc)
  timeout 60 "$cpu_bench" --benchmark_min_time=0.05 \
    --benchmark_filter="BM_(forward|backward)/(softmax|sparsemax|entmax15|entmax_alpha1.25|entmax_alpha1.75|entmax_alpha3|topk_softmax_k8)/n:(512|4096)/threads:(1|$threads)/" \
    --benchmark_out="$out/cpu_bench.json" --benchmark_out_format=json > "$out/cpu_bench.txt" 2>&1
  echo "cpu benchmarks: exit $?"
fi

sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if want sanitize && [ -x "$sanitizer" ]; then
  ENTGRAPH_TEST_TARGETS=cuda timeout 150 "$sanitizer" --tool memcheck --leak-check no "$tests" --no-version=true -tc='*fused attention*' \
    > "$out/memcheck.log" 2>&1
  echo "memcheck: exit $?"
  tail -1 "$out/memcheck.log"
  # The tensor-core kernel: memcheck on varlen and the narrowing sweeps,
  # racecheck (shared-memory hazards between its warps and the cp.async
  # double buffer) and synccheck on varlen.
  batched='*batched attention: variable lengths*,*batched attention backward: variable lengths*'
  ENTGRAPH_TEST_TARGETS=cuda timeout 150 "$sanitizer" --tool memcheck --leak-check no "$tests" --no-version=true \
    -tc="$batched,*batched attention: tiny candidate*,*block-sparse attention: every block kept*" \
    > "$out/memcheck_batched.log" 2>&1
  echo "memcheck (batched attention): exit $?"
  tail -1 "$out/memcheck_batched.log"
  for tool in racecheck synccheck; do
    ENTGRAPH_TEST_TARGETS=cuda timeout 90 "$sanitizer" --tool $tool "$tests" --no-version=true -tc="$batched" \
      > "$out/${tool}_batched.log" 2>&1
    echo "$tool (batched attention): exit $?"
    tail -1 "$out/${tool}_batched.log"
  done
elif want sanitize; then
  echo "sanitize: skipped: compute-sanitizer is not installed"
fi

# entgraph beside torch SDPA and AdaSplash on the same inputs (tools/gpu_peers.py;
# docs/CUDA.md, "Side by side with peers"): results in OUT/peers/. AdaSplash
# comes from build/peers, which tools/fetch_peers.sh fills before the GPU
# machine is used (it has no network). bf16 over issue 30's shapes unless
# GPU_PEERS_ARGS says otherwise; the tool rewrites its tables after every
# shape, so a timeout keeps what was measured. Then issue 33's training step
# (--backward-only: forward, then backward, and the gradients against float64)
# on causal bf16 1x16x16, d = 64, n = 4096 and 16384 unless
# GPU_PEERS_BACKWARD_ARGS says otherwise, into OUT/peers-backward/ (AdaSplash
# compiles and autotunes its backward in the first call, tens of seconds).
# Does not change the exit status.
python=${PYTHON:-python3}
if ! want peers; then
  :
elif "$python" -c "import torch" 2>/dev/null; then
  # shellcheck disable=SC2086  # GPU_PEERS_ARGS is a list of flags
  timeout "${GPU_PEERS_TIMEOUT:-300}" "$python" "$(dirname "$0")/gpu_peers.py" --out "$out/peers" \
    --lib "$build/native/cuda/libentgraph_cuda_ctypes.so" ${GPU_PEERS_ARGS:---dtype bf16} > "$out/peers.log" 2>&1
  echo "peers (tools/gpu_peers.py): exit $?"
  grep -E "^gpu_peers:" "$out/peers.log" | head -3
  # shellcheck disable=SC2086  # GPU_PEERS_BACKWARD_ARGS is a list of flags
  timeout "${GPU_PEERS_BACKWARD_TIMEOUT:-180}" "$python" "$(dirname "$0")/gpu_peers.py" --out "$out/peers-backward" \
    --lib "$build/native/cuda/libentgraph_cuda_ctypes.so" --backward-only \
    ${GPU_PEERS_BACKWARD_ARGS:---dtype bf16 --d 64 --heads 1x16x16 --n 4096,16384 --long-n= --causal causal} \
    > "$out/peers-backward.log" 2>&1
  echo "peers, training step (tools/gpu_peers.py --backward-only): exit $?"
  grep -E "^gpu_peers:|^\[" "$out/peers-backward.log" | head -4
else
  echo "peers: skipped: torch is not installed for $python (tools/gpu_peers.py needs torch, and Triton for AdaSplash)"
fi
exit $status
