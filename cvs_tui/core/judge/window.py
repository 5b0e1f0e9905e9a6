"""The steady-state window: which of a node's train steps the performance metrics may use, and why the
others are left out (see ``WINDOW_DEFINITION``, shown verbatim in report.html and docs/metrics.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter

from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    EvalDialect,
    EvalEvent,
    EvalStartEvent,
    LogEvent,
)
from cvs_tui.core.judge.columns import PROFILER, TRAIN
from cvs_tui.core.judge.stalls import StallReport

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
    "an eval, a profiler boundary or a rampup step. An event naming step S (a save, an eval, its running "
    "eval steps) drops S, S+1 (the work runs after S's dispatch, inside S+1's interval) and S+2 (pipelining "
    "hands it a catch-up interval that is too short); an event naming no step drops the three steps after "
    "the "
    "last step line written before it (MaxText writes step lines at least one step late). A stall is "
    "dropped too: a step whose seconds exceed max(median + 6 x 1.4826 x MAD, 3 x median, median + 1 s) of "
    "the node's own post-warm-up steps (see 'Stalls and goodput'). The perf "
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


# a step record the window drops on its own: (record, step, kind, line), each not a timed train step
Special = tuple[int, int, int, int]


def drops(
    special: list[Special],
    others: list[tuple[int, LogEvent]],
    step_at: Callable[[int], int],
    excluded: dict[int, str],
) -> None:
    """The window's drops for checkpoint saves, evals, profiler boundaries, rampup steps and train steps
    without seconds, in log order (the first reason of a step wins),
    ``special`` the records that are not timed train steps, ``others`` the other events with the number
    of step records before each, ``step_at(i)`` the step number of record ``i``."""
    items: list[tuple[int, int, int, LogEvent | Special]] = [(p, 0, k, e) for k, (p, e) in enumerate(others)]
    items += [(sp[0], 1, 0, sp) for sp in special]
    items.sort(key=itemgetter(0, 1, 2))

    def drop(s: int, reason: str) -> None:
        excluded.setdefault(s, reason)

    eval_step: int | None = None
    for pos, _is_step, _k, ev in items:
        if isinstance(ev, tuple):
            _, s, kd, line = ev
            if kd == TRAIN:
                drop(s, "no seconds on the step line")
            else:
                what = "profiler boundary" if kd == PROFILER else "rampup step"
                for k in range(3):
                    drop(s + k, f"{what} at step {s} (line {line})")
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
            base = step_at(pos - 1) if pos > 0 else -1  # the last step line before the event
            reason = f"interval holds {_article(what)} {what} (line {ev.line}, after the line of step {base})"
            for k in (1, 2, 3):
                drop(base + k, reason)


__all__ = ["MIN_CLEAN_STEPS", "WARMUP_STEPS", "WINDOW_DEFINITION", "NodeWindow", "Special", "drops"]


def _article(noun: str) -> str:
    return "an" if noun[:1] in "aeiou" else "a"
