"""The SASS instructions with the most warp-state samples in an ncu source-page CSV
(`ncu --import R --page source --print-source sass --csv`, as `scripts/dev/ncu.sh source` writes it), each
with its stall reasons sampled there (columns named like `stall_*` or "... Stall ..." that are
non-zero on that row).

    python scripts/dev/top_stalls.py FILE.csv [TOP]
"""
from __future__ import annotations

import csv
import sys


def _num(v: str) -> float:
    try:
        return float(v.replace(",", "").strip() or 0)
    except ValueError:
        return 0.0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    top = int(argv[1]) if len(argv) > 1 else 25
    with open(argv[0], newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    head_i = next((i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r)), None)
    if head_i is None:
        print(f"top_stalls: no 'Source' column header in {argv[0]}; its first lines:")
        for r in rows[:5]:
            print("   ", ",".join(r)[:200])
        return 1
    head = [c.strip() for c in rows[head_i]]
    body = [r for r in rows[head_i + 1:] if len(r) == len(head)]
    src = head.index("Source")
    sample_cols = [i for i, c in enumerate(head) if "Sampling (All" in c] or \
                  [i for i, c in enumerate(head) if "Sampl" in c]
    if not sample_cols:
        print("top_stalls: no sampling column; columns:", ", ".join(head))
        return 1
    key = sample_cols[0]
    reasons = [i for i, c in enumerate(head) if i != key and ("stall" in c.lower()) and "Sampl" not in c]
    total = sum(_num(r[key]) for r in body) or 1.0
    addr = head.index("Address") if "Address" in head else None
    print(f"{len(body)} instructions, {total:.0f} samples ({head[key]}); the top {top}:")
    for r in sorted(body, key=lambda r: -_num(r[key]))[:top]:
        why = sorted(((head[i], _num(r[i])) for i in reasons if _num(r[i]) > 0), key=lambda x: -x[1])[:3]
        where = r[addr].strip() if addr is not None else ""
        print(f"  {100 * _num(r[key]) / total:5.1f}%  {where:>8}  {r[src].strip()[:70]:<70}  "
              + ", ".join(f"{n} {v:.0f}" for n, v in why))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
