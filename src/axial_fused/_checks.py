"""The argument checks, each written once: the functional API's (functional.py, module.py), the
protein modules' (protein.py) and the registered operators' (_ops.py's fake and Autograd kernels).

A check raises TypeError for a wrong type or dtype and ValueError for a wrong value, shape or device;
its message names the argument, says what was given and what is supported (docs/errors.md).

The operators' CUDA kernels (csrc/ops.cpp) make the same checks with the same messages, formatted as
LibTorch formats them: each message begins ``axial_fused: ``, shapes print as ``[2, 3]``, dtypes by
c10's names (``Float``, ``BFloat16``) and weight names carry their pass as ``row_qkv_weight``. A
check that both entry points make takes a ``style``: ``API`` (the default; ``(2, 3)``,
``torch.float32``, ``row.qkv_weight``) or ``OP``. tests/test_errors.py compares every ``OP`` message
with csrc/ops.cpp's.

The API's checks run on every call: attribute reads and comparisons; a message is built only for a
failure.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch

# A pass's weights, in PassWeights' order and by the operators' argument names (``row_`` / ``col_``
# before them in axial_attention); the first REQUIRED are required, the rest may be None.
FIELDS = ("norm_weight", "norm_bias", "qkv_weight", "out_weight", "out_bias", "qkv_bias", "gate_weight", "gate_bias",
          "bias_weight")
REQUIRED = 5
# The dtypes with kernels, by the names the binary and the specializations use.
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
PAIR_BIAS_MAX_C, PAIR_BIAS_MAX_HEADS = 1024, 32  # include/axial_fused/pair_bias.h
# dtype names as the binary prints them (c10's ScalarType names).
_SCALAR_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
                 torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                 torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
                 torch.complex128: "ComplexDouble"}
_MASK_DTYPES = (torch.bool, torch.uint8)


def _bracketed(sizes) -> str:
    return "[" + ", ".join(str(s) for s in sizes) + "]"


class Style(NamedTuple):
    """How an entry point's messages print their values."""
    prefix: str                    # before every message
    shape: Callable[..., str]      # a shape (torch.Size or tuple)
    dtype: Callable[..., str]      # a torch.dtype
    number: Callable[..., str]     # a float
    join: str                      # between a pass's name and a weight's: "row.qkv_weight" / "row_qkv_weight"
    python_types: bool             # whether to check the Python types that the operators' schemas enforce


API = Style("", lambda s: str(tuple(s)), str, repr, ".", True)
OP = Style("axial_fused: ", _bracketed, lambda d: _SCALAR_NAMES.get(d, str(d).removeprefix("torch.")),
           lambda v: f"{v:g}", "_", False)  # (C++'s ostream prints a double as %g does)


def weight_name(pass_name: str, field: str, style: Style = API) -> str:
    """A weight's name in a message: "row.qkv_weight" (API), "row_qkv_weight" (OP; "qkv_weight" for
    axial_pass, whose pass has no name)."""
    return f"{pass_name}{style.join}{field}" if pass_name else field


def autocasting(x: torch.Tensor, wref: torch.Tensor) -> bool:
    """Whether autocast will cast x and the weights to one dtype (so they may differ), as it does for
    nn.Linear: autocast on for x's device type and both in float32/float16/bfloat16."""
    return (x.device.type in ("cuda", "cpu") and torch.is_autocast_enabled(x.device.type)
            and x.dtype in DTYPE_NAMES and wref.dtype in DTYPE_NAMES)


