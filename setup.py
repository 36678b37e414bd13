"""Build axial_fused: the Python package plus one CUDA extension (axial_fused._C).

Install-time options (environment variables):
  AXIAL_FUSED_SPECS   which (dtype, dim, heads) specializations to compile: default | minimal |
                      DIMxHEADS[:DTYPE],...   (src/axial_fused/_specs.py documents them)
  AXIAL_FUSED_ARCHS   GPU archs to compile for, e.g. "80;90a" (the default)
  MAX_JOBS            parallel compile jobs (ninja)
  CUDA_HOME           the CUDA toolkit root (the folder holding bin/nvcc and lib/)
"""
import importlib.util
import os
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


specs_mod = _load("_axial_specs", ROOT / "src" / "axial_fused" / "_specs.py")
VERSION = _load("_axial_version", ROOT / "src" / "axial_fused" / "_version.py").__version__


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def cuda_extension():
    import torch
    from torch.utils.cpp_extension import CUDAExtension

    specs = specs_mod.parse_specs(os.environ.get("AXIAL_FUSED_SPECS"))
    archs = specs_mod.parse_archs(os.environ.get("AXIAL_FUSED_ARCHS"))
    kernel_files = []
    for dt, d, h in specs:
        path = ROOT / "kernels" / specs_mod.kernel_filename(dt, d, h)
        _write_if_changed(path, specs_mod.kernel_source(dt, d, h))
        kernel_files.append(str(path.relative_to(ROOT)))
    gen_dir = ROOT / "build" / "generated"
    _write_if_changed(gen_dir / "specs.inc", specs_mod.registry_source(specs))
    print(f"axial_fused: compiling {len(specs)} specializations for archs {';'.join(archs)}")

    defines = [
        f'-DAXIAL_FUSED_ARCH_LIST="{";".join(archs)}"',
        f'-DAXIAL_FUSED_TORCH_VERSION="{torch.__version__}"',
        f'-DAXIAL_FUSED_SPECS_OPTION="{os.environ.get("AXIAL_FUSED_SPECS", "default")}"',
    ]
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    return CUDAExtension(
        name="axial_fused._C",
        sources=["csrc/binding.cpp"] + kernel_files,
        include_dirs=[str(ROOT / "include"), str(gen_dir)],
        extra_compile_args={
            "cxx": ["-O3", "-std=c++20"] + defines,
            "nvcc": ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-Xptxas=--warn-on-spills",
                     "-lineinfo"] + gencode + defines,
        },
    )


def main():
    from torch.utils.cpp_extension import BuildExtension

    setup(
        name="axial-fused",
        version=VERSION,
        package_dir={"": "src"},
        packages=find_packages("src"),
        ext_modules=[cuda_extension()],
        cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    )


if __name__ == "__main__":
    main()
