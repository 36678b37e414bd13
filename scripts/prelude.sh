# Shared set-up of the shell scripts in scripts/ and scripts/dev/; sourced, never run:
#   source "$(dirname "$0")/prelude.sh"        (scripts/dev: "$(dirname "$0")/../prelude.sh")
# It moves to the repository root and sets:
#   OUT         the output folder (logs, reports), created; default build/out
#   CUDA_HOME   the CUDA toolkit; default: asked of nvcc, as scripts/setup.sh does
#   PYTHONPATH  ./src first, so the in-place build (python3 setup.py build_ext --inplace) is the one
#               imported; AXIAL_FUSED_INSTALLED=1 leaves it alone (the installed package is tested)
#   PY          the Python to run (default python3)
#   GPU_ARCH    this machine's GPU as an AXIAL_FUSED_ARCHS entry (90a on an H100 / H200, 80 on an
#               A100, ...), empty without nvidia-smi; the GPU scripts build for it by default
#   TIME_LIMIT  seconds the whole script may take (default 0: no limit); `left_s` prints the seconds
#               left (at least 30), or 0 without a limit, for `timeout "$(left_s)" ...` (0 = none)
# and defines need_ext (stop with a message unless the extension loads).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
OUT=$(realpath -m "${OUT:-build/out}"); mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
if [[ -z ${CUDA_HOME:-} ]] && command -v nvcc >/dev/null; then
  # (nvcc may be a wrapper script: nvcc itself says where its toolkit is)
  CUDA_HOME=$(realpath "$(nvcc --dryrun -c -x cu /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)")
fi
[[ -n ${CUDA_HOME:-} ]] && export CUDA_HOME
[[ ${AXIAL_FUSED_INSTALLED:-0} == 1 ]] || export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
GPU_ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
[[ $GPU_ARCH == 90 ]] && GPU_ARCH=90a
START_S=$(date +%s)

left_s() {
  (( ${TIME_LIMIT:-0} > 0 )) || { echo 0; return; }
  local left=$(( START_S + TIME_LIMIT - $(date +%s) ))
  (( left >= 30 )) && echo "$left" || echo 30
}

need_ext() {
  "$PY" -c "import sys; from axial_fused import _ext; sys.exit(_ext.C is None and f'{sys.argv[1]}: no extension \
({_ext.error}); build it in place: python3 setup.py build_ext --inplace')" "$(basename "$0")" || exit 1
}
