"""Drop-in modules for the attention of protein models, on the fused kernels.

``MSARowAttentionWithPairBias``, ``MSAColumnAttention`` and ``TriangleAttention`` (with
``TriangleAttentionStartingNode`` / ``TriangleAttentionEndingNode``) take OpenFold's constructor
arguments, parameter names (an OpenFold state_dict loads strictly), forward signatures and return
values (the update, which the model adds itself; ``residual=True`` returns the input plus the
update, the add fused into the pass); ``patch_esm(model)`` runs the column attention of a
fair-esm ``MSATransformer`` on the fused kernels with the model's own weights, ``patch_boltz(model)``
the triangle attention of a Boltz model (AF3's form: no gate or output bias) likewise.

Each forward is one fused pass (``axial_pass`` with ``residual=False``): LayerNorm, the q/k/v and gate
projections, attention with the key mask and the pass's bias, the gate and the output projection.
The bias (OpenFold's ``linear_z(layer_norm_z(z))``, the triangle bias ``linear(layer_norm(x))``) is one
more kernel, ``torch.ops.axial_fused.pair_bias``, which writes it head-major as the pass reads it
(PyTorch's ops where that kernel cannot run); the column passes (MSA column attention, the ending
node) read the grid through strides, never transposed. Where a call cannot be
fused (``c_hidden * no_heads != c_in``, a dtype, shape or device without kernels, gradients
required) the same result is computed with PyTorch ops after a one-time warning.

Semantics: OpenFold's at inference (LayerNorm eps 1e-5, logits scaled by ``1/sqrt(c_hidden)``, the
gate ``sigmoid(linear_g(LN(x)))`` applied before ``linear_o``), except for the key mask: OpenFold adds
``inf * (mask - 1)`` to the logits, these modules replace an absent key's logit (docs/usage.md). The
two agree wherever a query has at least one key present; a query with none (a fully padded row)
attends uniformly here, and in OpenFold by its logits less 1e9. ``inf`` is kept for compatibility.
"""
from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F

from . import _ext
from ._checks import (DTYPE_NAMES, PAIR_BIAS_MAX_C, PAIR_BIAS_MAX_HEADS, check_channels_last, check_heads,
                      check_input_mask, check_module, check_pair, check_pass, check_residual, check_square)
from ._ops import call_checked
from .functional import PassWeights, _arch_reason, _run_pass, _warn_once, axial_pass
from .reference import replace_absent

__all__ = ["MSAAttention", "MSARowAttentionWithPairBias", "MSAColumnAttention", "TriangleAttention",
           "TriangleAttentionStartingNode", "TriangleAttentionEndingNode", "patch_esm", "patch_boltz"]

_EPS = 1e-5  # OpenFold's LayerNorm


