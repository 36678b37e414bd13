"""Run one benchmark shape a few times (for ncu / compute-sanitizer / the phase clocks):

    python scripts/dev/profile_pass.py SHAPE [PATH]

SHAPE: a suite name or B,H,W,D,heads[,dtype]; PATH: auto (default), fused, two_kernel or fused_sm90.
"""
import sys

import torch

import axial_fused as af
from axial_fused import bench

name = sys.argv[1]
path = af._ext.PATHS[sys.argv[2] if len(sys.argv) > 2 else "auto"]
B, H, W, D, heads, dt = bench.resolve_shape(name)
model, x = bench._make(B, H, W, D, heads, dt)
m = model.to("cuda", bench.DTYPES[dt])
x = x.to("cuda", bench.DTYPES[dt])
w = af.AxialWeights.from_module(m)
af._ext.C.set_path_override(path)
with torch.inference_mode():
    for _ in range(3):
        y = af.axial_attention(x, w, strict=True)
torch.cuda.synchronize()
print("ok", y.float().norm().item())
