"""One call of the pair-bias op at a protein block's size, for ncu (GPU machine, extension built):

    PYTHONPATH=src python scripts/dev/pair_bias_once.py [BLOCK]

BLOCK: msa_row_pair (default: z [1, 256, 256, 128], 8 heads) or tri_384 (z [1, 384, 384, 128], 4 heads).
"""
import sys

import torch

import axial_fused  # noqa: F401  (registers torch.ops.axial_fused)

SIZES = {"msa_row_pair": (256, 128, 8), "tri_384": (384, 128, 4)}

n, c, heads = SIZES[sys.argv[1] if len(sys.argv) > 1 else "msa_row_pair"]
g = torch.Generator(device="cuda").manual_seed(0)
z = torch.randn(1, n, n, c, device="cuda", dtype=torch.bfloat16, generator=g)
lw = 1 + 0.1 * torch.randn(c, device="cuda", dtype=torch.bfloat16, generator=g)
lb = 0.1 * torch.randn(c, device="cuda", dtype=torch.bfloat16, generator=g)
w = torch.randn(heads, c, device="cuda", dtype=torch.bfloat16, generator=g) / c**0.5
for _ in range(3):
    out = torch.ops.axial_fused.pair_bias(z, lw, lb, w, 1e-5)
torch.cuda.synchronize()
print(out.shape, out.float().abs().mean().item())
