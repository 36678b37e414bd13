"""Loading the compiled extension. The package imports without it (reference path only) and says why."""
from __future__ import annotations

try:
    from . import _C as C  # registers torch.ops.axial_fused.* as a side effect
    error = None
except ImportError as e:  # not built, or built against another torch (undefined symbol)
    C = None
    error = f"{type(e).__name__}: {e}"

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
