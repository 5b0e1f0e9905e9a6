"""Bounded per-step series for results.json and the charts of big runs.

The judge computes every metric over every step; only what a run record *lists* per step (a node's
``steps`` and its window's ``steps``) is bounded, so that a record, results.json and the report stay a
fixed size per node however long the run. Up to ``SERIES_CAP`` entries a series is exact. Above it:

* the step series is cut into ``(SERIES_CAP - 1) // 5`` buckets of consecutive step records, and each
  bucket keeps its first record, the ones with the lowest and the highest finite loss, the one with the
  longest ``seconds`` and its first non-finite loss (a record without a loss has none of these); the
  last record is always kept. A spike, a stall
  or a NaN therefore stays visible on the charts;
* a window's step list keeps every k-th step and the last one.

Only ``cvs-tui analyze`` bounds its series (a live run's series are as long as it ran); when it does,
the run's ``notes`` say so (``series_note``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from cvs_tui.core.events import StepEvent

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from cvs_tui.core.judge.stream import StreamLog

SERIES_CAP = 2000  # entries per node and per series; exact at or below it
_PER_BUCKET = 5  # first, lowest loss, highest loss, longest seconds, first non-finite loss

T = TypeVar("T")


def thin(xs: list[T], cap: int) -> list[T]:
    """``xs`` when it has at most ``cap`` entries, else every k-th entry and the last (at most ``cap``)."""
    if len(xs) <= cap:
        return xs
    return [xs[i] for i in thin_indexes(len(xs), cap)]


def thin_indexes(n: int, cap: int) -> list[int]:
    """The indexes :func:`thin` keeps of ``n`` entries (for a series read from files or arrays)."""
    if n <= cap:
        return list(range(n))
    k = -(-n // max(cap - 1, 1))
    out = list(range(0, n, k))
    return [*out, n - 1] if (n - 1) % k else out


def decimated(loss: npt.NDArray[np.float64], secs: npt.NDArray[np.float64], cap: int) -> list[int]:
    """The indexes a bounded series keeps of ``n`` step records (see the module docstring): ``loss``
    each record's loss, ``secs`` its seconds where finite, else -inf."""
    return decimated_from(len(loss), lambda lo, hi: (loss[lo:hi], secs[lo:hi], None), cap)


Bucket = Callable[
    [int, int],
    "tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_] | None]",
]


def decimated_from(n: int, read: Bucket, cap: int) -> list[int]:
    """:func:`decimated` of ``n`` records read a bucket at a time: ``read(lo, hi)`` gives the loss and
    seconds arrays of records ``lo`` to ``hi`` (a long log's columns stay in their files) and which
    records have a loss (None: every one)."""
    import numpy as np

    buckets = max((cap - 1) // _PER_BUCKET, 1)
    size = -(-n // buckets)
    keep = {n - 1}
    for lo in range(0, n, size):
        part, sp, has = read(lo, lo + size)
        finite = np.isfinite(part)
        keep.add(lo)
        if finite.any():
            keep.add(lo + int(np.where(finite, part, np.inf).argmin()))
            keep.add(lo + int(np.where(finite, part, -np.inf).argmax()))
        bad = ~finite if has is None else ~finite & has
        if bad.any():
            keep.add(lo + int(np.flatnonzero(bad)[0]))
        if np.isfinite(sp).any():
            keep.add(lo + int(sp.argmax()))
    return sorted(keep)


def curve_points(points: list[tuple[int, float]], cap: int) -> list[tuple[int, float]]:
    """A loss curve's points: every one up to ``cap``, else per bucket of consecutive points the first and
    the ones with the lowest and the highest loss, and the last point (at most ``cap``)."""
    import numpy as np

    if len(points) <= cap:
        return points
    loss = np.fromiter((v for _, v in points), dtype=np.float64, count=len(points))
    return [points[i] for i in decimated(loss, np.full(len(points), -np.inf), cap)]


def curve_note(points: int, cap: int) -> str:
    """The run note for a loss curve whose points were bounded."""
    return (
        f"loss curve bounded at {cap:,} points ({points:,} sampled points): its slope and verdict are "
        "computed over every sampled point, but `loss_curve.points` keeps, per bucket of consecutive points, "
        "the first and the lowest and highest loss (and the last point)"
    )


def series_note(
    thinned: Sequence[tuple[int, int, int]], cap: int | None = None, *, run_window: int | None = None
) -> str:
    """The run note for nodes whose series were bounded: (rank, step records, window steps) each;
    ``run_window``: how many steps the run's window has when its ``steps`` were bounded too."""
    cap = SERIES_CAP if cap is None else cap
    nodes = ", ".join(f"node {r}: {n:,} step records, {w:,} window steps" for r, n, w in thinned[:8])
    more = f" and {len(thinned) - 8} more node(s)" if len(thinned) > 8 else ""
    return (
        f"per-step series bounded at {cap:,} entries per node ({nodes}{more}): every metric and verdict "
        f"is computed over every step, but each node's `steps` keeps, per bucket of consecutive records, "
        "the first, the lowest and highest loss, the longest seconds and the first non-finite loss (and the "
        "last record), and each node's window `steps` keeps every k-th step and the last"
        + (
            ""
            if run_window is None
            else f"; so does the run's window `steps` ({run_window:,} steps: `step_count` counts them and "
            "`step_ranges` lists them all as ranges of consecutive steps)"
        )
    )


def stream_series(log: StreamLog, cap: int) -> list[StepEvent]:
    """A node's step records in log order, as the record lists them: every one up to ``cap``, else the
    bucketed selection of the module docstring."""
    import numpy as np

    if log.n <= cap:
        return log.events(list(range(log.n)))

    def read(
        lo: int, hi: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        f = log.files
        sec, has = f.read("seconds", lo, hi), f.read("has_seconds", lo, hi)
        with np.errstate(invalid="ignore"):
            timed = np.where(has & np.isfinite(sec), sec, -np.inf)
        return f.read("loss", lo, hi), timed, f.read("has_loss", lo, hi)

    return log.events(decimated_from(log.n, read, cap))


__all__ = [
    "SERIES_CAP",
    "curve_note",
    "curve_points",
    "decimated",
    "decimated_from",
    "series_note",
    "stream_series",
    "thin",
    "thin_indexes",
]
