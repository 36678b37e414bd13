"""The optional features of a pass (key mask, logit bias given or computed from LN(x), sigmoid gate,
q/k/v bias, update only)
against helpers.pass64, the float64 reference written from AF2's supplementary Algorithms 7, 8, 13
and 14 (and the ESM MSA Transformer's column attention: q/k/v biases, a padding mask).

CPU (in CI): the PyTorch reference path (axial_fused.reference, the fallback) against pass64, the
uniform attention of a query with no key present, and the bad-input errors of docs/errors.md rows
31-40. GPU: every kernel path forced in turn (the fused, two-kernel and Hopper fused paths) and the
automatic choice, every compiled dtype, the features alone and together, random masks with padded
tails, fully masked sequences and batch elements, large biases, broadcast and strided bias and mask,
both passes and the two-pass call, odd lengths, residual=False, and K1's three-block form; the cases
from axial_fused.cases, each checked by helpers.check (error(fused vs fp64) <= 2 * error(PyTorch at
that dtype vs fp64) + floor, outputs poisoned first).
"""
from __future__ import annotations

import pytest
import torch

import axial_fused as af
from axial_fused import cases
from axial_fused.plan import plan_pass
from helpers import (DTYPES, OP, PATHS, attention64, check, check_case, every_path, feature_inputs, force_path,
                     make_bias, make_mask, make_weights, pass64, paths_for, quiet, rand_x, rel_err, small_specs, specs,
                     tf32, to64)

# ---- CPU: the reference path ----------------------------------------------------------------------

# Each feature alone, and several together (cases.FEATURE_SETS but the plain call).
COMBOS = [f for name, f in cases.FEATURE_SETS.items() if name != "plain"]


@pytest.mark.parametrize("features", COMBOS, ids=lambda f: f.name)
@pytest.mark.parametrize("axis", ["row", "col"])
def test_reference_features_match_float64(features, axis):
    """The PyTorch reference path (the fallback) with each feature, against pass64."""
    B, H, W, dim, heads = 2, 5, 7, 32, 4
    w, mask, bias, residual = feature_inputs(features, B, H, W, dim, heads, torch.float32, "cpu", 3, axis)
    x = rand_x((B, H, W, dim), torch.float32, "cpu", 4)
    out = quiet(af.axial_pass, x, w.row, num_heads=heads, axis=axis, eps=w.eps, mask=mask, bias=bias, residual=residual)
    ref = pass64(x, to64(w).row, heads, axis, w.eps, mask, bias, residual)
    assert rel_err(out, ref) < 1e-5


def test_reference_two_passes_match_float64():
    B, H, W, dim, heads = 2, 6, 5, 32, 2
    w = make_weights(dim, heads, torch.float32, seed=5, qkv_bias=True, gate=True)
    mask = make_mask(B, H, W, "cpu", 6)
    rb, cb = make_bias(1, heads, W, "cpu", torch.float32, 7), make_bias(B, heads, H, "cpu", torch.float32, 8)
    x = rand_x((B, H, W, dim), torch.float32, "cpu", 9)
    for residual in (True, False):
        out = quiet(af.axial_attention, x, w, mask=mask, row_bias=rb, col_bias=cb, residual=residual)
        assert rel_err(out, attention64(x, to64(w), mask, rb, cb, residual)) < 1e-5


def test_reference_bias_weight_matches_float64():
    """bias_weight (the logit bias computed from the pass's own LayerNorm output) on the reference
    path, each pass and both, with a mask and the gate, against pass64 (AF2's Algorithms 13 and 14);
    and the same as that bias computed beforehand and given as `bias`."""
    B, L, dim, heads = 2, 6, 32, 4
    w = make_weights(dim, heads, torch.float32, seed=60, gate=True, bias_weight=True)
    mask = make_mask(B, L, L, "cpu", 61)
    x = rand_x((B, L, L, dim), torch.float32, "cpu", 62)
    w64 = to64(w)
    for axis, pw, pw64 in (("row", w.row, w64.row), ("col", w.col, w64.col)):
        out = quiet(af.axial_pass, x, pw, num_heads=heads, axis=axis, eps=w.eps, mask=mask, residual=False)
        assert rel_err(out, pass64(x, pw64, heads, axis, w.eps, mask, residual=False)) < 1e-5
        t = torch.nn.functional.linear(torch.nn.functional.layer_norm(x, (dim,), pw.norm_weight, pw.norm_bias, w.eps),
                                       pw.bias_weight).permute(0, 3, 1, 2)  # [B, heads, I, J] from x[b, i, j]
        given = quiet(af.axial_pass, x, pw._replace(bias_weight=None), num_heads=heads, axis=axis, eps=w.eps,
                      mask=mask, bias=t if axis == "row" else t.transpose(-1, -2), residual=False)
        assert rel_err(out, given) < 1e-6
    assert rel_err(quiet(af.axial_attention, x, w, mask=mask), attention64(x, w64, mask)) < 1e-5


