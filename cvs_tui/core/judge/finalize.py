"""From node logs (or their events) to a judged run: the one place metrics and verdicts are computed.

Live runs call :func:`finalize_run` with the events their parsers produced; ``cvs-tui analyze`` calls
:func:`analyze_node_logs` (or :func:`analyze_paths`) on logs on disk. Both end in the same
:class:`~cvs_tui.core.results.RunRecord`, so a re-judged run and a live run agree.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from cvs_tui import __version__
from cvs_tui.core.config.blocks import ThresholdKind, ThresholdSpec
from cvs_tui.core.errors import UserError
from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    DevicesEvent,
    ErrorHit,
    EvalEvent,
    ExitCodeEvent,
    LogEvent,
    MemoryEstimateEvent,
    MetricsFileStep,
    NonFiniteAbortEvent,
    ParamsEvent,
    RunOutcome,
    Severity,
    StepEvent,
    StepKind,
    SystemInfoEvent,
    TflopsPerStepEvent,
    VerdictEvent,
)
from cvs_tui.core.metrics import (
    METRIC_DEFINITIONS,
    MIN_CLEAN_STEPS,
    WARMUP_STEPS,
    WINDOW_DEFINITION,
    MetricsOutcome,
    MetricValue,
    NodeWindow,
    RunContext,
    compute_metrics,
    format_value,
    precision_of,
)
from cvs_tui.core.parse.metrics_file import parse_metrics_file
from cvs_tui.core.results import (
    CheckpointRecord,
    Environment,
    ErrorRecord,
    EvalPoint,
    ExcludedStep,
    LossCurveRecord,
    MetricRecord,
    NodeRecord,
    Results,
    RunRecord,
    StageRecord,
    StepPoint,
    VerdictRecord,
    WindowRecord,
)
from cvs_tui.core.state import RunState
from cvs_tui.core.verdicts import FAIL, PASS, RECORD, Verdict, judge_all

# Special runs: key -> (slug, kind). Sweep runs use their sweep key and RunSpec.slug.
SMOKE_KEY, CKPT1_KEY, CKPT2_KEY, CKPT_REF_KEY = "SMOKE", "CKPT-1", "CKPT-2", "CKPT-REF"
SPECIAL_RUNS: dict[str, tuple[str, str]] = {
    SMOKE_KEY: ("SMOKE", "smoke"),
    CKPT1_KEY: ("CKPT_1", "ckpt_phase1"),
    CKPT2_KEY: ("CKPT_2", "ckpt_phase2"),
    CKPT_REF_KEY: ("CKPT_REF", "ckpt_reference"),
}
CONTEXT_LINES = 3  # log lines kept on each side of an error hit
MAX_ERRORS_PER_NODE = 200  # a log full of one error must not bloat results.json
_SECONDARY_ERROR = re.compile(r"coordinat|heartbeat|barrier|preempt|peer|remote", re.I)


@dataclass(frozen=True, slots=True)
class ResolvedRun:
    key: str
    slug: str
    kind: str
    steps: int
    maxtext_config: dict[str, Any]
    cell_key: str | None
    cell: dict[str, ThresholdSpec]
    enforce: bool
    extra_specs: dict[str, ThresholdSpec] = field(default_factory=dict)
    loss_curve_enforced: bool = False


def _ckpt_sweep(loaded: Any) -> Any:
    cr = loaded.config.checkpoint_resume
    if cr.sweep:
        for spec in loaded.runs:
            if spec.key == cr.sweep:
                return spec
        raise UserError(
            f"checkpoint_resume.sweep: {cr.sweep!r} is not among the selected runs; set it to one of "
            f"{[s.key for s in loaded.runs]} or ''"
        )
    if not loaded.runs:
        raise UserError("runs: the config selects no sweep; add one to `runs`")
    return loaded.runs[0]


def resolve_run(loaded: Any, run_key: str) -> ResolvedRun:
    """What the config says about one run key (a sweep key, or SMOKE / CKPT-1 / CKPT-2 / CKPT-REF)."""
    cfg = loaded.config
    key = slug_to_key(loaded).get(run_key, run_key)
    for spec in loaded.runs:
        if spec.key == key:
            cell = loaded.thresholds.get(spec.key)
            return ResolvedRun(
                key=spec.key,
                slug=spec.slug,
                kind="sweep",
                steps=spec.steps,
                maxtext_config=dict(spec.maxtext_config),
                cell_key=spec.key if cell is not None else None,
                cell=dict(cell or {}),
                enforce=bool(cfg.enforce_thresholds),
                loss_curve_enforced=cfg.loss_curve.enforce,
            )
    if key not in SPECIAL_RUNS:
        raise UserError(
            f"--run {run_key!r}: no such run; pick one of {[s.key for s in loaded.runs] + list(SPECIAL_RUNS)}"
        )
    slug, kind = SPECIAL_RUNS[key]
    if key == SMOKE_KEY:
        base = dict(loaded.runs[0].maxtext_config) if loaded.runs else {}
        base.update(
            per_device_batch_size=cfg.smoke.per_device_batch_size,
            max_target_length=cfg.smoke.max_target_length,
            quantization="",
        )
        return ResolvedRun(key, slug, kind, cfg.smoke.steps, base, None, {}, False)
    cr = cfg.checkpoint_resume
    sweep = _ckpt_sweep(loaded)
    mc = dict(sweep.maxtext_config)
    mc.update(cr.smoke_model_overrides)
    mc["enable_checkpointing"] = key != CKPT_REF_KEY
    steps = cr.steps_before_ckpt if key == CKPT1_KEY else cr.steps_before_ckpt + cr.steps_after_resume
    extra: dict[str, ThresholdSpec] = {}
    if cr.max_save_seconds > 0 and key == CKPT1_KEY:
        extra["training.checkpoint_save_seconds"] = ThresholdSpec(
            kind=ThresholdKind.MAX, value=cr.max_save_seconds
        )
    if cr.max_load_seconds > 0 and key == CKPT2_KEY:
        extra["training.checkpoint_load_seconds"] = ThresholdSpec(
            kind=ThresholdKind.MAX, value=cr.max_load_seconds
        )
    return ResolvedRun(key, slug, kind, steps, mc, None, {}, False, extra)


def slug_to_key(loaded: Any) -> dict[str, str]:
    out = {spec.slug: spec.key for spec in loaded.runs}
    out.update({slug: key for key, (slug, _) in SPECIAL_RUNS.items()})
    return out


def run_context(loaded: Any, run: ResolvedRun, num_nodes: int) -> RunContext:
    cfg = loaded.config
    mc = run.maxtext_config
    try:
        eval_interval = int(mc.get("eval_interval", 0) or 0)
    except (TypeError, ValueError):
        eval_interval = 0
    return RunContext(
        num_nodes=num_nodes,
        gpus_per_node=int(cfg.gpus_per_node),
        gpu_name=str(cfg.gpu_name),
        precision=precision_of(mc),
        eval_configured=eval_interval > 0,
        checkpointing=bool(mc.get("enable_checkpointing", False)),
        scaling_baseline=cfg.scaling_baseline,
        convergence=cfg.convergence,
        loss_curve=cfg.loss_curve,
    )


# ---------------------------------------------------------------------------------------------------------
# outcome
# ---------------------------------------------------------------------------------------------------------
def _fatal_hits(events: Sequence[LogEvent]) -> list[ErrorHit | NonFiniteAbortEvent]:
    return [
        e
        for e in events
        if (isinstance(e, ErrorHit) and e.severity is Severity.FATAL) or isinstance(e, NonFiniteAbortEvent)
    ]


_GLOG_HEADER = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+\s+[\w.-]+:\d+\]\s*")


def _hit_text(h: ErrorHit | NonFiniteAbortEvent) -> str:
    if isinstance(h, NonFiniteAbortEvent):
        return f"training aborted on {h.value} loss"
    text = _GLOG_HEADER.sub("", h.text.strip())
    return f"{h.name}: {text[:160]}{'…' if len(text) > 160 else ''}"


def decide_outcome(
    node_events: Sequence[Sequence[LogEvent]],
    total_steps: int,
    *,
    exit_codes: Sequence[int | None] | None = None,
    outcome: RunOutcome | None = None,
    reason: str = "",
    root_cause_node: int | None = None,
    final_loss: MetricValue | None = None,
) -> tuple[RunOutcome, str, int | None]:
    """Outcome, reason and root-cause node. A given non-complete outcome (hung, interrupted) is kept."""
    fatal = [(i, h) for i, evs in enumerate(node_events) for h in _fatal_hits(evs)[:1]]
    first_fatal: tuple[int, str] | None = None
    if fatal:
        primary = [(i, h) for i, h in fatal if not _SECONDARY_ERROR.search(_hit_text(h))] or fatal
        node, hit = primary[0]
        others = sorted({i for i, _ in fatal} - {node})
        also = f"; also on node(s) {others}" if others else ""
        first_fatal = (node, f"node {node} line {hit.line}: {_hit_text(hit)}{also}")
    if outcome is not None and outcome not in (RunOutcome.COMPLETE, RunOutcome.FAILED):
        # hung or interrupted: keep that outcome, and name the first fatal error if the logs hold one
        why = reason or outcome.value
        if first_fatal is not None:
            return outcome, f"{why}; first fatal error: {first_fatal[1]}", first_fatal[0]
        return outcome, why, root_cause_node
    codes = list(exit_codes or [])
    for i, evs in enumerate(node_events):
        logged = [e.code for e in evs if isinstance(e, ExitCodeEvent)]
        if i >= len(codes):
            codes.append(logged[-1] if logged else None)
        elif codes[i] is None and logged:
            codes[i] = logged[-1]
    if first_fatal is not None:
        return RunOutcome.FAILED, first_fatal[1], first_fatal[0]
    if final_loss is not None and final_loss.absent == "non_finite":
        return RunOutcome.FAILED, f"final loss is {final_loss.reason}", root_cause_node
    bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
    if bad:
        # a live run knows which node failed first; the others were stopped as its victims
        node, code = next(((i, c) for i, c in bad if i == root_cause_node), bad[0])
        return RunOutcome.FAILED, f"node {node} exited with code {code}", node
    if outcome is RunOutcome.FAILED:
        return outcome, reason or "the run failed", root_cause_node
    last = [max((e.step for e in evs if isinstance(e, StepEvent)), default=None) for evs in node_events]
    logged = [x for x in last if x is not None]
    if not logged:
        return RunOutcome.FAILED, "no training step was logged by any node", root_cause_node
    short = [(i, x) for i, x in enumerate(last) if x is None or x < total_steps - 1]
    if short and len(logged) == len(last):
        i, x = short[0]
        return (
            RunOutcome.FAILED,
            f"node {i} log ends at step {x} of {total_steps} (steps 0..{total_steps - 1}): "
            "the run stopped early, hung or the log is truncated",
            i,
        )
    if short:
        # nodes without step lines are fine when another node logged them all (some logs carry rank 0 only)
        i, x = short[0]
        if x is not None:
            return RunOutcome.FAILED, f"node {i} log ends at step {x} of {total_steps}", i
    return RunOutcome.COMPLETE, reason, root_cause_node


# ---------------------------------------------------------------------------------------------------------
# records
# ---------------------------------------------------------------------------------------------------------
def _f(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _step_fields(e: StepEvent) -> dict[str, object]:
    return {
        "step": e.step,
        "kind": e.kind.value,
        "loss": _f(e.loss),
        "loss_text": None if math.isfinite(e.loss) else ("nan" if math.isnan(e.loss) else str(e.loss)),
        "seconds": _f(e.seconds),
        "tokens_per_sec": _f(e.tokens_per_device),
        "tflops_per_sec": _f(e.tflops_per_device),
        "line": e.line,
    }


# one validation call for a node's whole series: a long run has hundreds of thousands of steps
_STEP_SERIES = TypeAdapter(list[StepPoint])


def _window_record(status: str, reason: str, steps: list[int], excluded: dict[int, str]) -> WindowRecord:
    return WindowRecord(
        status=status,  # type: ignore[arg-type]
        reason=reason,
        steps=steps,
        excluded=[ExcludedStep(step=s, reason=r) for s, r in sorted(excluded.items())],
        min_clean_steps=MIN_CLEAN_STEPS,
        warmup_steps=WARMUP_STEPS,
    )


def _read_context(path: Path, lines: set[int]) -> dict[int, tuple[int, list[str]]]:
    """Context lines around each wanted line number, reading the file once."""
    if not lines:
        return {}
    wanted: dict[int, tuple[int, int]] = {n: (max(1, n - CONTEXT_LINES), n + CONTEXT_LINES) for n in lines}
    hi = max(b for _, b in wanted.values())
    lo = min(a for a, _ in wanted.values())
    keep = {k for a, b in wanted.values() for k in range(a, b + 1)}
    buf: dict[int, str] = {}
    try:
        with path.open("rb") as fh:
            for no, raw in enumerate(fh, 1):
                if no > hi:
                    break
                if no >= lo and no in keep:
                    buf[no] = raw.decode("utf-8", "replace").rstrip("\r\n")[:500]
    except OSError:
        return {}
    return {n: (a, [buf[k] for k in range(a, b + 1) if k in buf]) for n, (a, b) in wanted.items()}


def _environment(node_events: Sequence[Sequence[LogEvent]], devices_per_node: int) -> Environment:
    env = Environment(devices_per_node=devices_per_node)
    for evs in node_events:
        for e in evs:
            if isinstance(e, SystemInfoEvent) and getattr(env, e.key, "x") is None:
                setattr(env, e.key, e.value)
            elif isinstance(e, DevicesEvent) and env.num_devices is None:
                env.num_devices, env.mesh_shape = e.num_devices, list(e.mesh_shape)
            elif isinstance(e, ParamsEvent) and env.parameters_billions is None:
                env.parameters_billions = e.billions
            elif isinstance(e, TflopsPerStepEvent) and env.tflops_per_step is None:
                env.tflops_per_step = e.total_tflops
            elif isinstance(e, MemoryEstimateEvent) and env.memory_estimate_gb is None:
                env.memory_estimate_gb = e.total_gb
            elif isinstance(e, StepEvent) and env.step_logger_source is None and e.source:
                env.step_logger_source = e.source
    return env


def _node_record(
    rank: int,
    events: Sequence[LogEvent],
    window: NodeWindow,
    outcome: MetricsOutcome,
    host: str,
    log_path: Path | None,
    exit_code: int | None,
    lines: int,
) -> tuple[NodeRecord, list[ErrorRecord]]:
    stats = outcome.node_stats[rank]
    hit_lines = {e.line for e in events if isinstance(e, ErrorHit)}
    # the abort line is usually also an always-on ErrorHit: keep one record per line
    hits = [
        e
        for e in events
        if isinstance(e, ErrorHit) or (isinstance(e, NonFiniteAbortEvent) and e.line not in hit_lines)
    ]
    fatal = [h for h in hits if isinstance(h, NonFiniteAbortEvent) or h.severity is Severity.FATAL]
    kept = fatal[:MAX_ERRORS_PER_NODE]
    fatal_ids = {id(h) for h in fatal}  # identity: a log can repeat one warning thousands of times
    kept += [h for h in hits if id(h) not in fatal_ids][: max(0, MAX_ERRORS_PER_NODE - len(kept))]
    ctx = _read_context(log_path, {h.line for h in kept}) if log_path else {}
    errors = []
    for h in sorted(kept, key=lambda h: h.line):
        first, lines_ctx = ctx.get(h.line, (None, []))
        if isinstance(h, NonFiniteAbortEvent):
            name, sev, origin, text = (
                "nonfinite_loss_abort",
                "fatal",
                "always",
                f"Aborting training due to {h.value}",
            )
        else:
            name, sev, origin, text = h.name, h.severity.value, h.origin, h.text[:2000]
        errors.append(
            ErrorRecord(
                node=rank,
                line=h.line,
                name=name,
                severity=sev,
                origin=origin,
                text=text,
                context=lines_ctx,
                context_first_line=first,
            )
        )
    if exit_code is None:
        codes = [e.code for e in events if isinstance(e, ExitCodeEvent)]
        exit_code = codes[-1] if codes else None
    rec = NodeRecord(
        rank=rank,
        host=host,
        log_path=str(log_path) if log_path else None,
        lines=lines,
        exit_code=exit_code,
        steps_logged=stats.steps_logged,
        last_step=stats.last_step,
        window_steps=stats.window_steps,
        step_time_p50_ms=stats.step_time_p50_ms,
        step_time_mean_ms=stats.step_time_mean_ms,
        tokens_per_sec_per_device=stats.tokens_per_sec_per_device,
        tflops_per_sec_per_device=stats.tflops_per_sec_per_device,
        lag_pct=stats.lag_pct,
        straggler=stats.straggler,
        fatal_errors=len(fatal),
        warnings=len(hits) - len(fatal),
        steps=_STEP_SERIES.validate_python([_step_fields(e) for e in events if isinstance(e, StepEvent)]),
        evals=[
            EvalPoint(step=e.step, loss=_f(e.loss), dialect=e.dialect.value, line=e.line)
            for e in events
            if isinstance(e, EvalEvent)
        ],
        checkpoints=[
            CheckpointRecord(action=e.action.value, step=e.step, seconds=_f(e.seconds), line=e.line)
            for e in events
            if isinstance(e, CheckpointEvent)
        ],
        window=_window_record(
            "ok" if len(window.steps) >= MIN_CLEAN_STEPS else "inconclusive",
            "",
            window.steps,
            window.excluded,
        ),
    )
    return rec, errors


def _loss_curve_verdict(
    metric: MetricValue, run: ResolvedRun, loaded: Any, points: list[tuple[int, float]]
) -> Verdict:
    lc = loaded.config.loss_curve
    expected = f"< {format_value(lc.max_slope)}"
    if points:
        (x0, y0), (xn, yn) = points[0], points[-1]
        detail = f" over {len(points)} points (first={y0:.4f}@{x0}, last={yn:.4f}@{xn})"
    else:
        detail = ""
    gated = run.loss_curve_enforced
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
        f"{'decreasing' if ok else 'NOT decreasing'} (max_slope={format_value(lc.max_slope)})"
    )
    status = (PASS if ok else FAIL) if gated else RECORD
    return Verdict(metric.name, status, expected, metric.value, metric.text, metric.unit, msg, gated)


def finalize_run(
    loaded: Any,
    run_key: str,
    node_events: Sequence[Sequence[LogEvent]],
    *,
    exit_codes: Sequence[int | None] | None = None,
    outcome: RunOutcome | None = None,
    reason: str = "",
    root_cause_node: int | None = None,
    hosts: Sequence[str] | None = None,
    node_logs: Sequence[Path] | None = None,
    node_lines: Sequence[int] | None = None,
    started_at: float | None = None,
    ended_at: float | None = None,
) -> RunRecord:
    """Judge one run from each node's events (index = rank). The only place verdicts are computed."""
    run = resolve_run(loaded, run_key)
    n = len(node_events)
    result = compute_metrics(node_events, run_context(loaded, run, n))
    out, why, root = decide_outcome(
        node_events,
        run.steps,
        exit_codes=exit_codes,
        outcome=outcome,
        reason=reason,
        root_cause_node=root_cause_node,
        final_loss=result.metrics.get("training.final_loss"),
    )
    metrics = dict(result.metrics)
    if run.kind == "smoke":
        # the smoke test checks for error signatures only; its numbers are recorded
        verdicts = judge_all(metrics, None, enforce=False)
    else:
        verdicts = judge_all(metrics, run.cell, enforce=run.enforce, extra_specs=run.extra_specs)
    lc_metric = metrics["training.loss_curve_slope"]
    verdicts = [
        _loss_curve_verdict(lc_metric, run, loaded, result.loss_curve_points)
        if v.metric == lc_metric.name
        else v
        for v in verdicts
    ]
    if out is not RunOutcome.COMPLETE:
        # a failed run's gated metrics that are missing fail with the run's reason, not a generic one
        verdicts = [
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
    nodes: list[NodeRecord] = []
    errors: list[ErrorRecord] = []
    for i, evs in enumerate(node_events):
        host = hosts[i] if hosts and i < len(hosts) else (node_logs[i].name if node_logs else f"node{i}")
        path = node_logs[i] if node_logs and i < len(node_logs) else None
        code = exit_codes[i] if exit_codes and i < len(exit_codes) else None
        lines = node_lines[i] if node_lines and i < len(node_lines) else 0
        rec, errs = _node_record(i, evs, result.node_windows[i], result, host, path, code, lines)
        nodes.append(rec)
        errors += errs
    excluded: dict[int, str] = {}
    for w in result.node_windows:
        for s, r in w.excluded.items():
            excluded.setdefault(s, r)
    failed = out is not RunOutcome.COMPLETE or any(v.status == FAIL for v in verdicts)
    lc = loaded.config.loss_curve
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
        threshold_cell=run.cell_key,
        nodes=nodes,
        window=_window_record(result.window_status, result.window_reason, result.window_steps, excluded),
        metrics=[
            MetricRecord(
                name=m.name, value=_f(m.value), unit=m.unit, text=m.text, absent=m.absent, reason=m.reason
            )
            for m in metrics.values()
        ],
        verdicts=[
            VerdictRecord(
                metric=v.metric,
                status=v.status,
                expected=v.expected,  # type: ignore[arg-type]
                actual=_f(v.actual),
                actual_text=v.actual_text,
                unit=v.unit,
                message=v.message,
                gated=v.gated,
            )
            for v in verdicts
        ],
        errors=errors,
        loss_curve=LossCurveRecord(
            points=result.loss_curve_points,
            slope=_f(lc_metric.value),
            max_slope=lc.max_slope,
            enforce=run.loss_curve_enforced,
        ),
        environment=_environment(node_events, result.devices_per_node),
        notes=result.notes,
    )


