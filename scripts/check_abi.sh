#!/usr/bin/env bash
# The binary keeps to LibTorch's stable ABI and Python's limited API (one wheel for every torch >= 2.11
# and every Python >= 3.10): given a wheel or an axial_fused/_C*.so, fail if
#   - the wheel is not tagged cp310-abi3, or the extension not named _C.abi3.so;
#   - the extension references a C++ symbol of at::, c10:: or torch:: (they change between torch
#     releases; the stable ABI's C shims are plain C symbols: aoti_torch_*, torch_*);
#   - it links libtorch_python (which only a non-limited-API build needs).
# Usage: bash scripts/check_abi.sh FILE.whl|FILE.so
set -euo pipefail
file=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [[ $file == *.whl ]]; then
  [[ $(basename "$file") == *-cp310-abi3-* ]] || { echo "check_abi: $(basename "$file") is not a cp310-abi3 wheel" >&2; exit 1; }
  python3 -m zipfile -e "$file" "$tmp"
  so=$(find "$tmp" -path '*axial_fused/_C*.so' | head -1)
else
  so=$file
fi
[[ -n $so && $(basename "$so") == _C.abi3.so ]] || { echo "check_abi: no axial_fused/_C.abi3.so in $file (found: ${so:-none})" >&2; exit 1; }
bad=$(nm -D --undefined-only -C "$so" | grep -E '(^|[^[:alnum:]_])(at|c10|torch)::' || true)
if [[ -n $bad ]]; then
  echo "check_abi: $(basename "$so") references libtorch C++ symbols (not the stable ABI):" >&2
  echo "$bad" | head -20 >&2
  exit 1
fi
if readelf -dW "$so" | grep -q 'libtorch_python'; then
  echo "check_abi: $(basename "$so") links libtorch_python" >&2; exit 1
fi
n=$(nm -D --undefined-only "$so" | grep -cE ' U (aoti_torch_|torch_)' || true)
echo "check_abi: $(basename "$so") OK: no at::/c10::/torch:: C++ symbol, $n stable C shim functions, limited API"