def kernel_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the kernel runs in: x's, or under torch.autocast("cuda") the autocast dtype (the op's
    AutocastCUDA kernel casts x and the weights to it)."""
    if x.dtype in DTYPE_NAMES and torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return x.dtype


# ---- shared by the API and the operators ---------------------------------------------------------

def check_tensor(t, name: str, what: str = "", optional: bool = False) -> None:
    """t a torch.Tensor (or None, if optional); what: the form expected, named in the message."""
    if not isinstance(t, torch.Tensor) and not (optional and t is None):
        raise TypeError(f"{name} must be a torch.Tensor{' ' + what if what else ''}{' or None' if optional else ''}, "
                        f"got {type(t).__name__}")


def check_rank(x, style: Style = API) -> None:
    if x.dim() != 4:
        raise ValueError(f"{style.prefix}x must be 4-D [B, H, W, D], got shape {style.shape(x.shape)}")


def check_grid(x, style: Style = API) -> None:
    """A sequence of length 0 has no softmax: an error, not an empty result (docs/errors.md)."""
    if x.shape[1] < 1 or x.shape[2] < 1 or x.shape[3] < 1:
        raise ValueError(f"{style.prefix}x has shape {style.shape(x.shape)}: H, W and D must be at least 1 "
                         f"(B may be 0)")


def check_heads(num_heads, dim: int, style: Style = API) -> None:
    """num_heads an int (the operators' schema makes it one) dividing D."""
    if style.python_types and (isinstance(num_heads, bool) or not isinstance(num_heads, int)):
        raise TypeError(f"num_heads must be an int, got {type(num_heads).__name__}")
    if num_heads <= 0 or dim % num_heads:
        raise ValueError(f"{style.prefix}D = {dim} is not divisible by num_heads = {num_heads}")


def check_eps(eps, style: Style = API, name: str = "eps") -> None:
    """eps a positive finite number (the operators' schema makes it a float)."""
    if style.python_types and (isinstance(eps, bool) or not isinstance(eps, (int, float))):
        raise TypeError(f"{name} must be a float, got {type(eps).__name__}")
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"{style.prefix}{name} must be a positive finite number, got {style.number(eps)}")


def check_shape(t: torch.Tensor, name: str, shape: tuple, dim: int, style: Style = API,
                expected: str | None = None) -> None:
    """t of `shape` (the message says `expected`, if given, in its place)."""
    if t.shape != shape:
        raise ValueError(f"{style.prefix}{name} has shape {style.shape(t.shape)}, expected "
                         f"{expected or style.shape(shape)} for D = {dim}")


def check_gate(gate_weight, gate_bias, pass_name: str, style: Style = API) -> None:
    if gate_bias is not None and gate_weight is None:
        raise ValueError(f"{style.prefix}{weight_name(pass_name, 'gate_bias', style)} was given without "
                         f"{weight_name(pass_name, 'gate_weight', style)}; the gate needs its weight [D, D]")


def check_mask(mask, x: torch.Tensor, style: Style = API) -> None:
    """mask: None, or [B, H, W] bool / 0-1 (uint8 or floating) on x's device; true / 1: the token is present."""
    if mask is None:
        return
    check_tensor(mask, "mask", optional=True)
    if mask.shape != x.shape[:3]:
        raise ValueError(f"{style.prefix}mask has shape {style.shape(mask.shape)}, expected [B, H, W] = "
                         f"{_bracketed(x.shape[:3])} (x of shape {style.shape(x.shape)})")
    if mask.dtype not in _MASK_DTYPES and not mask.dtype.is_floating_point:
        raise TypeError(f"{style.prefix}mask is {style.dtype(mask.dtype)}; supported: bool, or 0/1 in uint8 or a "
                        f"floating dtype (true / 1: the token is present)")
    if mask.device != x.device:
        raise ValueError(f"{style.prefix}mask is on {mask.device} but x is on {x.device}")


