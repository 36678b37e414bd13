"""Where the CPU time of one eager call goes (GPU machine): the Python checks, the dispatcher call into
the op, and the whole `axial_attention` call, timed on the host over many calls.

    python3 scripts/dev/call_overhead.py [--after-compile | --protein]

A 1x1x1 grid keeps the GPU side (two launches, a few µs) below the host time, so the wall time per
call is the host's; the seed shape shows what the benchmark's `fused` peer sees.
"""
from __future__ import annotations

import sys
import time

import torch

import devkit
from devkit import af
from axial_fused import _checks as C
from axial_fused import functional as F


def per_call_us(fn, n: int = 3000) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    return best


def after_compile(dim: int = 64, heads: int = 4) -> None:
    """The whole call at the seed shape in a fresh process, then after a torch.compile of another
    model in the same process (the benchmark's situation: its compile peers run before ours), then
    with that heap frozen (gc.freeze): whether the cost that a compile leaves behind is the cyclic
    collector's."""
    import gc
    m = af.AxialAttention(dim, heads).cuda().bfloat16()
    w = af.AxialWeights.from_module(m)
    x = torch.randn(4, 32, 32, dim, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        call = lambda: af.axial_attention(x, w)
        print(f"  {per_call_us(call):8.1f}  axial_attention, seed shape, fresh process")
        ref = af.reference.AxialAttentionReference(dim, heads).cuda().bfloat16()
        cm = torch.compile(ref, mode="reduce-overhead")
        for _ in range(3):
            cm(x)
        print(f"  {per_call_us(call):8.1f}  the same after torch.compile(reference, mode='reduce-overhead') ran "
              f"({len(gc.get_objects())} objects tracked by gc)")
        gc.collect()
        gc.freeze()
        print(f"  {per_call_us(call):8.1f}  the same after gc.collect(); gc.freeze()")


def protein_modules() -> None:
    """The protein modules' eager calls at a small protein (N_res 64, N_seq 32, bfloat16): their
    kernels take a few µs, so each call's wall time is its host time; the call's Python side alone
    (the op and the pair-bias kernel left out: axial_fused.protein with both stubbed) beside it."""
    from axial_fused import functional, protein
    torch.manual_seed(0)
    dt, n_res, n_seq = torch.bfloat16, 64, 32
    m = torch.randn(1, n_seq, n_res, 256, device="cuda", dtype=dt)
    z = torch.randn(1, n_res, n_res, 128, device="cuda", dtype=dt)
    mask = torch.ones(1, n_seq, n_res, device="cuda", dtype=dt)
    tmask = torch.ones(1, n_res, n_res, device="cuda", dtype=dt)
    row = protein.MSARowAttentionWithPairBias(256, 128, 32, 8).to("cuda", dt).eval()
    col = protein.MSAColumnAttention(256, 32, 8).to("cuda", dt).eval()
    start = protein.TriangleAttentionStartingNode(128, 32, 4).to("cuda", dt).eval()
    end = protein.TriangleAttentionEndingNode(128, 32, 4).to("cuda", dt).eval()
    calls = {"MSARowAttentionWithPairBias": lambda: row(m, z, mask), "MSAColumnAttention": lambda: col(m, mask),
             "TriangleAttentionStartingNode": lambda: start(z, tmask), "TriangleAttentionEndingNode": lambda: end(z, tmask)}
    print(f"protein modules, N_seq {n_seq}, N_res {n_res}, bfloat16, inference_mode: µs per call")
    with torch.inference_mode():
        whole = {name: per_call_us(fn) for name, fn in calls.items()}
        saved = functional.call_checked, protein.call_checked
        biases = {}  # the pair-bias op's output per input, computed once

        def stub(op, *args):
            if op is torch.ops.axial_fused.pair_bias.default:
                if args[0].data_ptr() not in biases:
                    biases[args[0].data_ptr()] = saved[1](op, *args)
                return biases[args[0].data_ptr()]
            return args[0]

        functional.call_checked = protein.call_checked = stub
        try:
            python = {name: per_call_us(fn) for name, fn in calls.items()}
        finally:
            functional.call_checked, protein.call_checked = saved
    for name in calls:
        print(f"  {whole[name]:8.1f}  {name} ({python[name]:.1f} of it Python, the kernels' calls stubbed)")


def main() -> None:
    devkit.need_gpu("call_overhead")
    if "--after-compile" in sys.argv:
        after_compile()
        return
    if "--protein" in sys.argv:
        protein_modules()
        return
    torch.manual_seed(0)
    dim, heads = 64, 4
    m = af.AxialAttention(dim, heads).cuda().bfloat16()
    w = af.AxialWeights.from_module(m)
    op = torch.ops.axial_fused.axial_attention
    for shape in ((1, 1, 1, dim), (4, 32, 32, dim)):
        x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
        with torch.inference_mode():
            rows = {
                "python checks (check_pass x2, heads, eps, x)": lambda: (
                    C.check_pass(w.row, "row"), C.check_pass(w.col, "col", dim), C.check_heads(heads, dim),
                    C.check_eps(w.eps), C.check_x(x, dim, w.row.norm_weight)),
                "python decision (_reason)": lambda: F._reason(x, (w.row, w.col), dim, heads),
                "torch.ops call (dispatcher + C++ checks + 2 launches)": lambda: op(x, *w.row[:5], *w.col[:5], heads,
                                                                                     w.eps),
                "axial_attention (what a user calls)": lambda: af.axial_attention(x, w),
                "axial_attention(strict=True)": lambda: af.axial_attention(x, w, strict=True),
                "nn.Module forward": lambda: m(x),
            }
            print(f"x {tuple(shape)} bfloat16, inference_mode: µs per call (best of 5 x 3000)")
            for name, fn in rows.items():
                print(f"  {per_call_us(fn):8.1f}  {name}")
        with torch.no_grad():  # the Autograd key is live: a direct op call goes through its Python kernel
            print(f"  {per_call_us(lambda: op(x, *w.row[:5], *w.col[:5], heads, w.eps)):8.1f}  "
                  f"torch.ops call under no_grad (the Python Autograd kernel first)")
            print(f"  {per_call_us(lambda: af.axial_attention(x, w)):8.1f}  axial_attention under no_grad")
    # float32: the binary asks Python for torch.backends.cuda.matmul.allow_tf32 through the
    # dispatcher (axial_fused::_allow_tf32) once a pass; against bf16's op call above, its cost.
    w32 = af.AxialWeights.from_module(af.AxialAttention(dim, heads).cuda())
    x = torch.randn(4, 32, 32, dim, device="cuda")
    with torch.inference_mode():
        print(f"x {tuple(x.shape)} float32, inference_mode: µs per call")
        print(f"  {per_call_us(lambda: op(x, *w32.row[:5], *w32.col[:5], heads, w32.eps)):8.1f}  torch.ops call")
        print(f"  {per_call_us(lambda: af.axial_attention(x, w32)):8.1f}  axial_attention")


if __name__ == "__main__":
    main()
