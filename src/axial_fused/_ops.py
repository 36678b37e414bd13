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

**Typed errors.** The stable ABI carries every exception out of the binary as RuntimeError. The CUDA
kernel's checks are _checks.py's operator checks, message for message (docs/errors.md); the fake
kernels run them, and the Autograd kernel runs them when the kernel below it fails, so a bad direct
call raises ValueError / TypeError as the message's kind says. Under ``torch.inference_mode()`` the
Autograd kernel is skipped and the CUDA kernel's RuntimeError, with the same message, reaches the
caller.

The kernels read a call's arguments by their schema names (:func:`_bind`), never by position.
"""
from __future__ import annotations

import torch

from ._checks import (FIELDS, OP, check_cuda, check_op_axis, check_heads, check_op_extras, check_op_shapes,
                      check_pair_bias, check_rank, check_spec)
from .reference import reference_pass

# The per-call logit biases (not cast by autocast when float32), by their schema names.
_CALL_BIASES = ("bias", "row_bias", "col_bias")


def _concrete(*ts) -> bool:
    return all(isinstance(s, int) for t in ts if t is not None for s in t.shape)


# ---- the operators' arguments, by name --------------------------------------------------------------

def _bind(op, args, kwargs) -> dict:
    """A call of op's arguments by their schema names, in schema order, keywords and defaults filled in."""
    schema = op._schema.arguments
    bound = {a.name: v for a, v in zip(schema, args)}
    for a in schema[len(args):]:
        bound[a.name] = kwargs[a.name] if a.name in kwargs else a.default_value
    return bound


def _passes(a: dict) -> list[tuple]:
    """The passes of an axial_pass / axial_attention call `a` (by name): (pass name, axis, its 9 weights
    in _checks.FIELDS' order, its bias) each; axial_pass's pass has no name (its arguments carry no
    prefix), axial_attention's are "row" and "col" (``row_qkv_weight``, ``col_bias``, ...)."""
    if "axis" in a:
        return [("", a["axis"], tuple(a[f] for f in FIELDS), a["bias"])]
    return [(p, axis, tuple(a[f"{p}_{f}"] for f in FIELDS), a[f"{p}_bias"]) for axis, p in enumerate(("row", "col"))]


# ---- the checks, by where a call goes: "fake" (shape-only), "cuda" (the kernel, which needs a compiled
# specialization), "grad" (the reference math, which takes any floating dtype: the per-call inputs only)

def _check_axial_call(a: dict, mode: str) -> None:
    """csrc/ops.cpp's checks of axial_pass / axial_attention, in its order."""
    if "axis" in a:
        check_op_axis(a["axis"])
    x, num_heads, passes = a["x"], a["num_heads"], _passes(a)
    if mode == "grad":
        check_rank(x, OP)
        check_heads(num_heads, x.shape[3], OP)
    else:
        check_op_shapes(x, num_heads, a["eps"], passes)
    if mode == "cuda":
        from . import _ext
        check_cuda(x)
        check_spec(x, num_heads, _ext.specs())
    check_op_extras(x, num_heads, a["mask"], passes)


def _check_pair_bias_call(a: dict, mode: str) -> None:
    check_pair_bias(a["x"], a["norm_weight"], a["norm_bias"], a["weight"], a["eps"])
    if mode == "cuda":
        check_cuda(a["x"], "pair_bias: ")


# ---- fake kernels ----------------------------------------------------------------------------------

def _axial_fake(op):
    """The fake kernel of axial_pass / axial_attention (`op`): x's rank and the axis always, the rest
    when the sizes are concrete."""
    def fake(*args, **kwargs):
        a = _bind(op, args, kwargs)
        x = a["x"]
        check_rank(x, OP)
        if "axis" in a:
            check_op_axis(a["axis"])
        if _concrete(*(v for v in a.values() if isinstance(v, torch.Tensor))):
            _check_axial_call(a, "fake")
        return x.new_empty(x.shape)
    return fake


def _pair_bias_fake(x, norm_weight, norm_bias, weight, eps):
    check_pair_bias(x, norm_weight, norm_bias, weight, eps, sizes=_concrete(x, norm_weight, norm_bias, weight))
    return x.new_empty((x.shape[0], weight.shape[0], x.shape[1], x.shape[2]))


# ---- Autograd kernels -------------------------------------------------------------------------------

