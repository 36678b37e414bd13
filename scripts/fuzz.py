"""Randomized differential testing: random valid configurations, fused path against a float64 reference.

Each configuration is drawn from its own generator seeded by (--seed, index), so any one can be rerun
alone (the reproducer printed for a failure does exactly that). A configuration is a dtype and a
compiled (dim, heads), B, H, W, eps, the call (both passes, or one pass along either axis), the layout
of x (contiguous, a slice of a larger tensor, H and W transposed, an expanded batch, a channel slice,
a pointer offset by 2 elements; a pointer offset by 1 element or an odd token stride, which the op
copies once), the scale and shift of x, the scales of the weights, the kernel path
(automatic, forced fused, forced two-kernel), for float32 TF32 on or off, and with --features (drawn
last, so that a seed's other fields stay as they are without it) the optional features: a key mask (random holes and a padded
tail), a logit bias (batch 1 or B, float32 or x's dtype, possibly transposed), the sigmoid gate, the
q/k/v bias, the update alone, the bias computed from LN(x) (bias_weight, the grid made square).
About one in ten draws
is unsupported on purpose (an uncompiled (dim, heads), or float64): then
``fallback_reason`` must say why, ``strict=True`` must raise and the fallback must be correct.

GPU (default when CUDA is present): strict fused calls checked by tests/test_kernels.py's ``check`` (NaN-
poisoned allocator, error vs float64 <= 2 x PyTorch's own error at that dtype + floor; float32 without
TF32 within 1e-5).  ``--device cpu``: a self-test of the generator and of the fallback (reference) path
on every layout, against the float64 implementation with fixed per-dtype bounds (CI runs it).

    python scripts/fuzz.py --n 500                 # the full run on the GPU
    python scripts/fuzz.py --n 500 --features      # ... with the optional features
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


def draw(seed: int, index: int, max_elems: int, specs: list[tuple[str, int, int]], features: bool = False) -> dict:
    """Configuration `index` of run `seed` (independent of the others); features=False: without the
    optional features (the same draws, their switches off)."""
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
    on = rng.random() < 0.5 and features  # half the draws have features, each of those a random subset
    cfg.update(mask=on and rng.random() < 0.6, bias=on and rng.random() < 0.6, gate=on and rng.random() < 0.5,
               qkv_bias=on and rng.random() < 0.5, residual=not (on and rng.random() < 0.3),
               bias_batch1=rng.random() < 0.5, bias_f32=rng.random() < 0.5, bias_transposed=rng.random() < 0.3)
    if on and rng.random() < 0.3:  # the bias from LN(x) itself (bias_weight): a square grid, no given bias
        n = min(cfg["H"], cfg["W"])
        cfg.update(bias_weight=True, bias=False, H=n, W=n)
    return cfg


def has_features(cfg: dict) -> bool:
    return any(cfg.get(k) for k in ("mask", "bias", "gate", "qkv_bias", "bias_weight")) or not cfg.get("residual", True)


def make_extras(cfg: dict, x: torch.Tensor) -> dict:
    """The call's mask and biases (as keyword arguments of the call) for the configuration's features."""
    B, H, W, heads = cfg["B"], cfg["H"], cfg["W"], cfg["heads"]
    g = torch.Generator().manual_seed(cfg["index"] + 31337 * cfg["seed"])
    kw = {"residual": cfg.get("residual", True)}
    if cfg.get("mask"):
        m = torch.rand(B, H, W, generator=g) > 0.3
        if W >= 4:  # a padded tail: the last eighth of every row absent
            m[:, :, W - max(1, W // 8):] = False
        kw["mask"] = m.to(x.device)
    if cfg.get("bias"):
        dtype = torch.float32 if cfg["bias_f32"] and x.dtype != torch.float64 else x.dtype

        def bias(L):
            b = torch.randn(1 if cfg["bias_batch1"] else B, heads, L, L, generator=g, dtype=torch.float64) * 3
            if cfg["bias_transposed"]:
                b = b.transpose(2, 3).contiguous().transpose(2, 3)
            return b.to(x.device, dtype)
        if cfg["fn"] == "attention":
            kw.update(row_bias=bias(W), col_bias=bias(H))
        else:
            kw["bias"] = bias(W if cfg["fn"] == "row" else H)
    return kw


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
                     eps=cfg["eps"], qkv_bias=cfg.get("qkv_bias", False), gate=cfg.get("gate", False),
                     bias_weight=cfg.get("bias_weight", False))
    scale = lambda pw: pw._replace(qkv_weight=pw.qkv_weight * cfg["qkv_scale"], out_weight=pw.out_weight * cfg["out_scale"])
    cv = lambda pw: af.PassWeights(*(None if t is None else t.to(device=device, dtype=dtype) for t in scale(pw)))
    return af.AxialWeights.create(cv(w.row), cv(w.col), cfg["heads"], cfg["eps"])


def call(x, w, cfg, strict: bool, kw=None):
    kw = kw or {}
    with torch.inference_mode():
        if cfg["fn"] == "attention":
            return af.axial_attention(x, w, strict=strict, **kw)
        return af.axial_pass(x, w.row, num_heads=w.num_heads, axis=cfg["fn"], eps=w.eps, strict=strict, **kw)


def reference64(x, w, cfg, kw=None):
    kw = kw or {}
    w64, res, mask = to64(w), kw.get("residual", True), kw.get("mask")
    if cfg["fn"] == "attention":
        return attention64(x, w64, mask, kw.get("row_bias"), kw.get("col_bias"), res)
    return pass64(x, w64.row, w.num_heads, cfg["fn"], w.eps, mask, kw.get("bias"), res)


def torch_at_dtype(x, w, cfg, kw):
    """The reference model at x's dtype (PyTorch's own error at that dtype is the tolerance's unit)."""
    res, mask = kw.get("residual", True), kw.get("mask")
    one = lambda y, pw, axis, b: af.reference.reference_pass(y, *pw, num_heads=w.num_heads, axis=axis, eps=w.eps,
                                                             mask=mask, bias=b, residual=res)
    if cfg["fn"] == "attention":
        return one(one(x, w.row, "row", kw.get("row_bias")), w.col, "col", kw.get("col_bias"))
    return one(x, w.row, cfg["fn"], kw.get("bias"))


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
        kw = make_extras(cfg, x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", af.FusedFallbackWarning)
            out = call(x, w, cfg, strict=False, kw=kw)
        ref = reference64(x, w, cfg, kw)
        err = rel_err(out, ref)
        if out.dtype == torch.float64:
            tol = CPU_TOL[out.dtype]
        else:  # the fallback is PyTorch at x.dtype: the same rule as the fused path, against the reference model
            tol = 2 * rel_err(torch_at_dtype(x, w, cfg, kw), ref) + test_kernels.FLOOR[out.dtype]
        assert out.shape == x.shape and err <= tol, f"fallback error {err:.3g} > {tol:.3g}"
        return "fallback"
    path = _ext.PATHS[cfg["path"]]
    fn, axis = ("attention", "row") if cfg["fn"] == "attention" else ("pass", cfg["fn"])
    if not has_features(cfg):
        with test_kernels.force_path(path), test_kernels.tf32(cfg["tf32"]):
            test_kernels.check(x, w, fn=fn, axis=axis)
        return "fused"
    # With features: the same rule as test_kernels.check (NaN-poisoned allocator, fused strict vs float64
    # within 2 x PyTorch's error at the dtype + floor; exact float32 within 1e-5).
    kw = make_extras(cfg, x)
    ref = reference64(x, w, cfg, kw)
    test_kernels.poison(x.numel() * x.element_size() * 8)
    with test_kernels.force_path(path), test_kernels.tf32(cfg["tf32"]):
        try:
            out = call(x, w, cfg, strict=True, kw=kw)
        except RuntimeError as e:  # a forced path whose blocks cannot hold the gate's block as well
            if "do not fit in one block's shared memory" not in str(e):
                raise
            _ext.C.set_path_override(-1)
            out = call(x, w, cfg, strict=True, kw=kw)
        torch.cuda.synchronize()
        err, torch_err = rel_err(out, ref), rel_err(torch_at_dtype(x, w, cfg, kw), ref)
        exact = x.dtype == torch.float32 and not cfg["tf32"]
    tol = 1e-5 if exact else 2 * torch_err + test_kernels.FLOOR[x.dtype]
    assert out.shape == x.shape and err <= tol, f"error {err:.3g} > tolerance {tol:.3g} (PyTorch: {torch_err:.3g})"
    return "fused"


def run_cpu(cfg: dict) -> str:
    """Self-test on the CPU: the generator, every layout, and the fallback path against float64."""
    x, w = make_x(cfg, "cpu"), make_w(cfg, "cpu")
    assert af.fallback_reason(x, w) is not None
    kw = make_extras(cfg, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        out = call(x, w, cfg, strict=False, kw=kw)
    err = rel_err(out, reference64(x, w, cfg, kw))
    assert out.shape == x.shape and out.dtype == x.dtype and err <= CPU_TOL[x.dtype], \
        f"fallback error {err:.3g} > {CPU_TOL[x.dtype]:.3g}"
    return "fallback"


def fuzz(n: int, seed: int, device: str, max_elems: int, only: int | None = None, verbose: bool = False,
         out=print, features: bool = False) -> list[dict]:
    """Run configurations [0, n) (or just `only`) of run `seed`; returns the failing configurations."""
    specs = compiled_pairs()
    indices = [only] if only is not None else range(n)
    failures, kinds, t0 = [], {"fused": 0, "fallback": 0}, time.time()
    for i in indices:
        cfg = draw(seed, i, max_elems, specs, features)
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
                f"--max-elems {max_elems}{' --features' if features else ''} -v")
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
    ap.add_argument("--features", action="store_true",
                    help="draw the optional features too (mask, bias, gate, q/k/v bias, update only)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    if a.device == "cuda" and (_ext.C is None or not torch.cuda.is_available()):
        print(f"fuzz: no CUDA device or extension ({_ext.error}); use --device cpu")
        return 1
    max_elems = a.max_elems or (2_000_000 if a.device == "cuda" else 100_000)
    return 1 if fuzz(a.n, a.seed, a.device, max_elems, a.only, a.verbose, features=a.features) else 0


if __name__ == "__main__":
    sys.exit(main())
