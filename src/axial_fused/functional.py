"""The functional API and the dispatch between the fused CUDA kernels and the PyTorch reference.

A call validates its arguments (TypeError / ValueError for bad input), then asks
:func:`fallback_reason` whether the fused path can run. If it can, one call into the registered
operator (``torch.ops.axial_fused.*``) launches one kernel per pass (two when a sequence group does
not fit on chip; three on Hopper at dim >= 512, where the output projection runs as its own GEMM:
docs/design.md). If not, the reference computes the same result with PyTorch ops (autograd
included) after a one-time warning, or ``strict=True`` raises :class:`FusedUnavailableError`.
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import NamedTuple

import torch

from . import _ext
from ._checks import (DTYPE_NAMES, check_axial_weights, check_axis, check_bias, check_bias_weight, check_eps,
                      check_has_num_heads, check_heads, check_heads_given, check_mask, check_module, check_pass,
                      check_pass_tuple, check_passes_agree, check_residual, check_state_dict, check_x, kernel_dtype)
from ._ops import call_checked
from .reference import reference_pass

__all__ = ["PassWeights", "AxialWeights", "axial_attention", "axial_pass", "fallback_reason", "supported_configs",
           "FusedUnavailableError", "FusedFallbackWarning", "Config"]


class FusedUnavailableError(RuntimeError):
    """Raised by ``strict=True`` calls that cannot take the fused path."""


class FusedFallbackWarning(UserWarning):
    """Warned once per reason when a call falls back to the PyTorch reference."""


class PassWeights(NamedTuple):
    """The parameters of one axial pass (nn.Linear / nn.LayerNorm layouts). The last four are optional."""
    norm_weight: torch.Tensor  # [D]
    norm_bias: torch.Tensor    # [D]
    qkv_weight: torch.Tensor   # [3D, D]: rows 0..D-1 q, D..2D-1 k, 2D..3D-1 v
    out_weight: torch.Tensor   # [D, D]
    out_bias: torch.Tensor     # [D]
    qkv_bias: torch.Tensor | None = None     # [3D]: added after the projection (q | k | v)
    gate_weight: torch.Tensor | None = None  # [D, D]: o * sigmoid(LN(x) W_g^T + b_g) before out_proj
    gate_bias: torch.Tensor | None = None    # [D] (only with gate_weight; None: zero)
    # [heads, D]: the logit bias computed from the pass's own LayerNorm output, the triangle bias of
    # AF2's Algorithms 13 / 14: query i, key j of a sequence get LN(token (i, j)) . bias_weight[h],
    # the token at position j of sequence i (H == W; not with a `bias` for the same pass)
    bias_weight: torch.Tensor | None = None


def _as_pass(pw, name: str) -> PassWeights:
    """pw as a PassWeights (a tuple or list of 5 to 9 tensors is accepted); TypeError otherwise."""
    if isinstance(pw, PassWeights):
        return pw
    check_pass_tuple(pw, name)
    return PassWeights(*pw)


class AxialWeights(NamedTuple):
    """Row and column pass weights plus the head count and LayerNorm eps."""
    row: PassWeights
    col: PassWeights
    num_heads: int
    eps: float = 1e-5

    @classmethod
    def create(cls, row, col, num_heads: int, eps: float = 1e-5) -> "AxialWeights":
        """Validated construction (shapes, dtypes, devices, num_heads)."""
        row, col = _as_pass(row, "row"), _as_pass(col, "col")
        dim = check_pass(row, "row")
        check_pass(col, "col", dim)
        check_passes_agree(row, col)
        check_heads(num_heads, dim)
        check_eps(eps)
        return cls(row, col, int(num_heads), float(eps))

    @classmethod
    def from_module(cls, m: torch.nn.Module) -> "AxialWeights":
        """From :class:`axial_fused.AxialAttention`, the reference model, or any module with parameters
        ``row_norm``/``row_qkv``/``row_out``/``col_*`` (nn.LayerNorm / nn.Linear) and ``num_heads``."""
        check_module(m, "from_module")
        check_has_num_heads(m)
        try:
            passes = [PassWeights(getattr(m, f"{p}_norm").weight, getattr(m, f"{p}_norm").bias,
                                  getattr(m, f"{p}_qkv").weight, getattr(m, f"{p}_out").weight,
                                  getattr(m, f"{p}_out").bias) for p in ("row", "col")]
        except AttributeError as e:
            raise ValueError(f"{type(m).__name__} lacks the reference parameter names "
                             f"(row_norm, row_qkv, row_out, col_norm, col_qkv, col_out): {e}") from None
        norm = getattr(m, "row_norm")
        eps = getattr(norm, "eps", getattr(m, "eps", 1e-5))
        return cls.create(passes[0], passes[1], m.num_heads, eps)

    @classmethod
    def from_state_dict(cls, sd, num_heads: int, eps: float = 1e-5) -> "AxialWeights":
        """From a state_dict of the reference model (keys ``row_norm.weight``, ``row_qkv.weight``, ...).
        A common prefix (e.g. ``module.``) is accepted."""
        names = [f"{p}_{n}" for p in ("row", "col") for n in ("norm.weight", "norm.bias", "qkv.weight",
                                                                  "out.weight", "out.bias")]
        prefix = ""
        for k in sd:
            if k.endswith("row_norm.weight"):
                prefix = k[: -len("row_norm.weight")]
                break
        check_state_dict(sd, names, prefix)
        t = [sd[prefix + n] for n in names]
        return cls.create(PassWeights(*t[:5]), PassWeights(*t[5:]), num_heads, eps)


# ---- the path decision --------------------------------------------------------------------------
# Everything here must trace under torch.compile(fullgraph=True) and torch.export: attribute reads,
# grad/autocast state (both understood by dynamo) and one function marked constant for the
# compiler (_device_reason). Layout (strides, alignment) is not decided here: the op copies a
# layout its kernels cannot read (csrc/ops.cpp), since data_ptr() cannot be read while tracing.

_device_reason_cache: dict[tuple, str | None] = {}


@torch.compiler.assume_constant_result
def _device_reason(device: int, dtype: str, dim: int, num_heads: int) -> str | None:
    """Why GPU `device` cannot run the compiled kernels for (dtype, dim, num_heads), or None; cached.
    Marked constant for torch.compile: it depends only on its arguments and the hardware, and it
    calls into the extension (ctypes), which dynamo cannot trace."""
    key = (device, dtype, dim, num_heads)
    if key not in _device_reason_cache:
        _device_reason_cache[key] = _arch_reason(device) or _smem_reason(device, dtype, dim, num_heads)
    return _device_reason_cache[key]


def _arch_reason(device: int) -> str | None:
    C = _ext.C
    err = C.device_kernel_error(device)
    if not err:
        return None
    return _ext.arch_message(torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device),
                             C.compiled_archs(), err)


def _smem_reason(device: int, dtype: str, dim: int, num_heads: int) -> str | None:
    if _ext.C.fits_device(dtype, dim, num_heads, device):
        return None
    return f"dim {dim} in {dtype} needs more shared memory per block than {torch.cuda.get_device_name(device)} offers"


def fallback_reason(x: torch.Tensor, weights, *, num_heads: int | None = None,
                    axis: str | None = None) -> str | None:
    """Why a call with these arguments would not take the fused path, or None if it would.

    ``weights``: an :class:`AxialWeights` (for :func:`axial_attention`), or a :class:`PassWeights`
    with ``num_heads`` given (for :func:`axial_pass`; ``axis`` may be given and is checked). Inputs
    that are invalid raise, as the call would."""
    if isinstance(weights, AxialWeights):
        passes, heads = [weights.row, weights.col], weights.num_heads
    else:
        passes = [_as_pass(weights, "weights")]
        check_heads_given(num_heads)
        heads = num_heads
    if axis is not None:
        check_axis(axis)
    dim = check_pass(passes[0], "weights")
    check_heads(heads, dim)
    check_x(x, dim, passes[0].norm_weight)
    return _reason(x, passes, dim, heads)


def _reason(x: torch.Tensor, passes, dim: int, num_heads: int, biases=()) -> str | None:
    """The decision itself, after validation. Only attribute reads: this runs on every call."""
    if _ext.C is None:
        return f"the CUDA extension axial_fused._C is not available ({_ext.error})"
    if not x.is_cuda:
        return f"x is on {x.device}; the fused kernels run on CUDA devices"
    dtype = DTYPE_NAMES.get(kernel_dtype(x))
    if dtype is None:
        return f"x is {x.dtype}; the fused path supports float32, float16 and bfloat16"
    if torch.is_grad_enabled() and (x.requires_grad or any(t is not None and t.requires_grad
                                                           for ts in (*passes, biases) for t in ts)):
        return ("gradients are required (x, a weight or a bias requires grad and grad mode is on); the fused path is "
                "inference-only: call under torch.no_grad() or torch.inference_mode() to use it")
    if (dtype, dim, num_heads) not in _ext.specs():
        return (f"no compiled specialization for dtype {dtype}, dim {dim}, heads {num_heads}; compiled: "
                f"{_ext.describe_specs()}. Rebuild with AXIAL_FUSED_SPECS={dim}x{num_heads}:{_short(dtype)} added")
    return _device_reason(x.device.index, dtype, dim, num_heads)


def _short(dtype: str) -> str:
    return {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[dtype]


_warned: set[str] = set()


def _fallback(reason: str, strict: bool) -> None:
    if strict:
        raise FusedUnavailableError(f"axial_fused: the fused path cannot run this call: {reason}")
    _warn_once(reason)


_INTERNAL = tuple(os.path.dirname(os.path.abspath(f)) + os.sep for f in (__file__, torch.__file__))


def _caller_stacklevel() -> int:
    """warnings.warn's stacklevel, called from the warning function, that names the first frame
    outside this package and torch (nn.Module's call machinery): the user's line."""
    f, level = sys._getframe(2), 2  # (level 2: the warning function's caller)
    while f is not None and f.f_code.co_filename.startswith(_INTERNAL):
        f, level = f.f_back, level + 1
    return level


@torch.compiler.assume_constant_result
def _warn_once(reason: str) -> bool:
    """Warn once per reason, at the user's call. Marked constant for torch.compile, which cannot trace
    warnings.warn: the compiler runs it once while tracing, so a compiled call warns when its graph
    is built."""
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"axial_fused: computing with PyTorch ops instead of the fused kernels: {reason}",
                      FusedFallbackWarning, stacklevel=_caller_stacklevel())
    return True


# ---- the calls ----------------------------------------------------------------------------------

def _attention(x, row: PassWeights, col: PassWeights, num_heads: int, eps: float, strict: bool, mask=None,
               row_bias=None, col_bias=None, residual: bool = True) -> torch.Tensor:
    row, col = _as_pass(row, "row"), _as_pass(col, "col")
    dim = check_pass(row, "row")
    check_pass(col, "col", dim)
    check_heads(num_heads, dim)
    check_eps(eps)
    check_x(x, dim, row.norm_weight)
    if col.norm_weight.dtype != x.dtype or col.norm_weight.device != x.device:
        check_x(x, dim, col.norm_weight)
    if mask is not None or row_bias is not None or col_bias is not None or residual is not True:
        check_mask(mask, x)
        check_bias(row_bias, x, num_heads, 0, "row_bias", autocast=True)
        check_bias(col_bias, x, num_heads, 1, "col_bias", autocast=True)
        check_residual(residual)
    check_bias_weight(row.bias_weight, x, num_heads, row_bias, "row.bias_weight", "row_bias")
    check_bias_weight(col.bias_weight, x, num_heads, col_bias, "col.bias_weight", "col_bias")
    reason = _reason(x, (row, col), dim, num_heads, (row_bias, col_bias))
    if reason is None:
        if x.shape[0] == 0:
            return torch.empty_like(x, memory_format=torch.contiguous_format)
        return call_checked(torch.ops.axial_fused.axial_attention.default, x, *row[:5], *col[:5], num_heads, eps,
                            *row[5:8], *col[5:8], mask, row_bias, col_bias, residual, row[8], col[8])
    _fallback(reason, strict)
    x = reference_pass(x, *row, num_heads=num_heads, axis="row", eps=eps, mask=mask, bias=row_bias, residual=residual)
    return reference_pass(x, *col, num_heads=num_heads, axis="col", eps=eps, mask=mask, bias=col_bias, residual=residual)


def axial_attention(x: torch.Tensor, weights: AxialWeights, *, mask: torch.Tensor | None = None,
                    row_bias: torch.Tensor | None = None, col_bias: torch.Tensor | None = None,
                    residual: bool = True, strict: bool = False) -> torch.Tensor:
    """Row attention then column attention on ``x[B, H, W, D]``; returns a new ``[B, H, W, D]`` tensor.

    ``mask`` ``[B, H, W]`` (true / 1: present) masks keys in both passes; ``row_bias``
    ``[1 or B, heads, W, W]`` and ``col_bias`` ``[1 or B, heads, H, H]`` are added to the passes'
    scaled logits; ``residual=False``: each pass returns its update alone (the column pass then reads
    the row pass's update). docs/usage.md has the details."""
    check_axial_weights(weights, AxialWeights)
    return _attention(x, weights.row, weights.col, weights.num_heads, weights.eps, strict, mask, row_bias, col_bias,
                      residual)


def axial_pass(x: torch.Tensor, pass_weights: PassWeights, *, num_heads: int, axis: str, eps: float = 1e-5,
               mask: torch.Tensor | None = None, bias: torch.Tensor | None = None, residual: bool = True,
               strict: bool = False) -> torch.Tensor:
    """One pass along ``axis`` ("row" or "col"): ``x + OutProj(MHA(QKV(LN(x))))``, with the pass's
    optional q/k/v bias, sigmoid gate and computed logit bias (``PassWeights``), key ``mask``
    ``[B, H, W]``, logit ``bias`` ``[1 or B, heads, L, L]``; ``residual=False`` returns
    ``OutProj(...)`` alone."""
    check_axis(axis)
    pw = _as_pass(pass_weights, "pass_weights")
    dim = check_pass(pw, "pass_weights")
    check_heads(num_heads, dim)
    return _run_pass(x, pw, dim, num_heads, axis, eps, mask, bias, residual, strict)


def _run_pass(x, pw: PassWeights, dim: int, num_heads: int, axis: str, eps: float, mask, bias, residual: bool,
              strict: bool) -> torch.Tensor:
    """axial_pass once its weights are checked (check_pass and check_heads passed for dim and
    num_heads; the protein modules check their cached weights once): the per-call checks and the call."""
    check_eps(eps)
    check_x(x, dim, pw.norm_weight)
    if mask is not None or bias is not None or residual is not True:
        check_mask(mask, x)
        check_bias(bias, x, num_heads, 0 if axis == "row" else 1, "bias", autocast=True)
        check_residual(residual)
    check_bias_weight(pw.bias_weight, x, num_heads, bias, "pass_weights.bias_weight", "bias")
    reason = _reason(x, (pw,), dim, num_heads, (bias,))
    if reason is None:
        if x.shape[0] == 0:
            return torch.empty_like(x, memory_format=torch.contiguous_format)
        return call_checked(torch.ops.axial_fused.axial_pass.default, x, *pw[:5], num_heads, 0 if axis == "row" else 1,
                            eps, *pw[5:8], mask, bias, residual, pw[8])
    _fallback(reason, strict)
    return reference_pass(x, *pw, num_heads=num_heads, axis=axis, eps=eps, mask=mask, bias=bias, residual=residual)


class Config(NamedTuple):
    dtype: torch.dtype
    dim: int
    heads: int
    head_dim: int


def supported_configs() -> list[Config]:
    """The compiled specializations (every sequence length on either axis is served)."""
    named = {v: k for k, v in DTYPE_NAMES.items()}
    return [Config(named[dt], d, h, d // h) for dt, d, h in sorted(_ext.specs(), key=lambda s: (s[1], s[2], s[0]))]
