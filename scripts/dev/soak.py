"""Soak: many calls in a row, no error and no growth in allocated GPU memory.

    python3 scripts/dev/soak.py                     # 100,000 calls at seed (4,32,32,64,4) bf16, 1,000 at msa (1,512,256,256,8) bf16
    python3 scripts/dev/soak.py --seed-calls 1000 --msa-calls 10   # quick

After two warm-up calls, torch.cuda.memory_allocated() is sampled every `--every` calls and must never
exceed its value after the warm-up (outputs are dropped each call, so the caching allocator reuses
the same blocks). The last output must equal the first bit for bit. Exit status 1 on any failure.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

import devkit
from devkit import af

SHAPES = {"seed": ((4, 32, 32, 64), 4), "msa": ((1, 512, 256, 256), 8)}


def weights(dim: int, heads: int) -> af.AxialWeights:
    g = torch.Generator().manual_seed(dim)
    r = lambda *s, scale=1.0, shift=0.0: (torch.randn(*s, generator=g) * scale + shift).to("cuda", torch.bfloat16)
    pw = lambda: af.PassWeights(r(dim, scale=0.3, shift=1.0), r(dim, scale=0.3), r(3 * dim, dim, scale=dim ** -0.5),
                                r(dim, dim, scale=dim ** -0.5), r(dim, scale=0.5))
    return af.AxialWeights.create(pw(), pw(), heads)


def soak(name: str, calls: int, every: int) -> bool:
    shape, heads = SHAPES[name]
    w = weights(shape[-1], heads)
    if (torch.bfloat16, shape[-1], heads) not in {(c.dtype, c.dim, c.heads) for c in af.supported_configs()}:
        print(f"soak {name}: SKIPPED, (dim {shape[-1]}, heads {heads}) bf16 not compiled")
        return True
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        first = af.axial_attention(x, w, strict=True)
        out = af.axial_attention(x, w, strict=True)  # warm-up: `first` and one live `out` are the baseline
        torch.cuda.synchronize()
        base, peak, t0 = torch.cuda.memory_allocated(), 0, time.time()
        for i in range(2, calls + 1):
            out = af.axial_attention(x, w, strict=True)
            if i % every == 0 or i == calls:
                torch.cuda.synchronize()
                peak = max(peak, torch.cuda.memory_allocated())
                if peak > base:
                    print(f"soak {name}: FAIL, allocated memory grew from {base} to {peak} bytes by call {i}")
                    return False
        torch.cuda.synchronize()
    same = torch.equal(out, first)
    print(f"soak {name} {tuple(shape)} heads {heads} bf16: {calls} calls in {time.time() - t0:.1f} s, allocated "
          f"{base} bytes before and {torch.cuda.memory_allocated()} after (max sampled {peak}), "
          f"last output {'equals' if same else 'DIFFERS FROM'} the first: {'ok' if same else 'FAIL'}")
    return same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed-calls", type=int, default=100_000)
    ap.add_argument("--msa-calls", type=int, default=1_000)
    ap.add_argument("--every", type=int, default=1000, help="sample memory every N calls")
    a = ap.parse_args()
    devkit.need_gpu("soak")
    ok = soak("seed", a.seed_calls, a.every)
    ok = soak("msa", a.msa_calls, max(1, min(a.every, a.msa_calls // 10))) and ok
    print(f"soak: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