def check_bias(bias, x: torch.Tensor, num_heads: int, axis: int, name: str, style: Style = API,
               autocast: bool = False) -> None:
    """bias: None, or the logit bias of the pass along `axis` (0: rows, 1: columns): [1 or B, heads, L, L]
    (L = W for rows, H for columns), float32 or x's dtype (autocast: or the dtype the kernel runs in,
    kernel_dtype), on x's device, any strides."""
    if bias is None:
        return
    check_tensor(bias, name, optional=True)
    B = x.shape[0]
    L, len_name = (x.shape[2], "W") if axis == 0 else (x.shape[1], "H")
    p = style.prefix
    if bias.dim() != 4:
        raise ValueError(f"{p}{name} must be [B or 1, heads, {len_name}, {len_name}] = [{B} or 1, {num_heads}, {L}, "
                         f"{L}], got shape {style.shape(bias.shape)}")
    if bias.shape[0] != 1 and bias.shape[0] != B:
        raise ValueError(f"{p}{name} has batch dimension {bias.shape[0]}, which does not broadcast to x's batch {B} "
                         f"(expected 1 or {B})")
    if bias.shape[1] != num_heads:
        raise ValueError(f"{p}{name} has {bias.shape[1]} heads (shape {style.shape(bias.shape)}), expected "
                         f"num_heads = {num_heads}")
    if bias.shape[2] != L or bias.shape[3] != L:
        raise ValueError(f"{p}{name} has shape {style.shape(bias.shape)} but the {'row' if axis == 0 else 'column'} "
                         f"pass has sequences of {len_name} = {L} tokens: expected [.., {L}, {L}]")
    if bias.dtype != torch.float32 and bias.dtype != x.dtype and not (autocast and bias.dtype == kernel_dtype(x)):
        raise TypeError(f"{p}{name} is {style.dtype(bias.dtype)}; supported: float32 or x's dtype "
                        f"({style.dtype(x.dtype)})")
    if bias.device != x.device:
        raise ValueError(f"{p}{name} is on {bias.device} but x is on {x.device}")


def check_bias_weight(bias_weight, x: torch.Tensor, num_heads: int, bias, name: str, bias_name: str,
                      style: Style = API) -> None:
    """A pass's bias_weight (named `name`; its pass's bias `bias_name`): [num_heads, D], within the
    pair-bias kernel's limits (the paths where K1 does not compute the bias use that kernel), on a
    square grid (its bias is [.., L, L] over L x L tokens), without a bias beside it. (The operators'
    calls check its shape first, with the other weights'.)"""
    if bias_weight is None:
        return
    p, heads, D = style.prefix, bias_weight.shape[0], x.shape[3]
    if heads != num_heads:
        raise ValueError(f"{p}{name} has shape {style.shape(bias_weight.shape)}, expected [num_heads, D] = "
                         f"[{num_heads}, {D}]")
    if heads > PAIR_BIAS_MAX_HEADS or D > PAIR_BIAS_MAX_C:
        raise ValueError(f"{p}{name} supports up to {PAIR_BIAS_MAX_HEADS} heads and {PAIR_BIAS_MAX_C} channels, got "
                         f"{heads} heads and D = {D}; compute the bias in PyTorch and pass it as {bias_name}")
    if x.shape[1] != x.shape[2]:
        raise ValueError(f"{p}{name} needs a square grid (H == W: the bias of query i, key j comes from token (i, j)), "
                         f"got x of shape {style.shape(x.shape)}")
    if bias is not None:
        raise ValueError(f"{p}{bias_name} and {name} were both given; give one (add a fixed bias to the computed one "
                         f"in PyTorch and pass the sum as {bias_name})")


# ---- the functional API (functional.py) ------------------------------------------------------------

def check_pass_tuple(pw, name: str) -> None:
    """pw a PassWeights, or a tuple or list of its first 5 to 9 fields."""
    if not (isinstance(pw, (tuple, list)) and REQUIRED <= len(pw) <= len(FIELDS)):
        raise TypeError(f"{name} must be a PassWeights (or a tuple of its 5 to 9 fields), got {type(pw).__name__}")


