"""The Python API and the reference on the CPU (CI): the reference against an independent float64 implementation, weight plumbing,
fallback reasons, errors for bad input, the registered op's shape inference, the compiled set."""
from __future__ import annotations

import os
import warnings

import pytest
import torch

import axial_fused as af
from axial_fused import _ext, _specs
from helpers import DTYPES, attention64, make_weights, pass64, rand_x, rel_err, to64


# ---- the reference ------------------------------------------------------------------------------

@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
@pytest.mark.parametrize("shape,heads", [((2, 5, 7, 64), 4), ((1, 9, 3, 48), 3), ((3, 1, 1, 32), 2)])
def test_reference_matches_independent_float64(attention, shape, heads):
    w = make_weights(shape[-1], heads, torch.float64, seed=1)
    x = rand_x(shape, torch.float64, "cpu", seed=2)
    out = af.reference.reference_axial_attention(x, w, attention=attention)
    assert rel_err(out, attention64(x, w)) < 1e-12


def test_reference_float32_error_is_small():
    w = make_weights(64, 4, torch.float32, seed=3)
    x = rand_x((2, 6, 6, 64), torch.float32, "cpu", seed=4)
    assert rel_err(af.reference.reference_axial_attention(x, w), attention64(x, to64(w))) < 1e-5


def test_independent_reference_sees_the_pitfalls():
    """The float64 reference is sensitive to each known mistake (so the GPU tests that use it are too)."""
    D = 64
    w = make_weights(D, 4, torch.float64, seed=5)
    x = rand_x((2, 5, 6, D), torch.float64, "cpu", seed=6)
    ref = attention64(x, w)
    bad = [w.row._replace(out_bias=torch.zeros(D, dtype=torch.float64)),
           w.row._replace(qkv_weight=w.row.qkv_weight.view(D, 3 * D).t().contiguous().view(3 * D, D))]
    for b in bad:
        assert rel_err(attention64(x, w._replace(row=b)), ref) > 1e-2


def test_single_pass_axes():
    w = make_weights(32, 2, torch.float64, seed=7)
    x = rand_x((2, 4, 5, 32), torch.float64, "cpu", seed=8)
    for axis in ("row", "col"):
        out = af.reference.reference_pass(x, *w.row, num_heads=2, axis=axis, eps=w.eps)
        assert rel_err(out, pass64(x, w.row, 2, axis, w.eps)) < 1e-12
    # the column pass is the row pass on the transposed grid
    col = af.reference.reference_pass(x, *w.row, num_heads=2, axis="col")
    row_t = af.reference.reference_pass(x.transpose(1, 2), *w.row, num_heads=2, axis="row").transpose(1, 2)
    assert torch.allclose(col, row_t)


# ---- weights, module, state_dict ------------------------------------------------------------------

def _ref_model(D=64, heads=4, seed=0):
    torch.manual_seed(seed)
    m = af.reference.AxialAttentionReference(D, heads, eps=1e-6)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return m


