"""Node logs as event lists that hit the judge's edge cases, shared by the chunk-size test and the judge
goldens (``tests/fixtures/judge/``): rising step numbers with every rule's edge, step numbers that
repeat, go back and restart, a log without train steps, and step lines without a loss."""

from __future__ import annotations

import dataclasses
import math

from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    EvalDialect,
    EvalEvent,
    LogEvent,
    StepEvent,
    StepKind,
)


def step(s: int, line: int, sec: float | None, kind: StepKind = StepKind.TRAIN, **kw: object) -> StepEvent:
    loss = kw.pop("loss", 5.0 - s / 100)
    return StepEvent(step=s, loss=loss, line=line, kind=kind, seconds=sec, **kw)  # type: ignore[arg-type]


def edge() -> list[LogEvent]:
    """Rising step numbers with every rule's edge: rampup and profiler records, steps without seconds or
    with zero or NaN seconds, seconds stalls (one alone, two within LINE_LAG), a log gap on the
    timestamps, checkpoint saves with and without a step, an eval, NaN and inf losses, records without
    tokens or TFLOP/s, and a tie at the median."""
    out: list[LogEvent] = []
    t, line = 1_000.0, 1
    for s in range(300):
        sec: float | None = 0.02 + (s % 7) * 0.001
        if s == 10:
            sec = None
        elif s == 12:
            sec = 0.0
        elif s == 14:
            sec = math.nan
        elif s in (60, 150, 152):
            sec = 9.0
        # step 150's stall leaves no mark on the clock: its wall interval comes from its neighbours
        t += sec if sec is not None and math.isfinite(sec) and s != 150 else 0.02
        if s == 200:
            t += 30.0  # a log gap: the clock jumps, the step's seconds do not
        kind = StepKind.RAMPUP if s == 5 else StepKind.PROFILER if s in (90, 94) else StepKind.TRAIN
        kw: dict[str, object] = {"timestamp": t}
        if s % 11:
            kw["tokens_per_device"] = 512.0
            kw["tflops_per_device"] = 0.04
        if s % 13 == 0:
            kw["total_weights"] = 256.0
        if s == 120:
            kw["loss"] = math.nan
        if s == 121:
            kw["loss"] = math.inf
        out.append(step(s, line, sec, kind, **kw))
        if s == 40:
            out.append(CheckpointEvent(action=CheckpointAction.SAVE_START, step=None, line=line))
        if s == 80:
            out.append(CheckpointEvent(action=CheckpointAction.SAVE_START, step=80, line=line))
        if s == 100:
            out.append(EvalEvent(step=100, loss=4.2, dialect=EvalDialect.CURRENT, line=line, timestamp=t))
        line += 2
    return out


def repeated() -> list[LogEvent]:
    """Step numbers 20 and 21 logged twice (the second record with other figures), steps without or with
    bad seconds, rampup and profiler records, a save naming no step, a stall."""
    out: list[LogEvent] = []
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
        out.append(step(s, line, sec, kind, tokens_per_device=512.0, tflops_per_device=0.04))
        if s in (20, 21):
            out.append(step(s, line, 0.05, tokens_per_device=600.0, tflops_per_device=0.05, loss=3.0))
        if s == 25:
            out.append(CheckpointEvent(action=CheckpointAction.SAVE_START, step=None, line=line))
        line += 1
    return out


def goes_back() -> list[LogEvent]:
    """Steps 0..39, then 30..59 again (a restart from a checkpoint), with a save in between."""
    out: list[LogEvent] = [
        step(s, s + 1, 0.02 + 0.001 * (s % 3), tokens_per_device=512.0, timestamp=100.0 + s)
        for s in range(40)
    ]
    out += [
        step(
            s, s + 41, 0.03 + 0.002 * (s % 5), tokens_per_device=512.0, loss=4.0 - s / 50, timestamp=200.0 + s
        )
        for s in range(30, 60)
    ]
    out.insert(45, CheckpointEvent(action=CheckpointAction.SAVE_START, step=33, line=44))
    return out


def restart_stall() -> list[LogEvent]:
    """A stall at step 25, then steps 10..44 logged again with other losses."""
    out: list[LogEvent] = [
        step(s, s + 1, 9.0 if s == 25 else 0.02, tokens_per_device=512.0) for s in range(50)
    ]
    out += [step(s, s + 60, 0.025, tokens_per_device=512.0, loss=1.0) for s in range(10, 45)]
    return out


def no_train() -> list[LogEvent]:
    return [step(s, s + 1, 0.02, StepKind.RAMPUP) for s in range(8)]


def no_loss() -> list[LogEvent]:
    """edge() with every step line cut before its loss (AMD maxtext-slurm's README form)."""
    return [dataclasses.replace(e, loss=None) if isinstance(e, StepEvent) else e for e in edge()]


def some_loss() -> list[LogEvent]:
    """goes_back() with the loss left off every fourth step line, and off the restart's records of steps
    30..34 (their loss is the first record's)."""
    out: list[LogEvent] = []
    for i, e in enumerate(goes_back()):
        cut = isinstance(e, StepEvent) and (e.step % 4 == 1 or (i > 40 and 30 <= e.step <= 34))
        out.append(dataclasses.replace(e, loss=None) if cut else e)
    return out


# name: each node's events
CASES: dict[str, list[list[LogEvent]]] = {
    "edge": [edge()],
    "repeated": [repeated()],
    "goes_back": [goes_back()],
    "restart_stall": [restart_stall()],
    "two_nodes_mixed": [edge(), repeated()],
    "two_back": [goes_back(), restart_stall()],
    "no_train": [no_train()],
    "no_loss": [no_loss()],
    "some_loss": [some_loss()],
}
# convergence targets each case is judged with (0: off)
TARGETS = (0.0, 4.0, 0.1)
