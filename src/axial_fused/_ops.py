"""The operators' Python kernels: what LibTorch's stable ABI cannot express in the binary.

The binary (csrc/ops.cpp) defines the schemas of ``torch.ops.axial_fused.axial_pass``,
``axial_attention`` and ``pair_bias`` and registers their CUDA kernels. This module registers, once
the binary has loaded (:func:`register`):

* the **fake** (shape-only) kernels, for meta tensors, torch.compile and torch.export: a new
  contiguous tensor like x, after the same shape, dtype and device checks as the CUDA kernel when the
  sizes are concrete (symbolic sizes, as under dynamic shapes, skip them: reading them adds guards);
* the **Autograd** kernels: with grad mode on and an input requiring grad, the reference math in
  differentiable PyTorch ops (axial_fused.reference), so a direct op call trains correctly on any
  device; otherwise the call goes on to the kernel below autograd;
* the **AutocastCUDA** kernels: under ``torch.autocast("cuda", dtype)`` x and the weights are cast to
  the autocast dtype and that dtype's kernel runs; the result has the dtype the reference model
  returns under autocast (its residual add promotes x's dtype with the autocast dtype). The mask is
  not cast; a float32 bias is read as it is, any other is cast with x;
* ``axial_fused::_allow_tf32``, which the float32 kernels call to follow
  ``torch.backends.cuda.matmul.allow_tf32`` as nn.Linear does.

**Typed errors.** The stable ABI carries every exception out of the binary as RuntimeError. The
checks below are the CUDA kernel's, message for message (docs/errors.md); the fake kernels run them,
and the Autograd kernel runs them when the kernel below it fails, so a bad direct call raises
ValueError / TypeError as the message's kind says. Under ``torch.inference_mode()`` the Autograd
kernel is skipped and the CUDA kernel's RuntimeError, with the same message, reaches the caller.
"""
from __future__ import annotations

import math

import torch

from .reference import reference_pass

# The dtypes with kernels, by the names the binary and the specializations use.
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
# dtype names as the binary prints them (c10's ScalarType names).
_SCALAR_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
                 torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                 torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
                 torch.complex128: "ComplexDouble"}
_FIELDS = ("norm_weight", "norm_bias", "qkv_weight", "out_weight", "out_bias", "qkv_bias", "gate_weight", "gate_bias",
           "bias_weight")
PAIR_BIAS_MAX_C, PAIR_BIAS_MAX_HEADS = 1024, 32  # include/axial_fused/pair_bias.h


def _name(dtype: torch.dtype) -> str:
    return _SCALAR_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def _shape(t_or_sizes) -> str:
    sizes = t_or_sizes.shape if isinstance(t_or_sizes, torch.Tensor) else t_or_sizes
    return "[" + ", ".join(str(s) for s in sizes) + "]"


def _concrete(*ts) -> bool:
    return all(isinstance(s, int) for t in ts if t is not None for s in t.shape)


# ---- the checks (csrc/ops.cpp's, message for message) ---------------------------------------------

def _check(ok: bool, exc: type, *parts) -> None:
    if not ok:
        raise exc("axial_fused: " + "".join(str(p) for p in parts))


def check_rank(x) -> None:
    _check(x.dim() == 4, ValueError, "x must be [B, H, W, D], got ", x.dim(), " dimensions")


def check_axis(axis: int) -> None:
    _check(axis in (0, 1), ValueError, "axis must be 0 (row) or 1 (col), got ", axis)


def _check_weight(w, x, name: str, shape: tuple) -> None:
    _check(w is not None, ValueError, name, " is missing (None); expected a tensor of shape ", _shape(shape))
    _check(tuple(w.shape) == shape, ValueError, name, " has shape ", _shape(w), ", expected ", _shape(shape),
           " for D = ", x.shape[3])
    _check(w.dtype == x.dtype, TypeError, name, " is ", _name(w.dtype), " but x is ", _name(x.dtype),
           "; x and the weights must share one dtype")
    _check(w.device == x.device, ValueError, name, " is on ", w.device, " but x is on ", x.device)


