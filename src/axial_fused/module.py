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

    def _pass_weights(self, prefix: str) -> PassWeights:
        """The pass's five tensors, read from the submodules' parameter dicts: nn.Module's attribute
        fallback (__getattr__) costs about 0.5 µs a lookup, 20 per call. A submodule whose weight is
        not a plain parameter (torch.nn.utils.parametrize, a replaced module) is read the usual way."""
        mods = self._modules
        norm, qkv, out = mods[prefix + "_norm"], mods[prefix + "_qkv"], mods[prefix + "_out"]
        try:
            n, q, o = norm._parameters, qkv._parameters, out._parameters
            return PassWeights(n["weight"], n["bias"], q["weight"], o["weight"], o["bias"])
        except (AttributeError, KeyError):
            return PassWeights(norm.weight, norm.bias, qkv.weight, out.weight, out.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _attention(x, self._pass_weights("row"), self._pass_weights("col"), self.num_heads,
                          self._modules["row_norm"].eps, self.strict)