def test_state_dict_loads_unchanged_and_module_matches():
    ref = _ref_model()
    ours = af.AxialAttention(64, 4, eps=1e-6)
    ours.load_state_dict(ref.state_dict())  # strict: same keys, same shapes
    assert set(ours.state_dict()) == set(ref.state_dict())
    x = torch.randn(2, 5, 6, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        with torch.no_grad():
            assert torch.allclose(ours(x), ref(x), atol=1e-6)
    w64 = to64(af.AxialWeights.from_module(ref))
    assert rel_err(ref.double()(x.double()), attention64(x, w64)) < 1e-12


def test_module_reads_replaced_and_parametrized_weights():
    """forward() reads parameters from the submodules' parameter dicts (fast); a parametrized weight
    or a replaced parameter must still be what it uses."""
    from torch.nn.utils import parametrize

    class Double(torch.nn.Module):
        def forward(self, w):
            return 2 * w

    ref = _ref_model()
    ours = af.AxialAttention(64, 4, eps=1e-6)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 5, 6, 64)
    with torch.no_grad():
        parametrize.register_parametrization(ours.row_qkv, "weight", Double())
        ref.row_qkv.weight.mul_(2)
        ours.col_out.bias = torch.nn.Parameter(ref.col_out.bias + 1)  # replaced, not copied into
        ref.col_out.bias.add_(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", af.FusedFallbackWarning)
            assert torch.allclose(ours(x), ref(x), atol=1e-5)


def test_from_module_and_from_state_dict_agree():
    ref = _ref_model()
    a = af.AxialWeights.from_module(ref)
    b = af.AxialWeights.from_state_dict(ref.state_dict(), num_heads=4, eps=1e-6)
    assert a.num_heads == b.num_heads == 4 and a.eps == b.eps == 1e-6
    for pa, pb in zip(a.row + a.col, b.row + b.col):
        assert pa is pb or torch.equal(pa, pb)
    assert a.row.qkv_weight.shape == (192, 64)  # nn.Linear layout, not transposed
    prefixed = {"module." + k: v for k, v in ref.state_dict().items()}
    c = af.AxialWeights.from_state_dict(prefixed, num_heads=4)
    assert torch.equal(c.col.out_bias, ref.col_out.bias)


def test_functional_matches_reference_on_cpu():
    ref = _ref_model()
    w = af.AxialWeights.from_module(ref)
    x = torch.randn(1, 3, 4, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        with torch.no_grad():
            assert torch.allclose(af.axial_attention(x, w), ref(x), atol=1e-6)
            y = af.axial_pass(x, w.col, num_heads=4, axis="col", eps=w.eps)
    assert torch.allclose(y, af.reference.reference_pass(x, *w.col, num_heads=4, axis="col", eps=w.eps))


def test_fallback_keeps_autograd():
    m = af.AxialAttention(32, 2)
    x = torch.randn(1, 3, 3, 32, dtype=torch.float64, requires_grad=True)
    m.double()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        assert torch.autograd.gradcheck(m, (x,), eps=1e-6, atol=1e-5)


# ---- fallback reasons -----------------------------------------------------------------------------

def test_fallback_reasons_on_cpu():
    w = make_weights(64, 4, torch.float32)
    x = torch.randn(1, 2, 3, 64)
    reason = af.fallback_reason(x, w)
    assert reason is not None and ("cpu" in reason or "extension" in reason)
    w64 = make_weights(64, 4, torch.float64)
    assert af.fallback_reason(x.double(), w64) is not None
    # For one pass (axial_pass) the heads pick the kernel: a PassWeights needs num_heads.
    assert "cpu" in af.fallback_reason(x, w.row, num_heads=4, axis="col") or _ext.C is None
    with pytest.raises(TypeError, match="num_heads is required when weights is a PassWeights"):
        af.fallback_reason(x, w.row, axis="row")
    with pytest.raises(ValueError, match="not divisible by num_heads = 5"):
        af.fallback_reason(x, w.row, num_heads=5)
    with pytest.raises(ValueError, match="axis must be 'row' or 'col', got 'diag'"):
        af.fallback_reason(x, w.row, num_heads=4, axis="diag")


def test_fallback_warning_names_the_callers_line():
    """The fallback warning points at the user's call (the first frame outside axial_fused and
    torch), whether it comes through the functional API, nn.Module calls or a protein module."""
    from axial_fused import protein
    w = make_weights(64, 4, torch.float32, seed=9)
    x = torch.randn(1, 2, 2, 64)
    calls = [lambda: af.axial_attention(x, w), lambda: af.axial_pass(x, w.row, num_heads=4, axis="row"),
             lambda: af.AxialAttention(64, 4)(x), lambda: protein.MSAColumnAttention(64, 16, 4)(x)]
    for call in calls:
        af.functional._warned.clear()
        with torch.no_grad(), pytest.warns(af.FusedFallbackWarning) as rec:
            call()
        assert [r.filename for r in rec] == [__file__]


def test_fallback_warns_once_and_strict_raises():
    w = make_weights(64, 4, torch.float32, seed=9)
    x = torch.randn(1, 2, 2, 64)
    af.functional._warned.clear()
    with pytest.warns(af.FusedFallbackWarning, match="instead of the fused kernels"):
        af.axial_attention(x, w)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        af.axial_attention(x, w)  # the same reason again: no second warning
    with pytest.raises(af.FusedUnavailableError, match="fused path cannot run"):
        af.axial_attention(x, w, strict=True)


def test_reason_texts_for_each_cause():
    """Each cause the decision knows, exercised through _reason with a stand-in CUDA tensor where the
    cause does not need a GPU."""
    w = make_weights(64, 4, torch.float32)
    x = torch.randn(1, 2, 2, 64)
    passes = (w.row, w.col)
    r = af.functional._reason(x, passes, 64, 4)
    assert "cpu" in r or "extension" in r
    if _ext.C is not None:
        class FakeCuda:  # only the attributes the decision reads before the device check
            is_cuda, dtype, requires_grad = True, torch.float64, False
        assert "float64" in af.functional._reason(FakeCuda, passes, 64, 4)
        FakeCuda.dtype = torch.float32
        r = af.functional._reason(FakeCuda, passes, 64, 7)
        assert "no compiled specialization" in r and "AXIAL_FUSED_SPECS=64x7" in r
        FakeCuda.requires_grad = True
        assert "inference-only" in af.functional._reason(FakeCuda, passes, 64, 4)
        with torch.no_grad():
            assert "inference-only" not in (af.functional._reason(FakeCuda, passes, 64, 7) or "")


# ---- bad input ----------------------------------------------------------------------------------

@pytest.fixture
def w():
    return make_weights(64, 4, torch.float32)


def test_error_wrong_rank(w):
    with pytest.raises(ValueError, match="4-D"):
        af.axial_attention(torch.randn(2, 3, 64), w)


def test_error_dim_mismatch(w):
    with pytest.raises(ValueError, match="D = 32"):
        af.axial_attention(torch.randn(1, 2, 2, 32), w)


def test_error_heads_not_dividing():
    pw = make_weights(64, 4).row
    with pytest.raises(ValueError, match="not divisible by num_heads = 5"):
        af.AxialWeights.create(pw, pw, 5)
    with pytest.raises(ValueError, match="not divisible"):
        af.axial_pass(torch.randn(1, 2, 2, 64), pw, num_heads=6, axis="row")
    with pytest.raises(TypeError, match="num_heads must be an int"):
        af.axial_pass(torch.randn(1, 2, 2, 64), pw, num_heads=4.0, axis="row")
    with pytest.raises(ValueError, match="not divisible"):
        af.AxialAttention(64, 5)


def test_error_dtype_mismatch(w):
    with pytest.raises(TypeError, match="bfloat16 but the weights are torch.float32"):
        af.axial_attention(torch.randn(1, 2, 2, 64, dtype=torch.bfloat16), w)
    with pytest.raises(TypeError, match="supported"):
        af.axial_attention(torch.ones(1, 2, 2, 64, dtype=torch.int32), w)


def test_error_device_mismatch(w):
    x = torch.randn(1, 2, 2, 64, device="meta")
    with pytest.raises(ValueError, match="meta.*weights are on cpu"):
        af.axial_attention(x, w)


def test_error_non_tensor_and_bad_weights(w):
    with pytest.raises(TypeError, match="AxialWeights"):
        af.axial_attention(torch.randn(1, 2, 2, 64), {"row": 1})
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        af.AxialWeights.create(w.row._replace(out_bias=[0.0] * 64), w.col, 4)
    with pytest.raises(ValueError, match=r"qkv_weight has shape \(64, 192\)"):
        af.AxialWeights.create(w.row._replace(qkv_weight=w.row.qkv_weight.t()), w.col, 4)
    with pytest.raises(TypeError, match="share one dtype"):
        af.AxialWeights.create(w.row._replace(out_bias=w.row.out_bias.double()), w.col, 4)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        af.axial_attention(torch.randn(1, 2, 2, 64).tolist(), w)
    with pytest.raises(ValueError, match="axis must be"):
        af.axial_pass(torch.randn(1, 2, 2, 64), w.row, num_heads=4, axis="diag")
    with pytest.raises(ValueError, match="lacks"):
        af.AxialWeights.from_state_dict({"row_norm.weight": w.row.norm_weight}, num_heads=4)
    with pytest.raises(ValueError, match="num_heads"):
        af.AxialWeights.from_module(torch.nn.Linear(2, 2))


def test_error_empty_grid_axes_and_empty_batch(w):
    with pytest.raises(ValueError, match="H, W and D must be at least 1"):
        af.axial_attention(torch.randn(1, 0, 2, 64), w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        out = af.axial_attention(torch.randn(0, 3, 2, 64), w)
    assert out.shape == (0, 3, 2, 64)


# ---- the registered operator and the compiled set -----------------------------------------------

@pytest.mark.needs_ext
def test_meta_shape_inference():
    x = torch.empty(2, 3, 5, 64, device="meta", dtype=torch.bfloat16)
    ws = [torch.empty(s, device="meta", dtype=torch.bfloat16) for s in [(64,), (64,), (192, 64), (64, 64), (64,)]]
    y = torch.ops.axial_fused.axial_pass(x, *ws, 4, 1, 1e-5)
    assert y.shape == x.shape and y.dtype == x.dtype and y.device.type == "meta" and y.is_contiguous()
    y = torch.ops.axial_fused.axial_attention(x.transpose(1, 2), *ws, *ws, 4, 1e-5)
    assert y.shape == (2, 5, 3, 64) and y.is_contiguous()


@pytest.mark.needs_ext
def test_cpu_tensor_to_op_is_a_clear_error():
    ws = [torch.zeros(s) for s in [(64,), (64,), (192, 64), (64, 64), (64,)]]
    with pytest.raises(NotImplementedError):  # no CPU kernel registered: the dispatcher says so
        torch.ops.axial_fused.axial_pass(torch.zeros(1, 2, 2, 64), *ws, 4, 0, 1e-5)


@pytest.mark.needs_ext
def test_compiled_specs_match_install_option():
    option = _ext.C.specs_option()
    expected = {(dict(fp32="float32", fp16="float16", bf16="bfloat16")[dt], d, h)
                for dt, d, h in _specs.parse_specs(option)}
    assert _ext.specs() == expected
    assert {(c.dtype, c.dim, c.heads) for c in af.supported_configs()} == {(DTYPES[dt], d, h) for dt, d, h in expected}
    env = os.environ.get("AXIAL_FUSED_SPECS")
    if env is not None:
        assert option == env


def test_spec_option_parsing():
    default = _specs.parse_specs(None)
    assert len(default) == 36 and ("bf16", 768, 12) in default and ("fp32", 1024, 16) in default
    assert ("bf16", 64, 8) in default and ("fp16", 384, 16) in default  # head_dim 8 and 24
    assert _specs.parse_specs("minimal") == [("fp32", 64, 4), ("fp16", 64, 4), ("bf16", 64, 4), ("bf16", 64, 8),
                                             ("bf16", 128, 4), ("bf16", 512, 8)]
    assert _specs.parse_specs("256x8:bf16, 64x4") == [("fp32", 64, 4), ("fp16", 64, 4), ("bf16", 64, 4),
                                                      ("bf16", 256, 8)]
    for bad in ("64x5", "96x3", "abc", "64x4:fp64", ""):
        if bad == "":
            assert _specs.parse_specs(bad) == default
            continue
        with pytest.raises(ValueError):
            _specs.parse_specs(bad)
    assert _specs.parse_archs("80;90a") == ["80", "90a"]
    assert _specs.parse_archs(None) == ["80+PTX", "90a"]  # release builds hold compute_80 PTX
    assert _specs.gencode_flag("80+PTX") == "-gencode=arch=compute_80,code=[sm_80,compute_80]"
    assert _specs.gencode_flag("90a") == "-gencode=arch=compute_90a,code=sm_90a"
    for bad in ("sm_90", "90a+PTX", "8", "PTX"):
        with pytest.raises(ValueError):
            _specs.parse_archs(bad)


def test_kernel_files_are_generated_for_the_default_set():
    root = os.path.join(os.path.dirname(__file__), "..", "kernels")
    for dt, d, h in _specs.parse_specs("default"):
        with open(os.path.join(root, _specs.kernel_filename(dt, d, h))) as f:
            assert f.read() == _specs.kernel_source(dt, d, h)


def test_bench_counts_and_progress_line():
    from axial_fused import bench
    c = bench.count(4, 32, 32, 64, 4, 2)  # seed, bf16
    N, D = 4 * 32 * 32, 64
    assert c["flops"] == 2 * (2 * N * D * 3 * D + 2 * N * D * D) + 4 * N * (32 + 32) * D
    assert c["bytes"] == 2 * (2 * N * D * 2) + 2 * (4 * D * D + 3 * D) * 2
    assert c["exps"] == 4 * N * 64
    row = {"shape": "seed", "dtype": "bfloat16", "us": {"graph": 60.0, "fused_graph": 24.25}, "best_peer": "graph"}
    assert bench.progress_line(row) == "  seed/bfloat16: graph 60.0 fused_graph 24.2 µs; best peer graph"


def test_bench_feature_table():
    """The --features table: a row per pass, each feature's time and ratio to the plain pass."""
    import io

    from axial_fused import bench
    rows = [{"shape": "msa", "axis": "row", "features": "plain", "us": 400.0, "ratio": 1.0},
            {"shape": "msa", "axis": "row", "features": "mask", "us": 460.0, "ratio": 1.15}]
    out = io.StringIO()
    bench.print_feature_table(rows, out)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:4] == ["shape", "pass", "plain", "mask"] and "mask+bias+gate" in lines[0]
    assert lines[1].split()[:6] == ["msa", "row", "400.0", "1.00x", "460.0", "1.15x"] and lines[1].count("-") == 6
    assert len(lines) == 3  # no column row: nothing measured for it


def test_bench_feature_inputs():
    """The feature benchmark's inputs: each set turns on exactly its features, the bias fits the pass."""
    from axial_fused import bench
    fi = bench.FeatureInputs(1, 16, 8, 64, 4, torch.float32, device="cpu")
    assert not fi.mask[:, 14:].any() and not fi.mask[..., 7:].any() and fi.mask[:, :14, :7].float().mean() > 0.7
    for fname, f in bench.FEATURE_SETS.items():
        for axis, L in (("row", 8), ("col", 16)):
            x, pw, kw = fi.call(fname, axis)
            assert (kw["mask"] is not None, kw["bias"] is not None, pw.gate_weight is not None,
                    pw.qkv_bias is not None, kw["residual"]) == (f.mask, f.bias, f.gate, f.qkv_bias, f.residual)
            if f.bias:
                assert tuple(kw["bias"].shape) == (1, 4, L, L)


def test_bench_resolve_shape():
    """The scripts' SHAPE argument: a suite name or B,H,W,D,heads[,dtype]; anything else names the forms."""
    from axial_fused import bench
    assert bench.resolve_shape("latent") == bench.SUITE["latent"]
    assert bench.resolve_shape("3,40,64,128,4") == (3, 40, 64, 128, 4, "bfloat16")
    assert bench.resolve_shape("1,2,3,64,4,float16") == (1, 2, 3, 64, 4, "float16")
    for bad in ("lat", "1,2,3,64", "1,2,3,64,4,int8", "1,2,x,64,4"):
        with pytest.raises(ValueError, match="B,H,W,D,heads"):
            bench.resolve_shape(bad)
