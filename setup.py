"""Build axial_fused: the Python package plus one CUDA extension (axial_fused._C).

Install-time options (environment variables):
  AXIAL_FUSED_SPECS    which (dtype, dim, heads) specializations to compile: default | minimal |
                       DIMxHEADS[:DTYPE],...   (src/axial_fused/_specs.py documents them)
  AXIAL_FUSED_ARCHS    GPU archs to compile for: "80+PTX;90a" (the default: sm_80 and sm_90a code, plus
                       compute_80 PTX, which the driver JIT-compiles once on any newer GPU), or e.g. "90a"
  AXIAL_FUSED_NO_CUDA  "1": build without the CUDA extension, the PyTorch reference path only (for a
                       machine without a CUDA toolkit; the package says so at import and in
                       `python -m axial_fused.info`). Without it, a missing toolkit stops the build.
  AXIAL_FUSED_NVCC_FLAGS  extra nvcc flags (e.g. "-DAXIAL_FUSED_PHASE_CLOCK", the one instrumentation switch:
                       the kernels' first blocks print per-phase clock counts)
  MAX_JOBS             parallel compile jobs (ninja)
  CUDA_HOME            the CUDA toolkit root (the folder holding bin/nvcc and lib/)

torch must be installed before building (`pip install --no-build-isolation ...`). The binding uses
LibTorch's stable ABI only, compiled with TORCH_TARGET_VERSION = 2.11, and Python's limited API: the
one binary (a cp310-abi3 wheel) runs under every torch from 2.11 on and every Python from 3.10 on,
with the CUDA major version it was built against (libcudart.so.N). A build records what it was built
against in src/axial_fused/_build_info.py (not tracked) and tags the version with the CUDA major,
e.g. 0.1.0+cu13. An sdist needs neither torch nor CUDA.
"""
import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
PKG = ROOT / "src" / "axial_fused"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


specs_mod = _load("_axial_specs", PKG / "_specs.py")
version_mod = _load("_axial_version", PKG / "_version.py")

# The oldest torch the binary runs under: the stable-ABI version its headers are held to.
TORCH_FLOOR = (2, 11)
TORCH_TARGET_VERSION = f"0x{TORCH_FLOOR[0]:02x}{TORCH_FLOOR[1]:02x}000000000000"

_HOW_TO_INSTALL = (
    "Prebuilt wheels need no CUDA toolkit: see the README's install section for the wheel of your torch's CUDA "
    "major version. To build from source: install torch >= 2.11 (a CUDA build) and a CUDA toolkit of the same "
    "major version, then `pip install --no-build-isolation axial-fused`. For the PyTorch reference path only (no fused kernels), "
    "build with AXIAL_FUSED_NO_CUDA=1.")


def _fail(reason: str):
    sys.exit(f"\naxial-fused: cannot build the CUDA extension: {reason}\n{_HOW_TO_INSTALL}\n")


def _packaging_sources_only() -> bool:
    """True for `sdist` (and the egg_info step before it): no torch, no CUDA, no local version tag."""
    return bool({"sdist", "egg_info"} & set(sys.argv[1:]))


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _write_build_info(**fields) -> None:
    """What this build was made against, readable even when the binary cannot be loaded."""
    lines = ['"""Written by setup.py at build time (not tracked): what the binary was built against."""']
    lines += [f"{k} = {v!r}" for k, v in fields.items()]
    _write_if_changed(PKG / "_build_info.py", "\n".join(lines) + "\n")


def _torch_with_cuda():
    """The installed torch, or a clear stop when it cannot build the extension."""
    try:
        import torch
    except ImportError:
        _fail("torch is not installed in the build environment (pip's build isolation hides it: pass "
              "--no-build-isolation).")
    from torch.utils.cpp_extension import CUDA_HOME
    if torch.version.cuda is None:
        _fail(f"the installed torch {torch.__version__} is a CPU-only build.")
    if tuple(int(v) for v in version_mod.torch_minor(torch.__version__).split(".")) < TORCH_FLOOR:
        _fail(f"the installed torch {torch.__version__} predates the stable ABI this binding needs "
              f"(torch >= {TORCH_FLOOR[0]}.{TORCH_FLOOR[1]}).")
    if CUDA_HOME is None or not (Path(CUDA_HOME) / "bin" / "nvcc").exists():
        _fail(f"no CUDA toolkit found (CUDA_HOME={os.environ.get('CUDA_HOME')!r}, no nvcc on PATH); torch "
              f"{torch.__version__} needs CUDA {torch.version.cuda}.")
    return torch


