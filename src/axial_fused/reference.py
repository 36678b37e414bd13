"""The reference model: axial attention in plain PyTorch.

This is the definition the fused kernels must match, the fallback path (with
``scaled_dot_product_attention``, which also gives autograd), and the model whose state_dict our
module loads unchanged: ``row_norm``/``row_qkv``/``row_out`` and the same three for ``col_``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["AxialAttentionReference", "reference_pass", "reference_axial_attention"]


def reference_pass(x: torch.Tensor, norm_weight, norm_bias, qkv_weight, out_weight, out_bias, *, num_heads: int,
                   axis: str, eps: float = 1e-5, attention: str = "sdpa") -> torch.Tensor:
    """One axial pass, ``x + OutProj(MHA(QKV(LN(x))))`` along ``axis`` ("row": sequences x[b, i, :, :],
    "col": sequences x[b, :, j, :]). ``attention``: "sdpa" or "explicit" (softmax(q k^T / sqrt(d)) v)."""
    if axis not in ("row", "col"):
        raise ValueError(f"axis must be 'row' or 'col', got {axis!r}")
    if axis == "col":
        x = x.transpose(1, 2)
    B, S, L, D = x.shape
    hd = D // num_heads
    h = F.layer_norm(x, (D,), norm_weight, norm_bias, eps)
    qkv = F.linear(h, qkv_weight)                                   # [B, S, L, 3D]
    qkv = qkv.reshape(B * S, L, 3, num_heads, hd).permute(2, 0, 3, 1, 4)  # [3, B*S, heads, L, hd]
    q, k, v = qkv[0], qkv[1], qkv[2]
    if attention == "sdpa" and q.numel() > 0:
        o = F.scaled_dot_product_attention(q, k, v)
    elif attention == "sdpa":
        # No sequences: torch 2.11's CUDA SDPA returns None for them in 16-bit dtypes (seen on the
        # H200); plain matmuls give the empty result and its autograd graph.
        o = q @ k.transpose(-1, -2) @ v
    elif attention == "explicit":
        o = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(hd), dim=-1) @ v
    else:
        raise ValueError(f"attention must be 'sdpa' or 'explicit', got {attention!r}")
    o = o.transpose(1, 2).reshape(B, S, L, D)
    out = x + F.linear(o, out_weight, out_bias)
    return out.transpose(1, 2) if axis == "col" else out


def reference_axial_attention(x: torch.Tensor, weights, attention: str = "sdpa") -> torch.Tensor:
    """Both passes with an :class:`axial_fused.AxialWeights`."""
    kw = dict(num_heads=weights.num_heads, eps=weights.eps, attention=attention)
    x = reference_pass(x, *weights.row, axis="row", **kw)
    return reference_pass(x, *weights.col, axis="col", **kw)


class AxialAttentionReference(nn.Module):
    """Row attention then column attention on x[B, H, W, D], in plain PyTorch."""

    def __init__(self, dim: int, num_heads: int, eps: float = 1e-5, attention: str = "sdpa",
                 device=None, dtype=None):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        kw = dict(device=device, dtype=dtype)
        self.dim, self.num_heads, self.eps, self.attention = dim, num_heads, eps, attention
        self.row_norm = nn.LayerNorm(dim, eps=eps, **kw)
        self.row_qkv = nn.Linear(dim, 3 * dim, bias=False, **kw)
        self.row_out = nn.Linear(dim, dim, **kw)
        self.col_norm = nn.LayerNorm(dim, eps=eps, **kw)
        self.col_qkv = nn.Linear(dim, 3 * dim, bias=False, **kw)
        self.col_out = nn.Linear(dim, dim, **kw)

    def _pass(self, x, prefix: str, axis: str):
        norm, qkv, out = (getattr(self, f"{prefix}_{n}") for n in ("norm", "qkv", "out"))
        return reference_pass(x, norm.weight, norm.bias, qkv.weight, out.weight, out.bias, num_heads=self.num_heads,
                              axis=axis, eps=self.eps, attention=self.attention)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._pass(self._pass(x, "row", "row"), "col", "col")