def test_no_key_present_attends_uniformly():
    """A query whose keys are all absent attends to the mean of its sequence's values (every logit
    replaced by the same value), whatever the bias: the same output as logits all equal (q = 0)."""
    B, H, W, dim, heads = 1, 3, 6, 32, 2
    w = make_weights(dim, heads, torch.float64, seed=10, qkv_bias=True)
    x = rand_x((B, H, W, dim), torch.float64, "cpu", 11)
    mask = torch.ones(B, H, W, dtype=torch.bool)
    mask[0, 1] = False  # the row pass's sequence 1 has no key
    bias = make_bias(B, heads, W, "cpu", torch.float64, 12, scale=50.0)
    out = af.reference.reference_pass(x, *w.row, num_heads=heads, axis="row", eps=w.eps, mask=mask, bias=bias)
    qkv_w, qkv_b = w.row.qkv_weight.clone(), w.row.qkv_bias.clone()
    qkv_w[:dim], qkv_b[:dim] = 0, 0  # q = 0: every logit 0
    flat = w.row._replace(qkv_weight=qkv_w, qkv_bias=qkv_b)
    uniform = af.reference.reference_pass(x, *flat, num_heads=heads, axis="row", eps=w.eps)
    assert torch.isfinite(out).all()
    assert rel_err(out[0, 1], uniform[0, 1]) < 1e-12
    assert rel_err(out[0, 1], pass64(x, w.row, heads, "row", w.eps, mask, bias)[0, 1]) < 1e-12


def test_old_five_field_calls_unchanged():
    """PassWeights of five fields, 5-tuples and op calls with the five weights keep their meaning."""
    w = make_weights(32, 4, seed=13)
    five = af.PassWeights(*w.row[:5])
    assert five.qkv_bias is None and five.gate_weight is None and five.gate_bias is None
    x = rand_x((1, 3, 4, 32), torch.float32, "cpu", 14)
    a = quiet(af.axial_pass, x, tuple(w.row[:5]), num_heads=4, axis="row")
    assert rel_err(a, pass64(x, to64(w).row, 4, "row", w.eps)) < 1e-5


# ---- CPU: bad input (docs/errors.md rows 31-39) ----------------------------------------------------

def _api_case(x, w, **kw):
    return quiet(af.axial_pass, x, kw.pop("pw", w.row), num_heads=kw.pop("num_heads", 4), axis=kw.pop("axis", "row"),
                 **kw)


def test_mask_rejected():
    w = make_weights(32, 4, seed=15)
    x = rand_x((2, 3, 5, 32), torch.float32, "cpu", 16)
    cases = [
        (torch.ones(2, 5, 3, dtype=torch.bool), ValueError, r"mask has shape \(2, 5, 3\), expected \[B, H, W\] = \[2, 3, 5\]"),
        (torch.ones(3, 5, dtype=torch.bool), ValueError, r"mask has shape \(3, 5\), expected \[B, H, W\]"),
        (torch.ones(2, 3, 5, dtype=torch.int32), TypeError, "mask is torch.int32; supported: bool"),
        (torch.ones(2, 3, 5, dtype=torch.bool, device="meta"), ValueError, "mask is on meta but x is on cpu"),
        ([[1]], TypeError, "mask must be a torch.Tensor or None, got list"),
    ]
    for mask, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            _api_case(x, w, mask=mask)
        with pytest.raises(exc, match=msg):
            quiet(af.axial_attention, x, w, mask=mask)


