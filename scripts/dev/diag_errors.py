"""Run each bad call to the registered op in its own process and report how it ended.

A diagnostic for exceptions thrown inside the op's C++ code: each case runs in a fresh interpreter
(with faulthandler on), so a crash shows as a signal and a Python traceback instead of killing the
caller. Usage: python scripts/diag_errors.py [--gdb] [case ...]   (imports axial_fused from the environment).
"""
import os
import shutil
import subprocess
import sys

PRELUDE = """
import faulthandler, torch, axial_fused
faulthandler.enable()
D, H = 64, 4
def meta(shape=(2, 3, 5, D), dtype=torch.bfloat16, dev="meta"):
    x = torch.empty(*shape, device=dev, dtype=dtype)
    ws = [torch.empty(s, device=dev, dtype=dtype) for s in [(D,), (D,), (3 * D, D), (D, D), (D,)]]
    return x, ws
"""

CASES = {
    "type_error_meta": ("x, ws = meta(dtype=torch.float64)\n"
                        "torch.ops.axial_fused.axial_pass(x, *[w.float() for w in ws], H, 0, 1e-5)"),
    "value_error_meta_rank3": ("x, ws = meta()\n"
                               "torch.ops.axial_fused.axial_pass(x[0], *ws, H, 0, 1e-5)"),
    "value_error_meta_axis": ("x, ws = meta()\n"
                              "torch.ops.axial_fused.axial_pass(x, *ws, H, 2, 1e-5)"),
    "value_error_meta_device_mix": ("x, ws = meta()\n"
                                    "torch.ops.axial_fused.axial_pass(x, torch.empty(D, dtype=x.dtype), *ws[1:], H, 0, 1e-5)"),
    "value_error_cpu_axis": ("x, ws = meta(dev='cpu')\n"
                             "torch.ops.axial_fused.axial_pass(x, *ws, H, 2, 1e-5)"),
    "runtime_error_generic": ("x, ws = meta(dev='cpu')\n"
                              "torch.ops.axial_fused.axial_pass(x, *ws, H, 0, 1e-5)"),
    "aten_value_error": "torch.nn.functional.interpolate(torch.ones(1, 1, 4), size=(2, 2))",
}


def main():
    use_gdb = "--gdb" in sys.argv and shutil.which("gdb")
    only = [a for a in sys.argv[1:] if not a.startswith("--")]  # case names to run (default: all)
    worst = 0
    for name, body in CASES.items():
        if only and name not in only:
            continue
        code = PRELUDE + "try:\n" + "".join("    " + ln + "\n" for ln in body.splitlines()) + \
            "except Exception as e:\n    print('RAISED', type(e).__name__, str(e).splitlines()[0][:160])\n" \
            "else:\n    print('NO ERROR')\n"
        r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True)
        tail = (r.stdout + r.stderr).strip().splitlines()
        status = "ok" if r.returncode == 0 else f"CRASH rc={r.returncode}"
        print(f"{name:26s} {status:14s} {tail[-1] if tail else ''}")
        if r.returncode != 0:
            worst = 1
            print("   " + "\n   ".join(tail[-25:]))
            if use_gdb:
                g = subprocess.run(["gdb", "-q", "-batch", "-ex", "run", "-ex", "bt 40", "--args", sys.executable,
                                    "-c", code], capture_output=True, text=True, env={**os.environ})
                print("   gdb:\n   " + "\n   ".join(g.stdout.strip().splitlines()[-45:]))
    return worst


if __name__ == "__main__":
    sys.exit(main())
