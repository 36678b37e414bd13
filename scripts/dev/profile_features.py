"""Run one pass of the feature benchmark a few times (for ncu / compute-sanitizer / the phase clocks):

    PYTHONPATH=src python scripts/dev/profile_features.py SHAPE FEATURES AXIS

SHAPE: a suite name or B,H,W,D,heads[,dtype]; FEATURES: a bench.FEATURE_SETS name (plain, mask, bias,
gate, mask+bias+gate, ...); AXIS: row or col. Inputs as `python -m axial_fused.bench --features`.
"""
import sys

import torch

import axial_fused as af
from axial_fused import bench

shape, fname, axis = sys.argv[1], sys.argv[2], sys.argv[3]
B, H, W, D, heads, dt = bench.resolve_shape(shape)
x, pw, kw = bench.FeatureInputs(B, H, W, D, heads, bench.DTYPES[dt]).call(fname, axis)
with torch.inference_mode():
    for _ in range(3):
        y = af.axial_pass(x, pw, strict=True, **kw)
torch.cuda.synchronize()
print("ok", shape, fname, axis, y.float().norm().item())
