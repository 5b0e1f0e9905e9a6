"""The run-level metric sections the run judge (``judge.run.judge_run``) puts on one sheet: devices, the
window's perf figures, scaling and MFU, checkpoint I/O, and the nodes' lag.

Definitions (shown verbatim in report.html and docs/metrics.md) live in ``METRIC_DEFINITIONS``.
The perf metrics come from one steady-state window: warm-up and every step whose host interval holds a
checkpoint save, an eval, a profiler boundary or a rampup step are dropped (MaxText's per-step ``seconds``
is host time and absorbs those stalls), and throughput is tokens (or FLOPs) in the window divided by time
in the window, never a mean of per-step rates.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from cvs_tui.core.config.blocks import Convergence, LossCurve, ScalingBaseline
from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    DevicesEvent,
    LogEvent,
    ProcessCountEvent,
    TflopsPerStepEvent,
)
from cvs_tui.core.judge.definitions import (
    METRIC_DEFINITIONS,
    PEAK_TFLOPS,
    Absence,
    DevicePeak,
    MetricValue,
    device_peak,
    peak_tflops,
)
from cvs_tui.core.judge.stalls import RunStalls
from cvs_tui.core.judge.window import (
    MIN_CLEAN_STEPS,
    WARMUP_STEPS,
    WINDOW_DEFINITION,
    NodeWindow,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# A node whose median step time exceeds the median over nodes by more than this is a straggler.
STRAGGLER_LAG_PCT = 5.0


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
    # the plan's tokens per device per step, for logs that print neither Tokens/s/device nor total_weights
    tokens_per_step: float | None = None


@dataclass(slots=True)
class MetricsOutcome:
    metrics: dict[str, MetricValue]
    node_windows: list[NodeWindow]
    window_steps: list[int]  # the common (all-node) window; every k-th step of it when window_count is set
    window_status: Literal["ok", "inconclusive"]
    window_reason: str
    node_stats: list[NodeStats]
    loss_curve_points: list[tuple[int, float]]
    devices_per_node: int
    notes: list[str]
    stalls: RunStalls | None = None  # None: no node had a baseline to find stalls against
    # how many points the curve had where ``loss_curve_points`` were bounded (None: all of them listed)
    loss_curve_count: int | None = None
    # a window whose ``window_steps`` were bounded: how many steps it has and all of them as inclusive
    # ranges of consecutive steps (None: ``window_steps`` lists every step)
    window_count: int | None = None
    window_ranges: list[tuple[int, int]] | None = None


def percentile(xs: Sequence[float], q: float) -> float:
    """numpy 'linear' interpolation, as upstream."""
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    rank = q / 100.0 * (len(s) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


def _first(events: Sequence[LogEvent], kind: type) -> Any:
    for e in events:
        if isinstance(e, kind):
            return e
    return None


# ---------------------------------------------------------------------------------------------------------
# one function per section of the metrics; they share the run's inputs (RunInputs) and one sheet (Sheet)
# ---------------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Sheet:
    """The metrics computed so far, and the notes for the run record."""

    m: dict[str, MetricValue] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def put(self, name: str, value: float | None, absent: Absence | None = None, reason: str = "") -> None:
        self.m[name] = MetricValue(name, value, METRIC_DEFINITIONS[name].unit, absent, reason)


@dataclass(slots=True)
class RunInputs:
    """What every section reads: each node's events (without step lines, ``judge.node.slim_events``) and
    windows, the nodes that logged train steps, and the device counts."""

    node_events: Sequence[Sequence[LogEvent]]
    ctx: RunContext
    windows: list[NodeWindow]
    with_steps: list[int]  # the nodes that logged train steps
    num_nodes: int
    devices_per_node: int
    total_devices: int
    global_devices: int
    tflops_per_step: float | None  # the 'Per train step' TFLOPs line, when logged

    @property
    def tokens_per_step(self) -> float | None:
        """The plan's tokens per device per step (see tokens_per_device)."""
        return self.ctx.tokens_per_step

    @property
    def ref(self) -> int | None:
        """The node losses are read from: node 0, or the first that logged steps (SPMD losses are global)."""
        return self.with_steps[0] if self.with_steps else None