def _check_mask(x, mask) -> None:
    if mask is None:
        return
    _check(mask.dim() == 3 and tuple(mask.shape) == tuple(x.shape[:3]), ValueError, "mask has shape ", _shape(mask),
           ", expected [B, H, W] = ", _shape(x.shape[:3]), " (x of shape ", _shape(x), ")")
    _check(mask.dtype in (torch.bool, torch.uint8) or mask.dtype.is_floating_point, TypeError, "mask is ",
           _name(mask.dtype), "; supported: bool, or 0/1 in uint8 or a floating dtype (true / 1: the token is present)")
    _check(mask.device == x.device, ValueError, "mask is on ", mask.device, " but x is on ", x.device)


def _check_bias(x, bias, num_heads: int, axis: int, name: str) -> None:
    if bias is None:
        return
    L, len_name = (x.shape[2], "W") if axis == 0 else (x.shape[1], "H")
    B = x.shape[0]
    _check(bias.dim() == 4, ValueError, name, f" must be [B or 1, heads, {len_name}, {len_name}] = [{B} or 1, ",
           num_heads, f", {L}, {L}], got shape ", _shape(bias))
    _check(bias.shape[0] in (1, B), ValueError, name, " has batch dimension ", bias.shape[0],
           f", which does not broadcast to x's batch {B} (expected 1 or {B})")
    _check(bias.shape[1] == num_heads, ValueError, name, " has ", bias.shape[1], " heads (shape ", _shape(bias),
           "), expected num_heads = ", num_heads)
    _check(bias.shape[2] == L and bias.shape[3] == L, ValueError, name, " has shape ", _shape(bias), " but the ",
           "row" if axis == 0 else "column", f" pass has sequences of {len_name} = {L} tokens: expected [.., {L}, {L}]")
    _check(bias.dtype in (torch.float32, x.dtype), TypeError, name, " is ", _name(bias.dtype),
           "; supported: float32 or x's dtype (", _name(x.dtype), ")")
    _check(bias.device == x.device, ValueError, name, " is on ", bias.device, " but x is on ", x.device)


def check_call(x, passes, num_heads: int, eps: float, mask, biases, cuda: bool = False) -> None:
    """The operator's checks. passes: one or two tuples of the 9 weights (None: absent); biases:
    ((bias, axis), ...) per pass; cuda: also what only the CUDA kernel needs (x on CUDA, a compiled
    specialization)."""
    _check(x is not None, ValueError, "x is missing (None)")
    check_rank(x)
    _check(x.dtype in DTYPE_NAMES, TypeError, "x is ", _name(x.dtype), "; supported: float32, float16, bfloat16")
    D = x.shape[3]
    _check_heads(x, num_heads)
    _check(math.isfinite(eps) and eps > 0, ValueError, "eps must be a positive finite number, got ", _num(eps))
    shapes = ((D,), (D,), (3 * D, D), (D, D), (D,), (3 * D,), (D, D), (D,), (num_heads, D))
    for i, pw in enumerate(passes):
        prefix = ("row_", "col_")[i] if len(passes) == 2 else ""
        for f, (w, shape) in enumerate(zip(pw, shapes)):
            if f >= 5 and w is None:
                continue
            _check_weight(w, x, prefix + _FIELDS[f], shape)
        _check(pw[7] is None or pw[6] is not None, ValueError, prefix, "gate_bias was given without ", prefix,
               "gate_weight; the gate needs its weight [D, D]")
    _check(x.shape[1] >= 1 and x.shape[2] >= 1, ValueError, "H and W must be at least 1, got x of shape ", _shape(x))
    _check(x.shape[1] * x.shape[2] < 2 ** 31 and x.shape[1] <= 2 ** 24 and x.shape[2] <= 2 ** 24, ValueError,
           "x of shape ", _shape(x), " is too large: H * W must be below 2^31 and H, W at most 2^24")
    _check_extras(x, num_heads, mask, biases, passes)
    if cuda:
        from . import _ext
        _check(x.is_cuda, ValueError, "the CUDA kernel got x on ", x.device)
        _check((DTYPE_NAMES[x.dtype], D, num_heads) in _ext.specs(), ValueError,
               "no compiled specialization for dtype ", _name(x.dtype), ", dim ", D, ", heads ", num_heads,
               " (see axial_fused.supported_configs())")


