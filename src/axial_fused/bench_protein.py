"""The protein suite of the benchmark: `python -m axial_fused.bench --suite protein`.

Blocks (bf16; 0/1 masks in the activations' dtype, as OpenFold passes them, with a padded tail of
residues and of sequences, and random holes):
  msa_row_pair  MSARowAttentionWithPairBias, N_seq 512, N_res 256, c_m 256, c_z 128, 8 heads of 32
                (the pair-bias projection inside every peer's time)
  msa_col       MSAColumnAttention, the same sizes
  extra_msa     the row block with pair bias, then the column block, N_seq 1024, N_res 256, c_m 64,
                8 heads of 8 (AF2's extra-MSA stack)
  tri_256/384   TriangleAttention around the starting node, then the ending node, N_res 256 / 384,
                c_z 128, 4 heads of 32
  esm_col       fair-esm's column attention block (LayerNorm, ColumnSelfAttention, residual), 256 rows
                x 512 columns, dim 768, 12 heads
Each block adds each module's update to its input (the model's residual). Peers, on the same inputs
and weights: eager (OpenFold's computation in PyTorch ops: its mask bias inf * (mask - 1) added to
the logits; for esm_col the unpatched fair-esm block), compile (torch.compile of eager), and where
cuequivariance_torch imports, cueq (cuEquivariance's triangle_attention between the same PyTorch
projections) and, for the blocks with a pair-bias module, cueq_apb (that module's update by
cuEquivariance's whole-operation attention_pair_bias; what it says it ran is logged). Ours: fused
(the axial_fused.protein modules with residual=True, the add fused into each pass; or the patched
ESM block) and fused_graph (its CUDA-graph replay). Each output is checked against eager in float32
first, on the positions the mask keeps (a fully padded row is where OpenFold's mask bias and ours
differ: docs/usage.md). Times as the main suite's: median of batches between CUDA events.
"""
from __future__ import annotations

import copy
import math
import warnings

import torch

BLOCKS = {
    "msa_row_pair": dict(kind="msa_row", S=512, L=256, c=256, c_z=128, heads=8),
    "msa_col": dict(kind="msa_col", S=512, L=256, c=256, heads=8),
    "extra_msa": dict(kind="extra_msa", S=1024, L=256, c=64, c_z=128, heads=8),
    "tri_256": dict(kind="tri", L=256, c=128, heads=4),
    "tri_384": dict(kind="tri", L=384, c=128, heads=4),
    "esm_col": dict(kind="esm_col", S=256, L=512, c=768, heads=12),
}
PEERS = ["eager", "compile", "cueq", "cueq_apb", "fused", "fused_graph"]
OURS = ("fused", "fused_graph")


def _randomise(mod, g):
    with torch.no_grad():
        for p in mod.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            else:
                p.copy_(0.5 + 0.5 * torch.rand(p.shape, generator=g))
    return mod


