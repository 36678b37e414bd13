"""SM clock and power while a load runs back to back, as the benchmark's timing loops run it.

Whether a shape's benchmark time is held down by the board's power limit: under sustained load the
SM clock drops below its boost clock, so a time measured in the benchmark's batches can exceed the
kernels' sum measured over a few calls (scripts/dev/kernel_times.py). This replays one shape's
fused forward graph for SECONDS, then a large bf16 matmul (the peers' kind of load) for as long,
sampling `nvidia-smi` every 100 ms, and prints each load's median SM clock, power and time per call.

    python3 scripts/dev/sustained_clock.py [SHAPE] [SECONDS]     (default esm 3)
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time

import torch

import devkit


def _sampled(fn, seconds: float) -> tuple[float, float, float]:
    """(median SM MHz, median W, us per call) while fn() runs back to back for `seconds`."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "100"], stdout=subprocess.PIPE, text=True)
    calls, t0 = 0, time.perf_counter()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            fn()
        calls += 20
        torch.cuda.current_stream().synchronize()  # (keeps the queue short: the time check stays honest)
    b.record()
    b.synchronize()
    smi.terminate()
    lines = [l.split(",") for l in smi.communicate()[0].splitlines() if l.count(",") == 1]
    clocks = [float(c) for c, _ in lines[2:]] or [float("nan")]  # (the first samples may predate the load)
    watts = [float(w) for _, w in lines[2:]] or [float("nan")]
    return statistics.median(clocks), statistics.median(watts), a.elapsed_time(b) * 1e3 / calls


def main(argv: list[str]) -> int:
    devkit.need_gpu("sustained_clock")
    af = devkit.af
    from axial_fused.bench import _graph, _make, resolve_shape

    shape = argv[0] if argv else "esm"
    seconds = float(argv[1]) if len(argv) > 1 else 3.0
    B, H, W, D, heads, dt = resolve_shape(shape)
    model, x_cpu = _make(B, H, W, D, heads, dt)
    dtype = getattr(torch, dt)
    m = model.cuda().to(dtype)
    x = x_cpu.to("cuda", dtype)
    w = af.AxialWeights.from_module(m)
    with torch.inference_mode():
        g, _ = _graph(lambda: af.axial_attention(x, w, strict=True))
        mhz, watt, us = _sampled(g.replay, seconds)
        print(f"{shape} fused_graph: {us:.1f} us per forward, SM {mhz:.0f} MHz, {watt:.0f} W")
        p = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        q = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        mhz, watt, us = _sampled(lambda: p @ q, seconds)
        print(f"bf16 matmul 8192^3: {us:.1f} us per call ({2 * 8192**3 / us / 1e6:.0f} TFLOP/s), SM {mhz:.0f} MHz, {watt:.0f} W")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
