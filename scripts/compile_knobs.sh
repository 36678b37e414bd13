#!/usr/bin/env bash
# The kernel experiments (compile-time knobs, docs/performance.md "Kernel experiments") still compile:
# builds one specialization's kernel file for sm_90a with each flag set, no GPU needed. CI runs it, so
# an experiment not yet measured cannot rot while the default code moves on.
# Usage (repo root):  bash scripts/compile_knobs.sh [KERNEL_FILE]
#   KNOBS: ';'-separated flag sets (default: the experiments not yet run on a GPU, the forms the defaults replaced,
#          the diagnostics, the phase clocks)
set -euo pipefail
file=${1:-kernels/axial_bf16_d128_h4.cu}  # in the minimal set: K1, the head_dim-32 attention, the fused kernel
KNOBS=${KNOBS:--DAXIAL_FUSED_PDL=1;-DAXIAL_FUSED_PDL=0;-DAXIAL_FUSED_BLOCK_EPI_BATCH=0;-DAXIAL_FUSED_BLOCK_EPI_BATCH=1;-DAXIAL_FUSED_OUT_TMA=1;-DAXIAL_FUSED_OUT_TMA=0;-DAXIAL_FUSED_ATTN_CURSOR=0;-DAXIAL_FUSED_QKV_TMA_STORE=1;-DAXIAL_FUSED_QKV_TMA_KW=16 -DAXIAL_FUSED_QKV_TMA_MIN_D=0;-DAXIAL_FUSED_QKV_CLUSTER=4 -DAXIAL_FUSED_QKV_TMA_MIN_D=0;-DAXIAL_FUSED_EPI_BFLY=0;-DAXIAL_FUSED_ATTN_ROW_RUN=1;-DAXIAL_FUSED_QKV_TMA_MIN_D=0;-DAXIAL_FUSED_QKV_TMA=0;-DAXIAL_FUSED_ATTN_PAIR=0;-DAXIAL_FUSED_ATTN_MINB=2 -DAXIAL_FUSED_ATTN_BM=128 -DAXIAL_FUSED_ATTN_BN_HD32=128;-DAXIAL_FUSED_DIAG_K1=15;-DAXIAL_FUSED_WG_LOAD_HOIST=0;-DAXIAL_FUSED_QKV_WS=0 -DAXIAL_FUSED_WG_LOAD_HOIST=0;-DAXIAL_FUSED_QKV_KW=64;-DAXIAL_FUSED_SHORT_BLOCK=0;-DAXIAL_FUSED_PHASE_CLOCK}
NVCC=${CUDA_HOME:+$CUDA_HOME/bin/}nvcc
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
IFS=';' read -ra sets <<< "$KNOBS"
for flags in "${sets[@]}"; do
  start=$(date +%s)
  # shellcheck disable=SC2086  # flags is a list of -D options
  # -c (host and device code: the cluster experiment has host code of its own), sm_90a only.
  if ! "$NVCC" -std=c++17 -O3 -Iinclude -gencode=arch=compute_90a,code=sm_90a -c -Xcompiler -fPIC -Xptxas -v $flags \
      -o "$tmp/k.o" "$file" > "$tmp/log" 2>&1; then
    cat "$tmp/log"; echo "compile_knobs: $file with '$flags' does not compile"; exit 1
  fi
  spills=$(grep -c "[1-9][0-9]* bytes spill stores" "$tmp/log" || true)
  echo "compile_knobs: $file with '$flags': ok in $(( $(date +%s) - start )) s ($spills functions with spills)"
done
