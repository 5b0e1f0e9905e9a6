"""Stalls past their gate while the run goes on: the judge's stall rule on the step times so far.

The stall metrics (``training.stall_count``, ``stall_seconds``, ``longest_stall_seconds``) are judged
when the run ends (:mod:`.stalls`, :mod:`.goodput`). A gate on one of them (a ``max`` spec in the
threshold cell, enforced) can be known to fail long before: :class:`LiveStalls` keeps each node's
judged step times (the same selection: train steps with finite positive seconds, past the warm-up,
the first record of a step number), finds stalls with the same limit (:func:`.stalls.stall_limit` over
the median and MAD so far) and combines the nodes as :func:`.stalls.run_stalls` does (one count per
step number, its largest excess). A step still running counts too: a node silent for longer than the
limit has a stall of at least its silence so far (the final judge sees the same time as the step's
seconds, or as a log gap). The first gate it breaks is told with :func:`.verdicts.check`'s words, the
words of the verdict the judge will give when the run ends.

Live figures are an estimate of the final ones (the median so far, not the run's): they only say the
run is failing; the judged record decides.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from cvs_tui.core.config.blocks import ThresholdKind, ThresholdSpec
from cvs_tui.core.judge.stalls import MAD_SCALE, MIN_BASELINE_STEPS, stall_limit
from cvs_tui.core.judge.verdicts import check

STALL_GATES = ("training.stall_count", "training.stall_seconds", "training.longest_stall_seconds")
LIVE_WINDOW = 2000  # judged step times per node the live median and MAD are taken over
REFRESH_STEPS = 32  # the limit is taken again after this many steps (and at every step past it)


@dataclass
class _Node:
    secs: deque[float] = field(default_factory=lambda: deque(maxlen=LIVE_WINDOW))
    timed: int = 0  # train steps with a time seen (the first WARMUP of them are not judged)
    last_step: int = -1  # the highest step number judged (a repeated number is not judged again)
    limit: float | None = None
    median: float = 0.0
    since_refresh: int = 0

    def refresh(self) -> None:
        if len(self.secs) < MIN_BASELINE_STEPS:
            self.limit = None
            return
        m = statistics.median(self.secs)
        spread = MAD_SCALE * statistics.median(abs(x - m) for x in self.secs)
        self.median, self.limit, self.since_refresh = m, stall_limit(m, spread), 0


@dataclass(frozen=True)
class GateBroken:
    """A stall gate the run has broken so far: the node whose stall broke it and the judge's words."""

    node: int
    step: int
    metric: str
    actual: float
    message: str


class LiveStalls:
    """The run's stalls so far against the cell's enforced stall gates (none: nothing is kept)."""

    def __init__(self, cell: Mapping[str, ThresholdSpec], *, enforce: bool, ranks: int, warmup: int) -> None:
        self.gates = {
            m: spec
            for m in STALL_GATES
            if enforce and (spec := cell.get(m)) is not None and spec.kind is not ThresholdKind.INFO
        }
        self.warmup = warmup
        self.nodes = [_Node() for _ in range(ranks)] if self.gates else []
        self.worst: dict[int, float] = {}  # step -> its largest excess over the nodes
        self.broken: GateBroken | None = None  # the first gate broken (told once)

    def on_step(self, rank: int, step: int, seconds: float | None) -> GateBroken | None:
        """A train step's logged seconds; the gate it breaks, the first time one is broken."""
        if not self.gates or seconds is None or not math.isfinite(seconds) or seconds <= 0:
            return None
        n = self.nodes[rank]
        n.timed += 1
        if step < self.warmup or n.timed <= self.warmup or step <= n.last_step:
            return None
        n.last_step = step
        n.secs.append(seconds)
        n.since_refresh += 1
        if n.limit is None or n.since_refresh >= REFRESH_STEPS or seconds > n.limit:
            n.refresh()
        if n.limit is None or seconds <= n.limit:
            return None
        return self._stall(rank, step, seconds - n.median)

    def on_silence(self, rank: int, silent_s: float) -> GateBroken | None:
        """The node has logged no step for ``silent_s``: past the limit, that is a stall of the next
        step already (of at least that long)."""
        if not self.gates or self.broken is not None:
            return None
        n = self.nodes[rank]
        if n.limit is None or silent_s <= n.limit:
            return None
        return self._stall(rank, n.last_step + 1, silent_s - n.median)

    def _stall(self, rank: int, step: int, excess: float) -> GateBroken | None:
        self.worst[step] = max(self.worst.get(step, 0.0), excess)
        if self.broken is not None:
            return None
        figures = {
            "training.stall_count": float(len(self.worst)),
            "training.stall_seconds": sum(self.worst.values()),
            "training.longest_stall_seconds": max(self.worst.values()),
        }
        for metric, spec in self.gates.items():
            if spec.kind not in (ThresholdKind.MAX, ThresholdKind.MAX_MS):
                continue  # a min or within gate on a stall figure can still be met as the run goes on
            message = check(metric, figures[metric], spec, {})
            if message is not None:
                self.broken = GateBroken(rank, step, metric, figures[metric], message)
                return self.broken
        return None
