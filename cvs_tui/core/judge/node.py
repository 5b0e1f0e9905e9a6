"""One node's judgement: :func:`judge_node` reads a node's step table (``judge.table``) a chunk at a
time and reduces it to a :class:`NodeDigest`, whose size does not grow with the node's step count beyond
its bounded series.

It runs where a node log is parsed: in ``analyze`` (a worker process per node for big logs), in follow
mode (``analyze`` of the copies) and, for a live run, in the runner once the run ends, over the table
each rank's collector filled while the log streamed in. From the table it computes everything that needs
only that node's steps (its steady-state window, stalls, record with errors and their context, loss
metrics as if it were the reference node, its own step-time figures) and writes the figures of its
window steps that the cross-node metrics need to column files (``arrays``).
:func:`~cvs_tui.core.judge.run.judge_run` combines the digests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cvs_tui.core.events import LogEvent, StepEvent
from cvs_tui.core.judge.clock import LineClock
from cvs_tui.core.judge.definitions import MetricValue, device_peak
from cvs_tui.core.judge.figures import stream_figures
from cvs_tui.core.judge.loss import bounded_points, finite_losses, stream_losses
from cvs_tui.core.judge.metrics import NodeStats, RunContext, RunInputs, Sheet
from cvs_tui.core.judge.records import node_record, window_record
from cvs_tui.core.judge.series import SERIES_CAP, stream_series
from cvs_tui.core.judge.spill import SpilledClock
from cvs_tui.core.judge.stream import StreamLog
from cvs_tui.core.judge.table import StepTable
from cvs_tui.core.judge.window import MIN_CLEAN_STEPS, NodeWindow, stream_window, survey
from cvs_tui.core.results import ErrorRecord, NodeRecord

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
    record: NodeRecord  # the rates, lag and straggler flag are filled in by judge_run
    errors: list[ErrorRecord]
    events: list[LogEvent]  # every event but step lines, plus the ones outcome and environment read
    window: NodeWindow  # steps left out (they are in ``arrays``); excluded and stalls kept
    stats: NodeStats  # tokens and TFLOP/s are filled in by judge_run (they need every node)
    window_seconds: float  # the node's own window: the sum of its steps' seconds
    loss_metrics: dict[str, MetricValue]
    curve: Path  # .npz: the sampled loss curve as if this node were the reference node (write_curve)
    arrays: Path  # folder (figures.write_window): the node's window steps, seconds, tokens, FLOPs
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


def write_curve(path: Path, kept: list[tuple[int, float]], count: int) -> Path:
    """The node's sampled loss curve (finite points, bounded at the cap) and its full count, to ``path``:
    every node computes one, the run uses the reference node's."""
    import numpy as np

    np.savez(
        path,
        steps=np.fromiter((s for s, _ in kept), dtype=np.int64, count=len(kept)),
        loss=np.fromiter((v for _, v in kept), dtype=np.float64, count=len(kept)),
        count=np.int64(count),
    )
    return path


def load_curve(path: Path) -> tuple[list[tuple[int, float]], int]:
    """(the curve's finite points, bounded; how many finite points it had)."""
    import numpy as np

    with np.load(path) as z:
        steps = z["steps"].astype(np.int64, copy=False).tolist()
        loss = z["loss"].astype(np.float64, copy=False).tolist()
        count = int(z["count"])
    return list(zip(steps, loss, strict=True)), count


def own_inputs(slim: list[LogEvent], ctx: RunContext, logged_steps: bool) -> RunInputs:
    """The node's RunInputs as if it were the whole run (its loss metrics as the reference node)."""
    return RunInputs(
        node_events=[slim],
        ctx=ctx,
        windows=[NodeWindow()],
        with_steps=[0] if logged_steps else [],
        num_nodes=1,
        devices_per_node=ctx.gpus_per_node,
        total_devices=ctx.gpus_per_node,
        global_devices=ctx.gpus_per_node,
        tflops_per_step=None,
    )


def judge_node(
    rank: int,
    table: StepTable,
    lines: int,
    *,
    ctx: RunContext,
    log_path: Path | None,
    host: str,
    arrays: Path,
    exit_code: int | None = None,
    series_cap: int | None = None,
    keep_losses: bool = False,
    clock: LineClock | SpilledClock | None = None,
) -> NodeDigest:
    """One node's digest (see the module docstring) from its step ``table``, a chunk at a time
    (the rules' modules: ``window``, ``stalls``, ``figures``, ``loss``, ``series``). ``arrays``: where its
    window figures go; ``exit_code``: the node's, when the runner knows it; ``series_cap``: default
    SERIES_CAP; ``keep_losses``: keep every step's loss when the series is bounded (the checkpoint-resume
    verdicts compare losses step by step); ``clock``: the log's line clock."""
    cap = SERIES_CAP if series_cap is None else series_cap
    log = StreamLog(table, clock)
    sv = survey(log)
    device = device_peak(ctx.gpu_name, ctx.precision, (e for _, e in table.others))
    win = stream_window(log, sv, device)
    slim = table.slim_events()
    own = own_inputs(slim, ctx, bool(sv.train))
    sheet = Sheet()
    sampled, finite = stream_losses(own, log, sv, sheet)
    fig = stream_figures(log, sv, win, rank, arrays, cap)
    kept = NodeWindow(steps=[], excluded=win.excluded, stalls=win.stalls)
    others = [e for _, e in table.others]
    record, errors = node_record(
        rank, [*others, *stream_series(log, cap)], kept, fig.stats, host, log_path, exit_code, lines
    )
    status = "ok" if fig.count >= MIN_CLEAN_STEPS else "inconclusive"
    record = record.model_copy(update={"window": window_record(status, "", fig.thinned, win.excluded)})
    thinned = log.n > cap or fig.count > cap
    curve = arrays.with_name(arrays.name + ".curve.npz")
    write_curve(curve, bounded_points(finite, cap), len(finite))
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
        window_ascending=fig.ascending,
        thinned=thinned,
        series_cap=cap,
        losses=finite_losses(log) if keep_losses and thinned else None,
    )


__all__ = [
    "LOSS_METRICS",
    "NodeDigest",
    "judge_node",
    "load_curve",
    "own_inputs",
    "slim_events",
    "write_curve",
]
