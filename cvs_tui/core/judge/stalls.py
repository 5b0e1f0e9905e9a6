"""Stalls: steps whose host interval is far outside the run's own distribution, and what they overlap.

MaxText's per-step ``seconds`` is host time between two dispatches, so everything that blocks the
training loop (an async checkpoint's device-to-host copy, a storage hang, a preempted or swapping
host, a SIGSTOP) lands in one step's interval. The step line may be written late, in a burst with its
neighbours, so where it sits in the log says nothing; the time does.

The rule, per node (:func:`stream_stalls`, over the node's step table a chunk at a time):

* Judged steps: train steps with finite, positive ``seconds``, minus warm-up (step numbers below
  ``warmup`` and the first ``warmup`` timed steps, as the steady-state window does), first record of
  a step number only. Rampup steps (smaller batches) and profiler boundaries are not judged.
* Baseline: the median ``m`` of the judged steps' seconds and their scaled median absolute deviation
  ``s = 1.4826 * MAD`` (both robust: up to half the steps may be stalls).
* A judged step is a stall when ``seconds > T`` with
  ``T = max(m + STALL_MAD_K * s, STALL_RATIO * m, m + STALL_MIN_EXCESS_S)``:
  6 robust sigmas, at least 3x the median, and at least one second lost. The ratio floor keeps a
  tight distribution (MAD near 0, as on a GPU) from flagging a 10 % blip; the second floor keeps the
  scheduler hiccups of a busy CPU (tens to hundreds of milliseconds on 20 ms steps) from counting.
  With lognormal jitter of CV 30 %, T is about 3x the median: one step in 10,000 crosses it.
* Fewer than ``MIN_BASELINE_STEPS`` (3) judged steps: no baseline, nothing is flagged (a 6-step run
  keeps 3; a median of 3 still stands one stall).
* Log gaps: where step lines carry times (``StepEvent.timestamp``, or the line clock of
  ``judge.clock``), the wall gap between two consecutive judged step lines is held to the same ``T``.
  A gap above it with no stall by ``seconds`` among the steps from one before to ``LINE_LAG`` (3)
  after it (a line is written after its step's interval ends, by up to three steps on a loaded host)
  is time outside MaxText's step timer (the last step line is not held to it: it is written after
  the loop ends, behind the final checkpoint); it is listed as a stall of that step's line with
  source ``log gap``.

Cost: a few passes over the judged seconds (the medians are exact order statistics over chunks,
``order_stats``), and the attribution in O(log n) per stall; ``benchmarks/stalls.py`` times 100,000 steps.

Attribution (``Stall.cause``): each stall's wall interval is estimated on the log's clock. A stall holds
back the step lines written after it: the largest gap between the lines of the steps from ``LINE_LAG``
before to one after it, when at least half the stall, ends where the stall ends, so the stall is ``[gap
end - seconds, gap end]``. Without such a gap it is ``[E - seconds, E]``, with ``E`` the running sum of
logged seconds plus the median offset between the step lines' times and that sum over the neighbouring
steps. It is matched to the background intervals (``background_intervals``: checkpoint saves from their
first line to orbax's "Finished save (blocking + background)", waits for a previous save, evals,
restores, profiler windows) with a slack of two median steps; the largest overlap wins. When the log has
no times, a stall at step S+0..2 of an interval that names step S is matched by number (as the window
does) and says so. Otherwise the stall is "unexplained".

Figures (``StallReport``): ``stall_count``; ``stall_seconds`` = sum over stalls of (seconds - median),
the time lost; ``longest_stall_seconds`` = the largest of those; ``wall_seconds`` = sum of the judged
steps' seconds plus the log gaps' time the step timer did not see (the wall time from the end of the
last warm-up step to the end of the last step: MaxText's host intervals tile the wall clock);
``goodput_pct(s)`` = 100 * judged steps * s / wall_seconds, where ``s`` is the steady-state step time
(by default the mean of the judged steps that are not stalls).
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from cvs_tui.core.judge import spill
from cvs_tui.core.judge.background import Interval, secs
from cvs_tui.core.judge.order_stats import median
from cvs_tui.core.judge.spill import ColumnFiles
from cvs_tui.core.judge.stream import Arrays, Clock, StreamLog, chunk_sum, clock_times, each_chunk
from cvs_tui.core.judge.table import PROFILER, TRAIN

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "Interval",
    "RunStalls",
    "Stall",
    "StallReport",
    "Timeline",
    "attribute",
    "place_stall",
    "run_stalls",
    "stall_limit",
    "stream_stalls",
]

STALL_RATIO = 3.0
STALL_MAD_K = 6.0
STALL_MIN_EXCESS_S = 1.0
MIN_BASELINE_STEPS = 3
MAD_SCALE = 1.4826  # MAD -> standard deviation for normal data
ANCHOR_NEIGHBOURS = 16  # steps each side whose clock offset anchors a stall's wall interval
# How many steps a step line may be written after its step's interval ends: MaxText buffers one step's
# metrics and the host runs ahead of the device (3 seen on a loaded CPU: a pause after step 100's line
# landed in step 103's seconds).
LINE_LAG = 3


@dataclass(frozen=True, slots=True)
class Stall:
    step: int
    seconds: float  # the logged interval (for a log gap: the gap between the step lines)
    median: float  # the run's median step seconds
    line: int
    source: Literal["seconds", "log gap"] = "seconds"
    start: float | None = None  # estimated wall interval on the log's clock
    end: float | None = None
    cause: Interval | None = None
    by_step_number: bool = False  # matched by step number (no times in the log)

    @property
    def excess(self) -> float:
        """Seconds lost beyond a median step."""
        return self.seconds - self.median

    @property
    def attribution(self) -> str:
        if self.cause is None:
            return "unexplained"
        how = " (by step number: the log has no times)" if self.by_step_number else ""
        return f"{'near' if self.by_step_number else 'during'} {self.cause.label}{how}"

    @property
    def reason(self) -> str:
        """The stall in one line, e.g. `step 7: 22.7 s, during the async save of step 0 (...)`."""
        what = "log gap of" if self.source == "log gap" else ""
        return f"step {self.step}: {what}{' ' if what else ''}{secs(self.seconds)}, {self.attribution}"


@dataclass(frozen=True, slots=True)
class StallReport:
    stalls: tuple[Stall, ...]
    judged_steps: int
    median_seconds: float | None  # None: too few judged steps for a baseline
    threshold_seconds: float | None
    wall_seconds: float
    steady_step_seconds: float | None  # mean seconds of the judged steps that are not stalls
    spread_seconds: float | None = None  # 1.4826 x the MAD of the judged seconds (None: no baseline)

    @property
    def stall_count(self) -> int:
        return len(self.stalls)

    @property
    def stall_seconds(self) -> float:
        return sum(s.excess for s in self.stalls)

    @property
    def longest_stall_seconds(self) -> float:
        return max((s.excess for s in self.stalls), default=0.0)

    def goodput_pct(self, steady_step_seconds: float | None = None) -> float | None:
        """100 * judged steps * steady step time / wall_seconds, at most 100; None without steps or a step
        time. The run's steady step time can exceed a fast node's own mean (the run waits for its slowest
        node): that node lost no time, so 100 %, never more."""
        s = self.steady_step_seconds if steady_step_seconds is None else steady_step_seconds
        if s is None or self.wall_seconds <= 0 or not self.judged_steps:
            return None
        return min(100.0, 100.0 * self.judged_steps * s / self.wall_seconds)

    def exclusions(self) -> dict[int, str]:
        """{step: reason} for the steady-state window (seconds stalls only: a log gap's step kept its
        own seconds)."""
        return {
            s.step: f"stall: {secs(s.seconds)} against a median of {secs(s.median)}, {s.attribution}"
            for s in self.stalls
            if s.source == "seconds"
        }


def stall_limit(median_s: float, spread_s: float) -> float:
    """``T``: a judged step slower than this is a stall (see the module docstring); ``spread_s`` is
    1.4826 x the MAD of the judged seconds."""
    return max(median_s + STALL_MAD_K * spread_s, STALL_RATIO * median_s, median_s + STALL_MIN_EXCESS_S)


def place_stall(
    s: Stall,
    k: int,
    n: int,
    time_at: Callable[[int], float | None],
    cum_at: Callable[[int], float],
    seconds_at: Callable[[int], float],
    limit: float,
) -> Stall:
    """The wall interval of seconds stall ``s``, the ``k``-th of ``n`` timed steps (see :func:`_place`):
    ``time_at(j)`` is step j's wall time (None: unknown), ``cum_at(j)`` the sum of step times up to it,
    ``seconds_at(j)`` its own step time."""
    gap, gap_end = 0.0, None
    for i in range(max(1, k - LINE_LAG), min(n, k + 2)):
        t0, t1 = time_at(i - 1), time_at(i)
        if t0 is not None and t1 is not None and t1 - t0 > gap:
            gap, gap_end = t1 - t0, t1
    if gap_end is not None and gap >= 0.5 * s.seconds:
        return replace(s, start=gap_end - s.seconds, end=gap_end)
    lo, hi = max(0, k - ANCHOR_NEIGHBOURS), min(n, k + ANCHOR_NEIGHBOURS + 1)
    offsets = [
        t - cum_at(j) for j in range(lo, hi) if (t := time_at(j)) is not None and seconds_at(j) <= limit
    ]
    if not offsets:
        return s
    end = cum_at(k) + statistics.median(offsets)
    return replace(s, start=end - s.seconds, end=end)


class Timeline:
    """Timed intervals sorted by start, for overlap queries in O(log n + hits)."""

    def __init__(self, background: Sequence[Interval]) -> None:
        self.timed = sorted(
            (iv for iv in background if iv.start is not None and iv.end is not None),
            key=lambda iv: iv.start or 0.0,
        )
        self.starts = [iv.start or 0.0 for iv in self.timed]
        self.reach: list[float] = []  # running max of the ends
        top = -math.inf
        for iv in self.timed:
            top = max(top, iv.end or 0.0)
            self.reach.append(top)
        self.by_step = [iv for iv in background if iv.step is not None]

    def best(self, start: float, end: float, slack: float) -> Interval | None:
        best: Interval | None = None
        best_overlap = -math.inf
        j = bisect_right(self.starts, end + slack) - 1
        while j >= 0 and self.reach[j] + slack >= start:
            iv = self.timed[j]
            overlap = min(end, (iv.end or 0.0) + slack) - max(start, (iv.start or 0.0) - slack)
            if overlap >= 0 and overlap >= best_overlap:  # ties: the earlier interval
                best, best_overlap = iv, overlap
            j -= 1
        return best


def attribute(s: Stall, line: Timeline, slack: float) -> Stall:
    """The background interval the stall overlaps most on the clock; by step number without times."""
    if s.start is not None and s.end is not None and line.timed:
        best = line.best(s.start, s.end, slack)
        return s if best is None else replace(s, cause=best)
    # no times: the window's rule, the work of step S lands in the intervals of S..S+2
    near = [iv for iv in line.by_step if 0 <= s.step - (iv.step or 0) <= 2]
    if near:
        return replace(s, cause=min(near, key=lambda iv: s.step - (iv.step or 0)), by_step_number=True)
    return s


@dataclass(frozen=True, slots=True)
class RunStalls:
    """The run's stall figures from every node's report (see docs/metrics.md, "Stalls and goodput")."""

    stall_count: int  # distinct stalled step numbers over the nodes
    stall_seconds: float  # per stalled step, the largest excess over the nodes; summed
    longest_stall_seconds: float
    goodput_pct: float | None  # the lowest node goodput
    stalls: tuple[tuple[int, Stall], ...]  # (rank, stall), by step then rank


def run_stalls(reports: Sequence[StallReport], steady_step_seconds: float | None = None) -> RunStalls:
    """Combine the nodes' reports (index = rank). ``steady_step_seconds``: the window's step time
    (``training.step_time_seconds``); None uses each node's own steady mean."""
    worst: dict[int, float] = {}
    listed: list[tuple[int, Stall]] = []
    for rank, rep in enumerate(reports):
        for s in rep.stalls:
            worst[s.step] = max(worst.get(s.step, 0.0), s.excess)
            listed.append((rank, s))
    goodputs = [g for rep in reports if (g := rep.goodput_pct(steady_step_seconds)) is not None]
    listed.sort(key=lambda rs: (rs[1].step, rs[0]))
    return RunStalls(
        stall_count=len(worst),
        stall_seconds=sum(worst.values()),
        longest_stall_seconds=max(worst.values(), default=0.0),
        goodput_pct=min(goodputs) if goodputs else None,
        stalls=tuple(listed),
    )


