"""The planner (csrc/pass.cpp, plan_pass): which path runs a pass, how many sequences a block packs, and
K1's blocks an SM on the two-kernel path, one test per rule of docs/design.md's "The planner". No GPU
needed: _C.plan and _C.k1_per_sm take the device as numbers (the H200's: 132 SMs, 227 KB of shared
memory a block, compute capability 9.0).
"""
from __future__ import annotations

import pytest

from axial_fused import _ext

pytestmark = pytest.mark.skipif(_ext.C is None, reason=f"extension not built: {_ext.error}")

FUSED, TWO_KERNEL, FUSED_SM90 = 0, 1, 2  # PassPath
H200 = dict(arch=90, sm90a=True, sms=132, smem_optin=232448)
A100 = dict(arch=80, sm90a=False, sms=108, smem_optin=166912)


def plan(spec, num_seq, length, device=H200, tf32=False, forced=-1, gated=False):
    dt, dim, heads = spec
    return _ext.C.plan(dt, dim, heads, num_seq, length, tf32, device["arch"], device["sm90a"], device["sms"],
                       device["smem_optin"], forced, gated)


def compiled(pred):
    """The compiled specializations that satisfy pred (a test is skipped where none is)."""
    found = sorted(s for s in _ext.specs() if pred(*s)) if _ext.C is not None else []
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
        _ext.C.plan("bfloat16", 96, 3, 1, 1, False, 90, True, 132, 232448, -1, False)


def k1_per_sm(spec, num_seq, length, device=H200):
    dt, dim, heads = spec
    return _ext.C.k1_per_sm(dt, dim, heads, num_seq, length, device["arch"], device["sm90a"], device["sms"],
                            device["smem_optin"])


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