def _num(v: float) -> str:
    """A float as C++'s ostream prints it (%g-like: 0, nan, 1e-05)."""
    return f"{v:g}"


def check_pair_bias(x, nw, nb, w, eps: float) -> None:
    _check(x is not None and x.dim() == 4, ValueError, "pair_bias: x must be [B, I, J, c], got ",
           x.dim() if x is not None else 0, " dimensions")
    _check(x.dtype in DTYPE_NAMES, TypeError, "pair_bias: x is ", _name(x.dtype),
           "; supported: float32, float16, bfloat16")
    c = x.shape[3]
    _check(w is not None and w.dim() == 2 and w.shape[1] == c and 1 <= w.shape[0] <= PAIR_BIAS_MAX_HEADS, ValueError,
           "pair_bias: weight has shape ", _shape(w) if w is not None else "[]", ", expected [heads, ", c,
           "] with 1 <= heads <= ", PAIR_BIAS_MAX_HEADS)
    _check(1 <= c <= PAIR_BIAS_MAX_C, ValueError, "pair_bias: x has ", c, " channels; supported: 1 to ",
           PAIR_BIAS_MAX_C)
    _check_weight(nw, x, "pair_bias: norm_weight", (c,))
    _check_weight(nb, x, "pair_bias: norm_bias", (c,))
    _check(w.dtype == x.dtype, TypeError, "pair_bias: weight is ", _name(w.dtype), " but x is ", _name(x.dtype),
           "; x and the weights must share one dtype")
    _check(w.device == x.device, ValueError, "pair_bias: weight is on ", w.device, " but x is on ", x.device)
    _check(math.isfinite(eps) and eps > 0, ValueError, "pair_bias: eps must be a positive finite number, got ",
           _num(eps))


# ---- the operators' arguments, unpacked ----------------------------------------------------------

def _bind(op, args, kwargs):
    """The arguments of a call of op in schema order, keywords and defaults filled in."""
    out = list(args)
    for a in op._schema.arguments[len(args):]:
        out.append(kwargs[a.name] if a.name in kwargs else a.default_value)
    return tuple(out)


def _pass_args(args):
    """axial_pass's arguments as (x, [weights], num_heads, axis, eps, mask, bias, residual)."""
    x, nw, nb, qkv, ow, ob, num_heads, axis, eps, qkv_b, gw, gb, mask, bias, residual, bw = args
    return x, (nw, nb, qkv, ow, ob, qkv_b, gw, gb, bw), num_heads, axis, eps, mask, bias, residual


def _attention_args(args):
    """axial_attention's arguments as (x, row weights, col weights, num_heads, eps, mask, row_bias,
    col_bias, residual)."""
    x, *w = args[:11]
    num_heads, eps = args[11], args[12]
    r_opt, c_opt = (*args[13:16], args[23]), (*args[16:19], args[24])
    mask, row_bias, col_bias, residual = args[19:23]
    return x, (*w[:5], *r_opt), (*w[5:10], *c_opt), num_heads, eps, mask, row_bias, col_bias, residual


# A call's checks by where it goes: "fake" (shape-only), "cuda" (the kernel, which needs a compiled
# specialization), "grad" (the reference math, which takes any floating dtype: the per-call inputs only).

def _check_heads(x, num_heads: int) -> None:
    _check(num_heads > 0 and x.shape[3] % num_heads == 0, ValueError, "D = ", x.shape[3],
           " is not divisible by num_heads = ", num_heads)


def _check_grad_call(x, num_heads, mask, biases, passes) -> None:
    """What the reference math needs: x [B, H, W, D] with D divisible by the heads, valid extras."""
    check_rank(x)
    _check_heads(x, num_heads)
    _check_extras(x, num_heads, mask, biases, passes)


def _check_bias_weight(x, w, bias, prefix: str) -> None:
    if w[8] is None:
        return
    _check(w[8].shape[0] <= PAIR_BIAS_MAX_HEADS and x.shape[3] <= PAIR_BIAS_MAX_C, ValueError, prefix,
           "bias_weight supports up to ", PAIR_BIAS_MAX_HEADS, " heads and ", PAIR_BIAS_MAX_C, " channels, got ",
           w[8].shape[0], " heads and D = ", x.shape[3], "; compute the bias in PyTorch and pass it as ", prefix, "bias")
    _check(x.shape[1] == x.shape[2], ValueError, prefix, "bias_weight needs a square grid (H == W: the bias of query "
           "i, key j comes from token (i, j)), got x of shape ", _shape(x))
    _check(bias is None, ValueError, prefix, "bias and ", prefix, "bias_weight were both given; give one (add a fixed "
           "bias to the computed one in PyTorch and pass the sum as ", prefix, "bias)")


