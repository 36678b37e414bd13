"""The Hopper head-looped fused kernel (path fused_sm90, `fused_sm90_kernel`), forced at every length it
serves, and the automatic choice that takes it for 32 <= L <= 128. Skipped without an sm_90a build on a
compute capability 9.0 GPU.

It serves 16-bit dtypes at head_dim 32 with an even number of heads and D <= 256 (the 128x4, 192x6
and 256x8 specializations) for sequence lengths up to 128: one block of two warpgroups per 128 token
rows (one sequence, or up to 128 / L short ones packed: the fewest a block that give the fewest waves
of blocks, csrc/pass.cpp's sequences_per_block_waves). Checked as the other kernel tests (helpers.check).
"""
from __future__ import annotations

import pytest
import torch

from axial_fused import cases
from axial_fused.plan import plan_pass
from helpers import (DTYPES, check, check_nonfinite_isolated, force_path, hopper_fused_specs, kernels_launched,
                     make_weights, rand_x, run, tf32)

pytestmark = [pytest.mark.gpu, pytest.mark.hopper]


def first_spec(seed: int):
    """(weights, dim, dtype) of the first specialization the kernel serves (skip if none is compiled)."""
    cands = hopper_fused_specs()
    if not cands:
        pytest.skip("no head_dim-32 16-bit specialization compiled")
    dt, dim, heads = cands[0]
    return make_weights(dim, heads, DTYPES[dt], "cuda", seed=seed), dim, DTYPES[dt]


@pytest.mark.parametrize("case", cases.grid(hopper_fused_specs(), cases.SHAPES["hopper_fused"], paths=("fused_sm90",)),
                         ids=lambda c: c.id)
def test_against_float64(case):
    """Both passes and the column pass alone, at lengths <= 128, packed and not (cases.SHAPES)."""
    dtype, (B, H, W, _) = DTYPES[case.dtype], case.shape
    w = make_weights(case.dim, case.heads, dtype, "cuda", seed=B * 7 + H * 3 + W)
    x = rand_x(case.shape, dtype, "cuda", seed=H * 5 + W)
    with force_path(case.path), tf32(False):
        check(x, w)
        check(x, w, fn="pass", axis="col")


def test_strided_x_and_in_place_column_pass():
    """x a slice of a larger tensor (strides, no copy), and axial_attention's in-place column pass."""
    w, dim, dtype = first_spec(seed=3)
    big = rand_x((2, 40, 70, dim), dtype, "cuda", seed=4)
    with force_path("fused_sm90"), tf32(False):
        check(big[:, 3:36, 5:66], w)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
# Packed blocks (the first three, on 132 SMs: 3, 5 and 3 sequences a block) and one full 128-token sequence.
@pytest.mark.parametrize("case", [("pass", "row", (3, 100, 7), (1, 17, 4, 2)), ("pass", "col", (2, 7, 300), (0, 3, 11, 5)),
                                  ("attention", "row", (3, 90, 9), (1, 4, 8, 1)), ("pass", "row", (1, 5, 128), (0, 2, 77, 0))],
                         ids=lambda c: f"{c[0]}-{c[1]}-{'x'.join(map(str, c[2]))}")
def test_nan_inf_stay_in_their_sequence(case, bad):
    """Packed sequences share the block's keys: a non-finite token must not leak into the others."""
    w, dim, dtype = first_spec(seed=12)
    check_nonfinite_isolated(case, bad, w, dim, dtype, "fused_sm90")


def planned_per_block(dt: str, dim: int, heads: int, num_seq: int, length: int) -> int:
    """Sequences per block the planner gives the Hopper fused kernel on this GPU."""
    return plan_pass(DTYPES[dt], dim, heads, num_seq, length, 0, path="fused_sm90").group


@pytest.mark.parametrize("B,H,W", [(2, 56, 100), (2, 40, 70)], ids=lambda v: str(v))
def test_packing_by_waves(B, H, W):
    """The column pass packs sequences by whole waves (odd's column pass on 132 SMs: two sequences of
    56 tokens a block in one wave, rather than one a block in two): the packed blocks match float64."""
    w, dim, dtype = first_spec(seed=21)
    dt = {v: k for k, v in DTYPES.items()}[dtype]
    assert planned_per_block(dt, dim, dim // 32, B * W, H) >= 2
    x = rand_x((B, H, W, dim), dtype, "cuda", seed=22)
    with force_path("fused_sm90"), tf32(False):
        check(x, w)
        check(x, w, fn="pass", axis="col")


@pytest.mark.parametrize("B,H,W,hopper", [(2, 40, 64, (True, True)), (1, 128, 32, (True, True)),
                                          (3, 16, 100, (True, False)), (2, 129, 8, (False, False))],
                         ids=lambda v: str(v))
def test_automatic_choice(B, H, W, hopper):
    """Without an override, a pass of length 32..128 runs fused_sm90_kernel; other lengths do not.
    `hopper` says (row pass, column pass): the row pass has length W, the column pass H."""
    w, dim, dtype = first_spec(seed=5)
    x = rand_x((B, H, W, dim), dtype, "cuda", seed=6)
    with torch.inference_mode():
        for axis, want in zip(("row", "col"), hopper):
            names = kernels_launched(lambda: run(x, w, "pass", axis))
            assert any("fused_sm90_kernel" in n for n in names) == want, (axis, names)
    with tf32(False):
        check(x, w)


@pytest.mark.parametrize("dt,dim,heads", hopper_fused_specs(), ids=lambda v: str(v))
def test_two_kernel_path_past_one_wave_at_small_dim(dt, dim, heads):
    """At D = 128 a pass the Hopper fused kernel would run in more than one wave of blocks goes to the
    two-kernel path (vision's grid: 256 blocks of two 64-token sequences on 132 SMs); at D >= 192 it
    stays on the fused kernel. Both choices match float64."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    B, H, W = sms // 32 + 1, 64, 64  # B * 64 sequences of 64 a pass, packed 2 a block: more than one wave
    assert -(-B * H // planned_per_block(dt, dim, heads, B * H, W)) > sms
    w = make_weights(dim, heads, DTYPES[dt], "cuda", seed=23)
    x = rand_x((B, H, W, dim), DTYPES[dt], "cuda", seed=24)
    fused = not 64 < dim <= 128
    with torch.inference_mode():
        for axis in ("row", "col"):
            names = kernels_launched(lambda: run(x, w, "pass", axis))
            assert any("fused_sm90_kernel" in n for n in names) == fused, (axis, names)
            assert any("attn_sm90" in n for n in names) == (not fused), (axis, names)
    with tf32(False):
        check(x, w)


def test_forcing_it_where_it_cannot_run_is_an_error():
    w, dim, dtype = first_spec(seed=1)
    x = rand_x((1, 2, 129, dim), dtype, "cuda", seed=2)
    with force_path("fused_sm90"), pytest.raises(RuntimeError, match="Hopper fused path was forced"):
        run(x, w, "pass", "row")
