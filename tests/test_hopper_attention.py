"""The Hopper attention kernel (`attn_sm90_kernel`): the two-kernel path's second kernel on sm_90a for
16-bit specializations with head_dim 32 or 64. Skipped without an sm_90a build on a compute capability
9.0 GPU.

It takes blocks of 128 queries (64 above D = 256) of one sequence and streams that sequence's keys
and values in tiles of 128 (head_dim 32) or 64 (head_dim 64), so the lengths (cases.SHAPES["attn_sm90"])
cover one partial tile, whole tiles, a last partial tile and many tiles, on both axes. Checked as the
other kernel tests (helpers.check).
"""
from __future__ import annotations

import pytest
import torch

from axial_fused import cases
from helpers import (DTYPES, MAX_ELEMS, attn_sm90_specs, check, check_nonfinite_isolated, force_path,
                     kernels_launched, make_weights, rand_x, run, tf32)

pytestmark = [pytest.mark.gpu, pytest.mark.hopper]


@pytest.mark.parametrize("case", cases.grid(attn_sm90_specs(), cases.SHAPES["attn_sm90"], paths=("two_kernel",)),
                         ids=lambda c: c.id)
def test_against_float64(case):
    """Both passes at lengths over one partial tile, whole tiles, a last partial tile and many tiles (the
    row pass has length W, the column pass H; cases.SHAPES), W cut to keep B * H * W * D <= MAX_ELEMS."""
    B, H, W, dim = case.shape
    if B * H * W * dim > MAX_ELEMS:
        W = max(1, MAX_ELEMS // (B * H * dim))
    dtype = DTYPES[case.dtype]
    w = make_weights(dim, case.heads, dtype, "cuda", seed=B * 7 + H * 3 + W)
    x = rand_x((B, H, W, dim), dtype, "cuda", seed=H * 5 + W)
    with force_path(case.path), tf32(False):
        check(x, w)


def first_served(head_dim: int, seed: int, pick=min):
    cands = [s for s in attn_sm90_specs() if s[1] // s[2] == head_dim]
    if not cands:
        pytest.skip(f"no head_dim-{head_dim} 16-bit specialization compiled")
    dt, dim, heads = pick(cands, key=lambda s: s[1])
    return make_weights(dim, heads, DTYPES[dt], "cuda", seed=seed), dim, DTYPES[dt]


# The smallest and the largest D of each head_dim: above D = 256 the kernel's blocks, and from
# D = 512 its kernels (the split pass), differ (the output projection's rows addressed through x's
# strides).
@pytest.mark.parametrize("pick", [min, max], ids=["smallest-D", "largest-D"])
@pytest.mark.parametrize("head_dim", [32, 64])
def test_strided_x_and_in_place_column_pass(head_dim, pick):
    w, dim, dtype = first_served(head_dim, seed=3, pick=pick)
    big = rand_x((2, 160, 150, dim), dtype, "cuda", seed=4)
    with force_path("two_kernel"), tf32(False):
        check(big[:, 3:140, 5:145], w)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("case", [("pass", "row", (2, 3, 300), (1, 1, 17, 2)), ("pass", "col", (1, 150, 4), (0, 140, 1, 5))],
                         ids=lambda c: f"{c[0]}-{c[1]}-{'x'.join(map(str, c[2]))}")
@pytest.mark.parametrize("which", [(32, min), (64, max)], ids=["hd32-smallest-D", "hd64-largest-D"])
def test_nan_inf_stay_in_their_sequence(case, bad, which):
    """A non-finite token poisons its own sequence only (keys past a sequence's end are never read).
    The largest head_dim-64 D runs the split pass (D >= 512), whose output GEMM's 128-token tiles
    span sequences."""
    head_dim, pick = which
    w, dim, dtype = first_served(head_dim, seed=12, pick=pick)
    check_nonfinite_isolated(case, bad, w, dim, dtype, "two_kernel")


@pytest.mark.parametrize("pick", [min, max], ids=["smallest-D", "largest-D"])
@pytest.mark.parametrize("head_dim", [32, 64])
def test_it_is_what_runs(head_dim, pick):
    """A pass longer than 128 runs the Hopper attention kernel after the LN+QKV kernel (its output
    projection by tensor-map copies, attn_sm90_otma_kernel, at D <= 256; at D >= 512 the split pass:
    attn_sm90_split_kernel, then the projection's GEMM, out_gemm_sm90_kernel), and no mma.sync
    attention kernel. Both the smallest and the largest D of each head_dim."""
    w, dim, dtype = first_served(head_dim, seed=5, pick=pick)
    x = rand_x((1, 3, 200, dim), dtype, "cuda", seed=6)
    want = ["attn_sm90_otma_kernel"] if dim <= 256 else ["attn_sm90_split_kernel", "out_gemm_sm90_kernel"]
    if 256 < dim < 512:
        want = ["attn_sm90_kernel"]
    with torch.inference_mode():
        names = kernels_launched(lambda: run(x, w, "pass", "row"))
        for k in want:
            assert any(k in n for n in names), (k, names)
        assert not any("attn_out_kernel" in n for n in names), names
    with tf32(False):
        check(x, w)
