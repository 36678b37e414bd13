"""The functional API and the dispatch between the fused CUDA kernels and the PyTorch reference.

A call validates its arguments (TypeError / ValueError for bad input), then asks
:func:`fallback_reason` whether the fused path can run. If it can, one call into the registered
operator (``torch.ops.axial_fused.*``) launches one kernel per pass (two when a sequence group does
not fit on chip; three on Hopper at dim >= 512, where the output projection runs as its own GEMM:
docs/design.md). If not, the reference computes the same result with PyTorch ops (autograd
included) after a one-time warning, or ``strict=True`` raises :class:`FusedUnavailableError`.
"""
from __future__ import annotations

import math
import os
import sys
import warnings
from typing import NamedTuple

import torch

from . import _ext
from ._ops import DTYPE_NAMES, PAIR_BIAS_MAX_C, PAIR_BIAS_MAX_HEADS, call_checked
from .reference import reference_pass

__all__ = ["PassWeights", "AxialWeights", "axial_attention", "axial_pass", "fallback_reason", "supported_configs",
           "FusedUnavailableError", "FusedFallbackWarning", "Config"]


class FusedUnavailableError(RuntimeError):
    """Raised by ``strict=True`` calls that cannot take the fused path."""


class FusedFallbackWarning(UserWarning):
    """Warned once per reason when a call falls back to the PyTorch reference."""


_FIELDS = ("norm_weight", "norm_bias", "qkv_weight", "out_weight", "out_bias", "qkv_bias", "gate_weight", "gate_bias",
           "bias_weight")
_REQUIRED = 5  # the first five; the rest may be None


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
    if isinstance(pw, (tuple, list)) and _REQUIRED <= len(pw) <= len(_FIELDS):
        return PassWeights(*pw)
    raise TypeError(f"{name} must be a PassWeights (or a tuple of its 5 to 9 fields), got {type(pw).__name__}")


def _check_pass(pw, name: str, dim: int | None = None) -> int:
    """Validate one PassWeights; return D. Runs on every call: one loop, attribute reads only, the
    messages built only for a failure."""
    pw = _as_pass(pw, name)
    for i, (field, t) in enumerate(zip(_FIELDS, pw)):
        if not isinstance(t, torch.Tensor) and (i < _REQUIRED or t is not None):
            raise TypeError(f"{name}.{field} must be a torch.Tensor{'' if i < _REQUIRED else ' or None'}, "
                            f"got {type(t).__name__}")
    if pw.gate_bias is not None and pw.gate_weight is None:
        raise ValueError(f"{name}.gate_bias was given without {name}.gate_weight; the gate needs its weight [D, D]")
    ref = pw.norm_weight
    if dim is None:
        if ref.dim() != 1:
            raise ValueError(f"{name}.norm_weight must be 1-D [D], got shape {tuple(ref.shape)}")
        dim = ref.shape[0]
    vec, square = (dim,), (dim, dim)
    dtype, device = ref.dtype, ref.device
    heads = pw.bias_weight.shape[0] if pw.bias_weight is not None and pw.bias_weight.dim() == 2 else -1
    for field, t, shape in zip(_FIELDS, pw, (vec, vec, (3 * dim, dim), square, vec, (3 * dim,), square, vec,
                                             (heads, dim))):
        if t is None:
            continue
        if t.shape != shape:
            expected = "[heads, D]" if field == "bias_weight" else shape
            raise ValueError(f"{name}.{field} has shape {tuple(t.shape)}, expected {expected} for D = {dim}")
        if t.dtype != dtype:
            raise TypeError(f"{name}.{field} is {t.dtype} but {name}.norm_weight is {dtype}: "
                            f"all weights must share one dtype")
        if t.device != device:
            raise ValueError(f"{name}.{field} is on {t.device} but {name}.norm_weight is on {device}: "
                             f"all weights must be on one device")
    return dim


