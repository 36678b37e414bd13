"""The self-check: `python -m axial_fused`.

Checks the fused path against a float64 reference on a few shapes and times it against the PyTorch
peers on the benchmark suite (eager, sdpa, CUDA-graph replay). Without a GPU it says so and exits 0.
"""
import sys

import torch


def main() -> int:
    import axial_fused as af
    print(f"axial_fused {af.__version__}, torch {torch.__version__}")
    if af._ext.C is None:
        print(f"CUDA extension: not available ({af._ext.error}); only the PyTorch reference path works")
    else:
        print(f"CUDA extension: built for archs {af._ext.C.compiled_archs()}, specializations {af._ext.describe_specs()}")
    if not torch.cuda.is_available():
        print("No CUDA GPU here: nothing to check or time. (The reference path runs on the CPU.)")
        return 0
    if af._ext.C is None:
        return 1
    from . import bench
    from .functional import fallback_reason
    print(f"GPU: {torch.cuda.get_device_name()}")
    # correctness: fused vs float64 on small shapes, every compiled dtype of the smallest dim
    for dt, d, h in sorted(af._ext.specs()):
        if d > 256:
            continue
        model, x = bench._make(2, 24, 40, d, h, dt)
        dtype = bench.DTYPES[dt]
        with torch.inference_mode():  # the fused path is inference-only
            ref = model.double()(x.double())
            m = model.to("cuda", dtype)
            xc = x.to("cuda", dtype)
            w = af.AxialWeights.from_module(m)
            reason = fallback_reason(xc, w)
            if reason:
                print(f"  check {dt:>9} dim {d:>4} heads {h:>2}: skipped, fused path unavailable: {reason}")
                continue
            out = af.axial_attention(xc, w, strict=True).double().cpu()
        err = ((out - ref).norm() / ref.norm()).item()
        print(f"  check {dt:>9} dim {d:>4} heads {h:>2}: rel err vs float64 {err:.2e}"
              + ("" if err < (2e-2 if dtype != torch.float32 else 2e-3) else "  <-- LARGER THAN EXPECTED"))
    peers = ["eager", "sdpa", "graph", "fused", "fused_graph"]
    ceil = bench.measure_ceilings()
    rows = []
    for name, (B, H, W, D, heads, dt) in bench.SUITE.items():
        if (dt, D, heads) in af._ext.specs():
            rows.append(bench.bench_shape(name, B, H, W, D, heads, dt, peers, ceil))
    bench.print_table(rows, peers)
    print("Full benchmark (torch.compile peers too): python -m axial_fused.bench")
    return 0


if __name__ == "__main__":
    sys.exit(main())
