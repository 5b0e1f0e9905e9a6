"""Honest training metrics from every node's parsed log.

Definitions (shown verbatim in report.html and docs/metrics.md) live in ``METRIC_DEFINITIONS``.
The perf metrics come from one steady-state window: warm-up and every step whose host interval holds a
checkpoint save, an eval, a profiler boundary or a rampup step are dropped (MaxText's per-step ``seconds``
is host time and absorbs those stalls), and throughput is tokens (or FLOPs) in the window divided by time
in the window, never a mean of per-step rates.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cvs_tui.core.config.blocks import Convergence, LossCurve, ScalingBaseline, TargetMetric
from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    DevicesEvent,
    EvalDialect,
    EvalEvent,
    EvalStartEvent,
    LogEvent,
    StepEvent,
    StepKind,
    TflopsPerStepEvent,
)

# MaxText's first step timings include compilation and tracing; drop steps numbered below this and the
# first this-many logged steps (a resumed run starts at its checkpoint step and warms up again).
WARMUP_STEPS = 3
# Fewest clean steps a perf metric may be computed from. Sized for CPU-size and smoke runs (a 20-step run
# with one checkpoint keeps about 10); a production run keeps hundreds. Below it the perf metrics are
# inconclusive, never a number.
MIN_CLEAN_STEPS = 5
# A node whose median step time exceeds the median over nodes by more than this is a straggler.
STRAGGLER_LAG_PCT = 5.0

# Dense peak TFLOP/s per device, keyed (gpu family, precision). Used for mfu_pct only.
PEAK_TFLOPS: dict[tuple[str, str], float] = {
    ("mi300x", "bf16"): 1307.4,
    ("mi300x", "fp8"): 2614.9,
    ("mi325x", "bf16"): 1307.4,
    ("mi325x", "fp8"): 2614.9,
    ("mi3xx", "bf16"): 1307.4,
    ("mi3xx", "fp8"): 2614.9,
    ("mi35x", "bf16"): 2500.0,
    ("mi35x", "fp8"): 5000.0,
    ("mi350x", "bf16"): 2500.0,
    ("mi350x", "fp8"): 5000.0,
    ("mi355x", "bf16"): 2500.0,
    ("mi355x", "fp8"): 5000.0,
    ("h100", "bf16"): 989.0,
    ("h100", "fp8"): 1979.0,
    ("h200", "bf16"): 989.0,
    ("h200", "fp8"): 1979.0,
}

Absence = Literal["feature_off", "inconclusive", "not_produced", "non_finite"]


@dataclass(frozen=True, slots=True)
class MetricDef:
    unit: str
    definition: str


METRIC_DEFINITIONS: dict[str, MetricDef] = {
    "training.tflops_per_sec_per_gpu": MetricDef(
        "TFLOP/s/GPU",
        "Model TFLOPs each device did in the steady-state window divided by the window's time (sum over "
        "window steps of TFLOP/s/device x seconds, over the sum of seconds); never a mean of per-step rates.",
    ),
    "training.tokens_per_sec_per_gpu": MetricDef(
        "tok/s/GPU",
        "Tokens per device in the steady-state window (Tokens/s/device x seconds per step, or total_weights "
        "/ devices) divided by the window's time: tokens_per_sec_total / all devices.",
    ),
    "training.tokens_per_sec_total": MetricDef(
        "tok/s total",
        "Tokens of every node in the window (each node's per-device tokens x its devices) divided by the "
        "window's time, where each window step takes the slowest node's seconds.",
    ),
    "training.scaling_efficiency_pct": MetricDef(
        "%",
        "tokens_per_sec_total / ((nodes / scaling_baseline.num_nodes) x "
        "scaling_baseline.tokens_per_sec_total)"
        " x 100. N/A when the baseline is 0.",
    ),
    "training.mfu_pct": MetricDef(
        "%",
        "tflops_per_sec_per_gpu / the device's dense peak TFLOP/s for the run's precision x 100. N/A when "
        "the GPU's peak is unknown (CPU, unlisted GPU).",
    ),
    "training.step_time_seconds": MetricDef(
        "s/step",
        "Mean step time over the steady-state window (window time / window steps); each step takes the "
        "slowest node's seconds.",
    ),
    "training.step_time_mean_ms": MetricDef("ms/step", "Mean step time over the steady-state window, in ms."),
    "training.step_time_p50_ms": MetricDef(
        "ms/step", "Median step time over the steady-state window (linear interpolation), in ms."
    ),
    "training.step_time_p95_ms": MetricDef(
        "ms/step", "95th percentile step time over the steady-state window (linear interpolation), in ms."
    ),
    "training.final_loss": MetricDef(
        "loss",
        "Training loss of the last logged step. NaN or Inf there is a failure, never replaced by the last "
        "finite value.",
    ),
    "training.loss_decreased": MetricDef(
        "bool", "1 when the final loss is finite and below the first logged loss, else 0."
    ),
    "training.eval_loss": MetricDef(
        "loss", "Loss of the last completed eval. N/A when eval is not configured (eval_interval <= 0)."
    ),
    "training.steps_to_target": MetricDef(
        "steps",
        "First step whose loss (eval loss when target_metric is eval_loss, or auto and eval ran; else "
        "training loss) is <= convergence.target_value. N/A when target_value <= 0.",
    ),
    "training.time_to_target_seconds": MetricDef(
        "s",
        "Sum of logged step seconds up to and including steps_to_target (compute time, not wall time).",
    ),
    "training.loss_curve_slope": MetricDef(
        "loss/step",
        "Least-squares slope of the sampled training loss (every loss_curve.sample_every steps, the "
        "milestone steps, the first and the last); passes when below loss_curve.max_slope.",
    ),
    "training.checkpoint_save_seconds": MetricDef(
        "s",
        "Seconds of the last completed checkpoint save (orbax 'Finished save', else its blocking part), "
        "slowest node.",
    ),
    "training.checkpoint_load_seconds": MetricDef(
        "s", "Seconds of the slowest node's checkpoint restore ('Finished load' / restoring)."
    ),
}

WINDOW_DEFINITION = (
    f"Steady-state window: train steps with seconds, minus warm-up (step numbers below {WARMUP_STEPS} and "
    f"the first {WARMUP_STEPS} logged steps), minus every step whose host interval holds a checkpoint save, "
    "an eval, a profiler boundary or a rampup step. An event naming step S (a save, an eval, its running "
    "eval steps) drops S, S+1 (the work runs after S's dispatch, inside S+1's interval) and S+2 (pipelining "
    "hands it a catch-up interval that is too short); an event naming no step drops the three steps after "
    "the "
    "last step line written before it (MaxText writes step lines at least one step late). The perf "
    f"metrics use the steps clean on every node; fewer than {MIN_CLEAN_STEPS} of them makes every perf "
    "metric inconclusive (this minimum suits CPU-size and smoke runs; production runs keep hundreds)."
)


@dataclass(slots=True)
class MetricValue:
    name: str
    value: float | None
    unit: str
    absent: Absence | None = None
    reason: str = ""

    @property
    def text(self) -> str:
        return format_value(self.value, self.absent, self.reason)


def format_value(value: float | None, absent: str | None = None, reason: str = "") -> str:
    if absent == "non_finite":
        return reason.split(" ", 1)[0] if reason else "nan"
    if value is None:
        return "—"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4f}" if abs(value) < 1000 else f"{value:.1f}"


@dataclass(slots=True)
class NodeWindow:
    """One node's clean steps and the steps it dropped, with why."""

    steps: list[int] = field(default_factory=list)
    excluded: dict[int, str] = field(default_factory=dict)


