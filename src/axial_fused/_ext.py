"""Loading the compiled extension. The package imports without it (reference path only) and says why.

The binary uses LibTorch's stable ABI only (built with TORCH_TARGET_VERSION = 2.11) and Python's
limited API: it runs under every torch from 2.11 on and every Python from 3.10 on, with the CUDA
major version it was built against. Why it may not load, and what the message (``error``) then says:
  * not built: a source tree without ``build_ext``, or a build with AXIAL_FUSED_NO_CUDA=1;
  * a torch older than 2.11 (its libtorch lacks the stable-ABI functions the binary calls), or a
    torch of another CUDA major (the binary links ``libcudart.so.N``): the build record
    (``_build_info.py``, written by setup.py) names the CUDA it was built against, so a mismatch is
    caught before loading and the message names both and the wheel to install.
``strict=True`` calls raise ``error`` (see functional.py); ``python -m axial_fused.info`` prints it.

``C`` is the binary's C interface (``axial_fused_*`` functions, read through ctypes): the compiled
specializations, the planner and device facts. The operators (``torch.ops.axial_fused.*``) register
themselves when the library loads; their Python kernels are ``_ops.py``'s.
"""
from __future__ import annotations

import ctypes

import torch

from ._version import cuda_major, local_tag, torch_minor

try:
    from . import _build_info as build_info
except ImportError:  # a tree built before build records existed, or never built
    build_info = None

# The kernel paths C.set_path_override takes (tests, benchmarks and scripts force one by name):
# -1 the automatic choice; csrc's PassPath values otherwise.
PATHS = {"auto": -1, "fused": 0, "two_kernel": 1, "fused_sm90": 2}

# Load errors that mean "this binary belongs to another torch / CUDA".
_MISMATCH_MARKERS = ("undefined symbol", "libcudart", "libc10", "libtorch", "version `")
# The oldest torch a binary runs under when its record does not say (a build before records had it).
_DEFAULT_FLOOR = "2.11"


def running() -> str:
    return f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none: a CPU-only build'})"


def built_for() -> str | None:
    """'torch X (CUDA Y)' the binary was built against, or None when not recorded."""
    if build_info is None or build_info.torch_version is None:
        return None
    return f"torch {build_info.torch_version} (CUDA {build_info.cuda_version})"


def floor() -> str:
    """The oldest torch (major.minor) the binary runs under."""
    return getattr(build_info, "torch_floor", None) or _DEFAULT_FLOOR


def _minor_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(v) for v in torch_minor(version).split(".") if v.isdigit())


def what_to_install() -> str:
    """The advice for this environment: which wheel, or how to build from source."""
    if torch.version.cuda is None:
        return ("a CUDA build of torch (this one is CPU-only), then the axial-fused wheel of its CUDA major "
                "version; the reference path runs meanwhile")
    if _minor_tuple(torch.__version__) < _minor_tuple(floor()):
        return (f"torch >= {floor()} (this is {torch.__version__}), then the axial-fused wheel of its CUDA major "
                f"version")
    tag = local_tag(torch.version.cuda)
    return (f"the axial-fused wheel for CUDA {cuda_major(torch.version.cuda)} (version tag +{tag}), or build from "
            f"source against this torch: pip install --no-build-isolation --force-reinstall --no-deps axial-fused")


def _same_torch() -> bool:
    """Whether the running torch is one the binary serves: at least its floor, of its CUDA major."""
    return (build_info is not None and build_info.torch_version is not None
            and _minor_tuple(torch.__version__) >= _minor_tuple(floor())
            and cuda_major(build_info.cuda_version) == cuda_major(torch.version.cuda))