class Attention(nn.Module):
    """The parameters of OpenFold's gated ``Attention`` (``mha``): ``linear_q``, ``linear_k``,
    ``linear_v`` without bias, ``linear_g`` and ``linear_o`` with bias; ``c_hidden`` per head.

    W_q, W_k, W_v and W_g are views of one tensor ``[W_q; W_k; W_v; W_g]`` (the state_dict keys are
    nn.Linear's as ever), so a fused pass reads the four as one product's weights, in place, with
    b_g as the gate's bias alone: every in-place change (``load_state_dict``, an optimizer step,
    ``.data`` writes) lands in that storage. Moving or converting the module (``.to``, ``.half``)
    and ``load_state_dict(..., assign=True)`` put them back into one; parameters replaced in any
    other way are stacked by a copy at each call."""

    def __init__(self, c_in: int, c_hidden: int, no_heads: int):
        super().__init__()
        self.c_hidden, self.no_heads = c_hidden, no_heads
        hidden = c_hidden * no_heads
        self.linear_q = nn.Linear(c_in, hidden, bias=False)
        self.linear_k = nn.Linear(c_in, hidden, bias=False)
        self.linear_v = nn.Linear(c_in, hidden, bias=False)
        self.linear_o = nn.Linear(hidden, c_in)
        self.linear_g = nn.Linear(c_in, hidden)
        self._share()
        self.register_load_state_dict_post_hook(_reshare)

    def _projections(self) -> tuple[torch.Tensor, ...]:
        """(W_q, W_k, W_v, W_g, b_g, W_o, b_o), read from the modules' dicts (nn.Module.__getattr__
        would be most of an eager call's host time here)."""
        m = self._modules
        q, k, v, g, o = (m[n]._parameters for n in ("linear_q", "linear_k", "linear_v", "linear_g", "linear_o"))
        return q["weight"], k["weight"], v["weight"], g["weight"], g["bias"], o["weight"], o["bias"]

    def _share(self) -> None:
        """The four weights into one tensor, the parameters made views of it."""
        ws = self._projections()[:4]
        with torch.no_grad():
            W = torch.cat([w.detach() for w in ws])
        row = 0
        for w in ws:
            w.data = W[row:row + w.shape[0]]
            row += w.shape[0]
        self._W = W
        self._cached = None

    def _shared(self, ps: tuple[torch.Tensor, ...] | None = None) -> bool:
        """Whether W_q, W_k, W_v and W_g (ps: _projections(), when the caller has it) are still views
        of self._W, in order."""
        ws, W = (ps or self._projections())[:4], self._W
        if W.device != ws[0].device:
            return False
        at = W.data_ptr()
        for w in ws:
            if not w.is_contiguous() or w.dtype != W.dtype or w.data_ptr() != at:
                return False
            at += w.nbytes
        return at == W.data_ptr() + W.nbytes

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)  # (.to / .cuda / .half give each parameter its own tensor)
        self._share()
        return out

    def pass_weights(self, norm: nn.LayerNorm, tri: nn.Linear | None = None) -> tuple[PassWeights, int | None]:
        """The fused pass's weights with ``norm`` as its LayerNorm (and ``tri``'s weight as the
        triangle bias's, PassWeights.bias_weight), and their D where they have been checked
        (_checks.check_pass and check_heads; None: not checked). W = [W_q; W_k; W_v; W_g] is the
        shared tensor itself (no copy) where the parameters are its views and neither gradients nor
        torch.compile's tracing need differentiable, traceable ops; otherwise it is stacked by a
        copy; b_g goes as the gate's bias alone. The shared form is built and checked once, then
        kept while the pass's parameters are the same objects and the projections the same views:
        in-place changes reach it through them, any other change builds it anew."""
        n = norm._parameters
        ps = (*self._projections(), n["weight"], n["bias"], None if tri is None else tri._parameters["weight"])
        traced = torch.compiler.is_compiling() or (
            torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ps))
        shared = not traced and self._shared(ps)
        c = self.__dict__.get("_cached")  # (absent in a module pickled by an older version)
        if shared and c is not None and all(a is b for a, b in zip(c[0], ps)):
            return c[1], c[2]
        wq, wk, wv, wg, bg, wo, bo, nw, nb, bw = ps
        W = self._W if shared else torch.cat((wq, wk, wv, wg))
        rows = 3 * wg.shape[0]
        pw = PassWeights(nw, nb, W[:rows], wo, bo, gate_weight=W[rows:], gate_bias=bg, bias_weight=bw)
        if not shared:
            return pw, None
        dim = check_pass(pw, "pass_weights")
        check_heads(self.no_heads, dim)
        self._cached = (ps, pw, dim)
        return pw, dim


def _pass_weights(mha: nn.Module, norm: nn.Module, tri: nn.Linear | None) -> tuple[PassWeights, int | None]:
    """The fused pass's weights of a gated attention module with OpenFold's parameter names (this
    module's Attention, or another library's, such as Boltz's whose gate and output projection have
    no bias: b_g None, b_o zero), its LayerNorm `norm` and the triangle bias's projection `tri`."""
    if isinstance(mha, Attention):
        return mha.pass_weights(norm, tri)
    q, k, v, g, o = (mha._modules[n] for n in ("linear_q", "linear_k", "linear_v", "linear_g", "linear_o"))
    W = torch.cat((q.weight, k.weight, v.weight, g.weight))
    bo = o.bias if o.bias is not None else o.weight.new_zeros(o.weight.shape[0])
    rows = 3 * g.weight.shape[0]
    return PassWeights(norm.weight, norm.bias, W[:rows], o.weight, bo, gate_weight=W[rows:], gate_bias=g.bias,
                       bias_weight=None if tri is None else tri.weight), None