def test_bias_rejected():
    w = make_weights(32, 4, seed=17)
    x = rand_x((2, 3, 5, 32), torch.float32, "cpu", 18)
    ok_row = torch.zeros(2, 4, 5, 5)
    cases = [
        (dict(bias=torch.zeros(2, 3, 5, 5)), ValueError, r"bias has 3 heads .*expected num_heads = 4"),
        (dict(bias=torch.zeros(2, 4, 3, 3)), ValueError, r"row pass has sequences of W = 5 tokens: expected \[\.\., 5, 5\]"),
        (dict(bias=torch.zeros(2, 4, 5, 5), axis="col"), ValueError, "column pass has sequences of H = 3 tokens"),
        (dict(bias=torch.zeros(3, 4, 5, 5)), ValueError, "batch dimension 3, which does not broadcast to x's batch 2"),
        (dict(bias=torch.zeros(4, 5, 5)), ValueError, r"bias must be \[B or 1, heads, W, W\]"),
        (dict(bias=ok_row.double()), TypeError, "bias is torch.float64; supported: float32 or x's dtype"),
        (dict(bias=ok_row.to("meta")), ValueError, "bias is on meta but x is on cpu"),
        (dict(bias="0"), TypeError, "bias must be a torch.Tensor or None, got str"),
    ]
    for kw, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            _api_case(x, w, **kw)
    with pytest.raises(ValueError, match="col_bias has shape .* column pass has sequences of H = 3"):
        quiet(af.axial_attention, x, w, col_bias=ok_row)
    with pytest.raises(ValueError, match="row_bias has 3 heads"):
        quiet(af.axial_attention, x, w, row_bias=torch.zeros(1, 3, 5, 5))


def test_gate_and_qkv_bias_rejected():
    w = make_weights(32, 4, seed=19, qkv_bias=True, gate=True)
    x = rand_x((1, 3, 5, 32), torch.float32, "cpu", 20)
    cases = [
        (w.row._replace(qkv_bias=torch.zeros(32)), ValueError, r"pass_weights\.qkv_bias has shape \(32,\), expected \(96,\)"),
        (w.row._replace(gate_weight=torch.zeros(96, 32)), ValueError, r"pass_weights\.gate_weight has shape \(96, 32\), expected \(32, 32\)"),
        (w.row._replace(gate_bias=torch.zeros(31)), ValueError, r"pass_weights\.gate_bias has shape \(31,\)"),
        (w.row._replace(gate_weight=None), ValueError, "gate_bias was given without pass_weights.gate_weight"),
        (w.row._replace(gate_bias=w.row.gate_bias.double()), TypeError, "gate_bias is torch.float64 .* share one dtype"),
        (w.row._replace(qkv_bias=[0.0] * 96), TypeError, r"qkv_bias must be a torch.Tensor or None, got list"),
    ]
    for pw, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            _api_case(x, w, pw=pw)
    with pytest.raises(TypeError, match="residual must be a bool, got int"):
        _api_case(x, w, residual=0)