def cuda_extension(torch):
    from torch.utils.cpp_extension import CUDAExtension

    specs = specs_mod.parse_specs(os.environ.get("AXIAL_FUSED_SPECS"))
    archs = specs_mod.parse_archs(os.environ.get("AXIAL_FUSED_ARCHS"))
    kernel_files = []
    for dt, d, h in specs:
        path = ROOT / "kernels" / specs_mod.kernel_filename(dt, d, h)
        _write_if_changed(path, specs_mod.kernel_source(dt, d, h))
        kernel_files.append(str(path.relative_to(ROOT)))
    print(f"axial_fused: compiling {len(specs)} specializations for archs {';'.join(archs)}")

    defines = [
        f'-DAXIAL_FUSED_ARCH_LIST="{";".join(archs)}"',
        f"-DTORCH_TARGET_VERSION={TORCH_TARGET_VERSION}",
        f'-DAXIAL_FUSED_TORCH_VERSION="{torch.__version__}"',
        f'-DAXIAL_FUSED_SPECS_OPTION="{os.environ.get("AXIAL_FUSED_SPECS", "default")}"',
    ]
    gencode = [specs_mod.gencode_flag(a) for a in archs]
    link = _shared_cxx_runtime()
    return CUDAExtension(
        name="axial_fused._C",
        sources=["csrc/ops.cpp", "csrc/pass.cpp", "csrc/pair_bias.cu", "csrc/device_probe.cu"] + kernel_files,
        include_dirs=[str(ROOT / "include")],
        extra_compile_args={
            # USE_CUDA: the C shim's CUDA functions (the current stream); hidden visibility: the binary
            # exports only its C entry points and the module init.
            "cxx": ["-O3", "-std=c++20", "-DUSE_CUDA", "-fvisibility=hidden"] + defines,
            "nvcc": ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-Xptxas=--warn-on-spills",
                     "-lineinfo"] + gencode + defines + shlex.split(os.environ.get("AXIAL_FUSED_NVCC_FLAGS", "")),
        },
        extra_link_args=link,
        py_limited_api=True,
    )


def _shared_cxx_runtime() -> list[str]:
    """Link flags that make the extension use the shared libstdc++.so.6 (the one PyTorch uses).

    A g++ whose own library folder holds only libstdc++.a (our GPU machine's /opt/gcc wrapper adds
    such a folder with -B) links the C++ runtime statically even for a plain -lstdc++. The private
    copy's iostreams do not share PyTorch's locale: an integer formatted into an error message
    (c10::str) printed nothing here and crashed the process there. -l:libstdc++.so.6 names the shared
    library itself, wherever the compiler finds it."""
    if not sys.platform.startswith("linux"):
        return []
    cxx = shlex.split(os.environ.get("CXX", "c++"))
    try:
        found = subprocess.run(cxx + ["-print-file-name=libstdc++.so.6"], capture_output=True, text=True,
                               timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        found = ""
    return ["-l:libstdc++.so.6"] if os.path.isabs(found) and os.path.exists(found) else ["-lstdc++"]


def _remove_stale_binaries() -> None:
    """Delete binaries of builds before the limited API (``_C.cpython-*.so``) from the build folders and
    the source package: setuptools would ship them beside ``_C.abi3.so``, and Python imports the
    version-tagged file first."""
    for folder in [PKG, *ROOT.glob("build/lib*/axial_fused")]:
        for stale in folder.glob("_C.cpython-*"):
            stale.unlink()


def build_plan():
    """(version, ext_modules, cmdclass) for this invocation."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if _packaging_sources_only():
        return version_mod.__version__, [], {}
    if os.environ.get("AXIAL_FUSED_NO_CUDA") == "1":
        print("axial_fused: AXIAL_FUSED_NO_CUDA=1: building without the CUDA extension (reference path only)")
        _write_build_info(torch_version=None, cuda_version=None, python_version=python, torch_floor=None, archs="",
                          specs="", no_cuda=True)
        return f"{version_mod.__version__}+{version_mod.local_tag(None)}", [], {}
    torch = _torch_with_cuda()
    _remove_stale_binaries()
    from torch.utils.cpp_extension import BuildExtension
    ext = cuda_extension(torch)
    _write_build_info(torch_version=torch.__version__, cuda_version=torch.version.cuda, python_version=python,
                      torch_floor=".".join(map(str, TORCH_FLOOR)),
                      archs=";".join(specs_mod.parse_archs(os.environ.get("AXIAL_FUSED_ARCHS"))),
                      specs=os.environ.get("AXIAL_FUSED_SPECS", "default"), no_cuda=False)
    version = f"{version_mod.__version__}+{version_mod.local_tag(torch.version.cuda)}"
    return version, [ext], {"build_ext": BuildExtension.with_options(use_ninja=True)}


def main():
    version, ext_modules, cmdclass = build_plan()
    setup(
        name="axial-fused",
        version=version,
        package_dir={"": "src"},
        packages=find_packages("src"),
        ext_modules=ext_modules,
        cmdclass=cmdclass,
        # The extension uses Python's limited API only: one cp310-abi3 wheel serves Python >= 3.10.
        options={"bdist_wheel": {"py_limited_api": "cp310"}} if ext_modules else {},
    )


if __name__ == "__main__":
    main()
