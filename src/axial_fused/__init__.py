"""axial_fused: fused axial-attention inference kernels for PyTorch.

    import axial_fused
    out = axial_fused.axial_attention(x, axial_fused.AxialWeights.from_module(model))

See README.md and docs/design.md.
"""
from . import protein, reference
from ._version import __version__
from .functional import (AxialWeights, Config, FusedFallbackWarning, FusedUnavailableError, PassWeights,
                         axial_attention, axial_pass, fallback_reason, supported_configs)
from .module import AxialAttention
from .plan import Plan, explain

__all__ = ["__version__", "AxialAttention", "AxialWeights", "PassWeights", "axial_attention", "axial_pass",
           "fallback_reason", "supported_configs", "Config", "FusedUnavailableError", "FusedFallbackWarning",
           "reference", "protein", "explain", "Plan"]