@pytest.mark.needs_ext
def test_op_meta_rejects_features():
    """The registered operator's fake (shape-only) kernel: the same checks, the names prefixed by the pass."""
    D, H, W = 64, 3, 5
    x = torch.empty(2, H, W, D, device="meta", dtype=torch.bfloat16)
    ws = [torch.empty(s, device="meta", dtype=torch.bfloat16) for s in [(D,), (D,), (3 * D, D), (D, D), (D,)]]
    op = torch.ops.axial_fused
    e = lambda *s, dtype=torch.bfloat16: torch.empty(*s, device="meta", dtype=dtype)
    m_ok = e(2, H, W, dtype=torch.bool)
    sq = e(2, H, H, D)
    wide = 1088  # (past bias_weight's 1024 channels)
    ws_wide = [e(*s) for s in [(wide,), (wide,), (3 * wide, wide), (wide, wide), (wide,)]]
    assert op.axial_pass(sq, *ws, 4, 1, 1e-5, bias_weight=e(4, D)).shape == sq.shape
    assert op.axial_pass(x, *ws, 4, 0, 1e-5, e(3 * D), e(D, D), e(D), m_ok, e(1, 4, W, W), False).shape == x.shape
    assert op.axial_attention(x, *ws, *ws, 4, 1e-5, mask=m_ok, row_bias=e(2, 4, W, W, dtype=torch.float32),
                              col_bias=e(1, 4, H, H)).shape == x.shape
    cases = [
        (lambda: op.axial_pass(x, *ws, 4, 0, 1e-5, mask=e(2, W, H, dtype=torch.bool)), ValueError, "mask has shape"),
        (lambda: op.axial_pass(x, *ws, 4, 0, 1e-5, mask=e(2, H, W, dtype=torch.int32)), TypeError, "mask is Int"),
        (lambda: op.axial_pass(x, *ws, 4, 1, 1e-5, bias=e(1, 4, W, W)), ValueError, "column pass has sequences of H = 3"),
        (lambda: op.axial_pass(x, *ws, 4, 0, 1e-5, bias=e(1, 4, W, W, dtype=torch.float16)), TypeError,
         "bias is Half; supported: float32 or x's dtype"),
        (lambda: op.axial_attention(x, *ws, *ws, 4, 1e-5, row_bias=e(3, 4, W, W)), ValueError,
         "row_bias has batch dimension 3"),
        (lambda: op.axial_attention(x, *ws, *ws, 4, 1e-5, col_bias=e(1, 2, H, H)), ValueError, "col_bias has 2 heads"),
        (lambda: op.axial_pass(x, *ws, 4, 0, 1e-5, e(D)), ValueError, r"qkv_bias has shape \[64\], expected \[192\]"),
        (lambda: op.axial_attention(x, *ws, *ws, 4, 1e-5, col_gate_weight=e(D, 2 * D)), ValueError,
         "col_gate_weight has shape"),
        (lambda: op.axial_pass(x, *ws, 4, 0, 1e-5, None, None, e(D)), ValueError, "gate_bias was given without gate_weight"),
        (lambda: op.axial_pass(x, *ws, 4, 0, 1e-5, None, e(D, D, dtype=torch.float32)), TypeError,
         "gate_weight is Float but x is BFloat16"),
        (lambda: op.axial_pass(sq, *ws, 4, 0, 1e-5, bias_weight=e(3, D)), ValueError,
         r"bias_weight has shape \[3, 64\], expected \[4, 64\]"),
        (lambda: op.axial_pass(x, *ws, 4, 1, 1e-5, bias_weight=e(4, D)), ValueError,
         r"bias_weight needs a square grid \(H == W"),
        (lambda: op.axial_attention(sq, *ws, *ws, 4, 1e-5, row_bias=e(1, 4, H, H), row_bias_weight=e(4, D)),
         ValueError, "row_bias and row_bias_weight were both given"),
        (lambda: op.axial_pass(e(2, H, H, wide), *ws_wide, 4, 0, 1e-5, bias_weight=e(4, wide)), ValueError,
         r"bias_weight supports up to 32 heads and 1024 channels, got 4 heads and D = 1088"),
    ]
    for call, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            call()


def test_bias_weight_rejected():
    w = make_weights(32, 4, seed=63, bias_weight=True)
    x = rand_x((2, 5, 5, 32), torch.float32, "cpu", 64)
    bw = w.row.bias_weight
    cases = [
        (dict(pw=w.row._replace(bias_weight=bw[:3])), ValueError,
         r"pass_weights.bias_weight has shape \(3, 32\), expected \[num_heads, D\] = \[4, 32\]"),
        (dict(pw=w.row._replace(bias_weight=bw[:, :16])), ValueError,
         r"pass_weights.bias_weight has shape \(4, 16\), expected \[heads, D\] for D = 32"),
        (dict(pw=w.row._replace(bias_weight=bw[0])), ValueError, r"bias_weight has shape \(32,\), expected \[heads, D\]"),
        (dict(pw=w.row._replace(bias_weight=bw.double())), TypeError,
         "pass_weights.bias_weight is torch.float64 but pass_weights.norm_weight is torch.float32"),
        (dict(bias=torch.zeros(2, 4, 5, 5)), ValueError,
         "bias and pass_weights.bias_weight were both given; give one"),
    ]
    for kw, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            _api_case(x, w, **kw)
    many = make_weights(320, 40, seed=66, bias_weight=True)  # (past the pair-bias kernel's 32 heads)
    with pytest.raises(ValueError, match=r"pass_weights.bias_weight supports up to 32 heads and 1024 channels, got 40 "
                                         r"heads and D = 320; compute the bias in PyTorch and pass it as bias"):
        _api_case(rand_x((1, 5, 5, 320), torch.float32, "cpu", 67), many, num_heads=40)
    with pytest.raises(ValueError, match=r"bias_weight needs a square grid \(H == W.*shape \(2, 3, 5, 32\)"):
        _api_case(rand_x((2, 3, 5, 32), torch.float32, "cpu", 65), w, axis="col")
    with pytest.raises(ValueError, match="col_bias and col.bias_weight were both given"):
        quiet(af.axial_attention, x, w, col_bias=torch.zeros(1, 4, 5, 5))


