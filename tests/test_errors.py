"""Bad input (CPU, in CI): the rows of docs/errors.md that need no GPU, through the Python API and
through the registered operator on meta tensors (its shape-only kernel runs the same shape, dtype and
device checks as the CUDA kernel). tests/test_api.py holds the first error tests; this file extends
them, and checks that the table and the tests stay in step."""
from __future__ import annotations

import math
import os
import re
import warnings

import pytest
import torch

import axial_fused as af
from axial_fused import _ext
from helpers import make_weights, pass64, rand_x, rel_err, to64

needs_ext = pytest.mark.skipif(_ext.C is None, reason=f"extension not built: {_ext.error}")

D, HEADS = 64, 4
ROOT = os.path.join(os.path.dirname(__file__), "..")


@pytest.fixture
def w():
    return make_weights(D, HEADS, torch.float32, seed=21)


def x_cpu(shape=(1, 2, 3, D), dtype=torch.float32):
    return rand_x(shape, dtype, "cpu", seed=22)


# ---- the Python API -----------------------------------------------------------------------------

def test_num_heads_rejected(w):
    x = x_cpu()
    for heads, exc, msg in [(0, ValueError, "num_heads = 0"), (-4, ValueError, "num_heads = -4"),
                            (5, ValueError, "not divisible by num_heads = 5"), (True, TypeError, "got bool"),
                            (4.0, TypeError, "got float"), ("4", TypeError, "got str")]:
        with pytest.raises(exc, match=msg):
            af.axial_pass(x, w.row, num_heads=heads, axis="row")
        with pytest.raises(exc, match=msg):
            af.AxialWeights.create(w.row, w.col, heads)


def test_eps_rejected(w):
    x = x_cpu()
    for eps in (0.0, -1e-5, math.nan, math.inf):
        with pytest.raises(ValueError, match="eps must be a positive finite number"):
            af.axial_pass(x, w.row, num_heads=HEADS, axis="col", eps=eps)
        with pytest.raises(ValueError, match="eps must be a positive finite number"):
            af.AxialWeights.create(w.row, w.col, HEADS, eps)
        with pytest.raises(ValueError, match="eps must be a positive finite number"):  # built without create()
            af.axial_attention(x, w._replace(eps=eps))
    with pytest.raises(TypeError, match="eps must be a float, got str"):
        af.axial_pass(x, w.row, num_heads=HEADS, axis="row", eps="1e-5")


def test_missing_weights(w):
    x = x_cpu()
    with pytest.raises(TypeError, match=r"row\.norm_bias must be a torch.Tensor, got NoneType"):
        af.AxialWeights.create(w.row._replace(norm_bias=None), w.col, HEADS)
    with pytest.raises(TypeError, match=r"pass_weights\.out_bias must be a torch.Tensor, got NoneType"):
        af.axial_pass(x, w.row._replace(out_bias=None), num_heads=HEADS, axis="row")
    with pytest.raises(TypeError, match="pass_weights must be a PassWeights"):
        af.axial_pass(x, tuple(w.row)[:4], num_heads=HEADS, axis="row")
    sd = af.reference.AxialAttentionReference(D, HEADS).state_dict()
    del sd["col_out.bias"]
    with pytest.raises(ValueError, match=r"state_dict lacks \['col_out.bias'\]"):
        af.AxialWeights.from_state_dict(sd, num_heads=HEADS)
    m = af.reference.AxialAttentionReference(D, HEADS)
    del m.col_qkv
    with pytest.raises(ValueError, match="lacks the reference parameter names"):
        af.AxialWeights.from_module(m)


def test_weight_dtype_and_device_mixes(w):
    with pytest.raises(TypeError, match="row weights are torch.float32 but column weights are torch.bfloat16"):
        af.AxialWeights.create(w.row, af.PassWeights(*(t.bfloat16() for t in w.col[:5])), HEADS)
    with pytest.raises(TypeError, match=r"col\.qkv_weight is torch.float16 .* share one dtype"):
        af.AxialWeights.create(w.row, w.col._replace(qkv_weight=w.col.qkv_weight.half()), HEADS)
    with pytest.raises(ValueError, match=r"row\.out_weight is on meta but row\.norm_weight is on cpu"):
        af.AxialWeights.create(w.row._replace(out_weight=w.row.out_weight.to("meta")), w.col, HEADS)
    with pytest.raises(ValueError, match="row weights are on cpu but column weights are on meta"):
        af.AxialWeights.create(w.row, af.PassWeights(*(t.to("meta") for t in w.col[:5])), HEADS)


