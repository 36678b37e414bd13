#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment in .venv with torch, then build and install
# axial_fused into it. Idempotent; re-running rebuilds only what changed.
#   AXIAL_FUSED_SPECS / AXIAL_FUSED_ARCHS / MAX_JOBS pass through to the build (see README).
#   TORCH_SPEC picks the torch to install (default torch==2.14.1, a CUDA 13.0 build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q "${TORCH_SPEC:-torch==2.14.1}" numpy pytest fair-esm einops scipy ninja setuptools wheel
# Boltz (a test client, like fair-esm): its triangle attention needs einops and scipy, not the rest
# of its requirements (Lightning, RDKit, ...).
.venv/bin/python -m pip install -q --no-deps boltz==2.2.1
if [[ -z "${CUDA_HOME:-}" ]] && command -v nvcc >/dev/null; then
  # nvcc may be a wrapper script: ask nvcc itself where its toolkit is.
  top=$(nvcc --dryrun -c -x cu /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
  [[ -n "$top" ]] && export CUDA_HOME=$(realpath "$top")
fi
if [[ -z "${CUDA_HOME:-}" ]]; then
  echo "setup.sh: no CUDA toolkit found (nvcc not on PATH and CUDA_HOME unset); install one or set CUDA_HOME" >&2
  exit 1
fi
echo "setup.sh: CUDA_HOME=$CUDA_HOME, AXIAL_FUSED_SPECS=${AXIAL_FUSED_SPECS:-default}, AXIAL_FUSED_ARCHS=${AXIAL_FUSED_ARCHS:-80+PTX;90a}"
export CUDA_HOME MAX_JOBS=${MAX_JOBS:-$(nproc)}
.venv/bin/python -m pip install -q --no-build-isolation --no-deps .
