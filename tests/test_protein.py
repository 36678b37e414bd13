"""axial_fused.protein: the OpenFold-compatible modules, patch_esm and patch_boltz.

References: float64 implementations written here from AF2's supplementary Algorithms 7 (MSA row
attention with pair bias), 8 (MSA column attention), 13 and 14 (triangle attention around the
starting and the ending node), with OpenFold's additive mask bias `-inf * (1 - mask)`. With
inf = 1e30 (absorbing every real logit in float64) that is the modules' semantics: an absent key's
logit replaced, a query with no key present attending uniformly; with OpenFold's inf = 1e9 the two
agree wherever a query has a key present (test_openfold_mask_semantics_agree_where_a_key_is_present).

CPU (in CI): the modules through the PyTorch fallback; the state_dict key sets; fair-esm's
MSATransformer and a Boltz Pairformer layer patched against unpatched. GPU: the fused kernels for
every compiled dtype, judged as the other kernel tests: error(fused vs fp64) <= 2 * error(PyTorch at
that dtype vs fp64) + floor.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch

import axial_fused as af
from axial_fused import _ext, protein
from helpers import DTYPES, FLOOR, force_path, poison, rel_err, tolerance


# ---- float64 references from the algorithms -------------------------------------------------------

def _ln(x, norm):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], norm.weight.double(), norm.bias.double(), 1e-5)


def _lin(x, linear):
    return torch.nn.functional.linear(x, linear.weight.double(), None if linear.bias is None else linear.bias.double())


def _gated_attention(h, mha, bias, mask, inf):
    """The shared core: h [S, L, C] (already normalised), sequences s attending along L; bias
    [heads, L, L] or None; mask [S, L] (1 present) or None. Returns [S, L, C]."""
    S, L, _ = h.shape
    H, c = mha.no_heads, mha.c_hidden
    q = _lin(h, mha.linear_q).view(S, L, H, c)
    k = _lin(h, mha.linear_k).view(S, L, H, c)
    v = _lin(h, mha.linear_v).view(S, L, H, c)
    g = torch.sigmoid(_lin(h, mha.linear_g)).view(S, L, H, c)
    logits = torch.einsum("sqhc,skhc->shqk", q, k) / math.sqrt(c)
    if bias is not None:
        logits = logits + bias[None]
    if mask is not None:
        logits = logits + (inf * (mask.double() - 1))[:, None, None, :]
    a = torch.softmax(logits, dim=-1)
    o = g * torch.einsum("shqk,skhc->sqhc", a, v)
    return _lin(o.reshape(S, L, H * c), mha.linear_o)


def msa_row64(mod, m, z, mask, inf=1e30):
    """Algorithm 7 for one MSA m [N_seq, N_res, c_m], z [N_res, N_res, c_z], mask [N_seq, N_res]."""
    m, z = m.double(), z.double()
    b = _lin(_ln(z, mod.layer_norm_z), mod.linear_z).permute(2, 0, 1)  # b[h, i, j]
    return _gated_attention(_ln(m, mod.layer_norm_m), mod.mha, b, mask, inf)


def msa_col64(mod, m, mask, inf=1e30):
    """Algorithm 8: attention over the sequences of each residue's column."""
    att = mod._msa_att
    mt = None if mask is None else mask.t()
    return _gated_attention(_ln(m.double().transpose(0, 1), att.layer_norm_m), att.mha, None, mt, inf).transpose(0, 1)


def triangle64(mod, x, mask, inf=1e30):
    """Algorithm 13 (starting node: a_ijk from q_ij . k_ik + b_jk) or 14 (ending node: q_ij . k_kj +
    b_ki), x [N_res, N_res, c]."""
    x = x.double()
    h = _ln(x, mod.layer_norm)
    b = _lin(h, mod.linear)  # [i, j, heads]
    if mod.starting:
        return _gated_attention(h, mod.mha, b.permute(2, 0, 1), mask, inf)
    # ending node: the sequences are the columns j, their tokens k along the first axis
    o = _gated_attention(h.transpose(0, 1), mod.mha, b.permute(2, 1, 0), None if mask is None else mask.t(), inf)
    return o.transpose(0, 1)


# ---- inputs ---------------------------------------------------------------------------------------