@dataclass(slots=True)
class NodeStats:
    rank: int
    steps_logged: int
    last_step: int | None
    window_steps: int
    step_time_p50_ms: float | None
    step_time_mean_ms: float | None
    tokens_per_sec_per_device: float | None
    tflops_per_sec_per_device: float | None
    lag_pct: float | None = None
    straggler: bool = False


@dataclass(slots=True)
class RunContext:
    """What the metrics need to know about the run besides its logs."""

    num_nodes: int
    gpus_per_node: int
    gpu_name: str = ""
    precision: str = "bf16"
    eval_configured: bool = False
    checkpointing: bool = False
    scaling_baseline: ScalingBaseline = field(default_factory=ScalingBaseline)
    convergence: Convergence = field(default_factory=Convergence)
    loss_curve: LossCurve = field(default_factory=LossCurve)


@dataclass(slots=True)
class MetricsOutcome:
    metrics: dict[str, MetricValue]
    node_windows: list[NodeWindow]
    window_steps: list[int]  # the common (all-node) window
    window_status: Literal["ok", "inconclusive"]
    window_reason: str
    node_stats: list[NodeStats]
    loss_curve_points: list[tuple[int, float]]
    devices_per_node: int
    notes: list[str]


def precision_of(maxtext_config: dict[str, Any]) -> str:
    q = str(maxtext_config.get("quantization") or "").lower()
    return "fp8" if "fp8" in q else (q or "bf16")