def mismatch_message(detail: str) -> str:
    built = built_for()
    if built is None:
        head = f"axial_fused._C does not load under the running {running()}; it was likely built for another torch"
    elif _same_torch():
        head = (f"axial_fused._C was built for {built}, which serves the running torch, yet does not load: "
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
        return mismatch_message(f"the binary runs under torch >= {floor()} of the CUDA major version it was "
                                f"compiled against")
    return None


def _describe_import_error(e: ImportError) -> str:
    text = f"{type(e).__name__}: {e}"
    if any(m in str(e) for m in _MISMATCH_MARKERS):
        return mismatch_message(text)
    if isinstance(e, ModuleNotFoundError) and e.name == __package__ + "._C":
        return (f"{text}: the CUDA extension was not built. Install a prebuilt wheel or build from source "
                f"(README.md, install section)")
    return text


class Binary:
    """The binary's C interface (its ``axial_fused_*`` functions, through ctypes)."""

    _ERR = 1024

    def __init__(self, module):
        self.__file__ = module.__file__
        lib = ctypes.CDLL(module.__file__)  # the library the import loaded (one handle)
        c_int, c_str, c_buf = ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p
        for name in ("compiled_specs", "specs_option", "compiled_archs", "torch_version"):
            getattr(lib, f"axial_fused_{name}").restype = c_str
        lib.axial_fused_cudart_version.restype = c_int
        lib.axial_fused_device_kernel_error.argtypes = [c_int, c_buf, c_int]
        lib.axial_fused_set_path_override.argtypes = [c_int]
        lib.axial_fused_plan.argtypes = [c_str, c_int, c_int, ctypes.c_int64, c_int, c_int, c_int, c_int, c_int,
                                         c_int, c_int, c_buf, c_int, c_buf, c_int]
        lib.axial_fused_tiles.argtypes = [c_str, c_int, c_int]
        lib.axial_fused_tiles.restype = ctypes.c_char_p
        lib.axial_fused_device_smem_optin.argtypes = [c_int, c_buf, c_int]
        lib.axial_fused_fits_device.argtypes = [c_str, c_int, c_int, c_int, c_buf, c_int]
        self._lib = lib

    def _text(self, name: str) -> str:
        return getattr(self._lib, f"axial_fused_{name}")().decode()

    def compiled_specs(self) -> list[tuple[str, int, int]]:
        """(dtype, dim, heads) of every compiled specialization."""
        return [(dt, int(d), int(h)) for dt, d, h in (s.split(":") for s in self._text("compiled_specs").split(";") if s)]

    def specs_option(self) -> str:
        """AXIAL_FUSED_SPECS at build time."""
        return self._text("specs_option")

    def compiled_archs(self) -> str:
        """The arch list this binary was built for ("80+PTX;90a": sm_80 and sm_90a code, compute_80 PTX)."""
        return self._text("compiled_archs")

    def build_info(self) -> tuple[str, int]:
        """(torch version, CUDA runtime version) at build time."""
        return self._text("torch_version"), int(self._lib.axial_fused_cudart_version())

    def device_kernel_error(self, device: int) -> str:
        """"" when this binary holds code GPU `device` can run, else CUDA's reason."""
        buf = ctypes.create_string_buffer(self._ERR)
        self._lib.axial_fused_device_kernel_error(device, buf, self._ERR)
        return buf.value.decode()

    def set_path_override(self, path: int) -> None:
        """Force a path for tests and benchmarks: -1 automatic, 0 fused, 1 two-kernel, 2 Hopper fused."""
        self._lib.axial_fused_set_path_override(path)

    def plan(self, dtype: str, dim: int, heads: int, num_seq: int, length: int, device: dict, *, tf32: bool = False,
             gated: bool = False, extras: bool = False, mask: bool = False, bias: bool = False,
             bias_from_ln: bool = False, tensor_maps: bool = True, forced: int = -1) -> str:
        """The planner's plan (plan_text: "path=... prep=... k1=... attn=... proj=...") for a pass of num_seq
        sequences of `length` tokens with the given features on a device described by `device` (arch,
        sm90a, sms, smem_optin); forced: -1 automatic, else a path, as set_path_override. No GPU needed."""
        flags = (1 * tf32) | (2 * gated) | (4 * extras) | (8 * mask) | (16 * bias) | (32 * bias_from_ln) | \
            (64 * (not tensor_maps))
        out, err = ctypes.create_string_buffer(1024), ctypes.create_string_buffer(self._ERR)
        rc = self._lib.axial_fused_plan(dtype.encode(), dim, heads, num_seq, length, flags, device["arch"],
                                        int(device["sm90a"]), device["sms"], device["smem_optin"], forced, out, 1024,
                                        err, self._ERR)
        if rc:
            raise (ValueError if rc == 1 else RuntimeError)(err.value.decode())
        return out.value.decode()

    def tiles(self, dtype: str, dim: int, heads: int) -> str:
        """The tuning rows (tile sizes, stages, blocks an SM) each kernel of a compiled specialization gets."""
        return self._lib.axial_fused_tiles(dtype.encode(), dim, heads).decode()

    def device_smem_optin(self, device: int) -> int:
        """Bytes of shared memory a block may opt in to on GPU `device`."""
        buf = ctypes.create_string_buffer(self._ERR)
        n = self._lib.axial_fused_device_smem_optin(device, buf, self._ERR)
        if n < 0:
            raise RuntimeError(buf.value.decode())
        return n

    def fits_device(self, dtype: str, dim: int, heads: int, device: int) -> bool:
        """Whether the two-kernel path (the smaller) fits GPU `device`'s shared memory, in either fp32 mode."""
        buf = ctypes.create_string_buffer(self._ERR)
        r = self._lib.axial_fused_fits_device(dtype.encode(), dim, heads, device, buf, self._ERR)
        if r < 0:
            raise RuntimeError(buf.value.decode())
        return bool(r)


def _load():
    """(the binary's interface or None, None or why it is unavailable)."""
    reason = _preflight()
    if reason:
        return None, reason
    try:
        from . import _C  # registers the operators' schemas and CUDA kernels as a side effect
    except ImportError as e:
        return None, _describe_import_error(e)
    from . import _ops  # their fake, Autograd and AutocastCUDA kernels
    _ops.register()
    return Binary(_C), None


C, error = _load()

# Read once at import: the per-call decision (and torch.compile, which cannot trace a ctypes call)
# then only looks the set up.
_specs: frozenset = frozenset(C.compiled_specs()) if C is not None else frozenset()


def specs() -> frozenset:
    """{(dtype name, dim, heads)} compiled into the extension (empty without it)."""
    return _specs


def describe_specs() -> str:
    by_pair: dict[tuple[int, int], list[str]] = {}
    for dt, d, h in specs():
        by_pair.setdefault((d, h), []).append(dt)
    return ", ".join(f"{d}x{h} ({'/'.join(sorted(v))})" for (d, h), v in sorted(by_pair.items())) or "none"


def _sass_archs(compiled: str) -> list[str]:
    return [a.removesuffix("+PTX") for a in compiled.split(";") if a]


def ptx_archs(compiled: str) -> list[str]:
    """The archs whose PTX the binary holds ("80+PTX;90a" -> ["80"])."""
    return [a.removesuffix("+PTX") for a in compiled.split(";") if a.endswith("+PTX")]


def runs_from_ptx(capability: tuple[int, int], compiled: str) -> bool:
    """Whether a GPU of this compute capability runs the binary (built for the archs ``compiled``,
    e.g. "80+PTX;90a") from its PTX: no compiled SASS fits it (sm_XY code runs on sm_XZ, Z >= Y;
    sm_90a code on sm_90 only), so the driver JIT-compiles the PTX once (the mma.sync kernels)."""
    major, minor = capability
    for a in _sass_archs(compiled):
        if a.endswith("a") and a[:-1] == f"{major}{minor}":
            return False
        if not a.endswith("a") and int(a[:-1]) == major and int(a[-1]) <= minor:
            return False
    return bool(ptx_archs(compiled))


def arch_message(gpu: str, capability: tuple[int, int], compiled: str, detail: str) -> str:
    """Why the binary (built for the archs ``compiled``) cannot run on this GPU, and what to install."""
    arch = f"{capability[0]}{capability[1]}"
    ptx = ptx_archs(compiled)
    reach = (f"; its compute_{ptx[0]} PTX runs on sm_{ptx[0]} and newer GPUs only" if ptx else
             " and holds no PTX for newer GPUs")
    return (f"GPU {gpu} (sm_{arch}) is not among the archs this binary was built for ({compiled}){reach}: "
            f"{detail}. Install a wheel built for sm_{arch}, or build from source with AXIAL_FUSED_ARCHS "
            f"including {arch} (e.g. AXIAL_FUSED_ARCHS=\"{arch}\" pip install --no-build-isolation axial-fused)")
