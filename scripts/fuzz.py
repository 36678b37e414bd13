"""Randomized differential testing: random valid configurations, fused path against a float64 reference.

Each configuration is drawn from its own generator seeded by (--seed, index), so any one can be rerun
alone (the reproducer printed for a failure does exactly that). A configuration is a dtype and a
compiled (dim, heads), B, H, W, eps, the call (both passes, or one pass along either axis), the layout
of x (contiguous, a slice of a larger tensor, H and W transposed, an expanded batch, a channel slice,
a pointer offset by 2 elements; a pointer offset by 1 element or an odd token stride, which the op
copies once), the scale and shift of x, the scales of the weights, the kernel path
(automatic, forced fused, forced two-kernel) and, for float32, TF32 on or off. About one in ten draws
is unsupported on purpose (an uncompiled (dim, heads), or float64): then
``fallback_reason`` must say why, ``strict=True`` must raise and the fallback must be correct.

GPU (default when CUDA is present): strict fused calls checked by tests/test_kernels.py's ``check`` (NaN-
poisoned allocator, error vs float64 <= 2 x PyTorch's own error at that dtype + floor; float32 without
TF32 within 1e-5).  ``--device cpu``: a self-test of the generator and of the fallback (reference) path
on every layout, against the float64 implementation with fixed per-dtype bounds (CI runs it).

    python scripts/fuzz.py --n 500                 # the full run on the GPU
    python scripts/fuzz.py --seed 0 --only 17 -v   # rerun one configuration
"""
from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
import traceback
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import axial_fused as af  # noqa: E402
from axial_fused import _ext, _specs  # noqa: E402
from helpers import attention64, make_weights, pass64, rand_x, rel_err, to64  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SPECIAL_LENGTHS = [1, 2, 7, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 257, 511, 512, 1000, 1024]
# "misaligned" and "odd_stride" are layouts the kernels cannot read in place: the op copies them once
# and still runs fused (docs/errors.md rows 19-20).
LAYOUTS = ["contiguous", "contiguous", "slice", "transpose", "expand", "channel_slice", "offset2", "misaligned",
           "odd_stride"]
UNSUPPORTED = ["uncompiled", "float64"]
CPU_TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2, torch.float64: 1e-10}


def compiled_pairs() -> list[tuple[str, int, int]]:
    if _ext.C is not None and torch.cuda.is_available():
        return sorted(_ext.specs(), key=lambda s: (s[1], s[2], s[0]))
    return [(dt, d, h) for d, h in _specs.DEFAULT_PAIRS for dt in DTYPES]