# ---- the rule over a node's step table, a chunk at a time
_JUDGED = ("step", "line", "kind", "seconds", "has_seconds", "timestamp")


_JUDGED_FILES = {"step": "i8", "line": "i8", "sec": "f8", "ts": "f8"}


def _judged(log: StreamLog, warmup: int) -> ColumnFiles:
    """column_stalls' judged records (their step, line, seconds and timestamp), into files of their own:
    the stall rules read them many times."""
    import numpy as np

    out = log.scratch("judged", _JUDGED_FILES)
    timed = 0
    seen = log.seen()
    for _, c in log.chunks(*_JUDGED):
        sec = c["seconds"]
        ok = (c["kind"] == TRAIN) & c["has_seconds"]
        with np.errstate(invalid="ignore"):
            ok &= np.isfinite(sec) & (sec > 0)
        idx = np.flatnonzero(ok)
        later = np.zeros(len(ok), np.bool_)
        later[idx] = (c["step"][idx] >= warmup) & (np.arange(timed, timed + len(idx)) >= warmup)
        timed += len(idx)
        j = np.flatnonzero(log.firsts(seen, c["step"], later))
        for name, col in (("step", "step"), ("line", "line"), ("sec", "seconds"), ("ts", "timestamp")):
            out.append(name, c[col][j])
    return out


