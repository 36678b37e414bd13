"""What this installation is: ``python -m axial_fused.info``.

Prints the package version; the torch, CUDA and Python the binary was built against and those running
now; the compiled archs and specializations; each GPU, its arch, and whether the fused path is
available on it, and if not, why. Paste its output into bug reports. Exits 0 whatever it finds.

    python -m axial_fused.info --tiles          # the tuning row each kernel of each specialization gets
    python -m axial_fused.info --plan bf16:256x8 2,128,128 [--mask] [--bias] [--gate] [--device h100]
                                                # the kernels each pass of a call runs (no GPU needed)
"""
from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

import torch

from . import _ext, _specs
from ._checks import DTYPE_NAMES
from ._version import __version__, cuda_major


def _distribution_version() -> str:
    """The installed distribution's version (with its local tag), if it is the one imported."""
    here = os.path.dirname(os.path.abspath(_ext.__file__))
    try:
        dist = metadata.distribution("axial-fused")
    except metadata.PackageNotFoundError:
        return "none: imported from a source tree"
    installed = os.path.dirname(os.path.abspath(dist.locate_file("axial_fused/__init__.py")))
    if installed != here:  # e.g. PYTHONPATH=src while an older install sits in site-packages
        return f"none: imported from a source tree, while axial-fused {dist.version} is installed at {installed}"
    return dist.version


def _built_against() -> str:
    bi = _ext.build_info
    if bi is None:
        return "unknown (no build record: an old or missing build)"
    if bi.no_cuda:
        return f"no CUDA extension (built with AXIAL_FUSED_NO_CUDA=1), Python {bi.python_version}"
    text = (f"torch {bi.torch_version}, CUDA {bi.cuda_version}, Python {bi.python_version}; runs under torch >= "
            f"{_ext.floor()} of CUDA {cuda_major(bi.cuda_version)}.x, Python >= 3.10 (stable ABI, abi3)")
    if _ext.C is not None:
        torch_v, cudart = _ext.C.build_info()
        text += f" (the binary itself reports torch {torch_v}, CUDA runtime {cudart // 1000}.{cudart % 1000 // 10})"
    return text


def _gpu_lines() -> list[str]:
    if not torch.cuda.is_available():
        why = "torch is a CPU-only build" if torch.version.cuda is None else "no CUDA GPU is visible"
        return [f"GPU: none ({why}): the fused path needs a CUDA GPU; the reference path runs on the CPU"]
    lines = []
    for idx in range(torch.cuda.device_count()):
        name = torch.cuda.get_device_name(idx)
        major, minor = torch.cuda.get_device_capability(idx)
        if _ext.C is None:
            status = f"unavailable: {_ext.error}"
        else:
            err = _ext.C.device_kernel_error(idx)
            archs = _ext.C.compiled_archs()
            if err:
                status = f"unavailable: {_ext.arch_message(name, (major, minor), archs, err)}"
            elif _ext.runs_from_ptx((major, minor), archs):
                status = "available (the mma.sync kernels, JIT-compiled from the binary's PTX on first use)"
            else:
                status = "available"
        lines.append(f"GPU {idx}: {name} (sm_{major}{minor}); fused path {status}")
    return lines


def report() -> str:
    """The whole report as text."""
    running_cuda = torch.version.cuda or "none (CPU-only torch)"
    lines = [
        f"axial_fused {__version__} (distribution: {_distribution_version()}) at {os.path.dirname(_ext.__file__)}",
        f"running:        torch {torch.__version__}, CUDA {running_cuda}, Python {platform.python_version()}",
        f"built against:  {_built_against()}",
    ]
    if _ext.C is None:
        lines.append(f"CUDA extension: not available: {_ext.error}")
    else:
        lines.append(f"CUDA extension: {_ext.C.__file__}")
        lines.append(f"compiled archs: {_ext.C.compiled_archs()}")
        lines.append(f"specializations ({_ext.C.specs_option()}): {_ext.describe_specs()}")
    return "\n".join(lines + _gpu_lines())


def tiles() -> str:
    """Every compiled specialization's tuning rows (include/axial_fused/*/tile_size.h)."""
    if _ext.C is None:
        return f"no CUDA extension: {_ext.error}"
    out = []
    for dt, d, h in _ext.C.compiled_specs():  # (by dim, heads, dtype)
        out.append(f"{dt} dim {d} heads {h}:")
        out += [f"  {row}" for row in _ext.C.tiles(dt, d, h).splitlines()]
    return "\n".join(out)


# The dtype of --plan's SPEC, by its name or the short one of AXIAL_FUSED_SPECS (bf16, ...).
_DTYPES = {name: dt for dt, name in DTYPE_NAMES.items()} | dict(zip(_specs.DTYPES, DTYPE_NAMES))


def plans(spec: str, shape: str, device: str | None, mask: bool, bias: bool, gate: bool) -> str:
    """The row and column plans of a call: spec DTYPE:DIMxHEADS, shape B,H,W."""
    from .plan import plan_pass

    try:
        dt, _, pair = spec.partition(":")
        dim, heads = (int(v) for v in pair.lower().split("x"))
        B, H, W = (int(v) for v in shape.split(","))
        dtype = _DTYPES[dt.lower()]
    except (ValueError, KeyError):
        raise SystemExit(f"--plan: expected DTYPE:DIMxHEADS B,H,W (e.g. bf16:256x8 2,128,128); got {spec!r} {shape!r}")
    dev = device or ("cuda" if torch.cuda.is_available() else "h100")
    lines = [f"{dt}:{dim}x{heads}, x [{B}, {H}, {W}, {dim}], on {dev}:"]
    for axis, num_seq, length in (("row", B * H, W), ("col", B * W, H)):
        try:
            p = plan_pass(dtype, dim, heads, num_seq, length, dev, gated=gate, mask=mask, bias=bias)
        except (ValueError, TypeError, RuntimeError) as e:
            raise SystemExit(f"--plan: {e}") from None
        lines.append(f"  {axis}: {p}")
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m axial_fused.info", description=__doc__.split("\n")[0])
    ap.add_argument("--tiles", action="store_true", help="the tuning rows of every compiled specialization")
    ap.add_argument("--plan", nargs=2, metavar=("SPEC", "SHAPE"),
                    help="the kernels of a call: DTYPE:DIMxHEADS and B,H,W (e.g. bf16:256x8 2,128,128)")
    ap.add_argument("--device", help="with --plan: h100, h200, a100 or l40s (default: this GPU, else h100)")
    ap.add_argument("--mask", action="store_true", help="with --plan: a key mask")
    ap.add_argument("--bias", action="store_true", help="with --plan: a logit bias")
    ap.add_argument("--gate", action="store_true", help="with --plan: the sigmoid gate")
    args = ap.parse_args(argv)
    if args.tiles:
        print(tiles())
    elif args.plan:
        print(plans(*args.plan, args.device, args.mask, args.bias, args.gate))
    else:
        print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
