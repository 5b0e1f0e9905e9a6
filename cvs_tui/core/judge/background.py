"""Background work of one node's log as wall-clock intervals, for stall attribution.

* ``save``: a checkpoint save of step S, from its first line (``Waiting for step S to finish before
  checkpoint``, ``Saving checkpoint at step S``, the blocking part's finish minus its seconds) to
  orbax's ``Finished save (blocking + background) in X seconds`` / ``Finished async_save ...`` /
  MaxText's ``Saved a checkpoint at step S`` (its time minus X when the start was not logged). Without
  a finish line (a non-primary host) it ends at the last line of the save that was logged.
* ``save_wait``: orbax's ``Waiting for previous save to complete took X seconds``: [t - X, t].
* ``eval``: ``Starting eval after train step S`` to the last eval line of step S.
* ``restore``: a restore start to ``Finished load in X seconds`` / ``Finished restoring ...``.
* ``profiler``: consecutive profiler activation/deactivation steps pair into a window.

Times come from ``clock`` (``judge.clock.line_clock``: the header time of the event's line) and else
from the event's own ``timestamp``; an interval whose log printed no time keeps ``None`` and is matched
by step number only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Literal

from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    EvalDialect,
    EvalEvent,
    EvalStartEvent,
    LogEvent,
    StepEvent,
    StepKind,
)

IntervalKind = Literal["save", "save_wait", "eval", "restore", "profiler"]


@dataclass(frozen=True, slots=True)
class Interval:
    """Background work on the log's clock: [start, end] in seconds (None: the log printed no time)."""

    kind: IntervalKind
    label: str  # "the async save of step 0 (background save 47.4 s)"
    start: float | None
    end: float | None
    step: int | None  # the step the work belongs to, when the log names it
    line: int  # first line of the work in the log


_SAVE_START = (CheckpointAction.SAVE_WAIT, CheckpointAction.SAVE_START)


def secs(x: float) -> str:
    """Seconds as the judge's messages print them (3 significant digits below 100 s)."""
    return f"{x:.3g} s" if x < 100 else f"{x:.0f} s"


@dataclass(slots=True)
class _Span:
    line: int
    start: float | None = None
    end: float | None = None
    seconds: float | None = None  # the whole operation, as the finish line reports it
    blocking: float | None = None
    is_async: bool = False
    done: bool = False

    def widen(self, t: float | None) -> None:
        if t is None:
            return
        self.start = t if self.start is None else min(self.start, t)
        self.end = t if self.end is None else max(self.end, t)


def _checkpoint(
    ev: CheckpointEvent,
    t: float | None,
    saves: dict[int, _Span],
    restores: list[tuple[int | None, _Span]],
    out: list[Interval],
) -> None:
    """One checkpoint line at time ``t``: a save's or a restore's span grows (``saves`` by step,
    ``restores`` in order); a wait for the previous save is an interval of its own."""
    a = ev.action
    if a is CheckpointAction.WAIT_PREVIOUS and ev.seconds is not None:
        start = None if t is None else t - ev.seconds
        label = f"the wait for the previous checkpoint save ({secs(ev.seconds)})"
        out.append(Interval("save_wait", label, start, t, None, ev.line))
    elif a in (*_SAVE_START, CheckpointAction.SAVE_BLOCKING_DONE, CheckpointAction.SAVE_DONE):
        if ev.step is None:
            return
        span = saves.setdefault(ev.step, _Span(ev.line))
        span.widen(t)
        if a is CheckpointAction.SAVE_START and ev.dialect == "maxtext":
            span.is_async = True  # "Started an asynchronous checkpoint save for step N"
        if a is CheckpointAction.SAVE_BLOCKING_DONE and ev.seconds is not None:
            span.blocking = ev.seconds
            span.widen(None if t is None else t - ev.seconds)
        if a is CheckpointAction.SAVE_DONE:
            span.done = True
            if ev.seconds is not None:
                span.seconds = ev.seconds
                span.widen(None if t is None else t - ev.seconds)
    elif a is CheckpointAction.RESTORE_START:
        span = _Span(ev.line)
        span.widen(t)
        restores.append((ev.step, span))
    elif a is CheckpointAction.RESTORE_DONE and ev.dialect != "standard_logger":
        if not restores or restores[-1][1].done:
            restores.append((ev.step, _Span(ev.line)))
        span = restores[-1][1]
        span.done = True
        span.seconds = ev.seconds
        span.widen(t)
        if ev.seconds is not None and t is not None:
            span.widen(t - ev.seconds)


