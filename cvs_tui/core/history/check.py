"""`history check`: each checked metric of a run against its group's runs before it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cvs_tui.core.compare.inputs import RunInput
from cvs_tui.core.history.grouping import canonical, series_of, stack_change, stack_of
from cvs_tui.core.history.metrics import HistoryMetric, checked_metrics, values_of
from cvs_tui.core.history.noise import NOT_ENOUGH, REGRESSED, Judgement, judge
from cvs_tui.core.history.register import matching_group, run_time
from cvs_tui.core.history.store import Group, HistoryStore, StoredRun
from cvs_tui.core.results import RunRecord

DEFAULT_LAST = 30  # runs of the group the noise and the level are learned from


@dataclass(slots=True)
class MetricCheck:
    metric: HistoryMetric
    value: float | None
    verdict: str
    reason: str
    judgement: Judgement | None = None
    history: list[StoredRun] = field(default_factory=list)  # the runs with this metric, oldest first
    baseline_runs: list[StoredRun] = field(default_factory=list)

    @property
    def series(self) -> list[float]:
        return [r.metrics[self.metric.name] for r in self.history]

    def to_dict(self) -> dict[str, Any]:
        j = self.judgement
        base = j.baseline if j is not None else None
        band = j.band if j is not None else None
        return {
            "metric": self.metric.name,
            "label": self.metric.label,
            "unit": self.metric.unit,
            "better": self.metric.better,
            "value": self.value,
            "verdict": self.verdict,
            "reason": self.reason,
            "baseline": base.location if base else None,
            "spread": base.spread if base else None,
            "band": list(band) if band else None,
            "delta_pct": j.delta_pct if j else None,
            "z": j.z if j else None,
            "level_changed_from": base.changed_from if base else None,
            "baseline_runs": [
                {"run_dir": r.run_dir, "run": r.run_key, "at": r.at} for r in self.baseline_runs
            ],
            "history": [{"at": r.at, "value": r.metrics[self.metric.name]} for r in self.history],
        }


@dataclass(slots=True)
class RunCheck:
    run_key: str
    group: Group | None
    note: str  # why there is no history, or that the stack changed
    metrics: list[MetricCheck]

    @property
    def regressed(self) -> list[MetricCheck]:
        return [m for m in self.metrics if m.verdict == REGRESSED]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run_key,
            "group": self.group.id if self.group else None,
            "group_label": self.group.label if self.group else None,
            "note": self.note,
            "regressed": [m.metric.name for m in self.regressed],
            "metrics": [m.to_dict() for m in self.metrics],
        }


def _history(store: HistoryStore, group: Group, run_dir: str | None, at: float, last: int) -> list[StoredRun]:
    """The group's complete runs strictly before ``at`` (never the run itself), the latest ``last``."""
    before = [r for r in store.runs(group_id=group.id) if r.complete and r.at < at and r.run_dir != run_dir]
    return before[-last:] if last > 0 else []


def _metric(m: HistoryMetric, value: float | None, runs: list[StoredRun], last: int) -> MetricCheck:
    if value is None or not math.isfinite(value):
        return MetricCheck(m, None, NOT_ENOUGH, "the run has no value for it")
    hist = [r for r in runs if m.name in r.metrics]
    j = judge([r.metrics[m.name] for r in hist], value, m.better, last=last, min_change=m.min_change)
    used = [hist[i] for i in j.baseline.runs] if j.baseline else []
    return MetricCheck(m, value, j.verdict, j.reason, j, hist, used)


def check_run(
    store: HistoryStore | None,
    inp: RunInput,
    run: RunRecord,
    *,
    run_dir: str | None,
    last: int = DEFAULT_LAST,
) -> RunCheck:
    series, stack = series_of(inp, run), stack_of(inp, run)
    values = values_of(run)
    group: Group | None = None
    runs: list[StoredRun] = []
    note = "no earlier run of this config, run, GPU and node count"
    if store is not None:
        group = matching_group(store, inp, run)
        if group is not None:
            runs = _history(store, group, run_dir, run_time(inp.results, run), last)
            note = f"group {group.id} began when the stack changed: {group.change}" if group.change else ""
        elif (other := store.latest_group_of_series(canonical(series))) is not None:
            note = (
                f"the stack changed against group {other.id}: {stack_change(other.stack, stack)}; "
                "its history does not count"
            )
    metrics = [_metric(m, values.get(m.name), runs, last) for m in checked_metrics(run)]
    return RunCheck(run.key, group, note, metrics)


def check_input(
    store: HistoryStore | None, inp: RunInput, *, run_dir: str | Path | None, last: int = DEFAULT_LAST
) -> list[RunCheck]:
    where = str(run_dir) if run_dir is not None else None
    return [check_run(store, inp, run, run_dir=where, last=last) for run in inp.results.runs]


__all__ = ["DEFAULT_LAST", "MetricCheck", "RunCheck", "check_input", "check_run"]
