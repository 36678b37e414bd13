"""Shared test helpers: weights with non-trivial values, an independent float64 reference, the GPU tests'
tolerance and checks, inputs for the optional features, the specializations and GPUs at hand.

The tolerance of a fused call (`tolerance`): error(fused vs float64) <= 2 * error(PyTorch at the same
dtype vs float64) + FLOOR[dtype]; float32 without TF32 within 1e-5 relative. `check` runs a call that
way: strict=True (a silent fallback cannot pass for the fused path), the caching allocator poisoned
with NaN first (an output element the kernel fails to write shows up as NaN).
"""
from __future__ import annotations

import contextlib
import math
import warnings

import pytest
import torch

import axial_fused as af
from axial_fused import _ext, cases
from axial_fused.cases import DTYPES, PATHS, specs  # noqa: F401 - the tests' dtype and path tables, the compiled specs

OP = torch.ops.axial_fused
FLOOR = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 4e-3}  # the tolerance's floor per dtype
EXACT_FP32 = 1e-5  # float32 without TF32 (3xTF32 on the tensor cores), relative to float64
MAX_ELEMS = 6_000_000  # B * H * W * D of a kernel test's case: keeps the float64 reference quick
# What a forced path says where it cannot take a case on this GPU (its block does not fit in shared memory,
# or the Hopper fused kernel does not serve it here).
UNSERVED = ("do not fit in one block's shared memory", "Hopper fused path was forced")


# ---- weights, inputs, the float64 reference --------------------------------------------------------

