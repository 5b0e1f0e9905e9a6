"""The parts of a RunRecord built from events: each node's record (steps, evals, checkpoints, errors with
their log context, window) and the run's environment facts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from pydantic import TypeAdapter

from cvs_tui.core.events import (
    CheckpointEvent,
    DevicesEvent,
    ErrorHit,
    EvalEvent,
    ExitCodeEvent,
    LogEvent,
    MemoryEstimateEvent,
    NonFiniteAbortEvent,
    ParamsEvent,
    Severity,
    StepEvent,
    SystemInfoEvent,
    TflopsPerStepEvent,
)
from cvs_tui.core.judge.metrics import NodeStats
from cvs_tui.core.judge.series import thin
from cvs_tui.core.judge.window import MIN_CLEAN_STEPS, WARMUP_STEPS, NodeWindow
from cvs_tui.core.results import (
    CheckpointRecord,
    Environment,
    ErrorRecord,
    EvalPoint,
    ExcludedStep,
    NodeRecord,
    StallRecord,
    StepPoint,
    WindowRecord,
    step_ranges,
)

CONTEXT_LINES = 3  # log lines kept on each side of an error hit
MAX_ERRORS_PER_NODE = 200  # a log full of one error must not bloat results.json


def finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _step_fields(e: StepEvent) -> dict[str, object]:
    return {
        "step": e.step,
        "kind": e.kind.value,
        "loss": finite(e.loss),
        # a logged NaN/Inf is named; no loss on the line leaves both None
        "loss_text": None
        if e.loss is None or math.isfinite(e.loss)
        else ("nan" if math.isnan(e.loss) else str(e.loss)),
        "seconds": finite(e.seconds),
        "tokens_per_sec": finite(e.tokens_per_device),
        "tflops_per_sec": finite(e.tflops_per_device),
        "line": e.line,
    }


# one validation call for a node's whole series: a long run has hundreds of thousands of steps
_STEP_SERIES = TypeAdapter(list[StepPoint])


def window_record(
    status: str,
    reason: str,
    steps: list[int],
    excluded: dict[int, str],
    *,
    count: int | None = None,
    ranges: list[tuple[int, int]] | None = None,
) -> WindowRecord:
    """``count`` and ``ranges``: every step of a window whose ``steps`` were bounded (None: all listed)."""
    return WindowRecord(
        status=status,  # type: ignore[arg-type]
        reason=reason,
        steps=steps,
        excluded=[ExcludedStep(step=s, reason=r) for s, r in sorted(excluded.items())],
        min_clean_steps=MIN_CLEAN_STEPS,
        warmup_steps=WARMUP_STEPS,
        step_count=count,
        step_ranges=ranges,
    )


def bounded_window(window: WindowRecord, cap: int) -> WindowRecord:
    """A run's window with every step listed, as ``cvs-tui analyze`` records it with its series bounded at
    ``cap``: up to ``cap`` steps unchanged, else every k-th step (series.thin) with the count and ranges."""
    if len(window.steps) <= cap:
        return window
    return window.model_copy(
        update={
            "steps": thin(window.steps, cap),
            "step_count": len(window.steps),
            "step_ranges": step_ranges(window.steps),
        }
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


def run_environment(node_events: Sequence[Sequence[LogEvent]], devices_per_node: int) -> Environment:
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


def _node_errors(
    rank: int, events: Sequence[LogEvent], log_path: Path | None
) -> tuple[list[ErrorRecord], int, int]:
    """The node's error records (fatal first, capped at MAX_ERRORS_PER_NODE, with their log context, in
    line order), and how many fatal hits and hits in all its events carry."""
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
    return errors, len(fatal), len(hits)


def node_record(
    rank: int,
    events: Sequence[LogEvent],
    window: NodeWindow,
    stats: NodeStats,
    host: str,
    log_path: Path | None,
    exit_code: int | None,
    lines: int,
) -> tuple[NodeRecord, list[ErrorRecord]]:
    """One node's record: its errors (fatal first, capped, with log context), step series, evals,
    checkpoints and window, from its events (the node judge passes its bounded series as the step
    events, ``judge.series``)."""
    errors, fatal, hits = _node_errors(rank, events, log_path)
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
        fatal_errors=fatal,
        warnings=hits - fatal,
        steps=_STEP_SERIES.validate_python(
            [_step_fields(e) for e in (e for e in events if isinstance(e, StepEvent))]
        ),
        evals=[
            EvalPoint(step=e.step, loss=finite(e.loss), dialect=e.dialect.value, line=e.line)
            for e in events
            if isinstance(e, EvalEvent)
        ],
        checkpoints=[
            CheckpointRecord(action=e.action.value, step=e.step, seconds=finite(e.seconds), line=e.line)
            for e in events
            if isinstance(e, CheckpointEvent)
        ],
        window=window_record(
            "ok" if len(window.steps) >= MIN_CLEAN_STEPS else "inconclusive",
            "",
            window.steps,
            window.excluded,
        ),
        stalls=[
            StallRecord(
                step=st.step,
                seconds=st.seconds,
                lost_seconds=st.excess,
                source=st.source,
                cause=st.attribution,
                line=st.line,
            )
            for st in (window.stalls.stalls if window.stalls is not None else ())
        ],
    )
    return rec, errors


__all__ = [
    "CONTEXT_LINES",
    "MAX_ERRORS_PER_NODE",
    "bounded_window",
    "finite",
    "node_record",
    "run_environment",
    "window_record",
]
