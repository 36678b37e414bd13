"""Benchmark: the fused kernels against the PyTorch peers, on the same inputs and weights, in one run.

    python -m axial_fused.bench [--shapes seed,vision,...] [--dtype ...] [--peers ...] [--json F] [--png F]
    python -m axial_fused.bench --features [--shapes msa,...]   # the cost of the optional features
    python -m axial_fused.bench --suite protein [--shapes msa_row_pair,...]  # bench_protein.py

Peers: eager (reference with explicit softmax(q k^T / sqrt(d)) v), sdpa (reference with
scaled_dot_product_attention), compile (torch.compile of sdpa, default mode), compile_graphs (mode
"reduce-overhead"), graph (CUDA-graph replay of sdpa); ours: fused (plain eager call) and
fused_graph (CUDA-graph replay). Each output is checked against a float32 reference first.
Times: median over repeated batches of calls between CUDA events, after warm-up (compilation and
graph capture excluded). Within a shape the compile peers run last: a torch.compile leaves the
process slower for every host-bound eager call after it (measured: our call 28.8 -> 40.6 µs), so
the eager peers (eager, sdpa, fused) are timed in the same state as one another. The floor per
shape is max(bytes / bandwidth, flops / bf16 matmul rate), both measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import torch

from . import cases
from ._ext import PATHS
from .cases import DTYPES, FEATURE_SETS

# name: (B, H, W, D, heads, dtype) of the suite's cases (axial_fused.cases.SUITE)
SUITE = {name: (c.B, c.H, c.W, c.dim, c.heads, c.dtype) for name, c in cases.SUITE.items()}
PEERS = ["eager", "sdpa", "compile", "compile_graphs", "graph", "fused", "fused_graph"]
OURS = ("fused", "fused_graph")


def _time_batches(fn, target_ms: float = 20.0, batches: int = 15) -> float:
    """Median microseconds per call of fn(), timed in batches between CUDA events."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = max(time.perf_counter() - t0, 1e-6)
    n = max(1, min(2000, int(target_ms / 1e3 / one)))
    times = []
    for _ in range(batches):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / n)
    return statistics.median(times)


def measure_ceilings() -> dict:
    n = 1 << 28  # 1 GiB of bytes (uint8 view of bf16 pairs)
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = _time_batches(lambda: dst.copy_(src), target_ms=50, batches=7)
    bw = 2 * n / (us * 1e-6)
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    us = _time_batches(lambda: a @ b, target_ms=50, batches=7)
    return {"bandwidth_Bps": bw, "bf16_flops": 2 * m ** 3 / (us * 1e-6)}


def count(B, H, W, D, heads, esz) -> dict:
    N = B * H * W
    bytes_ = 2 * (2 * N * D * esz) + 2 * (3 * D * D + D * D + 3 * D) * esz
    flops = sum(2 * N * D * 3 * D + 2 * N * D * D + 4 * N * L * D for L in (W, H))
    exps = heads * N * (W + H)
    return {"bytes": bytes_, "flops": flops, "exps": exps}


def resolve_shape(name: str):
    """(B, H, W, D, heads, dtype) of a suite name, or of "B,H,W,D,heads[,dtype]" (bfloat16 by default)."""
    if name in SUITE:
        return SUITE[name]
    f = name.split(",")
    if len(f) not in (5, 6) or not all(v.isdigit() for v in f[:5]) or (len(f) == 6 and f[5] not in DTYPES):
        raise ValueError(f"shape {name!r}: expected one of {', '.join(SUITE)} or B,H,W,D,heads[,dtype] "
                         f"with dtype one of {', '.join(DTYPES)}")
    return (*map(int, f[:5]), f[5] if len(f) == 6 else "bfloat16")


def _make(B, H, W, D, heads, dtype, seed=0):
    import axial_fused as af
    g = torch.Generator().manual_seed(seed)
    model = af.reference.AxialAttentionReference(D, heads)
    with torch.no_grad():  # LayerNorm affine and biases away from their defaults; matrices at nn.Linear's init
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(p + 0.2 * torch.randn(p.shape, generator=g))
    x = torch.randn(B, H, W, D, generator=g)
    return model, x


