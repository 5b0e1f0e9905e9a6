"""The steady-state window: which of a node's train steps the performance metrics may use, and why the
others are left out (see ``WINDOW_DEFINITION``, shown verbatim in report.html and docs/metrics.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    EvalDialect,
    EvalEvent,
    EvalStartEvent,
    LogEvent,
    ProfilerMarkEvent,
    StepEvent,
    StepKind,
)
from cvs_tui.core.judge.background import background_intervals
from cvs_tui.core.judge.stalls import StallReport, find_stalls

# MaxText's first step timings include compilation and tracing; drop steps numbered below this and the
# first this-many logged steps (a resumed run starts at its checkpoint step and warms up again).
WARMUP_STEPS = 3
# Fewest clean steps a perf metric may be computed from. Sized for CPU-size and smoke runs (a 20-step run
# with one checkpoint keeps about 10); a production run keeps hundreds. Below it the perf metrics are
# inconclusive, never a number.
MIN_CLEAN_STEPS = 5
WINDOW_DEFINITION = (
    f"Steady-state window: train steps with seconds, minus warm-up (step numbers below {WARMUP_STEPS} and "
    f"the first {WARMUP_STEPS} logged steps), minus every step whose host interval holds a checkpoint save, "
    "an eval, a profiler boundary (MaxText's, or an nsys capture range starting or ending) or a rampup "
    "step. An event naming step S (a save, an eval, its running eval steps) drops S, S+1 (the work runs "
    "after S's dispatch, inside S+1's interval) and S+2 (pipelining hands it a catch-up interval that is "
    "too short); an event naming no step drops the three steps after the last step line written before it "
    "(MaxText writes step lines at least one step late). A stall is dropped too: a step whose seconds "
    "exceed max(median + 6 x 1.4826 x MAD, 3 x median, median + 1 s) of the node's own post-warm-up steps "
    "(see 'Stalls and goodput'). The perf "
    f"metrics use the steps clean on every node; fewer than {MIN_CLEAN_STEPS} of them makes every perf "
    "metric inconclusive (this minimum suits CPU-size and smoke runs; production runs keep hundreds)."
)


@dataclass(slots=True)
class NodeWindow:
    """One node's clean steps and the steps it dropped, with why."""

    steps: list[int] = field(default_factory=list)
    excluded: dict[int, str] = field(default_factory=dict)
    stalls: StallReport | None = None  # None: the node logged no timed train step


def _is_save(ev: CheckpointEvent) -> bool:
    return ev.action in (
        CheckpointAction.SAVE_WAIT,
        CheckpointAction.SAVE_START,
        CheckpointAction.SAVE_BLOCKING_DONE,
        CheckpointAction.SAVE_DONE,
        CheckpointAction.WAIT_PREVIOUS,
    )


def node_window(events: Sequence[LogEvent], clock: Mapping[int, float] | None = None) -> NodeWindow:
    """Clean steps of one node's log: see WINDOW_DEFINITION. ``clock`` is the log's line clock
    (``judge.clock.line_clock``), which places stalls in time for their attribution."""
    win = NodeWindow()
    excluded = win.excluded

    def drop(step: int, reason: str) -> None:
        excluded.setdefault(step, reason)

    last_step: int | None = None
    timed: list[StepEvent] = []
    eval_step: int | None = None  # the train step of the eval in progress (running evals name none)
    for ev in events:
        if isinstance(ev, StepEvent):
            if ev.kind is StepKind.TRAIN:
                if ev.seconds is None:
                    drop(ev.step, "no seconds on the step line")
                else:
                    timed.append(ev)
            else:
                # A profiler boundary or rampup step stalls its own interval and the next ones.
                what = "profiler boundary" if ev.kind is StepKind.PROFILER else "rampup step"
                for k in range(3):
                    drop(ev.step + k, f"{what} at step {ev.step} (line {ev.line})")
            last_step = ev.step
            continue
        what = ""
        explicit: int | None = None
        if isinstance(ev, CheckpointEvent) and _is_save(ev):
            what, explicit = "checkpoint save", ev.step
        elif isinstance(ev, EvalStartEvent):
            what, explicit = "eval", ev.step
            eval_step = ev.step
        elif isinstance(ev, EvalEvent):
            what = "eval"
            explicit = ev.step if ev.dialect is not EvalDialect.RUNNING else eval_step
        elif isinstance(ev, ProfilerMarkEvent):
            what = "profiler boundary"
        if not what:
            continue
        if explicit is not None:
            # the work runs after S's dispatch, inside S+1's interval; pipelining then hands S+2 a
            # catch-up interval that is too short
            reason = f"interval near {_article(what)} {what} at step {explicit} (line {ev.line})"
            for k in range(3):
                drop(explicit + k, reason)
        else:
            # no step named: go by position (a step line is written at least one step late)
            base = -1 if last_step is None else last_step
            reason = f"interval holds {_article(what)} {what} (line {ev.line}, after the line of step {base})"
            for k in (1, 2, 3):
                drop(base + k, reason)
    for i, ev in enumerate(timed):
        if ev.step < WARMUP_STEPS or i < WARMUP_STEPS:
            excluded[ev.step] = "warm-up (compilation and first steps)"
    if timed:
        steps = [e for e in events if isinstance(e, StepEvent)]
        win.stalls = find_stalls(steps, background_intervals(events, clock), clock=clock, warmup=WARMUP_STEPS)
        for step, reason in win.stalls.exclusions().items():
            excluded.setdefault(step, reason)
    seen: set[int] = set()
    for ev in timed:
        if ev.step in excluded or ev.step in seen:
            continue
        if not (math.isfinite(ev.seconds or 0.0) and (ev.seconds or 0.0) > 0):
            excluded[ev.step] = "non-positive or non-finite seconds"
            continue
        seen.add(ev.step)
        win.steps.append(ev.step)
    # keep only exclusions of steps that were actually logged, or reasons would name phantom steps
    logged = {e.step for e in events if isinstance(e, StepEvent)}
    win.excluded = {s: r for s, r in sorted(excluded.items()) if s in logged}
    return win


__all__ = ["MIN_CLEAN_STEPS", "WARMUP_STEPS", "WINDOW_DEFINITION", "NodeWindow", "node_window"]


def _article(noun: str) -> str:
    return "an" if noun[:1] in "aeiou" else "a"