def randomise(mod, seed):
    """Every parameter random and far from OpenFold's initialisation (linear_o would be zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in mod.named_parameters():
            if name.endswith("layer_norm_m.weight") or name.endswith("layer_norm.weight") or "layer_norm_z.weight" in name:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return mod


def msa_mask(S, L, seed, dtype=torch.float32):
    """0/1 (OpenFold's float mask) with random holes, a padded tail of residues and one padded sequence."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(S, L, generator=g) > 0.2).to(dtype)
    mask[:, L - 2:] = 0
    mask[-1] = 0
    return mask


def strided(t):
    """t's values in a non-contiguous view (every other element of a wider buffer's last dimension)."""
    wide = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    wide[..., ::2] = t
    return wide[..., ::2]


def cases(dev):
    """(name, module, inputs, reference per batch element) for each module, c_hidden * heads = c (AF2's
    sizes for the triangle: c_z 128, 4 heads of 32)."""
    g = torch.Generator().manual_seed(5)
    r = lambda *s: torch.randn(*s, generator=g)
    B, S, L = 2, 6, 9
    m, z = r(B, S, L, 64), r(B, L, L, 16)
    mask = torch.stack([msa_mask(S, L, 1), msa_mask(S, L, 2)])
    x = r(B, L, L, 128)
    tmask = torch.stack([msa_mask(L, L, 3), msa_mask(L, L, 4)])
    row = randomise(protein.MSARowAttentionWithPairBias(64, 16, 16, 4), 10)
    col = randomise(protein.MSAColumnAttention(64, 16, 4), 11)
    start = randomise(protein.TriangleAttentionStartingNode(128, 32, 4), 12)
    end = randomise(protein.TriangleAttentionEndingNode(128, 32, 4), 13)
    return [
        ("msa_row", row, (m, z, mask), lambda b, i: msa_row64(row, m[b], z[b], mask[b], **i)),
        ("msa_col", col, (m, mask), lambda b, i: msa_col64(col, m[b], mask[b], **i)),
        ("tri_start", start, (x, tmask), lambda b, i: triangle64(start, x[b], tmask[b], **i)),
        ("tri_end", end, (x, tmask), lambda b, i: triangle64(end, x[b], tmask[b], **i)),
    ]


def reference(ref, B, **kw):
    return torch.stack([ref(b, kw) for b in range(B)])


# ---- CPU ------------------------------------------------------------------------------------------

OPENFOLD_KEYS = {
    "msa_row": {"layer_norm_m.weight", "layer_norm_m.bias", "layer_norm_z.weight", "layer_norm_z.bias",
                "linear_z.weight", "mha.linear_q.weight", "mha.linear_k.weight", "mha.linear_v.weight",
                "mha.linear_o.weight", "mha.linear_o.bias", "mha.linear_g.weight", "mha.linear_g.bias"},
    "msa_col": {"_msa_att.layer_norm_m.weight", "_msa_att.layer_norm_m.bias", "_msa_att.mha.linear_q.weight",
                "_msa_att.mha.linear_k.weight", "_msa_att.mha.linear_v.weight", "_msa_att.mha.linear_o.weight",
                "_msa_att.mha.linear_o.bias", "_msa_att.mha.linear_g.weight", "_msa_att.mha.linear_g.bias"},
    "tri": {"layer_norm.weight", "layer_norm.bias", "linear.weight", "mha.linear_q.weight", "mha.linear_k.weight",
            "mha.linear_v.weight", "mha.linear_o.weight", "mha.linear_o.bias", "mha.linear_g.weight",
            "mha.linear_g.bias"},
}


def test_state_dict_keys_and_shapes_are_openfolds():
    """The exact key sets of OpenFold's modules (openfold/model/msa.py, triangular_attention.py,
    primitives.Attention) and their shapes; such a state_dict loads strictly and is what runs."""
    c_m, c_z, c, h = 64, 16, 16, 4
    mods = {"msa_row": protein.MSARowAttentionWithPairBias(c_m, c_z, c, h),
            "msa_col": protein.MSAColumnAttention(c_m, c, h),
            "tri": protein.TriangleAttentionEndingNode(c_z, 4, h)}
    for name, mod in mods.items():
        sd = mod.state_dict()
        assert set(sd) == OPENFOLD_KEYS[name], name
        c_in = c_z if name == "tri" else c_m
        hidden = (4 if name == "tri" else c) * h
        pre = "_msa_att." if name == "msa_col" else ""
        assert sd[pre + "mha.linear_q.weight"].shape == (hidden, c_in)
        assert sd[pre + "mha.linear_o.weight"].shape == (c_in, hidden)
        assert sd[pre + "mha.linear_g.weight"].shape == (hidden, c_in)
        if name == "msa_row":
            assert sd["linear_z.weight"].shape == (h, c_z)
        if name == "tri":
            assert sd["linear.weight"].shape == (h, c_z)
        g = torch.Generator().manual_seed(7)
        theirs = {k: torch.randn(v.shape, generator=g) for k, v in sd.items()}
        mod.load_state_dict(theirs, strict=True)
        assert all(torch.equal(mod.state_dict()[k], theirs[k]) for k in theirs)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("name", ["msa_row", "msa_col", "tri_start", "tri_end"])
def test_modules_match_float64_cpu(name, residual):
    """On the CPU (the PyTorch fallback, float32) each module against its algorithm in float64, with
    masks that have holes, padded tails and a fully padded sequence, and strided inputs; the update,
    or (residual=True) the input plus the update."""
    case = {c[0]: c for c in cases("cpu")}[name]
    _, mod, inputs, ref = case
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        out = mod(*(strided(t) if t.dim() == 4 else t for t in inputs), residual=residual)
    want = reference(ref, inputs[0].shape[0]) + (inputs[0].double() if residual else 0)
    assert out.shape == inputs[0].shape
    assert rel_err(out, want) < 1e-5, rel_err(out, want)


def test_openfold_mask_semantics_agree_where_a_key_is_present():
    """OpenFold's mask bias (inf = 1e9) and the modules' replacement agree on every query with a key
    present; on a query with none the modules attend uniformly (docs/usage.md)."""
    _, mod, (m, z, mask), ref = cases("cpu")[0]
    ours, openfold = reference(ref, 2), reference(ref, 2, inf=1e9)
    has_key = mask.sum(-1) > 0  # [B, S]: the row pass's sequences with a key present
    assert (~has_key).any() and has_key.any()
    assert torch.allclose(ours[has_key], openfold[has_key], rtol=1e-9, atol=1e-9)
    assert not torch.allclose(ours[~has_key], openfold[~has_key], rtol=1e-3, atol=1e-3)


def test_leading_dims_extra_kwargs_and_no_mask():
    """Any leading dims ([*] of OpenFold's shapes), OpenFold's extra keywords accepted and ignored,
    mask=None meaning every token present."""
    _, mod, (m, z, mask), ref = cases("cpu")[0]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        out = mod(m[None], z[None], mask[None], chunk_size=4, use_memory_efficient_kernel=True, use_lma=True,
                  use_deepspeed_evo_attention=True, inplace_safe=True)
        assert out.shape == (1, *m.shape)
        assert rel_err(out[0], reference(ref, 2)) < 1e-5
        one = mod(m[0], z[0])  # no leading dims, no mask
    assert rel_err(one, msa_row64(mod, m[0], z[0], None)) < 1e-5


@pytest.mark.parametrize("name", ["msa_row", "msa_col", "tri_start", "tri_end"])
def test_unknown_kernel_flags_are_accepted_and_ignored(name):
    """A model's own kernel flags (OpenFold's cuEquivariance integration passes
    use_cuequivariance_attention=) and ones not yet written reach the drop-ins as keywords: accepted,
    ignored, the same update; a positional argument past the known ones is still an error."""
    _, mod, inputs, ref = {c[0]: c for c in cases("cpu")}[name]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        out = mod(*inputs, use_cuequivariance_attention=True, some_future_flag=3)
        assert torch.equal(out, mod(*inputs))
        assert rel_err(out, reference(ref, inputs[0].shape[0])) < 1e-5
        with pytest.raises(TypeError):
            mod(*inputs, *([None] * 12))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_empty_inputs_give_empty_updates(device):
    """An empty batch, MSA or residue axis gives the empty update of the input's shape, as OpenFold's
    modules do (not an error), gradients included; a patched ESM block runs its original forward."""
    row = randomise(protein.MSARowAttentionWithPairBias(64, 16, 16, 4), 10).to(device)
    col = randomise(protein.MSAColumnAttention(64, 16, 4), 11).to(device)
    start = randomise(protein.TriangleAttentionStartingNode(128, 32, 4), 12).to(device)
    end = randomise(protein.TriangleAttentionEndingNode(128, 32, 4), 13).to(device)
    r = lambda *s: torch.randn(*s, device=device)
    ones = lambda *s: torch.ones(*s, device=device)
    # (leading dims, N_seq, N_res), each with no elements: no batch, no MSA, no residues
    for lead, n_seq, n_res in [((0,), 6, 9), ((0, 2), 6, 9), ((2,), 0, 9), ((), 0, 9), ((2,), 6, 0), ((), 6, 0)]:
        m, mask = r(*lead, n_seq, n_res, 64), ones(*lead, n_seq, n_res)
        z = r(*lead, n_res, n_res, 16)
        for out in [row(m, z, mask), row(m, z), col(m, mask)]:
            assert out.shape == m.shape, (lead, n_seq, n_res)
            out.sum().backward()  # (an update with no elements still belongs to the graph)
    for lead, n in [((0,), 9), ((0, 2), 9), ((2,), 0), ((), 0)]:
        x = r(*lead, n, n, 128)
        for out in [start(x, ones(*x.shape[:-1])), end(x)]:
            assert out.shape == x.shape, (lead, n)
            out.sum().backward()
    model, alphabet = esm_model(0)
    block = next(b for b in af.protein.patch_esm(model.to(device)).modules() if type(b).__name__.startswith("Fused"))
    for shape in [(5, 7, 0, 64), (0, 7, 2, 64)]:  # [rows, columns, batch, D]: no MSA; MSAs of no rows
        x = torch.randn(shape, device=device)
        with torch.no_grad():
            out, _ = block(x)
        assert out.shape == x.shape


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_integer_masks_as_openfold_takes_them(device):
    """OpenFold's modules take a 0/1 mask of any real dtype (inf * (mask - 1)): int32 and int64 masks
    give the float mask's result, bool and uint8 too."""
    for name, mod, inputs, _ in cases("cpu"):
        mod = mod.to(device)
        *data, mask = [t.to(device) for t in inputs]
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", af.FusedFallbackWarning)
            want = mod(*data, mask)
            for dt in (torch.int32, torch.int64, torch.bool, torch.uint8):
                assert torch.equal(mod(*data, mask.to(dt)), want), (name, dt)


def test_projection_weights_follow_every_change():
    """The weights the pass reads (the q/k/v/gate weights views of one shared tensor, all of them
    kept between calls) follow every way a parameter changes: .data writes (which bump no version
    counter), no_grad in-place updates, load_state_dict (in place and with assign=True), a replaced
    parameter, a transposed view at the same address, a dtype conversion and a deepcopy; each output
    against the float64 algorithm of the weights at that moment."""
    import copy
    _, mod, (m, z, mask), _ = cases("cpu")[0]
    check = lambda mod, tol=1e-5: rel_err(mod(m, z, mask).double(), torch.stack(
        [msa_row64(mod, m[b].to(torch.float64), z[b].to(torch.float64), mask[b]) for b in range(m.shape[0])])) < tol
    mha = mod.mha
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        assert check(mod)
        mha.linear_g.weight.data.mul_(-2.0)
        mha.linear_g.bias.data.add_(0.7)
        assert check(mod)
        mha.linear_k.weight.add_(0.1)
        assert check(mod)
        other = randomise(protein.MSARowAttentionWithPairBias(64, 16, 16, 4), 20)
        mod.load_state_dict(other.state_dict())
        assert check(mod) and rel_err(mod(m, z, mask), other(m, z, mask)) < 1e-6
        mod.load_state_dict(randomise(protein.MSARowAttentionWithPairBias(64, 16, 16, 4), 21).state_dict(),
                            assign=True)
        assert mha is mod.mha and mha._shared() and check(mod)
        norm = mod.layer_norm_m
        pw = mha.pass_weights(norm)[0]
        assert pw is mha.pass_weights(norm)[0] and pw.qkv_weight.data_ptr() == mha._W.data_ptr()  # (kept; no copy)
        assert pw.gate_bias is mha.linear_g.bias and pw.qkv_bias is None  # (b_g alone)
        norm.weight.data = 1 + 0.3 * torch.randn(64)  # (the same parameter object, new storage)
        mha.linear_o.bias.data = 0.3 * torch.randn(64)
        assert check(mod)
        mha.linear_o.weight = torch.nn.Parameter(torch.randn(64, 64) / 8)
        assert check(mod)
        mha.linear_k.weight.data = mha.linear_k.weight.data.t()  # (the same pointer, another layout)
        assert not mha._shared() and check(mod)
        mod.load_state_dict(mod.state_dict(), assign=True)
        assert mha._shared() and check(mod)
        mha.linear_q.weight = torch.nn.Parameter(torch.randn(64, 64) / 8)
        assert not mha._shared() and check(mod)
        twin = copy.deepcopy(mod)
        assert rel_err(twin(m, z, mask), mod(m, z, mask)) < 1e-6
        del twin.mha.__dict__["_cached"]  # (as a module pickled before the cache existed loads)
        assert rel_err(twin(m, z, mask), mod(m, z, mask)) < 1e-6
        mod.double()
        assert mha._shared() and mha.linear_q.weight.dtype == torch.float64
        m, z = m.double(), z.double()
        assert check(mod, 1e-12)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("name", ["msa_row", "tri_end"])
def test_modules_compile_fullgraph(name, device):
    """torch.compile(fullgraph=True) of a module (as a compiled OpenFold-style model traces it): no
    graph break, and the eager call's result. On the GPU in bfloat16 through the fused op (its fake
    kernel while tracing); on the CPU through the PyTorch path. The pair bias and the column pass
    with a transposed bias are both traced (msa_row, tri_end); the call with residual=True too."""
    _, mod, inputs, _ = {c[0]: c for c in cases("cpu")}[name]
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if device == "cuda" and not _compiled("bfloat16", inputs[0].shape[-1], mod.no_heads):
        pytest.skip("bfloat16 spec not compiled")
    mod = mod.to(device, dtype)
    xs = [t.to(device, dtype) if t.dim() == 4 else t.to(device) for t in inputs]
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings():
        if device == "cuda":
            warnings.simplefilter("error", af.FusedFallbackWarning)
        want = mod(*xs)
        got = torch.compile(mod, fullgraph=True)(*xs)
        want_sum = mod(*xs, residual=True)
        got_sum = torch.compile(lambda *a: mod(*a, residual=True), fullgraph=True)(*xs)
    assert rel_err(got.float(), want.float()) < (1e-2 if device == "cuda" else 1e-5)
    assert rel_err(got_sum.float(), want_sum.float()) < (1e-2 if device == "cuda" else 1e-5)


@pytest.mark.parametrize("starting", [True, False])
def test_triangle_past_bias_weight_limits(starting):
    """More heads than bias_weight takes (40 > 32): the triangle bias computed first and passed as the
    pass's bias, the same result."""
    mod = randomise(protein.TriangleAttention(320, 8, 40, starting=starting), 21)
    g = torch.Generator().manual_seed(22)
    x, mask = torch.randn(1, 6, 6, 320, generator=g), msa_mask(6, 6, 23)[None]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        out = mod(x, mask)
    assert rel_err(out, triangle64(mod, x[0], mask[0])[None]) < 1e-5


def test_c_hidden_not_matching_channels_falls_back():
    """c_hidden * no_heads != c_m (no fused kernel): the same result in PyTorch after a warning."""
    mod = randomise(protein.MSARowAttentionWithPairBias(64, 16, 8, 4), 3)  # 8 * 4 = 32 != 64
    g = torch.Generator().manual_seed(2)
    m, z, mask = torch.randn(2, 5, 7, 64, generator=g), torch.randn(2, 7, 7, 16, generator=g), msa_mask(5, 7, 9)
    mask = mask.expand(2, -1, -1)
    with torch.no_grad(), pytest.warns(af.FusedFallbackWarning, match="c_hidden"):
        af.functional._warned.discard("c_hidden * no_heads = 8 * 4 differs from the channels (64); the fused kernels "
                                      "need them equal")
        out = mod(m, z, mask)
    want = torch.stack([msa_row64(mod, m[b], z[b], mask[b]) for b in range(2)])
    assert rel_err(out, want) < 1e-5
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        assert rel_err(mod(m, z, mask, residual=True), m.double() + want) < 1e-5


def test_bad_inputs_name_the_argument():
    row = protein.MSARowAttentionWithPairBias(64, 16, 16, 4)
    m, z = torch.randn(1, 5, 7, 64), torch.randn(1, 7, 7, 16)
    with pytest.raises(ValueError, match=r"m has shape \(1, 5, 7, 32\)"):
        row(torch.randn(1, 5, 7, 32), z)
    with pytest.raises(TypeError, match="m must be a torch.Tensor"):
        row([1, 2], z)
    with pytest.raises(ValueError, match=r"z has shape \(1, 6, 6, 16\)"):
        row(m, torch.randn(1, 6, 6, 16))
    with pytest.raises(ValueError, match=r"mask has shape \(1, 5, 6\), expected \[\*, N_seq, N_res\]"):
        row(m, z, torch.ones(1, 5, 6))
    with pytest.raises(TypeError, match="residual must be a bool, got int"):
        row(m, z, residual=1)
    tri = protein.TriangleAttention(64, 16, 4)
    with pytest.raises(ValueError, match="square"):
        tri(torch.randn(5, 7, 64))
    with pytest.raises(TypeError, match="residual must be a bool, got str"):
        tri(torch.randn(5, 5, 64), residual="yes")
    with pytest.raises(TypeError, match="residual must be a bool, got NoneType"):
        protein.MSAColumnAttention(64, 16, 4)(m, residual=None)


# ---- fair-esm ---------------------------------------------------------------------------------------

def esm_model(seed, layers=2, embed_dim=64, heads=4):
    """A randomly initialised fair-esm MSATransformer (no download), built from its arguments."""
    esm = pytest.importorskip("esm", reason="fair-esm is a test dependency (pip install fair-esm)")
    from argparse import Namespace
    alphabet = esm.Alphabet.from_architecture("msa_transformer")
    args = Namespace(layers=layers, embed_dim=embed_dim, ffn_embed_dim=2 * embed_dim, attention_heads=heads,
                     dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, max_tokens=2 ** 14, max_tokens_per_msa=2 ** 14,
                     max_positions=64, embed_positions_msa=True)
    torch.manual_seed(seed)
    model = esm.model.msa_transformer.MSATransformer(args, alphabet)
    with torch.no_grad():  # biases and LayerNorm affine off their defaults
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.2 * torch.randn_like(p))
    return model.eval(), alphabet


