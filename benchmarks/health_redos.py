"""Time the kernel-log record parser and health signatures on long hostile lines (audit cases HL1, HM1, HM2).

    python benchmarks/health_redos.py [--sizes 10K,100K,1M]

Prints seconds per case and size beside the audit's figures for the quadratic patterns (7.6 s at
100 KB, over 30 s at 1 MB). Linear matching grows tenfold per tenfold size, from milliseconds.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from cvs_tui.core.health.kmsg import parse_record
from cvs_tui.core.health.signatures import match_message

# audit-3 figures for the quadratic patterns, seconds: size -> (HL1, HM1, HM2)
AUDIT = {10_000: (0.1, 0.1, 0.01), 100_000: (7.56, 7.93, 0.57), 1_000_000: (">30", ">30", ">30")}


def _size(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": 1000, "M": 1_000_000}.get(t[-1:], 1)
    return int(t.rstrip("KM")) * mult


def _time(fn: Callable[[Any], object], arg: object) -> float:
    t0 = time.perf_counter()
    fn(arg)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10K,100K,1M")
    args = ap.parse_args()
    print(f"{'case':<6} {'size':>9} {'now s':>8} {'audit s':>8}")
    for size in (_size(s) for s in args.sizes.split(",")):
        cases: list[tuple[str, Callable[[Any], object], object]] = [
            ("HL1", parse_record, b"1,2,3," + b"a" * size),
            ("HM1", match_message, "NVRM: Xid (PCI:" + "a" * size),
            ("HM2", match_message, "MC1_STATUS[" * (size // 11)),
        ]
        for i, (name, fn, arg) in enumerate(cases):
            then = AUDIT.get(size, ("-", "-", "-"))[i]
            print(f"{name:<6} {size:>9} {_time(fn, arg):>8.3f} {then!s:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
