"""The tests' markers and shared fixtures.

Markers, each a skip rule applied here:
  gpu        needs a CUDA device and the compiled extension; gpu(2): two CUDA devices
  hopper     needs sm_90a code in the binary and a compute capability 9.0 GPU (the Hopper kernels)
  needs_ext  needs the compiled extension (CPU tests of the registered operators)
Fixture: fused_on_cpu, the fused branch of the Python API taken on the CPU with stand-in kernels.

AXIAL_FUSED_TEST_TIMES=PATH: each test's duration appended to PATH as it finishes ("seconds nodeid"), so
that a run stopped by a time limit still says where its time went.
"""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

import axial_fused as af  # noqa: E402
from axial_fused import _ext, _ops  # noqa: E402
from axial_fused import functional as F_  # noqa: E402
from helpers import gpus, hopper_ready  # noqa: E402

_TIMES = os.environ.get("AXIAL_FUSED_TEST_TIMES")


def pytest_configure(config):
    config.addinivalue_line("markers", "hopper: needs sm_90a code in the binary and a compute capability 9.0 GPU")
    config.addinivalue_line("markers", "needs_ext: needs the compiled extension")


def pytest_collection_modifyitems(config, items):
    have, hopper = gpus(), hopper_ready()
    for item in items:
        gpu = item.get_closest_marker("gpu")
        need = gpu.args[0] if gpu is not None and gpu.args else 1
        if gpu is not None and have < need:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device and the compiled extension" if need == 1
                                             else f"needs {need} CUDA devices and the compiled extension"))
        if item.get_closest_marker("hopper") is not None and not hopper:
            item.add_marker(pytest.mark.skip(reason="needs sm_90a code on a 9.0 GPU"))
        if item.get_closest_marker("needs_ext") is not None and _ext.C is None:
            item.add_marker(pytest.mark.skip(reason=f"extension not built: {_ext.error}"))


def pytest_runtest_logreport(report):
    if _TIMES and (report.when == "call" or (report.when == "setup" and report.skipped)):
        with open(_TIMES, "a") as f:
            f.write(f"{report.duration:.2f} {report.nodeid}\n")


# ---- the fused branch on the CPU ------------------------------------------------------------------

def _reference_pass(x, weights, heads, axis, eps, mask, bias, residual):
    """One pass by the reference, its 9 weights in _checks.FIELDS' order, contiguous as the CUDA kernel's output."""
    nw, nb, qkv, ow, ob, qb, gw, gb, bw = weights
    return af.reference.reference_pass(x, nw, nb, qkv, ow, ob, qb, gw, gb, bw, num_heads=heads,
                                       axis="row" if axis == 0 else "col", eps=eps, mask=mask, bias=bias,
                                       residual=residual).contiguous()


def _stand_in(op_name):
    """CPU kernel for axial_pass / axial_attention in these tests: the reference, pass by pass, the
    operator's arguments read by their schema names."""
    op = getattr(torch.ops.axial_fused, op_name).default

    def kernel(*args, **kwargs):
        a = _ops._bind(op, args, kwargs)
        y = a["x"]
        for _, axis, weights, bias in _ops._passes(a):
            y = _reference_pass(y, weights, a["num_heads"], axis, a["eps"], a["mask"], bias, a["residual"])
        return y
    return kernel


def _reason_fused_on_cpu(x, passes, dim, num_heads, biases=()):
    """The decision with the CPU standing in for a GPU: fused unless gradients are required."""
    if torch.is_grad_enabled() and (x.requires_grad or any(t is not None and t.requires_grad
                                                           for ts in (*passes, biases) for t in ts)):
        return "gradients are required"
    return None


@pytest.fixture
def fused_on_cpu(monkeypatch):
    """CPU calls take the fused branch (the ops, with the stand-in kernels) for the test's duration."""
    if _ext.C is None:
        pytest.skip(f"extension not built: {_ext.error}")
    monkeypatch.setattr(F_, "_reason", _reason_fused_on_cpu)
    with torch.library._scoped_library("axial_fused", "IMPL") as lib:
        lib.impl("axial_pass", _stand_in("axial_pass"), "CPU")
        lib.impl("axial_attention", _stand_in("axial_attention"), "CPU")
        yield