def _reshare(module: Attention, incompatible_keys) -> None:
    """load_state_dict's post hook: with assign=True the parameters are new tensors; share them again."""
    if not module._shared():
        module._share()


def _pass_mask(mask, x: torch.Tensor, what: str):
    """The mask (checked: x's shape less its channels, `what`) as the pass takes it: OpenFold's modules
    take a 0/1 mask of any real dtype, the kernels bool, uint8 or floating ones, so other integer
    masks become `mask != 0`."""
    check_input_mask(mask, x, what)
    if mask is None:
        return None
    if not (mask.is_floating_point() or mask.is_complex() or mask.dtype in (torch.bool, torch.uint8)):
        return mask != 0
    return mask


_kernels_run_on_cache: dict[int, bool] = {}


@torch.compiler.assume_constant_result
def _kernels_run_on(device: int) -> bool:
    """Whether GPU `device` runs the extension's kernels; cached (it is asked on every forward).
    Marked constant for torch.compile: it calls into the extension, which dynamo cannot trace."""
    if device not in _kernels_run_on_cache:
        _kernels_run_on_cache[device] = _ext.C is not None and _arch_reason(device) is None
    return _kernels_run_on_cache[device]


def _pair_bias(x: torch.Tensor, norm: nn.LayerNorm, linear: nn.Linear) -> torch.Tensor:
    """linear(norm(x)) moved head-major: [*, heads, I, J] for x [*, I, J, c]. One kernel on CUDA when
    x and the three weights share a float dtype and autocast is off; PyTorch's ops otherwise (the op
    itself takes the PyTorch path when gradients are required). The parameters are read from the
    modules' dicts, as Attention._projections does."""
    nw, nb, w = norm._parameters["weight"], norm._parameters["bias"], linear._parameters["weight"]
    dt = x.dtype
    if (x.is_cuda and dt in DTYPE_NAMES and nw is not None and nb is not None and nw.dtype == nb.dtype == w.dtype == dt
            and x.shape[-1] <= PAIR_BIAS_MAX_C and w.shape[0] <= PAIR_BIAS_MAX_HEADS and x.numel() > 0
            and not torch.is_autocast_enabled("cuda") and _kernels_run_on(x.device.index)):
        op, args = torch.ops.axial_fused.pair_bias.default, (x if x.dim() == 4 else _flat(x, 3), nw, nb, w, norm.eps)
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in args[:4])
        out = op(*args) if grad else call_checked(op, *args)
        return out if x.dim() == 4 else out.reshape(*x.shape[:-3], *out.shape[-3:])
    return linear(norm(x)).movedim(-1, -3)


def _torch_pass(x, norm: nn.LayerNorm, mha: Attention, axis: str, mask, bias) -> torch.Tensor:
    """The update of one pass in PyTorch ops for any c_hidden (x [B, H, W, C]; mask [B, H, W];
    bias [B or 1, heads, L, L]), with the fused path's semantics (absent keys' logits replaced)."""
    if axis == "col":
        x = x.transpose(1, 2)
        mask = None if mask is None else mask.transpose(1, 2)
    B, S, L, _ = x.shape
    heads, c = mha.no_heads, mha.c_hidden
    h = norm(x)
    split = lambda t: t.reshape(B, S, L, heads, c).transpose(2, 3)  # [B, S, heads, L, c]
    q, k, v = split(mha.linear_q(h)), split(mha.linear_k(h)), split(mha.linear_v(h))
    logits = q @ k.transpose(-1, -2) / math.sqrt(c)
    if bias is not None:
        logits = logits + bias.unsqueeze(1).to(logits.dtype)
    if mask is not None:
        logits = replace_absent(logits, mask == 0)
    o = (torch.softmax(logits, dim=-1) @ v).transpose(2, 3).reshape(B, S, L, heads * c)
    out = mha.linear_o(o * torch.sigmoid(mha.linear_g(h)))
    return out.transpose(1, 2) if axis == "col" else out


