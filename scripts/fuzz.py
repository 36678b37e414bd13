"""Randomized differential testing: random valid configurations, fused path against a float64 reference.

The configurations are axial_fused.cases.draw's: each from its own generator seeded by (--seed, index),
so any one can be rerun alone (the reproducer printed for a failure does exactly that). A configuration
is a dtype and a compiled (dim, heads), B, H, W, eps, the call (both passes, or one pass along either
axis), the layout of x (contiguous, a slice of a larger tensor, H and W transposed, an expanded batch, a
channel slice, a pointer offset by 2 elements; a pointer offset by 1 element or an odd token stride,
which the op copies once), the scale and shift of x, the scales of the weights, the kernel path
(automatic, forced fused, forced two-kernel), for float32 TF32 on or off, and with --features (drawn
last, so that a seed's other fields stay as they are without it) the optional features: a key mask
(random holes and a padded tail), a logit bias (batch 1 or B, float32 or x's dtype, possibly
transposed), the sigmoid gate, the q/k/v bias, the update alone, the bias computed from LN(x)
(bias_weight, the grid made square). About one in ten draws is unsupported on purpose (an uncompiled
(dim, heads), or float64): then ``fallback_reason`` must say why, ``strict=True`` must raise and the
fallback must be correct.

GPU (default when CUDA is present): strict fused calls checked as the kernel tests check them
(tests/helpers.py's ``check``: NaN-poisoned allocator, error vs float64 <= 2 x PyTorch's own error at
that dtype + floor; float32 without TF32 within 1e-5). ``--device cpu``: a self-test of the generator
and of the fallback (reference) path on every layout, against the float64 implementation with fixed
per-dtype bounds (CI runs it).

    python scripts/fuzz.py --n 500                 # the full run on the GPU
    python scripts/fuzz.py --n 500 --features      # ... with the optional features
    python scripts/fuzz.py --seed 0 --only 17 -v   # rerun one configuration
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import axial_fused as af  # noqa: E402
from axial_fused import _ext, cases  # noqa: E402
from helpers import (DTYPES, FLOOR, check, force_path, make_weights, rand_x, ref64, rel_err, run, tf32,  # noqa: E402
                     torch_at_dtype)

CPU_TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2, torch.float64: 1e-10}


def compiled_pairs() -> list[tuple[str, int, int]]:
    """The specializations draws take: the compiled ones on a GPU, else the default build's."""
    if _ext.C is not None and torch.cuda.is_available():
        return cases.specs()
    return cases.default_specs()


