#!/bin/bash
# The batched attention kernels (forward and backward) must run on tensor
# cores: compile their sources to PTX for sm_80 and sm_90, with the
# library's flags, and require
# the instructions the design rests on (docs/CUDA.md, "The batched
# tensor-core path"): mma.sync m16n8k16 with bfloat16 and with float16
# operands (float32 accumulators), ldmatrix.trans for V, and cp.async for the
# K/V tiles; and lowrank-threshold's code products must run on the byte
# tensor cores (mma.sync m16n8k32 s8). Machines without a GPU have nvcc but no cuobjdump, so the PTX
# is what can be checked; a rewrite that loses an instruction fails here.
#   tests/cuda/ptx_check.sh NVCC SOURCE_DIR WORK_DIR
set -u
nvcc=$1
src=$2
work=$3
mkdir -p "$work"
required=(
  'mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32'
  'mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32'
  'ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16'
  'cp.async.cg.shared.global'
  'cp.async.commit_group'
  'cp.async.wait_group'
)
status=0
for d in 64 128; do
  for arch in 80 90; do
    ptx=$work/batched_attention_hdim${d}_sm${arch}.ptx
    if ! "$nvcc" -ptx -arch=compute_$arch -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr \
        -I"$src/native/cuda/include" -I"$src/native/cuda/internal" -I"$src/native/cuda/src" -I"$src/core/include" \
        "$src/native/cuda/src/batched_attention_hdim$d.cu" -o "$ptx"; then
      echo "FAILED: nvcc -ptx of batched_attention_hdim$d.cu for sm_$arch"
      status=1
      continue
    fi
    # Fourteen kernels per file: the forward's eight (bfloat16 and float16,
    # softmax and entmax, dense and block-sparse) and the backward's query
    # kernels (dense and block-sparse) and key kernel per format; each one
    # multiplies on tensor cores.
    kernels=$(grep -c '^\.visible \.entry' "$ptx")
    backward=$(grep -c '^\.visible \.entry.*batched_backward' "$ptx")
    if [ "$kernels" -ne 14 ] || [ "$backward" -ne 6 ]; then
      echo "FAILED: $ptx has $kernels kernels ($backward of the backward), expected 14 (6)"
      status=1
    fi
    without_mma=$(awk '/^\.visible \.entry/ { if (name != "" && !mma) print name; name = $3; mma = 0 }
                       /mma\.sync\.aligned\.m16n8k16/ { mma = 1 }
                       END { if (name != "" && !mma) print name }' "$ptx")
    if [ -n "$without_mma" ]; then
      echo "FAILED: kernels without mma.sync in batched_attention_hdim$d.cu for sm_$arch: $without_mma"
      status=1
    fi
    for instruction in "${required[@]}"; do
      count=$(grep -cF "$instruction" "$ptx")
      if [ "$count" -eq 0 ]; then
        echo "FAILED: no $instruction in batched_attention_hdim$d.cu for sm_$arch"
        status=1
      else
        echo "ok: hdim$d sm_$arch: $count x $instruction"
      fi
    done
  done
done
# lowrank-threshold's code products (lowrank_threshold.cu): every kernel that
# multiplies codes (the three passes over the code tiles) does so on the
# byte tensor cores.
for arch in 80 90; do
  ptx=$work/lowrank_threshold_sm${arch}.ptx
  if ! "$nvcc" -ptx -arch=compute_$arch -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr \
      -I"$src/native/cuda/include" -I"$src/native/cuda/internal" -I"$src/native/cuda/src" -I"$src/core/include" \
      -I"$src/core/src" "$src/native/cuda/src/lowrank_threshold.cu" -o "$ptx"; then
    echo "FAILED: nvcc -ptx of lowrank_threshold.cu for sm_$arch"
    status=1
    continue
  fi
  # Kernels of the anonymous namespace are plain .entry, not .visible.
  passes=$(grep -c '^\.entry .*code_tiles_kernel' "$ptx")
  with_mma=$(awk '/^(\.visible )?\.entry/ { if (tiles && mma) n++; tiles = /code_tiles_kernel/; mma = 0 }
                  /mma\.sync\.aligned\.m16n8k32\.row\.col\.s32\.s8\.s8\.s32/ { mma = 1 }
                  END { if (tiles && mma) n++; print n + 0 }' "$ptx")
  if [ "$passes" -ne 3 ] || [ "$with_mma" -ne 3 ]; then
    echo "FAILED: lowrank_threshold.cu for sm_$arch: $with_mma of $passes code-tile kernels hold mma.sync.m16n8k32 s8 (expected 3 of 3)"
    status=1
  else
    echo "ok: lowrank_threshold sm_$arch: 3 code-tile kernels with mma.sync.m16n8k32.s8"
  fi
done
exit $status
