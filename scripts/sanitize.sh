#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck, synccheck and initcheck over scripts/sanitize_driver.py (every
# dtype and head_dim, lengths 1 and 1024, lengths off the tile, packed sequences, both kernel paths).
# Usage (GPU machine, repo root, extension built in place):  bash scripts/sanitize.sh [tool ...]
# SANITIZE_DIMS="256x8,768x12" limits the driver to those (dim, heads); SANITIZE_FILTER replaces the
# kernel filter (e.g. "--kernel-name kns=sm90": the Hopper kernels only), for a quicker racecheck.
# Logs: $OUT/sanitize-<tool>.log. Prints each tool's ERROR SUMMARY; exit status 1 if any tool
# reports an error, fails or runs out of time: SANITIZE_TIMEOUT seconds per tool (default 0: no
# limit), or the time to SANITIZE_DEADLINE (epoch seconds) or to the end of TIME_LIMIT, shared.
# OUT, TIME_LIMIT, AXIAL_FUSED_INSTALLED=1 (check the installed package, not ./src): prelude.sh.
source "$(dirname "$0")/prelude.sh"
# One cudaMalloc per tensor: memcheck then sees each tensor's bounds (with the caching allocator, an
# overrun into a neighbouring tensor of the same segment goes unnoticed) and initcheck each fresh block.
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
CS=$(command -v compute-sanitizer || ls -d "${CUDA_HOME:-/usr/local/cuda}"/bin/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
[[ -x "$CS" ]] || { echo "sanitize: compute-sanitizer not found"; exit 1; }
# Only our kernels (their mangled names hold the namespace): PyTorch's own copies are not ours to check.
FILTER=${SANITIZE_FILTER:---kernel-name kns=axial_fused}
# SANITIZE_PARALLEL=1 (default): the tools run at once, as separate processes on the one GPU (the
# slow ones, racecheck and initcheck, are host-bound). With a deadline each tool may run until then
# (in parallel) or gets an equal share of the time left (serially).
tools=("$@"); [[ ${#tools[@]} -gt 0 ]] || tools=(memcheck synccheck racecheck initcheck)
parallel=${SANITIZE_PARALLEL:-1}
deadline=${SANITIZE_DEADLINE:-$( (( ${TIME_LIMIT:-0} > 0 )) && echo $(( START_S + TIME_LIMIT )) )}
run_tool() {  # limit tool filter...
  local limit=$1 tool=$2; shift 2
  # (initcheck without the feature calls: PyTorch's uninstrumented copies of the gate's weights would
  # read as uninitialised)
  # shellcheck disable=SC2068
  SANITIZE_FEATURES=$([[ $tool == initcheck ]] && echo 0 || echo 1) timeout "$limit" "$CS" --tool "$tool" $@ \
    --error-exitcode 3 --print-limit 20 python3 scripts/sanitize_driver.py > "$OUT/sanitize-$tool.log" 2>&1
}
one_tool() {  # tool limit: run it, then write its one-line result to $OUT/sanitize-<tool>.rc
  local tool=$1 limit=$2 start rc summary
  start=$(date +%s)
  # shellcheck disable=SC2086
  run_tool "$limit" "$tool" $FILTER; rc=$?
  if ! grep -q "ERROR SUMMARY" "$OUT/sanitize-$tool.log" && grep -qiE "unrecognized|invalid.*option|unknown option" \
      "$OUT/sanitize-$tool.log"; then
    echo "sanitize $tool: this compute-sanitizer rejects '$FILTER'; running without the kernel filter"
    run_tool "$limit" "$tool"; rc=$?
  fi
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize-$tool.log" | tail -2 | tr '\n' ' ')
  echo "$rc sanitize $tool: rc=$rc in $(( $(date +%s) - start )) s: ${summary:-no summary (see $OUT/sanitize-$tool.log)}" \
    > "$OUT/sanitize-$tool.rc"
}
limit_for() {  # tools_left: a tool's time limit in seconds (0: none)
  local limit=${SANITIZE_TIMEOUT:-0}
  if [[ -n $deadline ]]; then
    limit=$(( (deadline - $(date +%s)) / (parallel == 1 ? 1 : $1) )); (( limit >= 30 )) || limit=30
  fi
  echo "$limit"
}
left=${#tools[@]}
for tool in "${tools[@]}"; do
  if [[ $parallel == 1 ]]; then one_tool "$tool" "$(limit_for 1)" & else one_tool "$tool" "$(limit_for $left)"; fi
  left=$(( left - 1 ))
done
wait
status=0
for tool in "${tools[@]}"; do
  read -r rc line < "$OUT/sanitize-$tool.rc"
  echo "$line"
  [[ $rc == 0 ]] || { status=1; tail -5 "$OUT/sanitize-$tool.log"; }
done
exit $status
