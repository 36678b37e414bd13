"""The planner (csrc/pass.cpp, plan_pass): which path runs a pass, how many sequences a block packs, and
every kernel the pass launches (K1's form, the attention kernel, split or not, the prepared terms), one
test per rule of docs/design.md's "The planner". No GPU needed: the planner takes the device as
numbers (the H200's: 132 SMs, 227 KB of shared memory a block, compute capability 9.0). The last test
checks on a GPU that the kernels a pass launches are the ones its plan names.
"""
from __future__ import annotations

import itertools
import re

import pytest
import torch

import axial_fused as af
from axial_fused import _ext, cases
from helpers import kernels_launched, make_weights, rand_x

pytestmark = pytest.mark.needs_ext

FUSED, TWO_KERNEL, FUSED_SM90 = 0, 1, 2  # PassPath
H200 = dict(arch=90, sm90a=True, sms=132, smem_optin=232448)
A100 = dict(arch=80, sm90a=False, sms=108, smem_optin=166912)


_PATH_NAMES = {FUSED: "fused", TWO_KERNEL: "two_kernel", FUSED_SM90: "fused_sm90"}


def kernels(spec, num_seq, length, device=H200, forced=-1, **features):
    """The plan (axial_fused.Plan) of a pass with the given features (gated, mask, bias, bias_from_ln, extras)."""
    dt, dim, heads = spec
    if dt == "float32":
        features.setdefault("tf32", False)
    tf32 = features.pop("tf32", False)
    text = _ext.C.plan(dt, dim, heads, num_seq, length, device, tf32=tf32, forced=forced,
                       extras=features.pop("extras", False) or any(features.values()), **features)
    return af.Plan.parse(text)


def plan(spec, num_seq, length, device=H200, tf32=False, forced=-1, gated=False):
    """(path, sequences per block) as PassPath numbers."""
    k = kernels(spec, num_seq, length, device, forced, tf32=tf32, gated=gated)
    return {v: n for n, v in _PATH_NAMES.items()}[k.path], k.group


def compiled(pred):
    """The compiled specializations that satisfy pred (a test is skipped where none is)."""
    found = cases.specs(pred)
    return found or [pytest.param(None, marks=pytest.mark.skip(reason="no such specialization compiled"))]


