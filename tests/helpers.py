"""Shared test helpers: weights with non-trivial values, an independent float64 reference, errors."""
from __future__ import annotations

import contextlib
import math

import torch

import axial_fused as af
from axial_fused import _ext


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


@contextlib.contextmanager
def force_path(path: int):
    """Force a kernel path (-1: automatic) for the block's duration (the tests' one override)."""
    _ext.C.set_path_override(path)
    try:
        yield
    finally:
        _ext.C.set_path_override(-1)
