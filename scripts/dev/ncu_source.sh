#!/usr/bin/env bash
# Where in the code a kernel's warps wait: ncu's warp-state sampling per SASS instruction (the
# SourceCounters section), for one launch of our kernels in one forward of a benchmark shape, printed
# as the instructions with the most samples and the stall reasons sampled there (GPU machine,
# extension built in place; clocks left alone).
# Usage (repo root):  bash scripts/dev/ncu_source.sh SHAPE [KERNEL_REGEX] [LAUNCH_SKIP] [TOP]
#   e.g. bash scripts/dev/ncu_source.sh msa attn_sm90 1     (msa's L = 512 attention launch)
# NCU_SET=<feature set> (bench.FEATURE_SETS, e.g. gate) profiles the row pass with those features
# (profile_features.py) instead of a plain forward.
set -uo pipefail
OUT=${OUT:-$PWD/device_out}; mkdir -p "$OUT"
shape=${1:?usage: ncu_source.sh SHAPE [KERNEL_REGEX] [LAUNCH_SKIP] [TOP]}; kern=${2:-attn_sm90}; skip=${3:-0}; top=${4:-25}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
rep=/tmp/ncu-source-$shape-$kern-$skip  # the report stays on the machine (large); the CSV comes back
timeout "${NCU_TIMEOUT:-240}" ncu --clock-control none --kernel-name regex:"^${kern}" --kernel-name-base function \
  --launch-skip "$skip" --launch-count 1 --section SourceCounters --section WarpStateStats -f -o "$rep" \
  python3 scripts/dev/$([[ -n ${NCU_SET:-} ]] && echo "profile_features.py $shape $NCU_SET row" || echo "profile_pass.py $shape auto") \
  > "$OUT/ncu-source-$shape.log" 2>&1
rc=$?
csv="$OUT/ncu-source-$shape-$kern-$skip.csv"
ncu --import "$rep.ncu-rep" --page source --print-source sass --csv > "$csv" 2>>"$OUT/ncu-source-$shape.log" || rc=$?
python3 scripts/dev/top_stalls.py "$csv" "$top"
echo "ncu_source $shape $kern skip $skip: rc=$rc (CSV: $csv)"
exit $rc