def check_pass(pw, name: str, dim: int | None = None) -> int:
    """A PassWeights named `name`: its tensors, shapes (D: `dim`, else its norm_weight's), one dtype and
    one device; returns D. One loop, attribute reads only."""
    for i, t in enumerate(pw):
        if not isinstance(t, torch.Tensor) and (i < REQUIRED or t is not None):
            check_tensor(t, f"{name}.{FIELDS[i]}", optional=i >= REQUIRED)
    check_gate(pw[6], pw[7], name)
    ref = pw[0]
    if dim is None:
        if ref.dim() != 1:
            raise ValueError(f"{name}.norm_weight must be 1-D [D], got shape {tuple(ref.shape)}")
        dim = ref.shape[0]
    vec, square = (dim,), (dim, dim)
    dtype, device = ref.dtype, ref.device
    bw = pw[8]
    heads = bw.shape[0] if bw is not None and bw.dim() == 2 else -1  # (the head count is checked with x)
    for field, t, shape in zip(FIELDS, pw, (vec, vec, (3 * dim, dim), square, vec, (3 * dim,), square, vec,
                                            (heads, dim))):
        if t is None:
            continue
        if t.shape != shape:  # (checked here first: a call costs more than the comparison, on every call)
            check_shape(t, f"{name}.{field}", shape, dim, expected="[heads, D]" if field == "bias_weight" else None)
        if t.dtype != dtype:
            raise TypeError(f"{name}.{field} is {t.dtype} but {name}.norm_weight is {dtype}: "
                            f"all weights must share one dtype")
        if t.device != device:
            raise ValueError(f"{name}.{field} is on {t.device} but {name}.norm_weight is on {device}: "
                             f"all weights must be on one device")
    return dim


def check_passes_agree(row, col) -> None:
    """The row and column passes' weights (each checked) of one dtype and device."""
    if row.norm_weight.dtype != col.norm_weight.dtype:
        raise TypeError(f"row weights are {row.norm_weight.dtype} but column weights are {col.norm_weight.dtype}: "
                        f"all weights must share one dtype")
    if row.norm_weight.device != col.norm_weight.device:
        raise ValueError(f"row weights are on {row.norm_weight.device} but column weights are on "
                         f"{col.norm_weight.device}: all weights must be on one device")


def check_axis(axis) -> None:
    if axis not in ("row", "col"):
        raise ValueError(f"axis must be 'row' or 'col', got {axis!r}")


def check_residual(residual) -> None:
    if not isinstance(residual, bool):
        raise TypeError(f"residual must be a bool, got {type(residual).__name__}")


def check_axial_weights(weights, cls: type) -> None:
    """weights an AxialWeights (`cls`)."""
    if not isinstance(weights, cls):
        raise TypeError(f"weights must be an axial_fused.AxialWeights (see AxialWeights.from_module / "
                        f"from_state_dict), got {type(weights).__name__}")


def check_heads_given(num_heads, who: str = "fallback_reason") -> None:
    """`who` (fallback_reason, explain) with a PassWeights: the head count, which chooses the kernels, is needed."""
    if num_heads is None:
        raise TypeError(f"{who}: num_heads is required when weights is a PassWeights "
                        "(the compiled kernels are chosen by (dtype, dim, heads))")


def check_module(m, who: str, what: str = "") -> None:
    """m an nn.Module, for `who` (from_module, patch_esm, ...); what: the module expected."""
    if not isinstance(m, torch.nn.Module):
        raise TypeError(f"{who} expects an nn.Module{' ' + what if what else ''}, got {type(m).__name__}")


def check_has_num_heads(m) -> None:
    if not hasattr(m, "num_heads"):
        raise ValueError(f"{type(m).__name__} has no num_heads attribute")


def check_state_dict(sd, names: list[str], prefix: str) -> None:
    """sd holds `names` (the reference model's keys), each after `prefix`."""
    missing = [prefix + n for n in names if prefix + n not in sd]
    if missing:
        raise ValueError(f"state_dict lacks {missing}; expected the reference model's keys {names}")


def check_x(x, dim: int, wref: torch.Tensor) -> None:
    """x [B, H, W, D] of the weights' D, floating, of the weights' dtype (or autocast) and device
    (wref: a weight)."""
    check_tensor(x, "x")
    check_rank(x)
    if x.shape[3] != dim:
        raise ValueError(f"x has D = {x.shape[3]} (shape {tuple(x.shape)}) but the weights have D = {dim}")
    if not x.is_floating_point():
        raise TypeError(f"x is {x.dtype}; supported: float32, float16, bfloat16 (fused) and float64 (reference)")
    if x.dtype != wref.dtype and not autocasting(x, wref):
        raise TypeError(f"x is {x.dtype} but the weights are {wref.dtype}; convert one, e.g. weights .to({x.dtype})")
    if x.device != wref.device:
        raise ValueError(f"x is on {x.device} but the weights are on {wref.device}; move them to one device")
    check_grid(x)


