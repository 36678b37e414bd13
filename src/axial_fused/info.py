"""What this installation is: ``python -m axial_fused.info``.

Prints the package version; the torch, CUDA and Python the binary was built against and those running
now; the compiled archs and specializations; each GPU, its arch, and whether the fused path is
available on it, and if not, why. Paste its output into bug reports. Exits 0 whatever it finds.
"""
from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

import torch

from . import _ext
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


def main() -> int:
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
