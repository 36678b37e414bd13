"""One call of the pair-bias op at a protein block's size, for ncu (GPU machine, extension built):

    PYTHONPATH=src python scripts/dev/pair_bias_once.py [N_RES] [HEADS]

z [1, N_RES, N_RES, 128] in bfloat16 (default N_RES 256, HEADS 8: msa_row_pair's and extra_msa's
pair bias), LayerNorm and projection weights random.
"""
import sys

import torch

import axial_fused  # noqa: F401  (registers torch.ops.axial_fused)

n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
heads = int(sys.argv[2]) if len(sys.argv) > 2 else 8
c = 128
g = torch.Generator(device="cuda").manual_seed(0)
z = torch.randn(1, n, n, c, device="cuda", dtype=torch.bfloat16, generator=g)
lw = 1 + 0.1 * torch.randn(c, device="cuda", dtype=torch.bfloat16, generator=g)
lb = 0.1 * torch.randn(c, device="cuda", dtype=torch.bfloat16, generator=g)
w = torch.randn(heads, c, device="cuda", dtype=torch.bfloat16, generator=g) / c**0.5
for _ in range(3):
    out = torch.ops.axial_fused.pair_bias(z, lw, lb, w, 1e-5)
torch.cuda.synchronize()
print(out.shape, out.float().abs().mean().item())
