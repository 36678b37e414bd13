"""Per-kernel GPU time of one forward for benchmark shapes (torch.profiler), to see where time goes.

    PYTHONPATH=src python scripts/dev/kernel_times.py [SHAPE ...] [--path auto|fused|two_kernel|fused_sm90]

SHAPE: a benchmark suite name (seed, vision, ...) or B,H,W,D,heads[,dtype] (dtype bfloat16 unless given).

Prints the total per forward, each kernel's time summed over the forward, and the launches of one
forward in order (row pass first), each a median over the repetitions.
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
    ap.add_argument("shapes", nargs="*", default=list(bench.SUITE))
    ap.add_argument("--path", default="auto", choices=list(af._ext.PATHS))
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    af._ext.C.set_path_override(af._ext.PATHS[args.path])
    for name in args.shapes:
        B, H, W, D, heads, dt = bench.resolve_shape(name)
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
        launches = []  # (short name, µs) in launch order, all repetitions
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                short = e.name.split("<")[0].split("(")[0]
                times[short].append(e.device_time)
                launches.append((short, e.device_time))
        total = sum(sum(v) for v in times.values()) / args.reps
        print(f"{name:10s} total {total:8.1f} us/forward")
        for k, v in sorted(times.items(), key=lambda kv: -sum(kv[1])):
            print(f"    {k:40s} {sum(v) / args.reps:8.1f} us  ({len(v) // args.reps} launches, {sum(v) / len(v):7.1f} us each)")
        per = len(launches) // args.reps
        if per * args.reps == len(launches):
            for i in range(per):
                us = statistics.median(launches[r * per + i][1] for r in range(args.reps))
                print(f"      launch {i}: {launches[i][0]:36s} {us:8.1f} us")


if __name__ == "__main__":
    main()