# ---------------------------------------------------------------------------------------------------------
# checkpoint resume
# ---------------------------------------------------------------------------------------------------------
def _losses(run: RunRecord) -> dict[int, float]:
    if not run.nodes:
        return {}
    node = next((n for n in run.nodes if n.steps), run.nodes[0])
    return {p.step: p.loss for p in node.steps if p.loss is not None}


SENTINEL_ATOL = 1e-6
SENTINEL_RTOL = 0.01


def _restored_step(run: RunRecord) -> int | None:
    steps = [
        c.step
        for n in run.nodes
        for c in n.checkpoints
        if c.action in (CheckpointAction.RESTORE_START.value, CheckpointAction.RESTORE_DONE.value)
        and c.step is not None
    ]
    return max(steps) if steps else None


def _last_saved_step(run: RunRecord | None) -> int | None:
    if run is None:
        return None
    saves = (CheckpointAction.SAVE_START.value, CheckpointAction.SAVE_DONE.value)
    steps = [c.step for n in run.nodes for c in n.checkpoints if c.action in saves and c.step is not None]
    return max(steps) if steps else None


def judge_checkpoint_resume(loaded: Any, runs: dict[str, RunRecord]) -> None:
    """Add the resume verdicts to the CKPT-2 run.

    * ``checkpoint.resumed``: phase 2 restored phase 1's last checkpoint (step N) and its first step is N+1;
    * ``checkpoint.sentinel_losses``: every step phase 2 shares with the uninterrupted reference run has
      |a - b| <= 1e-6 + 0.01 * |ref| (the first diverging step is named);
    * ``checkpoint.boundary_loss_delta``: upstream's check, the largest |delta| against
      checkpoint_resume.loss_tolerance.
    """
    p2 = runs.get(CKPT2_KEY)
    if p2 is None:
        return
    p1 = runs.get(CKPT1_KEY)
    ref = runs.get(CKPT_REF_KEY)
    tol = loaded.config.checkpoint_resume.loss_tolerance
    restored = _restored_step(p2)
    saved = _last_saved_step(p1)
    l2 = _losses(p2)
    first = min(l2) if l2 else None
    verdicts = [v for v in p2.verdicts if not v.metric.startswith("checkpoint.")]
    if restored is None:
        ok, msg = False, "phase 2 logged no checkpoint restore"
    elif saved is not None and restored != saved:
        ok, msg = False, f"phase 2 restored step {restored}, but phase 1's last checkpoint is step {saved}"
    else:
        ok = first == restored + 1
        msg = (
            f"phase 2 restored step {restored} and its first logged step is {first} (expected {restored + 1})"
        )
    verdicts.append(
        VerdictRecord(
            metric="checkpoint.resumed",
            status=PASS if ok else FAIL,
            expected=f"first step = {restored + 1}" if restored is not None else "a restore",
            actual=float(first) if first is not None else None,
            actual_text=str(first) if first is not None else "—",
            unit="step",
            message=msg,
            gated=True,
        )
    )
    other, label = (ref, "reference") if ref is not None else (p1, "phase 1")
    lo = _losses(other) if other is not None else {}
    shared = sorted(set(lo) & set(l2))
    if ref is not None:
        bad = [s for s in shared if abs(l2[s] - lo[s]) > SENTINEL_ATOL + SENTINEL_RTOL * abs(lo[s])]
        if not shared:
            s_ok, s_msg = False, "phase 2 and the reference run share no step with a finite loss"
        elif bad:
            b = bad[0]
            s_ok, s_msg = (
                False,
                (
                    f"step {b} diverges: phase 2 {l2[b]:.6g} vs reference {lo[b]:.6g} "
                    f"({len(bad)} of {len(shared)} shared steps outside 1e-6 + 1% of the reference)"
                ),
            )
        else:
            s_ok, s_msg = True, f"all {len(shared)} shared steps ({shared[0]}..{shared[-1]}) within 1e-6 + 1%"
        verdicts.append(
            VerdictRecord(
                metric="checkpoint.sentinel_losses",
                status=PASS if s_ok else FAIL,
                expected="|a-b| <= 1e-6 + 0.01*|ref| at every shared step",
                actual=float(len(bad)) if shared else None,
                actual_text=f"{len(bad)} diverging" if shared else "—",
                unit="steps",
                message=s_msg,
                gated=True,
            )
        )
    if shared:
        deltas = [abs(l2[s] - lo[s]) for s in shared]
        worst = max(range(len(shared)), key=lambda i: deltas[i])
        delta, where = (
            deltas[worst],
            f"max over {len(shared)} shared step(s), worst at step {shared[worst]} vs {label}",
        )
    elif lo and l2:
        delta = abs(l2[min(l2)] - lo[max(lo)])
        where = f"adjacent boundary: {label} step {max(lo)} vs phase 2 step {min(l2)}"
    else:
        delta, where = None, f"no finite losses to compare ({label} or phase 2 missing)"
    status = FAIL if delta is None or delta > tol else PASS
    verdicts.append(
        VerdictRecord(
            metric="checkpoint.boundary_loss_delta",
            status=status,
            expected=f"<= {format_value(tol)}",
            actual=delta,
            actual_text=format_value(delta),
            unit="loss",
            message=f"{where} (loss_tolerance)",
            gated=True,
        )
    )
    p2.verdicts = verdicts
    if any(v.status == FAIL for v in verdicts):
        p2.status = "FAIL"


