"""The version, in one place (setup.py reads this file; no imports beyond the standard library).

``__version__`` is the public release. A built wheel's distribution version adds a local tag naming
the CUDA major version it was compiled against, e.g. ``0.1.0+cu13``: the binding uses LibTorch's
stable ABI (one binary for every torch from 2.11 on) but links ``libcudart.so.N``, so a wheel serves
the torch builds of one CUDA major.
"""
__version__ = "0.1.0"


def torch_minor(torch_version: str) -> str:
    """'2.11.0+cu130' -> '2.11'."""
    return ".".join(torch_version.split("+")[0].split(".")[:2])


def cuda_major(cuda_version: str | None) -> str | None:
    """'13.0' -> '13'; None for a CPU-only torch."""
    return None if cuda_version is None else cuda_version.split(".")[0]


def local_tag(cuda_version: str | None) -> str:
    """The local version label for a build against this CUDA (``torch.version.cuda``, e.g. '13.0'):
    'cu13'; 'nocuda' for a build without the CUDA extension (AXIAL_FUSED_NO_CUDA=1)."""
    if cuda_version is None:
        return "nocuda"
    return "cu" + cuda_major(cuda_version)
