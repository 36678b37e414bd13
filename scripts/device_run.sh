#!/usr/bin/env bash
# The one script for the GPU machine: build (sm_90a), GPU tests, demo/benchmark, in one call.
# Usage (device tool, repo root):  bash scripts/device_run.sh [build|test|bench|all|validate] [pytest args...]
# Writes logs under $OUT (or ./device_out when OUT is unset).
# validate: what a kernel change needs before it is called done, in one call of about 8 minutes:
# the default build, the full benchmark (bench.json, bench.png, bench.txt; VALIDATE_BENCH=0 skips it),
# then the tests until the deadline (pytest.log): the pytest arguments given, or the GPU suite
# without test_sass.py (about 1800 tests, about eight minutes: with the benchmark, split it by file
# over two calls), with memcheck and synccheck running beside them, racecheck on the (dim, heads) of
# RACECHECK_DIMS (default 64x4,64x8,192x6,256x8) (their logs in /tmp/sanitize and
# /tmp/sanitize-race, their summary lines in sanitize.txt), and the 40 slowest tests that ran
# (test_times.txt): seven files, within the device tool's eight.
set -uo pipefail
OUT=${OUT:-$PWD/device_out}; mkdir -p "$OUT"
what=${1:-all}; shift || true
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} AXIAL_FUSED_ARCHS=${AXIAL_FUSED_ARCHS:-90a}
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
# The protein tests' and benchmark's packages (fair-esm, Boltz, cuEquivariance), when carried (scripts/unpack_deps.sh).
deps=$(bash scripts/unpack_deps.sh)
[[ -n $deps ]] && export PYTHONPATH=$PYTHONPATH:$deps && echo "deps: unpacked into $deps"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
if [[ $what == build || $what == all ]]; then
  start=$(date +%s)
  # (the log is filtered after the build: a filter that stops reading, like head, would end the build)
  python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1
  rc=$?; grep -E "error|warning|spill|compiling" "$OUT/build.log" | head -50
  echo "build rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$OUT/build.log"
  [[ $rc == 0 ]] || exit $rc
fi
if [[ $what == validate ]]; then
  start=$(date +%s)
  python3 setup.py build_ext --inplace > /tmp/build.log 2>&1
  rc=$?; echo "build rc=$rc in $(( $(date +%s) - start )) s"; grep -E "error|[1-9][0-9]* bytes spill" /tmp/build.log | head -20
  [[ $rc == 0 ]] || exit $rc
  if [[ ${VALIDATE_BENCH:-1} == 1 ]]; then  # (0: a change that leaves the plain passes' kernels as they were)
    python3 -m axial_fused.bench --shapes odd,latent,vision,seed,seed_fp32,msa,esm --json "$OUT/bench.json" \
      --png "$OUT/bench.png" > "$OUT/bench.txt" 2>&1
    tail -12 "$OUT/bench.txt"
    python3 scripts/dev/kernel_times.py msa esm 2>&1 | grep -E "total|launch"
  fi
  # Both end by VALIDATE_DEADLINE (default 560 s after the start: the device tool stops a call at
  # 600), so their logs come back even when the suite is cut short; pytest's log then shows how far
  # it got (run the rest with `test` in a second call).
  deadline=${VALIDATE_DEADLINE:-$(( start + 560 ))}
  # Racecheck on RACECHECK_DIMS only (default: all but 768x12, whose split-pass kernels make
  # compute-sanitizer 2025.3.1 fail inside itself, docs/design.md "Verification"; the whole workload
  # never finished in the time before), beside memcheck and synccheck on all of it.
  (OUT=/tmp/sanitize SANITIZE_DEADLINE=$deadline bash scripts/sanitize.sh memcheck synccheck \
    > "$OUT/sanitize.txt" 2>&1) &
  (OUT=/tmp/sanitize-race SANITIZE_DEADLINE=$deadline SANITIZE_DIMS=${RACECHECK_DIMS:-64x4,64x8,192x6,256x8} \
    bash scripts/sanitize.sh racecheck > /tmp/sanitize-racecheck.txt 2>&1) &
  left=$(( deadline - $(date +%s) )); (( left > 30 )) || left=30  # (timeout 0 would mean no limit)
  # (by default without tests/test_sass.py: it compiles and disassembles on the CPU, about five minutes
  # here, and CI runs it)
  [[ $# -gt 0 ]] || set -- tests --ignore=tests/test_sass.py
  # (PyTorch's CPU threads held to 4 beside the sanitizers' processes: with all 16 the float64
  # gradcheck of test_features.py took 199 s here; on the 2-core CPU machine it takes 7 s alone, and
  # beside one busy core 40 s with 2 threads, 12 s with 1: an oversubscribed thread pool)
  OMP_NUM_THREADS=${VALIDATE_THREADS:-4} AXIAL_FUSED_TEST_TIMES=/tmp/test_times.txt timeout "$left" \
    python3 -m pytest -q -p no:cacheprovider "$@" > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$?"; tail -3 "$OUT/pytest.log"
  # (the slowest tests that ran, also when the suite was cut short: tests/conftest.py)
  sort -rn /tmp/test_times.txt 2>/dev/null | head -40 > "$OUT/test_times.txt"
  wait
  cat /tmp/sanitize-racecheck.txt >> "$OUT/sanitize.txt"
  grep -E "^sanitize" "$OUT/sanitize.txt"
  echo "validate: $(( $(date +%s) - start )) s"
fi
if [[ $what == test || $what == all ]]; then
  python3 -m pytest -q --maxfail=30 -p no:cacheprovider tests "$@" 2>&1 | tee "$OUT/pytest.log" | tail -40
fi
if [[ $what == bench || $what == all ]]; then
  python3 -m axial_fused 2>&1 | tee "$OUT/demo.log"
fi