def esm_tokens(alphabet, B, R, C, seed):
    """Random MSAs with padding: the second MSA has fewer sequences and shorter ones."""
    g = torch.Generator().manual_seed(seed)
    aa = [alphabet.get_idx(a) for a in "ACDEFGHIKLMNPQRSTVWY-"]
    tokens = torch.tensor(aa)[torch.randint(len(aa), (B, R, C), generator=g)]
    tokens[:, :, 0] = alphabet.cls_idx
    tokens[1:, R - 2:, :] = alphabet.padding_idx
    tokens[1:, :, C - 3:] = alphabet.padding_idx
    return tokens


def test_patch_esm_matches_unpatched_cpu():
    """fair-esm as the client: the patched model's logits equal the unpatched model's (CPU: the
    fallback path) and its state_dict keys are unchanged; the attention weights raise clearly."""
    model, alphabet = esm_model(0)
    tokens = esm_tokens(alphabet, 2, 5, 12, 1)
    keys = set(model.state_dict())
    with torch.no_grad():
        want = model(tokens)["logits"]
        assert af.protein.patch_esm(model) is model
        af.protein.patch_esm(model)  # twice: no change
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", af.FusedFallbackWarning)
            got = model(tokens)["logits"]
        assert set(model.state_dict()) == keys
        assert sum(type(m).__name__.startswith("Fused") for m in model.modules()) == 2
        assert rel_err(got, want) < 1e-5, rel_err(got, want)
        with pytest.raises(RuntimeError, match="need_head_weights=False"):
            model(tokens, return_contacts=True)


