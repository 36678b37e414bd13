"""The version, in one place (setup.py reads this file; no imports beyond the standard library).

``__version__`` is the public release. A built wheel's distribution version adds a local tag naming
the CUDA and torch it was compiled against, e.g. ``0.1.0+cu130torch2.11`` (the convention of
flash-attn, NATTEN and pyg-lib): a binary extension only loads under the torch (major.minor) and
CUDA (major) it was built for, so the tag says which wheel fits which environment.
"""
__version__ = "0.1.0"


def torch_minor(torch_version: str) -> str:
    """'2.11.0+cu130' -> '2.11'."""
    return ".".join(torch_version.split("+")[0].split(".")[:2])


def local_tag(torch_version: str, cuda_version: str | None) -> str:
    """The local version label for a build against this torch and CUDA, e.g. 'cu130torch2.11'.

    ``cuda_version`` is ``torch.version.cuda`` ('13.0'); None for a build without the CUDA
    extension (AXIAL_FUSED_NO_CUDA=1), which is tagged 'nocuda'."""
    if cuda_version is None:
        return "nocuda"
    return "cu" + cuda_version.replace(".", "") + "torch" + torch_minor(torch_version)