# ---------------------------------------------------------------------------------------------------------
# logs on disk
# ---------------------------------------------------------------------------------------------------------
# MaxText's metrics_file next to a node log: `node0.log` -> `node0.metrics.jsonl`
METRICS_FILE_SUFFIX = ".metrics.jsonl"
# a 3-decimal log loss and the full-precision value agree within half a unit of the last digit
_PRINTED_HALF_UNIT = 5e-4 + 1e-9


def with_full_precision_losses(
    events: Sequence[LogEvent], steps: Sequence[MetricsFileStep]
) -> list[LogEvent]:
    """Train steps take their loss from MaxText's metrics file (full precision) where the two agree with
    the 3-decimal log line; a step whose values disagree keeps the logged loss (the files are not of the
    same run). NaN/Inf stay as logged."""
    full = {m.step: m.loss for m in steps if m.loss is not None and math.isfinite(m.loss)}
    if not full:
        return list(events)
    out: list[LogEvent] = []
    for ev in events:
        if isinstance(ev, StepEvent) and ev.kind is StepKind.TRAIN and math.isfinite(ev.loss):
            exact = full.get(ev.step)
            if exact is not None and abs(exact - ev.loss) <= _PRINTED_HALF_UNIT:
                ev = dataclasses.replace(ev, loss=exact)
        out.append(ev)
    return out


