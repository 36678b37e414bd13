"""Bad input (CPU, in CI): the rows of docs/errors.md that need no GPU, through the Python API and
through the registered operator on meta tensors (its shape-only kernel runs the same shape, dtype and
device checks as the CUDA kernel). tests/test_api.py holds the first error tests; this file extends
them, checks that the operators' Python messages are the CUDA kernel's (csrc/ops.cpp), and that the
table and the tests stay in step."""
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


# ---- the operators' messages: the Python checks against the CUDA kernel's --------------------------
# The CUDA kernel (csrc/ops.cpp) and the operators' Python kernels (axial_fused/_checks.py) make the same
# checks with the same messages; no CUDA kernel runs here, so its messages are read from its source.

OPS_CPP = os.path.join(ROOT, "csrc", "ops.cpp")
# STD_TORCH_CHECK messages of ops.cpp that report a CUDA error, not a bad argument.
NOT_ARGUMENT_CHECKS = ("kernel launch failed",)


def _cpp_arguments(src: str, start: int) -> tuple[list[str], int]:
    """The top-level arguments of the call whose "(" is at src[start], and the index past its ")"."""
    args, depth, i, arg_start = [], 0, start, start + 1
    while True:
        ch = src[i]
        if ch in "\"'":  # a string or character literal, escapes and all
            j = i + 1
            while src[j] != ch:
                j += 2 if src[j] == "\\" else 1
            i = j
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append(src[arg_start:i].strip())
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(src[arg_start:i].strip())
            arg_start = i + 1
        i += 1


LITERALS = re.compile(r'\s*(?:"(?:[^"\\]|\\.)*"\s*)+')


def cpp_templates(path: str = None) -> dict[str, re.Pattern]:
    """Each argument check's message in ops.cpp (STD_TORCH_CHECK(condition, part, ...)) as a pattern:
    its string literals as they are, every other part (a value: a name, a shape, a dtype) as `.*?`;
    keyed by its text with each value as `{}`."""
    with open(path or OPS_CPP) as f:
        src = re.sub(r"//[^\n]*", "", f.read())
    templates = {}
    for m in re.finditer(r"\bSTD_TORCH_CHECK\s*\(", src):
        args, _ = _cpp_arguments(src, m.end() - 1)
        text, pattern = "", ""
        for part in args[1:]:
            if LITERALS.fullmatch(part):
                lit = "".join(bytes(s, "utf-8").decode("unicode_escape") for s in re.findall(r'"((?:[^"\\]|\\.)*)"', part))
                text, pattern = text + lit, pattern + re.escape(lit)
            else:
                text, pattern = text + "{}", pattern + ".*?"
        if not any(n in text for n in NOT_ARGUMENT_CHECKS):
            templates[text] = re.compile(pattern, re.S)
    return templates