def stream_stalls(log: StreamLog, bg: list[Any], warmup: int) -> StallReport:
    """The stalls of a node's step table (see the module docstring): the judged records go to scratch
    files of their own, which the rule reads several times."""
    judged = _judged(log, warmup)
    try:
        return _stalls(log, judged, bg)
    finally:
        judged.close()


def _stalls(log: StreamLog, judged: ColumnFiles, bg: list[Any]) -> StallReport:
    import numpy as np

    def step_secs() -> Iterator[npt.NDArray[np.float64]]:
        for c in each_chunk(judged, "sec"):
            yield c["sec"]

    n = len(judged)
    wall = chunk_sum(x.tolist() for x in step_secs())
    if n < MIN_BASELINE_STEPS:
        return StallReport((), n, None, None, wall, wall / n if n else None)
    m = median(step_secs, n)
    s = MAD_SCALE * median(lambda: (np.abs(x - m) for x in step_secs()), n)
    limit = stall_limit(m, s)
    stalls: list[Stall] = []
    flagged: set[int] = set()
    for g, c in judged.chunks(("step", "line", "sec"), size=spill.CHUNK):
        for i in np.flatnonzero(c["sec"] > limit).tolist():
            stalls.append(Stall(int(c["step"][i]), float(c["sec"][i]), m, int(c["line"][i])))
            flagged.add(g + i)
    if n > 2:
        wall = _gaps(log.clock, judged, limit, m, flagged, stalls, wall)
    stalls.sort(key=lambda st: st.line)
    stalls = _place(stalls, log, m)
    timeline = Timeline(bg)
    stalls = [attribute(st, timeline, 2.0 * m) for st in stalls]
    stalled = np.fromiter({st.step for st in stalls if st.source == "seconds"}, np.int64)
    count = [0]

    def steady() -> Iterator[list[float]]:
        for c in each_chunk(judged, "step", "sec"):
            keep = c["sec"][~np.isin(c["step"], stalled)]
            count[0] += len(keep)
            yield keep.tolist()

    total = chunk_sum(steady())
    mean = total / count[0] if count[0] else None
    return StallReport(tuple(stalls), n, m, limit, wall, mean, s)