# ---- CPU: the operator with the features (its registrations, compile, export) --------------------


def _feature_args(op, dtype=torch.float64, device="cpu", requires_grad=False, tri=False):
    """Positional arguments of the op with every optional tensor given (a float32 bias: the other
    dtype); tri: on a square grid, the biases computed from LN(x) (bias_weight) instead of given."""
    D, heads, B, H, W = 32, 2, 2, 3 if not tri else 5, 5
    w = make_weights(D, heads, dtype, device, seed=41, qkv_bias=True, gate=True, bias_weight=tri)
    rg = lambda t: t.detach().requires_grad_(requires_grad) if t is not None and t.is_floating_point() else t
    x = rg(rand_x((B, H, W, D), dtype, device, 42))
    mask = make_mask(B, H, W, device, 43)
    rb = None if tri else rg(make_bias(1, heads, W, device, dtype, 44))
    cb = None if tri else rg(make_bias(B, heads, H, device, dtype, 45))
    row, col = [rg(t) for t in w.row], [rg(t) for t in w.col]
    if op == "axial_pass":
        return (x, *col[:5], heads, 1, w.eps, *col[5:8], mask, cb, False, col[8]), w
    return (x, *row[:5], *col[:5], heads, w.eps, *row[5:8], *col[5:8], mask, rb, cb, False, row[8], col[8]), w


@pytest.mark.needs_ext
@pytest.mark.parametrize("tri", [False, True], ids=["bias", "bias_weight"])
@pytest.mark.parametrize("op", ["axial_attention", "axial_pass"])
def test_opcheck_with_features(op, tri):
    """Schema, fake tensors and AOT dispatch with every optional argument: on meta tensors (the
    shape-only kernel) and, with inputs requiring grad, on the CPU (the Autograd kernel's reference
    math in PyTorch ops, gradients included)."""
    meta, _ = _feature_args(op, torch.float32, "meta", tri=tri)
    torch.library.opcheck(getattr(OP, op).default, meta)
    args, _ = _feature_args(op, torch.float64, "cpu", requires_grad=True, tri=tri)
    torch.library.opcheck(getattr(OP, op).default, args)


@pytest.mark.needs_ext
def test_op_autograd_kernel_with_features_matches_float64():
    """The op's Autograd kernel (PyTorch ops) with every feature, against pass64, and its gradients
    by gradcheck."""
    args, w = _feature_args("axial_pass", requires_grad=True)
    x, mask, cb = args[0], args[12], args[13]
    got = OP.axial_pass(*args)
    want = pass64(x.detach(), w.col, 2, "col", w.eps, mask, cb.detach(), residual=False)
    assert rel_err(got.detach(), want) < 1e-12
    args2, w2 = _feature_args("axial_attention", requires_grad=True)
    got2 = OP.axial_attention(*args2)
    want2 = attention64(args2[0].detach(), w2, args2[19], args2[20].detach(), args2[21].detach(), residual=False)
    assert rel_err(got2.detach(), want2) < 1e-12
    grads = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
    fn = lambda *t: OP.axial_pass(*[t[grads.index(i)] if i in grads else a for i, a in enumerate(args)])
    assert torch.autograd.gradcheck(fn, tuple(args[i] for i in grads), eps=1e-6, atol=1e-5)


class FeaturePass(torch.nn.Module):
    """An MSA-row-attention-like block: a pass with every feature, its update added back."""

    def __init__(self, w: af.AxialWeights):
        super().__init__()
        self.w = w

    def forward(self, x, mask, bias):
        upd = af.axial_pass(x, self.w.row, num_heads=self.w.num_heads, axis="row", mask=mask, bias=bias,
                            residual=False, strict=True)
        return af.axial_attention(x + upd, self.w, mask=mask, col_bias=None, strict=True)


def _feature_model():
    w = make_weights(32, 2, torch.float32, seed=46, qkv_bias=True, gate=True)
    x = rand_x((2, 6, 5, 32), torch.float32, "cpu", 47)
    return FeaturePass(w), (x, make_mask(2, 6, 5, "cpu", 48), make_bias(2, 2, 5, "cpu", torch.float32, 49))