def run_devices(
    node_events: Sequence[Sequence[LogEvent]], ctx: RunContext, sheet: Sheet
) -> tuple[int, int, int, int, float | None]:
    """(num_nodes, devices per node, total devices, global devices, the 'Per train step' TFLOPs) from the
    first devices and TFLOPs lines over the nodes and the plan's gpus_per_node."""
    devices_ev: DevicesEvent | None = next(
        (d for evs in node_events if (d := _first(evs, DevicesEvent)) is not None), None
    )
    tps_ev: TflopsPerStepEvent | None = next(
        (t for evs in node_events if (t := _first(evs, TflopsPerStepEvent)) is not None), None
    )
    num_nodes = max(ctx.num_nodes, 1)
    devices_per_node = ctx.gpus_per_node
    procs, exact = process_count(node_events)
    if devices_ev is not None and procs > num_nodes and devices_ev.num_devices % procs == 0:
        # `Num_devices` is global: the logs read are some ranks of a bigger job
        devices_per_node = devices_ev.num_devices // procs
        how = "" if exact else "at least "
        sheet.notes.append(
            f"the log reports {devices_ev.num_devices} devices over {how}{procs} processes: "
            f"{devices_per_node} per node; per-device figures hold, totals cover the {num_nodes} node(s) "
            "whose logs were read"
        )
    elif devices_ev is not None and devices_ev.num_devices % num_nodes == 0:
        logged = devices_ev.num_devices // num_nodes
        if logged != ctx.gpus_per_node:
            sheet.notes.append(
                f"the log reports {devices_ev.num_devices} devices over {num_nodes} node(s) "
                f"({logged} per node) but gpus_per_node is {ctx.gpus_per_node}; using {logged}"
            )
        devices_per_node = logged
    total_devices = devices_per_node * num_nodes
    global_devices = devices_ev.num_devices if devices_ev is not None else total_devices
    return num_nodes, devices_per_node, total_devices, global_devices, tps_ev.total_tflops if tps_ev else None


def process_count(node_events: Sequence[Sequence[LogEvent]]) -> tuple[int, bool]:
    """(the job's process count, whether exactly) from the logs' ProcessCountEvents; (0, False) when none
    says. An exact count wins over an 'at least'."""
    exact = [e.processes for evs in node_events for e in evs if isinstance(e, ProcessCountEvent) and e.exact]
    if exact:
        return max(exact), True
    low = [e.processes for evs in node_events for e in evs if isinstance(e, ProcessCountEvent)]
    return (max(low), False) if low else (0, False)


def window_status(
    window_len: int, with_steps: list[int], num_nodes: int, windows: Sequence[NodeWindow], sheet: Sheet
) -> tuple[Literal["ok", "inconclusive"], str]:
    """Whether the common window (``window_len`` steps) of the nodes ``with_steps`` (of ``num_nodes``) is
    enough."""
    if len(with_steps) < num_nodes and with_steps:
        missing = [i for i in range(num_nodes) if i not in with_steps]
        sheet.notes.append(
            f"node(s) {missing} logged no step lines; per-device rates come from the other nodes"
        )
    if not with_steps:
        return "inconclusive", "no timed training step was logged"
    if window_len < MIN_CLEAN_STEPS:
        excluded_n = len({s for i in with_steps for s in windows[i].excluded})
        return (
            "inconclusive",
            f"only {window_len} clean step(s) in the steady-state window, fewer than the minimum "
            f"{MIN_CLEAN_STEPS} ({excluded_n} step(s) excluded as warm-up, checkpoint, eval, profiler, "
            "rampup or stall)",
        )
    return "ok", ""


