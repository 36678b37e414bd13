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

__all__ = ["AxialAttentionReference", "reference_pass", "reference_axial_attention", "MASKED_LOGIT"]


MASKED_LOGIT = -1e30  # an absent key's logit (the kernels' kMaskedLogit); float16 takes its lowest, -65504


def replace_absent(logits: torch.Tensor, absent: torch.Tensor) -> torch.Tensor:
    """logits [B, S, heads, L, L] with the keys where absent [B, S, L] is true replaced by
    MASKED_LOGIT (-65504 in float16, its lowest finite value)."""
    lowest = -65504.0 if logits.dtype == torch.float16 else MASKED_LOGIT
    return logits.masked_fill(absent[:, :, None, None, :], lowest)


def reference_pass(x: torch.Tensor, norm_weight, norm_bias, qkv_weight, out_weight, out_bias, qkv_bias=None,
                   gate_weight=None, gate_bias=None, bias_weight=None, *, num_heads: int, axis: str, eps: float = 1e-5,
                   attention: str = "sdpa", mask: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                   residual: bool = True) -> torch.Tensor:
    """One axial pass, ``x + OutProj(MHA(QKV(LN(x))))`` along ``axis`` ("row": sequences x[b, i, :, :],
    "col": sequences x[b, :, j, :]). ``attention``: "sdpa" or "explicit" (softmax(q k^T / sqrt(d)) v).

    The optional features: ``qkv_bias`` [3D] added to the projection; ``gate_weight`` [D, D] /
    ``gate_bias`` [D]: the attention output times ``sigmoid(LN(x) W_g^T + b_g)`` before the output
    projection; ``mask`` [B, H, W] (true / nonzero: present): an absent key's logit becomes
    MASKED_LOGIT (masked_fill, so a query with no key present attends uniformly); ``bias``
    [1 or B, heads, L, L] added to the scaled logits, or computed from the LayerNorm output with
    ``bias_weight`` [heads, D] (H == W): query i, key j of a sequence get LN(its token (i, j)) .
    bias_weight[h], the token at position j of sequence i; ``residual=False``: the update alone."""
    if axis not in ("row", "col"):
        raise ValueError(f"axis must be 'row' or 'col', got {axis!r}")
    if attention not in ("sdpa", "explicit"):
        raise ValueError(f"attention must be 'sdpa' or 'explicit', got {attention!r}")
    if axis == "col":
        x = x.transpose(1, 2)
    B, S, L, D = x.shape
    hd = D // num_heads
    h = F.layer_norm(x, (D,), norm_weight, norm_bias, eps)
    if bias_weight is not None:  # [B, S, L, heads] -> [B, heads, S (queries), L (keys)]
        if bias is not None:
            raise ValueError("reference_pass: give bias or bias_weight, not both")
        bias = F.linear(h, bias_weight).permute(0, 3, 1, 2)
    qkv = F.linear(h, qkv_weight, qkv_bias)                         # [B, S, L, 3D]
    qkv = qkv.reshape(B * S, L, 3, num_heads, hd).permute(2, 0, 3, 1, 4)  # [3, B*S, heads, L, hd]
    q, k, v = qkv[0], qkv[1], qkv[2]
    if mask is not None or bias is not None:
        logits = (q @ k.transpose(-1, -2) / math.sqrt(hd)).reshape(B, S, num_heads, L, L)
        if bias is not None:
            logits = logits + bias.unsqueeze(1).to(logits.dtype)
        if mask is not None:
            present = (mask if axis == "row" else mask.transpose(1, 2)) != 0  # [B, S, L]: the keys
            logits = replace_absent(logits, ~present)
        o = torch.softmax(logits, dim=-1).reshape(B * S, num_heads, L, L) @ v
    elif attention == "sdpa" and q.numel() > 0:
        o = F.scaled_dot_product_attention(q, k, v)
    elif attention == "sdpa":
        # No sequences: torch 2.11's CUDA SDPA returns None for them in 16-bit dtypes; plain matmuls
        # give the empty result and its autograd graph.
        o = q @ k.transpose(-1, -2) @ v
    else:
        o = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(hd), dim=-1) @ v
    o = o.transpose(1, 2).reshape(B, S, L, D)
    if gate_weight is not None:
        o = o * torch.sigmoid(F.linear(h, gate_weight, gate_bias))
    out = F.linear(o, out_weight, out_bias)
    if residual:
        out = x + out
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
