#!/usr/bin/env bash
# Is a new form faster? Two or three builds (A, B, C) timed against each other on one GPU machine:
# each built in its own copy of the tree with its own nvcc flags (or a patch taken back out), all
# timed twice in alternation (kernel µs per call, scripts/dev/kernel_times.py --brief), then the
# last build's tests. Measure a new form behind a default-off macro; delete the loser after.
# Usage (repo root):
#   AB_SPECS=64x8:bf16,384x16:bf16 AB_FLAGS_B=-DAXIAL_FUSED_<NEW_FORM>=1 bash scripts/dev/ab.sh
# AB_SPECS: AXIAL_FUSED_SPECS of every build (required: a few specializations build in minutes).
# AB_FLAGS_A / _B / _C: AXIAL_FUSED_NVCC_FLAGS of each build (A and B always built, with none by
# default; C only when AB_FLAGS_C or AB_C is set). AB_PATCH_A / AB_PATCH_B: a patch file (git diff
# OLD) that build A / B takes back out, so that it is the old code (a change not behind a flag; C is
# the tree as it is).
# What is timed: AB_SHAPES, feature-benchmark shapes, space-separated (default 1,1024,256,64,8; ""
# for none), each with the feature sets AB_SETS (default plain,mask,bias,mask+bias+gate); AB_BLOCKS,
# protein blocks (default extra_msa; "" for none; their packages importable: scripts/setup.sh, or
# scripts/unpack_deps.sh on a machine without internet); AB_GRAPH=1: per block its fused_graph time
# (the benchmark's) and one replay's span instead of its kernels' sum. AB_STEP_S: each timing step's
# time limit (default 300 s: a kernel that hangs costs one step, not the run); AB_COLS: the lines'
# width (default 160).
# The tests: AB_TESTS, pytest arguments for the last build (default tests/test_features.py; "" for
# none; split at spaces), AB_TESTS_K its -k expression, AB_TEST_S their time limit (default 0: none).
# AB_DIR: where the builds go (default ${TMPDIR:-/tmp}/axial_ab). OUT (the report, ab.txt),
# AXIAL_FUSED_ARCHS (default this GPU's), MAX_JOBS (default the cores, shared by the builds): prelude.sh.
source "$(dirname "$0")/../prelude.sh"
exec > >(tee "$OUT/ab.txt") 2>&1
variants=(A B) builds=(); [[ -n ${AB_FLAGS_C:-}${AB_C:-} ]] && variants+=(C)
jobs=$(( ${MAX_JOBS:-$(nproc)} / ${#variants[@]} ))
export MAX_JOBS=$(( jobs > 0 ? jobs : 1 )) AXIAL_FUSED_ARCHS=${AXIAL_FUSED_ARCHS:-${GPU_ARCH:-90a}}
export AXIAL_FUSED_SPECS=${AB_SPECS:?AB_SPECS, e.g. 64x8:bf16}
deps=$(bash scripts/unpack_deps.sh)
dir=${AB_DIR:-${TMPDIR:-/tmp}/axial_ab}
for v in "${variants[@]}"; do
  rm -rf "${dir:?}/$v" && mkdir -p "$dir/$v" && cp -r src include kernels csrc setup.py pyproject.toml scripts tests "$dir/$v/"
  patch_var=AB_PATCH_$v
  if [[ $v != C && -n ${!patch_var:-} ]]; then
    old_patch=$(realpath "${!patch_var}")
    (cd "$dir/$v" && { git apply -R "$old_patch" 2>/dev/null || patch -s -R -p1 < "$old_patch"; }) ||
      { echo "$v: $old_patch does not apply"; exit 1; }
  fi
  flags=AB_FLAGS_$v
  (cd "$dir/$v" && AXIAL_FUSED_NVCC_FLAGS=${!flags:-} "$PY" setup.py build_ext --inplace > build.log 2>&1
   echo "$v (${!flags:-no flags}): build rc=$?") &
  builds+=($!)
done
wait "${builds[@]}"  # (not a bare wait: that would also wait for the tee above, which never ends)
step=${AB_STEP_S:-300}
for round in 1 2; do
  for v in "${variants[@]}"; do
    echo "=== $v, round $round"
    cd "$dir/$v" || exit 1
    export PYTHONPATH=$dir/$v/src${deps:+:$deps}
    for b in ${AB_BLOCKS-extra_msa}; do  # (warnings to a log: on stdout they would take the lines)
      if [[ -n ${AB_GRAPH:-} ]]; then
        timeout "$step" "$PY" -m axial_fused.bench --suite protein --shapes "$b" --peers fused_graph --json '' \
          2>> protein.err | grep "^$b "
        timeout "$step" "$PY" scripts/dev/kernel_times.py --timeline protein "$b" --graph 2>> protein.err |
          grep "one call"
      else
        timeout "$step" "$PY" scripts/dev/kernel_times.py --brief protein "$b" 2>> protein.err | cut -c1-${AB_COLS:-160}
      fi
    done
    for shape in ${AB_SHAPES-1,1024,256,64,8}; do
      timeout "$step" "$PY" scripts/dev/kernel_times.py --brief features "$shape" \
        --sets "${AB_SETS:-plain,mask,bias,mask+bias+gate}" 2>&1 | cut -c1-${AB_COLS:-160}
    done
  done
done
if [[ -n ${AB_TESTS-tests/test_features.py} ]]; then
  k=(); [[ -n ${AB_TESTS_K:-} ]] && k=(-k "$AB_TESTS_K")
  # shellcheck disable=SC2086  # AB_TESTS is a list of pytest arguments
  cd "$dir/${variants[-1]}" && timeout "${AB_TEST_S:-0}" "$PY" -m pytest -q -p no:cacheprovider \
    ${AB_TESTS-tests/test_features.py} ${k[@]+"${k[@]}"} 2>&1 | tail -5
fi
