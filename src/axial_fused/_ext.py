"""Loading the compiled extension. The package imports without it (reference path only) and says why.

Why the binary may not load, and what the message (``error``) then says:
  * not built: a source tree without ``build_ext``, or a build with AXIAL_FUSED_NO_CUDA=1;
  * built for another torch: torch's C++ symbols change between minor releases, which shows up as
    "undefined symbol" at load. The build record (``_build_info.py``, written by setup.py) names the
    torch and CUDA the binary was built against, so a mismatch is caught before loading (a binary
    loaded against the wrong torch may crash instead of failing cleanly) and the message names both
    versions and the wheel to install;
  * built for another CUDA major: its ``libcudart.so.N`` is not the one this torch ships.
``strict=True`` calls raise ``error`` (see functional.py); ``python -m axial_fused.info`` prints it.
"""
from __future__ import annotations

import torch

from ._version import local_tag, torch_minor

try:
    from . import _build_info as build_info
except ImportError:  # a tree built before build records existed, or never built
    build_info = None

# The kernel paths C.set_path_override takes (tests, benchmarks and scripts force one by name):
# -1 the automatic choice; csrc's PassPath values otherwise.
PATHS = {"auto": -1, "fused": 0, "two_kernel": 1, "fused_sm90": 2}

# Load errors that mean "this binary belongs to another torch / CUDA".
_MISMATCH_MARKERS = ("undefined symbol", "libcudart", "libc10", "libtorch", "version `")


def running() -> str:
    return f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none: a CPU-only build'})"


def built_for() -> str | None:
    """'torch X (CUDA Y)' the binary was built against, or None when not recorded."""
    if build_info is None or build_info.torch_version is None:
        return None
    return f"torch {build_info.torch_version} (CUDA {build_info.cuda_version})"


def what_to_install() -> str:
    """The advice for this environment: which wheel, or how to build from source."""
    if torch.version.cuda is None:
        return ("a CUDA build of torch (this one is CPU-only), then the axial-fused wheel built for it; "
                "the reference path runs meanwhile")
    tag = local_tag(torch.__version__, torch.version.cuda)
    return (f"the axial-fused wheel built for this torch (version tag +{tag}), or build from source against it: "
            f"pip install --no-build-isolation --force-reinstall --no-deps axial-fused")


def _same_torch() -> bool:
    return (build_info is not None and build_info.torch_version is not None
            and torch_minor(build_info.torch_version) == torch_minor(torch.__version__)
            and build_info.cuda_version.split(".")[0] == (torch.version.cuda or "none").split(".")[0])


def mismatch_message(detail: str) -> str:
    built = built_for()
    if built is None:
        head = f"axial_fused._C does not load under the running {running()}; it was likely built for another torch"
    elif _same_torch():
        head = (f"axial_fused._C was built for {built}, which matches the running torch, yet does not load: "
                f"the build is incomplete or a library it links is missing")
    else:
        head = f"axial_fused._C was built for {built} but {running()} is running"
    return f"{head} ({detail}). Install {what_to_install()}"


def _preflight() -> str | None:
    """A reason not to load the binary at all, from the build record; None to go ahead."""
    bi = build_info
    if bi is None:
        return None
    if bi.no_cuda:
        return ("this axial-fused was built without the CUDA extension (AXIAL_FUSED_NO_CUDA=1): only the "
                f"reference path works. Install {what_to_install()}")
    if not _same_torch():
        return mismatch_message("a binary extension only loads under the torch minor release and the CUDA "
                                "major version it was compiled against")
    return None


def _describe_import_error(e: ImportError) -> str:
    text = f"{type(e).__name__}: {e}"
    if any(m in str(e) for m in _MISMATCH_MARKERS):
        return mismatch_message(text)
    if isinstance(e, ModuleNotFoundError) and e.name == __package__ + "._C":
        return (f"{text}: the CUDA extension was not built. Install a prebuilt wheel or build from source "
                f"(README.md, install section)")
    return text


def _load():
    """(the extension module or None, None or why it is unavailable)."""
    reason = _preflight()
    if reason:
        return None, reason
    try:
        from . import _C  # registers torch.ops.axial_fused.* as a side effect
    except ImportError as e:
        return None, _describe_import_error(e)
    return _C, None


C, error = _load()

# Read once at import: the per-call decision (and torch.compile, which cannot trace into the
# pybind11 extension) then only looks the set up.
_specs: frozenset = frozenset(tuple(s) for s in C.compiled_specs()) if C is not None else frozenset()


def specs() -> frozenset:
    """{(dtype name, dim, heads)} compiled into the extension (empty without it)."""
    return _specs


def describe_specs() -> str:
    by_pair: dict[tuple[int, int], list[str]] = {}
    for dt, d, h in specs():
        by_pair.setdefault((d, h), []).append(dt)
    return ", ".join(f"{d}x{h} ({'/'.join(sorted(v))})" for (d, h), v in sorted(by_pair.items())) or "none"


def arch_message(gpu: str, capability: tuple[int, int], compiled: str, detail: str) -> str:
    """Why the binary (built for the archs ``compiled``) cannot run on this GPU, and what to install."""
    arch = f"{capability[0]}{capability[1]}"
    return (f"GPU {gpu} (sm_{arch}) is not among the archs this binary was built for ({compiled}): "
            f"{detail}. Install a wheel built for sm_{arch}, or build from source with AXIAL_FUSED_ARCHS "
            f"including {arch} (e.g. AXIAL_FUSED_ARCHS=\"{arch}\" pip install --no-build-isolation axial-fused)")
