#!/usr/bin/env bash
# Kernel experiments on the GPU machine in one call: for each variant (a set of nvcc flags passed
# through AXIAL_FUSED_NVCC_FLAGS; after the first build only the kernel files recompile, in seconds),
# build in place, check it against the float64 reference, then time our kernels per launch
# (scripts/kernel_times.py) or, for a -DAXIAL_FUSED_PHASE_CLOCK variant, print the per-phase clocks
# of the first blocks (scripts/profile_pass.py).
# Usage (repo root; the knobs are listed in docs/performance.md, "Kernel experiments"):
#   VARIANTS="base;-DAXIAL_FUSED_QKV_BNW=128;-DAXIAL_FUSED_PHASE_CLOCK" SHAPES="latent msa" PATH_NAME=auto \
#   AXIAL_FUSED_SPECS=256x8:bf16 bash scripts/variants.sh
# TESTS: the pytest selection run per variant (default below; "" skips). BENCH_PEERS (e.g.
# "fused,fused_graph"): time the shapes end to end with the benchmark instead of per kernel. Build logs go to
# $VARIANT_LOGS (default /tmp/variant-logs: the device tool returns at most 8 files from $OUT), and a
# failed build's last lines are printed; everything printed is also kept in $OUT/variants.txt.
set -uo pipefail
OUT=${OUT:-$PWD/device_out}; mkdir -p "$OUT"
LOGS=${VARIANT_LOGS:-/tmp/variant-logs}; mkdir -p "$LOGS"
exec > >(tee -a "$OUT/variants.txt") 2>&1
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} AXIAL_FUSED_ARCHS=${AXIAL_FUSED_ARCHS:-90a}
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
VARIANTS=${VARIANTS:-base}; SHAPES=${SHAPES:-latent}; PATH_NAME=${PATH_NAME:-auto}
TESTS=${TESTS-tests/test_hopper_fused.py::test_against_float64 tests/test_gpu.py::test_two_kernel_every_spec}
IFS=';' read -ra list <<< "$VARIANTS"
n=0
for v in "${list[@]}"; do
  n=$((n + 1)); flags=$v; [[ $v == base ]] && flags=""
  echo "=== variant $n: ${v}"
  start=$(date +%s)
  AXIAL_FUSED_NVCC_FLAGS="$flags" python3 setup.py build_ext --inplace > "$LOGS/variant-$n-build.log" 2>&1
  rc=$?; echo "build rc=$rc in $(( $(date +%s) - start )) s"
  grep -E "error|spill" "$LOGS/variant-$n-build.log" | grep -v " 0 bytes spill" | grep -vE "^\[[0-9]+/[0-9]+\]" | head -5
  if [[ $rc != 0 ]]; then tail -20 "$LOGS/variant-$n-build.log"; continue; fi
  if [[ -n $TESTS ]]; then
    # shellcheck disable=SC2086  # TESTS is a list of pytest node ids
    # (the summary line, and the failed tests' ids with their first error line)
    timeout "${TEST_TIMEOUT:-180}" python3 -m pytest -q -rfE -p no:cacheprovider $TESTS 2>&1 |
      grep -E "^(FAILED|ERROR) |[0-9]+ (passed|failed)|no tests ran" | cut -c1-240 | tail -12
  fi
  if [[ -n ${BENCH_PEERS:-} && $flags != *PHASE_CLOCK* ]]; then
    # End-to-end times (what launch overlap changes and per-kernel times cannot show)
    timeout 300 python3 -m axial_fused.bench --shapes "${SHAPES// /,}" --peers "$BENCH_PEERS" --json '' 2>&1 |
      grep -E "^[a-z_0-9]+ +(bfloat16|float16|float32) "
    continue
  fi
  for s in $SHAPES; do
    if [[ $flags == *PHASE_CLOCK* ]]; then
      echo "--- $s ($PATH_NAME)"
      timeout 120 python3 scripts/profile_pass.py "$s" "$PATH_NAME" 2>&1 | grep clocks | tail -"${CLOCK_LINES:-16}"
    else
      timeout 120 python3 scripts/kernel_times.py "$s" --path "$PATH_NAME" 2>&1 | grep -E "total|launch"
    fi
  done
done
