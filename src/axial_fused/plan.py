"""Which kernels a call runs: the planner's plan, read before anything launches.

    >>> print(axial_fused.explain(x, w))            # both passes of axial_attention(x, w)
    >>> print(axial_fused.explain(x, w.row, num_heads=8, axis="row", mask=mask, bias=bias))

The planner (csrc/pass.cpp, docs/design.md "The planner") names every kernel of a pass: the path, the
attention's prepared terms (``prep``), K1 (LayerNorm + QKV), the attention (with the output
projection) and, in the split form, the projection as a GEMM of its own. ``explain`` asks it for a
call on x's GPU, or on a described one (``device="h100"``, a dict), which needs no GPU at all:
``python -m axial_fused.info --plan bf16:256x8 1,256,256 --mask --device h100``.
"""
from __future__ import annotations

import dataclasses

import torch

from . import _ext
from ._checks import DTYPE_NAMES

# Devices described by the numbers the planner reads (compute capability, SMs, shared memory a block
# may opt in to, whether the sm_90a kernels are loaded).
DEVICES = {
    "h100": dict(arch=90, sm90a=True, sms=132, smem_optin=232448),
    "h200": dict(arch=90, sm90a=True, sms=132, smem_optin=232448),
    "a100": dict(arch=80, sm90a=False, sms=108, smem_optin=166912),
    "l40s": dict(arch=89, sm90a=False, sms=142, smem_optin=101376),
}
_PATHS = {"fused": 0, "two_kernel": 1, "fused_sm90": 2}


@dataclasses.dataclass(frozen=True)
class Plan:
    """One pass's kernels, as the planner names them (``none`` where a role has no kernel)."""
    path: str          # fused | fused_sm90 | two_kernel
    group: int         # one-kernel paths: sequences a block
    k1_per_sm: int     # two-kernel path: the blocks an SM K1's form is sized for
    extras: bool       # the kernels' feature variants (mask, bias, gate, q/k/v bias, update only)
    terms: str         # the prepared terms the attention reads: none | bias | mask | bias|mask (|mask_mma)
    pair_bias: bool    # the bias from the pass's LayerNorm output is computed first (pair-bias kernel)
    k1_bias: bool      # ... or written by K1 for the Hopper attention
    prep: str
    k1: str
    attn: str
    proj: str

    @classmethod
    def parse(cls, text: str) -> "Plan":
        f = dict(item.split("=", 1) for item in text.split())
        return cls(path=f["path"], group=int(f["group"]), k1_per_sm=int(f.get("k1_per_sm", 0)),
                   extras=f["extras"] == "1", terms=f["terms"], pair_bias=f["pair_bias"] == "1",
                   k1_bias=f["k1_bias"] == "1", prep=f["prep"], k1=f["k1"], attn=f["attn"], proj=f["proj"])

    @property
    def kernels(self) -> tuple[str, ...]:
        """The kernels in launch order."""
        names = ("pair_bias" if self.pair_bias else "none", self.prep, self.k1, self.attn, self.proj)
        return tuple(n for n in names if n != "none")

    def __str__(self) -> str:
        extra = f", {self.group} sequences a block" if self.path != "two_kernel" else ""
        terms = f", attention terms {self.terms}" if self.terms != "none" else ""
        return f"{self.path}{extra}{terms}: " + " -> ".join(self.kernels)


def device_description(device) -> dict:
    """The planner's numbers for `device`: a name of DEVICES, a dict of them, or a CUDA torch.device / index."""
    if isinstance(device, str) and device.lower() in DEVICES:
        return DEVICES[device.lower()]
    if isinstance(device, dict):
        missing = {"arch", "sm90a", "sms", "smem_optin"} - device.keys()
        if missing:
            raise ValueError(f"device: a description needs arch, sm90a, sms and smem_optin; missing {sorted(missing)}")
        return device
    dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if dev.type != "cuda":
        raise ValueError(f"device: the plan is made for a GPU; got {dev}: pass a CUDA tensor, or device= one of "
                         f"{sorted(DEVICES)} or a dict (arch, sm90a, sms, smem_optin)")
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(idx)
    arch = major * 10 + minor
    return dict(arch=arch, sm90a=arch == 90 and "90a" in _ext.C.compiled_archs(),
                sms=torch.cuda.get_device_properties(idx).multi_processor_count,
                smem_optin=_ext.C.device_smem_optin(idx))


def plan_pass(dtype: torch.dtype, dim: int, heads: int, num_seq: int, length: int, device, *, gated=False,
              extras=False, mask=False, bias=False, bias_from_ln=False, path: str | None = None) -> Plan:
    """The plan of one pass of `num_seq` sequences of `length` tokens (features as flags; `extras`: a
    feature the flags do not name, the q/k/v bias or the update alone)."""
    if _ext.C is None:
        raise RuntimeError(f"axial_fused: no plan without the CUDA extension: {_ext.error}")
    if dtype not in DTYPE_NAMES:
        raise TypeError(f"dtype: the kernels take float32, float16 or bfloat16; got {dtype}")
    if path is not None and path not in _PATHS:
        raise ValueError(f"path: one of {sorted(_PATHS)} or None (the planner's choice); got {path!r}")
    tf32 = dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    text = _ext.C.plan(DTYPE_NAMES[dtype], dim, heads, num_seq, length, device_description(device), tf32=tf32, gated=gated,
                       extras=extras, mask=mask, bias=bias, bias_from_ln=bias_from_ln,
                       forced=-1 if path is None else _PATHS[path])
    return Plan.parse(text)


def explain(x: torch.Tensor, weights, num_heads: int | None = None, *, axis: str = "row", mask=None, bias=None,
            row_bias=None, col_bias=None, residual: bool = True, device=None):
    """The plan of ``axial_pass(x, weights, num_heads, axis=..., mask=..., bias=..., residual=...)``, or,
    for AxialWeights, the (row, column) plans of ``axial_attention(x, weights, mask=..., row_bias=...,
    col_bias=..., residual=...)``. `device`: x's GPU by default; a name of DEVICES or a dict describes
    another (no GPU needed)."""
    from . import _checks as C
    from .functional import AxialWeights, PassWeights

    if isinstance(weights, AxialWeights):
        if bias is not None:
            raise ValueError("bias is axial_pass's argument; with AxialWeights pass row_bias and col_bias")
        return tuple(explain(x, w, weights.num_heads, axis=a, mask=mask, bias=b, residual=residual, device=device)
                     for w, a, b in ((weights.row, "row", row_bias), (weights.col, "col", col_bias)))
    if row_bias is not None or col_bias is not None:
        raise ValueError("row_bias and col_bias are axial_attention's arguments; with PassWeights pass bias")
    if not isinstance(weights, PassWeights):
        raise TypeError(f"weights must be an axial_fused.AxialWeights or PassWeights, got {type(weights).__name__}")
    C.check_heads_given(num_heads, "explain")
    C.check_axis(axis)
    C.check_residual(residual)
    dim = C.check_pass(weights, axis)
    C.check_heads(num_heads, dim)
    C.check_x(x, dim, weights.norm_weight)
    C.check_mask(mask, x)
    C.check_bias(bias, x, num_heads, 0 if axis == "row" else 1, "bias")
    B, H, W, D = x.shape
    num_seq, length = (B * H, W) if axis == "row" else (B * W, H)
    return plan_pass(x.dtype, D, num_heads, num_seq, length, x.device if device is None else device,
                     gated=weights.gate_weight is not None, mask=mask is not None, bias=bias is not None,
                     bias_from_ln=weights.bias_weight is not None,
                     extras=weights.qkv_bias is not None or not residual)