def _spans(
    saves: dict[int, _Span], restores: list[tuple[int | None, _Span]], evals: dict[int, _Span]
) -> list[Interval]:
    """The intervals of the saves, restores and evals, once every line was read."""
    out: list[Interval] = []
    for step, span in saves.items():
        if span.seconds is not None:
            detail = (
                f"background save {secs(span.seconds)}" if span.is_async else f"save {secs(span.seconds)}"
            )
        elif span.blocking is not None:
            detail = f"blocking part {secs(span.blocking)}, no finish logged"
        else:
            detail = "no finish logged"
        kind = "async save" if span.is_async else "checkpoint save"
        out.append(
            Interval("save", f"the {kind} of step {step} ({detail})", span.start, span.end, step, span.line)
        )
    for restored, span in restores:
        what = (
            f"the checkpoint restore of step {restored}" if restored is not None else "the checkpoint restore"
        )
        detail = f" ({secs(span.seconds)})" if span.seconds is not None else ""
        out.append(Interval("restore", what + detail, span.start, span.end, restored, span.line))
    for step, span in evals.items():
        took = f" ({secs(span.end - span.start)})" if span.start is not None and span.end is not None else ""
        out.append(
            Interval("eval", f"the eval after step {step}{took}", span.start, span.end, step, span.line)
        )
    return out


def background_intervals(
    events: Sequence[LogEvent], clock: Mapping[int, float] | None = None
) -> list[Interval]:
    """The background intervals of one node's events (log order), sorted by first line."""

    def when(ev: CheckpointEvent | EvalEvent | EvalStartEvent | StepEvent) -> float | None:
        if clock is not None and (t := clock.get(ev.line)) is not None:
            return t
        return ev.timestamp

    saves: dict[int, _Span] = {}
    restores: list[tuple[int | None, _Span]] = []
    evals: dict[int, _Span] = {}
    out: list[Interval] = []
    profiler: StepEvent | None = None
    eval_step: int | None = None
    for ev in events:
        if isinstance(ev, CheckpointEvent):
            _checkpoint(ev, when(ev), saves, restores, out)
        elif isinstance(ev, EvalStartEvent):
            eval_step = ev.step
            evals.setdefault(ev.step, _Span(ev.line)).widen(when(ev))
        elif isinstance(ev, EvalEvent):
            step = ev.step if ev.dialect is not EvalDialect.RUNNING else eval_step
            if step is not None:
                evals.setdefault(step, _Span(ev.line)).widen(when(ev))
        elif isinstance(ev, StepEvent) and ev.kind is StepKind.PROFILER:
            if profiler is None:
                profiler = ev
            else:
                label = f"the profiler window of steps {profiler.step}-{ev.step}"
                out.append(
                    Interval("profiler", label, when(profiler), when(ev), profiler.step, profiler.line)
                )
                profiler = None
    if profiler is not None:  # never deactivated: the window runs to the end of the log
        t = when(profiler)
        label = f"the profiler window from step {profiler.step}"
        out.append(Interval("profiler", label, t, t, profiler.step, profiler.line))
    out += _spans(saves, restores, evals)
    out.sort(key=lambda iv: iv.line)
    return out


def background(
    others: list[tuple[int, LogEvent]],
    profiler: Sequence[tuple[int, LogEvent]],
    clock: Mapping[int, float] | None,
) -> list[Interval]:
    """background_intervals of a node's step table: its other events (with the number of step records
    before each) and its profiler step records (record, event), merged in log order."""
    keyed: list[tuple[int, int, int, LogEvent]] = [(p, 0, k, e) for k, (p, e) in enumerate(others)]
    keyed += [(i, 1, 0, e) for i, e in profiler]
    keyed.sort(key=itemgetter(0, 1, 2))
    return background_intervals([e for *_, e in keyed], clock)
