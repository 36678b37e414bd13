"""The binary's compute_80 PTX, JIT-compiled by the driver, on the GPU at hand (CUDA_FORCE_PTX_JIT=1).

GPUs newer than the compiled SASS (sm_89, sm_100, sm_120) run the mma.sync kernels from the binary's
compute_80 PTX. CUDA_FORCE_PTX_JIT=1 makes the driver ignore every SASS image and JIT-compile PTX
instead, so that path can be tested on any GPU. The variable reaches every module of the process,
torch's too, and torch ships SASS only: none of its kernels loads there, only allocation and copies
(cudaMemcpy) work. So the check runs in a child process (this file run as a script) that builds every
input, the float64 reference and PyTorch's own result at the dtype on the CPU, copies the inputs to
the GPU, poisons the allocator with NaN by a copy, runs the fused passes (strict=True: no fallback) on
each mma.sync path and the automatic choice (which must not pick a Hopper kernel) with every
feature, and copies the outputs back. It also checks that the variable
took effect for this binary: on sm_90 the planner sees the PTX compilation and refuses the Hopper fused
path, whose code exists only in the sm_90a SASS.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from axial_fused import _ext


def _skip_reason() -> str | None:
    if not torch.cuda.is_available() or _ext.C is None:
        return "needs a CUDA device and the compiled extension"
    ptx = _ext.ptx_archs(_ext.C.compiled_archs())
    if not ptx:
        return f"the binary holds no PTX (archs {_ext.C.compiled_archs()})"
    major, minor = torch.cuda.get_device_capability()
    if major * 10 + minor < int(ptx[0]):
        return f"compute_{ptx[0]} PTX does not run on sm_{major}{minor}"
    return None


_SKIP = _skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_SKIP is not None, reason=str(_SKIP))]


def test_kernels_run_from_the_binarys_ptx():
    env = dict(os.environ, CUDA_FORCE_PTX_JIT="1")
    r = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=1200)
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "all cases passed" in r.stdout


def _main() -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import axial_fused as af
    from axial_fused import cases
    from helpers import (attention64, force_path, make_bias, make_mask, make_weights, pass64, rand_x, rel_err,
                         small_specs, specs, tolerance, to64)

    assert os.environ.get("CUDA_FORCE_PTX_JIT") == "1", "run by test_kernels_run_from_the_binarys_ptx"
    try:  # informative: torch's kernels are SASS only, so none of them loads here
        (torch.ones(4, device="cuda") + 1).cpu()
        print("torch's own kernels run under CUDA_FORCE_PTX_JIT=1 (this torch ships PTX)")
    except RuntimeError as e:
        print(f"torch's own kernels under CUDA_FORCE_PTX_JIT=1: {str(e).splitlines()[0]}")

    def poison(nbytes: int) -> None:
        blocks = torch.full((max(nbytes // 4, 1),), float("nan")).to("cuda")
        torch.cuda.synchronize()
        del blocks

    def ungated(pw):
        return pw._replace(gate_weight=None, gate_bias=None)

    hd32 = specs(cases.hopper_fused_serves)
    failures, runs = [], 0
    for n, (dt_name, dim, heads) in enumerate(sorted(set(small_specs()) | set(hd32[:1]))):
        dtype = getattr(torch, dt_name)
        B, H, W = 2, 37, 29  # odd lengths: padded tails in every tile
        w = make_weights(dim, heads, dtype, "cpu", seed=n, qkv_bias=True, gate=True)
        w_gpu = af.AxialWeights(*(af.PassWeights(*(t.to("cuda") for t in p)) for p in (w.row, w.col)),
                                w.num_heads, w.eps)
        x = rand_x((B, H, W, dim), dtype, "cpu", seed=100 + n)
        mask = make_mask(B, H, W, "cpu", seed=200 + n)
        row_bias = make_bias(1, heads, W, "cpu", dtype, seed=300 + n)
        col_bias = make_bias(B, heads, H, "cpu", torch.float32, seed=400 + n)
        w64 = to64(w)
        calls = {  # name: (fused call on the GPU, float64 reference, PyTorch at the dtype)
            "row pass, mask + bias + gate + q/k/v bias, update only": (
                lambda xg, mg, rb, cb: af.axial_pass(xg, w_gpu.row, num_heads=heads, axis="row", eps=w.eps, mask=mg,
                                                     bias=rb, residual=False, strict=True),
                pass64(x, w64.row, heads, "row", w.eps, mask, row_bias, residual=False),
                af.reference.reference_pass(x, *w.row, num_heads=heads, axis="row", eps=w.eps, mask=mask,
                                            bias=row_bias, residual=False)),
            "row pass, mask + bias, no gate (at head_dim 32 the Hopper fused kernel's case on sm_90a)": (
                lambda xg, mg, rb, cb: af.axial_pass(xg, ungated(w_gpu.row), num_heads=heads, axis="row", eps=w.eps,
                                                     mask=mg, bias=rb, strict=True),
                pass64(x, ungated(w64.row), heads, "row", w.eps, mask, row_bias),
                af.reference.reference_pass(x, *ungated(w.row), num_heads=heads, axis="row", eps=w.eps, mask=mask,
                                            bias=row_bias)),
            "column pass through strides, mask + float32 bias + gate + q/k/v bias": (
                lambda xg, mg, rb, cb: af.axial_pass(xg, w_gpu.col, num_heads=heads, axis="col", eps=w.eps, mask=mg,
                                                     bias=cb, strict=True),
                pass64(x, w64.col, heads, "col", w.eps, mask, col_bias),
                af.reference.reference_pass(x, *w.col, num_heads=heads, axis="col", eps=w.eps, mask=mask,
                                            bias=col_bias)),
            "both passes, every feature": (
                lambda xg, mg, rb, cb: af.axial_attention(xg, w_gpu, mask=mg, row_bias=rb, col_bias=cb, strict=True),
                attention64(x, w64, mask, row_bias, col_bias),
                af.reference.reference_pass(
                    af.reference.reference_pass(x, *w.row, num_heads=heads, axis="row", eps=w.eps, mask=mask,
                                                bias=row_bias),
                    *w.col, num_heads=heads, axis="col", eps=w.eps, mask=mask, bias=col_bias)),
        }
        gpu_in = [t.to("cuda") for t in (x, mask, row_bias, col_bias)]
        for path in ("auto", "fused", "two_kernel"):
            for name, (call, ref, torch_out) in calls.items():
                poison(x.numel() * x.element_size() * 16)
                try:
                    with torch.inference_mode(), force_path(path):
                        out = call(*gpu_in).cpu()
                except RuntimeError as e:
                    if "do not fit in one block's shared memory" in str(e):
                        continue
                    failures.append(f"{dt_name} d{dim} h{heads}, {path}, {name}: {e}")
                    continue
                runs += 1
                err, torch_err = rel_err(out, ref), rel_err(torch_out, ref)
                tol = tolerance(dtype, torch_err)
                print(f"{'ok  ' if err <= tol else 'FAIL'} {dt_name} d{dim} h{heads}, {path}, {name}: "
                      f"error {err:.2e}, PyTorch's {torch_err:.2e}")
                if err > tol:
                    failures.append(f"{dt_name} d{dim} h{heads}, {path}, {name}: error {err:.2e} > {tol:.2e}")
        if (dt_name, dim, heads) in hd32 and torch.cuda.get_device_capability() == (9, 0):
            # where the sm_90a SASS would run the Hopper fused kernel, the PTX compilation refuses it
            try:
                with torch.inference_mode(), force_path("fused_sm90"):
                    af.axial_pass(gpu_in[0], ungated(w_gpu.row), num_heads=heads,
                                  axis="row", eps=w.eps, strict=True)
                failures.append(f"{dt_name} d{dim} h{heads}: the Hopper fused path ran from the PTX compilation")
            except RuntimeError as e:
                if "Hopper fused path was forced but needs sm_90a" not in str(e):
                    failures.append(f"{dt_name} d{dim} h{heads}, forced Hopper fused path: {e}")
                else:
                    print(f"ok   {dt_name} d{dim} h{heads}: the Hopper fused path is refused (PTX compilation)")
    if runs == 0:
        failures.append("no case ran")
    for f in failures:
        print("FAIL", f)
    if failures:
        return 1
    print(f"all cases passed ({runs} fused calls from the JIT-compiled compute_80 PTX)")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
