"""The fused kernels against a float64 reference, on the GPU (skipped without CUDA / the extension).

Every call is checked by helpers.check: strict=True, the allocator poisoned with NaN, the error
against float64 within 2 * PyTorch's own error at the dtype + a floor (float32 without TF32 within
1e-5 relative).
"""
from __future__ import annotations

import pytest
import torch

import axial_fused as af
from axial_fused import cases
from helpers import (DTYPES, FLOOR, MAX_ELEMS, attention64, check, check_or_skip, force_path, make_weights, pass64,
                     rand_x, rel_err, small_spec, small_specs, specs, tf32, to64)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case", cases.sweep(specs(), MAX_ELEMS), ids=lambda c: c.id)
def test_sweep(case):
    """Every specialization at four pairs of cases.LENGTHS (each length on both axes across the sweep)."""
    dtype = DTYPES[case.dtype]
    seed = case.input_seed
    w = make_weights(case.dim, case.heads, dtype, "cuda", seed=seed)
    x = rand_x(case.shape, dtype, "cuda", seed + 1)
    with tf32(False):
        check(x, w)
    if dtype == torch.float32:
        with tf32(True):
            check(x, w)


def test_float32_follows_the_tf32_flag_when_it_runs():
    """A float32 call takes TF32 or exact fp32 as torch.backends.cuda.matmul.allow_tf32 says when the
    kernel runs (the binary asks Python for it: the stable ABI cannot read it), for a direct op call
    and the functional API alike. The two forms give different bits, which identify each one."""
    _, dim, heads = small_spec("float32")
    w = make_weights(dim, heads, torch.float32, "cuda", seed=7)
    x = rand_x((2, 33, 17, dim), torch.float32, "cuda", seed=8)
    calls = {
        "axial_attention": (lambda: torch.ops.axial_fused.axial_attention(x, *w.row[:5], *w.col[:5], heads, w.eps),
                            lambda: af.axial_attention(x, w), attention64(x, to64(w))),
        "axial_pass": (lambda: torch.ops.axial_fused.axial_pass(x, *w.col[:5], heads, 1, w.eps),
                       lambda: af.axial_pass(x, w.col, num_heads=heads, axis="col", eps=w.eps),
                       pass64(x, to64(w).col, heads, "col", w.eps)),
    }
    with torch.inference_mode():
        for name, (op, api, ref) in calls.items():
            out = {}
            for flag in (False, True):
                with tf32(flag):
                    out[flag] = op()
                    assert torch.equal(api(), out[flag]), f"{name}: the functional API under the flag {flag}"
            assert rel_err(out[False], ref) <= 1e-5 < rel_err(out[True], ref), name
            assert not torch.equal(out[False], out[True]), name


@pytest.mark.parametrize("case", cases.grid(small_specs(), cases.SHAPES["tile_edges"], paths=("fused", "two_kernel")),
                         ids=lambda c: c.id)
def test_both_paths(case):
    """Both mma.sync paths forced at lengths on the tile edges, the smallest specialization of each
    dtype. (A build whose smallest spec of a dtype is large, e.g. only 256x8, skips the fused path where
    its block does not fit.)"""
    dtype = DTYPES[case.dtype]
    w = make_weights(case.dim, case.heads, dtype, "cuda", seed=case.H * 1000 + case.W)
    x = rand_x(case.shape, dtype, "cuda", seed=case.H + case.W)
    with force_path(case.path), tf32(False):
        check_or_skip(x, w)


@pytest.mark.parametrize("dt,dim,heads", specs(), ids=lambda v: str(v))
def test_two_kernel_every_spec(dt, dim, heads):
    """The two-kernel path's tile configuration depends on (dim, dtype) (e.g. 64 or 128 tokens per
    block, 64- or 128-wide weight chunks on Hopper): force it on every spec, with token counts that
    are not multiples of any tile (2 * 9 * 37 = 666)."""
    dtype = DTYPES[dt]
    w = make_weights(dim, heads, dtype, "cuda", seed=dim + heads)
    x = rand_x((2, 9, 37, dim), dtype, "cuda", seed=dim)
    with force_path("two_kernel"), tf32(False):
        check(x, w)


@pytest.mark.parametrize("dt,dim,heads", specs(), ids=lambda v: str(v))
def test_short_blocks_every_spec(dt, dim, heads):
    """The fused path forced on every spec with blocks of at most 32 tokens on both axes (half a
    64-row tile or less): 32-token sequences as seed's, 16 < L < 32, L <= 16, and blocks packing two
    sequences of 16 or 5 tokens (288 / 300 sequences on 132 SMs), where the row groups past the
    tokens have no rows (the short-block form re-maps the warps)."""
    dtype = DTYPES[dt]
    w = make_weights(dim, heads, dtype, "cuda", seed=7 * dim + heads)
    for B, H, W in cases.SHAPES["short_blocks"]:
        x = rand_x((B, H, W, dim), dtype, "cuda", seed=H * W + dim)
        with force_path("fused"), tf32(False):  # (fp32 D >= 192, 16-bit D >= 384: 32 tokens do not fit a block)
            check_or_skip(x, w)


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("axis", ["row", "col"])
def test_single_pass(dt, axis):
    _, dim, heads = small_spec(dt)
    w = make_weights(dim, heads, DTYPES[dt], "cuda", seed=3)
    x = rand_x((2, 17, 40, dim), DTYPES[dt], "cuda", seed=4)
    with tf32(False):
        check(x, w, fn="pass", axis=axis)


