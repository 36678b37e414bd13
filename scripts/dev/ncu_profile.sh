#!/usr/bin/env bash
# Hardware counters for our kernels in one forward of a benchmark shape (GPU machine, extension built
# in place): speed of light, occupancy, scheduler and warp-stall statistics, memory workload.
# Usage (repo root):  bash scripts/dev/ncu_profile.sh SHAPE [auto|fused|two_kernel|fused_sm90]
# Writes $OUT/ncu-SHAPE.txt (OUT defaults to ./device_out) and prints its key lines. The clocks are
# left alone (--clock-control none: the device method's rule); the first forward's launches only.
set -uo pipefail
OUT=${OUT:-$PWD/device_out}; mkdir -p "$OUT"
shape=${1:?usage: ncu_profile.sh SHAPE [PATH]}; path=${2:-auto}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
log="$OUT/ncu-$shape-$path.txt"
timeout "${NCU_TIMEOUT:-240}" ncu --clock-control none --kernel-name regex:"^(fused_pass|fused_sm90|ln_qkv|ln_qkv_sm90|attn_out|attn_sm90)_kernel" --kernel-name-base function --launch-count 4 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
  --section WarpStateStats --section MemoryWorkloadAnalysis \
  python3 scripts/dev/profile_pass.py "$shape" "$path" > "$log" 2>&1
rc=$?
grep -E "axial_fused::|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Warp Per Scheduler|No Eligible|Warp Cycles Per Issued|spends|stall" \
  "$log" | cut -c1-220
echo "ncu_profile $shape $path: rc=$rc (full report: $log)"
exit $rc
