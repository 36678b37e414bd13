#!/usr/bin/env bash
# The Python packages the GPU machine lacks and the protein tests and benchmark use (fair-esm, Boltz,
# and cuEquivariance with its dependencies), packed here for the device tool, which carries at most 64 MiB:
# their wheels' files in one tar compressed with `zstd -19 --long=27` (about 29 MB, from 73 MB of
# wheels), and the zstandard wheel that unpacks it there (the GPU machine has no zstd command).
# Usage (this machine):  bash scripts/pack_deps.sh   then carry .whl/deps.tar.zst and .whl/zstandard.whl;
# scripts/device_run.sh unpacks them into /tmp/deps, on PYTHONPATH. DEVICE_PY: the GPU machine's Python.
set -euo pipefail
cd "$(dirname "$0")/.."
PY_VER=${DEVICE_PY:-3.12}
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