def make_terms(cfg: cases.Draw, x: torch.Tensor) -> dict:
    """The call's mask, biases and residual (helpers.run's terms) for the configuration's features."""
    B, H, W, heads, f = cfg.B, cfg.H, cfg.W, cfg.heads, cfg.features
    g = torch.Generator().manual_seed(cfg.index + 31337 * cfg.seed)
    terms = {"residual": f.residual}
    if f.mask:
        m = torch.rand(B, H, W, generator=g) > 0.3
        if W >= 4:  # a padded tail: the last eighth of every row absent
            m[:, :, W - max(1, W // 8):] = False
        terms["mask"] = m.to(x.device)
    if f.bias:
        dtype = torch.float32 if cfg.bias_f32 and x.dtype != torch.float64 else x.dtype

        def bias(L):
            b = torch.randn(1 if cfg.bias_batch1 else B, heads, L, L, generator=g, dtype=torch.float64) * 3
            if cfg.bias_transposed:
                b = b.transpose(2, 3).contiguous().transpose(2, 3)
            return b.to(x.device, dtype)
        if cfg.fn == "attention":
            terms.update(bias=bias(W), col_bias=bias(H))
        else:
            terms["bias"] = bias(W if cfg.fn == "row" else H)
    return terms


def make_x(cfg: cases.Draw, device) -> torch.Tensor:
    """x of shape [B, H, W, D] in the configuration's layout (fresh random values, never zeros). The
    values are made in the final dtype first and the view taken last, so the layout survives."""
    B, H, W, D = cfg.shape
    dtype = torch.float64 if cfg.dtype == "float64" else DTYPES[cfg.dtype]

    def r(*shape):
        t = rand_x(shape, torch.float64, device, cfg.index + 7919 * cfg.seed, cfg.x_scale)
        return (t + cfg.x_shift * cfg.x_scale).to(dtype)

    lay = cfg.layout
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


def make_w(cfg: cases.Draw, device) -> af.AxialWeights:
    dtype = torch.float64 if cfg.dtype == "float64" else DTYPES[cfg.dtype]
    f = cfg.features
    w = make_weights(cfg.dim, cfg.heads, torch.float64, "cpu", seed=cfg.index + 104729 * cfg.seed, eps=cfg.eps,
                     qkv_bias=f.qkv_bias, gate=f.gate, bias_weight=f.bias_weight)
    scale = lambda pw: pw._replace(qkv_weight=pw.qkv_weight * cfg.qkv_scale, out_weight=pw.out_weight * cfg.out_scale)
    cv = lambda pw: af.PassWeights(*(None if t is None else t.to(device=device, dtype=dtype) for t in scale(pw)))
    return af.AxialWeights.create(cv(w.row), cv(w.col), cfg.heads, cfg.eps)


def fn_axis(cfg: cases.Draw) -> tuple[str, str]:
    """helpers.run's (fn, axis) of the configuration's call."""
    return ("attention", "row") if cfg.fn == "attention" else ("pass", cfg.fn)


def check_fallback(x, w, cfg: cases.Draw) -> None:
    """The reference path (strict=False) against float64: for float64 within CPU_TOL, else by PyTorch's
    own error at x's dtype (the fallback computes exactly that: 2 x it + floor)."""
    fn, axis = fn_axis(cfg)
    terms = make_terms(cfg, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        out = run(x, w, fn, axis, strict=False, **terms)
    ref = ref64(x, w, fn, axis, **terms)
    err = rel_err(out, ref)
    if out.dtype == torch.float64 or x.device.type == "cpu":
        tol = CPU_TOL[out.dtype]
    else:
        tol = 2 * rel_err(torch_at_dtype(x, w, fn, axis, **terms), ref) + FLOOR[out.dtype]
    assert out.shape == x.shape and out.dtype == x.dtype and err <= tol, f"fallback error {err:.3g} > {tol:.3g}"


def run_gpu(cfg: cases.Draw) -> str:
    """One configuration on the GPU; returns 'fused' or 'fallback', raises AssertionError on a failure."""
    x, w = make_x(cfg, "cuda"), make_w(cfg, "cuda")
    fn, axis = fn_axis(cfg)
    if cfg.unsupported:
        reason = (af.fallback_reason(x, w) if fn == "attention" else
                  af.fallback_reason(x, w.row, num_heads=w.num_heads, axis=axis))
        assert reason is not None, f"{cfg.unsupported}: expected a fallback reason"
        try:
            run(x, w, fn, axis)
            raise AssertionError(f"{cfg.unsupported}: strict=True did not raise")
        except af.FusedUnavailableError:
            pass
        check_fallback(x, w, cfg)
        return "fallback"
    terms = make_terms(cfg, x)
    with force_path(cfg.path), tf32(cfg.tf32):
        # (with features, a forced fused path whose block cannot hold the gate's block as well: the planner's)
        if check(x, w, fn, axis, unserved_ok=cfg.features != cases.PLAIN, **terms) is None:
            with force_path("auto"):
                check(x, w, fn, axis, **terms)
    return "fused"


def run_cpu(cfg: cases.Draw) -> str:
    """Self-test on the CPU: the generator, every layout, and the fallback path against float64."""
    x, w = make_x(cfg, "cpu"), make_w(cfg, "cpu")
    assert af.fallback_reason(x, w) is not None
    check_fallback(x, w, cfg)
    return "fallback"


def fuzz(n: int, seed: int, device: str, max_elems: int, only: int | None = None, verbose: bool = False,
         out=print, features: bool = False) -> list[cases.Draw]:
    """Run configurations [0, n) (or just `only`) of run `seed`; returns the failing configurations."""
    specs = compiled_pairs()
    indices = [only] if only is not None else range(n)
    failures, kinds, t0 = [], {"fused": 0, "fallback": 0}, time.time()
    for i in indices:
        cfg = cases.draw(seed, i, max_elems, specs, features)
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
