#!/usr/bin/env bash
# The one script for the GPU machine: build (sm_90a), GPU tests, demo/benchmark, in one call.
# Usage (device tool, repo root):  bash scripts/device_run.sh [build|test|bench|all] [pytest args...]
# Writes logs under $OUT (or ./device_out when OUT is unset).
set -uo pipefail
OUT=${OUT:-$PWD/device_out}; mkdir -p "$OUT"
what=${1:-all}; shift || true
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} AXIAL_FUSED_ARCHS=${AXIAL_FUSED_ARCHS:-90a}
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
if [[ $what == build || $what == all ]]; then
  start=$(date +%s)
  python3 setup.py build_ext --inplace 2>&1 | tee "$OUT/build.log" | grep -E "error|warning|spill|compiling" | head -50
  rc=${PIPESTATUS[0]}; echo "build rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$OUT/build.log"
  [[ $rc == 0 ]] || exit $rc
fi
if [[ $what == test || $what == all ]]; then
  python3 -m pytest -q --maxfail=30 -p no:cacheprovider tests "$@" 2>&1 | tee "$OUT/pytest.log" | tail -40
fi
if [[ $what == bench || $what == all ]]; then
  python3 -m axial_fused 2>&1 | tee "$OUT/demo.log"
fi
