"""From a planned run's judged metrics to its RunRecord and verdicts, and the live run's entry to the judge.

A live run calls :func:`judge_tables` with the step table each rank's collector filled; ``cvs-tui
analyze`` (:mod:`cvs_tui.core.sources.offline`) fills the same tables from logs on disk. Both go through
the one node judge (:func:`~cvs_tui.core.judge.node.judge_node`) and the one run judge
(:func:`~cvs_tui.core.judge.run.judge_run`) against a :class:`~cvs_tui.core.plan.PlannedRun`, whose
``judge`` spec holds everything besides the logs, so a re-judged run and a live run agree.
:func:`finalize_run` does the same for events held in memory.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from cvs_tui import __version__
from cvs_tui.core import provenance
from cvs_tui.core.events import LogEvent, RunOutcome, StallsEvent, VerdictEvent
from cvs_tui.core.judge.definitions import METRIC_DEFINITIONS, MetricValue
from cvs_tui.core.judge.facts import RunFacts
from cvs_tui.core.judge.format import format_number
from cvs_tui.core.judge.metrics import MetricsOutcome, RunContext
from cvs_tui.core.judge.records import finite, run_environment, window_record
from cvs_tui.core.judge.table import StepTable
from cvs_tui.core.judge.verdicts import FAIL, PASS, RECORD, Verdict, judge_all
from cvs_tui.core.judge.window import WINDOW_DEFINITION
from cvs_tui.core.parse.endings import Ending, read_log_ending
from cvs_tui.core.plan import JudgeSpec, Plan, PlannedRun
from cvs_tui.core.results import (
    ErrorRecord,
    LossCurveRecord,
    MetricRecord,
    NodeRecord,
    Results,
    RunRecord,
    StageRecord,
    VerdictRecord,
)
from cvs_tui.core.run_folder import step_stderr
from cvs_tui.core.state import RunState


def run_context(spec: JudgeSpec, num_nodes: int) -> RunContext:
    """What the metrics need from the plan (the logs give the rest)."""
    return RunContext(
        num_nodes=num_nodes,
        gpus_per_node=spec.gpus_per_node,
        gpu_name=spec.gpu_name,
        precision=spec.precision,
        eval_configured=spec.eval_configured,
        checkpointing=spec.checkpointing,
        scaling_baseline=spec.scaling_baseline,
        convergence=spec.convergence,
        loss_curve=spec.loss_curve,
        tokens_per_step=spec.tokens_per_step,
    )


def _loss_curve_verdict(
    metric: MetricValue, spec: JudgeSpec, points: list[tuple[int, float]], count: int | None = None
) -> Verdict:
    """``count``: how many points the curve had when ``points`` is its bounded list (first and last kept)."""
    lc = spec.loss_curve
    expected = f"< {format_number(lc.max_slope)}"
    if points:
        (x0, y0), (xn, yn) = points[0], points[-1]
        n = len(points) if count is None else count
        detail = f" over {n} points (first={y0:.4f}@{x0}, last={yn:.4f}@{xn})"
    else:
        detail = ""
    gated = lc.enforce
    if metric.value is None:
        msg = f"{metric.name}: {metric.reason}"
        return Verdict(
            metric.name,
            FAIL if gated else RECORD,
            expected,
            None,
            metric.text,
            metric.unit,
            msg if gated else f"{metric.reason}; recorded (loss_curve not enforced)",
            gated,
        )
    ok = metric.value < lc.max_slope
    msg = (
        f"loss slope {metric.value:.6g}/step{detail}; "
        f"{'decreasing' if ok else 'NOT decreasing'} (max_slope={format_number(lc.max_slope)})"
    )
    status = (PASS if ok else FAIL) if gated else RECORD
    return Verdict(metric.name, status, expected, metric.value, metric.text, metric.unit, msg, gated)


def run_verdicts(run: PlannedRun, result: MetricsOutcome, out: RunOutcome) -> list[Verdict]:
    spec = run.judge
    metrics = result.metrics
    if run.kind == "smoke":
        # the smoke test checks for error signatures only; its numbers are recorded
        verdicts = judge_all(metrics, None, enforce=False)
    else:
        verdicts = judge_all(metrics, spec.cell, enforce=spec.enforce, extra_specs=spec.extra_specs)
    lc_metric = metrics["training.loss_curve_slope"]
    verdicts = [
        _loss_curve_verdict(lc_metric, spec, result.loss_curve_points, result.loss_curve_count)
        if v.metric == lc_metric.name
        else v
        for v in verdicts
    ]
    if out is RunOutcome.COMPLETE:
        return verdicts
    # a failed run's gated metrics that are missing fail with the run's reason, not a generic one
    return [
        Verdict(
            v.metric,
            v.status,
            v.expected,
            v.actual,
            v.actual_text,
            v.unit,
            f"{v.message} (the run {out.value})",
            v.gated,
        )
        if v.status == FAIL and v.actual is None
        else v
        for v in verdicts
    ]


def _verdict_record(v: Verdict) -> VerdictRecord:
    return VerdictRecord(
        metric=v.metric,
        status=v.status,  # type: ignore[arg-type]
        expected=v.expected,
        actual=finite(v.actual),
        actual_text=v.actual_text,
        unit=v.unit,
        message=v.message,
        gated=v.gated,
    )


def finalize_run(
    run: PlannedRun, node_events: Sequence[Sequence[LogEvent]], facts: RunFacts | None = None
) -> RunRecord:
    """Judge one planned run from each node's events held in memory (index = rank): each node's events
    go into a step table (``judge.table.StepCollector``), then :func:`judge_tables` with the run's
    ``facts`` (none: the logs alone)."""
    from cvs_tui.core.judge.table import StepCollector

    collectors = [StepCollector() for _ in node_events]
    try:
        for c, evs in zip(collectors, node_events, strict=True):
            c.add(list(evs))
        return judge_tables(run, [c.table() for c in collectors], facts or RunFacts())[0]
    finally:
        for c in collectors:
            c.discard()


def judge_tables(
    run: PlannedRun, tables: Sequence[StepTable], facts: RunFacts, *, keep_losses: bool = False
) -> tuple[RunRecord, dict[int, float] | None]:
    """Judge one planned run from each node's step table (index = rank): what a live run does once it
    ends. Each node is judged on its own (``judge.node.judge_node``, its line clock read from its log,
    ``facts.node_logs``), then the run (``judge.run.judge_run``); the window figures and clocks go to a
    temporary folder. Also returns, when ``keep_losses`` and the record's step series were bounded, the
    losses by step the checkpoint-resume verdicts compare (see judge_checkpoint_resume)."""
    import shutil
    import tempfile

    from cvs_tui.core.judge.clock import spilled_file_clock
    from cvs_tui.core.judge.node import judge_node
    from cvs_tui.core.judge.run import judge_run

    ctx = run_context(run.judge, len(tables))
    tmp = Path(tempfile.mkdtemp(prefix="cvs-tui-judge-"))
    try:
        digests = []
        for i, table in enumerate(tables):
            path = facts.log(i)
            clock = spilled_file_clock(path, tmp / f"clock{i}") if path is not None else None
            try:
                digests.append(
                    judge_node(
                        i,
                        table,
                        facts.lines(i),
                        ctx=ctx,
                        log_path=path,
                        host=facts.host(i),
                        arrays=tmp / f"node{i}",
                        exit_code=facts.exit_code(i),
                        keep_losses=keep_losses,
                        clock=clock,
                    )
                )
            finally:
                if clock is not None:
                    clock.files.close()
        record = judge_run(run, digests, facts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    first = next((d for d in digests if d.record.steps), None)  # the node record_losses reads
    return record, first.losses if first is not None else None


def node_endings(
    n: int, given: Sequence[Ending | None] | None, logs: Sequence[Path | None] | None
) -> list[Ending | None]:
    """Per node: the scheduler's ending the launcher read, else the one at the end of the node's log."""
    out: list[Ending | None] = []
    for i in range(n):
        e = given[i] if given and i < len(given) else None
        path = logs[i] if logs and i < len(logs) else None
        if e is None and path is not None:
            stderr = step_stderr(path)  # a Slurm run's folder: slurmstepd wrote to the step's stderr
            e = read_log_ending(path) or (read_log_ending(stderr) if stderr is not None else None)
        out.append(e)
    return out


def run_record(
    run: PlannedRun,
    result: MetricsOutcome,
    decided: tuple[RunOutcome, str, int | None],
    verdicts: list[Verdict],
    nodes: list[NodeRecord],
    errors: list[ErrorRecord],
    node_events: Sequence[Sequence[LogEvent]],
    started_at: float | None = None,
    ended_at: float | None = None,
) -> RunRecord:
    """The RunRecord of a judged run. ``node_events``: what the environment facts are read from (every
    event but step lines is enough)."""
    out, why, root = decided
    excluded: dict[int, str] = {}
    for w in result.node_windows:
        for s, r in w.excluded.items():
            excluded.setdefault(s, r)
    failed = out is not RunOutcome.COMPLETE or any(v.status == FAIL for v in verdicts)
    lc = run.judge.loss_curve
    return RunRecord(
        key=run.key,
        slug=run.slug,
        kind=run.kind,
        total_steps=run.steps,
        outcome=out.value,
        reason=why,
        root_cause_node=root,
        status="FAIL" if failed else "PASS",
        started_at=started_at,
        ended_at=ended_at,
        threshold_cell=run.judge.cell_key,
        nodes=nodes,
        window=window_record(
            result.window_status,
            result.window_reason,
            result.window_steps,
            excluded,
            count=result.window_count,
            ranges=result.window_ranges,
        ),
        metrics=[
            MetricRecord(
                name=m.name, value=finite(m.value), unit=m.unit, text=m.text, absent=m.absent, reason=m.reason
            )
            for m in result.metrics.values()
        ],
        verdicts=[_verdict_record(v) for v in verdicts],
        errors=errors,
        loss_curve=LossCurveRecord(
            points=result.loss_curve_points,
            slope=finite(result.metrics["training.loss_curve_slope"].value),
            max_slope=lc.max_slope,
            enforce=lc.enforce,
        ),
        environment=run_environment(node_events, result.devices_per_node),
        notes=result.notes,
    )


def base_results(plan: Plan, *, source: Literal["live", "analyze"], hosts: Sequence[str] = ()) -> Results:
    """The Results skeleton for a plan's runs: what was run, where, and what the metrics mean."""
    return Results(
        tool_version=__version__,
        created_at=time.time(),
        source=source,
        config_path=plan.config_path,
        config_name=Path(plan.config_path).name,
        mode=plan.mode,
        model_label=plan.model_label,
        gpu_name=plan.gpu_name,
        gpus_per_node=plan.gpus_per_node,
        enforce_thresholds=plan.enforce_thresholds,
        threshold_path=plan.threshold_path or None,
        hosts=list(hosts),
        metric_definitions={k: d.definition for k, d in METRIC_DEFINITIONS.items()},
        window_definition=WINDOW_DEFINITION,
        warnings=list(plan.warnings),
        provenance=provenance.collect(
            config_path=plan.config_path,
            threshold_path=plan.threshold_path or None,
            image=plan.container_image if plan.container_runtime != "host" else None,
        ),
    )