def _flat(t: torch.Tensor, keep: int) -> torch.Tensor:
    """t with its leading dimensions (all but the last `keep`) as one, counted (not -1, which an
    empty t leaves undetermined)."""
    return t.reshape(math.prod(t.shape[:-keep]), *t.shape[-keep:])


def _update(x: torch.Tensor, norm: nn.Module, mha: nn.Module, axis: str, mask, bias,
            tri: nn.Linear | None = None, residual: bool = False) -> torch.Tensor:
    """One pass's update over x [*, H, W, C] (mask [*, H, W], bias [*, heads, L, L] or None), fused
    where it can be; norm a LayerNorm (weight, bias, eps), mha a gated attention (_pass_weights).
    residual: x + the update instead (fused: the output epilogue adds x as it stores).
    tri: the triangle bias's projection (H == W), applied to the pass's own LayerNorm output
    (PassWeights.bias_weight): query i, key j of the pass get tri(LN(its token (i, j))), x[i, j] in
    the row pass and x[j, i] in the column pass. An empty x (no sequences or no residues) gets its
    empty update from PyTorch's ops, as OpenFold's modules give it."""
    lead, grid = x.shape[:-3], x.shape[-3:]
    heads = mha.no_heads
    fused = mha.c_hidden * heads == grid[-1]
    empty = x.numel() == 0
    if tri is not None and (empty or not (fused and heads <= PAIR_BIAS_MAX_HEADS and grid[-1] <= PAIR_BIAS_MAX_C)):
        t = _pair_bias(x, norm, tri)  # [*, heads, I, J]: t[h, i, j] from x[i, j] (past bias_weight's limits)
        bias = t if axis == "row" else t.transpose(-1, -2)
        tri = None
    flat = x.dim() == 4  # (reshapes are views, yet a few µs of an eager call's host time)
    x4 = x if flat else _flat(x, 3)
    m4 = mask if mask is None or flat else _flat(mask, 2)
    b4 = bias if bias is None or flat else _flat(bias, 3)
    if b4 is not None and b4.dtype not in (torch.float32, x.dtype):  # (the kernels take these two)
        b4 = b4.to(x.dtype)
    if empty or not fused:
        if not empty:
            _warn_once(f"c_hidden * no_heads = {mha.c_hidden} * {heads} differs from the channels "
                       f"({grid[-1]}); the fused kernels need them equal")
        out = _torch_pass(x4, norm, mha, axis, m4, b4)
        if residual:
            out = x4 + out
    else:
        pw, dim = _pass_weights(mha, norm, tri)
        if dim is not None:
            out = _run_pass(x4, pw, dim, heads, axis, norm.eps, m4, b4, residual, False)
        else:
            out = axial_pass(x4, pw, num_heads=heads, axis=axis, eps=norm.eps, mask=m4, bias=b4, residual=residual)
    return out if flat else out.reshape(*lead, *grid)


