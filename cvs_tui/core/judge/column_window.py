"""The steady-state window and the stalls of one node from its step columns (``judge.columns``): the same
rules as :func:`~cvs_tui.core.judge.window.node_window` and :func:`~cvs_tui.core.judge.stalls.find_stalls`,
with numpy over the columns where those loop over every step, so that ``analyze`` of a long log costs
little more than parsing it. Sums and medians run in the same order and on the same floats, so every
step, reason, stall and figure is the same; ``tests/test_analyze_big.py`` and the analyze tests compare
them with the judge of a live run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cvs_tui.core.judge.background import Interval, background
from cvs_tui.core.judge.clock import LineClock
from cvs_tui.core.judge.columns import PROFILER, TRAIN, Collected, StepColumns, exact_sum
from cvs_tui.core.judge.stalls import (
    LINE_LAG,
    MAD_SCALE,
    MIN_BASELINE_STEPS,
    STALL_MAD_K,
    STALL_MIN_EXCESS_S,
    STALL_RATIO,
    Stall,
    StallReport,
    Timeline,
    attribute,
    place_stall,
)
from cvs_tui.core.judge.window import WARMUP_STEPS, drops

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

Clock = LineClock | Mapping[int, float] | None


@dataclass(slots=True)
class ColumnWindow:
    """A node's window: its clean steps (log order), the steps it dropped with why, its stalls (their
    ``steady_steps`` left empty: only the live judge's report lists them)."""

    steps: npt.NDArray[np.int64]
    excluded: dict[int, str]
    stalls: StallReport | None


def times_of(cols: StepColumns, idx: npt.NDArray[np.int64], clock: Clock) -> npt.NDArray[np.float64]:
    """The clock time of each record's line, else its own timestamp; NaN: none (stalls._times)."""
    import numpy as np

    ts = cols.timestamp[idx]
    if clock is None:
        return ts
    lines = cols.line[idx]
    if isinstance(clock, LineClock):
        return clock.lookup(lines, ts)
    get = clock.get
    return np.fromiter(
        (get(n, t) for n, t in zip(lines.tolist(), ts.tolist(), strict=True)), np.float64, len(idx)
    )


def _median(sorted_xs: npt.NDArray[np.float64]) -> float:
    """statistics.median of an ascending array, on the same floats."""
    n = len(sorted_xs)
    i = n // 2
    if n % 2:
        return float(sorted_xs[i])
    return (float(sorted_xs[i - 1]) + float(sorted_xs[i])) / 2


