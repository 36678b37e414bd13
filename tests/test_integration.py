"""axial_fused as a PyTorch citizen: opcheck, torch.compile(fullgraph=True), torch.export save/load,
CUDA graphs, streams and devices, autocast, autograd, and a lean eager call.

CPU tests run everywhere: the op's registrations (meta shape function, the Autograd kernel that
computes the reference math when gradients are required), compile/export of the reference path,
and, with a stand-in CPU kernel for the op (`fused_on_cpu`), compile/export of the fused branch of
the Python decision. GPU tests (marked gpu) need CUDA and the extension and run the real kernels.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import axial_fused as af
from axial_fused import functional as F_
from helpers import DTYPES, FLOOR, OP, attention64, force_path, make_weights, rand_x, rel_err, small_spec, to64


def assert_same_grads(out, model, ref, x, tol):
    """Gradients of `out` (our module's output) w.r.t. x and the parameters equal the reference
    model's, for one random upstream gradient."""
    g = torch.randn_like(out)
    grads = torch.autograd.grad(out, [x, *model.parameters()], g)
    ref_grads = torch.autograd.grad(ref(x), [x, *ref.parameters()], g)
    for a, b in zip(grads, ref_grads):
        assert rel_err(a, b) < tol


def op_args(x, w):
    """Positional arguments of torch.ops.axial_fused.axial_attention for x and AxialWeights w."""
    return (x, *w.row[:5], *w.col[:5], w.num_heads, w.eps)


def weights_like(w, requires_grad=False, **kw):
    """w with every weight tensor converted by .to(**kw), detached, requiring grad if asked."""
    cv = lambda p: af.PassWeights(*(t.detach().to(**kw).requires_grad_(requires_grad) for t in p[:5]))
    return af.AxialWeights(cv(w.row), cv(w.col), w.num_heads, w.eps)


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Move every parameter away from its default (LayerNorm 1/0, small biases)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g).to(p) * 0.3)
    return model


class TwoBlocks(torch.nn.Module):
    """A small model: axial block, MLP, axial block (the compile/export test model)."""

    def __init__(self, dim: int, heads: int, block=af.AxialAttention, **kw):
        super().__init__()
        self.a = block(dim, heads, **kw)
        self.mlp = torch.nn.Sequential(torch.nn.LayerNorm(dim), torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(2 * dim, dim))
        self.b = block(dim, heads, **kw)

    def forward(self, x):
        x = self.a(x)
        return self.b(x + self.mlp(x))


class OpLog(TorchDispatchMode):
    """Records every op that reaches the Python dispatch key (below autograd and autocast)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append((func, [a.dtype for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


# ---- CPU: the op's registrations ------------------------------------------------------------------

@pytest.mark.needs_ext
def test_opcheck_meta():
    """Schema, fake tensor and AOT dispatch of the shape-only implementation, on meta tensors."""
    w = weights_like(make_weights(64, 4), device="meta")
    x = torch.empty(2, 3, 5, 64, device="meta")
    torch.library.opcheck(OP.axial_attention.default, op_args(x, w))
    torch.library.opcheck(OP.axial_pass.default, (x.transpose(1, 2), *w.row[:5], 4, 1, w.eps))


@pytest.mark.needs_ext
@pytest.mark.parametrize("op", ["axial_attention", "axial_pass"])
def test_opcheck_autograd_kernel_on_cpu(op):
    """With inputs requiring grad the op's Autograd kernel computes the reference math in PyTorch ops (on
    any device, so this runs on the CPU): schema, autograd registration, fake tensors and AOT
    dispatch with gradients all pass."""
    w = weights_like(make_weights(32, 2, seed=3), requires_grad=True)
    x = rand_x((2, 3, 4, 32), torch.float32, "cpu", seed=4).requires_grad_()
    args = op_args(x, w) if op == "axial_attention" else (x, *w.col[:5], 2, 1, w.eps)
    torch.library.opcheck(getattr(OP, op).default, args)


@pytest.mark.needs_ext
def test_op_autograd_kernel_gradcheck_float64():
    """float64 gradcheck of the op itself (its Autograd kernel) and its value against the
    independent float64 reference."""
    w = make_weights(32, 2, torch.float64, seed=5)
    x = rand_x((2, 3, 4, 32), torch.float64, "cpu", seed=6).requires_grad_()
    ws = [t.requires_grad_() for t in (*w.row[:5], *w.col[:5])]
    fn = lambda x, *ws: OP.axial_attention(x, *ws, w.num_heads, w.eps)
    assert rel_err(fn(x, *ws).detach(), attention64(x.detach(), w)) < 1e-12
    assert torch.autograd.gradcheck(fn, (x, *ws), eps=1e-6, atol=1e-5)
    pass_fn = lambda x, *ws: OP.axial_pass(x, *ws, w.num_heads, 1, w.eps)
    assert torch.autograd.gradcheck(pass_fn, (x, *ws[5:]), eps=1e-6, atol=1e-5)


def test_module_gradients_match_reference_model_float64():
    """Training through AxialAttention (the reference path): gradcheck, and the gradients of x and of
    every parameter equal the reference model's."""
    ref = randomize(af.reference.AxialAttentionReference(32, 2, dtype=torch.float64), seed=7)
    model = af.AxialAttention(32, 2, dtype=torch.float64)
    model.load_state_dict(ref.state_dict())
    x = rand_x((2, 3, 4, 32), torch.float64, "cpu", seed=8).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        assert torch.autograd.gradcheck(model, (x,), eps=1e-6, atol=1e-5)
        out = model(x)
    assert_same_grads(out, model, ref, x, 1e-12)


