"""Scores cvs-tui on the world corpus: right/total per kind, and every miss.

The corpus (``tests/fixtures/world/``) holds kernel lines, MaxText logs, Slurm endings and error lines
that people posted publicly from real clusters, each with its source and an engineer's label. Every
labelled item is also a test (``tests/world/test_world_*.py``); this script prints the table:

    .venv/bin/python benchmarks/world_corpus.py [--misses]
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from world.check import Check

# one scorer module per kind of input, each with checks() -> list[Check]
SCORERS = ("world.kernel", "world.maxtext", "world.slurm", "world.errors")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--misses", action="store_true", help="list every miss with what was expected and got")
    args = ap.parse_args()
    checks: list[Check] = []
    for name in SCORERS:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            print(f"{name}: no scorer yet", file=sys.stderr)
            continue
        checks.extend(mod.checks())
    by_kind: dict[str, list[Check]] = defaultdict(list)
    for c in checks:
        by_kind[c.kind].append(c)
    print(f"{'kind':<22} {'right':>6} {'total':>6} {'share':>7}")
    for kind, items in by_kind.items():
        right = sum(c.ok for c in items)
        print(f"{kind:<22} {right:>6} {len(items):>6} {right / len(items):>7.1%}")
    misses = [c for c in checks if not c.ok]
    if misses:
        print(f"\n{len(misses)} misses" + ("" if args.misses else " (--misses lists them)"))
        if args.misses:
            for c in misses:
                print(f"- [{c.kind}] {c.item}\n    expected: {c.expected}\n    got:      {c.got}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