@pytest.mark.parametrize("dt", list(DTYPES))
def test_many_short_sequences(dt):
    """Lengths 1..8 pack several sequences into one block (fused path): masks must keep them apart."""
    _, dim, heads = small_spec(dt)
    w = make_weights(dim, heads, DTYPES[dt], "cuda", seed=5)
    for B, H, W in cases.SHAPES["many_short"]:
        x = rand_x((B, H, W, dim), DTYPES[dt], "cuda", seed=H * W)
        with tf32(False):
            check(x, w)


def test_batch_zero_and_one():
    _, dim, heads = small_spec()
    w = make_weights(dim, heads, torch.bfloat16, "cuda")
    x = rand_x((0, 8, 8, dim), torch.bfloat16, "cuda", seed=1)
    with torch.inference_mode():
        out = af.axial_attention(x, w, strict=True)
    assert out.shape == x.shape
    check(rand_x((1, 9, 8, dim), torch.bfloat16, "cuda", seed=2), w)


@pytest.mark.parametrize("dt", list(DTYPES))
def test_non_contiguous_x(dt):
    """x a slice of a larger tensor, and a transposed view (H and W swapped): read through strides."""
    _, dim, heads = small_spec(dt)
    w = make_weights(dim, heads, DTYPES[dt], "cuda", seed=7)
    big = rand_x((3, 20, 50, 2 * dim), DTYPES[dt], "cuda", seed=8)
    with tf32(False):
        check(big[1:, 2:15, 5:45, dim:], w)
        check(big[:, :, :, :dim].transpose(1, 2), w)


def test_input_not_modified_and_deterministic():
    _, dim, heads = small_spec()
    w = make_weights(dim, heads, torch.bfloat16, "cuda")
    x = rand_x((2, 30, 40, dim), torch.bfloat16, "cuda", seed=9)
    x0 = x.clone()
    with torch.inference_mode():
        a = af.axial_attention(x, w, strict=True)
        b = af.axial_attention(x, w, strict=True)
    assert torch.equal(x, x0)
    assert torch.equal(a, b)


def test_pitfalls_are_caught():
    """The tolerance is tight enough to see the known mistakes: a dropped output bias, a transposed
    QKV weight, a LayerNorm without its affine."""
    _, dim, heads = small_spec()
    w = make_weights(dim, heads, torch.bfloat16, "cuda", seed=11)
    x = rand_x((2, 16, 24, dim), torch.bfloat16, "cuda", seed=12)
    err, torch_err = check(x, w)
    ref = attention64(x, to64(w))
    row = w.row
    broken = {
        "no out bias": row._replace(out_bias=torch.zeros_like(row.out_bias)),
        "qkv transposed": row._replace(qkv_weight=row.qkv_weight.view(dim, 3 * dim).t().contiguous()
                                       .view(3 * dim, dim)),
        "no LN affine": row._replace(norm_weight=torch.ones_like(row.norm_weight),
                                     norm_bias=torch.zeros_like(row.norm_bias)),
    }
    for name, bad in broken.items():
        with torch.inference_mode():
            out = af.axial_attention(x, w._replace(row=bad), strict=True)
        assert rel_err(out, ref) > 10 * (2 * torch_err + FLOOR[torch.bfloat16]), name


def test_module_fused_matches_reference_model():
    _, dim, heads = small_spec("float32")  # the module and x below are float32
    torch.manual_seed(0)
    ref_model = af.reference.AxialAttentionReference(dim, heads).cuda()
    with torch.no_grad():
        for p in ref_model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    model = af.AxialAttention(dim, heads, strict=True).cuda()
    model.load_state_dict(ref_model.state_dict())
    x = torch.randn(2, 12, 20, dim, device="cuda")
    with torch.no_grad(), tf32(False):
        assert rel_err(model(x), ref_model(x)) < 1e-5


def test_strict_raises_when_grad_required():
    _, dim, heads = small_spec("float32")
    model = af.AxialAttention(dim, heads, strict=True).cuda()
    x = torch.randn(1, 4, 4, dim, device="cuda")
    with pytest.raises(af.FusedUnavailableError, match="inference-only"):
        model(x)
    model.strict = False
    af.functional._warned.clear()  # the warning is once per reason per process: an earlier test may have had it
    with pytest.warns(af.FusedFallbackWarning):
        y = model(x)
    y.sum().backward()  # the fallback keeps autograd
    assert model.row_qkv.weight.grad is not None
