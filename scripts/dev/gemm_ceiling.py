"""What cuBLAS reaches on our kernels' matrix products, for reference (not a peer of the benchmark):

    python3 scripts/dev/gemm_ceiling.py [SHAPE ...]

For each benchmark shape, times torch.matmul (cuBLAS, bf16) on the QKV product [N, D] x [D, 3D], the
same with the gate's block [N, D] x [D, 4D], and the output projection [N, D] x [D, D] of one pass
(N = B*H*W tokens), on random data, and prints microseconds and TFLOP/s: the rate our K1 /
out-projection could aim for with an ordinary GEMM. Then K1's work done unfused: the LayerNorm
alone, by PyTorch's kernel and by torch.compile's (a Triton kernel near the copy rate), and each
followed by the QKV products (what K1 competes with). Times as the benchmark's (bench._time_batches).
"""
import sys

import torch

import devkit
from devkit import bench

time_us = bench._time_batches


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("gemm_ceiling: no CUDA device")
    for name in sys.argv[1:] or ["msa", "esm", "latent"]:
        B, H, W, D, heads, dt = bench.resolve_shape(name)
        n = B * H * W
        dtype = bench.DTYPES[dt]
        x = torch.randn(n, D, device="cuda", dtype=dtype)
        for label, cols in (("qkv", 3 * D), ("qkv+gate", 4 * D), ("out", D)):
            w = torch.randn(cols, D, device="cuda", dtype=dtype) / D**0.5
            us = time_us(lambda: torch.matmul(x, w.t()))
            print(f"{name} {label} [{n}, {D}] x [{D}, {cols}]: {us:.1f} us, {2 * n * D * cols / us / 1e6:.0f} TFLOP/s")
        gamma, beta = 1 + torch.rand(D, device="cuda", dtype=dtype), torch.rand(D, device="cuda", dtype=dtype)
        eager_ln = lambda: torch.nn.functional.layer_norm(x, (D,), gamma, beta)
        for how, ln in (("eager", eager_ln), ("compiled", torch.compile(eager_ln))):
            print(f"{name} layernorm ({how}) [{n}, {D}]: {time_us(ln):.1f} us")
            for label, cols in (("qkv", 3 * D), ("qkv+gate", 4 * D)):
                w = torch.randn(cols, D, device="cuda", dtype=dtype) / D**0.5
                us = time_us(lambda: torch.matmul(ln(), w.t()))
                print(f"{name} layernorm ({how}) then {label}: {us:.1f} us")


if __name__ == "__main__":
    main()
