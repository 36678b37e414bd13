"""One call of one workload, nothing else on the GPU after its inputs are built: the program that
ncu, compute-sanitizer and the phase-clock build run (GPU machine).

    python3 scripts/dev/run_once.py [--calls N] WORKLOAD

WORKLOAD (devkit.py), exactly one call: `forward SHAPE [--path P]`, `features SHAPE --sets SET
--axes AXIS`, `protein BLOCK`, `pair_bias [--n-res N] [--heads H]`. E.g.

    ncu --launch-count 4 python3 scripts/dev/run_once.py forward msa --path two_kernel
    python3 scripts/dev/run_once.py features msa --sets mask+bias+gate --axes row

--calls N (default 1) repeats the call. Prints the output's norm (a check that it ran).
"""
from __future__ import annotations

import argparse
import sys

import torch

import devkit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1)
    devkit.add_workloads(ap)
    args = ap.parse_args()
    devkit.need_gpu("run_once")
    work = devkit.calls(args)
    if len(work) != 1:
        labels = ", ".join(label for label, _ in work[:4])
        sys.exit(f"run_once: one call at a time; these arguments name {len(work)} ({labels}, ...): "
                 "give one shape (features: one --sets and one --axes; protein: one block)")
    label, fn = work[0]
    torch.cuda.synchronize()
    with torch.inference_mode():
        for _ in range(args.calls):
            y = fn()
    torch.cuda.synchronize()
    norm = y.float().norm().item() if isinstance(y, torch.Tensor) else float("nan")
    print(f"run_once {label}: {args.calls} call(s), output norm {norm:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
