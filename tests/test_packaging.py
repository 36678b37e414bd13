"""Packaging (CPU): the version tag, `python -m axial_fused.info`, what a binary that does not fit the
running torch says, and source builds without a CUDA toolkit.

Load failures are simulated in a fresh interpreter: an import hook makes `axial_fused._C` fail the way
a binary built for another torch does ("undefined symbol"), and a stand-in build record says what the
binary was built against. The package must still import, serve the reference path, and raise the
message on strict=True."""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import axial_fused as af
from axial_fused import _ext
from axial_fused._version import local_tag

ROOT = Path(__file__).resolve().parent.parent
UNDEFINED = ("/x/axial_fused/_C.cpython-312-x86_64-linux-gnu.so: undefined symbol: "
             "_ZN3c1017RegisterOperatorsD1Ev")


def _run(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=300, env=env)


def test_local_tag_names_the_cuda_major_only():
    assert local_tag("13.0") == "cu13"
    assert local_tag("12.8") == "cu12"
    assert local_tag(None) == "nocuda"


@pytest.mark.skipif(os.environ.get("AXIAL_FUSED_EXPECT_EXT") != "1",
                    reason="set AXIAL_FUSED_EXPECT_EXT=1 where the extension was built (CI does)")
def test_extension_loads_where_it_was_built():
    """(Built here, or a wheel built against a newer torch and tested under an older one, >= 2.11.)"""
    assert _ext.C is not None, _ext.error
    assert _ext.build_info is not None and _ext.build_info.torch_floor == "2.11"
    assert _ext.C.build_info()[0] == _ext.build_info.torch_version


@pytest.mark.skipif(_ext.C is None or not sys.platform.startswith("linux") or shutil.which("readelf") is None,
                    reason="needs the compiled extension, Linux and readelf")
def test_extension_uses_the_shared_cxx_runtime():
    """The extension needs libstdc++.so and carries no private copy of it: a statically linked copy
    (a g++ wrapper adding -static-libstdc++) broke integer formatting in error messages, and crashed
    the process on the H200 (setup.py links -l:libstdc++.so.6; see _shared_cxx_runtime)."""
    so = _ext.C.__file__
    dyn = subprocess.run(["readelf", "-dW", so], capture_output=True, text=True, check=True).stdout
    assert "libstdc++.so" in dyn, f"{so} does not link libstdc++ dynamically:\n{dyn}"
    syms = subprocess.run(["readelf", "-sW", so], capture_output=True, text=True, check=True).stdout
    own = [ln for ln in syms.splitlines() if "_ZNSo9_M_insertIlEERSoT_" in ln and " UND " not in ln]
    assert not own, f"{so} defines its own std::ostream::_M_insert<long> (a static libstdc++): {own}"


@pytest.mark.skipif(_ext.C is None or not sys.platform.startswith("linux") or shutil.which("nm") is None
                    or shutil.which("readelf") is None, reason="needs the compiled extension, Linux, nm and readelf")
