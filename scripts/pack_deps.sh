#!/usr/bin/env bash
# For a GPU machine without internet access: the Python packages that the protein tests and benchmark
# use beyond scripts/setup.sh's (fair-esm, Boltz, and cuEquivariance with its dependencies), packed on
# a machine with internet into one archive: their wheels' files in .whl/deps.tar.zst (zstd -19, about
# 29 MB from 73 MB of wheels), beside .whl/zstandard.whl, which unpacks it where no zstd command is.
# Copy .whl/ into the GPU machine's checkout; scripts/unpack_deps.sh (which scripts/gpu_run.sh,
# gpu_wheel.sh and dev/ab.sh call) unpacks it onto PYTHONPATH.
# Usage:  bash scripts/pack_deps.sh        TARGET_PY: the GPU machine's Python version (default 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
PY_VER=${TARGET_PY:-3.12}
dir=.whl; mkdir -p "$dir/wheels"
dl() { python3 -m pip download -q --no-deps -d "$dir/wheels" --python-version "$PY_VER" --only-binary=:all: "$@"; }
dl --platform manylinux_2_28_x86_64 fair-esm boltz==2.2.1 cuequivariance cuequivariance-torch cuequivariance-ops-cu13 \
  cuequivariance-ops-torch-cu13 platformdirs
dl --platform manylinux2014_x86_64 zstandard
rm -rf "$dir/site"; mkdir "$dir/site"
for w in "$dir"/wheels/*.whl; do
  [[ $(basename "$w") == zstandard-* ]] && cp "$w" "$dir/zstandard.whl" || python3 -m zipfile -e "$w" "$dir/site"
done
tar -C "$dir/site" -cf - . | zstd -19 --long=27 -T0 -q -f -o "$dir/deps.tar.zst"
rm -rf "$dir/site"
ls -l "$dir/deps.tar.zst" "$dir/zstandard.whl"
