#!/usr/bin/env bash
# On the GPU machine: the protein tests' and benchmark's packages (fair-esm, Boltz, cuEquivariance), packed by
# scripts/pack_deps.sh and carried as .whl/deps.tar.zst with .whl/zstandard.whl, unpacked into
# /tmp/deps (with the zstandard module, as the machine has no zstd command); and any pure-Python wheel
# carried as it is in .whl/extra/ (e.g. fair-esm alone, where a large wheel leaves no room for the
# tar). Prints the folder, or nothing when nothing was carried. Usage: deps=$(bash scripts/unpack_deps.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
extra=(.whl/extra/*.whl)
[[ -f .whl/deps.tar.zst && -f .whl/zstandard.whl ]] || [[ -f ${extra[0]} ]] || exit 0
rm -rf /tmp/deps; mkdir -p /tmp/deps
for w in "${extra[@]}"; do [[ -f $w ]] && python3 -m zipfile -e "$w" /tmp/deps; done
if [[ -f .whl/deps.tar.zst && -f .whl/zstandard.whl ]]; then
  mkdir -p /tmp/deps/zstd
  python3 -m zipfile -e .whl/zstandard.whl /tmp/deps/zstd
  PYTHONPATH=/tmp/deps/zstd python3 -c "
import sys, zstandard
zstandard.ZstdDecompressor(max_window_size=2**31).copy_stream(open('.whl/deps.tar.zst', 'rb'), sys.stdout.buffer)" \
    | tar -C /tmp/deps -xf - || exit 1
fi
echo /tmp/deps