def test_compile_fullgraph_with_features(fused_on_cpu):
    """The fused branch with every feature compiles with fullgraph=True: both ops in the graph, the
    fake implementations' outputs match the kernels', the result matches eager (and pass64)."""
    torch._dynamo.reset()
    model, inputs = _feature_model()
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(*inputs)
        assert explained.graph_break_count == 0
        code = explained.graphs[0].code
        assert "torch.ops.axial_fused.axial_pass" in code and "torch.ops.axial_fused.axial_attention" in code
        got = torch.compile(model, fullgraph=True)(*inputs)
        assert rel_err(got, model(*inputs)) < 1e-6
    x, mask, bias = inputs
    w64 = to64(model.w)
    want = attention64(x.double() + pass64(x, w64.row, 2, "row", model.w.eps, mask, bias, residual=False), w64, mask)
    assert rel_err(got, want) < 1e-5


def test_export_with_features_save_load(fused_on_cpu, tmp_path):
    """Exported, the program holds both ops with their optional arguments; it survives save/load."""
    model, inputs = _feature_model()
    with torch.no_grad():
        ep = torch.export.export(model, inputs)
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert OP.axial_pass.default in targets and OP.axial_attention.default in targets
    torch.export.save(ep, tmp_path / "m.pt2")
    loaded = torch.export.load(tmp_path / "m.pt2")
    with torch.no_grad():
        assert torch.equal(loaded.module()(*inputs), model(*inputs))


# ---- GPU: every path ------------------------------------------------------------------------------

# Every feature together, and without the gate (which the Hopper fused kernel has not).
EVERY_PATH_FEATURES = (cases.ALL, cases.UNGATED)


@pytest.mark.gpu
@pytest.mark.parametrize("case", every_path(specs(), cases.SHAPES["features"], EVERY_PATH_FEATURES, fns=("row", "col")),
                         ids=lambda c: c.id)
def test_features_every_path(case):
    check_case(case, seed=case.input_seed)


@pytest.mark.gpu
@pytest.mark.parametrize("dt,dim,heads", specs(), ids=str)
def test_bias_weight_every_path(dt, dim, heads):
    """bias_weight on every path, each pass, with a mask (and the gate, but on the Hopper fused path,
    which has none): where the Hopper attention kernel reads the bias prepared, K1 writes it from its
    normalised rows (L = 37: keys and queries padded to 128, whose entries must be zero; L = 128:
    none); elsewhere the pair-bias kernel computes it first. Against pass64 (the triangle bias as
    AF2's Algorithms 13 and 14 write it)."""
    dtype = DTYPES[dt]
    for gate in (True, False):
        w = make_weights(dim, heads, dtype, "cuda", seed=dim + heads + gate, gate=gate, bias_weight=True)
        for B, L in ((2, 37), (1, 128)):
            x = rand_x((B, L, L, dim), dtype, "cuda", L + gate)
            mask = make_mask(B, L, L, "cuda", L + 1)
            for axis in ("row", "col"):
                one = w._replace(row=getattr(w, axis))  # (check's single pass takes w.row)
                for path in paths_for((dt, dim, heads)):
                    if (path == "fused_sm90") == gate:  # (the Hopper fused kernel has no gate; it alone runs ungated)
                        continue
                    with force_path(path), tf32(False):
                        check(x, one, "pass", axis, unserved_ok=True, what=f"{axis} L {L} path {path} gate {gate}: ",
                              mask=mask, residual=False)
        if gate:
            with tf32(False):
                check(x, w, mask=mask)


def _k1_three_specs():
    found = specs(lambda dt, d, h: dt != "float32" and d <= 128) if torch.cuda.is_available() else []
    return found or [pytest.param(None, None, None, marks=pytest.mark.skip(reason="no 16-bit D <= 128 spec"))]


@pytest.mark.gpu
@pytest.mark.parametrize("dt,dim,heads", _k1_three_specs(), ids=str)
def test_k1_three_block_form(dt, dim, heads):
    """K1's three-block form (the planner's at D <= 128 on sm_90a where its waves fill the SMs better):
    a grid of 192 x 192 tokens (288 blocks of 128 tokens), both passes, with every feature, and with
    the triangle bias from the pass's own LayerNorm output, against float64."""
    if torch.cuda.get_device_capability() != (9, 0) or \
            plan_pass(DTYPES[dt], dim, heads, 192, 192, 0, path="two_kernel").k1_per_sm != 3:
        pytest.skip("the planner gives this GPU two K1 blocks an SM at 192 x 192")
    for axis in ("row", "col"):
        check_case(cases.Case(dt, dim, heads, 1, 192, 192, cases.ALL, fn=axis), seed=dim + heads)
    w = make_weights(dim, heads, DTYPES[dt], "cuda", seed=dim, gate=True, bias_weight=True)
    x, mask = rand_x((1, 192, 192, dim), DTYPES[dt], "cuda", 5), make_mask(1, 192, 192, "cuda", 6)
    for axis in ("row", "col"):
        check(x, w._replace(row=getattr(w, axis)), "pass", axis, what=f"{axis}: ", mask=mask, residual=False)


