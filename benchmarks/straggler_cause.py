"""Straggler cause on injected scenarios: how often the slowed node and its cause class are named, per
GPU vendor, and how many clean runs name a straggler (none should).

The scenarios are tests/health/_straggler_scenarios.py: replays of recorded real ``amd-smi`` (AMD rows) and
``nvidia-smi -q`` (NVIDIA rows) output with the fault written into copies, real kernel lines and
``/proc`` text, one node of 2-8 degraded 5-30 % by one cause. The NVIDIA rows are printed twice:
``before``, reading only the fields nvidia-smi was asked for before the clock event reasons, the SM
clock's maximum, the PCIe link and the memory-repair counters were added (the baseline), and ``after``,
reading today's field list.

    python benchmarks/straggler_cause.py [--per-cause 8] [--clean 30] [--seed 30]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "health"))

from _straggler_scenarios import NV_FIELDS_BEFORE, Scenario, clean, corpus

from cvs_tui.core.health.nvidia_smi import NVIDIA_FIELDS
from cvs_tui.core.health.straggler import Cause, find_straggler


def score(scenarios: list[Scenario]) -> Counter[Cause]:
    right: Counter[Cause] = Counter()
    for sc in scenarios:
        got = find_straggler(sc.nodes, sc.job)
        if sc.cause is not None and got is not None and (got.node, got.cause) == (sc.slow_node, sc.cause):
            right[sc.cause] += 1
    return right


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-cause", type=int, default=8, help="scenarios per cause class and row")
    ap.add_argument("--clean", type=int, default=30, help="clean scenarios per row")
    ap.add_argument("--seed", type=int, default=30)
    a = ap.parse_args()
    rows = (
        ("AMD (amd-smi)", "amd", NVIDIA_FIELDS),
        ("NVIDIA before (10 fields)", "nvidia", NV_FIELDS_BEFORE),
        (f"NVIDIA after ({len(NVIDIA_FIELDS)} fields)", "nvidia", NVIDIA_FIELDS),
    )
    short = {c: c.name.lower().replace("_", " ") for c in Cause}
    print(
        f"{'row':<27} {'right':>9} {'share':>6}  "
        + "  ".join(f"{short[c]:>8}" for c in Cause)
        + "  clean named"
    )
    totals: dict[str, tuple[int, int]] = {}
    for label, vendor, fields in rows:
        t0 = time.perf_counter()
        right = score(corpus(a.seed, a.per_cause, vendor, fields))
        named = sum(
            1 for sc in clean(a.seed + 1, a.clean, vendor, fields) if find_straggler(sc.nodes, sc.job)
        )
        n = a.per_cause * len(Cause)
        got = sum(right.values())
        totals[label] = (got, n)
        per = "  ".join(f"{f'{right[c]}/{a.per_cause}':>8}" for c in Cause)
        print(
            f"{label:<27} {f'{got}/{n}':>9} {100 * got / n:5.1f}%  {per}  {named}/{a.clean}"
            f"   ({time.perf_counter() - t0:.1f} s)"
        )
    amd = totals[rows[0][0]]
    for label in (rows[1][0], rows[2][0]):
        nv = totals[label]
        both = (amd[0] + nv[0], amd[1] + nv[1])
        print(f"AMD + {label}: {both[0]}/{both[1]} = {100 * both[0] / both[1]:.1f}% right cause class")


if __name__ == "__main__":
    main()
