#!/usr/bin/env bash
# Nsight Compute on one call of a workload (scripts/dev/run_once.py; GPU machine, extension built in
# place), every launch of our kernels in it, the GPU's clocks left as the benchmark sees them
# (--clock-control none; ncu would otherwise lock them to base).
# Usage (any folder):  bash scripts/dev/ncu.sh MODE WORKLOAD...      e.g.
#   bash scripts/dev/ncu.sh sections forward msa
#   bash scripts/dev/ncu.sh counters features msa --sets mask+bias+gate --axes row
#   NCU_SKIP=1 bash scripts/dev/ncu.sh source forward msa        (the second launch: the column pass)
# MODE:
#   sections  speed of light, occupancy, launch and scheduler statistics, warp states, memory workload
#   counters  duration, instructions and issue rate, the warp stall reasons (warps stalled per issued
#             instruction), tensor-pipe activity, shared-memory bank conflicts, L1/L2/DRAM traffic
#   source    where the warps wait: warp-state samples per SASS instruction of one launch (the
#             NCU_SKIP-th), the TOP (default 25) most sampled with their stall reasons (top_stalls.py)
# Env: NCU_KERNELS (a regex of kernel names; default our kernels), NCU_SKIP (launches skipped,
# default 0), NCU_COUNT (launches profiled; default all, source 1), TOP; OUT, TIME_LIMIT (prelude.sh).
# Writes $OUT/ncu-MODE-WORKLOAD.txt (source: also the .csv) and prints its key lines.
source "$(dirname "$0")/../prelude.sh"
mode=${1:?usage: ncu.sh sections|counters|source WORKLOAD...}; shift
[[ $# -gt 0 ]] || { echo "ncu.sh: no workload (scripts/dev/run_once.py's arguments)"; exit 2; }
need_ext
label=$(echo "$*" | tr -c 'A-Za-z0-9_.,+=-' '_' | sed 's/_*$//')
log="$OUT/ncu-$mode-$label.txt"
kernels=${NCU_KERNELS:-^(fused_pass|fused_sm90|ln_qkv|attn_out|attn_sm90|out_gemm|terms_prep|pair_bias)}
count=${NCU_COUNT:-$([[ $mode == source ]] && echo 1)}
ncu_run() {
  timeout "$(left_s)" ncu --clock-control none --kernel-name-base function --kernel-name "regex:$kernels" \
    --launch-skip "${NCU_SKIP:-0}" ${count:+--launch-count "$count"} "$@" "$PY" scripts/dev/run_once.py "${args[@]}"
}
args=("$@")
case $mode in
  sections)
    ncu_run --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis > "$log" 2>&1; rc=$?
    grep -E ", Context [0-9]+, Stream|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Warp Per Scheduler|No Eligible|Warp Cycles Per Issued|spends|stall" \
      "$log" | cut -c1-220 ;;
  counters)
    metrics=(gpu__time_duration.sum smsp__inst_executed.sum smsp__issue_active.avg.pct_of_peak_sustained_active
      sm__warps_active.avg.pct_of_peak_sustained_active
      'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
      'regex:sm__pipe_tensor.*cycles_active\.avg\.pct_of_peak_sustained_active'
      l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
      l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
      l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum lts__throughput.avg.pct_of_peak_sustained_elapsed lts__t_bytes.sum
      lts__t_sector_hit_rate.pct dram__throughput.avg.pct_of_peak_sustained_elapsed dram__bytes_read.sum
      dram__bytes_write.sum)
    ncu_run --metrics "$(IFS=,; echo "${metrics[*]}")" > "$log" 2>&1; rc=$?
    # each kernel's line, then its metrics above 0.05
    awk '/^(run_once|==)/ {next} /, Context [0-9]+, Stream/ {print substr($0, 1, 110); next}
         NF >= 3 && $NF ~ /^[0-9.,]+$/ { v = $NF; gsub(",", "", v); if (v + 0 > 0.05) printf "    %-80s %s\n", $1, $NF }' "$log" |
      sed 's/smsp__average_warps_issue_stalled_/stall_/; s/_per_issue_active.ratio//' ;;
  source)
    rep=$OUT/ncu-source-$label
    ncu_run --section SourceCounters --section WarpStateStats -f -o "$rep" > "$log" 2>&1; rc=$?
    ncu --import "$rep.ncu-rep" --page source --print-source sass --csv > "$rep.csv" 2>> "$log" || rc=$?
    "$PY" scripts/dev/top_stalls.py "$rep.csv" "${TOP:-25}" ;;
  *) echo "ncu.sh: MODE is sections, counters or source, not '$mode'"; exit 2 ;;
esac
echo "ncu.sh $mode $*: rc=$rc (full report: $log)"
exit $rc