def parse_log_file(path: Path, error_patterns: dict[str, str] | None) -> tuple[list[LogEvent], int]:
    """Every event of one node log, read in chunks, and its line count. When MaxText's metrics file sits
    next to the log (`<name>.metrics.jsonl`), train-step losses come from it at full precision."""
    from cvs_tui.core.parse.parser import NodeLogParser

    parser = NodeLogParser(error_patterns=error_patterns)
    events: list[LogEvent] = []
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                events += parser.feed(chunk)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the log ({exc.strerror or exc})") from None
    events += parser.finish()
    metrics_file = path.with_name(path.stem + METRICS_FILE_SUFFIX)
    if metrics_file.is_file():
        try:
            events = with_full_precision_losses(events, parse_metrics_file(metrics_file))
        except OSError as exc:
            raise UserError(f"{metrics_file}: cannot read the metrics file ({exc.strerror or exc})") from None
    return events, parser.lines_seen


def analyze_node_logs(
    loaded: Any, run_key: str, node_logs: Sequence[Path], hosts: Sequence[str] | None = None
) -> RunRecord:
    """Judge a finished (or crashed) run from its node logs on disk, index = rank."""
    parsed = [parse_log_file(Path(p), loaded.error_patterns) for p in node_logs]
    return finalize_run(
        loaded,
        run_key,
        [evs for evs, _ in parsed],
        hosts=hosts,
        node_logs=[Path(p) for p in node_logs],
        node_lines=[n for _, n in parsed],
    )