def _gaps(
    clock: Clock,
    judged: ColumnFiles,
    limit: float,
    m: float,
    flagged: set[int],
    out: list[Stall],
    wall: float,
) -> float:
    """The log gaps between judged records 1..n-2 (column_stalls), appended to ``out``; returns ``wall``."""
    import numpy as np

    n, prev = len(judged), math.nan
    for g, c in judged.chunks(tuple(_JUDGED_FILES), size=spill.CHUNK):
        times = clock_times(clock, c["line"], c["ts"])
        full = np.concatenate(([prev], times)) if g else times
        base = g - 1 if g else 0  # the judged index of full[0]
        with np.errstate(invalid="ignore"):
            at = np.flatnonzero(full[1:] - full[:-1] > limit)
        for k in at.tolist():
            i = base + k + 1
            if i < 1 or i > n - 2 or flagged.intersection(range(i - 1, i + LINE_LAG + 1)):
                continue  # the gap is a seconds stall: a step line is written up to LINE_LAG steps late
            t0, t1 = float(full[k]), float(full[k + 1])
            r = i - g
            out.append(Stall(int(c["step"][r]), t1 - t0, m, int(c["line"][r]), "log gap", t0, t1))
            wall += t1 - t0 - float(c["sec"][r])
        prev = float(times[-1])
    return wall


