#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck, synccheck and initcheck over scripts/sanitize_driver.py (every
# dtype and head_dim, lengths 1 and 1024, lengths off the tile, packed sequences, both kernel paths).
# Usage (repo root, extension built in place):  bash scripts/sanitize.sh [tool ...]
# Logs: $OUT/sanitize-<tool>.log (OUT defaults to ./device_out). Prints each tool's ERROR SUMMARY;
# exit status 1 if any tool reports an error, fails or times out (SANITIZE_TIMEOUT seconds per tool,
# or a share of the time to SANITIZE_DEADLINE).
set -uo pipefail
OUT=${OUT:-$PWD/device_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1  # AXIAL_FUSED_INSTALLED=1: the installed package, not ./src
[[ ${AXIAL_FUSED_INSTALLED:-0} == 1 ]] || export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
# One cudaMalloc per tensor: memcheck then sees each tensor's bounds (with the caching allocator, an
# overrun into a neighbouring tensor of the same segment goes unnoticed) and initcheck each fresh block.
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
CS=$(command -v compute-sanitizer || ls -d ${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
[[ -x "$CS" ]] || { echo "sanitize: compute-sanitizer not found"; exit 1; }
# Only our kernels (their mangled names hold the namespace): PyTorch's own copies are not ours to check.
FILTER=${SANITIZE_FILTER:---kernel-name kns=axial_fused}
# The fast tools first: with SANITIZE_DEADLINE (epoch seconds) each tool gets an equal share of the time
# left, so the slow ones (racecheck, initcheck) inherit what the fast ones did not use.
tools=("$@"); [[ ${#tools[@]} -gt 0 ]] || tools=(memcheck synccheck racecheck initcheck)
status=0
left_tools=${#tools[@]}
run_tool() {  # tool filter...
  local tool=$1; shift
  # shellcheck disable=SC2068
  timeout "$limit" "$CS" --tool "$tool" $@ --error-exitcode 3 --print-limit 20 \
    python3 scripts/sanitize_driver.py > "$OUT/sanitize-$tool.log" 2>&1
}
for tool in "${tools[@]}"; do
  start=$(date +%s)
  limit=${SANITIZE_TIMEOUT:-150}
  if [[ -n ${SANITIZE_DEADLINE:-} ]]; then limit=$(( (SANITIZE_DEADLINE - start) / left_tools )); (( limit >= 30 )) || limit=30; fi
  left_tools=$(( left_tools - 1 ))
  # shellcheck disable=SC2086
  run_tool "$tool" $FILTER; rc=$?
  if ! grep -q "ERROR SUMMARY" "$OUT/sanitize-$tool.log" && grep -qiE "unrecognized|invalid.*option|unknown option" \
      "$OUT/sanitize-$tool.log"; then
    echo "sanitize $tool: this compute-sanitizer rejects '$FILTER'; running without the kernel filter"
    run_tool "$tool"; rc=$?
  fi
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize-$tool.log" | tail -2 | tr '\n' ' ')
  echo "sanitize $tool: rc=$rc in $(( $(date +%s) - start )) s: ${summary:-no summary (see $OUT/sanitize-$tool.log)}"
  [[ $rc == 0 ]] || { status=1; tail -5 "$OUT/sanitize-$tool.log"; }
done
exit $status