PERF_METRICS = (
    "training.tflops_per_sec_per_gpu",
    "training.tokens_per_sec_per_gpu",
    "training.tokens_per_sec_total",
    "training.step_time_seconds",
    "training.step_time_mean_ms",
    "training.step_time_p50_ms",
    "training.step_time_p95_ms",
)


def perf_inconclusive(wreason: str, sheet: Sheet) -> tuple[None, None]:
    for k in PERF_METRICS:
        sheet.put(k, None, "inconclusive", f"inconclusive: {wreason}")
    return None, None


def put_perf_figures(
    n: int,
    total: float,
    seconds: Callable[[], Iterable[npt.NDArray[np.float64]]],
    tokens: float | None,
    flops: float | None,
    run: RunInputs,
    sheet: Sheet,
) -> tuple[float | None, float | None]:
    """The perf metrics from the window's ``n`` step seconds (the slowest node's per step) given as their
    ``sum`` (``total``) and ``seconds``: a fresh pass over them a chunk at a time for each call (the
    percentiles are exact order statistics, ``order_stats``), and the tokens and FLOPs summed over the
    window on every node that logged steps (None: some step carried none). Returns (tokens/s in all,
    TFLOP/s per GPU) for scaling and MFU."""
    from cvs_tui.core.judge.order_stats import percentile

    put = sheet.put
    put("training.step_time_seconds", total / n)
    put("training.step_time_mean_ms", 1000.0 * total / n)
    put("training.step_time_p50_ms", 1000.0 * percentile(seconds, n, 50))
    put("training.step_time_p95_ms", 1000.0 * percentile(seconds, n, 95))
    per_gpu, tok_total, tflops_gpu = steady_rates(tokens, flops, total, run)
    if per_gpu is not None:
        put("training.tokens_per_sec_per_gpu", per_gpu)
        put("training.tokens_per_sec_total", tok_total)
    else:
        for k in ("training.tokens_per_sec_per_gpu", "training.tokens_per_sec_total"):
            put(
                k,
                None,
                "not_produced",
                "step lines carry neither Tokens/s/device nor total_weights, and the plan gives no "
                "per_device_batch_size x max_target_length",
            )
    if tflops_gpu is not None:
        put("training.tflops_per_sec_per_gpu", tflops_gpu)
    else:
        put(
            "training.tflops_per_sec_per_gpu",
            None,
            "not_produced",
            "step lines carry no TFLOP/s/device and no 'Per train step' TFLOPs line was logged",
        )
    return tok_total, tflops_gpu


def steady_rates(
    tokens: float | None, flops: float | None, seconds: float, run: RunInputs
) -> tuple[float | None, float | None, float | None]:
    """The window's steady-state throughput, the one place it is computed: (tokens/s per GPU, tokens/s
    in all, TFLOP/s per GPU) from the tokens and FLOPs summed over the window's steps on every node that
    logged steps (None: some step carried none) and the window's time (``seconds``: the slowest node's
    seconds of each window step, summed). Tokens (or FLOPs) in the window over time in the window, never
    a mean of per-step rates."""
    n_dev_nodes = len(run.with_steps)
    per_gpu = tok_total = tflops_gpu = None
    if tokens is not None:
        per_gpu = tokens / n_dev_nodes / seconds
        tok_total = per_gpu * run.total_devices
    if flops is not None:
        tflops_gpu = flops / n_dev_nodes / seconds
    return per_gpu, tok_total, tflops_gpu


def run_device(node_events: Sequence[Sequence[LogEvent]], ctx: RunContext) -> DevicePeak:
    """The run's device (a TPU its logs name, else the config's gpu_name) and its peak TFLOP/s."""
    return device_peak(ctx.gpu_name, ctx.precision, (e for evs in node_events for e in evs))


def _device_text(device: str, gpu_name: str) -> str:
    return f"gpu_name {gpu_name!r}" if device == gpu_name else f"{device} (named by the log)"


