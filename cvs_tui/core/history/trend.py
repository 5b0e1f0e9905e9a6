"""What a run's reports and screen show of its history: each run's check against the runs before it,
read from the history database without writing to it (no database yet: nothing to show)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cvs_tui.core.errors import UserError
from cvs_tui.core.history.check import DEFAULT_LAST, RunCheck, check_input
from cvs_tui.core.history.register import load_run_input, resolve_run_dir
from cvs_tui.core.history.store import HistoryStore


@dataclass(slots=True)
class Trend:
    """Per run key its check (only runs with at least one judged metric), or why none could be read."""

    runs: dict[str, RunCheck] = field(default_factory=dict)
    error: str = ""

    def __bool__(self) -> bool:
        return bool(self.runs)


def _judged(rc: RunCheck) -> bool:
    return any(m.judgement is not None and m.judgement.baseline is not None for m in rc.metrics)


def trend_for(run_dir: str | Path, *, last: int = DEFAULT_LAST, db: str | Path | None = None) -> Trend:
    """The folder's runs against their history. A database that cannot be read is said in ``error``:
    the reports are still written, without the trend."""
    try:
        store = HistoryStore.open(db, create=False)
        if store is None:
            return Trend()
        with store:
            folder = resolve_run_dir(run_dir)
            checks = check_input(store, load_run_input(folder), run_dir=folder, last=last)
    except UserError as exc:
        return Trend(error="; ".join(exc.problems))
    return Trend({rc.run_key: rc for rc in checks if _judged(rc)})


__all__ = ["Trend", "trend_for"]
