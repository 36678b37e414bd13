"""AxialAttention: an nn.Module with the reference's parameter names that takes the fused path."""
from __future__ import annotations

import torch

from .functional import PassWeights, _attention
from .reference import AxialAttentionReference

__all__ = ["AxialAttention"]


class AxialAttention(AxialAttentionReference):
    """Row then column multi-head self-attention on ``x[B, H, W, D]``.

    Parameters (and state_dict keys) are the reference model's: ``row_norm``, ``row_qkv``,
    ``row_out``, ``col_norm``, ``col_qkv``, ``col_out``. ``forward`` runs the fused CUDA kernels when
    it can (CUDA input, float32/float16/bfloat16, a compiled (dim, heads), no gradient required:
    use ``torch.no_grad()`` / ``torch.inference_mode()``); otherwise the PyTorch reference, with a
    one-time warning. ``strict=True`` raises instead of falling back.
    """

    def __init__(self, dim: int, num_heads: int, eps: float = 1e-5, *, strict: bool = False, device=None, dtype=None):
        super().__init__(dim, num_heads, eps, attention="sdpa", device=device, dtype=dtype)
        self.strict = strict

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        row = PassWeights(self.row_norm.weight, self.row_norm.bias, self.row_qkv.weight, self.row_out.weight,
                          self.row_out.bias)
        col = PassWeights(self.col_norm.weight, self.col_norm.bias, self.col_qkv.weight, self.col_out.weight,
                          self.col_out.bias)
        return _attention(x, row, col, self.num_heads, self.row_norm.eps, self.strict)