class AxialWeights(NamedTuple):
    """Row and column pass weights plus the head count and LayerNorm eps."""
    row: PassWeights
    col: PassWeights
    num_heads: int
    eps: float = 1e-5

    @classmethod
    def create(cls, row, col, num_heads: int, eps: float = 1e-5) -> "AxialWeights":
        """Validated construction (shapes, dtypes, devices, num_heads)."""
        row, col = PassWeights(*row), PassWeights(*col)
        dim = _check_pass(row, "row")
        _check_pass(col, "col", dim)
        if row.norm_weight.dtype != col.norm_weight.dtype:
            raise TypeError(f"row weights are {row.norm_weight.dtype} but column weights are {col.norm_weight.dtype}: "
                            f"all weights must share one dtype")
        if row.norm_weight.device != col.norm_weight.device:
            raise ValueError(f"row weights are on {row.norm_weight.device} but column weights are on "
                             f"{col.norm_weight.device}: all weights must be on one device")
        _check_heads(num_heads, dim)
        _check_eps(eps)
        return cls(row, col, int(num_heads), float(eps))

    @classmethod
    def from_module(cls, m: torch.nn.Module) -> "AxialWeights":
        """From :class:`axial_fused.AxialAttention`, the reference model, or any module with parameters
        ``row_norm``/``row_qkv``/``row_out``/``col_*`` (nn.LayerNorm / nn.Linear) and ``num_heads``."""
        if not isinstance(m, torch.nn.Module):
            raise TypeError(f"from_module expects an nn.Module, got {type(m).__name__}")
        if not hasattr(m, "num_heads"):
            raise ValueError(f"{type(m).__name__} has no num_heads attribute")
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
        missing = [prefix + n for n in names if prefix + n not in sd]
        if missing:
            raise ValueError(f"state_dict lacks {missing}; expected the reference model's keys {names}")
        t = [sd[prefix + n] for n in names]
        return cls.create(PassWeights(*t[:5]), PassWeights(*t[5:]), num_heads, eps)


def _check_heads(num_heads, dim: int) -> None:
    if isinstance(num_heads, bool) or not isinstance(num_heads, int):
        raise TypeError(f"num_heads must be an int, got {type(num_heads).__name__}")
    if num_heads <= 0 or dim % num_heads:
        raise ValueError(f"D = {dim} is not divisible by num_heads = {num_heads}")


def _check_eps(eps) -> None:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps must be a float, got {type(eps).__name__}")
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a positive finite number, got {eps!r}")


def _check_x(x, dim: int, wref: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(f"x must be 4-D [B, H, W, D], got shape {tuple(x.shape)}")
    if x.shape[3] != dim:
        raise ValueError(f"x has D = {x.shape[3]} (shape {tuple(x.shape)}) but the weights have D = {dim}")
    if not (x.is_floating_point()):
        raise TypeError(f"x is {x.dtype}; supported: float32, float16, bfloat16 (fused) and float64 (reference)")
    if x.dtype != wref.dtype and not _autocasting(x, wref):
        raise TypeError(f"x is {x.dtype} but the weights are {wref.dtype}; convert one, e.g. weights .to({x.dtype})")
    if x.device != wref.device:
        raise ValueError(f"x is on {x.device} but the weights are on {wref.device}; move them to one device")
    if x.shape[1] == 0 or x.shape[2] == 0 or x.shape[3] == 0:
        # A sequence of length 0 has no softmax; an error, not an empty result (docs/errors.md).
        raise ValueError(f"x has shape {tuple(x.shape)}: H, W and D must be at least 1 (B may be 0)")


# ---- the path decision --------------------------------------------------------------------------
# Everything here must trace under torch.compile(fullgraph=True) and torch.export: attribute reads,
# grad/autocast state (both understood by dynamo) and one function marked constant for the
# compiler (_device_reason). Layout (strides, alignment) is not decided here: the op copies a
# layout its kernels cannot read (csrc/ops.cpp), since data_ptr() cannot be read while tracing.

_device_reason_cache: dict[tuple, str | None] = {}


def _autocasting(x: torch.Tensor, wref: torch.Tensor) -> bool:
    """Whether autocast will cast x and the weights to one dtype (so they may differ), as it does for
    nn.Linear: autocast on for x's device type and both in float32/float16/bfloat16."""
    return (x.device.type in ("cuda", "cpu") and torch.is_autocast_enabled(x.device.type)
            and x.dtype in DTYPE_NAMES and wref.dtype in DTYPE_NAMES)


def _kernel_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the kernel runs in: x's, or under torch.autocast("cuda") the autocast dtype (the op's
    AutocastCUDA kernel casts x and the weights to it)."""
    if x.dtype in DTYPE_NAMES and torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return x.dtype


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
        if num_heads is None:
            raise TypeError("fallback_reason: num_heads is required when weights is a PassWeights "
                            "(the compiled kernels are chosen by (dtype, dim, heads))")
        heads = num_heads
    if axis is not None and axis not in ("row", "col"):
        raise ValueError(f"axis must be 'row' or 'col', got {axis!r}")
    dim = _check_pass(passes[0], "weights")
    _check_heads(heads, dim)
    _check_x(x, dim, passes[0].norm_weight)
    return _reason(x, passes, dim, heads)


def _reason(x: torch.Tensor, passes, dim: int, num_heads: int, biases=()) -> str | None:
    """The decision itself, after validation. Only attribute reads: this runs on every call."""
    if _ext.C is None:
        return f"the CUDA extension axial_fused._C is not available ({_ext.error})"
    if not x.is_cuda:
        return f"x is on {x.device}; the fused kernels run on CUDA devices"
    dtype = DTYPE_NAMES.get(_kernel_dtype(x))
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


# ---- the per-call inputs: the key mask and the logit bias -----------------------------------------

_MASK_DTYPES = (torch.bool, torch.uint8)


def _check_mask(mask, x: torch.Tensor) -> None:
    """mask: None, or [B, H, W] bool / 0-1 (uint8 or floating) on x's device; true / 1: the token is present."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    B, H, W = x.shape[:3]
    if mask.shape != (B, H, W):
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected [B, H, W] = {[B, H, W]} "
                         f"(x of shape {tuple(x.shape)})")
    if mask.dtype not in _MASK_DTYPES and not mask.is_floating_point():
        raise TypeError(f"mask is {mask.dtype}; supported: bool, or 0/1 in uint8 or a floating dtype "
                        f"(true / 1: the token is present)")
    if mask.device != x.device:
        raise ValueError(f"mask is on {mask.device} but x is on {x.device}")