def _graph(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


def bench_shape(name, B, H, W, D, heads, dtype_name, peers, ceilings, log=print) -> dict:
    import axial_fused as af
    dtype = DTYPES[dtype_name]
    model, x_cpu = _make(B, H, W, D, heads, dtype)
    with torch.no_grad():
        ref32 = model.cuda().float()(x_cpu.cuda().float())
    m = model.to(dtype)
    x = x_cpu.to("cuda", dtype)
    weights = af.AxialWeights.from_module(m)
    explicit = af.reference.AxialAttentionReference(D, heads, attention="explicit").cuda().to(dtype)
    explicit.load_state_dict(m.state_dict())
    row = {"shape": name, "B": B, "H": H, "W": W, "D": D, "heads": heads, "dtype": dtype_name}
    row.update(count(B, H, W, D, heads, x.element_size()))
    bound_fl = ceilings["bf16_flops"] if dtype != torch.float32 else ceilings.get("fp32_flops", 60e12)
    row["floor_us"] = max(row["bytes"] / ceilings["bandwidth_Bps"], row["flops"] / bound_fl) * 1e6
    row["exp_us"] = row["exps"] / ceilings.get("exp_rate", 132 * 16 * 1.98e9) * 1e6
    times, errs = {}, {}
    # Compile peers last (stable otherwise): see the module docstring.
    for peer in sorted(peers, key=lambda q: q in ("compile", "compile_graphs")):
        try:
            with torch.inference_mode():
                if peer == "eager":
                    fn = lambda: explicit(x)
                elif peer == "sdpa":
                    fn = lambda: m(x)
                elif peer in ("compile", "compile_graphs"):
                    torch._dynamo.reset()
                    cm = torch.compile(m, mode="reduce-overhead" if peer == "compile_graphs" else "default")
                    fn = lambda: cm(x)
                elif peer == "graph":
                    g, gout = _graph(lambda: m(x))
                    fn = lambda: (g.replay(), gout)[1]
                elif peer == "fused":
                    fn = lambda: af.axial_attention(x, weights, strict=True)
                elif peer == "fused_graph":
                    g2, gout2 = _graph(lambda: af.axial_attention(x, weights, strict=True))
                    fn = lambda: (g2.replay(), gout2)[1]
                out = fn()
                torch.cuda.synchronize()
                errs[peer] = ((out.float() - ref32).norm() / ref32.norm()).item()
                if not math.isfinite(errs[peer]) or errs[peer] > (1e-2 if dtype == torch.float32 else 5e-2):
                    log(f"  {name}/{peer}: output differs from the fp32 reference (rel err {errs[peer]:.3g}); not timed")
                    continue
                times[peer] = _time_batches(fn)
        except Exception as e:  # a peer that cannot run this shape is reported, not fatal
            log(f"  {name}/{peer}: failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    summarise(row, times, errs)
    for o in OURS:
        if o in times:
            row[f"floor_frac_{o}"] = row["floor_us"] / times[o]
    return row


def summarise(row, times, errs, ours=OURS) -> None:
    """row's times and errors, its best peer (not ours) and our speed-ups over it."""
    row["us"], row["rel_err"] = times, errs
    base = {k: v for k, v in times.items() if k not in ours}
    if base:
        best = min(base, key=base.get)
        row["best_peer"], row["best_peer_us"] = best, base[best]
        for o in ours:
            if o in times:
                row[f"speedup_{o}"] = base[best] / times[o]


def progress_line(r) -> str:
    times = " ".join(f"{p} {us:.1f}" for p, us in r["us"].items())
    best = f"; best peer {r['best_peer']}" if "best_peer" in r else ""
    return f"  {r['shape']}/{r['dtype']}: {times} µs{best}"


def write_json(path, ceilings, rows) -> None:
    with open(path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "ceilings": ceilings,
                   "rows": rows}, f, indent=1)


def print_table(rows, peers, out=sys.stdout):
    hdr = f"{'shape':<10}{'dtype':<9}" + "".join(f"{p:>15}" for p in peers) + f"{'best peer':>16}{'x fused_graph':>14}{'x fused':>9}{'floor':>8}{'%floor':>8}{'exp-us':>8}"
    print(hdr, file=out)
    for r in rows:
        line = f"{r['shape']:<10}{r['dtype']:<9}" + "".join(
            f"{r['us'][p]:>15.1f}" if p in r["us"] else f"{'-':>15}" for p in peers)
        line += f"{r.get('best_peer', '-'):>16}"
        line += f"{r.get('speedup_fused_graph', float('nan')):>13.2f}x{r.get('speedup_fused', float('nan')):>8.2f}x"
        line += f"{r['floor_us']:>8.1f}{100 * r.get('floor_frac_fused_graph', float('nan')):>7.0f}%{r['exp_us']:>8.1f}"
        print(line, file=out)
    print("(microseconds per forward, median; 'x' = best peer time / ours; %floor = floor / fused_graph)", file=out)


# ---- the cost of the optional features (cases.FEATURE_SETS) ----------------------------------------

class FeatureInputs:
    """The inputs of the feature benchmark at one shape (random, seed 1, on the GPU): the mask has a
    padded tail (the last eighth of each row and column absent) and random holes; the bias of each
    pass is [1, heads, L, L] in x's dtype. call(fname, axis) -> (x, PassWeights, axial_pass keywords)."""

    def __init__(self, B, H, W, D, heads, dtype, device="cuda"):
        import axial_fused as af
        self.af, self.heads = af, heads
        g = torch.Generator().manual_seed(1)
        r = lambda *s, scale=1.0: (torch.randn(*s, generator=g) * scale).to(device, dtype)
        self.base = [1 + r(D, scale=0.2), r(D, scale=0.2), r(3 * D, D, scale=D ** -0.5), r(D, D, scale=D ** -0.5), r(D)]
        self.gate_w, self.gate_b, self.qkv_b = r(D, D, scale=D ** -0.5), 1 + r(D, scale=0.3), r(3 * D, scale=0.3)
        self.x = r(B, H, W, D)
        mask = torch.rand(B, H, W, generator=g) > 0.1
        mask[:, H - H // 8:, :] = False
        mask[:, :, W - W // 8:] = False
        self.mask = mask.to(device)
        self.bias = {"row": r(1, heads, W, W, scale=2.0), "col": r(1, heads, H, H, scale=2.0)}

    def call(self, fname, axis):
        f = FEATURE_SETS[fname]
        pw = self.af.PassWeights(*self.base, qkv_bias=self.qkv_b if f.qkv_bias else None,
                                 gate_weight=self.gate_w if f.gate else None, gate_bias=self.gate_b if f.gate else None)
        kw = dict(num_heads=self.heads, axis=axis, mask=self.mask if f.mask else None,
                  bias=self.bias[axis] if f.bias else None, residual=f.residual)
        return self.x, pw, kw


def feature_costs(name, B, H, W, D, heads, dtype_name, log=print) -> list[dict]:
    """Each pass of a shape with each feature alone and together (FEATURE_SETS), as CUDA-graph replays
    of one fused pass (inputs: FeatureInputs): the time and its ratio to the plain pass. Each output
    (the eager call's, then the replay's) is checked against the reference at float32."""
    import axial_fused as af
    rows = []
    inputs = FeatureInputs(B, H, W, D, heads, DTYPES[dtype_name])
    for axis in ("row", "col"):
        plain_us = None
        for fname in FEATURE_SETS:
            x, pw, kw = inputs.call(fname, axis)
            with torch.inference_mode():
                call = lambda: af.axial_pass(x, pw, strict=True, **kw)
                ref = af.reference.reference_pass(x.float(), *(None if t is None else t.float() for t in pw), **kw)
                err = ((call().float() - ref).norm() / ref.norm()).item()
                if not math.isfinite(err) or err > 5e-2:
                    log(f"  {name}/{axis}/{fname}: output differs from the fp32 reference (rel err {err:.3g}); not timed")
                    continue
                gr, gout = _graph(call)
                us = _time_batches(lambda: (gr.replay(), gout)[1])
                g_err = ((gout.float() - ref).norm() / ref.norm()).item()  # the replay's own output
                if not math.isfinite(g_err) or g_err > 5e-2:
                    log(f"  {name}/{axis}/{fname}: the graph replay's output differs (rel err {g_err:.3g})")
                    continue
            plain_us = us if fname == "plain" else plain_us
            rows.append({"shape": name, "axis": axis, "features": fname, "us": us, "rel_err": err,
                         "ratio": us / plain_us if plain_us else float("nan")})
            log(f"  {name}/{axis}/{fname}: {us:.1f} µs ({rows[-1]['ratio']:.3f}x plain)")
            del gr, gout
        torch.cuda.empty_cache()
    return rows


def print_feature_table(rows, out=sys.stdout) -> None:
    names = list(FEATURE_SETS)
    print(f"{'shape':<10}{'pass':<6}" + "".join(f"{n:>16}" for n in names), file=out)
    for shape in dict.fromkeys(r["shape"] for r in rows):
        for axis in ("row", "col"):
            got = {r["features"]: r for r in rows if r["shape"] == shape and r["axis"] == axis}
            if not got:
                continue
            cells = "".join(f"{got[n]['us']:>8.1f} {got[n]['ratio']:>5.2f}x" if n in got else f"{'-':>16}" for n in names)
            print(f"{shape:<10}{axis:<6}{cells}", file=out)
    print("(µs per pass, CUDA-graph replay, median; x = time / the plain pass)", file=out)


def bar_chart(rows, peers, path) -> None:
    """Each row's peers as bars (log scale), into path (PNG; needs matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no chart (pip install axial-fused[bench])")
        return
    fig, ax = plt.subplots(figsize=(12, 5))
    wbar = 0.8 / len(peers)
    for i, p in enumerate(peers):
        ax.bar([j + i * wbar for j in range(len(rows))], [r["us"].get(p, 0) for r in rows], wbar, label=p)
    ax.set_xticks([j + 0.4 for j in range(len(rows))], [r["shape"] for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel("µs per forward")
    ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")


def protein_suite(ap, args, shapes, peers) -> int:
    """--suite protein: bench_protein's blocks (default: all), its peers, table + JSON (+ chart)."""
    from . import bench_protein as bp
    if args.shapes == ",".join(SUITE):
        shapes = list(bp.BLOCKS)
    if args.peers == ",".join(PEERS):
        peers = list(bp.PEERS)
    for s in shapes:
        if s not in bp.BLOCKS:
            ap.error(f"unknown protein block {s!r}; choose from {', '.join(bp.BLOCKS)}")
    for p in peers:
        if p not in bp.PEERS:
            ap.error(f"unknown protein peer {p!r}; choose from {', '.join(bp.PEERS)}")
    rows = []
    for s in shapes:
        try:
            rows.append(bp.bench_block(s, peers))
        except (ImportError, RuntimeError) as e:  # e.g. esm_col without fair-esm
            print(f"  {s}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        print(progress_line(rows[-1]), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "protein": rows}, f,
                          indent=1)
        torch.cuda.empty_cache()
    print_protein_table(rows, peers)
    if args.png:
        bar_chart(rows, peers, args.png)
    return 0


def print_protein_table(rows, peers, out=sys.stdout) -> None:
    print(f"{'block':<14}" + "".join(f"{p:>13}" for p in peers) + f"{'best peer':>12}{'x fused_graph':>15}", file=out)
    for r in rows:
        line = f"{r['shape']:<14}" + "".join(f"{r['us'][p]:>13.1f}" if p in r["us"] else f"{'-':>13}" for p in peers)
        line += f"{r.get('best_peer', '-'):>12}{r.get('speedup_fused_graph', float('nan')):>14.2f}x"
        print(line, file=out)
    print("(µs per call, median, bf16; 'x' = best peer time / ours)", file=out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m axial_fused.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SUITE), help=f"comma list of {', '.join(SUITE)}")
    ap.add_argument("--dtype", default=None, choices=list(DTYPES), help="override every shape's dtype")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma list of {', '.join(PEERS)}")
    ap.add_argument("--json", default="bench.json", help="write results here ('' to skip)")
    ap.add_argument("--png", default="", help="write a bar chart here (needs matplotlib)")
    ap.add_argument("--path", default="auto", choices=list(PATHS),
                    help="force the kernel path of ours (default: the automatic choice; fused_sm90: the Hopper "
                         "head-looped kernel, 16-bit, head_dim 32, even heads, dim <= 256, lengths <= 128 only)")
    ap.add_argument("--suite", default="axial", choices=["axial", "protein"],
                    help="axial: the shapes above (default); protein: the protein models' blocks against eager, "
                         "torch.compile and cuEquivariance (axial_fused.bench_protein)")
    ap.add_argument("--features", action="store_true",
                    help="instead of the peers: the cost of each optional feature (mask, bias, gate, q/k/v bias, "
                         "update only) per pass of each shape (default shape: msa)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("axial_fused.bench: no CUDA GPU here; nothing to measure.")
        return 0
    import axial_fused as af
    if af._ext.C is None:
        print(f"axial_fused.bench: the CUDA extension is not available: {af._ext.error}")
        return 1
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    if args.suite == "protein":
        return protein_suite(ap, args, shapes, peers)
    for s in shapes:
        if s not in SUITE:
            ap.error(f"unknown shape {s!r}; choose from {', '.join(SUITE)}")
    for p in peers:
        if p not in PEERS:
            ap.error(f"unknown peer {p!r}; choose from {', '.join(PEERS)}")
    af._ext.C.set_path_override(af._ext.PATHS[args.path])
    if args.features:
        if args.shapes == ",".join(SUITE):
            shapes = ["msa"]
        rows = []
        for s in shapes:
            B, H, W, D, heads, dt = SUITE[s]
            rows += feature_costs(s, B, H, W, D, heads, args.dtype or dt)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "features": rows},
                              f, indent=1)
        print_feature_table(rows)
        return 0
    ceil = measure_ceilings()
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}: copy {ceil['bandwidth_Bps'] / 1e12:.2f} TB/s, "
          f"bf16 matmul {ceil['bf16_flops'] / 1e12:.0f} TFLOP/s")
    rows = []
    for s in shapes:
        B, H, W, D, heads, dt = SUITE[s]
        try:
            rows.append(bench_shape(s, B, H, W, D, heads, args.dtype or dt, peers, ceil))
        except RuntimeError as e:  # e.g. a forced path that cannot run this shape
            print(f"  {s}: {str(e).splitlines()[0][:200]}")
        else:
            # Each shape's line as soon as it is measured, and the JSON rewritten: a run cut short
            # (a time limit) keeps what it measured.
            print(progress_line(rows[-1]), flush=True)
            if args.json:
                write_json(args.json, ceil, rows)
        torch.cuda.empty_cache()
    print_table(rows, peers)
    if args.png:
        bar_chart(rows, peers, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
