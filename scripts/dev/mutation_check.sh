#!/usr/bin/env bash
# Do the GPU tests catch broken kernels? For each mutation (FILE|SED-EXPRESSION, ';'-separated), edit
# the working copy, rebuild a small spec set in place, run a test selection and expect failures; the
# file is restored from its copy afterwards. Run on the GPU machine (its working tree is a copy) after the
# real tests: it leaves the last mutation's build in place, so rebuild before anything else.
# Usage (repo root):
#   MUTATIONS="include/axial_fused/common/epilogue.cuh|s/a + (res.x + bv.x)/a + res.x/" \
#   AXIAL_FUSED_SPECS=256x8:bf16 TESTS="tests/test_hopper_attention.py" bash scripts/dev/mutation_check.sh
set -uo pipefail
OUT=${OUT:-$PWD/device_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} AXIAL_FUSED_ARCHS=${AXIAL_FUSED_ARCHS:-90a}
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
IFS=';' read -ra list <<< "${MUTATIONS:?set MUTATIONS}"
status=0
for m in "${list[@]}"; do
  file=${m%%|*}; expr=${m#*|}
  cp "$file" "$file.orig"
  sed -i "$expr" "$file"
  if cmp -s "$file" "$file.orig"; then
    echo "mutation '$expr' changed nothing in $file"; status=1; mv "$file.orig" "$file"; continue
  fi
  python3 setup.py build_ext --inplace > "$OUT/mutation-build.log" 2>&1 || { echo "build failed: $expr"; status=1; }
  # shellcheck disable=SC2086  # TESTS is a list of pytest node ids
  summary=$(timeout "${TEST_TIMEOUT:-200}" python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/test_hopper_attention.py} 2>&1 | tail -1)
  mv "$file.orig" "$file"
  if [[ $summary == *failed* ]]; then echo "caught: '$expr': $summary"; else echo "MISSED: '$expr': $summary"; status=1; fi
done
exit $status
