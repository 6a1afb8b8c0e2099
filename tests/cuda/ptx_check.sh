#!/bin/bash
# The batched attention kernels (forward and backward) must run on tensor
# cores: the PTX the library's build compiled them to for sm_80 and sm_90
# (kept by nvcc, native/cuda/CMakeLists.txt) must hold the instructions the
# design rests on (docs/CUDA.md, "The batched tensor-core path"): mma.sync
# m16n8k16 with bfloat16 and with float16 operands (float32 accumulators),
# ldmatrix.trans for V, and cp.async for the K/V tiles; and the byte-code
# products (lowrank-threshold, exact mode's bounds) must run on the byte
# tensor cores (mma.sync m16n8k32 s8). Machines without a GPU have nvcc but
# no cuobjdump, so the PTX is what can be checked; a rewrite that loses an
# instruction fails here.
#   tests/cuda/ptx_check.sh PTX_DIR
set -u
dir=$1
# The PTX of source NAME.cu for sm_ARCH, or a failure naming it.
ptx_of() {
  local file=$dir/$1.compute_$2.ptx
  if [ ! -s "$file" ]; then
    echo "FAILED: $file is missing: build the library first (nvcc keeps it there)" >&2
    return 1
  fi
  echo "$file"
}
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
    if ! ptx=$(ptx_of batched_attention_hdim$d $arch); then
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
    if ! ptx=$(ptx_of $file $arch); then
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