# ---- CPU: compile and export of the reference path ------------------------------------------------

def test_compile_fullgraph_reference_path_on_cpu():
    """On the CPU the Python decision picks the reference: the whole call (checks, decision, one-time
    fallback warning) compiles with fullgraph=True and matches eager."""
    torch._dynamo.reset()
    F_._warned.clear()
    model = randomize(TwoBlocks(64, 4), seed=9)
    x = rand_x((2, 5, 6, 64), torch.float32, "cpu", seed=10)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with torch.no_grad():
            got = torch.compile(model, fullgraph=True)(x)
            want = model(x)
    assert rel_err(got, want) < 1e-5
    fallback = [r for r in rec if r.category is af.FusedFallbackWarning]
    assert len(fallback) == 1 and "x is on cpu" in str(fallback[0].message)


def test_export_reference_path_on_cpu(tmp_path):
    model = randomize(af.AxialAttention(64, 4), seed=11)
    x = rand_x((2, 5, 6, 64), torch.float32, "cpu", seed=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        ep = torch.export.export(model, (x,))
    torch.export.save(ep, tmp_path / "m.pt2")
    loaded = torch.export.load(tmp_path / "m.pt2")
    with torch.no_grad():
        assert torch.allclose(loaded.module()(x), model(x), atol=1e-6)


def test_autocast_cpu_accepts_mixed_dtypes_like_the_reference_model():
    """Under autocast x and the weights may differ in dtype (autocast casts them, as for nn.Linear):
    a bfloat16 x into a float32 module gives what the reference model gives."""
    ref = randomize(af.reference.AxialAttentionReference(64, 4), seed=13)
    model = af.AxialAttention(64, 4)
    model.load_state_dict(ref.state_dict())
    x = rand_x((2, 5, 6, 64), torch.bfloat16, "cpu", seed=14)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), warnings.catch_warnings():
        warnings.simplefilter("ignore", af.FusedFallbackWarning)
        got, want = model(x), ref(x)
    assert got.dtype == want.dtype and torch.equal(got, want)
    with pytest.raises(TypeError, match="bfloat16 but the weights are torch.float32"):
        model(x)  # without autocast the dtype mismatch is still an error


# ---- CPU: the fused branch, with stand-in CPU kernels for the ops (conftest's fused_on_cpu) -------------

def test_compile_fullgraph_fused_branch(fused_on_cpu):
    """The fused branch compiles with fullgraph=True: the graph holds our op (twice in the small
    model), the fake implementation's output matches the kernel's, and results match eager."""
    torch._dynamo.reset()
    model = randomize(TwoBlocks(64, 4, strict=True), seed=15)
    x = rand_x((2, 5, 6, 64), torch.float32, "cpu", seed=16)
    with torch.no_grad():
        explained = torch._dynamo.explain(model)(x)
        assert explained.graph_break_count == 0
        assert explained.graphs[0].code.count("torch.ops.axial_fused.axial_attention") == 2
        got = torch.compile(model, fullgraph=True)(x)
        assert rel_err(got, model(x)) < 1e-5


def test_export_fused_branch_save_load(fused_on_cpu, tmp_path):
    """Exported under no_grad the program holds our op; it survives torch.export.save/load."""
    model = randomize(af.AxialAttention(64, 4, strict=True), seed=17)
    x = rand_x((2, 5, 6, 64), torch.float32, "cpu", seed=18)
    with torch.no_grad():
        ep = torch.export.export(model, (x,))
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert targets == [OP.axial_attention.default]
    torch.export.save(ep, tmp_path / "m.pt2")
    loaded = torch.export.load(tmp_path / "m.pt2")
    with torch.no_grad():
        assert torch.equal(loaded.module()(x), model(x))