HOPPER = compiled(lambda dt, d, h: dt != "float32" and d // h == 32 and h % 2 == 0 and d <= 256)
HOPPER_D128 = compiled(lambda dt, d, h: dt != "float32" and d // h == 32 and h % 2 == 0 and d == 128)
HOPPER_WIDE = compiled(lambda dt, d, h: dt != "float32" and d // h == 32 and h % 2 == 0 and 128 < d <= 256)
NOT_HOPPER = compiled(lambda dt, d, h: not (dt != "float32" and d // h == 32 and h % 2 == 0 and d <= 256))
SMALL = compiled(lambda dt, d, h: d == 64)


@pytest.mark.parametrize("spec", HOPPER, ids=str)
def test_rule1_hopper_fused_for_lengths_32_to_128(spec):
    # 128 sequences: one wave at any packing
    for length in (32, 33, 64, 100, 128):
        assert plan(spec, 128, length)[0] == FUSED_SM90, length
    for length in (1, 16, 31):  # short: the mma.sync kernel's smaller blocks
        assert plan(spec, 128, length)[0] == FUSED, length
    assert plan(spec, 128, 129)[0] != FUSED_SM90
    # not on a GPU without sm_90a code
    assert plan(spec, 128, 64, device=A100)[0] != FUSED_SM90
    assert plan(spec, 128, 64, device=dict(H200, sm90a=False))[0] != FUSED_SM90


@pytest.mark.parametrize("spec", NOT_HOPPER, ids=str)
def test_rule1_hopper_fused_only_where_it_serves(spec):
    for length in (32, 64, 128):
        assert plan(spec, 128, length)[0] != FUSED_SM90, length


@pytest.mark.parametrize("spec", HOPPER, ids=str)
def test_rule1_packing_by_whole_waves(spec):
    # The fewest waves of one block per SM, then the fewest sequences a block.
    assert plan(spec, 200, 56)[1] == 2  # odd's column pass: 2 a block in one wave, not 1 in two
    assert plan(spec, 140, 40)[1] == 2
    for n, length, want in [(512, 64, 2), (1000, 32, 4), (100, 56, 1), (264, 56, 2), (112, 100, 1)]:
        assert plan(spec, n, length, forced=FUSED_SM90)[1] == want, (n, length)

    def waves(n, g, sms):
        return -(-(-(-n // g)) // sms)

    for n in range(1, 700, 7):
        for length in (1, 9, 32, 56, 64, 100, 128):
            for sms in (1, 108, 132):
                g = plan(spec, n, length, device=dict(H200, sms=sms), forced=FUSED_SM90)[1]
                assert 1 <= g <= max(1, 128 // length)
                assert all(waves(n, h, sms) > waves(n, g, sms) for h in range(1, g)), (n, length, sms, g)
                assert waves(n, g, sms) == waves(n, max(1, 128 // length), sms), (n, length, sms, g)


@pytest.mark.parametrize("spec", HOPPER_D128, ids=str)
def test_rule1_two_kernel_past_one_wave_at_dim_128(spec):
    assert plan(spec, 512, 64) == (TWO_KERNEL, 1)      # vision: 256 blocks of 2 on 132 SMs
    assert plan(spec, 320, 64) == (TWO_KERNEL, 1)      # 160 blocks
    assert plan(spec, 264, 64) == (FUSED_SM90, 2)      # 132 blocks: one wave
    assert plan(spec, 512, 64, device=dict(H200, sms=256))[0] == FUSED_SM90


@pytest.mark.parametrize("spec", HOPPER_WIDE, ids=str)
def test_rule1_stays_fused_past_one_wave_above_dim_128(spec):
    assert plan(spec, 512, 64)[0] == FUSED_SM90
    assert plan(spec, 2000, 100)[0] == FUSED_SM90


@pytest.mark.parametrize("spec", SMALL, ids=str)
def test_rule2_mma_sync_fused_within_128_rows(spec):
    for device in (H200, A100):
        # as many sequences as fit in 64 rows, but no fewer blocks than SMs
        assert plan(spec, 10000, 16, device=device) == (FUSED, 4)
        assert plan(spec, 200, 16, device=device) == (FUSED, 1)
        # one sequence a block, 128 rows: fits, except float32's on an A100 (163 KB a block)
        fits = not (spec[0] == "float32" and device is A100)
        assert plan(spec, 10000, 100, device=device) == ((FUSED, 1) if fits else (TWO_KERNEL, 1))
        assert plan(spec, 10000, 128, device=device) == ((FUSED, 1) if fits else (TWO_KERNEL, 1))
        # rule 3: past 128 rows, the two-kernel path
        assert plan(spec, 10000, 129, device=device) == (TWO_KERNEL, 1)
        assert plan(spec, 10, 1000, device=device) == (TWO_KERNEL, 1)
    # rows that do not fit a small shared memory: the two-kernel path
    assert plan(spec, 100, 100, device=dict(A100, smem_optin=16384)) == (TWO_KERNEL, 1)


@pytest.mark.parametrize("spec", SMALL, ids=str)
def test_rule0_forced_paths(spec):
    assert plan(spec, 10, 1000, forced=TWO_KERNEL) == (TWO_KERNEL, 1)
    assert plan(spec, 10, 16, forced=TWO_KERNEL) == (TWO_KERNEL, 1)
    assert plan(spec, 1000, 16, forced=FUSED) == (FUSED, 4)
    assert plan(spec, 1, 160, forced=FUSED)[0] == FUSED  # beyond 128 rows, where it still fits
    with pytest.raises(RuntimeError, match="fused path was forced"):
        plan(spec, 1, 100000, forced=FUSED)
    with pytest.raises(RuntimeError, match="Hopper fused path was forced"):
        plan(spec, 1, 64, device=A100, forced=FUSED_SM90)


@pytest.mark.parametrize("spec", HOPPER, ids=str)
def test_rule0_forced_hopper_fused_at_any_length_it_serves(spec):
    assert plan(spec, 100, 7, forced=FUSED_SM90) == (FUSED_SM90, 1)
    with pytest.raises(RuntimeError, match="length <= 128"):
        plan(spec, 100, 129, forced=FUSED_SM90)


@pytest.mark.parametrize("spec", HOPPER, ids=str)
def test_rule1_gated_pass_leaves_the_hopper_fused_kernel(spec):
    """The Hopper fused kernel has no gate: a gated pass takes the mma.sync fused kernel (which holds
    the gate's block beside q/k/v) or the two-kernel path, and forcing the Hopper kernel says why."""
    for length in (32, 64, 100, 128):
        assert plan(spec, 128, length)[0] == FUSED_SM90
        assert plan(spec, 128, length, gated=True)[0] in (FUSED, TWO_KERNEL), length
    with pytest.raises(RuntimeError, match="no gate; got .*gated"):
        plan(spec, 100, 64, forced=FUSED_SM90, gated=True)


@pytest.mark.parametrize("spec", SMALL, ids=str)
def test_rule2_gated_rows_need_room_for_the_gate(spec):
    """The fused buffer of a gated pass holds 4D columns a token instead of 3D: a device with room for
    the plain pass's rows but not the gated pass's takes the two-kernel path for the gated one."""
    base = plan(spec, 100, 64, device=A100)
    assert base[0] == FUSED
    lo, hi = 1024, 166912  # the smallest shared memory that still fuses the plain pass, by bisection
    while hi - lo > 16:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if plan(spec, 100, 64, device=dict(A100, smem_optin=mid))[0] == FUSED else (mid, hi)
    assert plan(spec, 100, 64, device=dict(A100, smem_optin=hi)) == base
    assert plan(spec, 100, 64, device=dict(A100, smem_optin=hi), gated=True)[0] == TWO_KERNEL
    assert plan(spec, 100, 64, device=A100, gated=True)[0] == FUSED


def test_unknown_specialization_is_a_value_error():
    with pytest.raises(ValueError, match="no compiled specialization"):
        _ext.C.plan("bfloat16", 96, 3, 1, 1, H200)


def k1_per_sm(spec, num_seq, length, device=H200):
    return kernels(spec, num_seq, length, device, forced=TWO_KERNEL).k1_per_sm


@pytest.mark.parametrize("spec", compiled(lambda dt, d, h: dt != "float32" and d <= 128), ids=str)
def test_k1_three_blocks_where_their_waves_fill_better(spec):
    """K1 (the two-kernel path's first kernel, sm_90a, 16-bit, D <= 128) takes its three-block form
    where its blocks of 128 tokens fill the waves' slots better than at two blocks an SM."""
    assert k1_per_sm(spec, 384, 384) == 3    # tri_384's node: 1152 blocks, 4.4 waves at two, 2.9 at three
    assert k1_per_sm(spec, 192, 192) == 3    # 288 blocks: 1.1 and 0.7
    assert k1_per_sm(spec, 256, 256) == 2    # tri_256's: 512 blocks, 1.9 and 1.3
    assert k1_per_sm(spec, 1024, 256) == 2   # extra_msa's: 2048 blocks, 7.8 and 5.2
    assert k1_per_sm(spec, 8, 100) == 2      # under one wave either way
    assert k1_per_sm(spec, 384, 384, device=A100) == 2
    assert k1_per_sm(spec, 384, 384, device=dict(H200, sm90a=False)) == 2
    assert k1_per_sm(spec, 256, 256, device=dict(H200, sms=180)) == 3  # 512 blocks: 1.4 and 0.9 waves


@pytest.mark.parametrize("spec", compiled(lambda dt, d, h: dt == "float32" or d > 128), ids=str)
def test_k1_two_blocks_elsewhere(spec):
    assert k1_per_sm(spec, 384, 384) == 2


# ---- the kernels a plan names ---------------------------------------------------------------------

HOPPER_ATTN = compiled(lambda dt, d, h: dt != "float32" and d // h in (32, 64) and d < 512)
SPLIT = compiled(lambda dt, d, h: dt != "float32" and d >= 512 and d // h in (32, 64))
BF16_HD8 = compiled(lambda dt, d, h: dt == "bfloat16" and d // h == 8)
EVERY = compiled(lambda dt, d, h: True)


@pytest.mark.parametrize("spec", SMALL, ids=str)
def test_kernels_of_the_one_kernel_paths(spec):
    k = kernels(spec, 10000, 16)
    assert (k.path, k.kernels) == ("fused", ("fused_mma",))
    assert kernels(spec, 10000, 16, mask=True, bias=True).kernels == ("fused_mma",)
    # the bias from the pass's LayerNorm output: the pair-bias kernel first
    assert kernels(spec, 10000, 16, bias_from_ln=True).kernels == ("pair_bias", "fused_mma")


@pytest.mark.parametrize("spec", HOPPER, ids=str)
def test_kernels_of_the_hopper_fused_path(spec):
    assert kernels(spec, 128, 64).kernels == ("fused_sm90",)
    assert kernels(spec, 128, 64, mask=True, bias=True).kernels == ("fused_sm90",)


@pytest.mark.parametrize("spec", HOPPER_ATTN, ids=str)
def test_two_kernel_path_on_sm90a_runs_the_hopper_attention(spec):
    dt, dim, heads = spec
    plain = kernels(spec, 8, 1000)
    assert plain.k1 in ("ln_qkv_sm90", "ln_qkv_sm90_three") and plain.prep == "none"
    assert plain.attn in ("attn_sm90", "attn_sm90_tma") and plain.proj == "none" and plain.terms == "none"
    # its terms prepared in its order before K1; the mask on the tensor cores in bfloat16 up to 2048 keys
    k = kernels(spec, 8, 1000, mask=True)
    assert (k.prep, k.attn) == ("terms_prep_sm90", plain.attn)
    assert k.terms == ("mask|mask_mma" if dt == "bfloat16" else "mask")
    assert kernels(spec, 2, 3000, mask=True).terms == "mask"
    k = kernels(spec, 8, 1000, bias=True)
    assert (k.prep, k.terms, k.pair_bias, k.k1_bias) == ("terms_prep_sm90", "bias", False, False)
    # the bias from the pass's LayerNorm output: K1 writes it, no prep kernel without a mask
    k = kernels(spec, 8, 1000, bias_from_ln=True)
    assert (k.prep, k.terms, k.pair_bias, k.k1_bias) == ("none", "bias", False, True)
    # without tensor maps (a driver without the encoder): the cp.async form
    assert kernels(spec, 8, 1000, tensor_maps=False).attn == "attn_sm90"


@pytest.mark.parametrize("spec", SPLIT, ids=str)
def test_two_kernel_path_at_large_dim_is_the_split_form(spec):
    k = kernels(spec, 8, 1000)
    assert k.kernels == ("ln_qkv_sm90_tma", "attn_sm90_split128", "out_gemm_sm90")
    assert kernels(spec, 100, 64).attn == "attn_sm90_split64"  # a sequence of at most 64 tokens: 64-query blocks
    assert kernels(spec, 8, 1000, mask=True).kernels == (
        "terms_prep_sm90", "ln_qkv_sm90_tma", "attn_sm90_split128", "out_gemm_sm90")
    k = kernels(spec, 8, 1000, tensor_maps=False)  # the split form needs its maps: the fused form instead
    assert k.k1 == "ln_qkv_sm90" and k.attn in ("attn_sm90", "attn_out_mma_wg") and k.proj == "none"


@pytest.mark.parametrize("spec", compiled(lambda dt, d, h: True), ids=str)
def test_two_kernel_path_elsewhere_runs_the_mma_sync_kernels(spec):
    dt = spec[0]
    k = kernels(spec, 8, 1000, device=A100, mask=True, bias_from_ln=True)
    assert k.kernels == ("pair_bias", "terms_prep", "ln_qkv_mma", "attn_out_mma")
    assert kernels(spec, 8, 1000, device=A100).kernels == ("ln_qkv_mma", "attn_out_mma")
    if dt == "float32":  # float32 on a Hopper GPU: the mma.sync kernels too
        assert kernels(spec, 8, 1000).kernels == ("ln_qkv_mma", "attn_out_mma")


@pytest.mark.parametrize("spec", BF16_HD8, ids=str)
def test_mma_sync_attention_takes_a_lone_mask_on_the_tensor_cores(spec):
    # head_dim 8 (padded head tiles) in bfloat16: attn_out_kernel's MASK_MMA form, for a mask without a bias
    assert kernels(spec, 8, 1000, mask=True).terms == "mask|mask_mma"
    assert kernels(spec, 8, 1000, mask=True, bias=True).terms == "none"


@pytest.mark.parametrize("spec", EVERY, ids=str)
def test_every_plan_is_consistent(spec):
    """Over paths, features and devices: a two-kernel plan names K1 and an attention; the Hopper
    attention kernels read terms prepared in their order (prep terms_prep_sm90, the bias prepared),
    the mma.sync one the mask in its own order and the bias as given; a plan without tensor maps names
    no TMA kernel; the projection GEMM comes with the split form alone."""
    hopper_attn = {"attn_sm90", "attn_sm90_tma", "attn_sm90_split64", "attn_sm90_split128"}
    for device, (num_seq, length), mask, bias, ln, maps in itertools.product(
            (H200, A100), ((10000, 16), (128, 64), (8, 1000), (2, 3000)), (False, True), (False, True),
            (False, True), (True, False)):
        if bias and ln:
            continue  # (never both: the binding's checks)
        k = kernels(spec, num_seq, length, device, mask=mask, bias=bias, bias_from_ln=ln, tensor_maps=maps)
        where = (device["arch"], num_seq, length, mask, bias, ln, maps, str(k))
        if k.path != "two_kernel":
            assert k.kernels[-1:] == (("fused_sm90",) if k.path == "fused_sm90" else ("fused_mma",)), where
            assert k.pair_bias == ln, where
            continue
        assert k.k1 != "none" and k.attn != "none", where
        if k.attn in hopper_attn:
            assert device["sm90a"] and spec[0] != "float32", where
            assert k.prep == ("terms_prep_sm90" if mask or bias else "none"), where
            assert not k.pair_bias and k.k1_bias == ln, where
            assert ("bias" in k.terms) == (bias or ln) and ("mask" in k.terms) == mask, where
        else:
            assert k.prep == ("terms_prep" if mask else "none") and k.pair_bias == ln and not k.k1_bias, where
            assert k.attn == ("attn_out_mma_wg" if device["sm90a"] and spec[0] != "float32" else "attn_out_mma"), where
        assert (k.proj == "out_gemm_sm90") == k.attn.startswith("attn_sm90_split"), where
        if not maps:
            assert not any(n.endswith("_tma") or n == "out_gemm_sm90" for n in k.kernels), where


# The kernel functions each plan name stands for (the demangled names' base).
_FUNCTIONS = {
    "pair_bias": r"pair_bias(_mma)?_kernel", "fused_sm90": r"fused_sm90_kernel", "fused_mma": r"fused_pass_kernel",
    "terms_prep": r"terms_prep_kernel", "terms_prep_sm90": r"terms_prep_kernel", "ln_qkv_mma": r"ln_qkv_kernel",
    "ln_qkv_sm90": r"ln_qkv_sm90_kernel", "ln_qkv_sm90_three": r"ln_qkv_sm90_kernel",
    "ln_qkv_sm90_tma": r"ln_qkv_sm90_tma_kernel", "attn_out_mma": r"attn_out_kernel",
    "attn_out_mma_wg": r"attn_out_kernel", "attn_sm90": r"attn_sm90_kernel", "attn_sm90_tma": r"attn_sm90_otma_kernel",
    "attn_sm90_split64": r"attn_sm90_split_kernel", "attn_sm90_split128": r"attn_sm90_split_kernel",
    "out_gemm_sm90": r"out_gemm_sm90_kernel",
}


def _ours(names):
    """The axial_fused kernels among launched kernel names, as their base function names."""
    out = []
    for n in names:
        m = re.search(r"axial_fused::(\w+)", n)
        if m:
            out.append(m.group(1))
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("spec", compiled(lambda dt, d, h: True), ids=str)
def test_the_kernels_launched_are_the_ones_the_plan_names(spec):
    dt, dim, heads = spec
    dtype = cases.DTYPES[dt]
    torch.manual_seed(0)
    w = make_weights(dim, heads, dtype, "cuda", qkv_bias=False)
    pw = make_weights(dim, heads, dtype, "cuda", qkv_bias=True).row
    for (B, H, W), features in itertools.product(((2, 8, 16), (1, 4, 200)), ("plain", "mask", "mask+bias")):
        x = rand_x((B, H, W, dim), dtype, "cuda", seed=B * W)
        mask = (torch.rand(B, H, W, device="cuda") > 0.2) if "mask" in features else None
        bias = torch.randn(B, heads, W, W, device="cuda", dtype=dtype) if "bias" in features else None
        weights = pw if features != "plain" else w.row
        with torch.inference_mode():
            plan = af.explain(x, weights, heads, axis="row", mask=mask, bias=bias)
            launched = _ours(kernels_launched(lambda: af.axial_pass(x, weights, num_heads=heads, axis="row", mask=mask,
                                                                     bias=bias, strict=True)))
        expected = [_FUNCTIONS[k] for k in plan.kernels]
        assert len(launched) == len(expected) and all(re.fullmatch(e, n) for e, n in zip(expected, launched)), \
            (str(plan), launched)


# ---- the plan of a call, as a user reads it ---------------------------------------------------------

@pytest.mark.parametrize("spec", SMALL, ids=str)
def test_explain_names_the_kernels_of_each_pass(spec):
    dt, dim, heads = spec
    dtype = cases.DTYPES[dt]
    w = make_weights(dim, heads, dtype, "cpu")
    x = rand_x((2, 16, 300, dim), dtype, "cpu", seed=1)  # rows of 300 tokens, columns of 16
    row, col = af.explain(x, w, device="a100")
    assert row == kernels(spec, 32, 300, A100) and row.kernels == ("ln_qkv_mma", "attn_out_mma")
    assert col == kernels(spec, 600, 16, A100) and col.path == "fused"
    mask = torch.ones(2, 16, 300, dtype=torch.bool)
    p = af.explain(x, w.row, heads, axis="row", mask=mask, device=A100)
    assert p.kernels == ("terms_prep", "ln_qkv_mma", "attn_out_mma") and p.extras
    assert af.explain(x, w.row, heads, axis="row", residual=False, device="a100").extras
    assert "ln_qkv_mma -> attn_out_mma" in str(row)
    with pytest.raises(ValueError, match="device: the plan is made for a GPU"):
        af.explain(x, w)  # a CPU tensor and no described device
    with pytest.raises(TypeError, match="explain: num_heads is required"):
        af.explain(x, w.row, device="a100")
    with pytest.raises(ValueError, match="axis must be 'row' or 'col'"):
        af.explain(x, w.row, heads, axis="diag", device="a100")
    with pytest.raises(ValueError, match="x has D = "):
        af.explain(x[..., :-8], w.row, heads, device="a100")
    with pytest.raises(ValueError, match="mask has shape"):
        af.explain(x, w.row, heads, mask=mask[:, :4], device="a100")
    with pytest.raises(ValueError, match="missing"):
        af.explain(x, w, device=dict(arch=90))


def test_info_prints_plans_and_tiles():
    import subprocess
    import sys

    dt, dim, heads = sorted(_ext.specs())[0]
    short = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[dt]
    run = lambda *a: subprocess.run([sys.executable, "-m", "axial_fused.info", *a], capture_output=True, text=True)
    out = run("--plan", f"{short}:{dim}x{heads}", "1,8,1000", "--mask", "--device", "a100")
    assert out.returncode == 0 and "row: two_kernel: terms_prep -> ln_qkv_mma -> attn_out_mma" in out.stdout, out
    bad = run("--plan", "bf16:96x3", "1,8,8", "--device", "a100")
    assert bad.returncode != 0 and "no compiled specialization" in bad.stderr
    tiles = run("--tiles").stdout
    for dt, dim, heads in _ext.specs():
        assert f"{dt} dim {dim} heads {heads}:" in tiles
    assert "mma_sync" in tiles and "BM=" in tiles


def test_explain_axial_weights_takes_axial_attentions_arguments():
    spec = sorted(_ext.specs())[0]
    dt, dim, heads = spec
    dtype = cases.DTYPES[dt]
    w = make_weights(dim, heads, dtype, "cpu")
    x = rand_x((2, 16, 300, dim), dtype, "cpu", seed=2)
    mask = torch.ones(2, 16, 300, dtype=torch.bool)
    row, col = af.explain(x, w, mask=mask, row_bias=torch.zeros(2, heads, 300, 300, dtype=dtype), device="a100")
    assert row == kernels(spec, 32, 300, A100, mask=True, bias=True)  # both passes see the mask ...
    assert col == kernels(spec, 600, 16, A100, mask=True)              # ... each its own bias
    assert af.explain(x, w, residual=False, device="a100")[0].extras
    with pytest.raises(ValueError, match="row_bias and col_bias"):
        af.explain(x, w, mask=mask, bias=torch.zeros(2, heads, 300, 300, dtype=dtype), device="a100")
    with pytest.raises(ValueError, match="axial_attention's arguments"):
        af.explain(x, w.row, heads, row_bias=torch.zeros(2, heads, 300, 300, dtype=dtype), device="a100")