class MSAAttention(nn.Module):
    """OpenFold's ``MSAAttention``: row-wise gated self-attention over an MSA, with the pair bias
    when ``pair_bias`` (AF2 supplementary Algorithm 7). forward(m [*, N_seq, N_res, c_in], z
    [*, N_res, N_res, c_z] or None, mask [*, N_seq, N_res] or None) -> the update, m's shape
    (``residual=True``: m + the update)."""

    def __init__(self, c_in: int, c_hidden: int, no_heads: int, pair_bias: bool = False, c_z: int | None = None,
                 inf: float = 1e9):
        super().__init__()
        self.c_in, self.c_hidden, self.no_heads, self.pair_bias, self.c_z, self.inf = (
            c_in, c_hidden, no_heads, pair_bias, c_z, inf)
        self.layer_norm_m = nn.LayerNorm(c_in, eps=_EPS)
        self.layer_norm_z = nn.LayerNorm(c_z, eps=_EPS) if pair_bias else None
        self.linear_z = nn.Linear(c_z, no_heads, bias=False) if pair_bias else None
        self.mha = Attention(c_in, c_hidden, no_heads)

    def forward(self, m: torch.Tensor, z: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                chunk_size=None, use_memory_efficient_kernel=False, use_deepspeed_evo_attention=False,
                use_lma=False, use_flash=False, inplace_safe=False, _chunk_logits=None,
                _checkpoint_chunks=None, *, residual: bool = False, **kernel_flags) -> torch.Tensor:
        # (chunking, the kernel choices and in-place flags are OpenFold's, and kernel_flags any other
        # keyword a model passes to choose its kernels, e.g. use_cuequivariance_attention: the fused
        # pass needs none of them)
        check_channels_last(m, "m", self.c_in, "[*, N_seq, N_res, c_m]")
        check_residual(residual)
        mask = _pass_mask(mask, m, "[*, N_seq, N_res]")
        bias = None
        if self.pair_bias and z is not None:
            check_channels_last(z, "z", self.c_z, "[*, N_res, N_res, c_z]")
            check_pair(z, m, self.c_z)
            bias = _pair_bias(z, self.layer_norm_z, self.linear_z)  # [*, heads, N_res, N_res]
        return _update(m, self.layer_norm_m, self.mha, "row", mask, bias, residual=residual)


class MSARowAttentionWithPairBias(MSAAttention):
    """OpenFold's ``MSARowAttentionWithPairBias`` (AF2 supplementary Algorithm 7)."""

    def __init__(self, c_m: int, c_z: int, c_hidden: int, no_heads: int, inf: float = 1e9):
        super().__init__(c_m, c_hidden, no_heads, pair_bias=True, c_z=c_z, inf=inf)


class MSAColumnAttention(nn.Module):
    """OpenFold's ``MSAColumnAttention`` (AF2 supplementary Algorithm 8): gated self-attention along
    the MSA's columns, its parameters under ``_msa_att``. forward(m [*, N_seq, N_res, c_m], mask
    [*, N_seq, N_res] or None) -> the update (``residual=True``: m + the update); the column pass
    reads m through its strides."""

    def __init__(self, c_m: int, c_hidden: int, no_heads: int, inf: float = 1e9):
        super().__init__()
        self.c_m, self.c_hidden, self.no_heads, self.inf = c_m, c_hidden, no_heads, inf
        self._msa_att = MSAAttention(c_m, c_hidden, no_heads, pair_bias=False, inf=inf)

    def forward(self, m: torch.Tensor, mask: torch.Tensor | None = None, chunk_size=None,
                use_deepspeed_evo_attention=False, use_lma=False, use_flash=False, *,
                residual: bool = False, **kernel_flags) -> torch.Tensor:
        check_channels_last(m, "m", self.c_m, "[*, N_seq, N_res, c_m]")
        check_residual(residual)
        mask = _pass_mask(mask, m, "[*, N_seq, N_res]")
        return _update(m, self._msa_att.layer_norm_m, self._msa_att.mha, "col", mask, None, residual=residual)


def _triangle_update(mod: nn.Module, x: torch.Tensor, mask, residual: bool = False) -> torch.Tensor:
    """A triangle attention module's update (this module's TriangleAttention, or Boltz's patched;
    residual: x + the update):
    its layer_norm, linear (the triangle bias) and mha over x [*, I, J, c_in]. The triangle bias
    linear(LN(x)) comes from the pass's own LayerNorm output: starting node, bias[h, q, k] from
    x[q, k]; ending node (the transposed frame), from x[k, q]."""
    check_channels_last(x, "x", mod.c_in, "[*, I, J, c_in]")
    check_residual(residual)
    mask = _pass_mask(mask, x, "[*, I, J]")
    check_square(x)
    return _update(x, mod.layer_norm, mod.mha, "row" if mod.starting else "col", mask, None, tri=mod.linear,
                   residual=residual)