@pytest.mark.parametrize("patch, client, what", [("patch_esm", "esm", "no ColumnSelfAttention"),
                                                  ("patch_boltz", "boltz", "no Boltz TriangleAttention")])
def test_patch_rejects_other_models(patch, client, what):
    with pytest.raises(TypeError, match="nn.Module"):
        getattr(af.protein, patch)("model")
    pytest.importorskip(client)
    with pytest.raises(ValueError, match=what):
        getattr(af.protein, patch)(torch.nn.Linear(2, 2))


# ---- Boltz --------------------------------------------------------------------------------------------

def boltz_layer(seed, token_z=128, head_width=32, heads=4):
    """A Boltz-2 PairformerLayer (its triangle attention: boltz.model.layers.triangular_attention, no
    gate or output bias) with random weights, LayerNorm affine off its defaults."""
    pytest.importorskip("boltz", reason="boltz is a test dependency (pip install --no-deps boltz; einops, scipy)")
    from boltz.model.layers.pairformer import PairformerLayer
    torch.manual_seed(seed)
    layer = PairformerLayer(64, token_z, num_heads=4, dropout=0.0, pairwise_head_width=head_width,
                            pairwise_num_heads=heads, v2=True)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            p.copy_(torch.randn_like(p) / math.sqrt(p.shape[-1]) if p.dim() == 2 else
                    (name.endswith("weight")) + 0.3 * torch.randn_like(p))
    return layer.eval()


