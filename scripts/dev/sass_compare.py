"""Whether two source trees compile to the same machine code: every kernels/*.cu of each, compiled to a
cubin per arch, compared function by function (the bytes of each .text.<function> section). No GPU and
no nvdisasm needed; a refactor that must not change the kernels shows "0 differ".

    python scripts/dev/sass_compare.py OLD_TREE NEW_TREE [--archs 90a,80] [--jobs 2] [--files GLOB,...]

e.g. OLD_TREE from `git worktree add /tmp/base HEAD~1`. Needs nvcc (CUDA_HOME or PATH).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path


def nvcc() -> str:
    home = os.environ.get("CUDA_HOME")
    found = str(Path(home) / "bin" / "nvcc") if home else shutil.which("nvcc")
    if not found or not Path(found).exists():
        sys.exit("sass_compare: no nvcc (set CUDA_HOME)")
    return found


def compile_cubin(tree: Path, source: Path, arch: str, out: Path) -> Path:
    cubin = out / f"{source.stem}.{arch}.cubin"
    subprocess.run([nvcc(), "-std=c++17", "-O3", "--expt-relaxed-constexpr", f"-I{tree / 'include'}",
                    f"-gencode=arch=compute_{arch},code=sm_{arch}", "-cubin", "-o", str(cubin), str(source)],
                   check=True, capture_output=True)
    return cubin


def text_sections(cubin: Path) -> dict[str, str]:
    """{function: md5 of its .text section} of an ELF cubin."""
    b = cubin.read_bytes()
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    names = secs[shstrndx][4]
    out = {}
    for s in secs:
        name = b[names + s[0]:b.index(b"\0", names + s[0])].decode()
        if name.startswith(".text."):
            out[name[6:]] = hashlib.md5(b[s[4]:s[4] + s[5]]).hexdigest()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--archs", default="90a,80")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--files", default="*.cu",
                    help="the kernels/ sources to compare: globs, comma-separated (e.g. 'axial_bf16_*.cu,axial_fp16_d64_h4.cu')")
    args = ap.parse_args()
    sources = sorted({p.name for pat in args.files.split(",") for p in (args.new / "kernels").glob(pat)})
    if not sources:
        sys.exit(f"sass_compare: no kernels/{args.files}")
    work = Path(tempfile.mkdtemp(prefix="sass_compare_"))
    jobs = []
    with cf.ThreadPoolExecutor(args.jobs) as pool:
        for tree, tag in ((args.old, "old"), (args.new, "new")):
            (work / tag).mkdir()
            for name in sources:
                for arch in args.archs.split(","):
                    jobs.append((tag, name, arch, pool.submit(compile_cubin, tree, tree / "kernels" / name, arch,
                                                              work / tag)))
    cubins = {(tag, name, arch): f.result() for tag, name, arch, f in jobs}
    same = differ = 0
    for name in sources:
        for arch in args.archs.split(","):
            old, new = text_sections(cubins["old", name, arch]), text_sections(cubins["new", name, arch])
            for fn in sorted(set(old) | set(new)):
                if old.get(fn) == new.get(fn):
                    same += 1
                else:
                    differ += 1
                    print(f"{name} sm_{arch}: {'only old' if fn not in new else 'only new' if fn not in old else 'differs'}: {fn}")
    shutil.rmtree(work)
    print(f"sass_compare: {same} functions identical, {differ} differ ({len(sources)} files x {args.archs})")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