def make_weights(dim: int, heads: int, dtype=torch.float32, device="cpu", seed: int = 0, eps: float = 1e-5,
                 qkv_bias: bool = False, gate: bool = False, bias_weight: bool = False):
    """Random AxialWeights; LayerNorm affine and biases far from their defaults. qkv_bias / gate /
    bias_weight: with the optional q/k/v bias, sigmoid gate (weight and bias) and the weight of the
    bias computed from LN(x) (logit spreads of tens, as make_bias's), also far from zero."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift).to(dtype).to(device)

    def pw():
        base = [r(dim, scale=0.3, shift=1.0), r(dim, scale=0.3), r(3 * dim, dim, scale=dim ** -0.5),
                r(dim, dim, scale=dim ** -0.5), r(dim, scale=0.5)]
        extra = [r(3 * dim, scale=0.5) if qkv_bias else None,
                 r(dim, dim, scale=dim ** -0.5) if gate else None, r(dim, scale=0.7, shift=0.5) if gate else None,
                 r(heads, dim, scale=4 * dim ** -0.5) if bias_weight else None]
        return af.PassWeights(*base, *extra)

    return af.AxialWeights.create(pw(), pw(), heads, eps)


def to64(w: af.AxialWeights, device=None) -> af.AxialWeights:
    cv = lambda p: af.PassWeights(*(None if t is None else t.to(device=device or t.device, dtype=torch.float64)
                                    for t in p))
    return af.AxialWeights(cv(w.row), cv(w.col), w.num_heads, w.eps)


def pass64(x: torch.Tensor, pw, heads: int, axis: str, eps: float, mask=None, bias=None,
           residual: bool = True) -> torch.Tensor:
    """One axial pass in float64, written independently of axial_fused.reference (einsum, explicit
    softmax, LayerNorm by hand), with the protein models' features as AF2's supplementary Algorithms 7,
    8, 13 and 14 write them: q/k/v biases, the pair bias b added to q k^T / sqrt(c), the key mask as a
    masked_fill of the logits (-1e30: a query with no key present attends uniformly), the gate
    o * sigmoid(Linear(LN(x))) before the output projection; residual=False: the update alone."""
    pw = af.PassWeights(*pw)
    nw, nb, wqkv, wo, bo = (t.double() for t in pw[:5])
    x = x.double()
    if axis == "col":
        x = x.transpose(1, 2)
    D = x.shape[-1]
    hd = D // heads
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    h = (x - mu) / torch.sqrt(var + eps) * nw + nb
    qkv = torch.einsum("bsld,ed->bsle", h, wqkv)
    if pw.qkv_bias is not None:
        qkv = qkv + pw.qkv_bias.double()
    q, k, v = (qkv[..., i * D:(i + 1) * D].unflatten(-1, (heads, hd)) for i in range(3))
    s = torch.einsum("bsqhe,bskhe->bshqk", q, k) / math.sqrt(hd)
    if pw.bias_weight is not None:  # the triangle bias (Algorithms 13, 14): linear(LN(z)) of the pair z
        z = h if axis == "row" else h.transpose(1, 2)  # LN(x) as x lies, [B, I, J, D]
        t = torch.einsum("bijd,hd->bhij", z, pw.bias_weight.double())
        bias = t if axis == "row" else t.transpose(-1, -2)  # ending node: query j, key k from z[k, j]
    if bias is not None:  # [1 or B, heads, L, L]: one per batch element, shared by its sequences
        s = s + bias.double()[:, None]
    if mask is not None:  # [B, H, W]: key j of sequence s present where the mask is nonzero
        keys = (mask if axis == "row" else mask.transpose(1, 2)).to(x.device) != 0
        s = torch.where(keys[:, :, None, None, :], s, torch.full_like(s, -1e30))
    p = torch.exp(s - s.amax(-1, keepdim=True))
    p = p / p.sum(-1, keepdim=True)
    o = torch.einsum("bshqk,bskhe->bsqhe", p, v).flatten(-2)
    if pw.gate_weight is not None:
        gb = pw.gate_bias.double() if pw.gate_bias is not None else 0.0
        o = o * torch.sigmoid(torch.einsum("bsld,ed->bsle", h, pw.gate_weight.double()) + gb)
    out = torch.einsum("bsld,ed->bsle", o, wo) + bo
    if residual:
        out = x + out
    return out.transpose(1, 2) if axis == "col" else out


def attention64(x: torch.Tensor, w: af.AxialWeights, mask=None, row_bias=None, col_bias=None,
                residual: bool = True) -> torch.Tensor:
    y = pass64(x, w.row, w.num_heads, "row", w.eps, mask, row_bias, residual)
    return pass64(y, w.col, w.num_heads, "col", w.eps, mask, col_bias, residual)


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    a, ref = a.double(), ref.double()
    if ref.numel() == 0:
        return 0.0
    if not torch.isfinite(a).all():
        return math.inf
    return ((a - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def rand_x(shape, dtype, device, seed: int, scale: float = 1.0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale + 0.1).to(dtype).to(device)


def make_mask(B, H, W, device, seed, *, mask_dtype=torch.bool, strided=False, tail=3, negative_zero=False):
    """A key mask with random holes (30 %), a padded tail on both axes (the last `tail` columns and
    rows absent, as a padded MSA), one fully absent row (a sequence of the row pass with no key) and,
    for B > 1, a fully absent batch element."""
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(B, H, W, generator=g) > 0.3
    if W > tail + 1:
        m[:, :, W - tail:] = False
    if H > tail + 1:
        m[:, H - tail:, :] = False
    m[:, min(1, H - 1), :] = False
    if B > 1:
        m[-1] = False
    if strided:  # the same values through a transposed buffer: strides (H * W, 1, H)
        m = m.transpose(1, 2).contiguous().transpose(1, 2)
    if negative_zero:  # a float mask whose absent keys are -0.0 (its sign bit set) and present ones 0.5
        return torch.where(m, 0.5, -0.0).to(mask_dtype).to(device)
    return m.to(mask_dtype).to(device)


def make_bias(B, heads, L, device, dtype, seed, *, scale=4.0, strided=False):
    """A logit bias [B, heads, L, L] of large magnitude (scale 4: logit spreads of tens); strided: a
    transposed view (key stride L)."""
    g = torch.Generator().manual_seed(seed)
    b = torch.randn(B, heads, L, L, generator=g, dtype=torch.float64) * scale
    if strided:
        b = b.transpose(2, 3).contiguous().transpose(2, 3)
    return b.to(dtype).to(device)


def feature_inputs(features: cases.Features, B, H, W, dim, heads, dtype, device, seed, axis="row", bias_dtype=None,
                   **mask_kw):
    """(weights, mask, bias of the `axis` pass, residual) for a call with `features`."""
    w = make_weights(dim, heads, dtype, device, seed=seed, qkv_bias=features.qkv_bias, gate=features.gate,
                     bias_weight=features.bias_weight)
    mask = make_mask(B, H, W, device, seed + 1, **mask_kw) if features.mask else None
    L = W if axis == "row" else H
    bias = make_bias(B, heads, L, device, bias_dtype or dtype, seed + 2) if features.bias else None
    return w, mask, bias, features.residual


def quiet(fn, *a, **k):
    """fn(*a, **k) without the FusedFallbackWarning (the reference path on purpose)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        return fn(*a, **k)


# ---- the specializations and GPUs at hand ---------------------------------------------------------

def small_specs() -> list[tuple[str, int, int]]:
    """The compiled specialization of each dtype with the smallest dim (and heads), in DTYPES' order."""
    first = {}
    for s in specs():
        first.setdefault(s[0], s)
    return [first[dt] for dt in DTYPES if dt in first]


