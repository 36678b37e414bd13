#!/usr/bin/env bash
# Every GPU part of the hardening work in one call (repo root, extension already built in place,
# or AXIAL_FUSED_INSTALLED=1 for an installed wheel):
#   1. pytest tests/test_robust_gpu.py   (bad input on the GPU, NaN/Inf, robustness, determinism,
#                                          4 threads, >65,535 sequences, >2^31 elements, fuzz slice)
#   2. python scripts/fuzz.py --n 500    (randomized differential testing)
#   3. python scripts/soak.py            (100,000 seed calls + 1,000 msa calls, allocated memory flat)
#   4. bash scripts/sanitize.sh          (memcheck, racecheck, synccheck, initcheck)
# Logs under $OUT (default ./device_out); a summary at the end. Whole run bounded by HARDEN_BUDGET
# seconds (default 530): the sanitizer tools share what the first three stages leave.
set -uo pipefail
OUT=${OUT:-$PWD/device_out}; mkdir -p "$OUT"
# AXIAL_FUSED_INSTALLED=1: test the axial_fused installed in the python3 on PATH (a wheel), not ./src.
export OUT PYTHONUNBUFFERED=1
[[ ${AXIAL_FUSED_INSTALLED:-0} == 1 ]] || export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
budget=${HARDEN_BUDGET:-530}; t0=$(date +%s)
declare -a summary
failed=0
stage() {  # name limit_s command...
  local name=$1 limit=$2; shift 2
  local start; start=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  (( rc == 0 )) || failed=1
  summary+=("$name: rc=$rc in $(( $(date +%s) - start )) s: $(grep -E "passed|failed|^fuzz:|^soak:|^sanitize " \
    "$OUT/$name.log" | tail -5 | tr '\n' ' ')")
  echo "${summary[-1]}"
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
# HARDEN_SKIP_PYTEST=1: skip stage 1 when the same tests already ran (e.g. in scripts/device_wheel.sh).
[[ ${HARDEN_SKIP_PYTEST:-0} == 1 ]] || stage robust_gpu 200 python3 -m pytest -q -p no:cacheprovider tests/test_robust_gpu.py
stage fuzz 200 python3 scripts/fuzz.py --n 500 --seed 0
stage soak 90 python3 scripts/soak.py
left=$(( budget - ($(date +%s) - t0) ))
(( left > 120 )) || left=120
export SANITIZE_DEADLINE=$(( $(date +%s) + left - 10 ))
stage sanitize $left bash scripts/sanitize.sh
echo "---- summary ($(( $(date +%s) - t0 )) s; logs in $OUT)"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
exit $failed