def verdict_events(run: RunRecord) -> list[VerdictEvent]:
    """The run's verdicts as events, for a live run's event stream (and so for every front-end)."""
    return [
        VerdictEvent(
            run=run.key,
            metric=v.metric,
            status=v.status,
            expected=v.expected,
            actual=v.actual,
            unit=v.unit,
            message=v.message,
        )
        for v in run.verdicts
    ]


def stall_events(run: RunRecord) -> list[StallsEvent]:
    """Each node's stalls in the judged run, for the front-ends (the node table, the loss plot)."""
    return [
        StallsEvent(
            run=run.key,
            node=n.rank,
            steps=tuple(s.step for s in n.stalls),
            seconds=tuple(s.seconds for s in n.stalls),
            causes=tuple(s.cause for s in n.stalls),
        )
        for n in run.nodes
        if n.stalls
    ]


def stage_records(state: RunState) -> list[StageRecord]:
    """The stages a live run folded into its RunState, in the order they first appeared."""
    return [
        StageRecord(
            name=sv.name,
            state=sv.state.value,
            detail=sv.detail,
            started_at=sv.started_at,
            ended_at=sv.ended_at,
        )
        for sv in state.stages.values()
    ]


__all__ = [
    "base_results",
    "finalize_run",
    "judge_tables",
    "run_context",
    "run_record",
    "run_verdicts",
    "stage_records",
    "verdict_events",
]
