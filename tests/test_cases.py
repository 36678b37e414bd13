"""axial_fused.cases, the one generator of the kernels' cases (CPU): what the kernel tests, scripts/fuzz.py
and the benchmark take from it."""
from __future__ import annotations

import dataclasses

import pytest

from axial_fused import bench, cases

DEFAULT = sorted(cases.default_specs(), key=lambda s: (s[1], s[2], s[0]))  # as cases.specs() orders them


def test_sweep_puts_every_length_on_both_axes():
    """Over the default build's specializations, every length of LENGTHS is some case's H and some case's
    W, after the cut to max_elems; four cases a specialization, none past max_elems."""
    sweep = cases.sweep(DEFAULT, 6_000_000)
    assert len(sweep) == 4 * len(DEFAULT)
    assert set(cases.LENGTHS) <= {c.H for c in sweep} and set(cases.LENGTHS) <= {c.W for c in sweep}
    assert all(c.B * c.H * c.W * c.dim <= 6_000_000 for c in sweep)


def test_grid_leaves_out_what_a_forced_path_cannot_take():
    """The forced Hopper fused kernel: not for float32 or head_dim 64, not with the gate, not past 128
    tokens in the call's passes (the column pass alone may be short where the row pass is long)."""
    specs = [("bfloat16", 128, 4), ("float32", 128, 4), ("bfloat16", 256, 4)]
    shapes = [(2, 64, 129), (1, 5, 100)]
    got = cases.grid(specs, shapes, (cases.ALL, cases.UNGATED), ("auto", "fused_sm90"), ("attention", "row", "col"))
    sm90 = {(c.spec, c.shape[:3], c.features, c.fn) for c in got if c.path == "fused_sm90"}
    assert sm90 == {(("bfloat16", 128, 4), (2, 64, 129), cases.UNGATED, "col")} | {
        (("bfloat16", 128, 4), (1, 5, 100), cases.UNGATED, fn) for fn in ("attention", "row", "col")}
    assert len([c for c in got if c.path == "auto"]) == 3 * 2 * 2 * 3
    assert all(c.unservable() is None for c in got)


def test_draws_are_reproducible_and_features_come_last():
    """A draw is a function of (seed, index); without --features the same draws with the features (and
    the bias's form) off; the B * H * W * dim cap holds; about one in ten is unsupported on purpose."""
    draws = [cases.draw(3, i, 100_000, DEFAULT, features=True) for i in range(300)]
    assert draws == [cases.draw(3, i, 100_000, DEFAULT, features=True) for i in range(300)]
    assert draws != [cases.draw(4, i, 100_000, DEFAULT, features=True) for i in range(300)]
    plain = [cases.draw(3, i, 100_000, DEFAULT) for i in range(300)]
    assert all(p.features == cases.PLAIN for p in plain)
    for d, p in zip(draws, plain):
        same = dataclasses.replace(d, features=cases.PLAIN, bias_batch1=p.bias_batch1, bias_f32=p.bias_f32,
                                   bias_transposed=p.bias_transposed)
        if d.features.bias_weight:  # (the bias from LN(x): the grid made square)
            same = dataclasses.replace(same, H=p.H, W=p.W)
            assert d.H == d.W == min(p.H, p.W)
        assert same == p
    assert sum(d.features != cases.PLAIN for d in draws) > 100
    assert all(max(d.B, 1) * d.H * d.W * d.dim <= 100_000 for d in draws if d.unsupported != "uncompiled")
    assert 10 <= sum(d.unsupported is not None for d in draws) <= 60


def test_feature_sets_name_themselves():
    for name, f in cases.FEATURE_SETS.items():
        assert cases.Features.of(*f.names) == f
        assert f.name == name or name == "all"
    assert cases.ALL.name == "mask+bias+gate+qkv_bias+update_only" and not cases.ALL.residual
    with pytest.raises(ValueError, match="unknown feature.*'residual'.*supported: mask, bias"):
        cases.Features.of("mask", "residual")


def test_the_benchmark_suite_is_the_cases_suite():
    assert list(bench.SUITE) == list(cases.SUITE)
    for name, (B, H, W, D, heads, dt) in bench.SUITE.items():
        assert cases.SUITE[name] == cases.Case(dt, D, heads, B, H, W)
    assert set(bench.FEATURE_SETS) >= {"plain", "mask", "bias", "gate", "qkv_bias", "update_only", "all"}