def scaling_and_mfu(run: RunInputs, tok_total: float | None, tflops_gpu: float | None, sheet: Sheet) -> None:
    put, ctx = sheet.put, run.ctx
    base = ctx.scaling_baseline
    if base.tokens_per_sec_total <= 0:
        put(
            "training.scaling_efficiency_pct",
            None,
            "feature_off",
            "scaling_baseline.tokens_per_sec_total is 0",
        )
    elif tok_total is None:
        src = sheet.m["training.tokens_per_sec_total"]
        put("training.scaling_efficiency_pct", None, src.absent or "not_produced", src.reason)
    else:
        expected = (run.num_nodes / base.num_nodes) * base.tokens_per_sec_total
        put("training.scaling_efficiency_pct", tok_total / expected * 100.0)
    device, peak = run_device(run.node_events, ctx)
    if peak is None:
        put(
            "training.mfu_pct",
            None,
            "feature_off",
            f"peak TFLOP/s unknown for {_device_text(device, ctx.gpu_name)} at {ctx.precision}",
        )
    elif tflops_gpu is None:
        src = sheet.m["training.tflops_per_sec_per_gpu"]
        put("training.mfu_pct", None, src.absent or "not_produced", src.reason)
    else:
        put("training.mfu_pct", tflops_gpu / peak * 100.0)


def _ckpt_seconds(evs: Sequence[LogEvent], action: CheckpointAction) -> list[float]:
    return [
        e.seconds
        for e in evs
        if isinstance(e, CheckpointEvent) and e.seconds is not None and e.action is action
    ]


def checkpoint_io(run: RunInputs, sheet: Sheet) -> None:
    """Checkpoint save and load seconds (slowest node)."""
    saves: list[float] = []
    loads: list[float] = []
    for evs in run.node_events:
        node_save = _ckpt_seconds(evs, CheckpointAction.SAVE_DONE) or _ckpt_seconds(
            evs, CheckpointAction.SAVE_BLOCKING_DONE
        )
        if node_save:
            saves.append(node_save[-1])
        loads += _ckpt_seconds(evs, CheckpointAction.RESTORE_DONE)
    any_restore = any(
        isinstance(e, CheckpointEvent) and e.action is CheckpointAction.RESTORE_START
        for evs in run.node_events
        for e in evs
    )
    save, load = "training.checkpoint_save_seconds", "training.checkpoint_load_seconds"
    if saves:
        sheet.put(save, max(saves))
    elif run.ctx.checkpointing:
        sheet.put(save, None, "not_produced", "checkpointing is on but no timed save was logged")
    else:
        sheet.put(save, None, "feature_off", "checkpointing not enabled for this run")
    if loads:
        sheet.put(load, max(loads))
    elif any_restore:
        sheet.put(load, None, "not_produced", "a restore started but no load time was logged")
    else:
        sheet.put(load, None, "feature_off", "the run restored no checkpoint")


def with_lag(stats: list[NodeStats]) -> list[NodeStats]:
    """Each node's lag behind the median node, and whether it is a straggler."""
    medians = [s.step_time_p50_ms for s in stats if s.step_time_p50_ms is not None]
    if medians:
        mid = statistics.median(medians)
        for s in stats:
            if s.step_time_p50_ms is not None and mid > 0:
                s.lag_pct = (s.step_time_p50_ms - mid) / mid * 100.0
                s.straggler = len(medians) > 1 and s.lag_pct > STRAGGLER_LAG_PCT
    return stats


__all__ = [
    "METRIC_DEFINITIONS",
    "MIN_CLEAN_STEPS",
    "PEAK_TFLOPS",
    "WARMUP_STEPS",
    "WINDOW_DEFINITION",
    "MetricValue",
    "MetricsOutcome",
    "NodeStats",
    "NodeWindow",
    "RunContext",
    "RunInputs",
    "Sheet",
    "peak_tflops",
    "percentile",
    "steady_rates",
]