def test_zero_size_axes(w):
    for shape in [(1, 0, 3, D), (1, 3, 0, D), (0, 0, 3, D)]:
        with pytest.raises(ValueError, match="H, W and D must be at least 1"):
            af.axial_attention(x_cpu(shape), w)
        with pytest.raises(ValueError, match="H, W and D must be at least 1"):
            af.axial_pass(x_cpu(shape), w.row, num_heads=HEADS, axis="col")
    w0 = af.AxialWeights(*(af.PassWeights(torch.ones(0), torch.ones(0), torch.ones(0, 0), torch.ones(0, 0),
                                          torch.ones(0)) for _ in range(2)), HEADS)
    with pytest.raises(ValueError, match="H, W and D must be at least 1"):
        af.axial_attention(torch.ones(1, 2, 2, 0), w0)
    with pytest.raises(ValueError, match="x has D = 0"):
        af.axial_attention(torch.ones(1, 2, 2, 0), w)


def test_float64_falls_back(w):
    """float64 is not a fused dtype: the reference computes it (correctly), strict raises."""
    w64 = to64(w)
    x = x_cpu((2, 3, 5, D), torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        out = af.axial_pass(x, w64.row, num_heads=HEADS, axis="row", eps=w.eps)
    assert rel_err(out, pass64(x, w64.row, HEADS, "row", w.eps)) < 1e-12
    with pytest.raises(af.FusedUnavailableError):
        af.axial_attention(x, w64, strict=True)


# ---- the registered operator on meta tensors ----------------------------------------------------

def meta_args(B=2, H=3, W=5, dtype=torch.bfloat16):
    x = torch.empty(B, H, W, D, device="meta", dtype=dtype)
    ws = [torch.empty(s, device="meta", dtype=dtype) for s in [(D,), (D,), (3 * D, D), (D, D), (D,)]]
    return x, ws


FIELDS = ("norm_weight", "norm_bias", "qkv_weight", "out_weight", "out_bias")


def _op_cases():
    """(id, mutate(x, row_ws, col_ws, kw) -> (x, row_ws, col_ws, kw), exception, message)."""
    def weight(i, new, which=0):
        def mutate(x, r, c, kw):
            (r, c)[which][i] = new((r, c)[which][i])
            return x, r, c, kw
        return mutate

    def with_x(new):
        return lambda x, r, c, kw: (new(x), r, c, kw)

    def with_kw(**upd):
        return lambda x, r, c, kw: (x, r, c, {**kw, **upd})

    cases = [
        ("rank3", with_x(lambda x: x[0]), ValueError, r"x must be 4-D \[B, H, W, D\], got shape \[3, 5, 64\]"),
        ("rank5", with_x(lambda x: x[None]), ValueError, "x must be"),
        ("D_mismatch", with_x(lambda x: torch.empty(2, 3, 5, 2 * D, device="meta", dtype=x.dtype)), ValueError,
         r"expected \[128\] for D = 128"),
        ("heads_not_dividing", with_kw(num_heads=5), ValueError, "not divisible by num_heads = 5"),
        ("heads_zero", with_kw(num_heads=0), ValueError, "num_heads = 0"),
        ("eps_zero", with_kw(eps=0.0), ValueError, "eps must be a positive finite number"),
        ("eps_nan", with_kw(eps=math.nan), ValueError, "eps must be a positive finite number"),
        ("x_float64", with_x(lambda x: x.double()), TypeError, "supported: float32, float16, bfloat16"),
        ("x_int32", with_x(lambda x: x.int()), TypeError, "supported: float32, float16, bfloat16"),
        ("x_dtype_vs_weights", with_x(lambda x: x.float()), TypeError, "must share one dtype"),
        ("x_meta_weights_cpu", weight(0, lambda t: torch.zeros(t.shape, dtype=t.dtype)), ValueError,
         "norm_weight is on cpu but x is on meta"),
        ("H_zero", with_x(lambda x: x[:, :0]), ValueError, "H, W and D must be at least 1"),
        ("W_zero", with_x(lambda x: x[:, :, :0]), ValueError, "H, W and D must be at least 1"),
        ("length_above_2_24", with_x(lambda x: torch.empty(1, 2 ** 24 + 1, 1, D, device="meta", dtype=x.dtype)),
         ValueError, "too large"),
        ("H_times_W_2_31", with_x(lambda x: torch.empty(1, 2 ** 16, 2 ** 15, D, device="meta", dtype=x.dtype)),
         ValueError, "too large"),
    ]
    for i, f in enumerate(FIELDS):
        for which, prefix in ((0, "row_"), (1, "col_")):
            cases.append((f"{prefix}{f}_shape", weight(i, lambda t: t[..., :-1], which), ValueError,
                          f"{prefix}{f} has shape"))
            cases.append((f"{prefix}{f}_missing", weight(i, lambda t: None, which), ValueError,
                          f"{prefix}{f} is missing"))
            cases.append((f"{prefix}{f}_dtype", weight(i, lambda t: t.float(), which), TypeError,
                          f"{prefix}{f} is Float but x is BFloat16"))
    return cases


@needs_ext
@pytest.mark.parametrize("case", _op_cases(), ids=lambda c: c[0])
def test_op_meta_rejects(case):
    """Each bad input through torch.ops.axial_fused.axial_attention (and axial_pass, with the row
    weights, whose names then carry no prefix) on meta tensors: the error the CUDA kernel gives."""
    name, mutate, exc, msg = case
    x, ws = meta_args()
    x, r, c, kw = mutate(x, list(ws), list(ws), dict(num_heads=HEADS, eps=1e-5))
    with pytest.raises(exc, match=msg):
        torch.ops.axial_fused.axial_attention(x, *r, *c, kw["num_heads"], kw["eps"])
    if not name.startswith("col_"):
        with pytest.raises(exc, match=msg.replace("row_", "")):
            torch.ops.axial_fused.axial_pass(x, *r, kw["num_heads"], 0, kw["eps"])


@needs_ext
def test_op_meta_accepts_valid_and_empty_batch():
    for B in (0, 2):
        x, ws = meta_args(B=B)
        for axis in (0, 1):
            assert torch.ops.axial_fused.axial_pass(x, *ws, HEADS, axis, 1e-5).shape == x.shape
        assert torch.ops.axial_fused.axial_attention(x, *ws, *ws, HEADS, 1e-5).shape == x.shape
    # The number in the message: a build whose libstdc++ is a private static copy formatted integers
    # as nothing (here) or crashed (on the H200); see setup.py.
    with pytest.raises(ValueError, match=r"axis must be 0 \(row\) or 1 \(col\), got 2\b"):
        torch.ops.axial_fused.axial_pass(x, *ws, HEADS, 2, 1e-5)


@needs_ext
def test_op_checks_under_fake_tensors():
    """torch.compile traces with fake tensors: concrete sizes are checked; symbolic ones pass through."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    x, ws = meta_args(dtype=torch.float32)
    real = [torch.randn(t.shape) for t in [x, *ws]]
    static = FakeTensorMode()
    fx, *fws = [static.from_tensor(t) for t in real]
    with static:
        assert torch.ops.axial_fused.axial_attention(fx, *fws, *fws, HEADS, 1e-5).shape == x.shape
        with pytest.raises(ValueError, match="not divisible by num_heads = 3"):
            torch.ops.axial_fused.axial_attention(fx, *fws, *fws, 3, 1e-5)
    dynamic = FakeTensorMode(shape_env=ShapeEnv())
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 4)
    sx = dynamic.from_tensor(real[0], symbolic_context=ctx)
    sws = [dynamic.from_tensor(t) for t in real[1:]]
    with dynamic:
        y = torch.ops.axial_fused.axial_pass(sx, *sws, HEADS, 1, 1e-5)
    assert y.dim() == 4 and not isinstance(y.shape[0], int)  # symbolic: shape passed through unchecked


# ---- the table ----------------------------------------------------------------------------------

def test_every_row_has_a_test():
    """Each test docs/errors.md names exists in the file its prefix names."""
    files = {"E": "test_errors.py", "C": "test_api.py", "G": "test_kernel_edge_cases.py", "F": "test_features.py",
             "P": "test_protein.py"}
    with open(os.path.join(ROOT, "docs", "errors.md")) as f:
        doc = f.read()
    rows = [line for line in doc.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) >= 30
    named = re.findall(r"\b([ECGFP]):(test_\w+)", doc)
    for row in rows:
        assert re.search(r"\b[ECGFP]:test_\w+", row), f"row without a test: {row[:60]}"
    for prefix, test in set(named):
        with open(os.path.join(ROOT, "tests", files[prefix])) as f:
            assert re.search(rf"^def {test}\(", f.read(), re.M), f"{files[prefix]} has no {test}"