def _timed(log: StreamLog) -> Iterator[tuple[Arrays, npt.NDArray[np.int64]]]:
    """The records with finite seconds that are not profiler boundaries (what a stall's wall interval is
    placed among), a chunk at a time."""
    import numpy as np

    for _, c in log.chunks(*_JUDGED):
        ok = (c["kind"] != PROFILER) & c["has_seconds"] & np.isfinite(c["seconds"])
        yield c, np.flatnonzero(ok)


def _place(stalls: list[Stall], log: StreamLog, median_s: float) -> list[Stall]:
    """Each seconds stall's wall interval (place_stall), from the step times around it."""
    import numpy as np

    wanted = [i for i, s in enumerate(stalls) if s.source == "seconds"]
    if not wanted:
        return stalls
    k_of: dict[int, int] = {}
    g = 0
    for c, t in _timed(log):
        tl, tstep = c["line"][t], c["step"][t]
        for w in wanted:
            if w in k_of:
                continue
            s = stalls[w]
            lo, hi = int(np.searchsorted(tl, s.line, "left")), int(np.searchsorted(tl, s.line, "right"))
            same = np.flatnonzero(tstep[lo:hi] == s.step)
            if len(same):
                k_of[w] = g + lo + int(same[0])
        g += len(t)
    n = g
    reach = max(LINE_LAG + 1, ANCHOR_NEIGHBOURS)
    need = sorted(
        {j for k in k_of.values() for j in range(max(0, k - reach), min(n, k + ANCHOR_NEIGHBOURS + 2))}
    )
    times: dict[int, float | None] = {}
    cum: dict[int, float] = {}
    sec: dict[int, float] = {}
    want = np.asarray(need, dtype=np.int64)
    g, carry = 0, None
    for c, t in _timed(log):
        if not len(t):
            continue
        tsec = c["seconds"][t]
        x = np.maximum(tsec, 0.0)
        run = np.cumsum(x) if carry is None else np.add.accumulate(np.concatenate(([carry], x)))[1:]
        carry = float(run[-1])
        here = want[(want >= g) & (want < g + len(t))]
        if len(here):
            tt = clock_times(log.clock, c["line"][t], c["timestamp"][t])
            for j in here.tolist():
                v = float(tt[j - g])
                times[j] = v if v == v else None  # NaN: no time
                cum[j] = float(run[j - g])
                sec[j] = float(tsec[j - g])
        g += len(t)
    limit = max(STALL_RATIO * median_s, median_s + STALL_MIN_EXCESS_S)
    out = list(stalls)
    for w, k in k_of.items():
        out[w] = place_stall(stalls[w], k, n, times.__getitem__, cum.__getitem__, sec.__getitem__, limit)
    return out