# ---- the protein modules (protein.py) ----------------------------------------------------------------

def check_channels_last(t, name: str, channels: int, what: str) -> None:
    """t a tensor of the form `what` ([*, ..., c]: at least 3-D) with `channels` in its last dimension."""
    check_tensor(t, name, what)
    if t.dim() < 3 or t.shape[-1] != channels:
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {what} with the last dimension {channels}")


def check_input_mask(mask, x: torch.Tensor, what: str) -> None:
    """A protein module's mask: None, or a tensor of x's shape less its channels (any real dtype)."""
    if mask is None:
        return
    check_tensor(mask, "mask", what, optional=True)
    if tuple(mask.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected {what} = {tuple(x.shape[:-1])} "
                         f"(the input's shape without its channels)")


def check_pair(z: torch.Tensor, m: torch.Tensor, c_z: int) -> None:
    """z [*, N_res, N_res, c_z] for m [*, N_seq, N_res, c_m] (both checked by check_channels_last)."""
    n_res = m.shape[-2]
    if tuple(z.shape[-3:-1]) != (n_res, n_res) or z.shape[:-3] != m.shape[:-3]:
        raise ValueError(f"z has shape {tuple(z.shape)}, expected [*, N_res, N_res, c_z] = "
                         f"{(*m.shape[:-3], n_res, n_res, c_z)} for m of shape {tuple(m.shape)}")


def check_square(x: torch.Tensor) -> None:
    """x [*, I, J, c] with I == J, as the triangle bias needs."""
    if x.shape[-3] != x.shape[-2]:
        raise ValueError(f"x has shape {tuple(x.shape)}: the triangle bias needs a square pair "
                         f"representation [*, N_res, N_res, c_in]")


# ---- the operators (_ops.py; csrc/ops.cpp's, message for message) ------------------------------------

def check_op_axis(axis: int) -> None:
    if axis != 0 and axis != 1:
        raise ValueError(f"axial_fused: axis must be 0 (row) or 1 (col), got {axis}")


def check_op_dtype(x: torch.Tensor, name: str = "x") -> None:
    if x.dtype not in DTYPE_NAMES:
        raise TypeError(f"axial_fused: {name} is {OP.dtype(x.dtype)}; supported: float32, float16, bfloat16")


def check_like_x(t: torch.Tensor, x: torch.Tensor, name: str) -> None:
    """A weight of x's dtype and device."""
    if t.dtype != x.dtype:
        raise TypeError(f"axial_fused: {name} is {OP.dtype(t.dtype)} but x is {OP.dtype(x.dtype)}; x and the weights "
                        f"must share one dtype")
    if t.device != x.device:
        raise ValueError(f"axial_fused: {name} is on {t.device} but x is on {x.device}")


def check_weight(w, x: torch.Tensor, name: str, shape: tuple) -> None:
    """An operator's weight: given, of `shape`, of x's dtype and device."""
    if w is None:
        raise ValueError(f"axial_fused: {name} is missing (None); expected a tensor of shape {_bracketed(shape)}")
    check_shape(w, name, shape, x.shape[3], OP)
    check_like_x(w, x, name)


