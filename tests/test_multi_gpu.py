"""Two GPUs: the op on a device other than the current one, one thread per GPU, and mixed devices.
Skipped with fewer than 2 GPUs."""
from __future__ import annotations

import threading

import pytest
import torch

import axial_fused as af
from helpers import attention64, make_weights, rand_x, rel_err, small_spec, to64

pytestmark = pytest.mark.gpu(2)


def _spec():
    return small_spec("bfloat16")[1:]


def test_runs_on_the_inputs_device_and_stream():
    dim, heads = _spec()
    torch.cuda.set_device(0)
    w = make_weights(dim, heads, torch.bfloat16, "cuda:1", seed=1)
    x = rand_x((2, 40, 24, dim), torch.bfloat16, "cuda:1", seed=2)
    ref = attention64(x, to64(w))
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    before0 = torch.cuda.memory_allocated(0)
    side = torch.cuda.Stream(device=1)
    side.wait_stream(torch.cuda.current_stream(1))
    with torch.cuda.stream(side):  # makes `side` device 1's current stream (and device 1 current)
        with torch.inference_mode():
            out = af.axial_attention(x, w, strict=True)
        done = torch.cuda.Event()
        done.record(side)
    torch.cuda.set_device(0)
    done.synchronize()  # only the side stream's work is waited for: the kernels must have run on it
    assert out.device == torch.device("cuda:1")
    assert torch.cuda.memory_allocated(0) == before0, "something was allocated on cuda:0"
    assert rel_err(out, ref) < 2e-2
    # and with device 0 current while the inputs sit on device 1 (device guard)
    assert torch.cuda.current_device() == 0
    with torch.inference_mode():
        out2 = af.axial_attention(x, w, strict=True)
    torch.cuda.synchronize(1)
    assert torch.equal(out, out2)
    assert torch.cuda.memory_allocated(0) == before0


def test_one_thread_per_gpu():
    dim, heads = _spec()
    inputs, expected = [], []
    for dev in (0, 1):
        w = make_weights(dim, heads, torch.bfloat16, f"cuda:{dev}", seed=10 + dev)
        x = rand_x((2, 33, 65, dim), torch.bfloat16, f"cuda:{dev}", seed=20 + dev)
        with torch.inference_mode():
            expected.append(af.axial_attention(x, w, strict=True))
        inputs.append((x, w))
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    errors = []

    def loop(dev):
        try:
            torch.cuda.set_device(dev)
            x, w = inputs[dev]
            for _ in range(50):
                with torch.inference_mode():
                    y = af.axial_attention(x, w, strict=True)
                torch.cuda.synchronize(dev)
                if not torch.equal(y, expected[dev]):
                    errors.append(f"cuda:{dev}: result differs from its single-GPU result")
                    return
        except Exception as e:  # reported by the main thread
            errors.append(f"cuda:{dev}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=loop, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_inputs_and_weights_on_different_gpus_is_a_clear_error():
    dim, heads = _spec()
    w = make_weights(dim, heads, torch.bfloat16, "cuda:1")
    x = rand_x((1, 4, 4, dim), torch.bfloat16, "cuda:0", seed=3)
    with pytest.raises(ValueError, match=r"cuda:0.*cuda:1"):
        af.axial_attention(x, w)
    with pytest.raises(ValueError, match=r"cuda:0.*cuda:1"):
        af.axial_pass(x, w.row, num_heads=heads, axis="row")