def _check_bias(bias, x: torch.Tensor, num_heads: int, axis: str, name: str) -> None:
    """bias: None, or the logit bias of a pass: [1 or B, heads, L, L] (L = W for rows, H for columns),
    float32 or x's dtype, on x's device, any strides."""
    if bias is None:
        return
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(bias).__name__}")
    B = x.shape[0]
    L, len_name = (x.shape[2], "W") if axis == "row" else (x.shape[1], "H")
    if bias.dim() != 4:
        raise ValueError(f"{name} must be [B or 1, heads, {len_name}, {len_name}] = [{B} or 1, {num_heads}, {L}, {L}], "
                         f"got shape {tuple(bias.shape)}")
    if bias.shape[0] not in (1, B):
        raise ValueError(f"{name} has batch dimension {bias.shape[0]}, which does not broadcast to x's batch {B} "
                         f"(expected 1 or {B})")
    if bias.shape[1] != num_heads:
        raise ValueError(f"{name} has {bias.shape[1]} heads (shape {tuple(bias.shape)}), expected num_heads = {num_heads}")
    if bias.shape[2] != L or bias.shape[3] != L:
        raise ValueError(f"{name} has shape {tuple(bias.shape)} but the {'row' if axis == 'row' else 'column'} pass "
                         f"has sequences of {len_name} = {L} tokens: expected [.., {L}, {L}]")
    if bias.dtype not in (torch.float32, x.dtype, _kernel_dtype(x)):
        raise TypeError(f"{name} is {bias.dtype}; supported: float32 or x's dtype ({x.dtype})")
    if bias.device != x.device:
        raise ValueError(f"{name} is on {bias.device} but x is on {x.device}")