class TriangleAttention(nn.Module):
    """OpenFold's ``TriangleAttention`` (AF2 supplementary Algorithms 13 and 14): gated self-attention
    around the starting node (along the rows of the pair representation) or the ending node (along
    its columns, read through strides), with the triangle bias ``linear(layer_norm(x))``.
    forward(x [*, I, J, c_in], mask [*, I, J] or None) -> the update, x's shape (``residual=True``:
    x + the update)."""

    def __init__(self, c_in: int, c_hidden: int, no_heads: int, starting: bool = True, inf: float = 1e9):
        super().__init__()
        self.c_in, self.c_hidden, self.no_heads, self.starting, self.inf = c_in, c_hidden, no_heads, starting, inf
        self.layer_norm = nn.LayerNorm(c_in, eps=_EPS)
        self.linear = nn.Linear(c_in, no_heads, bias=False)
        self.mha = Attention(c_in, c_hidden, no_heads)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, chunk_size=None,
                use_memory_efficient_kernel=False, use_deepspeed_evo_attention=False, use_lma=False,
                inplace_safe=False, *, residual: bool = False, **kernel_flags) -> torch.Tensor:
        return _triangle_update(self, x, mask, residual)


TriangleAttentionStartingNode = TriangleAttention


class TriangleAttentionEndingNode(TriangleAttention):
    """OpenFold's ``TriangleAttentionEndingNode`` (AF2 supplementary Algorithm 14)."""

    def __init__(self, c_in: int, c_hidden: int, no_heads: int, inf: float = 1e9):
        super().__init__(c_in, c_hidden, no_heads, starting=False, inf=inf)


# ---- fair-esm -----------------------------------------------------------------------------------

class _NoHeadWeights:
    """What a patched column block returns in place of its attention weights: using it says why."""

    def __getattr__(self, name):
        raise RuntimeError("axial_fused.patch_esm: the fused column attention does not compute its attention "
                           "weights; call the model with need_head_weights=False and return_contacts=False, or "
                           "use an unpatched model for them")


_NO_HEAD_WEIGHTS = _NoHeadWeights()


_FUSED_BLOCKS: dict[type, type] = {}


def _swap_classes(model: nn.Module, wants, fused_class, fused: dict[type, type]) -> int:
    """Give each module of `model` that `wants` the class fused_class(its class) (the subclasses kept
    in `fused`: patching twice changes nothing); returns how many there are."""
    n = 0
    for module in model.modules():
        if wants(module):
            if type(module) not in fused.values():
                module.__class__ = fused_class(type(module))
            n += 1
    return n


def _fused_column_block(base: type) -> type:
    """A subclass of fair-esm's NormalizedResidualBlock whose forward is one fused column pass (the
    block's LayerNorm, its ColumnSelfAttention's q/k/v/out projections with their biases, the
    residual): the same parameters, so the model's state_dict keys stay as they are."""
    if base in _FUSED_BLOCKS:
        return _FUSED_BLOCKS[base]

    class FusedColumnBlock(base):
        def forward(self, x, self_attn_mask=None, self_attn_padding_mask=None):
            attn = self.layer
            if (self_attn_mask is not None or x.numel() == 0
                    or (self.training and (self.dropout_module.p > 0 or attn.dropout > 0))):
                return super().forward(x, self_attn_mask=self_attn_mask, self_attn_padding_mask=self_attn_padding_mask)
            # ESM's layout is [rows R, columns C, batch, D]; as [batch, R, C, D] (a view) the column
            # attention is the column pass: the sequences are the columns, the tokens the rows.
            grid = x.permute(2, 0, 1, 3)
            mask = None if self_attn_padding_mask is None else ~self_attn_padding_mask
            qkv_w = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
            qkv_b = torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
            ln = self.layer_norm
            pw = PassWeights(ln.weight, ln.bias, qkv_w, attn.out_proj.weight, attn.out_proj.bias, qkv_bias=qkv_b)
            out = axial_pass(grid, pw, num_heads=attn.num_heads, axis="col", eps=ln.eps, mask=mask)
            return out.permute(1, 2, 0, 3), _NO_HEAD_WEIGHTS

    FusedColumnBlock.__name__ = f"Fused{base.__name__}"
    _FUSED_BLOCKS[base] = FusedColumnBlock
    return FusedColumnBlock


