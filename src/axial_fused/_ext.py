"""Loading the compiled extension. The package imports without it (reference path only) and says why."""
from __future__ import annotations

try:
    from . import _C as C  # registers torch.ops.axial_fused.* as a side effect
    error = None
except ImportError as e:  # not built, or built against another torch (undefined symbol)
    C = None
    error = f"{type(e).__name__}: {e}"

_specs: frozenset | None = None


def specs() -> frozenset:
    """{(dtype name, dim, heads)} compiled into the extension (empty without it)."""
    global _specs
    if _specs is None:
        _specs = frozenset(tuple(s) for s in C.compiled_specs()) if C is not None else frozenset()
    return _specs


def describe_specs() -> str:
    by_pair: dict[tuple[int, int], list[str]] = {}
    for dt, d, h in specs():
        by_pair.setdefault((d, h), []).append(dt)
    return ", ".join(f"{d}x{h} ({'/'.join(sorted(v))})" for (d, h), v in sorted(by_pair.items())) or "none"