def _first_of_each(idx: npt.NDArray[np.int64], step: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Of the records ``idx`` (log order), the first of each step number, in log order."""
    import numpy as np

    _, first = np.unique(step[idx], return_index=True)
    return idx[np.sort(first)]


def _drops(c: Collected, excluded: dict[int, str]) -> None:
    """drops() over columns held in memory."""
    import numpy as np

    cols = c.columns
    idx = np.flatnonzero(~((cols.kind == TRAIN) & cols.has_seconds))
    special = zip(
        idx.tolist(), cols.step[idx].tolist(), cols.kind[idx].tolist(), cols.line[idx].tolist(), strict=True
    )
    drops(list(special), c.others, lambda pos: int(cols.step[pos]), excluded)


def _background(c: Collected, clock: Clock) -> list[Interval]:
    """background() over columns held in memory."""
    import numpy as np

    cols = c.columns
    prof = np.flatnonzero(cols.kind == PROFILER).tolist()
    return background(c.others, [(i, cols.event(i)) for i in prof], clock)


def column_window(c: Collected, clock: Clock) -> ColumnWindow:
    """node_window of the collected events (see WINDOW_DEFINITION)."""
    import numpy as np

    cols = c.columns
    step, sec = cols.step, cols.seconds
    excluded: dict[int, str] = {}
    _drops(c, excluded)
    timed = np.flatnonzero((cols.kind == TRAIN) & cols.has_seconds)
    stalls: StallReport | None = None
    if len(timed):
        ts = step[timed]
        warm = (ts < WARMUP_STEPS) | (np.arange(len(ts)) < WARMUP_STEPS)
        for s in ts[warm].tolist():
            excluded[s] = "warm-up (compilation and first steps)"
        stalls = column_stalls(cols, _background(c, clock), clock, WARMUP_STEPS)
        for s, reason in stalls.exclusions().items():
            excluded.setdefault(s, reason)
    keys = np.fromiter(excluded, np.int64, len(excluded))
    firsts = _first_of_each(timed[~np.isin(step[timed], keys)], step)
    v = sec[firsts]
    good = np.isfinite(v) & (v > 0)
    for s in step[firsts[~good]].tolist():
        excluded[s] = "non-positive or non-finite seconds"
    keys = np.fromiter(excluded, np.int64, len(excluded))
    logged = set(keys[np.isin(keys, step)].tolist())
    kept = {s: r for s, r in sorted(excluded.items()) if s in logged}
    return ColumnWindow(step[firsts[good]], kept, stalls)


def column_stalls(cols: StepColumns, background: list[Interval], clock: Clock, warmup: int) -> StallReport:
    """find_stalls of the node's step records (see the stalls module docstring)."""
    import numpy as np

    step, line, sec = cols.step, cols.line, cols.seconds
    ok = (cols.kind == TRAIN) & cols.has_seconds
    with np.errstate(invalid="ignore"):
        ok &= np.isfinite(sec) & (sec > 0)
    timed = np.flatnonzero(ok)
    later = (step[timed] >= warmup) & (np.arange(len(timed)) >= warmup)
    judged = _first_of_each(timed[later], step)
    secs = sec[judged]
    n = len(judged)
    wall = exact_sum(secs)
    if n < MIN_BASELINE_STEPS:
        return StallReport((), n, None, None, wall, wall / n if n else None)
    srt = np.sort(secs)
    m = _median(srt)
    s = MAD_SCALE * _median(np.sort(np.abs(secs - m)))
    limit = max(m + STALL_MAD_K * s, STALL_RATIO * m, m + STALL_MIN_EXCESS_S)
    flagged = np.flatnonzero(secs > limit).tolist()
    stalls = [Stall(int(step[judged[i]]), float(secs[i]), m, int(line[judged[i]])) for i in flagged]
    times = times_of(cols, judged, clock)
    flagged_set = set(flagged)
    if n > 2:
        with np.errstate(invalid="ignore"):
            gaps = (np.flatnonzero(times[1 : n - 1] - times[: n - 2] > limit) + 1).tolist()
        for i in gaps:
            if flagged_set.intersection(range(i - 1, i + LINE_LAG + 1)):
                continue  # the gap is a seconds stall: a step line is written up to LINE_LAG steps late
            t0, t1 = float(times[i - 1]), float(times[i])
            stalls.append(Stall(int(step[judged[i]]), t1 - t0, m, int(line[judged[i]]), "log gap", t0, t1))
            wall += t1 - t0 - float(secs[i])
    stalls.sort(key=lambda st: st.line)
    stalls = _place(stalls, cols, clock, m)
    timeline = Timeline(background)
    stalls = [attribute(st, timeline, 2.0 * m) for st in stalls]
    stalled = np.fromiter({st.step for st in stalls if st.source == "seconds"}, np.int64)
    steady = secs[~np.isin(step[judged], stalled)]
    mean = exact_sum(steady) / len(steady) if len(steady) else None
    return StallReport(tuple(stalls), n, m, limit, wall, mean)


def _place(stalls: list[Stall], cols: StepColumns, clock: Clock, median: float) -> list[Stall]:
    """stalls._place over the columns: the wall interval of each seconds stall."""
    import numpy as np

    if not stalls:
        return stalls
    sec = cols.seconds
    ok = (cols.kind != PROFILER) & cols.has_seconds & np.isfinite(sec)
    timed = np.flatnonzero(ok)
    tl, tstep, tsec = cols.line[timed], cols.step[timed], sec[timed]
    cum = np.cumsum(np.maximum(tsec, 0.0))  # sequential, as itertools.accumulate
    times = times_of(cols, timed, clock)
    limit = max(STALL_RATIO * median, median + STALL_MIN_EXCESS_S)

    def _time_at(j: int) -> float | None:
        t = float(times[j])
        return t if t == t else None  # NaN: no time

    out: list[Stall] = []
    for s in stalls:
        if s.source != "seconds":
            out.append(s)
            continue
        lo, hi = int(np.searchsorted(tl, s.line, "left")), int(np.searchsorted(tl, s.line, "right"))
        same = np.flatnonzero(tstep[lo:hi] == s.step)
        if not len(same):
            out.append(s)
            continue
        k = lo + int(same[0])  # the first record of a step, as judged
        out.append(
            place_stall(s, k, len(timed), _time_at, lambda j: float(cum[j]), lambda j: float(tsec[j]), limit)
        )
    return out


__all__ = ["ColumnWindow", "column_stalls", "column_window", "times_of"]
