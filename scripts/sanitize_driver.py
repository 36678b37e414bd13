"""The workload scripts/sanitize.sh runs under compute-sanitizer: a handful of small calls that cover
every dtype (and both float32 modes), every head_dim of the compiled set, lengths 1 and 1024, lengths
that are not a multiple of the 64-token tile, packed short sequences, and both kernel paths; each
16-bit call again with every optional feature (mask, row and column bias, gate, q/k/v bias: the
prepared terms and the EXTRAS kernels), except under initcheck (SANITIZE_FEATURES=0).

Inputs are made on the CPU and copied (initcheck sees a copy as initialising memory; no PyTorch kernel
needs checking). No reference is computed here: correctness is the GPU tests' job; this run only has
to touch every code path once. Prints one line per call.
"""
from __future__ import annotations

import functools
import os
import sys

import torch

import axial_fused as af
from axial_fused import _ext, cases
from axial_fused.cases import DTYPES

# ((dim, heads), (B, H, W) shapes, paths): one (dim, heads) per compiled head_dim (8, 16, 24, 32, 64), each
# in every dtype compiled. dim 64: length 1 on both axes; 1024 (two-kernel) x 1 (1024 sequences of length
# 1, packed); 33 x 7 (not multiples of the 64-token tile) on the automatic, forced fused and forced
# two-kernel paths. dim 192: lengths 65 and 33 (the Hopper fused kernel's automatic range, 16-bit, on
# sm_90a), and 300 sequences of length 9 on the forced Hopper fused kernel (packed three to a block on 132
# SMs: the fewest a block that give the fewest waves, csrc/pass.cpp's sequences_per_block_waves). The
# others: lengths not a multiple of the tile; 300 (dim 192) and 150 (dim 768) run the Hopper attention
# kernel (two-kernel path, 16-bit, sm_90a) over several key tiles with a partial last one, at head_dim 32
# and 64. (256, 8): the head_dim-32 attention kernel at two blocks per SM (D % 128 == 0); (768, 12)
# forced onto the two-kernel path: the clustered LN+QKV kernel (D >= 512). (64, 8) and (384, 16):
# head_dim 8 and 24, the mma.sync attention with padded head tiles over several key tiles (in bfloat16
# with a mask alone, the mask on the tensor cores). Smaller builds run what they have.
PLAN = [
    ((64, 4), [(1, 1, 1), (1, 1024, 1)], ("auto",)),
    ((64, 4), [(2, 33, 7)], ("auto", "fused", "two_kernel")),
    ((192, 6), [(1, 33, 65), (1, 2, 300)], ("auto",)),
    ((192, 6), [(3, 100, 9)], ("auto", "fused_sm90")),
    ((256, 8), [(1, 3, 300)], ("auto",)),
    ((768, 12), [(1, 5, 70)], ("auto",)),
    ((768, 12), [(1, 3, 150)], ("auto", "two_kernel")),
    ((64, 8), [(1, 3, 300)], ("auto",)),
    ((384, 16), [(1, 2, 150)], ("auto",)),
]
FEATURES = os.environ.get("SANITIZE_FEATURES", "1") != "0"  # the calls with the optional features too


def plan(only: set) -> list[cases.Case]:
    """PLAN's cases for the compiled specializations (only: those (dim, heads), if any); the forced Hopper
    fused kernel only where the binary has sm_90a code for a 9.0 GPU."""
    hopper = torch.cuda.get_device_capability() == (9, 0) and "90a" in _ext.C.compiled_archs().split(";")
    compiled = _ext.specs()
    found = []
    for (dim, heads), shapes, paths in PLAN:
        if only and (dim, heads) not in only:
            continue
        specs = [(dt, dim, heads) for dt in DTYPES if (dt, dim, heads) in compiled]
        found += [c for c in cases.grid(specs, shapes, paths=paths) if c.path != "fused_sm90" or hopper]
    return found


