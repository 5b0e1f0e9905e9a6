"""What a run's watcher knew that its logs do not say: :class:`RunFacts`, built once by whoever saw the
run (the live runner, a re-judged kept run, ``analyze`` of a run folder with a results.json) and handed
down unchanged through ``finalize.judge_tables`` and ``run.judge_run``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from cvs_tui.core.events import RunOutcome
from cvs_tui.core.parse.endings import Ending


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """A run's live facts, index = rank where per node; every field may be left out (None or empty: the
    judge reads the logs alone).

    * ``exit_codes``: each trainer's exit code;
    * ``outcome``, ``reason``, ``root_cause_node``: what the watchdog (or cvs-tui itself) decided, never
      re-derived from the logs (outcome.decide_outcome);
    * ``hosts``, ``node_logs``, ``node_lines``: each node's name, local log and the lines parsed of it
      (the node judge reads the log's line clock; a node without a log is judged without one);
    * ``started_at``, ``ended_at``: the run's times;
    * ``health``: the run's ``health.*`` metric values, judged like any other metric;
    * ``endings``: how the scheduler ended each node's run where the launcher read it (else it is read
      from the tail of the node's log)."""

    exit_codes: Sequence[int | None] | None = None
    outcome: RunOutcome | None = None
    reason: str = ""
    root_cause_node: int | None = None
    hosts: Sequence[str] | None = None
    node_logs: Sequence[Path] | None = None
    node_lines: Sequence[int] | None = None
    started_at: float | None = None
    ended_at: float | None = None
    health: Mapping[str, float] | None = None
    endings: Sequence[Ending | None] | None = None

    def exit_code(self, rank: int) -> int | None:
        return _at(self.exit_codes, rank)

    def log(self, rank: int) -> Path | None:
        return _at(self.node_logs, rank)

    def lines(self, rank: int) -> int:
        return _at(self.node_lines, rank) or 0

    def host(self, rank: int) -> str:
        """The node's host; else its log's file name; else ``node<rank>``."""
        host = _at(self.hosts, rank)
        if host is not None:
            return host
        path = self.log(rank)
        return path.name if path is not None else f"node{rank}"


T = TypeVar("T")


def _at(values: Sequence[T] | None, rank: int) -> T | None:
    return values[rank] if values and rank < len(values) else None


__all__ = ["RunFacts"]
