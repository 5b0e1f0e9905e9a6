"""The column judge (what `analyze` runs over a node's step records held as arrays) against the event judge
of a live run, on every MaxText fixture and on events made to hit its edge cases: the same window steps,
excluded steps with their reasons, stalls, per-node figures and loss metrics."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES
from _judge_events import node_window

from cvs_tui.core.events import CheckpointAction, CheckpointEvent, LogEvent, StepEvent, StepKind
from cvs_tui.core.judge.clock import file_clock, file_line_clock
from cvs_tui.core.judge.column_window import column_window
from cvs_tui.core.judge.columns import StepCollector, collect
from cvs_tui.core.offline import collect_log_file, parse_log_file

LOGS = sorted(FIXTURES.glob("*.log"))


def _same_window(
    events: list[LogEvent], clock: dict[int, float] | None, line_clock: Mapping[int, float] | None
) -> None:
    exact = node_window(events, clock)
    cw = column_window(collect(events), line_clock)
    assert cw.steps.tolist() == exact.steps
    assert cw.excluded == exact.excluded
    if exact.stalls is None:
        assert cw.stalls is None
    else:
        assert cw.stalls == exact.stalls


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_the_column_window_is_the_event_window(log: Path) -> None:
    events, _ = parse_log_file(log, None)
    clock = file_clock(log)
    _same_window(events, clock, file_line_clock(log))
    _same_window(events, clock, clock)  # a dict clock reads the same
    _same_window(events, None, None)  # no clock: the events' own times, or step numbers


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_collecting_a_log_keeps_every_step_record(log: Path) -> None:
    events, lines = parse_log_file(log, None)
    collected, n = collect_log_file(log, None)
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert n == lines and len(collected.columns) == len(steps)
    for i, e in enumerate(steps):
        got = collected.columns.event(i)
        assert (got.step, got.line, got.kind) == (e.step, e.line, e.kind)
        for f in ("loss", "seconds", "tflops_per_device", "tokens_per_device", "total_weights", "timestamp"):
            a, b = getattr(got, f), getattr(e, f)
            assert a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b)), f
    assert [e for e in collected.slim_events() if not isinstance(e, StepEvent)] == [
        e for e in events if not isinstance(e, StepEvent)
    ]


def _step(step: int, line: int, seconds: float | None, kind: StepKind = StepKind.TRAIN) -> StepEvent:
    return StepEvent(step=step, loss=5.0 - step / 100, line=line, kind=kind, seconds=seconds)


def test_edge_cases_of_the_window_match() -> None:
    """Repeated step numbers, steps without seconds or with non-positive or NaN seconds, rampup and
    profiler steps, a save naming no step, a stall, all fed in odd chunks."""
    events: list[LogEvent] = []
    line = 1
    for s in range(60):
        sec: float | None = 0.02
        if s == 10:
            sec = None
        elif s == 12:
            sec = 0.0
        elif s == 14:
            sec = math.nan
        elif s == 30:
            sec = 9.0
        kind = StepKind.RAMPUP if s == 5 else StepKind.PROFILER if s in (40, 44) else StepKind.TRAIN
        events.append(_step(s, line, sec, kind))
        if s in (20, 21):
            events.append(_step(s, line, 0.05))  # a repeated step number
        if s == 25:
            events.append(CheckpointEvent(action=CheckpointAction.SAVE_START, step=None, line=line))
        line += 1
    exact = node_window(events, None)
    collector = StepCollector()
    for a in range(0, len(events), 7):
        collector.add(events[a : a + 7])
    cw = column_window(collector.finish(), None)
    assert cw.steps.tolist() == exact.steps and cw.excluded == exact.excluded
    assert exact.stalls is not None and [s.step for s in exact.stalls.stalls] == [30]
    assert cw.stalls == exact.stalls
