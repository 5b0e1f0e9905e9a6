"""The steady-state window: which of a node's train steps the performance metrics may use, and why the
others are left out (see ``WINDOW_DEFINITION``, shown verbatim in report.html and docs/metrics.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING

from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    EvalDialect,
    EvalEvent,
    EvalStartEvent,
    LogEvent,
    ProfilerMarkEvent,
    TflopsPerStepEvent,
)
from cvs_tui.core.judge.background import background
from cvs_tui.core.judge.definitions import DevicePeak
from cvs_tui.core.judge.stalls import StallReport, stream_stalls
from cvs_tui.core.judge.steady import STEADY_BAND, Chunk, step_rates, window_drops_chunked
from cvs_tui.core.judge.stream import Arrays, StreamLog
from cvs_tui.core.judge.table import PROFILER, TRAIN

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# MaxText's first step timings include compilation and tracing; drop steps numbered below this and the
# first this-many logged steps (a resumed run starts at its checkpoint step and warms up again).
WARMUP_STEPS = 3
# Fewest clean steps a perf metric may be computed from. Sized for CPU-size and smoke runs (a 20-step run
# with one checkpoint keeps about 10; a 10-step production log with one stall keeps 4 once the stall's
# and the warm-up's disturbed neighbours are out, judge.steady); a production run keeps hundreds. Below it
# the perf metrics are inconclusive, never a number.
MIN_CLEAN_STEPS = 4
WINDOW_DEFINITION = (
    f"Steady-state window: train steps with seconds, minus warm-up (step numbers below {WARMUP_STEPS} and "
    f"the first {WARMUP_STEPS} logged steps), minus every step whose host interval holds a checkpoint save, "
    "an eval, a profiler boundary (MaxText's, or an nsys capture range starting or ending) or a rampup "
    "step. An event naming step S (a save, an eval, its running eval steps) drops S, S+1 (the work runs "
    "after S's dispatch, inside S+1's interval) and S+2 (pipelining hands it a catch-up interval that is "
    "too short); an event naming no step drops the three steps after the last step line written before it "
    "(MaxText writes step lines at least one step late). A stall is dropped too: a step whose seconds "
    "exceed max(median + 6 x 1.4826 x MAD, 3 x median, median + 1 s) of the node's own post-warm-up steps "
    "(see 'Stalls and goodput'). So is a step above the device's peak TFLOP/s, and a step beside a dropped "
    f"one whose seconds are outside the node's steady band (at least 1/{STEADY_BAND:g}..{STEADY_BAND:g} x "
    "the median and 3 x 1.4826 x MAD: time moves between neighbouring steps under asynchronous dispatch; "
    "see 'Steady state under asynchronous dispatch'). The perf "
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
            base = step_at(pos - 1) if pos > 0 else -1  # the last step line before the event
            reason = f"interval holds {_article(what)} {what} (line {ev.line}, after the line of step {base})"
            for k in (1, 2, 3):
                drop(base + k, reason)


@dataclass(slots=True)
class Survey:
    """One pass over a node's records: what the window drops on its own and counts."""

    special: list[Special] = field(default_factory=list)  # records that are not timed train steps
    profiler: list[int] = field(default_factory=list)
    warm: list[int] = field(default_factory=list)  # steps dropped as warm-up, in log order
    timed: int = 0  # train records with seconds
    train: int = 0
    last_train: int | None = None


def survey(log: StreamLog) -> Survey:
    import numpy as np

    sv = Survey()
    for lo, c in log.chunks("step", "line", "kind", "has_seconds"):
        step, kind = c["step"], c["kind"]
        train = kind == TRAIN
        timed = train & c["has_seconds"]
        sp = np.flatnonzero(~timed)
        sv.special += zip(
            *((sp + lo).tolist(), step[sp].tolist(), kind[sp].tolist(), c["line"][sp].tolist()), strict=True
        )
        sv.profiler += (np.flatnonzero(kind == PROFILER) + lo).tolist()
        ts = step[timed]
        warm = (ts < WARMUP_STEPS) | (np.arange(sv.timed, sv.timed + len(ts)) < WARMUP_STEPS)
        sv.warm += ts[warm].tolist()
        sv.timed += len(ts)
        sv.train += int(train.sum())
        if train.any():
            sv.last_train = int(step[train][-1])
    return sv