def small_spec(dtype_name: str = "bfloat16") -> tuple[str, int, int]:
    """small_specs()'s specialization of that dtype (the test skips if there is none)."""
    found = [s for s in small_specs() if s[0] == dtype_name]
    return found[0] if found else pytest.skip(f"no {dtype_name} spec compiled")


def gpus() -> int:
    """CUDA devices the fused path can run on here (0 without the extension)."""
    return torch.cuda.device_count() if torch.cuda.is_available() and _ext.C is not None else 0


def hopper_ready() -> bool:
    """sm_90a code in the binary and a compute capability 9.0 GPU (the Hopper kernels can run)."""
    return (gpus() > 0 and torch.cuda.get_device_capability() == (9, 0)
            and "90a" in _ext.C.compiled_archs().split(";"))


def hopper_fused_specs() -> list[tuple[str, int, int]]:
    """The compiled specializations the Hopper fused kernel serves, where it can run ([] elsewhere)."""
    return specs(cases.hopper_fused_serves) if hopper_ready() else []


def attn_sm90_specs() -> list[tuple[str, int, int]]:
    """The compiled specializations the Hopper attention kernel serves, where it can run ([] elsewhere)."""
    return specs(cases.attn_sm90_serves) if hopper_ready() else []


def every_path(spec_list, shapes, features=(cases.PLAIN,), fns=("attention",)) -> list[cases.Case]:
    """cases.grid with, for each specialization, every path that can take it here (paths_for)."""
    return [c for s in spec_list for c in cases.grid([s], shapes, features, paths_for(s), fns)]


def paths_for(spec) -> tuple[str, ...]:
    """Every path that can take a pass of spec here: both forced mma.sync paths, the automatic choice, and
    the forced Hopper fused kernel where it serves spec."""
    hopper = ("fused_sm90",) if hopper_ready() and cases.hopper_fused_serves(*spec) else ()
    return ("fused", "two_kernel", "auto") + hopper


# ---- running the fused path ------------------------------------------------------------------------

@contextlib.contextmanager
def force_path(path: str):
    """Force a kernel path (a PATHS name; "auto": the planner's choice) for the block's duration (the tests'
    one override)."""
    _ext.C.set_path_override(PATHS[path])
    try:
        yield
    finally:
        _ext.C.set_path_override(-1)