def _op_message_cases():
    """{docs/errors.md row (None: a check the table has no row for): [(call, exception)]}: `call` makes
    the operators' Python kernels raise one of their messages: the registered operators on meta
    tensors (their fake kernels), or _checks' operator checks where only the CUDA kernel checks."""
    from axial_fused import _checks

    op = torch.ops.axial_fused
    e = lambda *s, dtype=torch.bfloat16, device="meta": torch.empty(*s, device=device, dtype=dtype)
    x = e(2, 3, 5, D)
    sq = e(2, 3, 3, D)
    shapes = [(D,), (D,), (3 * D, D), (D, D), (D,)]
    ws = [e(*s) for s in shapes]

    def with_row(i, t):
        return [t if j == i else w for j, w in enumerate(ws)]

    def attention(xx=x, row=ws, col=ws, heads=HEADS, eps=1e-5, **kw):
        return lambda: op.axial_attention(xx, *row, *col, heads, eps, **kw)

    def pass_(xx=x, w=ws, heads=HEADS, axis=0, eps=1e-5, **kw):
        return lambda: op.axial_pass(xx, *w, heads, axis, eps, **kw)

    wide = 1088  # past bias_weight's 1024 channels
    ws_wide = [e(*s) for s in [(wide,), (wide,), (3 * wide, wide), (wide, wide), (wide,)]]
    pb = dict(x=e(1, 3, 5, 16, dtype=torch.float32), norm_weight=e(16, dtype=torch.float32),
              norm_bias=e(16, dtype=torch.float32), weight=e(4, 16, dtype=torch.float32), eps=1e-5)

    def pair_bias(**kw):
        return lambda: op.pair_bias(**{**pb, **kw})

    V, T = ValueError, TypeError
    return {
        2: [(pass_(xx=x[0]), V), (attention(xx=x[None]), V)],
        3: [(attention(xx=e(2, 3, 5, 2 * D)), V)],
        4: [(pass_(heads=5), V), (attention(heads=0), V)],
        6: [(pass_(eps=0.0), V), (attention(eps=math.nan), V), (pass_(eps=-math.inf), V)],
        7: [(attention(row=with_row(2, e(D, 3 * D))), V), (pass_(w=with_row(3, e(D, D + 1))), V)],
        8: [(attention(col=with_row(4, None)), V), (pass_(w=with_row(0, None)), V)],
        10: [(attention(col=with_row(2, e(3 * D, D, dtype=torch.float16))), T)],
        11: [(attention(row=with_row(1, e(D, device="cpu"))), V)],
        12: [(pass_(xx=e(2, 3, 5, D, dtype=torch.float32)), T)],
        13: [(pass_(xx=e(2, 3, 5, D, dtype=torch.int32)), T), (attention(xx=e(2, 3, 5, D, dtype=torch.bool)), T)],
        14: [(pass_(xx=e(2, 3, 5, D, dtype=torch.float64), w=[e(*s, dtype=torch.float64) for s in shapes]), T)],
        15: [(pass_(w=[e(*s, device="cpu") for s in shapes]), V)],
        22: [(pass_(xx=x[:, :0]), V), (attention(xx=x[:, :, :0]), V),
             (pass_(xx=e(1, 2, 2, 0), w=[e(*s) for s in [(0,), (0,), (0, 0), (0, 0), (0,)]]), V)],
        25: [(pass_(xx=e(1, 2 ** 16, 2 ** 15, D)), V), (attention(xx=e(1, 2 ** 24 + 1, 1, D)), V)],
        26: [(pass_(axis=2), V), (pass_(axis=-1), V)],
        29: [(lambda: _checks.check_spec(x, 3, frozenset()), V)],
        31: [(pass_(mask=e(2, 5, 3, dtype=torch.bool)), V), (attention(mask=e(3, 5, dtype=torch.bool)), V)],
        32: [(pass_(mask=e(2, 3, 5, dtype=torch.int32)), T), (attention(mask=e(2, 3, 5, dtype=torch.complex64)), T)],
        33: [(pass_(mask=e(2, 3, 5, dtype=torch.bool, device="cpu")), V)],
        34: [(pass_(bias=e(4, 5, 5)), V), (attention(row_bias=e(1, 3, 5, 5)), V),
             (attention(col_bias=e(1, 4, 5, 5)), V), (pass_(axis=1, bias=e(1, 4, 5, 5)), V)],
        35: [(attention(row_bias=e(3, 4, 5, 5)), V)],
        36: [(pass_(bias=e(1, 4, 5, 5, dtype=torch.float16)), T), (attention(col_bias=e(1, 4, 3, 3, device="cpu")), V)],
        37: [(attention(row_qkv_bias=e(D)), V), (attention(col_gate_weight=e(D, 2 * D), col_gate_bias=e(D)), V),
             (pass_(gate_bias=e(D + 1), gate_weight=e(D, D)), V), (pass_(qkv_bias=e(3 * D, dtype=torch.float32)), T)],
        38: [(pass_(gate_bias=e(D)), V), (attention(row_gate_bias=e(D)), V)],
        45: [(pair_bias(x=pb["x"][0]), V), (pair_bias(weight=e(4, 8, dtype=torch.float32)), V),
             (pair_bias(weight=e(33, 16, dtype=torch.float32)), V),
             (pair_bias(x=e(1, 3, 5, 1025, dtype=torch.float32), norm_weight=e(1025, dtype=torch.float32),
                        norm_bias=e(1025, dtype=torch.float32), weight=e(4, 1025, dtype=torch.float32)), V),
             (pair_bias(norm_weight=e(8, dtype=torch.float32)), V), (pair_bias(norm_bias=e(16)), T),
             (pair_bias(norm_weight=e(16, dtype=torch.float32, device="cpu")), V),
             (pair_bias(weight=e(4, 16, dtype=torch.float16)), T),
             (pair_bias(weight=e(4, 16, dtype=torch.float32, device="cpu")), V), (pair_bias(eps=0.0), V),
             (pair_bias(**{k: v.double() for k, v in pb.items() if k != "eps"}), T)],
        46: [(pass_(xx=sq, bias_weight=e(3, D)), V), (pass_(bias_weight=e(4, D)), V),
             (attention(xx=sq, row_bias=e(1, 4, 3, 3), row_bias_weight=e(4, D)), V),
             (pass_(xx=e(2, 3, 3, wide), w=ws_wide, bias_weight=e(4, wide)), V)],
        None: [(lambda: _checks.check_op_shapes(None, HEADS, 1e-5, []), V), (lambda: _checks.check_cuda(x), V),
               (lambda: _checks.check_cuda(x, "pair_bias: "), V), (pair_bias(weight=None), V),
               (pair_bias(norm_weight=None), V)],
    }