def _mask(S, L, g):
    """0/1 float [1, S, L]: random holes (5 %), the last eighth of the residues and of the sequences padded."""
    mask = (torch.rand(1, S, L, generator=g) > 0.05).float()
    mask[:, :, L - L // 8:] = 0
    mask[:, S - S // 8:, :] = 0
    return mask


# ---- OpenFold's computation in PyTorch ops (the eager peer) -------------------------------------------

def _openfold_mha(h, mha, biases, core=None):
    """OpenFold's Attention on normalised h [*, S, L, C] with its list of additive biases (each
    broadcasting to [*, S, heads, L, L]); `core(q, k, v, biases)` replaces the softmax attention."""
    *lead, L, _ = h.shape
    heads, c = mha.no_heads, mha.c_hidden
    split = lambda t: t.view(*lead, L, heads, c).transpose(-2, -3)  # [*, heads, L, c]
    q, k, v = split(mha.linear_q(h)), split(mha.linear_k(h)), split(mha.linear_v(h))
    if core is None:
        a = (q / math.sqrt(c)) @ k.transpose(-1, -2)
        for b in biases:
            a = a + b
        o = torch.softmax(a, dim=-1) @ v
    else:
        o = core(q, k, v, biases)
    o = o.transpose(-2, -3) * torch.sigmoid(mha.linear_g(h)).view(*lead, L, heads, c)
    return mha.linear_o(o.reshape(*lead, L, heads * c))


def _mask_bias(mask, inf=1e9):
    return (inf * (mask - 1))[..., :, None, None, :]


def eager_update(mod, x, z=None, mask=None, core=None):
    """One protein module's update as OpenFold computes it (transposes for the column passes)."""
    from . import protein
    if isinstance(mod, protein.MSAColumnAttention):
        att = mod._msa_att
        o = _openfold_mha(att.layer_norm_m(x.transpose(-2, -3)), att.mha, [_mask_bias(mask.transpose(-1, -2))], core)
        return o.transpose(-2, -3)
    if isinstance(mod, protein.MSAAttention):
        zb = mod.linear_z(mod.layer_norm_z(z)).permute(0, 3, 1, 2).unsqueeze(-4)  # [B, 1, heads, L, L]
        return _openfold_mha(mod.layer_norm_m(x), mod.mha, [_mask_bias(mask), zb], core)
    xt, mt = (x, mask) if mod.starting else (x.transpose(-2, -3), mask.transpose(-1, -2))
    h = mod.layer_norm(xt)
    tb = mod.linear(h).permute(0, 3, 1, 2).unsqueeze(-4)
    o = _openfold_mha(h, mod.mha, [_mask_bias(mt), tb], core)
    return o if mod.starting else o.transpose(-2, -3)


def _cueq_core():
    """cuEquivariance's triangle_attention as the attention core: q, k, v [B, N, heads, L, c], the
    biases (a mask bias [B, N, 1, 1, L] and the pair bias [B, 1, heads, L, L]) as its mask and bias."""
    import cuequivariance_torch as cuet

    def core(q, k, v, biases):
        mask = biases[0] > -1.0  # OpenFold's mask bias: 0 present, -inf * 1 absent
        bias = biases[1].float() if len(biases) > 1 else torch.zeros(
            q.shape[0], 1, q.shape[2], q.shape[3], k.shape[3], device=q.device, dtype=torch.float32)
        return cuet.triangle_attention(q, k, v, bias, mask=mask, scale=1 / math.sqrt(q.shape[-1]))
    return core


def _cueq_pair_bias(mod, x, z, mask):
    """MSARowAttentionWithPairBias's update by cuEquivariance's whole operation, attention_pair_bias
    (both LayerNorms, the projections, the pair bias, the masked softmax, the gate and the output
    projection in one call; the MSA's sequences are its multiplicity over the one pair representation)."""
    import cuequivariance_torch as cuet
    L, c = x.shape[-2:]
    mha, ln_m, ln_z = mod.mha, mod.layer_norm_m, mod.layer_norm_z
    out, _ = cuet.attention_pair_bias(
        x.reshape(-1, L, c), z, mask.reshape(-1, L), mha.no_heads, ln_m.weight, ln_m.bias, mha.linear_q.weight, None,
        mha.linear_k.weight, mha.linear_v.weight, mha.linear_g.weight, mha.linear_o.weight,
        w_proj_z=mod.linear_z.weight, b_proj_o=mha.linear_o.bias, w_ln_z=ln_z.weight, b_ln_z=ln_z.bias,
        eps=ln_m.eps, attn_scale=1 / math.sqrt(mha.c_hidden), b_proj_g=mha.linear_g.bias)
    return out.view(x.shape)


# ---- the blocks ---------------------------------------------------------------------------------------

def build(name, device="cuda", dtype=torch.bfloat16, seed=0):
    """(inputs, keep, calls, ref): the block's inputs, the mask of the output positions compared,
    {peer: fn(*inputs) -> output} for the peers this machine can run, and ref(*inputs), the eager
    computation in float32 (of float32 copies of the weights)."""
    from . import protein
    spec = BLOCKS[name]
    g = torch.Generator().manual_seed(seed)
    kind, L, c, heads = spec["kind"], spec["L"], spec["c"], spec["heads"]
    to = lambda t: t.to(device, dtype)
    if kind == "esm_col":
        return _build_esm(spec, g, device, dtype)
    if kind == "tri":
        mods = [protein.TriangleAttentionStartingNode(c, c // heads, heads),
                protein.TriangleAttentionEndingNode(c, c // heads, heads)]
        x, mask = torch.randn(1, L, L, c, generator=g), _mask(L, L, g)
        inputs = (to(x), to(mask))
    else:
        S = spec["S"]
        row = protein.MSARowAttentionWithPairBias(c, spec.get("c_z", 128), c // heads, heads)
        col = protein.MSAColumnAttention(c, c // heads, heads)
        mods = {"msa_row": [row], "msa_col": [col], "extra_msa": [row, col]}[kind]
        x, mask = torch.randn(1, S, L, c, generator=g), _mask(S, L, g)
        z = torch.randn(1, L, L, spec.get("c_z", 128), generator=g)
        inputs = (to(x), to(z), to(mask))
    mods = [_randomise(m, g).to(device).eval() for m in mods]
    mods32, mods = [copy.deepcopy(m) for m in mods], [m.to(dtype) for m in mods]
    keep = inputs[-1][..., None]

    def chain(update, ms, add=True):  # the blocks in turn, each adding its update (add=False: update adds it)
        def run(x, *rest):
            z, mask = rest if len(rest) == 2 else (None, rest[0])
            for m in ms:
                u = update(m, x, z if isinstance(m, protein.MSAAttention) and m.pair_bias else None, mask)
                x = x + u if add else u
            return x
        return run

    # (ours: the modules' residual=True, the add fused into each pass's output epilogue)
    fused = lambda m, x, z, mask: m(x, z, mask, residual=True) if z is not None else m(x, mask, residual=True)
    calls = {"eager": chain(eager_update, mods), "fused": chain(fused, mods, add=False)}
    try:  # (cuEquivariance's kernels are CUDA's only)
        core = _cueq_core() if torch.device(device).type == "cuda" else None
    except ImportError:
        core = None
    if core is not None:
        cueq = lambda m, x, z, mask: eager_update(m, x, z, mask, core=core)
        calls["cueq"] = chain(cueq, mods)
        if any(isinstance(m, protein.MSAAttention) and m.pair_bias for m in mods):  # (that by attention_pair_bias)
            calls["cueq_apb"] = chain(lambda m, x, z, mask: _cueq_pair_bias(m, x, z, mask) if z is not None
                                      else cueq(m, x, z, mask), mods)
    ref = chain(eager_update, mods32)
    return inputs, keep, calls, lambda *a: ref(*(t.float() if t.is_floating_point() else t for t in a))


def _build_esm(spec, g, device, dtype):
    from esm.axial_attention import ColumnSelfAttention
    from esm.modules import NormalizedResidualBlock
    from . import protein
    R, C, D, heads = spec["S"], spec["L"], spec["c"], spec["heads"]
    block = _randomise(NormalizedResidualBlock(ColumnSelfAttention(D, heads, max_tokens_per_msa=2 ** 30), D, 0.0), g)
    block32 = block.to(device).eval()
    block = copy.deepcopy(block32).to(dtype)
    fused = protein.patch_esm(torch.nn.Sequential(copy.deepcopy(block)))[0]
    x = torch.randn(R, C, 1, D, generator=g).to(device, dtype)  # fair-esm's layout [rows, columns, batch, D]
    pad = _mask(R, C, g)[0].to(device) == 0  # [R, C], True: padding, as fair-esm's padding mask [B, R, C]
    keep = (~pad)[:, :, None, None]
    calls = {"eager": lambda x_, p_: block(x_, self_attn_padding_mask=p_)[0],
             "fused": lambda x_, p_: fused(x_, self_attn_padding_mask=p_)[0]}
    ref = lambda x_, p_: block32(x_.float(), self_attn_padding_mask=p_)[0]
    return (x, pad[None]), keep, calls, ref


def bench_block(name, peers, log=print) -> dict:
    """One block: every peer's output checked, then timed; a row of the results."""
    import axial_fused as af
    from .bench import _graph, _time_batches, summarise
    inputs, keep, calls, ref_fn = build(name)
    with torch.inference_mode():
        ref = ref_fn(*inputs).float() * keep
    row = {"shape": name, **BLOCKS[name], "dtype": "bfloat16"}
    times, errs = {}, {}
    for peer in sorted(peers, key=lambda q: q == "compile"):
        try:
            with torch.inference_mode():
                if peer in ("eager", "fused", "cueq", "cueq_apb"):
                    if peer not in calls:  # (cueq_apb: a block without a pair-bias module has none; not news)
                        if peer != "cueq_apb":
                            log(f"  {name}/{peer}: not available here")
                        continue
                    fn = lambda f=calls[peer]: f(*inputs)
                elif peer == "compile":
                    torch._dynamo.reset()
                    cf = torch.compile(calls["eager"])
                    fn = lambda: cf(*inputs)
                elif peer == "fused_graph":
                    gr, gout = _graph(lambda: calls["fused"](*inputs))
                    fn = lambda: (gr.replay(), gout)[1]
                with warnings.catch_warnings(record=peer.startswith("cueq")) as said:
                    if peer in OURS:  # ours on the fused path, or not timed
                        warnings.simplefilter("error", af.FusedFallbackWarning)
                    out = fn()
                    torch.cuda.synchronize()
                    for w in said or []:  # what cuEquivariance says it ran (e.g. its PyTorch route)
                        log(f"  {name}/{peer}: {str(w.message).splitlines()[0][:240]}")
                    errs[peer] = ((out.float() * keep - ref).norm() / ref.norm()).item()
                    if not math.isfinite(errs[peer]) or errs[peer] > 5e-2:
                        log(f"  {name}/{peer}: output differs from the fp32 eager one (rel err {errs[peer]:.3g}); "
                            f"not timed")
                        continue
                    times[peer] = _time_batches(fn)
        except Exception as e:  # a peer that cannot run this block is reported, not fatal
            log(f"  {name}/{peer}: failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    summarise(row, times, errs, OURS)
    return row
