#!/usr/bin/env bash
# A/B (/C) of two or three builds in one device call: each built in its own copy of the tree with
# its own nvcc flags, all timed twice in alternation (kernel µs per pass from
# scripts/dev/feature_times.py, per protein block from scripts/dev/protein_times.py), then the last
# build's tests.
# Usage (device tool, repo root; carry .whl/deps.tar.zst and .whl/zstandard.whl for the protein blocks):
#   AB_SPECS=64x8:bf16,384x16:bf16 AB_FLAGS_B=-DAXIAL_FUSED_<NEW_FORM>=1 bash scripts/dev/ab.sh
# (the new form behind a default-off macro while it is measured; the loser deleted after)
# AB_FLAGS_A / _B / _C: AXIAL_FUSED_NVCC_FLAGS of each build (A and B always built, with none by
# default; C only when AB_FLAGS_C or AB_C is set); AB_PATCH_A / AB_PATCH_B: a patch file (git diff
# OLD) that build A / B takes back out, so that it is the old code (a change not behind a flag; C is
# the tree as it is); AB_SHAPES: feature_times shapes, space-separated (default 1,1024,256,64,8; ""
# for none); AB_SETS: its feature sets (default plain,mask,bias,mask+bias+gate); AB_BLOCKS: protein
# blocks (default extra_msa; "" for none); AB_GRAPH=1: per block its fused_graph time (the protein
# suite's) and one graph replay's span (protein_times.py --graph) instead of its kernels' sum;
# AB_TESTS: pytest arguments for the last build (default tests/test_features.py; "" for none; split at
# spaces), AB_TESTS_K: its -k expression (may hold spaces), within AB_TEST_S seconds (default 150);
# AB_STEP_S: each timing step's limit (default 120 s); AB_COLS: the feature lines' width (default 160).
set -uo pipefail
[[ -n ${OUT:-} ]] && exec > >(tee "$OUT/ab.txt") 2>&1  # (the whole report comes back, beside the call's tail)
variants=(A B) builds=(); [[ -n ${AB_FLAGS_C:-}${AB_C:-} ]] && variants+=(C)
export MAX_JOBS=$(( 16 / ${#variants[@]} )) AXIAL_FUSED_ARCHS=90a PYTHONUNBUFFERED=1 AXIAL_FUSED_SPECS=${AB_SPECS:?AB_SPECS, e.g. 64x8:bf16}
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
deps=$(bash scripts/unpack_deps.sh)
for v in "${variants[@]}"; do
  rm -rf "/tmp/ab$v" && mkdir "/tmp/ab$v" && cp -r src include kernels csrc setup.py pyproject.toml scripts tests "/tmp/ab$v/"
  patch_var=AB_PATCH_$v
  if [[ $v != C && -n ${!patch_var:-} ]]; then
    old_patch=$(realpath "${!patch_var}")
    (cd "/tmp/ab$v" && { git apply -R "$old_patch" 2>/dev/null || patch -s -R -p1 < "$old_patch"; }) ||
      { echo "$v: $old_patch does not apply"; exit 1; }
  fi
  flags=AB_FLAGS_$v
  (cd "/tmp/ab$v" && AXIAL_FUSED_NVCC_FLAGS=${!flags:-} python3 setup.py build_ext --inplace > build.log 2>&1
   echo "$v (${!flags:-no flags}): build rc=$?") &
  builds+=($!)
done
wait "${builds[@]}"  # (not a bare wait: that would also wait for the tee above, which never ends)
step=${AB_STEP_S:-120}  # (each timing step's limit: a kernel that hangs costs one step, not the call)
for round in 1 2; do
  for v in "${variants[@]}"; do
    echo "=== $v, round $round"
    cd "/tmp/ab$v" || exit 1
    for b in ${AB_BLOCKS-extra_msa}; do
      # (its warnings to a log: on stdout they would take the three lines)
      if [[ -n ${AB_GRAPH:-} ]]; then  # the block's fused_graph time and one replay's span
        PYTHONPATH=src:$deps timeout "$step" python3 -m axial_fused.bench --suite protein --shapes "$b" \
          --peers fused_graph --json '' 2>> protein_times.err | grep "^$b "
        PYTHONPATH=src:$deps timeout "$step" python3 scripts/dev/protein_times.py "$b" --graph 2>> protein_times.err |
          grep "one replay"
      else
        PYTHONPATH=src:$deps timeout "$step" python3 scripts/dev/protein_times.py "$b" 2>> protein_times.err | head -3
      fi
    done
    for shape in ${AB_SHAPES-1,1024,256,64,8}; do
      PYTHONPATH=src timeout "$step" python3 scripts/dev/feature_times.py "$shape" --sets "${AB_SETS:-plain,mask,bias,mask+bias+gate}" 2>&1 |
        grep total | cut -c1-${AB_COLS:-160}
    done
  done
done
if [[ -n ${AB_TESTS-tests/test_features.py} ]]; then
  k=(); [[ -n ${AB_TESTS_K:-} ]] && k=(-k "$AB_TESTS_K")
  cd "/tmp/ab${variants[-1]}" && PYTHONPATH=src:$deps timeout "${AB_TEST_S:-150}" python3 -m pytest -q -p no:cacheprovider \
    ${AB_TESTS-tests/test_features.py} ${k[@]+"${k[@]}"} 2>&1 | tail -5
fi
