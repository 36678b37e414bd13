#!/usr/bin/env bash
# Do the GPU tests catch broken kernels? For each mutation (FILE|SED-EXPRESSION, ';'-separated): edit
# the file, rebuild in place, run a test selection and expect failures; the file is restored from its
# copy afterwards. It leaves the last mutation's build in place: rebuild before anything else (on a
# checkout of your own, run it in a copy of the tree).
# Usage (repo root):
#   MUTATIONS="include/axial_fused/common/epilogue.cuh|s/a + (res.x + bv.x)/a + res.x/" \
#   AXIAL_FUSED_SPECS=256x8:bf16 TESTS="tests/test_hopper_attention.py" bash scripts/dev/mutation_check.sh
# TESTS: pytest arguments (default tests/test_hopper_attention.py); TEST_TIMEOUT: their time limit per
# mutation (default 0: none). AXIAL_FUSED_ARCHS (default this GPU's), MAX_JOBS, OUT: prelude.sh.
source "$(dirname "$0")/../prelude.sh"
export AXIAL_FUSED_ARCHS=${AXIAL_FUSED_ARCHS:-${GPU_ARCH:-90a}}
IFS=';' read -ra list <<< "${MUTATIONS:?set MUTATIONS}"
status=0
for m in "${list[@]}"; do
  file=${m%%|*}; expr=${m#*|}
  cp "$file" "$file.orig"
  sed -i "$expr" "$file"
  if cmp -s "$file" "$file.orig"; then
    echo "mutation '$expr' changed nothing in $file"; status=1; mv "$file.orig" "$file"; continue
  fi
  "$PY" setup.py build_ext --inplace > "$OUT/mutation-build.log" 2>&1 || { echo "build failed: $expr"; status=1; }
  # shellcheck disable=SC2086  # TESTS is a list of pytest arguments
  summary=$(timeout "${TEST_TIMEOUT:-0}" "$PY" -m pytest -q -p no:cacheprovider ${TESTS:-tests/test_hopper_attention.py} 2>&1 | tail -1)
  mv "$file.orig" "$file"
  if [[ $summary == *failed* ]]; then echo "caught: '$expr': $summary"; else echo "MISSED: '$expr': $summary"; status=1; fi
done
exit $status