def _check_extras(x, num_heads, mask, biases, passes) -> None:
    _check_mask(x, mask)
    for i, ((b, axis), w) in enumerate(zip(biases, passes)):
        prefix = ("row_", "col_")[i] if len(biases) == 2 else ""
        _check_bias(x, b, num_heads, axis, prefix + "bias")
        _check_bias_weight(x, w, b, prefix)


def _check_pass_call(args, mode: str) -> None:
    x, w, num_heads, axis, eps, mask, bias, _ = _pass_args(args)
    check_axis(axis)
    if mode == "grad":
        return _check_grad_call(x, num_heads, mask, ((bias, axis),), (w,))
    check_call(x, (w,), num_heads, eps, mask, ((bias, axis),), mode == "cuda")


def _check_attention_call(args, mode: str) -> None:
    x, rw, cw, num_heads, eps, mask, rb, cb, _ = _attention_args(args)
    if mode == "grad":
        return _check_grad_call(x, num_heads, mask, ((rb, 0), (cb, 1)), (rw, cw))
    check_call(x, (rw, cw), num_heads, eps, mask, ((rb, 0), (cb, 1)), mode == "cuda")


def _check_pair_bias_call(args, mode: str) -> None:
    check_pair_bias(*args)
    if mode == "cuda":
        _check(args[0].is_cuda, ValueError, "pair_bias: the CUDA kernel got x on ", args[0].device)


# ---- fake kernels ----------------------------------------------------------------------------------

def _pass_fake(*args, **kwargs):
    args = _bind(torch.ops.axial_fused.axial_pass.default, args, kwargs)
    x = args[0]
    check_rank(x)
    check_axis(args[7])
    if _concrete(*(a for a in args if isinstance(a, torch.Tensor))):
        _check_pass_call(args, "fake")
    return x.new_empty(x.shape)


def _attention_fake(*args, **kwargs):
    args = _bind(torch.ops.axial_fused.axial_attention.default, args, kwargs)
    x = args[0]
    check_rank(x)
    if _concrete(*(a for a in args if isinstance(a, torch.Tensor))):
        _check_attention_call(args, "fake")
    return x.new_empty(x.shape)


def _pair_bias_fake(x, nw, nb, w, eps):
    _check(x.dim() == 4 and w.dim() == 2, ValueError, "pair_bias: x must be [B, I, J, c] and weight [heads, c], got ",
           x.dim(), " and ", w.dim(), " dimensions")
    if _concrete(x, nw, nb, w):
        check_pair_bias(x, nw, nb, w, eps)
    return x.new_empty((x.shape[0], w.shape[0], x.shape[1], x.shape[2]))


# ---- Autograd kernels -------------------------------------------------------------------------------

def _pass_reference(args):
    x, w, num_heads, axis, eps, mask, bias, residual = _pass_args(args)
    return reference_pass(x, *w, num_heads=num_heads, axis=("row", "col")[axis], eps=eps, mask=mask, bias=bias,
                          residual=residual).contiguous()


def _attention_reference(args):
    x, rw, cw, num_heads, eps, mask, rb, cb, residual = _attention_args(args)
    y = reference_pass(x, *rw, num_heads=num_heads, axis="row", eps=eps, mask=mask, bias=rb, residual=residual)
    return reference_pass(y, *cw, num_heads=num_heads, axis="col", eps=eps, mask=mask, bias=cb,
                          residual=residual).contiguous()


def _pair_bias_reference(args):
    x, nw, nb, w, eps = args
    h = torch.nn.functional.layer_norm(x, (x.shape[3],), nw, nb, eps)
    return torch.nn.functional.linear(h, w).permute(0, 3, 1, 2).contiguous()


