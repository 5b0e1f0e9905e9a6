"""One scored item of the world corpus."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

WORLD = Path(__file__).resolve().parents[1] / "fixtures" / "world"


@dataclass(frozen=True)
class Check:
    """What cvs-tui concluded about one labelled item against the engineer's label.

    ``kind`` is the row of the benchmark's table ("kernel line", "kernel incident", "maxtext log",
    "slurm ending", "error line", ...); ``item`` names the file and the item in it, so a miss can be found.
    """

    kind: str
    item: str
    ok: bool
    expected: str
    got: str
