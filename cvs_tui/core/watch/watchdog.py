"""The watchdog: when a run has ended, failed or hung, decided from per-rank watch state alone.

:func:`decide` is pure: it reads the :class:`NodeWatch` of every rank, the time ``now`` (the caller's
clock, injected) and the failure already chosen, and says what the run's outcome is so far and whether
to stop it. The rules:

- every rank exited or lost: the run is over (a lost node fails it, unless a failure was chosen);
- the first failure is the earliest of: a fatal signature or NaN abort (at the time it was seen), a
  non-zero exit or a lost node (at that node's last progress); that node is the root cause;
- after a failure the others get ``fail_grace_s`` to exit on their own, then are stopped as victims;
- with no failure, a rank that has made no progress for longer than its limit has hung: the compile
  allowance before its first step, then ``hang_factor`` × the p95 step time, at least ``hang_min_s``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from cvs_tui.core.events import NodeState, RunOutcome, StepEvent, StepKind
from cvs_tui.core.watch.options import RunOptions

WARMUP_STEPS = 3  # the first train steps' times (compile, caches) are not step times
P95_WINDOW = 200  # the p95 is taken over this many latest step times


@dataclass
class NodeWatch:
    """What the watchdog knows about one rank of the run being watched."""

    rank: int
    host: str
    last_progress: float  # when it last logged a step (the run's start before that)
    exit_code: int | None = None
    first_fatal_at: float | None = None
    fatal_line: int | None = None
    fatal_reason: str | None = None  # a fatal from outside the log (a kernel-log health finding)
    lost: str | None = None  # why its node became unreachable
    steps_seen: int = 0
    # the latest step times, all the hang rule reads (a long run must not keep every one)
    step_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=P95_WINDOW))
    state: NodeState = NodeState.STARTING
    stopping: bool = False  # cvs-tui is stopping it (a victim of another node, a hang, Ctrl-C)

    def on_step(self, ev: StepEvent, now: float) -> None:
        self.last_progress = now
        if ev.kind is StepKind.TRAIN:
            self.steps_seen += 1
            if ev.seconds is not None and math.isfinite(ev.seconds) and self.steps_seen > WARMUP_STEPS:
                self.step_seconds.append(ev.seconds)

    def on_fatal(self, line: int, now: float) -> None:
        self.first_fatal_at, self.fatal_line = now, line

    def on_external_fatal(self, reason: str, now: float) -> None:
        """A fatal seen beside the log (the node's kernel log): the same path as a fatal log line."""
        self.first_fatal_at, self.fatal_reason = now, reason

    @property
    def done(self) -> bool:
        """Exited, or its node is gone: nothing more will come from it."""
        return self.exit_code is not None or bool(self.lost)


@dataclass(frozen=True)
class Verdict:
    """The run's outcome as the watchdog decided it; ``at`` is when (the fail grace counts from it)."""

    outcome: RunOutcome
    reason: str
    root: int | None
    at: float


class Decision(NamedTuple):
    verdict: Verdict | None  # None: nothing wrong so far (complete if it ends now)
    stop: bool  # end the watch: stop whoever still runs


def decide(watches: Sequence[NodeWatch], now: float, opt: RunOptions, failure: Verdict | None) -> Decision:
    """One look at the run: ``failure`` is the verdict of an earlier look (None if there was none)."""
    if all(w.done for w in watches):
        lost = [w for w in watches if w.lost]
        if lost and failure is None:
            w = lost[0]
            failure = Verdict(RunOutcome.FAILED, f"node {w.rank} ({w.host}) lost: {w.lost}", w.rank, now)
        return Decision(failure, True)
    if failure is None and (culprit := first_failure(watches)) is not None:
        failure = Verdict(RunOutcome.FAILED, culprit[1], culprit[0], now)
    if failure is not None:
        return Decision(failure, now - failure.at > opt.fail_grace_s)
    hung = find_hang(watches, now, opt)
    if hung is not None:
        return Decision(Verdict(RunOutcome.HUNG, hung[1], hung[0], now), True)
    return Decision(None, False)


def first_failure(watches: Sequence[NodeWatch]) -> tuple[int, str] | None:
    """(rank, reason) of the earliest failure; None while no rank failed."""
    cands: list[tuple[float, int, str]] = []
    for w in watches:
        if w.first_fatal_at is not None:
            why = w.fatal_reason or f"node {w.rank}: fatal error at line {w.fatal_line}"
            cands.append((w.first_fatal_at, w.rank, why))
        elif w.exit_code not in (None, 0):
            cands.append((w.last_progress, w.rank, f"node {w.rank} exited with code {w.exit_code}"))
        elif w.lost:
            cands.append((w.last_progress, w.rank, f"node {w.rank} ({w.host}) lost: {w.lost}"))
    if not cands:
        return None
    _, rank, reason = min(cands)
    return rank, reason


def find_hang(watches: Sequence[NodeWatch], now: float, opt: RunOptions) -> tuple[int, str] | None:
    """(rank, reason) of the first running rank past its no-progress limit; None if none is."""
    for w in watches:
        if w.exit_code is not None:
            continue
        if w.steps_seen == 0:
            limit, what = opt.compile_allowance_s, "the first step (compile allowance)"
        else:
            limit = max(opt.hang_min_s, opt.hang_factor * p95(w.step_seconds))
            what = f"the next step ({opt.hang_factor:g} x p95 step time, at least {opt.hang_min_s:g} s)"
        if now - w.last_progress > limit:
            return w.rank, f"node {w.rank}: no progress for {now - w.last_progress:.0f} s waiting for {what}"
    return None


def p95(values: Sequence[float]) -> float:
    """The 95th percentile by rank (no interpolation); 0 for no values."""
    secs = sorted(values)
    return secs[min(len(secs) - 1, int(0.95 * len(secs)))] if secs else 0.0