def _autograd_kernel(op, check, reference):
    """The Autograd kernel of `op`: the reference (after `check`) when gradients are required, else
    the kernel below autograd; a failure there re-runs `check` for the typed error."""
    def kernel(keyset, *args, **kwargs):
        args = _bind(op, args, kwargs)
        if torch.is_grad_enabled() and torch._C._any_requires_grad(*args):
            check(args, "grad")
            return reference(args)
        try:
            with torch._C._AutoDispatchBelowAutograd():
                return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)
        except RuntimeError as e:
            if isinstance(e, NotImplementedError):  # no kernel for this device: the dispatcher's own error
                raise
            check(args, "cuda")  # raises ValueError / TypeError when the arguments are bad
            raise
    return kernel


# ---- AutocastCUDA kernels -----------------------------------------------------------------------

def _cast(t, dtype):
    """t in dtype where autocast would cast it (a CUDA floating tensor other than float64), else t."""
    if t is None or not t.is_cuda or not t.is_floating_point() or t.dtype in (torch.float64, dtype):
        return t
    return t.to(dtype)


def _autocast_kernel(op, tensor_slots, bias_slots):
    """The AutocastCUDA kernel of `op`: the arguments at tensor_slots cast to the autocast dtype, those
    at bias_slots too unless float32, the mask and the rest as they are; the result in
    promote(x's dtype, the autocast dtype)."""
    key = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)

    def kernel(keyset, *args, **kwargs):
        args = _bind(op, args, kwargs)
        dtype = torch.get_autocast_dtype("cuda")
        cast = list(args)
        for i in tensor_slots:
            cast[i] = _cast(args[i], dtype)
        for i in bias_slots:
            if args[i] is not None and args[i].dtype != torch.float32:
                cast[i] = _cast(args[i], dtype)
        with torch._C._ExcludeDispatchKeyGuard(key):
            out = op(*cast)
        return out.to(torch.promote_types(args[0].dtype, dtype))
    return kernel


_registered = []


def register() -> None:
    """Register the Python kernels (once; the binary must have loaded)."""
    if _registered:
        return
    ops = torch.ops.axial_fused
    lib = torch.library.Library("axial_fused", "IMPL")
    lib.impl("_allow_tf32", lambda: bool(torch.backends.cuda.matmul.allow_tf32), "CompositeExplicitAutograd")
    torch.library.register_fake("axial_fused::axial_pass", _pass_fake, lib=lib)
    torch.library.register_fake("axial_fused::axial_attention", _attention_fake, lib=lib)
    torch.library.register_fake("axial_fused::pair_bias", _pair_bias_fake, lib=lib)
    lib.impl("axial_pass", _autograd_kernel(ops.axial_pass.default, _check_pass_call, _pass_reference), "Autograd",
             with_keyset=True)
    lib.impl("axial_attention", _autograd_kernel(ops.axial_attention.default, _check_attention_call,
                                                 _attention_reference), "Autograd", with_keyset=True)
    lib.impl("pair_bias", _autograd_kernel(ops.pair_bias.default, _check_pair_bias_call, _pair_bias_reference),
             "Autograd", with_keyset=True)
    # axial_pass: x, the 5 weights, then (num_heads, axis, eps), 3 optional weights, mask, bias,
    # (residual,) the bias weight.
    lib.impl("axial_pass", _autocast_kernel(ops.axial_pass.default, (0, 1, 2, 3, 4, 5, 9, 10, 11, 15), (13,)),
             "AutocastCUDA", with_keyset=True)
    # axial_attention: x, 10 weights, (num_heads, eps), 6 optional weights, mask, row_bias, col_bias,
    # (residual,) the two bias weights.
    lib.impl("axial_attention", _autocast_kernel(ops.axial_attention.default,
                                                 (0, *range(1, 11), *range(13, 19), 23, 24), (20, 21)),
             "AutocastCUDA", with_keyset=True)
    _registered.append(lib)  # a Library deregisters its kernels when collected


def call_checked(op, *args):
    """op(*args) for a caller that has checked the arguments and ruled out gradients (the functional
    API, the protein modules): below the Autograd kernel in eager mode, which saves a Python kernel per
    call; through the dispatcher in full when compiling (dynamo traces the op, not the guard)."""
    if torch.compiler.is_compiling():
        return op(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)