def boltz_inputs(B, N, token_z, seed):
    """s, z, the token mask (the second complex padded) and Boltz's pair mask, their outer product."""
    g = torch.Generator().manual_seed(seed)
    s, z = torch.randn(B, N, 64, generator=g), torch.randn(B, N, N, token_z, generator=g)
    mask = torch.ones(B, N)
    mask[1:, N - 3:] = 0
    return s, z, mask, mask[:, :, None] * mask[:, None, :]


def test_patch_boltz_matches_unpatched_cpu():
    """Boltz as the client: a Pairformer layer patched (its two triangle attention modules) against
    the unpatched layer, called as Boltz calls it (pair mask, chunk_size, use_kernels); the state_dict
    keys unchanged. Compared where the pair mask is present: a padded token's row has no key present,
    which the modules attend to uniformly and Boltz by its logits (docs/usage.md)."""
    layer = boltz_layer(0)
    s, z, mask, pair = boltz_inputs(2, 11, 128, 1)
    keys = set(layer.state_dict())
    with torch.no_grad():
        want_s, want_z = layer(s, z, mask, pair, chunk_size_tri_attn=4)
        assert af.protein.patch_boltz(layer) is layer
        af.protein.patch_boltz(layer)  # twice: no change
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", af.FusedFallbackWarning)
            got_s, got_z = layer(s, z, mask, pair, chunk_size_tri_attn=4, use_kernels=False)
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        layer.tri_att_start(z, mask=pair, use_kernel=True)
    assert set(layer.state_dict()) == keys
    assert [type(m).__name__ for m in layer.modules() if type(m).__name__.startswith("Fused")] == [
        "FusedTriangleAttention", "FusedTriangleAttentionEndingNode"]
    present = pair.bool()
    assert torch.isfinite(got_z).all()
    assert rel_err(got_z[present], want_z[present]) < 1e-5, rel_err(got_z[present], want_z[present])
    assert rel_err(got_s[mask.bool()], want_s[mask.bool()]) < 1e-5