def test_eager_call_runs_no_tensor_ops_besides_the_op(fused_on_cpu):
    """The Python side of a fused call (checks, decision) dispatches no tensor op: only ours."""
    model = af.AxialAttention(64, 4, strict=True)
    x = torch.randn(2, 5, 6, 64)
    w = af.AxialWeights.from_module(model)
    for mode in (torch.no_grad, torch.inference_mode):
        with mode(), OpLog() as log:
            model(x)
            af.axial_attention(x, w, strict=True)
        assert [f for f, _ in log.ops] == [OP.axial_attention.default] * 2, log.ops


# ---- GPU ---------------------------------------------------------------------------------------------

def _gpu_model(dt="bfloat16", seed=0, block=af.AxialAttention, **kw):
    _, dim, heads = small_spec(dt)
    return randomize(block(dim, heads, **kw), seed=seed).to("cuda", DTYPES[dt]), dim


@pytest.mark.gpu
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad_inputs", "grad_inputs"])
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("op", ["axial_attention", "axial_pass"])
def test_opcheck_cuda(op, dt, grad):
    _, dim, heads = small_spec(dt)
    dtype = getattr(torch, dt)
    w = weights_like(make_weights(dim, heads, seed=19), device="cuda", dtype=dtype, requires_grad=grad)
    x = rand_x((2, 9, 12, dim), dtype, "cuda", seed=20).requires_grad_(grad)
    args = op_args(x, w) if op == "axial_attention" else (x, *w.row[:5], heads, 1, w.eps)
    torch.library.opcheck(getattr(OP, op).default, args)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "odd_slice"])
def test_output_strides_match_fake(layout):
    _, dim, heads = small_spec()
    w = weights_like(make_weights(dim, heads, seed=21), device="cuda", dtype=torch.bfloat16)
    big = rand_x((2, 12, 10, dim + 1), torch.bfloat16, "cuda", seed=22)
    x = {"contiguous": big[..., :dim].contiguous(), "transposed": big[..., :dim].contiguous().transpose(1, 2),
         "odd_slice": big[..., 1:]}[layout]
    with torch.inference_mode():
        out = OP.axial_attention(*op_args(x, w))
        meta = OP.axial_attention(*op_args(x.to("meta"), weights_like(w, device="meta")))
        # a layout the kernels cannot read in place is copied once: same bits as a contiguous input
        assert torch.equal(out, OP.axial_attention(*op_args(x.contiguous(), w)))
    assert out.shape == meta.shape and out.stride() == meta.stride() and out.dtype == meta.dtype


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [None, "reduce-overhead", "max-autotune-no-cudagraphs"])
def test_compile_fullgraph_cuda(mode):
    """AxialAttention alone and in the small model: fullgraph, our op in the graph, result = eager."""
    torch._dynamo.reset()
    block, dim = _gpu_model(seed=23, strict=True)
    model = randomize(TwoBlocks(dim, block.num_heads, strict=True), seed=24).to("cuda", torch.bfloat16)
    x = rand_x((2, 24, 40, dim), torch.bfloat16, "cuda", seed=25)
    with torch.inference_mode():
        assert torch._dynamo.explain(model)(x).graph_break_count == 0
        for m, tol in ((block, 0.0), (model, 2e-2)):
            compiled = torch.compile(m, fullgraph=True, mode=mode)
            for _ in range(3):  # reduce-overhead records CUDA graphs after warm-up runs
                got = compiled(x).clone()
            want = m(x)
            assert rel_err(got, want) <= tol, (m.__class__.__name__, rel_err(got, want))