def _check_bias_weight(pw: PassWeights, x: torch.Tensor, num_heads: int, bias, name: str, bias_name: str) -> None:
    """A pass's bias_weight: [num_heads, D], on a square grid, without a bias beside it, within the
    pair-bias kernel's limits (the paths where K1 does not compute it use that kernel)."""
    bw = pw.bias_weight
    if bw is None:
        return
    if bw.shape[0] != num_heads:
        raise ValueError(f"{name}.bias_weight has shape {tuple(bw.shape)}, expected [num_heads, D] = "
                         f"[{num_heads}, {x.shape[3]}]")
    if num_heads > PAIR_BIAS_MAX_HEADS or x.shape[3] > PAIR_BIAS_MAX_C:
        raise ValueError(f"{name}.bias_weight supports up to {PAIR_BIAS_MAX_HEADS} heads and {PAIR_BIAS_MAX_C} "
                         f"channels, got {num_heads} heads and D = {x.shape[3]}; compute the bias in PyTorch "
                         f"and pass it as {bias_name}")
    if x.shape[1] != x.shape[2]:
        raise ValueError(f"{name}.bias_weight needs a square grid (H == W: the bias of query i, key j comes from "
                         f"token (i, j)), got x of shape {tuple(x.shape)}")
    if bias is not None:
        raise ValueError(f"{bias_name} and {name}.bias_weight were both given; give one (add a fixed bias to the "
                         f"computed one in PyTorch and pass the sum as {bias_name})")


def _check_residual(residual) -> None:
    if not isinstance(residual, bool):
        raise TypeError(f"residual must be a bool, got {type(residual).__name__}")


# ---- the calls ----------------------------------------------------------------------------------

def _attention(x, row: PassWeights, col: PassWeights, num_heads: int, eps: float, strict: bool, mask=None,
               row_bias=None, col_bias=None, residual: bool = True) -> torch.Tensor:
    dim = _check_pass(row, "row")
    _check_pass(col, "col", dim)
    _check_heads(num_heads, dim)
    _check_eps(eps)
    _check_x(x, dim, row.norm_weight)
    if col.norm_weight.dtype != x.dtype or col.norm_weight.device != x.device:
        _check_x(x, dim, col.norm_weight)
    if mask is not None or row_bias is not None or col_bias is not None or residual is not True:
        _check_mask(mask, x)
        _check_bias(row_bias, x, num_heads, "row", "row_bias")
        _check_bias(col_bias, x, num_heads, "col", "col_bias")
        _check_residual(residual)
    row, col = _as_pass(row, "row"), _as_pass(col, "col")
    _check_bias_weight(row, x, num_heads, row_bias, "row", "row_bias")
    _check_bias_weight(col, x, num_heads, col_bias, "col", "col_bias")
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
    if not isinstance(weights, AxialWeights):
        raise TypeError(f"weights must be an axial_fused.AxialWeights (see AxialWeights.from_module / "
                        f"from_state_dict), got {type(weights).__name__}")
    return _attention(x, weights.row, weights.col, weights.num_heads, weights.eps, strict, mask, row_bias, col_bias,
                      residual)


def axial_pass(x: torch.Tensor, pass_weights: PassWeights, *, num_heads: int, axis: str, eps: float = 1e-5,
               mask: torch.Tensor | None = None, bias: torch.Tensor | None = None, residual: bool = True,
               strict: bool = False) -> torch.Tensor:
    """One pass along ``axis`` ("row" or "col"): ``x + OutProj(MHA(QKV(LN(x))))``, with the pass's
    optional q/k/v bias, sigmoid gate and computed logit bias (``PassWeights``), key ``mask``
    ``[B, H, W]``, logit ``bias`` ``[1 or B, heads, L, L]``; ``residual=False`` returns
    ``OutProj(...)`` alone."""
    if axis not in ("row", "col"):
        raise ValueError(f"axis must be 'row' or 'col', got {axis!r}")
    pw = _as_pass(pass_weights, "pass_weights")
    dim = _check_pass(pw, "pass_weights")
    _check_heads(num_heads, dim)
    return _run_pass(x, pw, dim, num_heads, axis, eps, mask, bias, residual, strict)


def _run_pass(x, pw: PassWeights, dim: int, num_heads: int, axis: str, eps: float, mask, bias, residual: bool,
              strict: bool) -> torch.Tensor:
    """axial_pass once its weights are checked (_check_pass and _check_heads passed for dim and
    num_heads; the protein modules check their cached weights once): the per-call checks and the call."""
    _check_eps(eps)
    _check_x(x, dim, pw.norm_weight)
    if mask is not None or bias is not None or residual is not True:
        _check_mask(mask, x)
        _check_bias(bias, x, num_heads, axis, "bias")
        _check_residual(residual)
    _check_bias_weight(pw, x, num_heads, bias, "pass_weights", "bias")
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