# ---- GPU --------------------------------------------------------------------------------------------

def _compiled(dtype_name, dim, heads):
    return (dtype_name, dim, heads) in _ext.specs()


@pytest.mark.gpu
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("name", ["msa_row", "msa_col", "tri_start", "tri_end"])
def test_modules_fused_match_float64(name, dt, residual):
    """The fused kernels against the float64 algorithm, per compiled dtype (64x4 and 128x4 specs); the
    triangle modules also on the two-kernel path, where on H100 / H200 K1 writes their bias (the
    planner's choice at these lengths is the one-kernel path, where the pair-bias kernel does); the
    update, or (residual=True) the input plus the update, added by the output epilogue."""
    dtype = DTYPES[dt]
    _, mod, inputs, ref = {c[0]: c for c in cases("cpu")}[name]
    dim, heads = inputs[0].shape[-1], mod.no_heads
    if not _compiled(dt, dim, heads):
        pytest.skip(f"{dim}x{heads} {dt} not compiled")
    want = reference(ref, inputs[0].shape[0]) + (inputs[0].double() if residual else 0)
    mod = mod.to("cuda", dtype)
    xs = [t.to("cuda", dtype) if t.is_floating_point() and t.dim() == 4 else t.cuda() for t in inputs]
    with torch.inference_mode():
        # PyTorch's own error at this dtype: the same pass in PyTorch ops (the modules' fallback code)
        torch_out = _torch_reference(name, mod, xs) + (xs[0] if residual else 0)
    torch_err = rel_err(torch_out.cpu(), want)
    tol = tolerance(dtype, torch_err)
    for path in ("auto", "two_kernel") if name.startswith("tri") else ("auto",):
        with torch.inference_mode(), force_path(path):
            poison(1 << 26)
            with warnings.catch_warnings():
                warnings.simplefilter("error", af.FusedFallbackWarning)  # the fused path, or fail
                out = mod(*(strided(t) if t.dim() == 4 else t for t in xs), residual=residual)
        err = rel_err(out.cpu(), want)
        assert err <= tol, f"path {path}: error {err:.3g} > tolerance {tol:.3g} (PyTorch at {dt}: {torch_err:.3g})"


