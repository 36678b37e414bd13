#!/usr/bin/env bash
# Build in place and check on a GPU machine: the extension, the GPU tests, the benchmark.
# Usage (repo root):  bash scripts/gpu_run.sh [build|test|bench|all|validate] [pytest args...]
#   build     the in-place build (python3 setup.py build_ext --inplace), its errors and spills
#   test      the tests (tests/, plus the pytest args)       bench  the main job (python -m axial_fused)
#   all       build, test, bench (the default)
#   validate  what a kernel change needs before it is called done: the build, the full benchmark
#             (bench.json, bench.png, bench.txt; VALIDATE_BENCH=0 skips it), then the tests (the pytest
#             args given, or the GPU suite without tests/test_sass.py, which CI runs) with memcheck and
#             synccheck beside them (scripts/sanitize.sh), and racecheck on RACECHECK_DIMS (default
#             64x4,64x8,192x6,256x8: the sanitizer fails inside itself on 768x12's split kernels);
#             sanitize.txt holds their summaries, test_times.txt the 40 slowest tests.
# Env: AXIAL_FUSED_ARCHS (default this GPU's), AXIAL_FUSED_SPECS, MAX_JOBS; TIME_LIMIT: validate's
# tests and sanitizers stop by then, so that their logs are written (default 0: no limit); OUT
# (logs; default build/out): prelude.sh. VALIDATE_THREADS: PyTorch's CPU threads beside the
# sanitizers (default 4). The protein packages, where scripts/pack_deps.sh packed them, are unpacked
# onto PYTHONPATH (scripts/unpack_deps.sh).
source "$(dirname "$0")/prelude.sh"
what=${1:-all}; shift || true
export AXIAL_FUSED_ARCHS=${AXIAL_FUSED_ARCHS:-${GPU_ARCH:-90a}} MAX_JOBS=${MAX_JOBS:-$(nproc)}
deps=$(bash scripts/unpack_deps.sh)
[[ -n $deps ]] && export PYTHONPATH=$PYTHONPATH:$deps && echo "deps: unpacked into $deps"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
build() {
  local start=$(date +%s) rc
  # (the log is filtered after the build: a filter that stops reading, like head, would end the build)
  "$PY" setup.py build_ext --inplace > "$OUT/build.log" 2>&1
  rc=$?; grep -E "error|[1-9][0-9]* bytes spill" "$OUT/build.log" | head -50
  echo "build rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$OUT/build.log"
  [[ $rc == 0 ]] || exit $rc
}
[[ $what == build || $what == all || $what == validate ]] && build
if [[ $what == validate ]]; then
  if [[ ${VALIDATE_BENCH:-1} == 1 ]]; then  # (0: a change that leaves the plain passes' kernels as they were)
    "$PY" -m axial_fused.bench --shapes odd,latent,vision,seed,seed_fp32,msa,esm --json "$OUT/bench.json" \
      --png "$OUT/bench.png" > "$OUT/bench.txt" 2>&1
    tail -12 "$OUT/bench.txt"
    "$PY" scripts/dev/kernel_times.py forward msa esm 2>&1 | grep -E "kernels per call"
  fi
  deadline=$( (( ${TIME_LIMIT:-0} > 0 )) && echo $(( START_S + TIME_LIMIT - 40 )) )  # (40 s to write the logs)
  (OUT=$OUT/sanitize SANITIZE_DEADLINE=$deadline bash scripts/sanitize.sh memcheck synccheck \
    > "$OUT/sanitize.txt" 2>&1) &
  (OUT=$OUT/sanitize-race SANITIZE_DEADLINE=$deadline SANITIZE_DIMS=${RACECHECK_DIMS:-64x4,64x8,192x6,256x8} \
    bash scripts/sanitize.sh racecheck > "$OUT/sanitize-racecheck.txt" 2>&1) &
  left=0; [[ -n $deadline ]] && { left=$(( deadline - $(date +%s) )); (( left > 30 )) || left=30; }
  [[ $# -gt 0 ]] || set -- tests --ignore=tests/test_sass.py
  # (PyTorch's CPU threads held down beside the sanitizers' processes: an oversubscribed thread pool
  # slows the CPU-heavy tests, such as the float64 gradchecks, many times over)
  OMP_NUM_THREADS=${VALIDATE_THREADS:-4} AXIAL_FUSED_TEST_TIMES=$OUT/test_times.all timeout "$left" \
    "$PY" -m pytest -q -p no:cacheprovider "$@" > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$?"; tail -3 "$OUT/pytest.log"
  # (the slowest tests that ran, also when the run was cut short: tests/conftest.py)
  sort -rn "$OUT/test_times.all" 2>/dev/null | head -40 > "$OUT/test_times.txt"; rm -f "$OUT/test_times.all"
  wait
  cat "$OUT/sanitize-racecheck.txt" >> "$OUT/sanitize.txt"; rm -f "$OUT/sanitize-racecheck.txt"
  grep -E "^sanitize" "$OUT/sanitize.txt"
  echo "validate: $(( $(date +%s) - START_S )) s"
fi
if [[ $what == test || $what == all ]]; then
  "$PY" -m pytest -q --maxfail=30 -p no:cacheprovider tests "$@" 2>&1 | tee "$OUT/pytest.log" | tail -40
fi
if [[ $what == bench || $what == all ]]; then
  "$PY" -m axial_fused 2>&1 | tee "$OUT/demo.log"
fi
