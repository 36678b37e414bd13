#!/usr/bin/env bash
# The protein tests' and benchmark's packages packed by scripts/pack_deps.sh (.whl/deps.tar.zst; by
# the zstd command, or else the zstandard module of .whl/zstandard.whl), and any wheel placed in
# .whl/extra/, unpacked into DEPS_DIR (default ${TMPDIR:-/tmp}/axial_deps), a folder for PYTHONPATH.
# Prints the folder, or nothing when there is nothing to unpack.
# Usage: deps=$(bash scripts/unpack_deps.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
dest=${DEPS_DIR:-${TMPDIR:-/tmp}/axial_deps}
extra=(.whl/extra/*.whl)
[[ -f .whl/deps.tar.zst ]] || [[ -f ${extra[0]} ]] || exit 0
rm -rf "$dest"; mkdir -p "$dest"
for w in "${extra[@]}"; do [[ -f $w ]] && python3 -m zipfile -e "$w" "$dest"; done
if [[ -f .whl/deps.tar.zst ]]; then
  if command -v zstd >/dev/null; then
    zstd -d -q --long=27 -c .whl/deps.tar.zst | tar -C "$dest" -xf - || exit 1
  else
    [[ -f .whl/zstandard.whl ]] || { echo "unpack_deps: no zstd command and no .whl/zstandard.whl" >&2; exit 1; }
    mkdir -p "$dest/zstd"
    python3 -m zipfile -e .whl/zstandard.whl "$dest/zstd"
    PYTHONPATH=$dest/zstd python3 -c "
import sys, zstandard
zstandard.ZstdDecompressor(max_window_size=2**31).copy_stream(open('.whl/deps.tar.zst', 'rb'), sys.stdout.buffer)" \
      | tar -C "$dest" -xf - || exit 1
  fi
fi
echo "$dest"