_NODE_LOG = re.compile(r"node(\d+)\.log$")


def _logs_in_folder(folder: Path) -> list[Path]:
    ranked = [
        (int(m.group(1)), p) for p in folder.iterdir() if p.is_file() and (m := _NODE_LOG.fullmatch(p.name))
    ]
    if ranked:
        return [p for _, p in sorted(ranked)]
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".log")


def resolve_log_inputs(
    loaded: Any, paths: Sequence[str | Path], run_key: str | None
) -> list[tuple[str, list[Path]]]:
    """(run key, node logs in rank order) for each run the inputs hold. See `cvs-tui analyze --help`."""
    ps = [Path(p) for p in paths]
    if not ps:
        raise UserError("--logs: give one log per node, a folder of node logs, or a cvs-tui run folder")
    missing = [str(p) for p in ps if not p.exists()]
    if missing:
        raise UserError([f"--logs: {m}: no such file or folder" for m in missing])
    if len(ps) == 1 and ps[0].is_dir() and (ps[0] / "logs").is_dir():
        mapping = slug_to_key(loaded)
        out: list[tuple[str, list[Path]]] = []
        problems: list[str] = []
        for sub in sorted(d for d in (ps[0] / "logs").iterdir() if d.is_dir()):
            key = mapping.get(sub.name)
            if key is None:
                problems.append(
                    f"--logs: {sub}: no run of {loaded.path} has slug {sub.name!r} "
                    f"(known: {sorted(mapping)}); use the config the run was made with"
                )
                continue
            logs = _logs_in_folder(sub)
            if logs:
                out.append((key, logs))
        if problems:
            raise UserError(problems)
        if run_key is not None:
            want = resolve_run(loaded, run_key).key
            out = [(k, logs) for k, logs in out if k == want]
            if not out:
                raise UserError(f"--run {run_key!r}: the run folder {ps[0]} holds no logs for that run")
        keys = [SMOKE_KEY] + [s.key for s in loaded.runs] + list(SPECIAL_RUNS)
        order = {k: i for i, k in reversed(list(enumerate(keys)))}  # first place wins (SMOKE runs first)
        out.sort(key=lambda kv: order.get(kv[0], 99))
        if not out:
            raise UserError(f"--logs: {ps[0]}/logs holds no node logs (logs/<run slug>/node<rank>.log)")
        return out
    if len(ps) == 1 and ps[0].is_dir():
        logs = _logs_in_folder(ps[0])
        if not logs:
            raise UserError(f"--logs: {ps[0]} holds no *.log file (expected node<rank>.log, one per node)")
    else:
        dirs = [str(p) for p in ps if p.is_dir()]
        if dirs:
            raise UserError(f"--logs: {dirs[0]} is a folder; give either one folder or one log file per node")
        logs = ps
    if run_key is None:
        if len(loaded.runs) != 1:
            raise UserError(
                f"--run: the config selects {len(loaded.runs)} runs; name the one these logs belong to with "
                f"--run KEY (one of {[s.key for s in loaded.runs] + list(SPECIAL_RUNS)})"
            )
        run_key = loaded.runs[0].key
    return [(resolve_run(loaded, run_key).key, logs)]