def _torch_reference(name, mod, xs):
    if name == "msa_row":
        m, z, mask = xs
        bias = mod.linear_z(mod.layer_norm_z(z)).movedim(-1, -3)
        return protein._torch_pass(m, mod.layer_norm_m, mod.mha, "row", mask, bias)
    if name == "msa_col":
        m, mask = xs
        return protein._torch_pass(m, mod._msa_att.layer_norm_m, mod._msa_att.mha, "col", mask, None)
    x, mask = xs
    t = mod.linear(mod.layer_norm(x)).movedim(-1, -3)
    bias = t if mod.starting else t.transpose(-1, -2)
    return protein._torch_pass(x, mod.layer_norm, mod.mha, "row" if mod.starting else "col", mask, bias)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_patch_esm_fused_matches_unpatched(dt):
    """fair-esm on the GPU: the patched model (fused column passes, 64x4) against the unpatched one
    at the same dtype, both judged against the unpatched model in float64."""
    if not _compiled(dt, 64, 4):
        pytest.skip(f"64x4 {dt} not compiled")
    model, alphabet = esm_model(1)
    tokens = esm_tokens(alphabet, 2, 6, 20, 2)
    with torch.inference_mode():
        want = model.double()(tokens)["logits"]
        model = model.to("cuda", DTYPES[dt])
        tokens = tokens.cuda()
        plain = model(tokens)["logits"]
        af.protein.patch_esm(model)
        with warnings.catch_warnings():
            warnings.simplefilter("error", af.FusedFallbackWarning)
            got = model(tokens)["logits"]
    err, torch_err = rel_err(got.cpu(), want), rel_err(plain.cpu(), want)
    assert err <= 2 * torch_err + FLOOR[DTYPES[dt]], (err, torch_err)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", list(DTYPES))
def test_patch_boltz_fused_matches_float64(dt):
    """Boltz's triangle attention (both nodes, 128x4) patched, on the fused kernels, against the
    unpatched modules in float64, judged by the unpatched modules' own error at the dtype; a mask with
    holes and a padded tail, every query with a key present (where Boltz's mask and ours agree)."""
    if not _compiled(dt, 128, 4):
        pytest.skip(f"128x4 {dt} not compiled")
    dtype = DTYPES[dt]
    layer = boltz_layer(2)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 40, 40, 128, generator=g)
    mask = (torch.rand(2, 40, 40, generator=g) > 0.2).float()
    mask[:, :, -3:] = 0
    mask[:, torch.arange(40), torch.arange(40)] = 1  # (every query's own key present, in both nodes)
    for node in (layer.tri_att_start, layer.tri_att_end):
        with torch.inference_mode():
            want = node.double()(x.double(), mask=mask.double())
            node = node.to("cuda", dtype)
            xs, ms = x.to("cuda", dtype), mask.cuda()
            plain = node(xs, mask=ms)
            af.protein.patch_boltz(node)
            poison(1 << 26)
            with warnings.catch_warnings():
                warnings.simplefilter("error", af.FusedFallbackWarning)  # the fused path, or fail
                got = node(xs, mask=ms, chunk_size=8, use_kernels=False)
        err, torch_err = rel_err(got.cpu(), want), rel_err(plain.cpu(), want)
        tol = tolerance(dtype, torch_err)
        assert err <= tol, (type(node).__name__, err, torch_err)


# ---- the pair-bias kernel ---------------------------------------------------------------------------

