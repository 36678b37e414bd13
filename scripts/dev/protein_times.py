"""Per-kernel GPU time of the protein benchmark's blocks as ours runs them (torch.profiler):

    PYTHONPATH=src python scripts/dev/protein_times.py [BLOCK ...] [--reps N] [--graph]

BLOCK: bench_protein.BLOCKS names (default all but esm_col). Per block: every kernel of one call of
the fused peer (the protein modules, PyTorch's kernels around ours included) with its time per call,
largest first, and their sum. --graph: the same of its CUDA-graph replay (fused_graph), then one
replay's kernels in order with each one's start and end after the replay's first start and the gap
before it (negative where it overlaps the kernel before, as under programmatic dependent launch).
"""
import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile

from axial_fused import bench
from axial_fused import bench_protein as bp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("blocks", nargs="*", default=[b for b in bp.BLOCKS if b != "esm_col"])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--graph", action="store_true")
    args = ap.parse_args()
    for name in args.blocks:
        inputs, _, calls, _ = bp.build(name)
        with torch.inference_mode():
            fn = calls["fused"]
            if args.graph:
                gr, _ = bench._graph(lambda: calls["fused"](*inputs))
                fn = lambda *_: gr.replay()
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
        if args.graph:
            kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            timeline(kernels, len(kernels) // args.reps)
        torch.cuda.empty_cache()


def timeline(events, per_call: int) -> None:
    """The last replay's kernels in order (each replay launches per_call kernels)."""
    ordered = sorted(events, key=lambda e: e.time_range.start)
    last = ordered[-per_call:]
    t0, prev_end = last[0].time_range.start, None
    print(f"  one replay: {last[-1].time_range.end - t0:.1f} us from the first start to the last end")
    if len(ordered) > per_call:  # the replays run back to back: what lies between two of them
        before = max(e.time_range.end for e in ordered[:-per_call])
        print(f"  {t0 - before:.1f} us from the previous replay's last end to this one's first start")
    for e in last:
        gap = "" if prev_end is None else f"gap {e.time_range.start - prev_end:7.1f}"
        print(f"  {e.time_range.start - t0:8.1f} .. {e.time_range.end - t0:8.1f}  {gap:12s} {e.name[:80]}")
        prev_end = e.time_range.end


if __name__ == "__main__":
    main()