def base_results(loaded: Any, *, source: str, hosts: Sequence[str] = ()) -> Results:
    cfg = loaded.config
    return Results(
        tool_version=__version__,
        created_at=time.time(),
        source=source,  # type: ignore[arg-type]
        config_path=str(loaded.path),
        config_name=Path(loaded.path).name,
        mode=str(loaded.mode),
        model_label=str(getattr(loaded, "model_label", "") or ""),
        gpu_name=str(cfg.gpu_name),
        gpus_per_node=int(cfg.gpus_per_node),
        enforce_thresholds=bool(cfg.enforce_thresholds),
        threshold_path=str(loaded.threshold_path) if getattr(loaded, "threshold_path", None) else None,
        hosts=list(hosts),
        metric_definitions={k: d.definition for k, d in METRIC_DEFINITIONS.items()},
        window_definition=WINDOW_DEFINITION,
    )


def _plan_hosts(paths: Sequence[str | Path]) -> list[str] | None:
    """Host names by rank from a run folder's plan.json, when there is a readable one."""
    if len(paths) != 1:
        return None
    plan = Path(paths[0]) / "plan.json"
    try:
        nodes = json.loads(plan.read_text(encoding="utf-8"))["nodes"]
        return [str(n["host"]) for n in sorted(nodes, key=lambda n: int(n["rank"]))]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def analyze_paths(loaded: Any, paths: Sequence[str | Path], run_key: str | None = None) -> Results:
    """Results for every run found in ``paths`` (see resolve_log_inputs)."""
    inputs = resolve_log_inputs(loaded, paths, run_key)
    hosts = _plan_hosts(paths)
    results = base_results(loaded, source="analyze")
    runs: dict[str, RunRecord] = {}
    times: dict[str, tuple[float, float]] = {}
    for key, logs in inputs:
        t0 = time.time()
        runs[key] = analyze_node_logs(loaded, key, logs, hosts if hosts and len(hosts) == len(logs) else None)
        times[key] = (t0, time.time())
    judge_checkpoint_resume(loaded, runs)
    for key, rec in runs.items():
        fails = "; ".join(v.message for v in rec.verdicts if v.status == FAIL)
        results.stages.append(
            StageRecord(
                name=f"analyze:{key}",
                state="passed" if rec.status == "PASS" else "failed",
                detail=rec.reason if rec.outcome != "complete" else fails[:300],
                started_at=times[key][0],
                ended_at=times[key][1],
            )
        )
    results.runs = list(runs.values())
    results.hosts = [n.host for n in results.runs[0].nodes] if results.runs else []
    return results


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
    "SPECIAL_RUNS",
    "analyze_node_logs",
    "analyze_paths",
    "base_results",
    "decide_outcome",
    "finalize_run",
    "judge_checkpoint_resume",
    "resolve_log_inputs",
    "resolve_run",
    "stage_records",
    "verdict_events",
]
