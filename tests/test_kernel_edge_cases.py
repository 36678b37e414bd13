"""Hardening on the GPU (skipped without CUDA / the extension): the GPU rows of docs/errors.md,
NaN/Inf isolation, numerical robustness, determinism across calls and streams, four concurrent
threads, more than 65,535 sequences, more than 2^31 elements, and a fixed-seed slice of the fuzzer
(scripts/fuzz.py). Fused calls are strict=True, so a silent fallback cannot pass."""
from __future__ import annotations

import os
import sys
import threading
import warnings

import pytest
import torch

import axial_fused as af
from axial_fused import _ext
from helpers import (DTYPES, FLOOR, assert_close, attention64, check, check_nonfinite_isolated, force_path,
                     make_weights, rand_x, ref64, rel_err, run, small_spec, tf32, to64)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import fuzz  # noqa: E402

pytestmark = pytest.mark.gpu

# Fuzzer configurations that once failed, as (seed, index) of scripts/fuzz.py: rerun forever.
# Seed 0 on the H200, one per cause:
#   1, 64, 84, 88: x 4 bytes past a 16-byte boundary ("offset2") on the Hopper two-kernel path, whose
#                  16-byte cp.async rounded the address down (wrong tokens; the op now copies such x);
#   20, 43: B = 0 in 16-bit on the reference path (torch's CUDA SDPA returned None);
#   9: fallback_reason for a PassWeights ignored num_heads (said "fused" for an uncompiled pair);
#   373: the fuzzer's fixed 1e-2 bound for a 16-bit fallback (now PyTorch's own error rule).
FUZZ_REGRESSIONS: list[tuple[int, int]] = [(0, 1), (0, 64), (0, 84), (0, 88), (0, 20), (0, 43), (0, 9), (0, 373)]


def spec_weights(dt="bfloat16", seed=0):
    _, dim, heads = small_spec(dt)
    return make_weights(dim, heads, DTYPES[dt], "cuda", seed=seed), dim


# ---- bad input on the GPU (docs/errors.md) ------------------------------------------------------

