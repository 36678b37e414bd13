#!/usr/bin/env bash
# Hardware counters of the attention kernel and K1 for each feature set of one pass (GPU machine,
# extension built in place; clocks left alone): duration, instructions and issue rate, L2 and DRAM
# throughput, tensor-pipe activity and the warp stall reasons.
# Usage (repo root):  bash scripts/dev/ncu_features.sh SHAPE AXIS SET [SET ...]
set -uo pipefail
OUT=${OUT:-$PWD/device_out}; mkdir -p "$OUT"
shape=${1:?usage: ncu_features.sh SHAPE AXIS SET...}; axis=${2:?}; shift 2
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
for set in "$@"; do
  log="$OUT/ncu-$shape-$axis-${set//+/_}.txt"
  timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none --kernel-name regex:"^(ln_qkv_sm90|attn_sm90)" \
    --kernel-name-base function --launch-count 2 \
    --metrics 'gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,regex:sm__pipe_tensor.*cycles_active\.avg\.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum' \
    python3 scripts/dev/profile_features.py "$shape" "$set" "$axis" > "$log" 2>&1
  echo "== $shape $axis $set (rc=$?)"
  awk '/\(PassParams/ {print substr($0, 1, 60)} NF >= 3 && $NF ~ /^[0-9.,]+$/ { v = $NF; gsub(",", "", v); if (v + 0 > 0.1) printf "    %-72s %s\n", $1, $NF }' "$log" | sed 's/smsp__average_warps_issue_stalled_/stall_/; s/_per_issue_active.ratio//'
done
