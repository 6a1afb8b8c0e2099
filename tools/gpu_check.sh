#!/bin/bash
# The GPU check of the CUDA backend in one command (docs/CUDA.md): the CUDA
# tests, every CUDA benchmark, the CPU transforms beside them, and
# compute-sanitizer's memcheck over the fused attention tests (memcheck,
# racecheck and synccheck over the batched tensor-core ones). Built binaries
# are taken from BUILD (default build/release); results go to OUT (default
# gpu-check/): machine.txt, cuda_tests.log, cuda_bench.{txt,json},
# cuda_batched_bench.{txt,json}, cpu_bench.{txt,json}, memcheck.log,
# {memcheck,racecheck,synccheck}_batched.log, and peers/ with peers.log (entgraph
# beside SDPA and AdaSplash, where torch is installed). Exits non-zero if a
# test fails.
#   tools/gpu_check.sh [BUILD] [OUT]
set -u
build=${1:-build/release}
out=${2:-gpu-check}
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

# The shared conformance suites on the cuda target only (the CPU targets run in entgraph_tests).
ENTGRAPH_TEST_TARGETS=cuda timeout 300 "$tests" --no-version=true --duration=true > "$out/cuda_tests.log" 2>&1
status=$?
echo "cuda tests: exit $status"
grep -E "ERROR|FAILED|test cases|assertions|Status" "$out/cuda_tests.log" | head -40

c_api=$build/tests/c/entgraph_c_api_cuda_test
if [ -x "$c_api" ]; then
  timeout 60 "$c_api" > "$out/c_api_cuda.log" 2>&1
  echo "C API test with the CUDA backend: exit $?"
  tail -1 "$out/c_api_cuda.log"
fi

timeout 400 "$bench" --benchmark_min_time=0.1 --benchmark_filter=-cuda_batched_attention/ \
  --benchmark_out="$out/cuda_bench.json" --benchmark_out_format=json > "$out/cuda_bench.txt" 2>&1
echo "cuda benchmarks: exit $?"
# Batched attention on tensor cores (bench_batched_attention.cpp: bf16, issue
# 30's shapes, TFLOP/s in the flops counter); its largest shapes take seconds
# per call, so it runs on its own, with its own time limit.
timeout 900 "$bench" --benchmark_min_time=0.05 --benchmark_filter=^cuda_batched_attention/ \
  --benchmark_out="$out/cuda_batched_bench.json" --benchmark_out_format=json > "$out/cuda_batched_bench.txt" 2>&1
echo "cuda batched attention benchmarks: exit $?"
# The CPU path at the GPU transforms' shapes, one thread and every thread.
threads=$(nproc)
timeout 200 "$cpu_bench" --benchmark_min_time=0.05 \
  --benchmark_filter="BM_(forward|backward)/(softmax|sparsemax|entmax15|entmax_alpha1.25|entmax_alpha1.75|entmax_alpha3|topk_softmax_k8)/n:(512|4096)/threads:(1|$threads)/" \
  --benchmark_out="$out/cpu_bench.json" --benchmark_out_format=json > "$out/cpu_bench.txt" 2>&1
echo "cpu benchmarks: exit $?"

sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$sanitizer" ]; then
  ENTGRAPH_TEST_TARGETS=cuda timeout 300 "$sanitizer" --tool memcheck --leak-check no "$tests" --no-version=true -tc='*fused attention*' \
    > "$out/memcheck.log" 2>&1
  echo "memcheck: exit $?"
  tail -1 "$out/memcheck.log"
  # The tensor-core kernel: memcheck on varlen and the narrowing sweeps,
  # racecheck (shared-memory hazards between its warps and the cp.async
  # double buffer) and synccheck on varlen.
  batched='*batched attention: variable lengths*'
  ENTGRAPH_TEST_TARGETS=cuda timeout 600 "$sanitizer" --tool memcheck --leak-check no "$tests" --no-version=true \
    -tc="$batched,*batched attention: tiny candidate*" > "$out/memcheck_batched.log" 2>&1
  echo "memcheck (batched attention): exit $?"
  tail -1 "$out/memcheck_batched.log"
  for tool in racecheck synccheck; do
    ENTGRAPH_TEST_TARGETS=cuda timeout 600 "$sanitizer" --tool $tool "$tests" --no-version=true -tc="$batched" \
      > "$out/${tool}_batched.log" 2>&1
    echo "$tool (batched attention): exit $?"
    tail -1 "$out/${tool}_batched.log"
  done
fi

# entgraph beside torch SDPA and AdaSplash on the same inputs (tools/gpu_peers.py;
# docs/CUDA.md, "Side by side with peers"): results in OUT/peers/. AdaSplash
# comes from build/peers, which tools/fetch_peers.sh fills before the GPU
# machine is used (it has no network). bf16 over issue 30's shapes unless
# GPU_PEERS_ARGS says otherwise; the tool rewrites its tables after every
# shape, so a timeout keeps what was measured. Does not change the exit status.
python=${PYTHON:-python3}
if "$python" -c "import torch" 2>/dev/null; then
  # shellcheck disable=SC2086  # GPU_PEERS_ARGS is a list of flags
  timeout "${GPU_PEERS_TIMEOUT:-900}" "$python" "$(dirname "$0")/gpu_peers.py" --out "$out/peers" \
    --lib "$build/native/cuda/libentgraph_cuda_ctypes.so" ${GPU_PEERS_ARGS:---dtype bf16} > "$out/peers.log" 2>&1
  echo "peers (tools/gpu_peers.py): exit $?"
  grep -E "^gpu_peers:" "$out/peers.log" | head -3
else
  echo "peers: skipped: torch is not installed for $python (tools/gpu_peers.py needs torch, and Triton for AdaSplash)"
fi
exit $status
