"""What the scripts in scripts/dev share (imported as `devkit`: running `python3 scripts/dev/NAME.py`
puts this folder on sys.path).

Importing it puts ./src first on sys.path where the extension is built in place there (`python3
setup.py build_ext --inplace`), unless AXIAL_FUSED_INSTALLED=1; else the installed package is used.

- The workloads, one grammar for every script that runs kernels (`add_workloads`, `calls`):
      forward SHAPE [SHAPE ...] [--path auto|fused|two_kernel|fused_sm90]   both passes, axial_attention
      features SHAPE [--sets plain,mask,...] [--axes row,col]               one pass per feature set
      protein [BLOCK ...] [--graph]                                         a protein block's fused call
      pair_bias [--n-res 256] [--heads 8]                                   the pair-bias op alone
  SHAPE: a benchmark suite name or B,H,W,D,heads[,dtype]; feature sets: bench.FEATURE_SETS; BLOCK:
  bench_protein.BLOCKS. Inputs are those of `python -m axial_fused.bench` (--features, --suite protein).
- `kernel_events(fn, reps)`: each GPU kernel of `reps` calls under torch.profiler, after warm-up.
- `need_gpu(who)`: exit with a message unless a CUDA device and the extension are there.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import warnings
from pathlib import Path
from typing import Callable, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
if os.environ.get("AXIAL_FUSED_INSTALLED") != "1" and any((ROOT / "src" / "axial_fused").glob("_C*.so")):
    sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

import axial_fused as af  # noqa: E402
from axial_fused import bench  # noqa: E402

Call = Callable[[], object]


def need_gpu(who: str) -> None:
    if not torch.cuda.is_available():
        sys.exit(f"{who}: no CUDA device")
    if af._ext.C is None:
        sys.exit(f"{who}: the extension did not load ({af._ext.error}); build it in place: "
                 "python3 setup.py build_ext --inplace")


# ---- workloads ----------------------------------------------------------------------------------

def add_workloads(ap: argparse.ArgumentParser) -> None:
    sub = ap.add_subparsers(dest="workload", required=True)
    f = sub.add_parser("forward", help="both passes of axial_attention at benchmark shapes")
    f.add_argument("shapes", nargs="+", metavar="SHAPE")
    f.add_argument("--path", default="auto", choices=list(af._ext.PATHS))
    f = sub.add_parser("features", help="one pass with each optional feature set")
    f.add_argument("shapes", nargs="+", metavar="SHAPE")
    f.add_argument("--sets", default=",".join(bench.FEATURE_SETS), help="bench.FEATURE_SETS names")
    f.add_argument("--axes", default="row,col")
    f = sub.add_parser("protein", help="the fused call of protein benchmark blocks")
    f.add_argument("blocks", nargs="*", metavar="BLOCK")
    f.add_argument("--graph", action="store_true", help="its CUDA-graph replay instead (fused_graph)")
    f = sub.add_parser("pair_bias", help="the pair-bias op alone: z [1, N_RES, N_RES, 128] bf16")
    f.add_argument("--n-res", type=int, default=256)
    f.add_argument("--heads", type=int, default=8)


def calls(args: argparse.Namespace) -> list[tuple[str, Call]]:
    """(label, call) of each workload the parsed arguments name, inputs built on the GPU."""
    if args.workload == "forward":
        af._ext.C.set_path_override(af._ext.PATHS[args.path])
        return [(shape, _forward(shape)) for shape in args.shapes]
    if args.workload == "features":
        out = []
        for shape in args.shapes:
            B, H, W, D, heads, dt = bench.resolve_shape(shape)
            inputs = bench.FeatureInputs(B, H, W, D, heads, bench.DTYPES[dt])
            for axis in args.axes.split(","):
                for fname in args.sets.split(","):
                    x, pw, kw = inputs.call(fname, axis)
                    out.append((f"{shape}/{axis}/{fname}",
                                lambda x=x, pw=pw, kw=kw: af.axial_pass(x, pw, strict=True, **kw)))
        return out
    if args.workload == "protein":
        from axial_fused import bench_protein as bp
        names = args.blocks or [b for b in bp.BLOCKS if b != "esm_col"]  # (esm_col needs fair-esm)
        return [(name, _protein(bp, name, args.graph)) for name in names]
    return [(f"pair_bias {args.n_res}x{args.heads}", _pair_bias(args.n_res, args.heads))]


def _forward(shape: str) -> Call:
    B, H, W, D, heads, dt = bench.resolve_shape(shape)
    model, x = bench._make(B, H, W, D, heads, dt)
    model = model.to("cuda", bench.DTYPES[dt])
    x = x.to("cuda", bench.DTYPES[dt])
    w = af.AxialWeights.from_module(model)
    return lambda: af.axial_attention(x, w, strict=True)


def _protein(bp, name: str, graph: bool) -> Call:
    inputs, _, peers, _ = bp.build(name)
    fused = peers["fused"]
    if not graph:
        return lambda: fused(*inputs)
    with torch.inference_mode():
        g, _ = bench._graph(lambda: fused(*inputs))
    return g.replay


def _pair_bias(n: int, heads: int, c: int = 128) -> Call:
    g = torch.Generator(device="cuda").manual_seed(0)
    r = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
    z, lw, lb, w = r(1, n, n, c), 1 + 0.1 * r(c), 0.1 * r(c), r(heads, c) / c ** 0.5
    return lambda: torch.ops.axial_fused.pair_bias(z, lw, lb, w, 1e-5)


# ---- torch.profiler -----------------------------------------------------------------------------

class Kernel(NamedTuple):
    name: str   # the kernel's name as the profiler gives it
    us: float   # its duration
    start: float
    end: float


def short_name(name: str) -> str:
    """`void ns::attn_sm90_kernel<...>(...)` -> `attn_sm90_kernel`."""
    return name.split("(")[0].split("<")[0].split("::")[-1].removeprefix("void ").strip()


def kernel_events(fn: Call, reps: int = 10, warmup: int = 3) -> list[Kernel]:
    """Every GPU kernel of `reps` calls of fn (inference mode), in start order."""
    from torch.profiler import ProfilerActivity, profile
    warnings.filterwarnings("ignore", message=".*Profiler clears events")  # (one profile, no schedule)
    with torch.inference_mode():
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
    ks = [Kernel(e.name, e.device_time, e.time_range.start, e.time_range.end)
          for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted(ks, key=lambda k: k.start)


def per_kernel_us(events: list[Kernel], reps: int, full_names: bool = False) -> dict[str, tuple[float, int]]:
    """{kernel: (µs per call summed over its launches, launches per call)}, largest first."""
    total, count = collections.defaultdict(float), collections.Counter()
    for k in events:
        name = k.name if full_names else short_name(k.name)
        total[name] += k.us / reps
        count[name] += 1
    return {n: (t, count[n] // reps) for n, t in sorted(total.items(), key=lambda kv: -kv[1])}