@functools.lru_cache(maxsize=None)
def weights(dtype, dim, heads, extras=False):
    """Both passes' weights; extras: with q/k/v bias and the gate."""
    g = torch.Generator().manual_seed(dim + heads)
    # Every value is made on the CPU and copied: the kernel filter leaves PyTorch's kernels
    # uninstrumented, so initcheck would not see their writes (an add on the GPU would make the
    # LayerNorm weight look uninitialised).
    r = lambda *s, shift=0.0: (torch.randn(*s, generator=g) * dim ** -0.5 + shift).to(dtype).cuda()
    pw = lambda: af.PassWeights(r(dim, shift=1.0), r(dim), r(3 * dim, dim), r(dim, dim), r(dim),
                                *((r(3 * dim), r(dim, dim), r(dim)) if extras else ()))
    return af.AxialWeights.create(pw(), pw(), heads)


def features(x, heads, dtype):
    """The optional features for x [B, H, W, D], made on the CPU (as weights): a mask with a padded
    tail, a fully absent row and holes, a row bias of x's batch in x's dtype and a column bias of
    batch 1 in float32."""
    B, H, W, _ = x.shape
    g = torch.Generator().manual_seed(H * W)
    mask = torch.rand(B, H, W, generator=g) > 0.2
    mask[:, :, W - W // 4:] = False  # (the column pass's last columns: sequences with no key present)
    mask[:, H // 2, :] = False  # (a row pass's sequence with no key present)
    bias_row = (torch.randn(B, heads, W, W, generator=g) * 2).to(dtype).cuda()
    bias_col = (torch.randn(1, heads, H, H, generator=g) * 2).cuda()
    # (the mask as uint8, the layout the kernels read: no conversion on the GPU)
    return dict(mask=mask.to(torch.uint8).cuda(), row_bias=bias_row, col_bias=bias_col)


def main() -> int:
    calls = 0
    # SANITIZE_DIMS (e.g. "256x8,768x12"): only those (dim, heads) of the plan, for a quicker racecheck.
    only = {tuple(map(int, d.split("x"))) for d in os.environ.get("SANITIZE_DIMS", "").split(",") if d}
    for case in plan(only):
        dtype = DTYPES[case.dtype]
        w, wf = weights(dtype, case.dim, case.heads), weights(dtype, case.dim, case.heads, extras=True)
        x = torch.randn(*case.shape).to(dtype).cuda()
        for allow_tf32 in ((False, True) if dtype == torch.float32 else (False,)):
            torch.backends.cuda.matmul.allow_tf32 = allow_tf32
            _ext.C.set_path_override(_ext.PATHS[case.path])
            with torch.inference_mode():
                out = af.axial_attention(x, w, strict=True)
                # The optional features (mask, bias, gate, q/k/v bias) where the path takes them (the
                # Hopper fused kernel has no gate).
                with_features = FEATURES and dtype != torch.float32 and case.path != "fused_sm90"
                if with_features:
                    terms = features(x, case.heads, dtype)
                    out_f = af.axial_attention(x, wf, strict=True, **terms).cpu()
                    calls += 1
                    if dtype == torch.bfloat16:  # a mask alone: the tensor cores' mask
                        out_f = torch.cat([out_f, af.axial_attention(x, wf, strict=True, mask=terms["mask"]).cpu()])
                        calls += 1
            # Checked on a host copy: a GPU-side isfinite().all() is a PyTorch kernel that initcheck does
            # not see (the filter), so reading its result back looked like an uninitialised cudaMemcpy
            # source (one report per call). Copying `out` itself makes initcheck confirm that our kernels
            # wrote every element.
            host = out.cpu()
            calls += 1
            # The buffers' addresses, to match a report's "Address 0x..." with a tensor.
            print(f"{case.dtype} dim {case.dim} heads {case.heads} x {tuple(x.shape)} path {case.path} tf32 "
                  f"{allow_tf32}: finite {bool(torch.isfinite(host).all())}; x at {x.data_ptr():#x}, out at "
                  f"{out.data_ptr():#x}, row weights at "
                  f"{', '.join(f'{t.data_ptr():#x}' for t in w.row if t is not None)}"
                  + (f"; with the features: finite {bool(torch.isfinite(out_f).all())}" if with_features else ""),
                  flush=True)
    _ext.C.set_path_override(-1)
    print(f"sanitize driver: {calls} calls")
    return 0 if calls else 1


if __name__ == "__main__":
    sys.exit(main())
