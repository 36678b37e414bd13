"""Per-kernel GPU time of the protein benchmark's blocks as ours runs them (torch.profiler):

    PYTHONPATH=src python scripts/dev/protein_times.py [BLOCK ...] [--reps N]

BLOCK: bench_protein.BLOCKS names (default all but esm_col). Per block: every kernel of one call of
the fused peer (the protein modules, PyTorch's kernels around ours included) with its time per call,
largest first, and their sum.
"""
import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile

from axial_fused import bench_protein as bp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("blocks", nargs="*", default=[b for b in bp.BLOCKS if b != "esm_col"])
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    for name in args.blocks:
        inputs, _, calls, _ = bp.build(name)
        fn = calls["fused"]
        with torch.inference_mode():
            for _ in range(3):
                fn(*inputs)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.reps):
                    fn(*inputs)
                torch.cuda.synchronize()
        per = collections.defaultdict(float)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per[e.name] += e.device_time / args.reps
        print(f"{name}: {sum(per.values()):.1f} us of kernels per call")
        for k, t in sorted(per.items(), key=lambda kv: -kv[1])[:12]:
            print(f"  {t:8.1f}  {k[:110]}")
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