def _axial_reference(a: dict) -> torch.Tensor:
    y = a["x"]
    for _, axis, weights, bias in _passes(a):
        y = reference_pass(y, *weights, num_heads=a["num_heads"], axis=("row", "col")[axis], eps=a["eps"],
                           mask=a["mask"], bias=bias, residual=a["residual"])
    return y.contiguous()


def _pair_bias_reference(a: dict) -> torch.Tensor:
    x = a["x"]
    h = torch.nn.functional.layer_norm(x, (x.shape[3],), a["norm_weight"], a["norm_bias"], a["eps"])
    return torch.nn.functional.linear(h, a["weight"]).permute(0, 3, 1, 2).contiguous()


def _autograd_kernel(op, check, reference):
    """The Autograd kernel of `op`: the reference (after `check`) when gradients are required, else
    the kernel below autograd; a failure there re-runs `check` for the typed error."""
    def kernel(keyset, *args, **kwargs):
        a = _bind(op, args, kwargs)
        values = a.values()
        if torch.is_grad_enabled() and torch._C._any_requires_grad(*values):
            check(a, "grad")
            return reference(a)
        try:
            with torch._C._AutoDispatchBelowAutograd():
                return op.redispatch(keyset & torch._C._after_autograd_keyset, *values)
        except RuntimeError as e:
            if isinstance(e, NotImplementedError):  # no kernel for this device: the dispatcher's own error
                raise
            check(a, "cuda")  # raises ValueError / TypeError when the arguments are bad
            raise
    return kernel


# ---- AutocastCUDA kernels -----------------------------------------------------------------------

def _cast(t, dtype):
    """t in dtype where autocast would cast it (a CUDA floating tensor other than float64), else t."""
    if t is None or not t.is_cuda or not t.is_floating_point() or t.dtype in (torch.float64, dtype):
        return t
    return t.to(dtype)


def _autocast_kernel(op):
    """The AutocastCUDA kernel of `op`: x and the weights cast to the autocast dtype, the per-call
    biases too unless float32, the mask and the rest as they are; the result in promote(x's dtype,
    the autocast dtype)."""
    key = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)

    def kernel(keyset, *args, **kwargs):
        a = _bind(op, args, kwargs)
        dtype = torch.get_autocast_dtype("cuda")
        cast = {name: v if name == "mask" or not isinstance(v, torch.Tensor)
                or (name in _CALL_BIASES and v.dtype == torch.float32) else _cast(v, dtype)
                for name, v in a.items()}
        with torch._C._ExcludeDispatchKeyGuard(key):
            out = op(*cast.values())
        return out.to(torch.promote_types(a["x"].dtype, dtype))
    return kernel


_registered = []


def register() -> None:
    """Register the Python kernels (once; the binary must have loaded)."""
    if _registered:
        return
    ops = torch.ops.axial_fused
    lib = torch.library.Library("axial_fused", "IMPL")
    lib.impl("_allow_tf32", lambda: bool(torch.backends.cuda.matmul.allow_tf32), "CompositeExplicitAutograd")
    torch.library.register_fake("axial_fused::axial_pass", _axial_fake(ops.axial_pass.default), lib=lib)
    torch.library.register_fake("axial_fused::axial_attention", _axial_fake(ops.axial_attention.default), lib=lib)
    torch.library.register_fake("axial_fused::pair_bias", _pair_bias_fake, lib=lib)
    for name, check, reference in (("axial_pass", _check_axial_call, _axial_reference),
                                   ("axial_attention", _check_axial_call, _axial_reference),
                                   ("pair_bias", _check_pair_bias_call, _pair_bias_reference)):
        op = getattr(ops, name).default
        lib.impl(name, _autograd_kernel(op, check, reference), "Autograd", with_keyset=True)
    for name in ("axial_pass", "axial_attention"):
        lib.impl(name, _autocast_kernel(getattr(ops, name).default), "AutocastCUDA", with_keyset=True)
    _registered.append(lib)  # a Library deregisters its kernels when collected


def call_checked(op, *args):
    """op(*args) for a caller that has checked the arguments and ruled out gradients (the functional
    API, the protein modules): below the Autograd kernel in eager mode, which saves a Python kernel per
    call; through the dispatcher in full when compiling (dynamo traces the op, not the guard)."""
    if torch.compiler.is_compiling():
        return op(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)