@pytest.mark.gpu
def test_export_save_load_cuda(tmp_path):
    model, dim = _gpu_model(seed=26, strict=True)
    x = rand_x((2, 16, 20, dim), torch.bfloat16, "cuda", seed=27)
    with torch.no_grad():
        ep = torch.export.export(model, (x,))
    assert OP.axial_attention.default in [n.target for n in ep.graph.nodes]
    torch.export.save(ep, tmp_path / "m.pt2")
    loaded = torch.export.load(tmp_path / "m.pt2")
    with torch.inference_mode():
        assert torch.equal(loaded.module()(x), model(x))


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["fused", "two_kernel"])
def test_cuda_graph_capture_replay(path):
    """Captured in a CUDA graph (global capture mode: a cudaMalloc or a host sync would fail the
    capture) and replayed on new data, the op gives the eager result, on both kernel paths."""
    model, dim = _gpu_model(seed=28, strict=True)
    static_x = rand_x((2, 20, 30, dim), torch.bfloat16, "cuda", seed=29)
    with force_path(path), torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            model(static_x)  # warm-up off the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = model(static_x)
        new_x = rand_x(static_x.shape, torch.bfloat16, "cuda", seed=30)
        static_x.copy_(new_x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, model(new_x))


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["fused", "two_kernel"])
def test_no_host_sync(path):
    model, dim = _gpu_model(seed=31, strict=True)
    x = rand_x((2, 20, 30, dim), torch.bfloat16, "cuda", seed=32)
    with force_path(path), torch.inference_mode():
        model(x)  # first call fills the per-device caches (device queries may sync once)
        torch.cuda.set_sync_debug_mode("error")
        try:
            model(x)
            af.axial_pass(x, af.AxialWeights.from_module(model).row, num_heads=model.num_heads, axis="col",
                          strict=True)
        finally:
            torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
def test_non_default_stream():
    model, dim = _gpu_model(seed=33, strict=True)
    x = rand_x((3, 40, 50, dim), torch.bfloat16, "cuda", seed=34)
    with torch.inference_mode():
        want = model(x)
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            torch.full_like(x, float("nan"))  # poison a free block of the side stream (freed at once)
            torch.cuda._sleep(50_000_000)  # the copy below lands late; a launch on the wrong stream
            xs = x.clone()                 # would read xs before it (NaN) and race
            got = model(xs)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
    assert torch.equal(got, want)


@pytest.mark.gpu
def test_device_guard():
    """The kernel runs on x's device whatever the current device is: x on the last GPU, current device
    0. With one GPU they coincide and this only checks an explicit cuda:0 tensor (the multi-GPU
    tests cover the rest)."""
    last = torch.cuda.device_count() - 1
    model, dim = _gpu_model(seed=35, strict=True)
    x = rand_x((2, 16, 24, dim), torch.bfloat16, "cuda:0", seed=36)
    with torch.inference_mode():
        want = model(x)
        model_last = model.to(f"cuda:{last}")
        with torch.cuda.device(0):  # current device 0; x (and the model) on the last device
            got = model_last(x.to(f"cuda:{last}"))
        assert got.device == torch.device(f"cuda:{last}")
        assert torch.equal(got.cpu(), want.cpu())


@pytest.mark.gpu
def test_autocast_bf16():
    """A float32 module under torch.autocast("cuda", bfloat16): the bf16 kernel runs (x and weights
    cast by the op's AutocastCUDA kernel), the output has the reference model's dtype under autocast
    (float32: its residual add promotes), and its error is the reference-under-autocast's order."""
    model, dim = _gpu_model("float32", seed=37, strict=True)
    ref = af.reference.AxialAttentionReference(dim, model.num_heads).cuda()
    ref.load_state_dict(model.state_dict())
    w64 = to64(af.AxialWeights.from_module(model))
    for x_dtype in (torch.float32, torch.bfloat16):
        x = rand_x((2, 24, 40, dim), x_dtype, "cuda", seed=38)
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
            with OpLog() as log:
                got = model(x)
            want = ref(x)
        assert got.dtype == want.dtype == x_dtype
        ours = [dts for f, dts in log.ops if f == OP.axial_attention.default]
        assert ours == [[torch.bfloat16] * 11], log.ops
        exact = attention64(x, w64)
        assert rel_err(got, exact) <= 2 * rel_err(want, exact) + FLOOR[torch.bfloat16]


@pytest.mark.gpu
def test_autograd_takes_reference_inference_takes_fused():
    model, dim = _gpu_model("float32", seed=39)
    ref = af.reference.AxialAttentionReference(dim, model.num_heads).cuda()
    ref.load_state_dict(model.state_dict())
    x = rand_x((2, 12, 16, dim), torch.float32, "cuda", seed=40).requires_grad_()
    F_._warned.clear()  # the warning is once per reason per process
    with pytest.warns(af.FusedFallbackWarning, match="gradients are required"):
        out = model(x)
    assert_same_grads(out, model, ref, x, 1e-5)
    model.strict = True
    for mode in (torch.no_grad, torch.inference_mode):
        with mode(), OpLog() as log:
            model(x)
        assert [f for f, _ in log.ops] == [OP.axial_attention.default]