def test_extension_keeps_to_the_stable_abi():
    """No at::, c10:: or torch:: C++ symbol referenced, no libtorch_python, a limited-API module: the
    binary runs under every torch >= 2.11 and Python >= 3.10 (scripts/check_abi.sh; CI runs it on the wheel)."""
    p = subprocess.run(["bash", str(ROOT / "scripts" / "check_abi.sh"), _ext.C.__file__], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_info_reports_versions_archs_and_gpu():
    p = subprocess.run([sys.executable, "-m", "axial_fused.info"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert f"axial_fused {af.__version__}" in out
    assert f"torch {torch.__version__}" in out and f"Python {platform.python_version()}" in out
    if _ext.C is not None:
        bi = _ext.build_info
        assert f"built against:  torch {bi.torch_version}, CUDA {bi.cuda_version}" in out
        assert f"compiled archs: {_ext.C.compiled_archs()}" in out
        assert _ext.describe_specs() in out
    else:
        assert f"CUDA extension: not available: {_ext.error}" in out
    if not torch.cuda.is_available():
        assert "GPU: none" in out
    else:
        assert f"GPU 0: {torch.cuda.get_device_name(0)}" in out and "fused path" in out


# A fresh interpreter with a stand-in build record and a failing `_C` import, then one reference call
# and one strict call. Prints what happened as JSON.
_SIMULATE = """
    import json, sys, types, warnings
    cfg = json.loads(sys.argv[1])

    class FailingC:
        def find_spec(self, name, path=None, target=None):
            if name != "axial_fused._C":
                return None
            if cfg["load_error"] is None:
                raise AssertionError("axial_fused._C was imported although the build record rules it out")
            raise ImportError(cfg["load_error"])

    sys.meta_path.insert(0, FailingC())
    bi = cfg["build_info"]
    sys.modules["axial_fused._build_info"] = types.SimpleNamespace(**bi) if bi else None
    import torch
    import axial_fused as af
    g = torch.Generator().manual_seed(0)
    pw = lambda: af.PassWeights(*(torch.randn(*s, generator=g) for s in ((64,), (64,), (192, 64), (64, 64), (64,))))
    w = af.AxialWeights.create(pw(), pw(), 4)
    x = torch.randn(1, 3, 5, 64, generator=g)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        y = af.axial_attention(x, w)
    ref = af.reference.reference_axial_attention(x, w)
    try:
        af.axial_attention(x, w, strict=True)
        strict = None
    except af.FusedUnavailableError as e:
        strict = str(e)
    print(json.dumps({"error": af._ext.error, "strict": strict, "matches_reference": bool(torch.equal(y, ref))}))
"""


def _simulate(build_info: dict | None, load_error: str | None) -> dict:
    p = _run(_SIMULATE, json.dumps({"build_info": build_info, "load_error": load_error}))
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["matches_reference"], "the reference path did not serve the call"
    assert res["strict"] is not None and res["error"] in res["strict"], "strict=True did not raise the load error"
    return res


def _record(torch_version: str, cuda_version: str | None = None, no_cuda: bool = False,
            torch_floor: str = "2.11") -> dict:
    return dict(torch_version=torch_version, cuda_version=cuda_version or torch.version.cuda or "12.8",
                python_version="3.12", torch_floor=torch_floor, archs="80+PTX;90a", specs="default", no_cuda=no_cuda)


def _advice() -> str:
    if torch.version.cuda is None:
        return "a CUDA build of torch"
    return f"+{local_tag(torch.version.cuda)}"


def test_binary_for_another_cuda_major_is_refused_before_loading():
    """The record says CUDA 999: the binary is not even loaded (FailingC asserts that); the message
    names both builds and the wheel to install."""
    err = _simulate(_record("2.99.0+cu999", "999.0"), load_error=None)["error"]
    assert "built for torch 2.99.0+cu999 (CUDA 999.0)" in err and f"torch {torch.__version__}" in err
    assert "is running" in err and _advice() in err


def test_binary_serves_every_torch_from_its_floor():
    """A record of another torch minor, same CUDA major: the stable ABI serves it (the binary loads);
    one whose floor is above the running torch is refused, naming the floor."""
    if torch.version.cuda is None:
        pytest.skip("a CPU-only torch is never served by a CUDA build")
    newer = _simulate(_record("2.11.0+cu130"), load_error="stand-in: the import itself")["error"]
    assert "stand-in: the import itself" in newer  # it got as far as loading
    err = _simulate(_record("2.99.0", torch_floor="2.99"), load_error=None)["error"]
    assert "torch >= 2.99" in err and "is running" in err


def test_undefined_symbol_without_build_record_names_running_torch():
    err = _simulate(None, load_error=UNDEFINED)["error"]
    assert "undefined symbol" in err and f"running torch {torch.__version__}" in err
    assert "built for another torch" in err and _advice() in err


def test_undefined_symbol_with_matching_record_says_build_is_broken():
    rec = _record(torch.__version__, torch.version.cuda or "12.8")
    if torch.version.cuda is None:
        pytest.skip("a CPU-only torch never matches a CUDA build record")
    err = _simulate(rec, load_error=UNDEFINED)["error"]
    assert "serves the running torch, yet does not load" in err and "undefined symbol" in err


def test_no_cuda_build_says_reference_only():
    err = _simulate(_record("", no_cuda=True), load_error=None)["error"]
    assert "AXIAL_FUSED_NO_CUDA=1" in err and "only the reference path works" in err


def test_arch_message_names_gpu_arch_and_compiled_archs():
    msg = _ext.arch_message("NVIDIA L4", (8, 9), "90a", "no kernel image is available for execution")
    assert "sm_89" in msg and "(90a)" in msg and "no kernel image" in msg and "holds no PTX" in msg
    assert "AXIAL_FUSED_ARCHS" in msg and "wheel built for sm_89" in msg
    msg = _ext.arch_message("Tesla T4", (7, 5), "80+PTX;90a", "no kernel image is available for execution")
    assert "(80+PTX;90a)" in msg and "compute_80 PTX runs on sm_80 and newer GPUs only" in msg


def test_which_gpus_run_the_binary_from_ptx():
    release = "80+PTX;90a"
    assert not _ext.runs_from_ptx((8, 0), release) and not _ext.runs_from_ptx((8, 6), release)
    assert not _ext.runs_from_ptx((8, 9), release) and not _ext.runs_from_ptx((9, 0), release)
    assert _ext.runs_from_ptx((10, 0), release) and _ext.runs_from_ptx((12, 0), release)
    assert _ext.runs_from_ptx((9, 0), "80+PTX")  # the H200 with a binary of sm_80 code and PTX only
    assert not _ext.runs_from_ptx((12, 0), "80;90a")  # no PTX: no JIT either (the arch message)


# ---- source builds without a CUDA toolkit (need the source tree and setuptools) -----------------

def _source_copy(tmp_path: Path) -> Path:
    if not (ROOT / "setup.py").exists():
        pytest.skip("not run from a source tree")
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"a source build needs setuptools>=77 (pyproject.toml), this is {setuptools.__version__}")
    dst = tmp_path / "src_tree"
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "kernels", "*.so", "_build_info.py", "__pycache__", "*.egg-info",
        "tests", "docs", ".pytest_cache"))
    return dst


