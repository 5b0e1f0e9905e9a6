"""A node's digest from its step columns read into memory: the node judge's path for a log whose step
numbers repeat or go back, or whose metrics file refines its losses (``judge.node.judge_node`` sends those
here). It computes, with numpy over the columns (:mod:`~cvs_tui.core.judge.column_window`,
:mod:`~cvs_tui.core.judge.column_figures`), the same digest the chunked passes give an ascending log.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cvs_tui.core.events import StepEvent
from cvs_tui.core.judge.clock import LineClock
from cvs_tui.core.judge.column_figures import loss_metrics, node_stats, train_steps
from cvs_tui.core.judge.column_window import column_window
from cvs_tui.core.judge.columns import Collected, StepColumns
from cvs_tui.core.judge.metrics import RunContext, Sheet
from cvs_tui.core.judge.node import LOSS_METRICS, NodeDigest, own_inputs, write_curve
from cvs_tui.core.judge.records import node_record, window_record
from cvs_tui.core.judge.series import SERIES_CAP, curve_points, decimated, thin_indexes
from cvs_tui.core.judge.window import MIN_CLEAN_STEPS, NodeWindow

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


def _save_curve(path: Path, points: list[tuple[int, float]], cap: int) -> Path:
    """Only the curve's finite points are kept (the run's curve lists those), bounded at ``cap``
    (series.curve_points), with their full count (the curve's verdict and note name it)."""
    import math

    finite = [(s, v) for s, v in points if math.isfinite(v)]
    return write_curve(path, curve_points(finite, cap), len(finite))


def _thin(xs: npt.NDArray[np.int64], cap: int) -> list[int]:
    """series.thin of an array."""
    out: list[int] = xs[thin_indexes(len(xs), cap)].tolist()
    return out


def _series(cols: StepColumns, cap: int) -> list[StepEvent]:
    """series.step_series of the node's step records, bounded at ``cap``."""
    import numpy as np

    if len(cols) <= cap:
        return [cols.event(i) for i in range(len(cols))]
    with np.errstate(invalid="ignore"):
        secs = np.where(cols.has_seconds & np.isfinite(cols.seconds), cols.seconds, -np.inf)
    return [cols.event(i) for i in decimated(cols.loss, secs, cap)]


def digest_collected(
    rank: int,
    c: Collected,
    lines: int,
    *,
    ctx: RunContext,
    log_path: Path | None,
    host: str,
    arrays: Path,
    exit_code: int | None = None,
    series_cap: int | None = None,
    keep_losses: bool = False,
    clock: LineClock | None = None,
) -> NodeDigest:
    """One node's digest from its collected step columns and other events (the arguments as for
    judge_node)."""
    import numpy as np

    cap = SERIES_CAP if series_cap is None else series_cap
    cols = c.columns
    win = column_window(c, clock)
    ps = train_steps(cols)
    slim = c.slim_events()
    own = own_inputs(slim, ctx, bool(len(ps.steps)))
    sheet = Sheet()
    curve = loss_metrics(own, cols, ps, sheet)
    stats, t = node_stats(rank, cols, ps, win.steps, arrays)
    kept = NodeWindow(steps=[], excluded=win.excluded, stalls=win.stalls)
    others = [e for _, e in c.others]
    record, errors = node_record(
        rank, [*others, *_series(cols, cap)], kept, stats, host, log_path, exit_code, lines
    )
    status = "ok" if len(win.steps) >= MIN_CLEAN_STEPS else "inconclusive"
    record = record.model_copy(
        update={"window": window_record(status, "", _thin(win.steps, cap), win.excluded)}
    )
    step_records = len(cols)
    thinned = step_records > cap or len(win.steps) > cap
    exact_losses: dict[int, float] | None = None
    if keep_losses and thinned:
        fin = np.isfinite(cols.loss)
        exact_losses = dict(zip(cols.step[fin].tolist(), cols.loss[fin].tolist(), strict=True))
    return NodeDigest(
        rank=rank,
        record=record,
        errors=errors,
        events=slim,
        window=kept,
        stats=stats,
        window_seconds=t,
        loss_metrics={k: sheet.m[k] for k in LOSS_METRICS if k in sheet.m},
        curve=_save_curve(arrays.with_name(arrays.name + ".curve.npz"), curve, cap),
        arrays=arrays,
        step_records=step_records,
        window_len=len(win.steps),
        window_ascending=bool((np.diff(win.steps) > 0).all()),
        thinned=thinned,
        series_cap=cap,
        losses=exact_losses,
    )


__all__ = ["digest_collected"]