@pytest.mark.gpu
@pytest.mark.parametrize("case", cases.grid(small_specs(), [(3, 31, 9)], COMBOS, ("fused", "two_kernel"), ("col",)),
                         ids=lambda c: c.id)
def test_each_feature_alone(case):
    check_case(case, seed=case.input_seed)


@pytest.mark.gpu
@pytest.mark.parametrize("case", cases.grid(specs()[:6], [(2, 17, 40)], (cases.ALL, cases.Features.of("mask", "bias")),
                                            ("fused", "two_kernel", "auto")), ids=lambda c: c.id)
def test_two_pass_call(case):
    check_case(case, seed=case.input_seed)


@pytest.mark.gpu
@pytest.mark.parametrize("kw", [dict(strided=True), dict(mask_dtype=torch.float32), dict(mask_dtype=torch.uint8),
                                dict(mask_dtype=torch.bfloat16, strided=True), dict(mask_dtype=torch.float16),
                                dict(mask_dtype=torch.float32, strided=True, negative_zero=True),
                                dict(mask_dtype=torch.float64)],
                         ids=["strided", "float", "uint8", "bf16_strided", "fp16", "float_signed_zero", "float64"])
def test_mask_layouts(kw):
    """Every mask dtype through strides on every path (the two-kernel path reads bool, uint8 and
    16- and 32-bit float masks as they are, by element size; the others get a bool copy)."""
    for case in cases.grid(specs()[:4], [(2, 21, 12)], [cases.FEATURE_SETS["mask"]], ("fused", "two_kernel", "auto"),
                           ("col", "row")):
        check_case(case, seed=3 if case.fn == "col" else 4, skip_unserved=False, **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("features", [cases.FEATURE_SETS["mask"], cases.FEATURE_SETS["mask+bias+gate"]],
                         ids=lambda f: f.name)
def test_absent_key_tiles(features):
    """Masks whose sequences end in whole 64-key chunks of absent keys, which the Hopper attention
    kernel skips (present_key_end): row length 300 with the keys from 150 on absent (the chunks from
    192 on hold none), column length 200 with those from 50 on absent (one chunk left), beside fully
    absent sequences and a fully absent batch element, which keep every chunk. Row length 2100 takes
    the bfloat16 mask by selects (past kMaskMmaMaxLen) where the shorter ones take it on the tensor
    cores."""
    paths = ("two_kernel", "auto")
    for case in cases.grid(specs()[:4], [(2, 200, 300)], [features], paths, ("row", "col")):
        check_case(case, seed=11 + PATHS[case.path], skip_unserved=False, tail=150)
    for case in cases.grid(specs()[:4], [(1, 3, 2100)], [features], paths, ("row",)):
        check_case(case, seed=13 + PATHS[case.path], skip_unserved=False, tail=700)


@pytest.mark.gpu
def test_bias_layouts():
    """Broadcast (batch 1, and a stride-0 expand) and strided (transposed) bias, float32 and x's dtype."""
    for dt, dim, heads in specs()[:4]:
        dtype = DTYPES[dt]
        B, H, W = 3, 6, 45
        w = make_weights(dim, heads, dtype, "cuda", seed=31)
        x = rand_x((B, H, W, dim), dtype, "cuda", 32)
        for bias in (make_bias(1, heads, W, "cuda", dtype, 33), make_bias(1, heads, W, "cuda", torch.float32, 34).expand(B, -1, -1, -1),
                     make_bias(B, heads, W, "cuda", dtype, 35, strided=True), make_bias(B, heads, W, "cuda", torch.float32, 36)[..., ::1]):
            for path in ("fused", "two_kernel", "auto"):
                with force_path(path), tf32(False):
                    check(x, w, "pass", "row", unserved_ok=True, what=f"{dt} {dim} {path} {tuple(bias.stride())}: ",
                          bias=bias)