def _pip_wheel(src: Path, out: Path, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "CUDA_HOME": "/nonexistent-cuda", **env}  # torch takes CUDA_HOME as given
    return subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=600, env=full_env)


def test_source_build_without_toolkit_stops_with_clear_message(tmp_path):
    p = _pip_wheel(_source_copy(tmp_path), tmp_path / "wheels")
    assert p.returncode != 0, "a build without a CUDA toolkit must not produce a package"
    text = p.stdout + p.stderr
    assert "cannot build the CUDA extension" in text
    assert "no CUDA toolkit found" in text or "CPU-only build" in text
    assert "AXIAL_FUSED_NO_CUDA=1" in text and "Prebuilt wheels" in text
    assert not list(tmp_path.glob("wheels/*.whl"))


def test_no_cuda_opt_in_builds_a_reference_only_package(tmp_path):
    p = _pip_wheel(_source_copy(tmp_path), tmp_path / "wheels", AXIAL_FUSED_NO_CUDA="1")
    assert p.returncode == 0, p.stdout + p.stderr
    (wheel,) = (tmp_path / "wheels").glob("*.whl")
    assert wheel.name == f"axial_fused-{af.__version__}+nocuda-py3-none-any.whl"
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    code = """
        import axial_fused as af, torch
        assert af._ext.C is None
        print(af._ext.error)
    """
    q = _run(code, env={**os.environ, "PYTHONPATH": str(target)})
    assert q.returncode == 0, q.stderr
    assert "built without the CUDA extension (AXIAL_FUSED_NO_CUDA=1)" in q.stdout


# ---- the C++ runtime behind a compiler that only has the static libstdc++ at hand ----------------

def _setup_module():
    import importlib.util
    if not (ROOT / "setup.py").exists():
        pytest.skip("not run from a source tree")
    spec = importlib.util.spec_from_file_location("axial_fused_setup", ROOT / "setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # defines functions only; main() runs under __main__
    return mod


@pytest.mark.skipif(not sys.platform.startswith("linux") or not shutil.which("g++") or not shutil.which("readelf"),
                    reason="needs Linux, g++ and readelf")
def test_link_flags_keep_libstdcxx_shared_behind_a_static_only_folder(tmp_path, monkeypatch):
    """The GPU machine's g++ is a wrapper that adds `-B <folder holding libstdc++.a only>`: a plain
    -lstdc++ then links the C++ runtime statically (docs/design.md, Packaging). Rebuild that situation
    with the local g++ and check the flags setup.py chooses keep libstdc++.so.6 as a dependency."""
    static = subprocess.run(["g++", "-print-file-name=libstdc++.a"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(static):
        pytest.skip("this g++ has no libstdc++.a")
    folder = tmp_path / "gcc_lib"
    folder.mkdir()
    shutil.copy(static, folder / "libstdc++.a")
    wrapper = tmp_path / "g++"
    wrapper.write_text(f'#!/bin/sh\nexec g++ -B{folder}/ "$@"\n')
    wrapper.chmod(0o755)
    src = tmp_path / "fmt.cpp"
    src.write_text('#include <sstream>\n#include <string>\n'
                   'std::string fmt(long v) { std::ostringstream s; s << v; return s.str(); }\n')

    def link(flags):
        so = tmp_path / ("libfmt_" + "_".join(f.strip("-").replace(":", "").replace("+", "x") for f in flags) + ".so")
        subprocess.run([str(wrapper), "-shared", "-fPIC", str(src), "-o", str(so), *flags], check=True,
                       capture_output=True, text=True)
        needed = "libstdc++.so" in subprocess.run(["readelf", "-dW", str(so)], capture_output=True, text=True).stdout
        own = [ln for ln in subprocess.run(["readelf", "-sW", str(so)], capture_output=True, text=True).stdout
               .splitlines() if "_ZNSo9_M_insertIlEERSoT_" in ln and " UND " not in ln]
        return needed, bool(own)

    assert link(["-lstdc++"]) == (False, True), "the wrapper no longer reproduces the static link"
    monkeypatch.setenv("CXX", str(wrapper))
    flags = _setup_module()._shared_cxx_runtime()
    assert flags == ["-l:libstdc++.so.6"]
    assert link(flags) == (True, False)