def pair_bias_inputs(B, I, J, c, heads, dtype, device, seed, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s, scale=1.0: (scale * torch.randn(*s, generator=g)).to(device, dtype).requires_grad_(requires_grad)
    return r(B, I, J, c, scale=2.0) + 0.5, 1 + r(c, scale=0.3), r(c, scale=0.3), r(heads, c, scale=c ** -0.5)


def pair_bias64(x, nw, nb, w, eps=1e-5):
    x, nw, nb, w = (t.detach().cpu().double() for t in (x, nw, nb, w))
    return torch.nn.functional.linear(torch.nn.functional.layer_norm(x, x.shape[-1:], nw, nb, eps), w).movedim(-1, -3)


@pytest.mark.needs_ext
def test_pair_bias_op_registrations_cpu():
    """The op's schema, fake kernel and (with gradients required, on any device) its Autograd kernel,
    whose ATen computation matches the float64 reference."""
    op = torch.ops.axial_fused.pair_bias.default
    torch.library.opcheck(op, (*pair_bias_inputs(2, 3, 5, 16, 4, torch.float32, "meta", 0), 1e-5))
    args = pair_bias_inputs(2, 3, 5, 16, 4, torch.float32, "cpu", 1, requires_grad=True)
    torch.library.opcheck(op, (*args, 1e-5))
    out = op(*args, 1e-5)
    assert out.shape == (2, 4, 3, 5) and rel_err(out.detach(), pair_bias64(*args)) < 1e-5


@pytest.mark.needs_ext
def test_pair_bias_bad_inputs_name_the_argument():
    op = torch.ops.axial_fused.pair_bias
    x, nw, nb, w = pair_bias_inputs(1, 3, 5, 16, 4, torch.float32, "meta", 2)
    bad = [((x[0], nw, nb, w, 1e-5), ValueError, "x must be .B, I, J, c.|must be .B, I, J, c. and weight"),
           ((x, nw, nb, w[:, :8], 1e-5), ValueError, r"weight has shape \[4, 8\], expected \[heads, 16\]"),
           ((x, nw, nb, torch.empty(33, 16, device="meta"), 1e-5), ValueError, "1 <= heads <= 32"),
           ((x, nw[:8], nb, w, 1e-5), ValueError, "norm_weight"),
           ((x, nw, nb, w.half(), 1e-5), TypeError, "weight is Half but x is Float"),
           ((x.double(), nw.double(), nb.double(), w.double(), 1e-5), TypeError, "x is Double; supported"),
           ((torch.empty(1, 3, 5, 1025, device="meta"), torch.empty(1025, device="meta"),
             torch.empty(1025, device="meta"), torch.empty(4, 1025, device="meta"), 1e-5), ValueError,
            "1025 channels; supported: 1 to 1024"),
           ((x, nw, nb, w, 0.0), ValueError, "eps must be a positive finite number")]
    for args, exc, msg in bad:
        with pytest.raises(exc, match=msg):
            op(*args)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("c,heads", [(128, 4), (64, 8), (100, 3), (192, 12), (200, 5), (300, 1), (1024, 32)])
def test_pair_bias_kernel_matches_float64(c, heads, dt):
    """The pair-bias kernel against float64, judged against PyTorch's LayerNorm + Linear at the same
    dtype, the output poisoned first; an odd plane, x strided (the op copies it) and x contiguous at
    an address that is not 16-byte aligned (the kernel's scalar loads). c a multiple of 32 or not
    (100, 200, 300: scalar loads for 16-bit x), one to four chunks of 128 channels, heads in one, two
    or four 8-head tiles of the tensor-core kernel."""
    dtype = DTYPES[dt]
    x, nw, nb, w = pair_bias_inputs(2, 7, 33, c, heads, dtype, "cuda", c + heads)
    want = pair_bias64(x, nw, nb, w)
    shifted = torch.empty(x.numel() + 1, device="cuda", dtype=dtype)[1:].view(x.shape).copy_(x)
    with torch.inference_mode():
        plain = torch.nn.functional.linear(torch.nn.functional.layer_norm(x, (c,), nw, nb, 1e-5), w).movedim(-1, -3)
        torch_err = rel_err(plain.cpu(), want)
        for layout, xin in [("strided", x.transpose(1, 2).contiguous().transpose(1, 2)), ("unaligned", shifted)]:
            poison(1 << 26)
            got = torch.ops.axial_fused.pair_bias(xin, nw, nb, w, 1e-5)
            assert got.shape == (2, heads, 7, 33) and got.dtype == dtype and got.is_contiguous()
            err = rel_err(got.cpu(), want)
            assert err <= 2 * torch_err + FLOOR[dtype], f"{layout}: error {err:.3g} (PyTorch at {dt}: {torch_err:.3g})"


@pytest.mark.gpu
@pytest.mark.parametrize("dt", list(DTYPES))
def test_pair_bias_kernel_many_tokens(dt):
    """More tokens than one wave of the kernel's warps takes (so that warps run on to further tokens),
    a last group of tokens cut short, against float64, the output poisoned."""
    dtype = DTYPES[dt]
    x, nw, nb, w = pair_bias_inputs(2, 300, 301, 128, 8, dtype, "cuda", 7)
    want = pair_bias64(x, nw, nb, w)
    with torch.inference_mode():
        plain = torch.nn.functional.linear(torch.nn.functional.layer_norm(x, (128,), nw, nb, 1e-5), w).movedim(-1, -3)
        torch_err = rel_err(plain.cpu(), want)
        poison(1 << 28)
        got = torch.ops.axial_fused.pair_bias(x, nw, nb, w, 1e-5)
    err = rel_err(got.cpu(), want)
    assert err <= 2 * torch_err + FLOOR[dtype], f"error {err:.3g} (PyTorch at {dt}: {torch_err:.3g})"


# ---- the protein benchmark's blocks ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["msa_row_pair", "msa_col", "extra_msa", "tri_256", "esm_col"])
def test_protein_bench_blocks_cpu(name, monkeypatch):
    """bench_protein's blocks at small sizes on the CPU: each peer's computation (OpenFold's, in
    PyTorch ops; ours through the fallback) agrees with the float32 reference on the kept positions,
    and the output is a real update (not the input)."""
    from axial_fused import bench_protein as bp
    if name == "esm_col":
        pytest.importorskip("esm")
    spec = bp.BLOCKS[name]
    monkeypatch.setitem(bp.BLOCKS, name, dict(spec, L=16, **({"S": 12} if "S" in spec else {})))
    inputs, keep, calls, ref = bp.build(name, device="cpu", dtype=torch.float32)
    assert {"eager", "fused"} <= set(calls)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        want = ref(*inputs) * keep
        assert rel_err(want, inputs[0] * keep) > 0.05
        for peer, fn in calls.items():
            assert rel_err(fn(*inputs) * keep, want) < 1e-5, peer


def test_protein_bench_table():
    import io
    from axial_fused import bench
    rows = [{"shape": "tri_256", "us": {"eager": 4000.0, "compile": 1500.0, "fused_graph": 300.0},
             "best_peer": "compile", "speedup_fused_graph": 5.0}]
    out = io.StringIO()
    bench.print_protein_table(rows, ["eager", "compile", "cueq", "fused", "fused_graph"], out)
    lines = out.getvalue().splitlines()
    assert lines[1].split() == ["tri_256", "4000.0", "1500.0", "-", "-", "300.0", "compile", "5.00x"]
