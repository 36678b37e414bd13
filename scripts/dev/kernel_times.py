"""Where a call's GPU time goes: each kernel's time per call, torch.profiler (GPU machine).

    python3 scripts/dev/kernel_times.py [--reps N] [--brief] [--timeline] [--full-names] WORKLOAD ...

WORKLOAD (devkit.py): `forward SHAPE... [--path P]`, `features SHAPE [--sets S] [--axes A]`,
`protein [BLOCK...] [--graph]`, `pair_bias [--n-res N] [--heads H]`. E.g.

    python3 scripts/dev/kernel_times.py forward msa esm
    python3 scripts/dev/kernel_times.py --brief features msa --sets plain,mask+bias+gate
    python3 scripts/dev/kernel_times.py --timeline protein msa_row_pair --graph

Per workload: the kernels' sum per call, then each kernel's time per call (all its launches) and
launches per call, largest first. --brief: one line each. --timeline: the last call's launches in
order, each with its start and end after the call's first start and the gap before it (negative
where it overlaps the kernel before, as under programmatic dependent launch), and the idle time
between the last two calls.
"""
from __future__ import annotations

import argparse

import devkit


def timeline(events: list[devkit.Kernel], reps: int) -> None:
    per_call = len(events) // reps
    if per_call * reps != len(events):
        print(f"  (no timeline: {len(events)} launches in {reps} calls)")
        return
    last, before = events[-per_call:], events[:-per_call]
    t0 = last[0].start
    print(f"  one call: {last[-1].end - t0:.1f} us from its first start to its last end")
    if before:
        print(f"  {t0 - max(k.end for k in before):.1f} us from the previous call's last end to its first start")
    prev_end = None
    for k in last:
        gap = "" if prev_end is None else f"gap {k.start - prev_end:7.1f}"
        print(f"  {k.start - t0:8.1f} .. {k.end - t0:8.1f}  {gap:12s} {devkit.short_name(k.name)}")
        prev_end = k.end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--brief", action="store_true", help="one line a workload")
    ap.add_argument("--timeline", action="store_true", help="the last call's launches in order")
    ap.add_argument("--full-names", action="store_true", help="kernel names with namespaces and template arguments")
    devkit.add_workloads(ap)
    args = ap.parse_args()
    devkit.need_gpu("kernel_times")
    for label, fn in devkit.calls(args):
        events = devkit.kernel_events(fn, args.reps)
        per = devkit.per_kernel_us(events, args.reps, args.full_names)
        total = sum(t for t, _ in per.values())
        if args.brief:
            print(f"{label}: {total:.1f} us of kernels per call: " + ", ".join(f"{k} {t:.1f}" for k, (t, _) in per.items()))
        else:
            print(f"{label}: {total:.1f} us of kernels per call ({len(events) // args.reps} launches)")
            for k, (t, n) in per.items():
                print(f"  {t:8.1f}  x{n:<3d} {k[:120]}")
        if args.timeline:
            timeline(events, args.reps)


if __name__ == "__main__":
    main()
