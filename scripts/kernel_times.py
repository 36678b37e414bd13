"""Per-kernel GPU time of one forward for benchmark shapes (torch.profiler), to see where time goes.

    PYTHONPATH=src python scripts/kernel_times.py [SHAPE ...] [--path auto|fused|two_kernel]
"""
import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile

import axial_fused as af
from axial_fused import bench


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes", nargs="*", default=list(bench.SUITE))
    ap.add_argument("--path", default="auto", choices=["auto", "fused", "two_kernel"])
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    af._ext.C.set_path_override({"auto": -1, "fused": 0, "two_kernel": 1}[args.path])
    for name in args.shapes:
        B, H, W, D, heads, dt = bench.SUITE[name]
        model, x = bench._make(B, H, W, D, heads, dt)
        m = model.to("cuda", bench.DTYPES[dt])
        x = x.to("cuda", bench.DTYPES[dt])
        w = af.AxialWeights.from_module(m)
        with torch.inference_mode():
            for _ in range(3):
                af.axial_attention(x, w, strict=True)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.reps):
                    af.axial_attention(x, w, strict=True)
                torch.cuda.synchronize()
        times = collections.defaultdict(list)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                times[e.name.split("<")[0].split("(")[0]].append(e.device_time)
        total = sum(sum(v) for v in times.values()) / args.reps
        print(f"{name:10s} total {total:8.1f} us/forward")
        for k, v in sorted(times.items(), key=lambda kv: -sum(kv[1])):
            print(f"    {k:40s} {sum(v) / args.reps:8.1f} us  ({len(v) // args.reps} launches, {sum(v) / len(v):7.1f} us each)")


if __name__ == "__main__":
    main()