def check_op_shapes(x, num_heads: int, eps: float, passes) -> None:
    """What every call of axial_pass / axial_attention is checked for (csrc/ops.cpp's check_shapes).
    passes: (pass name, axis, its 9 weights (None: absent), its bias) per pass; the pass name is ""
    for axial_pass, "row" / "col" for axial_attention."""
    if x is None:
        raise ValueError("axial_fused: x is missing (None)")
    check_rank(x, OP)
    check_op_dtype(x)
    D = x.shape[3]
    check_heads(num_heads, D, OP)
    check_eps(eps, OP)
    shapes = ((D,), (D,), (3 * D, D), (D, D), (D,), (3 * D,), (D, D), (D,), (num_heads, D))
    for pass_name, _, weights, _ in passes:
        for f, (w, shape) in enumerate(zip(weights, shapes)):
            if f >= REQUIRED and w is None:
                continue
            check_weight(w, x, weight_name(pass_name, FIELDS[f], OP), shape)
        check_gate(weights[6], weights[7], pass_name, OP)
    check_grid(x, OP)
    # Offsets are 64-bit throughout; these bounds keep the kernels' 32-bit per-block token counts valid.
    if not (x.shape[1] * x.shape[2] < 2 ** 31 and x.shape[1] <= 2 ** 24 and x.shape[2] <= 2 ** 24):
        raise ValueError(f"axial_fused: x of shape {_bracketed(x.shape)} is too large: H * W must be below 2^31 and "
                         f"H, W at most 2^24")


def check_op_extras(x: torch.Tensor, num_heads: int, mask, passes) -> None:
    """The per-call inputs: the mask, and each pass's bias and bias_weight (passes as check_op_shapes')."""
    check_mask(mask, x, OP)
    for pass_name, axis, weights, bias in passes:
        bias_name = weight_name(pass_name, "bias", OP)
        check_bias(bias, x, num_heads, axis, bias_name, OP)
        check_bias_weight(weights[8], x, num_heads, bias, weight_name(pass_name, "bias_weight", OP), bias_name, OP)


def check_cuda(x: torch.Tensor, op: str = "") -> None:
    """x on a CUDA device, as the CUDA kernel of `op` ("" or "pair_bias: ") got it."""
    if not x.is_cuda:
        raise ValueError(f"axial_fused: {op}the CUDA kernel got x on {x.device}")


def check_spec(x: torch.Tensor, num_heads: int, specs) -> None:
    """A compiled specialization for x's dtype and D and num_heads; specs: {(dtype name, dim, heads)}."""
    if (DTYPE_NAMES[x.dtype], x.shape[3], num_heads) not in specs:
        raise ValueError(f"axial_fused: no compiled specialization for dtype {OP.dtype(x.dtype)}, dim {x.shape[3]}, "
                         f"heads {num_heads} (see axial_fused.supported_configs())")


def check_pair_bias(x, norm_weight, norm_bias, weight, eps: float, sizes: bool = True) -> None:
    """pair_bias: x [B, I, J, c]; norm_weight, norm_bias [c]; weight [heads, c]; all of x's dtype and
    device. sizes=False (symbolic sizes, which reading would guard): the ranks alone, which the
    result's shape needs."""
    if x is None or x.dim() != 4:
        raise ValueError(f"axial_fused: pair_bias: x must be [B, I, J, c], got {x.dim() if x is not None else 0} "
                         f"dimensions")
    if not sizes:
        if weight.dim() != 2:
            raise ValueError(f"axial_fused: pair_bias: weight has shape {_bracketed(weight.shape)}, expected "
                             f"[heads, c] with 1 <= heads <= {PAIR_BIAS_MAX_HEADS}")
        return
    check_op_dtype(x, "pair_bias: x")
    c = x.shape[3]
    if weight is None or weight.dim() != 2 or weight.shape[1] != c or not 1 <= weight.shape[0] <= PAIR_BIAS_MAX_HEADS:
        raise ValueError(f"axial_fused: pair_bias: weight has shape "
                         f"{_bracketed(weight.shape) if weight is not None else '[]'}, expected [heads, {c}] with "
                         f"1 <= heads <= {PAIR_BIAS_MAX_HEADS}")
    if not 1 <= c <= PAIR_BIAS_MAX_C:
        raise ValueError(f"axial_fused: pair_bias: x has {c} channels; supported: 1 to {PAIR_BIAS_MAX_C}")
    check_weight(norm_weight, x, "pair_bias: norm_weight", (c,))
    check_weight(norm_bias, x, "pair_bias: norm_bias", (c,))
    check_like_x(weight, x, "pair_bias: weight")
    check_eps(eps, OP, "pair_bias: eps")
