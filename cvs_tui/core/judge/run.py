"""A run's judgement from its nodes' digests (``judge.node``): :func:`judge_run`, the one place a run's
metrics, verdicts and record are made, for live runs, ``analyze``, follow mode and replay alike.

The digests are combined one node's files at a time (``judge.digest_merge``), so the process judging a
big run never holds every step of every node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from cvs_tui.core.judge.definitions import METRIC_DEFINITIONS, MetricValue
from cvs_tui.core.judge.digest_merge import window_figures
from cvs_tui.core.judge.facts import RunFacts
from cvs_tui.core.judge.finalize import node_endings, run_context, run_record, run_verdicts
from cvs_tui.core.judge.goodput import stall_section
from cvs_tui.core.judge.metrics import (
    MetricsOutcome,
    RunContext,
    RunInputs,
    Sheet,
    checkpoint_io,
    run_devices,
    scaling_and_mfu,
    with_lag,
)
from cvs_tui.core.judge.node import NodeDigest, load_curve
from cvs_tui.core.judge.outcome import decide_outcome
from cvs_tui.core.judge.series import SERIES_CAP, curve_note, curve_points, series_note
from cvs_tui.core.plan import PlannedRun
from cvs_tui.core.results import RunRecord


def _no_reference_losses(inputs: RunInputs, sheet: Sheet) -> tuple[list[tuple[int, float]], int]:
    """The loss metrics of a run where no node logged a train step: the node judge's over an empty table
    (evals from every node); returns the (empty) curve and its count."""
    from cvs_tui.core.judge.loss import stream_losses
    from cvs_tui.core.judge.spill import ColumnFiles
    from cvs_tui.core.judge.stream import StreamLog
    from cvs_tui.core.judge.table import SPILL_COLUMNS, StepTable
    from cvs_tui.core.judge.window import survey

    log = StreamLog(StepTable(ColumnFiles(None, SPILL_COLUMNS), [], [], True), None)
    sampled, finite = stream_losses(inputs, log, survey(log), sheet)
    sampled.close()
    finite.close()
    return [], 0


def run_metrics(ctx: RunContext, digests: Sequence[NodeDigest]) -> MetricsOutcome:
    """Every metric of one run from its nodes' digests (index = rank), with each node's series and the
    run's window steps bounded at the digests' cap."""
    sheet = Sheet()
    slim = [d.events for d in digests]
    num_nodes, per_node, total, global_devices, tflops_step = run_devices(slim, ctx, sheet)
    inputs = RunInputs(
        node_events=slim,
        ctx=ctx,
        windows=[d.window for d in digests],
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
        curve, count = load_curve(digests[ref].curve)
    else:
        curve, count = _no_reference_losses(inputs, sheet)
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
    return result


def judge_run(run: PlannedRun, digests: Sequence[NodeDigest], facts: RunFacts | None = None) -> RunRecord:
    """Judge one planned run from its nodes' digests (index = rank): :func:`run_metrics`, the outcome, the
    verdicts and the record. ``facts``: what the run's watcher knew that the logs do not say (the exit
    codes and the outcome its watchdog saw, its times, its ``health.*`` metric values, the scheduler's
    endings; see ``judge.facts``); the digests already carry each node's host, log and lines."""
    facts = facts or RunFacts()
    result = run_metrics(run_context(run.judge, len(digests)), digests)
    for name, value in (facts.health or {}).items():
        d = METRIC_DEFINITIONS.get(name)
        result.metrics[name] = MetricValue(name, value, d.unit if d else "count")
    slim = [d.events for d in digests]
    logs = [Path(d.record.log_path) if d.record.log_path else None for d in digests]
    decided = decide_outcome(
        slim,
        run.steps,
        dataclasses.replace(facts, endings=node_endings(len(digests), facts.endings, logs)),
        final_loss=result.metrics.get("training.final_loss"),
        empty_nodes=[d.rank for d in digests if d.record.lines == 0 and d.record.log_path],
    )
    verdicts = run_verdicts(run, result, decided[0])
    cap = digests[0].series_cap if digests else SERIES_CAP
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
    return run_record(run, result, decided, verdicts, nodes, errors, slim, facts.started_at, facts.ended_at)


__all__ = ["judge_run", "run_metrics"]