def peak_tflops(gpu_name: str, precision: str) -> float | None:
    name = gpu_name.lower().strip()
    for family in sorted({k[0] for k in PEAK_TFLOPS}, key=len, reverse=True):
        if family in name:
            return PEAK_TFLOPS.get((family, precision))
    return None


def percentile(xs: Sequence[float], q: float) -> float:
    """numpy 'linear' interpolation, as upstream."""
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    rank = q / 100.0 * (len(s) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


def _is_save(ev: CheckpointEvent) -> bool:
    return ev.action in (
        CheckpointAction.SAVE_WAIT,
        CheckpointAction.SAVE_START,
        CheckpointAction.SAVE_BLOCKING_DONE,
        CheckpointAction.SAVE_DONE,
        CheckpointAction.WAIT_PREVIOUS,
    )


def train_steps(events: Sequence[LogEvent]) -> list[StepEvent]:
    """Step events in log order, last record of a step number wins (a restarted process may re-log)."""
    return [e for e in events if isinstance(e, StepEvent)]


def node_window(events: Sequence[LogEvent]) -> NodeWindow:
    """Clean steps of one node's log: see WINDOW_DEFINITION."""
    win = NodeWindow()
    excluded = win.excluded

    def drop(step: int, reason: str) -> None:
        excluded.setdefault(step, reason)

    last_step: int | None = None
    timed: list[StepEvent] = []
    eval_step: int | None = None  # the train step of the eval in progress (running evals name none)
    for ev in events:
        if isinstance(ev, StepEvent):
            if ev.kind is StepKind.TRAIN:
                if ev.seconds is None:
                    drop(ev.step, "no seconds on the step line")
                else:
                    timed.append(ev)
            else:
                # A profiler boundary or rampup step stalls its own interval and the next ones.
                what = "profiler boundary" if ev.kind is StepKind.PROFILER else "rampup step"
                for k in range(3):
                    drop(ev.step + k, f"{what} at step {ev.step} (line {ev.line})")
            last_step = ev.step
            continue
        what = ""
        explicit: int | None = None
        if isinstance(ev, CheckpointEvent) and _is_save(ev):
            what, explicit = "checkpoint save", ev.step
        elif isinstance(ev, EvalStartEvent):
            what, explicit = "eval", ev.step
            eval_step = ev.step
        elif isinstance(ev, EvalEvent):
            what = "eval"
            explicit = ev.step if ev.dialect is not EvalDialect.RUNNING else eval_step
        if not what:
            continue
        if explicit is not None:
            # the work runs after S's dispatch, inside S+1's interval; pipelining then hands S+2 a
            # catch-up interval that is too short
            reason = f"interval near an {what} at step {explicit} (line {ev.line})"
            for k in range(3):
                drop(explicit + k, reason)
        else:
            # no step named: go by position (a step line is written at least one step late)
            base = -1 if last_step is None else last_step
            reason = f"interval holds an {what} (line {ev.line}, after the line of step {base})"
            for k in (1, 2, 3):
                drop(base + k, reason)
    for i, ev in enumerate(timed):
        if ev.step < WARMUP_STEPS or i < WARMUP_STEPS:
            excluded[ev.step] = "warm-up (compilation and first steps)"
    seen: set[int] = set()
    for ev in timed:
        if ev.step in excluded or ev.step in seen:
            continue
        if not (math.isfinite(ev.seconds or 0.0) and (ev.seconds or 0.0) > 0):
            excluded[ev.step] = "non-positive or non-finite seconds"
            continue
        seen.add(ev.step)
        win.steps.append(ev.step)
    # keep only exclusions of steps that were actually logged, or reasons would name phantom steps
    logged = {e.step for e in events if isinstance(e, StepEvent)}
    win.excluded = {s: r for s, r in sorted(excluded.items()) if s in logged}
    return win


def _per_step(events: Sequence[LogEvent]) -> dict[int, StepEvent]:
    out: dict[int, StepEvent] = {}
    for e in events:
        if isinstance(e, StepEvent) and e.kind is StepKind.TRAIN:
            out[e.step] = e
    return out


def _tokens_per_device(ev: StepEvent, num_devices: int | None) -> float | None:
    if ev.tokens_per_device is not None and ev.seconds is not None and math.isfinite(ev.tokens_per_device):
        return ev.tokens_per_device * ev.seconds
    if ev.total_weights is not None and num_devices:
        return ev.total_weights / num_devices
    return None


def _tflops_per_device(ev: StepEvent, tflops_per_step: float | None) -> float | None:
    if ev.tflops_per_device is not None and ev.seconds is not None and math.isfinite(ev.tflops_per_device):
        return ev.tflops_per_device * ev.seconds
    return tflops_per_step


def _first(events: Sequence[LogEvent], kind: type) -> Any:
    for e in events:
        if isinstance(e, kind):
            return e
    return None


def sample_loss_curve(steps: Sequence[tuple[int, float]], curve: LossCurve) -> list[tuple[int, float]]:
    """Upstream's sampling: every Nth step, milestones, first and last (sorted, deduplicated)."""
    if not steps:
        return []
    every = curve.sample_every if curve.sample_every > 0 else 1
    milestones = set(curve.milestone_steps)
    first, last = steps[0][0], steps[-1][0]
    keep = {s: v for s, v in steps if s % every == 0 or s in milestones or s in (first, last)}
    return sorted(keep.items())


def ols_slope(points: Sequence[tuple[int, float]]) -> float | None:
    n = len(points)
    if n < 2:
        return None
    sx = sum(p[0] for p in points)
    sy = sum(p[1] for p in points)
    sxx = sum(p[0] * p[0] for p in points)
    sxy = sum(p[0] * p[1] for p in points)
    den = n * sxx - sx * sx
    if den == 0:
        return None
    return (n * sxy - sx * sy) / den


def _nonfinite_text(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def compute_metrics(node_events: Sequence[Sequence[LogEvent]], ctx: RunContext) -> MetricsOutcome:
    """Every metric of one run from each node's events (index = rank)."""
    notes: list[str] = []
    m: dict[str, MetricValue] = {}

    def put(name: str, value: float | None, absent: Absence | None = None, reason: str = "") -> None:
        m[name] = MetricValue(name, value, METRIC_DEFINITIONS[name].unit, absent, reason)

    windows = [node_window(evs) for evs in node_events]
    per_step = [_per_step(evs) for evs in node_events]
    with_steps = [i for i, ps in enumerate(per_step) if ps]
    devices_ev: DevicesEvent | None = next(
        (d for evs in node_events if (d := _first(evs, DevicesEvent)) is not None), None
    )
    tps_ev: TflopsPerStepEvent | None = next(
        (t for evs in node_events if (t := _first(evs, TflopsPerStepEvent)) is not None), None
    )
    num_nodes = max(ctx.num_nodes, 1)
    devices_per_node = ctx.gpus_per_node
    if devices_ev is not None and devices_ev.num_devices % num_nodes == 0:
        logged = devices_ev.num_devices // num_nodes
        if logged != ctx.gpus_per_node:
            notes.append(
                f"the log reports {devices_ev.num_devices} devices over {num_nodes} node(s) "
                f"({logged} per node) but gpus_per_node is {ctx.gpus_per_node}; using {logged}"
            )
        devices_per_node = logged
    total_devices = devices_per_node * num_nodes
    global_devices = devices_ev.num_devices if devices_ev is not None else total_devices

    # ---- the common steady-state window --------------------------------------------------------------
    if with_steps:
        common = set(windows[with_steps[0]].steps)
        for i in with_steps[1:]:
            common &= set(windows[i].steps)
        window = sorted(common)
    else:
        window = []
    if len(with_steps) < len(per_step) and with_steps:
        missing = [i for i in range(len(per_step)) if i not in with_steps]
        notes.append(f"node(s) {missing} logged no step lines; per-device rates come from the other nodes")
    if not with_steps:
        wstatus, wreason = "inconclusive", "no timed training step was logged"
    elif len(window) < MIN_CLEAN_STEPS:
        excluded_n = len({s for i in with_steps for s in windows[i].excluded})
        wstatus = "inconclusive"
        wreason = (
            f"only {len(window)} clean step(s) in the steady-state window, fewer than the minimum "
            f"{MIN_CLEAN_STEPS} ({excluded_n} step(s) excluded as warm-up, checkpoint, eval, profiler "
            "or rampup)"
        )
    else:
        wstatus, wreason = "ok", ""

    perf = [
        "training.tflops_per_sec_per_gpu",
        "training.tokens_per_sec_per_gpu",
        "training.tokens_per_sec_total",
        "training.step_time_seconds",
        "training.step_time_mean_ms",
        "training.step_time_p50_ms",
        "training.step_time_p95_ms",
    ]
    tok_total: float | None = None
    tflops_gpu: float | None = None
    if wstatus == "ok":
        step_secs = [max(per_step[i][s].seconds or 0.0 for i in with_steps) for s in window]
        t = sum(step_secs)
        tokens = 0.0
        tokens_ok = True
        flops = 0.0
        flops_ok = True
        for i in with_steps:
            for s in window:
                ev = per_step[i][s]
                tk = _tokens_per_device(ev, global_devices)
                fl = _tflops_per_device(ev, tps_ev.total_tflops if tps_ev else None)
                if tk is None:
                    tokens_ok = False
                else:
                    tokens += tk
                if fl is None:
                    flops_ok = False
                else:
                    flops += fl
        n_dev_nodes = len(with_steps)
        put("training.step_time_seconds", t / len(window))
        put("training.step_time_mean_ms", 1000.0 * t / len(window))
        put("training.step_time_p50_ms", 1000.0 * percentile(step_secs, 50))
        put("training.step_time_p95_ms", 1000.0 * percentile(step_secs, 95))
        if tokens_ok:
            per_gpu = tokens / n_dev_nodes / t
            tok_total = per_gpu * total_devices
            put("training.tokens_per_sec_per_gpu", per_gpu)
            put("training.tokens_per_sec_total", tok_total)
        else:
            for k in ("training.tokens_per_sec_per_gpu", "training.tokens_per_sec_total"):
                put(k, None, "not_produced", "step lines carry neither Tokens/s/device nor total_weights")
        if flops_ok:
            tflops_gpu = flops / n_dev_nodes / t
            put("training.tflops_per_sec_per_gpu", tflops_gpu)
        else:
            put(
                "training.tflops_per_sec_per_gpu",
                None,
                "not_produced",
                "step lines carry no TFLOP/s/device and no 'Per train step' TFLOPs line was logged",
            )
    else:
        for k in perf:
            put(k, None, "inconclusive", f"inconclusive: {wreason}")

    # ---- scaling efficiency and MFU -------------------------------------------------------------------
    base = ctx.scaling_baseline
    if base.tokens_per_sec_total <= 0:
        put(
            "training.scaling_efficiency_pct",
            None,
            "feature_off",
            "scaling_baseline.tokens_per_sec_total is 0",
        )
    elif tok_total is None:
        src = m["training.tokens_per_sec_total"]
        put("training.scaling_efficiency_pct", None, src.absent or "not_produced", src.reason)
    else:
        expected = (num_nodes / base.num_nodes) * base.tokens_per_sec_total
        put("training.scaling_efficiency_pct", tok_total / expected * 100.0)
    peak = peak_tflops(ctx.gpu_name, ctx.precision)
    if peak is None:
        put(
            "training.mfu_pct",
            None,
            "feature_off",
            f"peak TFLOP/s unknown for gpu_name {ctx.gpu_name!r} at {ctx.precision}",
        )
    elif tflops_gpu is None:
        src = m["training.tflops_per_sec_per_gpu"]
        put("training.mfu_pct", None, src.absent or "not_produced", src.reason)
    else:
        put("training.mfu_pct", tflops_gpu / peak * 100.0)

    # ---- loss (node 0, or the first node that logged steps: SPMD losses are global) ------------------
    ref = with_steps[0] if with_steps else None
    losses: list[tuple[int, float]] = []
    if ref is not None:
        seen: dict[int, float] = {}
        for e in node_events[ref]:
            if isinstance(e, StepEvent):
                seen[e.step] = e.loss
        losses = sorted(seen.items())
    if not losses:
        put("training.final_loss", None, "not_produced", "no step line with a loss was logged")
        put("training.loss_decreased", None, "not_produced", "no step line with a loss was logged")
    else:
        first_finite = next((v for _, v in losses if math.isfinite(v)), None)
        last_step, last = losses[-1]
        if not math.isfinite(last):
            txt = _nonfinite_text(last)
            put("training.final_loss", None, "non_finite", f"{txt} at step {last_step}")
            put("training.loss_decreased", 0.0)
        else:
            put("training.final_loss", last)
            put("training.loss_decreased", 1.0 if first_finite is not None and last < first_finite else 0.0)

    # ---- eval ---------------------------------------------------------------------------------------
    evals: list[EvalEvent] = (
        [e for e in node_events[ref] if isinstance(e, EvalEvent)] if ref is not None else []
    )
    if ref is None:
        evals = [e for evs in node_events for e in evs if isinstance(e, EvalEvent)]
    final_evals = [e for e in evals if e.dialect is not EvalDialect.RUNNING] or evals
    if final_evals:
        ev_last = final_evals[-1]
        if math.isfinite(ev_last.loss):
            put("training.eval_loss", ev_last.loss)
        else:
            put("training.eval_loss", None, "non_finite", f"{_nonfinite_text(ev_last.loss)} eval loss")
    elif ctx.eval_configured:
        put("training.eval_loss", None, "not_produced", "eval is configured but no eval result was logged")
    else:
        put("training.eval_loss", None, "feature_off", "eval not configured (eval_interval <= 0)")

    # ---- convergence --------------------------------------------------------------------------------
    conv = ctx.convergence
    if conv.target_value <= 0:
        for k in ("training.steps_to_target", "training.time_to_target_seconds"):
            put(k, None, "feature_off", "convergence.target_value <= 0")
    else:
        use_eval = conv.target_metric is TargetMetric.EVAL_LOSS or (
            conv.target_metric is TargetMetric.AUTO and bool(final_evals)
        )
        pts = [(e.step, e.loss) for e in final_evals] if use_eval else losses
        hit = next((s for s, v in pts if math.isfinite(v) and v <= conv.target_value), None)
        src = "eval loss" if use_eval else "training loss"
        if hit is None:
            finite = [v for _, v in pts if math.isfinite(v)]
            best = f"best {min(finite):.4f}" if finite else "no finite value"
            reason = f"{src} never reached target {conv.target_value} ({best})"
            for k in ("training.steps_to_target", "training.time_to_target_seconds"):
                put(k, None, "not_produced", reason)
        else:
            put("training.steps_to_target", float(hit))
            secs = per_step[ref] if ref is not None else {}
            put(
                "training.time_to_target_seconds",
                sum((e.seconds or 0.0) for s, e in secs.items() if s <= hit),
            )

    # ---- loss curve ---------------------------------------------------------------------------------
    curve_pts = sample_loss_curve(losses, ctx.loss_curve)
    bad = [(s, v) for s, v in curve_pts if not math.isfinite(v)]
    if bad:
        put(
            "training.loss_curve_slope",
            None,
            "non_finite",
            f"{_nonfinite_text(bad[0][1])} loss at step {bad[0][0]}",
        )
    else:
        slope = ols_slope(curve_pts)
        if slope is None:
            put(
                "training.loss_curve_slope",
                None,
                "not_produced",
                f"{len(curve_pts)} sampled loss point(s); a slope needs 2 or more distinct steps",
            )
        else:
            put("training.loss_curve_slope", slope)

    # ---- checkpoint I/O (slowest node) ----------------------------------------------------------------
    saves: list[float] = []
    loads: list[float] = []
    for evs in node_events:
        done = [
            e.seconds
            for e in evs
            if isinstance(e, CheckpointEvent)
            and e.seconds is not None
            and e.action is CheckpointAction.SAVE_DONE
        ]
        blocking = [
            e.seconds
            for e in evs
            if isinstance(e, CheckpointEvent)
            and e.seconds is not None
            and e.action is CheckpointAction.SAVE_BLOCKING_DONE
        ]
        node_save = done or blocking
        if node_save:
            saves.append(node_save[-1])
        loads += [
            e.seconds
            for e in evs
            if isinstance(e, CheckpointEvent)
            and e.seconds is not None
            and e.action is CheckpointAction.RESTORE_DONE
        ]
    any_restore = any(
        isinstance(e, CheckpointEvent) and e.action is CheckpointAction.RESTORE_START
        for evs in node_events
        for e in evs
    )
    if saves:
        put("training.checkpoint_save_seconds", max(saves))
    elif ctx.checkpointing:
        put(
            "training.checkpoint_save_seconds",
            None,
            "not_produced",
            "checkpointing is on but no timed save was logged",
        )
    else:
        put("training.checkpoint_save_seconds", None, "feature_off", "checkpointing not enabled for this run")
    if loads:
        put("training.checkpoint_load_seconds", max(loads))
    elif any_restore:
        put(
            "training.checkpoint_load_seconds",
            None,
            "not_produced",
            "a restore started but no load time was logged",
        )
    else:
        put("training.checkpoint_load_seconds", None, "feature_off", "the run restored no checkpoint")

    # ---- per-node table -------------------------------------------------------------------------------
    stats: list[NodeStats] = []
    for i, ps in enumerate(per_step):
        w = [s for s in windows[i].steps if s in ps]
        secs = [ps[s].seconds or 0.0 for s in w]
        t = sum(secs)
        tk = [_tokens_per_device(ps[s], global_devices) for s in w]
        fl = [_tflops_per_device(ps[s], tps_ev.total_tflops if tps_ev else None) for s in w]
        ok = bool(w) and t > 0
        stats.append(
            NodeStats(
                rank=i,
                steps_logged=len(ps),
                last_step=max(ps) if ps else None,
                window_steps=len(w),
                step_time_p50_ms=1000.0 * percentile(secs, 50) if ok else None,
                step_time_mean_ms=1000.0 * t / len(w) if ok else None,
                tokens_per_sec_per_device=sum(tk) / t if ok and None not in tk else None,  # type: ignore[arg-type]
                tflops_per_sec_per_device=sum(fl) / t if ok and None not in fl else None,  # type: ignore[arg-type]
            )
        )
    medians = [s.step_time_p50_ms for s in stats if s.step_time_p50_ms is not None]
    if medians:
        mid = statistics.median(medians)
        for s in stats:
            if s.step_time_p50_ms is not None and mid > 0:
                s.lag_pct = (s.step_time_p50_ms - mid) / mid * 100.0
                s.straggler = len(medians) > 1 and s.lag_pct > STRAGGLER_LAG_PCT

    return MetricsOutcome(
        metrics={k: m[k] for k in METRIC_DEFINITIONS if k in m},
        node_windows=windows,
        window_steps=window,
        window_status=wstatus,  # type: ignore[arg-type]
        window_reason=wreason,
        node_stats=stats,
        loss_curve_points=[(s, v) for s, v in curve_pts if math.isfinite(v)],
        devices_per_node=devices_per_node,
        notes=notes,
    )