def draw(seed: int, index: int, max_elems: int, specs: list[tuple[str, int, int]]) -> dict:
    """Configuration `index` of run `seed` (independent of the others)."""
    rng = random.Random(f"axial-fuzz:{seed}:{index}")
    dt, dim, heads = rng.choice(specs)
    cfg = dict(seed=seed, index=index, dtype=dt, dim=dim, heads=heads, unsupported=None,
               B=rng.choice([0, 1, 1, 2, 2, 3, 4]), eps=10 ** rng.uniform(-6, -2),
               fn=rng.choice(["attention", "attention", "row", "col"]), layout=rng.choice(LAYOUTS),
               x_scale=10 ** rng.uniform(-2, 2 if dt == "float16" else 3), x_shift=rng.gauss(0, 1),
               qkv_scale=10 ** rng.uniform(-0.5, 0.5), out_scale=10 ** rng.uniform(-0.5, 0.5),
               path=rng.choice(["auto", "auto", "fused", "two_kernel"]), tf32=rng.random() < 0.5)
    length = lambda: rng.choice(SPECIAL_LENGTHS) if rng.random() < 0.5 else int(10 ** rng.uniform(0, 3.05))
    H, W = length(), length()
    while max(cfg["B"], 1) * H * W * dim > max_elems:  # shrink the longer axis until the case is cheap
        H, W = (max(1, H // 2), W) if H >= W else (H, max(1, W // 2))
    cfg.update(H=H, W=W)
    if rng.random() < 0.1:
        kind = rng.choice(UNSUPPORTED)
        cfg["unsupported"] = kind
        if kind == "uncompiled":  # a (dim, heads) the reference serves but no kernel was built for
            cfg["dim"], cfg["heads"] = rng.choice([(d, h) for d, h in [(64, 2), (96, 3), (128, 2), (192, 3), (320, 5)]
                                                   if (cfg["dtype"], d, h) not in set(specs)])
        else:
            cfg["dtype"] = "float64"
    esz = 8 if cfg["dtype"] == "float64" else DTYPES[cfg["dtype"]].itemsize
    if cfg["path"] == "fused" and (cfg["dim"] * esz > 512 or max(H, W) > 64):
        cfg["path"] = "auto"  # a forced fused block must fit in shared memory
    return cfg


def make_x(cfg: dict, device) -> torch.Tensor:
    """x of shape [B, H, W, D] in the configuration's layout (fresh random values, never zeros). The
    values are made in the final dtype first and the view taken last, so the layout survives."""
    B, H, W, D = cfg["B"], cfg["H"], cfg["W"], cfg["dim"]
    dtype = torch.float64 if cfg["dtype"] == "float64" else DTYPES[cfg["dtype"]]

    def r(*shape):
        t = rand_x(shape, torch.float64, device, cfg["index"] + 7919 * cfg["seed"], cfg["x_scale"])
        return (t + cfg["x_shift"] * cfg["x_scale"]).to(dtype)

    lay = cfg["layout"]
    if lay == "slice":
        return r(B + 1, H + 2, W + 3, D)[1:, 1:H + 1, 2:W + 2]
    if lay == "transpose":
        return r(B, W, H, D).transpose(1, 2)
    if lay == "expand":  # stride 0 along B
        return r(1, H, W, D).expand(B, H, W, D)
    if lay == "channel_slice":
        return r(B, H, W, 2 * D)[..., D:]
    if lay == "odd_stride":
        return r(B, H, W, D + 1)[..., :D]
    if lay in ("offset2", "misaligned"):  # pointer 2 elements (aligned enough) or 1 element past a block
        skip = 2 if lay == "offset2" else 1
        return r(B * H * W * D + skip)[skip:].view(B, H, W, D)
    return r(B, H, W, D)


def make_w(cfg: dict, device) -> af.AxialWeights:
    dtype = torch.float64 if cfg["dtype"] == "float64" else DTYPES[cfg["dtype"]]
    w = make_weights(cfg["dim"], cfg["heads"], torch.float64, "cpu", seed=cfg["index"] + 104729 * cfg["seed"],
                     eps=cfg["eps"])
    scale = lambda pw: af.PassWeights(pw.norm_weight, pw.norm_bias, pw.qkv_weight * cfg["qkv_scale"],
                                      pw.out_weight * cfg["out_scale"], pw.out_bias)
    cv = lambda pw: af.PassWeights(*(t.to(device=device, dtype=dtype) for t in scale(pw)[:5]))
    return af.AxialWeights.create(cv(w.row), cv(w.col), cfg["heads"], cfg["eps"])


def call(x, w, cfg, strict: bool):
    with torch.inference_mode():
        if cfg["fn"] == "attention":
            return af.axial_attention(x, w, strict=strict)
        return af.axial_pass(x, w.row, num_heads=w.num_heads, axis=cfg["fn"], eps=w.eps, strict=strict)


def reference64(x, w, cfg):
    w64 = to64(w)
    if cfg["fn"] == "attention":
        return attention64(x, w64)
    return pass64(x, w64.row, w.num_heads, cfg["fn"], w.eps)


def run_gpu(cfg: dict) -> str:
    """One configuration on the GPU; returns 'fused' or 'fallback', raises AssertionError on a failure."""
    import test_kernels  # the GPU tests' tolerance rule, NaN poisoning and path / TF32 switches

    x, w = make_x(cfg, "cuda"), make_w(cfg, "cuda")
    if cfg["unsupported"]:
        reason = (af.fallback_reason(x, w) if cfg["fn"] == "attention" else
                  af.fallback_reason(x, w.row, num_heads=w.num_heads, axis=cfg["fn"]))
        assert reason is not None, f"{cfg['unsupported']}: expected a fallback reason"
        try:
            call(x, w, cfg, strict=True)
            raise AssertionError(f"{cfg['unsupported']}: strict=True did not raise")
        except af.FusedUnavailableError:
            pass
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", af.FusedFallbackWarning)
            out = call(x, w, cfg, strict=False)
        ref = reference64(x, w, cfg)
        err = rel_err(out, ref)
        if out.dtype == torch.float64:
            tol = CPU_TOL[out.dtype]
        else:  # the fallback is PyTorch at x.dtype: the same rule as the fused path, against the reference model
            torch_out = (af.reference.reference_axial_attention(x, w) if cfg["fn"] == "attention" else
                         af.reference.reference_pass(x, *w.row, num_heads=w.num_heads, axis=cfg["fn"], eps=w.eps))
            tol = 2 * rel_err(torch_out, ref) + test_kernels.FLOOR[out.dtype]
        assert out.shape == x.shape and err <= tol, f"fallback error {err:.3g} > {tol:.3g}"
        return "fallback"
    path = _ext.PATHS[cfg["path"]]
    fn, axis = ("attention", "row") if cfg["fn"] == "attention" else ("pass", cfg["fn"])
    with test_kernels.force_path(path), test_kernels.tf32(cfg["tf32"]):
        test_kernels.check(x, w, fn=fn, axis=axis)
    return "fused"


def run_cpu(cfg: dict) -> str:
    """Self-test on the CPU: the generator, every layout, and the fallback path against float64."""
    x, w = make_x(cfg, "cpu"), make_w(cfg, "cpu")
    assert af.fallback_reason(x, w) is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        out = call(x, w, cfg, strict=False)
    err = rel_err(out, reference64(x, w, cfg))
    assert out.shape == x.shape and out.dtype == x.dtype and err <= CPU_TOL[x.dtype], \
        f"fallback error {err:.3g} > {CPU_TOL[x.dtype]:.3g}"
    return "fallback"


def fuzz(n: int, seed: int, device: str, max_elems: int, only: int | None = None, verbose: bool = False,
         out=print) -> list[dict]:
    """Run configurations [0, n) (or just `only`) of run `seed`; returns the failing configurations."""
    specs = compiled_pairs()
    indices = [only] if only is not None else range(n)
    failures, kinds, t0 = [], {"fused": 0, "fallback": 0}, time.time()
    for i in indices:
        cfg = draw(seed, i, max_elems, specs)
        try:
            kinds[(run_gpu if device == "cuda" else run_cpu)(cfg)] += 1
            if verbose:
                out(f"ok   {cfg}")
        except Exception as e:  # noqa: BLE001 - every failure is reported with its reproducer
            failures.append(cfg)
            out(f"FAIL {cfg}\n     {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            if verbose:
                out(traceback.format_exc())
            out(f"     reproduce: python scripts/fuzz.py --device {device} --seed {seed} --only {i} "
                f"--max-elems {max_elems} -v")
    out(f"fuzz: {len(indices)} configurations (seed {seed}, {device}): {kinds['fused']} fused, "
        f"{kinds['fallback']} fallback, {len(failures)} failed, {time.time() - t0:.1f} s")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="number of configurations")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", type=int, default=None, help="run only configuration INDEX of this seed")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--max-elems", type=int, default=None, help="cap on B*H*W*D (default 2M on the GPU, 100k on CPU)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    if a.device == "cuda" and (_ext.C is None or not torch.cuda.is_available()):
        print(f"fuzz: no CUDA device or extension ({_ext.error}); use --device cpu")
        return 1
    max_elems = a.max_elems or (2_000_000 if a.device == "cuda" else 100_000)
    return 1 if fuzz(a.n, a.seed, a.device, max_elems, a.only, a.verbose) else 0


if __name__ == "__main__":
    sys.exit(main())
