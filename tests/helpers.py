"""Shared test helpers: weights with non-trivial values, an independent float64 reference, errors."""
from __future__ import annotations

import math

import torch

import axial_fused as af


def make_weights(dim: int, heads: int, dtype=torch.float32, device="cpu", seed: int = 0, eps: float = 1e-5):
    """Random AxialWeights; LayerNorm affine and biases far from their defaults."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift).to(dtype).to(device)

    def pw():
        return af.PassWeights(r(dim, scale=0.3, shift=1.0), r(dim, scale=0.3), r(3 * dim, dim, scale=dim ** -0.5),
                              r(dim, dim, scale=dim ** -0.5), r(dim, scale=0.5))

    return af.AxialWeights.create(pw(), pw(), heads, eps)


def to64(w: af.AxialWeights, device=None) -> af.AxialWeights:
    cv = lambda p: af.PassWeights(*(t.to(device=device or t.device, dtype=torch.float64) for t in p))
    return af.AxialWeights(cv(w.row), cv(w.col), w.num_heads, w.eps)


def pass64(x: torch.Tensor, pw, heads: int, axis: str, eps: float) -> torch.Tensor:
    """One axial pass in float64, written independently of axial_fused.reference (einsum, explicit
    softmax, LayerNorm by hand)."""
    nw, nb, wqkv, wo, bo = (t.double() for t in pw)
    x = x.double()
    if axis == "col":
        x = x.transpose(1, 2)
    D = x.shape[-1]
    hd = D // heads
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    h = (x - mu) / torch.sqrt(var + eps) * nw + nb
    q = torch.einsum("bsld,ed->bsle", h, wqkv[:D]).unflatten(-1, (heads, hd))
    k = torch.einsum("bsld,ed->bsle", h, wqkv[D:2 * D]).unflatten(-1, (heads, hd))
    v = torch.einsum("bsld,ed->bsle", h, wqkv[2 * D:]).unflatten(-1, (heads, hd))
    s = torch.einsum("bsqhe,bskhe->bshqk", q, k) / math.sqrt(hd)
    p = torch.exp(s - s.amax(-1, keepdim=True))
    p = p / p.sum(-1, keepdim=True)
    o = torch.einsum("bshqk,bskhe->bsqhe", p, v).flatten(-2)
    out = x + torch.einsum("bsld,ed->bsle", o, wo) + bo
    return out.transpose(1, 2) if axis == "col" else out


def attention64(x: torch.Tensor, w: af.AxialWeights) -> torch.Tensor:
    y = pass64(x, w.row, w.num_heads, "row", w.eps)
    return pass64(y, w.col, w.num_heads, "col", w.eps)


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