def _op_rows() -> dict[int, str]:
    """{row: its "Registered op" cell} for each docs/errors.md row whose operator raises TypeError or
    ValueError (not the dispatcher, not a fallback)."""
    with open(os.path.join(ROOT, "docs", "errors.md")) as f:
        rows = [[c.strip() for c in line.split(" | ")] for line in f if re.match(r"\| \d+ \|", line)]
    return {int(r[0].strip("| ")): r[3] for r in rows if re.search(r"\b(Type|Value)Error\b", r[3])}


def _message(call, exc) -> str:
    with pytest.raises(exc) as info:
        call()
    return str(info.value)


@needs_ext
def test_op_messages_match_the_cuda_kernel():
    """For every row of docs/errors.md whose operator raises: the Python checks' message for each bad
    input of the row is one of csrc/ops.cpp's (its text, the values aside), the row's quoted op
    messages are among them, and its exceptions are the ones the row names. And every message of
    ops.cpp's checks has a Python counterpart among these inputs."""
    templates = cpp_templates()
    cases = _op_message_cases()
    rows = _op_rows()
    assert set(rows) <= set(cases), f"rows with operator errors but no case here: {sorted(set(rows) - set(cases))}"
    matched = set()
    for row, row_cases in cases.items():
        cell = rows.get(row, "")
        if row is not None:
            assert row in rows, f"row {row} names no TypeError / ValueError for the operator"
        messages = []
        for call, exc in row_cases:
            assert row is None or exc.__name__ in cell, f"row {row}: {exc.__name__} is not in the row's '{cell}'"
            msg = _message(call, exc)
            hits = [t for t, p in templates.items() if p.fullmatch(msg)]
            assert hits, f"row {row}: {msg!r} is no message of csrc/ops.cpp"
            matched.update(hits)
            messages.append(msg)
        for quoted in re.findall(r"`([^`]+)`", cell):
            pattern = re.escape(quoted).replace(r"\ \.\.", ".*?").replace(r"\.\.", ".*?").replace("<name>", r"\w+")
            assert any(re.search(pattern, m) for m in messages), f"row {row}: no message says `{quoted}`: {messages}"
    missing = set(templates) - matched
    assert not missing, f"csrc/ops.cpp messages that no Python check gives here: {sorted(missing)}"


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