@contextlib.contextmanager
def tf32(enabled: bool):
    """torch.backends.cuda.matmul.allow_tf32 (which float32 calls follow) set for the block's duration."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def poison(nbytes: int) -> None:
    """Fill the caching allocator's free blocks with NaN so unwritten outputs are caught."""
    blocks = [torch.full((max(nbytes // 4, 1),), float("nan"), device="cuda") for _ in range(3)]
    del blocks


def unserved(e: RuntimeError) -> bool:
    """e says that a forced path cannot take the case on this GPU."""
    return any(s in str(e) for s in UNSERVED)


def kernels_launched(fn) -> list[str]:
    """The names of the CUDA kernels fn() launches."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def run(x, w, fn="attention", axis="row", strict=True, **terms):
    """The fused call (strict: or an error) under inference_mode: both passes, or w.row along axis.
    terms: mask, bias (the row pass's for both passes), col_bias, residual."""
    mask, bias, col_bias, residual = (terms.get("mask"), terms.get("bias"), terms.get("col_bias"),
                                      terms.get("residual", True))
    with torch.inference_mode():
        if fn == "attention":
            return af.axial_attention(x, w, mask=mask, row_bias=bias, col_bias=col_bias, residual=residual,
                                      strict=strict)
        return af.axial_pass(x, w.row, num_heads=w.num_heads, axis=axis, eps=w.eps, mask=mask, bias=bias,
                             residual=residual, strict=strict)


def ref64(x, w, fn="attention", axis="row", **terms):
    """The float64 reference of run(x, w, fn, axis, **terms)."""
    w64, mask, residual = to64(w), terms.get("mask"), terms.get("residual", True)
    if fn == "attention":
        return attention64(x, w64, mask, terms.get("bias"), terms.get("col_bias"), residual)
    return pass64(x, w64.row, w.num_heads, axis, w.eps, mask, terms.get("bias"), residual)


def torch_at_dtype(x, w, fn="attention", axis="row", **terms):
    """run(x, w, fn, axis, **terms) computed by axial_fused.reference at x's dtype (PyTorch's own error at
    that dtype is the tolerance's unit)."""
    mask, residual = terms.get("mask"), terms.get("residual", True)
    one = lambda y, pw, ax, b: af.reference.reference_pass(y, *pw, num_heads=w.num_heads, axis=ax, eps=w.eps,
                                                           mask=mask, bias=b, residual=residual)
    with torch.inference_mode():
        if fn == "attention":
            return one(one(x, w.row, "row", terms.get("bias")), w.col, "col", terms.get("col_bias"))
        return one(x, w.row, axis, terms.get("bias"))


def tolerance(dtype: torch.dtype, torch_err: float) -> float:
    """The bound on a fused output's error against float64, given PyTorch's own error at that dtype."""
    if dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        return EXACT_FP32
    return 2 * torch_err + FLOOR[dtype]


def assert_close(out, x, w, fn="attention", axis="row", ref=None, what="", **terms):
    """out (the fused call's output, or a slice of a larger call's: the passes are independent per
    sequence and per batch element) within the tolerance; returns (error, PyTorch's error)."""
    ref = ref64(x, w, fn, axis, **terms) if ref is None else ref
    err, torch_err = rel_err(out, ref), rel_err(torch_at_dtype(x, w, fn, axis, **terms), ref)
    tol = tolerance(x.dtype, torch_err)
    assert err <= tol, f"{what}error {err:.3g} > tolerance {tol:.3g} (PyTorch at {x.dtype}: {torch_err:.3g})"
    return err, torch_err


def check(x, w, fn="attention", axis="row", unserved_ok=False, what="", **terms):
    """The fused call (strict, the allocator poisoned first) and PyTorch at x.dtype against float64:
    assert the tolerance; returns (error, PyTorch's error). terms: as run's. unserved_ok: where a forced
    path cannot take the case on this GPU, return None."""
    ref = ref64(x, w, fn, axis, **terms)
    poison(x.numel() * x.element_size() * 8)
    try:
        out = run(x, w, fn, axis, **terms)
    except RuntimeError as e:
        if unserved_ok and unserved(e):
            return None
        raise
    torch.cuda.synchronize()
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    return assert_close(out, x, w, fn, axis, ref=ref, what=what, **terms)


def check_or_skip(x, w, fn="attention", axis="row", what="", **terms):
    """check(), the test skipped where a forced path cannot take the case on this GPU."""
    got = check(x, w, fn, axis, unserved_ok=True, what=what, **terms)
    if got is None:
        pytest.skip(f"the forced path does not take {tuple(x.shape)} here")
    return got


def check_case(case: cases.Case, seed: int = 0, skip_unserved: bool = True, **mask_kw):
    """A case of axial_fused.cases checked on its path with inputs made from seed: weights, x and the
    case's features (a bias in float32 for odd seeds, else in x's dtype; mask_kw: make_mask's). Where
    the forced path cannot take the case here: the test skipped, or (skip_unserved=False) None."""
    dtype = DTYPES[case.dtype]
    axis = "col" if case.fn == "col" else "row"
    w, mask, bias, residual = feature_inputs(case.features, *case.shape[:3], case.dim, case.heads, dtype, "cuda",
                                             seed, axis, bias_dtype=torch.float32 if seed % 2 else dtype, **mask_kw)
    x = rand_x(case.shape, dtype, "cuda", seed + 3)
    fn = "attention" if case.fn == "attention" else "pass"
    terms = dict(mask=mask, bias=bias, residual=residual)
    if fn == "attention" and case.features.bias:  # the column pass's bias, batch 1
        terms["col_bias"] = make_bias(1, case.heads, case.H, "cuda", dtype, seed + 5)
    with force_path(case.path), tf32(False):
        if skip_unserved:
            return check_or_skip(x, w, fn, axis, what=f"{case.id}: ", **terms)
        return check(x, w, fn, axis, unserved_ok=True, what=f"{case.id}: ", **terms)


def check_nonfinite_isolated(case, bad, w, dim, dtype, path):
    """x with one element set to `bad`, on `path`: non-finite output exactly where the float64
    reference is, every other element bit-identical to the call on the clean x. case: (fn, axis,
    (B, H, W), index of the bad element)."""
    fn, axis, (B, H, W), idx = case
    x = rand_x((B, H, W, dim), dtype, "cuda", seed=13)
    xb = x.clone()
    xb[idx] = bad
    with force_path(path), tf32(False):
        clean, out = run(x, w, fn, axis), run(xb, w, fn, axis)
    finite = torch.isfinite(ref64(xb, w, fn, axis))
    assert finite.any() and not finite.all()
    assert torch.equal(torch.isfinite(out), finite), \
        f"{int((torch.isfinite(out) != finite).sum())} elements differ in finiteness from the reference"
    assert torch.equal(out[finite], clean[finite])