def test_float64_and_uncompiled_on_gpu():
    w, dim = spec_weights("float32")
    w64 = to64(w)
    x = rand_x((2, 5, 7, dim), torch.float64, "cuda", seed=1)
    assert "float64" in af.fallback_reason(x, w64)
    with pytest.raises(af.FusedUnavailableError, match="float64"):
        run(x, w64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        assert rel_err(run(x, w64, strict=False), attention64(x, w64)) < 1e-12
    with pytest.raises(TypeError, match="supported: float32, float16, bfloat16"):
        torch.ops.axial_fused.axial_attention(x, *w64.row[:5], *w64.col[:5], w.num_heads, w.eps)
    heads = next(h for h in (2, 1, 8, 16) if ("float32", dim, h) not in _ext.specs())
    wu = make_weights(dim, heads, torch.float32, "cuda", seed=2)
    x32 = x.float()
    with pytest.raises(af.FusedUnavailableError, match="no compiled specialization"):
        run(x32, wu)
    assert "no compiled specialization" in af.fallback_reason(x32, wu.row, num_heads=heads, axis="col")
    with pytest.raises(ValueError, match="no compiled specialization"):
        torch.ops.axial_fused.axial_pass(x32, *wu.row[:5], heads, 0, wu.eps)


def test_device_mix_on_gpu():
    w, dim = spec_weights()
    x = rand_x((1, 3, 4, dim), torch.bfloat16, "cuda", seed=3)
    wc = af.AxialWeights(af.PassWeights(*(t.cpu() for t in w.row[:5])), af.PassWeights(*(t.cpu() for t in w.col[:5])),
                         w.num_heads, w.eps)
    with pytest.raises(ValueError, match="x is on cuda:0 but the weights are on cpu"):
        run(x, wc)
    with pytest.raises(ValueError, match="row_norm_weight is on cpu but x is on cuda"):
        torch.ops.axial_fused.axial_attention(x, *wc.row[:5], *w.col[:5], w.num_heads, w.eps)
    with pytest.raises(ValueError, match="col_out_bias is on cpu but x is on cuda"):
        torch.ops.axial_fused.axial_attention(x, *w.row[:5], *w.col[:4], w.col.out_bias.cpu(), w.num_heads, w.eps)


@pytest.mark.parametrize("how", ["transposed", "offset"])
def test_strided_weights(how):
    """A non-contiguous or misaligned weight: the op copies it once and the fused path runs (strict
    passes), through the Python API and the op alike."""
    w, dim = spec_weights(seed=4)
    q = w.row.qkv_weight
    if how == "transposed":
        bad = q.t().contiguous().t()
    else:
        bad = torch.empty(q.numel() + 1, dtype=q.dtype, device="cuda")[1:].view_as(q)
        bad.copy_(q)
    assert torch.equal(bad, q)
    wb = w._replace(row=w.row._replace(qkv_weight=bad))
    x = rand_x((2, 6, 9, dim), torch.bfloat16, "cuda", seed=5)
    assert af.fallback_reason(x, wb) is None
    assert_close(run(x, wb), x, w)
    with torch.inference_mode():
        direct = torch.ops.axial_fused.axial_attention(x, *wb.row[:5], *wb.col[:5], w.num_heads, w.eps)
    assert_close(direct, x, w)


@pytest.mark.parametrize("dt", list(DTYPES))
def test_strided_and_expanded_x(dt):
    """An expanded batch (stride 0) and a channel slice, read in place; a pointer 2 elements past an
    allocation (aligned to 2 elements, not to 16 bytes), copied once by the op. Both paths."""
    w, dim = spec_weights(dt, seed=6)
    dtype = DTYPES[dt]
    n = 3 * 10 * 12 * dim
    offset2 = torch.empty(n + 2, dtype=dtype, device="cuda")[2:].view(3, 10, 12, dim)
    offset2.copy_(rand_x((3, 10, 12, dim), dtype, "cuda", seed=7))
    assert offset2.data_ptr() % 16 != 0
    cases = [rand_x((1, 9, 13, dim), dtype, "cuda", seed=8).expand(3, 9, 13, dim),
             rand_x((2, 7, 11, 2 * dim), dtype, "cuda", seed=9)[..., dim:],
             offset2]
    for x in cases:
        assert af.fallback_reason(x, w) is None
        for path in ("auto", "two_kernel"):  # automatic, and forced two-kernel (on Hopper: 16-byte cp.async of x rows)
            with tf32(False), force_path(path):
                check(x, w)
                check(x, w, fn="pass", axis="col")


@pytest.mark.parametrize("how", ["odd_pointer", "odd_stride"])
def test_misaligned_x(how):
    """x with a pointer one element off, or an odd token stride: copied once by the op, fused."""
    w, dim = spec_weights(seed=10)
    src = rand_x((2, 6, 7, dim), torch.bfloat16, "cuda", seed=11)
    if how == "odd_pointer":
        x = torch.empty(src.numel() + 1, dtype=src.dtype, device="cuda")[1:].view_as(src)
    else:
        x = torch.empty(2, 6, 7, dim + 1, dtype=src.dtype, device="cuda")[..., :dim]
    x.copy_(src)
    assert af.fallback_reason(x, w) is None
    assert_close(run(x, w), x, w)
    with torch.inference_mode():
        direct = torch.ops.axial_fused.axial_pass(x, *w.row[:5], w.num_heads, 0, w.eps)
    assert_close(direct, x, w, fn="pass", axis="row")


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_empty_batch_on_the_reference_path(dt):
    """B = 0 where the reference serves the call (an uncompiled (dim, heads)) and in the reference
    itself: torch 2.11's CUDA SDPA returns None for zero sequences in 16-bit dtypes."""
    dim = small_spec(dt)[1]
    heads = next(h for h in (2, 1, 8, 16) if (dt, dim, h) not in _ext.specs())
    w = make_weights(dim, heads, DTYPES[dt], "cuda", seed=12)
    x = torch.empty(0, 5, 6, dim, dtype=DTYPES[dt], device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        assert run(x, w, strict=False).shape == x.shape
        assert run(x, w, fn="pass", axis="col", strict=False).shape == x.shape
    assert af.reference.reference_axial_attention(x, w).shape == x.shape
    # The op's Autograd kernel (grad required) computes the same math in ATen: empty too, and trains.
    xg = x.clone().requires_grad_()
    y = torch.ops.axial_fused.axial_attention(xg, *w.row[:5], *w.col[:5], heads, w.eps)
    y.sum().backward()
    assert y.shape == x.shape and xg.grad.shape == x.shape


def test_empty_batch_through_op():
    w, dim = spec_weights()
    x = torch.empty(0, 5, 6, dim, dtype=torch.bfloat16, device="cuda")
    for axis in (0, 1):
        assert torch.ops.axial_fused.axial_pass(x, *w.row[:5], w.num_heads, axis, w.eps).shape == x.shape
    assert torch.ops.axial_fused.axial_attention(x, *w.row[:5], *w.col[:5], w.num_heads, w.eps).shape == x.shape
    assert run(x, w, fn="pass", axis="col").shape == x.shape


# ---- NaN / Inf ----------------------------------------------------------------------------------

NAN_CASES = [  # (fn, axis, shape, bad index): short sequences packed several to a block, and not
    ("pass", "row", (2, 600, 8), (1, 311, 5, 7)),
    ("pass", "col", (2, 5, 700), (0, 2, 404, 0)),
    ("pass", "row", (1, 300, 2), (0, 150, 1, 3)),
    ("attention", "row", (3, 40, 6), (1, 17, 4, 2)),
    ("attention", "row", (2, 3, 300), (0, 1, 250, 5)),
    ("pass", "row", (2, 40, 100), (1, 20, 99, 1)),  # one sequence per block
]


@pytest.mark.parametrize("path", ["auto", "two_kernel"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("case", NAN_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{'x'.join(map(str, c[2]))}")
def test_nan_inf_stay_in_their_sequence(case, dt, bad, path):
    """One non-finite element of x: the output is non-finite exactly where the float64 reference is
    (its sequence; after both passes its batch element), and every other element is bit-identical to
    the same call on the clean x. Packed short sequences share key tiles: this is where a masked
    key's NaN v would leak (0 * NaN)."""
    w, dim = spec_weights(dt, seed=12)
    check_nonfinite_isolated(case, bad, w, dim, DTYPES[dt], path)


# ---- numerical robustness -----------------------------------------------------------------------

@pytest.mark.parametrize("dt", list(DTYPES))
def test_large_inputs_stay_finite(dt):
    """x scaled by 1e3 (1e2 in float16): no Inf/NaN where the float32 reference is finite, and the
    usual tolerance."""
    w, dim = spec_weights(dt, seed=14)
    scale = 1e2 if dt == "float16" else 1e3
    for H, W in [(6, 40), (33, 129)]:
        x = rand_x((2, H, W, dim), DTYPES[dt], "cuda", seed=H, scale=scale)
        with tf32(False):
            check(x, w)
            out = run(x, w)
            w32 = af.AxialWeights(*(af.PassWeights(*(t.float() for t in p[:5])) for p in (w.row, w.col)),
                                  w.num_heads, w.eps)
            ref32 = af.reference.reference_axial_attention(x.float(), w32)
        finite = torch.isfinite(ref32)
        assert finite.all() and torch.isfinite(out[finite]).all()


@pytest.mark.parametrize("path", ["auto", "two_kernel"])
@pytest.mark.parametrize("dt", list(DTYPES))
def test_constant_tokens(dt, path):
    """A token whose features are all equal (variance 0) normalises to the LayerNorm bias: in a
    sequence of such tokens q, k, v are equal, so the pass adds exactly Wo (Wv bias) + bo."""
    w, dim = spec_weights(dt, seed=15)
    dtype = DTYPES[dt]
    B, H, W = 2, 9, 24
    c = (torch.randn(B, H, W, 1, device="cuda", dtype=torch.float64) * 0.5).to(dtype)
    x = c.expand(B, H, W, dim).contiguous()
    x[1, :4] = rand_x((4, W, dim), dtype, "cuda", seed=16)  # other rows: ordinary tokens
    with force_path(path), tf32(False):
        check(x, w, fn="pass", axis="row")
        out = run(x, w, fn="pass", axis="row")
    nw, nb, qkv, wo, bo = (t.double() for t in w.row[:5])
    added = wo @ (qkv[2 * dim:] @ nb) + bo  # LN(x) = bias, so v = Wv bias for every token
    delta = out[0].double() - x[0].double()
    err = rel_err(delta, added.expand_as(delta))
    # out is rounded at the magnitude of x (|c| < ~2.5), so the bound scales with it; a LayerNorm that
    # lost its bias, or divided 0 by 0, is off by tens of percent or NaN.
    assert err <= 10 * FLOOR[dtype] * max(1.0, c.abs().max().item()), err


@pytest.mark.parametrize("path", ["auto", "two_kernel"])
def test_variance_is_stable_for_a_large_mean(path):
    """float32 tokens 1e4 + N(0, 1): a one-pass variance (E[x^2] - E[x]^2) loses all its digits here.
    The pass's contribution out - x is compared, so the residual does not hide it."""
    w, dim = spec_weights("float32", seed=17)
    x = rand_x((2, 12, 40, dim), torch.float32, "cuda", seed=18) + 1e4
    with force_path(path), tf32(False):
        out = run(x, w, fn="pass", axis="row")
    ref = ref64(x, w, "pass", "row") - x.double()
    with torch.inference_mode():
        torch_out = af.reference.reference_pass(x, *w.row, num_heads=w.num_heads, axis="row", eps=w.eps)
    err, torch_err = rel_err(out.double() - x.double(), ref), rel_err(torch_out.double() - x.double(), ref)
    assert err <= 2 * torch_err + 1e-3, (err, torch_err)


# ---- determinism and concurrency ----------------------------------------------------------------

@pytest.mark.parametrize("path", ["auto", "fused", "two_kernel"])
@pytest.mark.parametrize("dt", list(DTYPES))
def test_deterministic_across_calls_and_streams(dt, path):
    w, dim = spec_weights(dt, seed=19)
    x = rand_x((3, 20, 33, dim), DTYPES[dt], "cuda", seed=20)
    other = rand_x((2, 64, 7, dim), DTYPES[dt], "cuda", seed=21)
    side = torch.cuda.Stream()
    with force_path(path), tf32(dt == "float32"):
        first = run(x, w)
        run(other, w)  # different work in between
        again = run(x, w)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            on_side = run(x, w)
        torch.cuda.synchronize()
    assert torch.equal(first, again) and torch.equal(first, on_side)


def test_concurrent_threads_match_serial():
    """Four threads, each on its own stream, each calling the op on its own inputs (several dtypes
    and paths' shapes) 20 times at once: every result equals the serial one, bit for bit."""
    jobs = []
    for i, (dt, shape) in enumerate([("bfloat16", (2, 40, 6)), ("float16", (1, 3, 300)),
                                     ("float32", (2, 33, 65)), ("bfloat16", (4, 17, 129))]):
        w, dim = spec_weights(dt, seed=30 + i)
        jobs.append((rand_x((*shape, dim), DTYPES[dt], "cuda", seed=40 + i), w))
    with tf32(False):
        serial = [run(x, w) for x, w in jobs]
        torch.cuda.synchronize()
        results, errors = [[] for _ in jobs], []
        start = threading.Barrier(len(jobs))

        def worker(i):
            try:
                stream = torch.cuda.Stream()
                start.wait()
                with torch.cuda.stream(stream):
                    for _ in range(20):
                        results[i].append(run(*jobs[i]))
                stream.synchronize()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert not errors, errors
    for i, outs in enumerate(results):
        assert len(outs) == 20 and all(torch.equal(o, serial[i]) for o in outs), f"thread {i}"


# ---- sizes: many sequences, more than 2^31 elements ---------------------------------------------

def _slices_match(out, x, w, fn, axis, idx):
    """Compare `out` with the reference on a few independent pieces: sequences (rows i for the row
    pass, columns j for the column pass) or batch elements (both passes)."""
    idx = torch.tensor(idx, device="cuda")
    if fn == "attention":
        assert_close(out[idx], x[idx], w)
    elif axis == "row":
        assert_close(out[:, idx], x[:, idx], w, "pass", "row")
    else:
        assert_close(out[:, :, idx], x[:, :, idx], w, "pass", "col")


@pytest.mark.parametrize("path", ["auto", "two_kernel"])
def test_many_sequences(path):
    """More sequences than one grid dimension holds (65,535): B*H, B*W and B above it."""
    w, dim = spec_weights(seed=50)
    with force_path(path):
        x = rand_x((1, 70_000, 3, dim), torch.bfloat16, "cuda", seed=51)
        _slices_match(run(x, w, "pass", "row"), x, w, "pass", "row", [0, 1, 65_534, 65_535, 65_536, 69_999])
        x = rand_x((2, 5, 40_000, dim), torch.bfloat16, "cuda", seed=52)
        _slices_match(run(x, w, "pass", "col"), x, w, "pass", "col", [0, 32_767, 32_768, 39_999])
        x = rand_x((70_000, 2, 3, dim), torch.bfloat16, "cuda", seed=53)
        _slices_match(run(x, w), x, w, "attention", "row", [0, 65_535, 65_536, 69_999])


def _big_randn(shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, dtype=torch.bfloat16, device="cuda", generator=g)


def test_more_than_2_31_elements():
    """x with more than 2^31 elements (4.3 GB in bfloat16): 64-bit offsets in the batch stride (both
    passes) and in the token stride of the column pass (also on the two-kernel path)."""
    w, dim = spec_weights(seed=60)
    if dim != 64:
        pytest.skip("sized for dim 64")
    x = _big_randn((32_769, 32, 32, dim), seed=61)
    assert x.numel() > 2 ** 31
    out = run(x, w)
    _slices_match(out, x, w, "attention", "row", [0, 1, 16_384, 32_767, 32_768])
    del x, out
    torch.cuda.empty_cache()
    x = _big_randn((1, 32, 1_048_600, dim), seed=62)  # token stride W*D: offsets beyond 2^31
    assert x.numel() > 2 ** 31
    for path in ("auto", "two_kernel"):
        with force_path(path):
            out = run(x, w, "pass", "col")
        _slices_match(out, x, w, "pass", "col", [0, 1, 524_288, 1_048_599])
        del out
    del x
    torch.cuda.empty_cache()


# ---- the fuzzer ---------------------------------------------------------------------------------

def test_fuzz_slice_and_regressions():
    """A fixed-seed slice of scripts/fuzz.py (the full run is `python scripts/fuzz.py --n 500`),
    then every configuration it has ever failed on."""
    lines = []
    failures = fuzz.fuzz(24, seed=1, device="cuda", max_elems=500_000, out=lines.append)
    for seed, index in FUZZ_REGRESSIONS:
        failures += fuzz.fuzz(1, seed, "cuda", 2_000_000, only=index, out=lines.append)
    assert not failures, "\n".join(lines)
