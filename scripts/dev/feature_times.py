"""Per-kernel GPU time of one pass with each optional feature (bench.FEATURE_SETS), torch.profiler:

    PYTHONPATH=src python scripts/dev/feature_times.py [SHAPE] [--sets plain,mask,...] [--axes row,col]

SHAPE: a suite name or B,H,W,D,heads[,dtype] (default msa). The inputs are those of
`python -m axial_fused.bench --features` (bench.FeatureInputs); each line gives each kernel's median
time in the pass.
"""
import argparse
import collections
import statistics

import torch
from torch.profiler import ProfilerActivity, profile

import axial_fused as af
from axial_fused import bench


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", nargs="?", default="msa")
    ap.add_argument("--sets", default=",".join(bench.FEATURE_SETS))
    ap.add_argument("--axes", default="row,col")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    B, H, W, D, heads, dt = bench.resolve_shape(args.shape)
    inputs = bench.FeatureInputs(B, H, W, D, heads, bench.DTYPES[dt])
    for axis in args.axes.split(","):
        for fname in args.sets.split(","):
            x, pw, kw = inputs.call(fname, axis)
            with torch.inference_mode():
                for _ in range(3):
                    af.axial_pass(x, pw, strict=True, **kw)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(args.reps):
                        af.axial_pass(x, pw, strict=True, **kw)
                    torch.cuda.synchronize()
            times = collections.defaultdict(list)
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    times[e.name.split("<")[0].split("(")[0]].append(e.device_time)
            parts = ", ".join(f"{k} {statistics.median(v):.1f} x{len(v) // args.reps}" for k, v in times.items())
            total = sum(sum(v) for v in times.values()) / args.reps
            print(f"{args.shape}/{axis}/{fname:15s} total {total:7.1f} us: {parts}")


if __name__ == "__main__":
    main()
