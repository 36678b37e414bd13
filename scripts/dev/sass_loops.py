"""Static instruction counts of the loops that issue tensor-core products, from a cubin's SASS (no GPU):

    python scripts/dev/sass_loops.py CUBIN KERNEL_SUBSTRING [--all] [--stores] [--count REGEX]

Disassembles CUBIN with nvdisasm (the CUDA toolkit's, or the copy the triton wheel bundles), takes the
kernels whose mangled names contain KERNEL_SUBSTRING, and prints for each backward branch whose body
holds an HGMMA (wgmma) or HMMA (mma.sync) the body's instruction count and its mix: the innermost such
loop is the main loop, whose length per step is what an issue-bound kernel pays. --all prints the enclosing loops too; --stores prints the kernel's global stores by width
(`STG.E` is 32 bits, `STG.E.64`, `STG.E.128`); --count REGEX prints how many instructions match (in the kernel, and in each loop listed). Example (a kernel file compiled for sm_90a):

    nvcc -std=c++17 -O3 -Iinclude -arch=sm_90a -cubin -o k.cubin kernels/axial_bf16_d768_h12.cu
    python scripts/dev/sass_loops.py k.cubin ln_qkv_sm90
"""
import glob
import os
import re
import shutil
import subprocess
import sys


def nvdisasm() -> str:
    found = shutil.which("nvdisasm")
    if found:
        return found
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cands = glob.glob(os.path.join(home, "bin", "nvdisasm"))
    import importlib.util
    spec = importlib.util.find_spec("triton")
    if spec and spec.origin:
        cands += glob.glob(os.path.join(os.path.dirname(spec.origin), "backends", "nvidia", "bin", "nvdisasm"))
    if not cands:
        sys.exit("sass_loops: no nvdisasm (CUDA toolkit bin/ or the triton wheel's backends/nvidia/bin/)")
    return cands[0]


def functions(sass: str):
    """(name, [(address, instruction)], {label: address}) per function in nvdisasm -c output."""
    for m in re.finditer(r"^\.text\.(\S+):\n(.*?)(?=^\s*\.section|\Z)", sass, re.S | re.M):
        ins, labels, pending = [], {}, []
        for line in m.group(2).splitlines():
            lab = re.match(r"\s*(\.L_x_\d+):", line)
            if lab:
                pending.append(lab.group(1))
                continue
            i = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
            if i:
                addr = int(i.group(1), 16)
                labels.update({p: addr for p in pending})
                pending = []
                ins.append((addr, i.group(2)))
        yield m.group(1), ins, labels


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cubin, want, show_all, stores = sys.argv[1], sys.argv[2], "--all" in sys.argv[3:], "--stores" in sys.argv[3:]
    pattern = sys.argv[sys.argv.index("--count") + 1] if "--count" in sys.argv[3:-1] else None
    sass = subprocess.run([nvdisasm(), "-c", cubin], check=True, capture_output=True, text=True).stdout
    for name, ins, labels in functions(sass):
        if want not in name:
            continue
        loops = []
        for addr, text in ins:
            b = re.search(r"BRA\b.*`\((\.L_x_\d+)\)", text)
            if b and labels.get(b.group(1), addr + 1) <= addr:
                body = [t for a, t in ins if labels[b.group(1)] <= a <= addr]
                mma = sum(("HGMMA" in t) or ("HMMA" in t) for t in body)
                if mma:
                    loops.append((len(body), labels[b.group(1)], addr, mma, body))
        loops.sort()
        print(f"{name}: {len(ins)} instructions")
        if pattern:
            print(f"  matching {pattern!r}: {sum(bool(re.search(pattern, t)) for _, t in ins)}")
        if stores:
            widths: dict[str, int] = {}
            for _, text in ins:
                st = re.search(r"\b(STG\.E(?:\.(?:64|128|U8|S8|U16|S16))?)\b", text)
                if st:
                    widths[st.group(1)] = widths.get(st.group(1), 0) + 1
            print("  global stores: " + (", ".join(f"{k} x{v}" for k, v in sorted(widths.items())) or "none"))
        for n, lo, hi, mma, body in loops if show_all else loops[:1]:
            count = lambda *keys: sum(any(k in t for k in keys) for t in body)  # noqa: E731
            matching = f", {sum(bool(re.search(pattern, t)) for t in body)} matching" if pattern else ""
            print(f"  loop {lo:#x}-{hi:#x}: {n} instructions, {mma} tensor-core products, "
                  f"{count('LDGSTS')} cp.async, {count('BAR.SYNC', 'BAR.ARV')} named/block barriers, "
                  f"{count('SYNCS')} mbarrier ops, {count('BRA')} branches{matching}")


if __name__ == "__main__":
    main()