@dataclass(slots=True)
class StreamWindow:
    """A node's window without its step list (the figures' pass writes it): ``keys`` the steps excluded
    before the seconds check (a window record is the first timed train record of a step not among them,
    with positive finite seconds)."""

    excluded: dict[int, str]
    stalls: StallReport | None
    keys: npt.NDArray[np.int64]


def stream_window(log: StreamLog, sv: Survey, device: DevicePeak | None = None) -> StreamWindow:
    """A node's window (see WINDOW_DEFINITION): the steps it drops, with why, and its stalls. ``device``:
    the device and its peak TFLOP/s, for the steady-state rule (``judge.steady``; None: no step is
    impossible)."""
    import numpy as np

    excluded: dict[int, str] = {}
    drops(sv.special, log.s.others, log.step_at, excluded)
    stalls: StallReport | None = None
    if sv.timed:
        for s in sv.warm:
            excluded[s] = "warm-up (compilation and first steps)"
        prof = list(zip(sv.profiler, log.events(sv.profiler), strict=True))
        stalls = stream_stalls(log, background(log.s.others, prof, log.clock), WARMUP_STEPS)
        for s, reason in stalls.exclusions().items():
            excluded.setdefault(s, reason)
        for s, reason in _steady(log, excluded, stalls, device).items():
            excluded.setdefault(s, reason)
    keys = np.sort(np.fromiter(excluded, np.int64, len(excluded)))
    seen = log.seen()
    for _, c in log.chunks("step", "kind", "seconds", "has_seconds"):
        first = log.firsts(
            seen, c["step"], (c["kind"] == TRAIN) & c["has_seconds"] & ~np.isin(c["step"], keys)
        )
        v = c["seconds"][first]
        good = np.isfinite(v) & (v > 0)
        for s in c["step"][first][~good].tolist():
            excluded[s] = "non-positive or non-finite seconds"
    every = np.fromiter(excluded, np.int64, len(excluded))
    logged = np.zeros(len(every), np.bool_)
    for _, c in log.chunks("step"):
        logged |= np.isin(every, c["step"])
    named = set(every[logged].tolist())  # a reason only for a step that was logged
    kept = {s: r for s, r in sorted(excluded.items()) if s in named}
    return StreamWindow(kept, stalls, keys)


def _steady(
    log: StreamLog, excluded: dict[int, str], stalls: StallReport, device: DevicePeak | None
) -> dict[int, str]:
    """The steady-state rule (``judge.steady``) over the first timed train record of each step, in log
    order, a chunk at a time (the rule holds ``steady.CONTEXT`` records of each neighbouring chunk)."""
    import numpy as np

    keys = np.sort(np.fromiter(excluded, np.int64, len(excluded)))
    tps = next((e.total_tflops for _, e in log.s.others if isinstance(e, TflopsPerStepEvent)), None)
    seen = log.seen()

    def chunks() -> Iterator[Chunk]:
        for _, c in log.chunks("step", "kind", "seconds", "has_seconds", "tflops", "has_tflops"):
            t = log.firsts(seen, c["step"], (c["kind"] == TRAIN) & c["has_seconds"])
            steps, sec = c["step"][t], c["seconds"][t]
            with np.errstate(invalid="ignore"):
                in_window = ~np.isin(steps, keys) & np.isfinite(sec) & (sec > 0)
            yield steps, sec, in_window, step_rates(sec, c["tflops"][t], c["has_tflops"][t], tps)

    peak, name = (device.tflops, device.name) if device is not None else (None, "")
    return window_drops_chunked(chunks(), stalls.median_seconds, stalls.spread_seconds, peak, name)


def window_mask(
    log: StreamLog, seen: npt.NDArray[np.uint8] | None, c: Arrays, keys: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """The window records of a chunk (see StreamWindow): the first timed train record of each step not
    excluded, when its seconds are positive and finite."""
    import numpy as np

    sec = c["seconds"]
    with np.errstate(invalid="ignore"):
        good = np.isfinite(sec) & (sec > 0)
    first = log.firsts(seen, c["step"], (c["kind"] == TRAIN) & c["has_seconds"] & ~np.isin(c["step"], keys))
    return first & good


__all__ = [
    "MIN_CLEAN_STEPS",
    "WARMUP_STEPS",
    "WINDOW_DEFINITION",
    "NodeWindow",
    "Special",
    "StreamWindow",
    "Survey",
    "drops",
    "stream_window",
    "survey",
    "window_mask",
]


def _article(noun: str) -> str:
    return "an" if noun[:1] in "aeiou" else "a"
