#!/bin/bash
# The batched attention kernels (forward and backward) must run on tensor
# cores: compile their sources to PTX for sm_80 and sm_90, with the
# library's flags, and require
# the instructions the design rests on (docs/CUDA.md, "The batched
# tensor-core path"): mma.sync m16n8k16 with bfloat16 and with float16
# operands (float32 accumulators), ldmatrix.trans for V, and cp.async for the
# K/V tiles; and the byte-code products (lowrank-threshold, exact mode's
# bounds) must run on the byte tensor cores (mma.sync m16n8k32 s8). Machines without a GPU have nvcc but no cuobjdump, so the PTX
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
# Byte-code products (code_tiles.cuh): lowrank-threshold's three passes over
# the code tiles and exact mode's two bound passes must each multiply on the
# byte tensor cores. Kernels of an anonymous namespace are plain .entry.
for spec in lowrank_threshold:code_tiles_kernel:3 exact_graph_attention:bounded_keys_kernel:2; do
  IFS=: read -r file kernel expected <<< "$spec"
  for arch in 80 90; do
    ptx=$work/${file}_sm${arch}.ptx
    if ! "$nvcc" -ptx -arch=compute_$arch -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr \
        -I"$src/native/cuda/include" -I"$src/native/cuda/internal" -I"$src/native/cuda/src" -I"$src/core/include" \
        -I"$src/core/src" "$src/native/cuda/src/$file.cu" -o "$ptx"; then
      echo "FAILED: nvcc -ptx of $file.cu for sm_$arch"
      status=1
      continue
    fi
    kernels=$(grep -c "^\.entry .*$kernel" "$ptx")
    with_mma=$(awk -v kernel="$kernel" '
      /^(\.visible )?\.entry/ { if (mine && mma) n++; mine = index($0, kernel) > 0; mma = 0 }
      /mma\.sync\.aligned\.m16n8k32\.row\.col\.s32\.s8\.s8\.s32/ { mma = 1 }
      END { if (mine && mma) n++; print n + 0 }' "$ptx")
    if [ "$kernels" -ne "$expected" ] || [ "$with_mma" -ne "$expected" ]; then
      echo "FAILED: $file.cu for sm_$arch: $with_mma of $kernels $kernel kernels hold mma.sync.m16n8k32 s8 (expected $expected of $expected)"
      status=1
    else
      echo "ok: $file sm_$arch: $expected $kernel kernels with mma.sync.m16n8k32.s8"
    fi
  done
done
exit $status
