"""Judging a run from per-node digests, so that the process judging a big run never holds every step of
every node (``cvs-tui analyze`` of long multi-node runs).

:func:`digest_collected` runs where a node log is parsed (a worker process, one node per task). The log
is parsed a chunk at a time into step columns (:mod:`cvs_tui.core.judge.columns`: typed arrays of the
step records' fields, and the other events), so the worker never holds the parsed step events, and the
line clock is held as arrays too. From them it computes, with numpy over the columns
(:mod:`~cvs_tui.core.judge.column_window`, :mod:`~cvs_tui.core.judge.column_figures`), everything that
needs only that node's steps (its steady-state window, stalls, record with errors and their context,
loss metrics as if it were the reference node, its own step-time figures) and writes the few figures
of its window steps that the cross-node metrics need to an ``.npz`` file. What it returns is small: its
events without the step lines, its record with bounded series (:mod:`cvs_tui.core.judge.series`) and
those figures. :func:`digest_node` does the same for events held in memory.

:func:`finalize_digests` combines the digests, reading one node's arrays at a time, into the same
RunRecord :func:`~cvs_tui.core.judge.finalize.finalize_run` makes from every event: the same sections of
:mod:`cvs_tui.core.judge.metrics` compute the metrics, and the sums run in the same order, so every
metric and verdict is the same number.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cvs_tui.core.events import LogEvent, StepEvent
from cvs_tui.core.judge.clock import LineClock, file_line_clock
from cvs_tui.core.judge.column_figures import loss_metrics, node_stats, train_steps
from cvs_tui.core.judge.column_window import column_window
from cvs_tui.core.judge.columns import Collected, Spilled, StepColumns, collect
from cvs_tui.core.judge.definitions import METRIC_DEFINITIONS, MetricValue
from cvs_tui.core.judge.digest_merge import window_figures
from cvs_tui.core.judge.finalize import run_context, run_record, run_verdicts
from cvs_tui.core.judge.goodput import stall_section
from cvs_tui.core.judge.loss import convergence_section, eval_section, loss_curve_section, loss_section
from cvs_tui.core.judge.metrics import (
    MetricsOutcome,
    NodeStats,
    RunContext,
    RunInputs,
    Sheet,
    checkpoint_io,
    run_devices,
    scaling_and_mfu,
    with_lag,
)
from cvs_tui.core.judge.outcome import decide_outcome
from cvs_tui.core.judge.records import node_record, window_record
from cvs_tui.core.judge.series import (
    SERIES_CAP,
    curve_note,
    curve_points,
    decimated,
    series_note,
    thin_indexes,
)
from cvs_tui.core.judge.spill import SpilledClock
from cvs_tui.core.judge.window import MIN_CLEAN_STEPS, NodeWindow
from cvs_tui.core.plan import PlannedRun
from cvs_tui.core.results import ErrorRecord, NodeRecord, RunRecord

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# the loss metrics a node computes as if it were the reference node (the first node with train steps)
LOSS_METRICS = (
    "training.final_loss",
    "training.loss_decreased",
    "training.eval_loss",
    "training.steps_to_target",
    "training.time_to_target_seconds",
    "training.loss_curve_slope",
)


@dataclass(slots=True)
class NodeDigest:
    """What the judge needs of one node log, in a size that does not grow with its step count beyond
    the bounded series and the window excluded-step reasons."""

    rank: int
    record: NodeRecord  # the rates, lag and straggler flag are filled in by finalize_digests
    errors: list[ErrorRecord]
    events: list[LogEvent]  # every event but step lines, plus the ones outcome and environment read
    window: NodeWindow  # steps left out (they are in ``arrays``); excluded and stalls kept
    stats: NodeStats  # tokens and TFLOP/s are filled in by finalize_digests (they need every node)
    window_seconds: float  # the node's own window: the sum of its steps' seconds
    loss_metrics: dict[str, MetricValue]
    curve: Path  # .npz: the sampled loss curve as if this node were the reference node (_save_curve)
    arrays: Path  # folder (column_figures.write_window): the node's window steps, seconds, tokens, FLOPs
    step_records: int  # every step line the node logged
    window_len: int
    thinned: bool  # its series in ``record`` were bounded
    series_cap: int
    window_ascending: bool  # the window steps in ``arrays`` are in ascending order
    # the finite losses by step of every step record (the last of a step wins), as checkpoint.record_losses
    # reads them from a whole series; only when the series was bounded and keep_losses was asked
    losses: dict[int, float] | None = None


def slim_events(events: Sequence[LogEvent]) -> list[LogEvent]:
    """The events without their step lines, but for the first step line naming its source (the
    environment reads it) and the first one of the highest step (the outcome reads it), in log order."""
    sourced: int | None = None
    top: int | None = None
    top_step = 0
    for i, e in enumerate(events):
        if isinstance(e, StepEvent):
            if sourced is None and e.source:
                sourced = i
            if top is None or e.step > top_step:
                top, top_step = i, e.step
    return [e for i, e in enumerate(events) if not isinstance(e, StepEvent) or i in (sourced, top)]


def _save_curve(path: Path, points: list[tuple[int, float]], cap: int) -> Path:
    """The loss curve goes to a file: every node computes one, the run uses the reference node's. Only
    its finite points are kept (the run's curve lists those), bounded at ``cap`` (series.curve_points),
    with their full count (the curve's verdict and note name it)."""

    finite = [(s, v) for s, v in points if math.isfinite(v)]
    return _write_curve(path, curve_points(finite, cap), len(finite))


def _write_curve(path: Path, kept: list[tuple[int, float]], count: int) -> Path:
    import numpy as np

    np.savez(
        path,
        steps=np.fromiter((s for s, _ in kept), dtype=np.int64, count=len(kept)),
        loss=np.fromiter((v for _, v in kept), dtype=np.float64, count=len(kept)),
        count=np.int64(count),
    )
    return path


def _load_curve(path: Path) -> tuple[list[tuple[int, float]], int]:
    """(the curve's finite points, bounded; how many finite points it had)."""
    import numpy as np

    with np.load(path) as z:
        steps = z["steps"].astype(np.int64, copy=False).tolist()
        loss = z["loss"].astype(np.float64, copy=False).tolist()
        count = int(z["count"])
    return list(zip(steps, loss, strict=True)), count


def log_line_clock(path: Path | None) -> LineClock | None:
    """finalize.log_clock, held as arrays (a long log's clock as a dict takes ~100 bytes a line)."""
    if path is None:
        return None
    try:
        return file_line_clock(path)
    except OSError:
        return None


def digest_node(
    rank: int,
    events: Sequence[LogEvent],
    lines: int,
    *,
    ctx: RunContext,
    log_path: Path | None,
    host: str,
    arrays: Path,
    series_cap: int | None = None,
    keep_losses: bool = False,
) -> NodeDigest:
    """One node's digest from its events held in memory (see :func:`digest_collected`)."""
    return digest_collected(
        rank,
        collect(events),
        lines,
        ctx=ctx,
        log_path=log_path,
        host=host,
        arrays=arrays,
        series_cap=series_cap,
        keep_losses=keep_losses,
        clock=log_line_clock(log_path),
    )


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


def _own_inputs(slim: list[LogEvent], ctx: RunContext, logged_steps: bool) -> RunInputs:
    """The node's RunInputs as if it were the whole run (its loss metrics as the reference node)."""
    return RunInputs(
        node_events=[slim],
        ctx=ctx,
        windows=[NodeWindow()],
        per_step=[{}],
        with_steps=[0] if logged_steps else [],
        num_nodes=1,
        devices_per_node=ctx.gpus_per_node,
        total_devices=ctx.gpus_per_node,
        global_devices=ctx.gpus_per_node,
        tflops_per_step=None,
    )


def digest_collected(
    rank: int,
    c: Collected,
    lines: int,
    *,
    ctx: RunContext,
    log_path: Path | None,
    host: str,
    arrays: Path,
    series_cap: int | None = None,
    keep_losses: bool = False,
    clock: LineClock | None = None,
) -> NodeDigest:
    """One node's digest (see the module docstring) from its collected step columns and other events;
    ``arrays``: where its window figures go; ``series_cap``: default SERIES_CAP. ``keep_losses``: keep
    every step's loss when the series is bounded (the checkpoint-resume verdicts compare losses step by
    step); ``clock``: the log's line clock."""
    import numpy as np

    cap = SERIES_CAP if series_cap is None else series_cap
    cols = c.columns
    win = column_window(c, clock)
    ps = train_steps(cols)
    slim = c.slim_events()
    own = _own_inputs(slim, ctx, bool(len(ps.steps)))
    sheet = Sheet()
    curve = loss_metrics(own, cols, ps, sheet)
    stats, t = node_stats(rank, cols, ps, win.steps, arrays)
    kept = NodeWindow(steps=[], excluded=win.excluded, stalls=win.stalls)
    others = [e for _, e in c.others]
    record, errors = node_record(
        rank, [*others, *_series(cols, cap)], kept, stats, host, log_path, None, lines
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


def digest_spilled(
    rank: int,
    s: Spilled,
    lines: int,
    *,
    ctx: RunContext,
    log_path: Path | None,
    host: str,
    arrays: Path,
    series_cap: int | None = None,
    keep_losses: bool = False,
    clock: LineClock | SpilledClock | None = None,
    refine: Callable[[Collected], None] | None = None,
) -> NodeDigest:
    """:func:`digest_collected` of a node whose step columns are in files (``Spilled``): a chunk at a time
    (``judge.column_stream``) when its step numbers rise, else read into memory. ``refine``: changes the
    columns before they are judged (a metrics file's exact losses), so they are read into memory."""
    from cvs_tui.core.judge import column_stream as cs

    if refine is not None or not s.ascending:
        whole = clock if not isinstance(clock, SpilledClock) else LineClock(*clock.arrays())
        held = s.load()
        if refine is not None:
            refine(held)
        return digest_collected(
            rank,
            held,
            lines,
            ctx=ctx,
            log_path=log_path,
            host=host,
            arrays=arrays,
            series_cap=series_cap,
            keep_losses=keep_losses,
            clock=whole,
        )
    cap = SERIES_CAP if series_cap is None else series_cap
    log = cs.StreamLog(s, clock)
    sv = cs.survey(log)
    win = cs.stream_window(log, sv)
    slim = s.slim_events()
    own = _own_inputs(slim, ctx, bool(sv.train))
    sheet = Sheet()
    sampled, finite = cs.stream_losses(own, log, sv, sheet)
    fig = cs.stream_figures(log, sv, win, rank, arrays, cap)
    kept = NodeWindow(steps=[], excluded=win.excluded, stalls=win.stalls)
    others = [e for _, e in s.others]
    record, errors = node_record(
        rank, [*others, *cs.stream_series(log, cap)], kept, fig.stats, host, log_path, None, lines
    )
    status = "ok" if fig.count >= MIN_CLEAN_STEPS else "inconclusive"
    record = record.model_copy(update={"window": window_record(status, "", fig.thinned, win.excluded)})
    thinned = log.n > cap or fig.count > cap
    curve = arrays.with_name(arrays.name + ".curve.npz")
    _write_curve(curve, cs.bounded_points(finite, cap), len(finite))
    sampled.close()
    finite.close()
    return NodeDigest(
        rank=rank,
        record=record,
        errors=errors,
        events=slim,
        window=kept,
        stats=fig.stats,
        window_seconds=fig.seconds,
        loss_metrics={k: sheet.m[k] for k in LOSS_METRICS if k in sheet.m},
        curve=curve,
        arrays=arrays,
        step_records=log.n,
        window_len=fig.count,
        window_ascending=True,
        thinned=thinned,
        series_cap=cap,
        losses=cs.finite_losses(log) if keep_losses and thinned else None,
    )


def finalize_digests(run: PlannedRun, digests: Sequence[NodeDigest]) -> RunRecord:
    """Judge one planned run from its nodes' digests (index = rank); the same RunRecord finalize_run
    makes from every event, with each node's series and the run's window steps bounded at the digests'
    cap (records.bounded_window)."""

    n = len(digests)
    ctx = run_context(run.judge, n)
    sheet = Sheet()
    slim = [d.events for d in digests]
    num_nodes, per_node, total, global_devices, tflops_step = run_devices(slim, ctx, sheet)
    inputs = RunInputs(
        node_events=slim,
        ctx=ctx,
        windows=[d.window for d in digests],
        per_step=[{} for _ in digests],
        with_steps=[i for i, d in enumerate(digests) if d.stats.steps_logged],
        num_nodes=num_nodes,
        devices_per_node=per_node,
        total_devices=total,
        global_devices=global_devices,
        tflops_per_step=tflops_step,
    )
    cap = digests[0].series_cap if digests else SERIES_CAP
    stats, listing, tok_total, tflops_gpu, wstatus, wreason = window_figures(digests, inputs, cap, sheet)
    window, wcount, wranges = listing
    stalls = stall_section(inputs, sheet)
    scaling_and_mfu(inputs, tok_total, tflops_gpu, sheet)
    ref = inputs.ref
    if ref is not None:
        sheet.m.update(digests[ref].loss_metrics)
        curve, count = _load_curve(digests[ref].curve)
    else:
        losses = loss_section(inputs, sheet)
        convergence_section(inputs, losses, eval_section(inputs, sheet), sheet)
        curve = [(s, v) for s, v in loss_curve_section(inputs, losses, sheet) if math.isfinite(v)]
        count = len(curve)
    checkpoint_io(inputs, sheet)
    result = MetricsOutcome(
        metrics={k: sheet.m[k] for k in METRIC_DEFINITIONS if k in sheet.m},
        node_windows=inputs.windows,
        window_steps=window,
        window_count=wcount,
        window_ranges=wranges,
        window_status=wstatus,
        window_reason=wreason,
        node_stats=with_lag(stats),
        loss_curve_points=curve,
        devices_per_node=per_node,
        notes=sheet.notes,
        stalls=stalls,
        loss_curve_count=count,
    )
    thinned = [(d.rank, d.step_records, d.window_len) for d in digests if d.thinned]
    if count > cap:
        result.notes.append(curve_note(count, cap))
    if thinned:
        result.notes.append(series_note(thinned, cap, run_window=wcount))
    decided = decide_outcome(
        slim,
        run.steps,
        final_loss=result.metrics.get("training.final_loss"),
        empty_nodes=[d.rank for d in digests if d.record.lines == 0],
    )
    verdicts = run_verdicts(run, result, decided[0])
    result.loss_curve_points = curve_points(result.loss_curve_points, cap)
    nodes = [
        d.record.model_copy(
            update={
                "tokens_per_sec_per_device": s.tokens_per_sec_per_device,
                "tflops_per_sec_per_device": s.tflops_per_sec_per_device,
                "lag_pct": s.lag_pct,
                "straggler": s.straggler,
            }
        )
        for d, s in zip(digests, result.node_stats, strict=True)
    ]
    errors = [e for d in digests for e in d.errors]
    return run_record(run, result, decided, verdicts, nodes, errors, slim)


__all__ = [
    "LOSS_METRICS",
    "NodeDigest",
    "digest_collected",
    "digest_node",
    "digest_spilled",
    "finalize_digests",
    "log_line_clock",
    "slim_events",
]
