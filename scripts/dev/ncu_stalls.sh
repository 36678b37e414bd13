#!/usr/bin/env bash
# Where a kernel's warps wait: the per-instruction stall reasons (averaged over issued instructions),
# shared-memory bank conflicts, tensor-pipe activity, L2 and DRAM throughput and DRAM bytes, for the
# first launch of our kernels in one forward of a benchmark shape (GPU machine, extension built in
# place; clocks left alone).
# Usage (repo root):  bash scripts/dev/ncu_stalls.sh SHAPE [auto|fused|two_kernel|fused_sm90] [LAUNCHES]
set -uo pipefail
OUT=${OUT:-$PWD/device_out}; mkdir -p "$OUT"
shape=${1:?usage: ncu_stalls.sh SHAPE [PATH] [LAUNCHES]}; path=${2:-auto}; n=${3:-1}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
log="$OUT/stalls-$shape-$path.txt"
timeout "${NCU_TIMEOUT:-240}" ncu --clock-control none \
  --kernel-name regex:"^(fused_pass|fused_sm90|ln_qkv|ln_qkv_sm90|ln_qkv_sm90_tma|ln_qkv_sm90_st|attn_out|attn_sm90)_kernel" --kernel-name-base function \
  --launch-count "$n" \
  --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_tensor.*cycles_active\.avg\.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed.sum,gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum' \
  python3 scripts/dev/profile_pass.py "$shape" "$path" > "$log" 2>&1
rc=$?
# The kernel line, then every metric above 0.05 (stall ratios are warps stalled per issued instruction).
awk '/\(PassParams/ {print substr($0, 1, 110)} NF >= 3 && $NF ~ /^[0-9.,]+$/ { v = $NF; gsub(",", "", v); if (v + 0 > 0.05) printf "    %-90s %s\n", $1, $NF }' "$log"
echo "ncu_stalls $shape $path: rc=$rc (full report: $log)"
exit $rc