def patch_esm(model: nn.Module) -> nn.Module:
    """Run the column self-attention blocks of a fair-esm ``MSATransformer`` (``ColumnSelfAttention``
    inside its ``NormalizedResidualBlock``) as fused column passes reading the model's own weights,
    in place; the tied row attention stays as it is. Returns the model. The patched blocks do not
    compute attention weights (``need_head_weights`` / ``return_contacts`` need the unpatched model);
    in training with dropout, given an attention mask or an empty MSA, a block runs its original
    forward."""
    check_module(model, "patch_esm", "(a fair-esm MSATransformer)")
    try:
        from esm.axial_attention import ColumnSelfAttention
        from esm.modules import NormalizedResidualBlock
    except ImportError as e:
        raise ImportError(f"patch_esm needs fair-esm (pip install fair-esm; the import name is esm): {e}") from None
    wants = lambda m: isinstance(m, NormalizedResidualBlock) and isinstance(m.layer, ColumnSelfAttention)
    if _swap_classes(model, wants, _fused_column_block, _FUSED_BLOCKS) == 0:
        raise ValueError(f"patch_esm: {type(model).__name__} has no ColumnSelfAttention inside a "
                         f"NormalizedResidualBlock (is it a fair-esm MSATransformer?)")
    return model


_BOLTZ_BLOCKS: dict[type, type] = {}


def _fused_boltz_triangle(base: type) -> type:
    """A subclass of Boltz's TriangleAttention whose forward is one fused pass (the starting node a row
    pass, the ending node a column pass through strides), with the module's own parameters."""
    if base in _BOLTZ_BLOCKS:
        return _BOLTZ_BLOCKS[base]

    class FusedTriangleAttention(base):
        def forward(self, x, mask=None, chunk_size=None, **kwargs):
            # (chunk_size and the keywords: Boltz's choices of kernel, which the fused pass needs none of)
            unknown = set(kwargs) - {"use_kernels", "use_flash_attn"}
            if unknown:
                raise TypeError(f"{type(self).__name__}.forward() got unexpected keyword arguments {sorted(unknown)}")
            if self.mha.linear_g is None or self.mha.c_hidden * self.mha.no_heads != self.c_in:
                return super().forward(x, mask=mask, chunk_size=chunk_size, **kwargs)
            return _triangle_update(self, x, mask)

    FusedTriangleAttention.__name__ = f"Fused{base.__name__}"
    _BOLTZ_BLOCKS[base] = FusedTriangleAttention
    return FusedTriangleAttention


def patch_boltz(model: nn.Module) -> nn.Module:
    """Run the triangle attention of a Boltz model (``TriangleAttentionStartingNode`` /
    ``TriangleAttentionEndingNode`` of ``boltz.model.layers.triangular_attention``, in Boltz-1's and
    Boltz-2's pairformer and trunk) as fused passes reading the modules' own weights, in place
    (their gate and output projections have no bias, AF3's form); returns the model. The state_dict
    keys stay as they are; the forward takes Boltz's arguments (``chunk_size``, ``use_kernels``, ...:
    ignored). The key mask is replaced as in this module's TriangleAttention (a query with no key
    present attends uniformly; Boltz adds ``inf * (mask - 1)``). A module without the gate or whose
    ``c_hidden * no_heads`` differs from its channels runs its original forward."""
    check_module(model, "patch_boltz", "(a Boltz model or one of its layers)")
    try:
        from boltz.model.layers.triangular_attention.attention import TriangleAttention as BoltzTriangleAttention
    except ImportError as e:
        raise ImportError(f"patch_boltz needs boltz (pip install boltz): {e}") from None
    wants = lambda m: isinstance(m, BoltzTriangleAttention)
    if _swap_classes(model, wants, _fused_boltz_triangle, _BOLTZ_BLOCKS) == 0:
        raise ValueError(f"patch_boltz: {type(model).__name__} has no Boltz TriangleAttention "
                         f"(boltz.model.layers.triangular_attention)")
    return model
