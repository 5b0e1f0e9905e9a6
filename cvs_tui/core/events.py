"""The typed events every source produces and every front-end consumes.

Two families share one stream:

* log events, produced by :mod:`cvs_tui.core.parse` from a node's bytes (one parser per node log);
* run events, produced by the runner (stages, node status, run boundaries, verdicts).

Each event is an immutable dataclass. Log events carry ``line``: the 1-based line number in the node's
log where the record starts, so any front-end can jump to it. Nothing here imports a UI library. Their
JSON form (events.jsonl) is :mod:`cvs_tui.core.event_codec`.

Long because it is the one schema every source and front-end shares, a short dataclass an event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


# ---------------------------------------------------------------------------------------------------------
# Log events (from core.parse)
# ---------------------------------------------------------------------------------------------------------
class StepKind(StrEnum):
    TRAIN = "train"  # a normal `completed step: N, seconds: ...` line
    RAMPUP = "rampup"  # `[Rampup Batch Size Phase], completed step: ...` (no rates; not in perf windows)
    PROFILER = "profiler"  # `completed profiler activation/deactivation step: N` (no seconds; loss only)


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One training step as MaxText logged it. Non-finite numbers are kept as float nan/inf."""

    step: int
    loss: float | None  # None: the line has no loss (a harness or a README cut it off)
    line: int
    kind: StepKind = StepKind.TRAIN
    seconds: float | None = None
    tflops_per_device: float | None = None
    tokens_per_device: float | None = None
    total_weights: float | None = None
    live_slices: int | None = None
    # lm_loss, perplexity, moe_lb_loss, main_model_loss, mtp_loss, indexer_loss, ...
    extras: dict[str, float] = field(default_factory=dict)
    # seconds since the epoch from the record header when it has a full date, else None
    timestamp: float | None = None
    # `file.py:NNN` from the glog header: fingerprints the MaxText vintage
    source: str | None = None


@dataclass(frozen=True, slots=True)
class MetricsFileStep:
    """One line of MaxText's ``metrics_file`` JSON lines (full-precision loss and step time)."""

    step: int
    loss: float | None
    step_time_seconds: float | None
    values: dict[str, float]
    line: int


@dataclass(frozen=True, slots=True)
class TflopsPerStepEvent:
    """`Per train step: Total TFLOPs: X split as W% learnable weight flops and A% attention flops`."""

    total_tflops: float
    weight_pct: float | None
    attention_pct: float | None
    line: int


@dataclass(frozen=True, slots=True)
class SystemInfoEvent:
    """`System Information: Jax Version|Jaxlib Version|Jax Backend: value`; key is jax/jaxlib/backend."""

    key: str
    value: str
    line: int


@dataclass(frozen=True, slots=True)
class ProfilerMarkEvent:
    """A profiler outside MaxText starting or stopping its capture (nsys: `Capture range started in the
    application.`): the host interval of the steps around it holds the profiler's work."""

    what: str  # "nsys capture started" | "nsys capture ended"
    line: int


@dataclass(frozen=True, slots=True)
class ProcessCountEvent:
    """How many processes (hosts) the job has, as one rank's log tells it: exactly (`# of tasks that
    reached the barrier: 8/16`) or at least (orbax's `[process=15]`: 16 or more). Logged when it rises."""

    processes: int
    exact: bool
    line: int


@dataclass(frozen=True, slots=True)
class DevicesEvent:
    """`Num_devices: N, shape (...)`."""

    num_devices: int
    mesh_shape: tuple[int, ...]
    line: int


@dataclass(frozen=True, slots=True)
class ParamsEvent:
    """`number parameters: X billion`."""

    billions: float
    line: int


@dataclass(frozen=True, slots=True)
class MemoryEstimateEvent:
    """Compiled memory estimate (both wordings), GB."""

    total_gb: float
    output_gb: float | None
    temp_gb: float | None
    argument_gb: float | None
    host_temp_gb: float | None
    line: int


@dataclass(frozen=True, slots=True)
class MemStatsEvent:
    """`Memstats: <label>` followed by `Using (GB) used / limit (pct%) on <device>`."""

    label: str
    used_gb: float
    limit_gb: float
    device: str
    line: int


class EvalDialect(StrEnum):
    CURRENT = "current"  # Completed eval after train step N, loss=...
    RUNNING = "running"  # Completed eval step: k, seconds: ..., running loss=... (eval step index)
    MID = "mid"  # eval metrics after step: N, loss=...
    OLD = "old"  # average loss after step=N: eval_step_count=..., eval_loss=...


@dataclass(frozen=True, slots=True)
class EvalStartEvent:
    """`Starting eval after train step N`."""

    step: int
    line: int
    # seconds since the epoch from the record header when it has a full date, else None
    timestamp: float | None = None


@dataclass(frozen=True, slots=True)
class EvalEvent:
    """A finished eval (or a running eval step for the RUNNING dialect; ``step`` is then the eval index)."""

    step: int
    loss: float
    dialect: EvalDialect
    line: int
    perplexity: float | None = None
    # seconds since the epoch from the record header when it has a full date, else None
    timestamp: float | None = None


class CheckpointAction(StrEnum):
    SAVE_WAIT = "save_wait"  # Waiting for step N to finish before checkpoint / Waited X s for step N
    SAVE_START = "save_start"  # Saving checkpoint at step N / Started an asynchronous checkpoint save
    SAVE_BLOCKING_DONE = "save_blocking_done"  # blocking part finished (seconds)
    SAVE_DONE = "save_done"  # blocking + background finished (seconds)
    SAVE_SKIPPED = "save_skipped"  # Checkpoint for step N already exists, skipping save
    WAIT_PREVIOUS = "wait_previous"  # Waiting for previous save to complete took X seconds
    RESTORE_START = "restore_start"  # restoring from this run's directory step N / Loading full state
    RESTORE_DONE = "restore_done"  # Finished load in X seconds / Finished restoring checkpoint in X seconds
    NO_CHECKPOINT = "no_checkpoint"  # No existing checkpoints found, not restoring checkpoint.
    DISABLED = "disabled"  # Checkpointing disabled, not creating checkpoint manager.


@dataclass(frozen=True, slots=True)
class CheckpointEvent:
    action: CheckpointAction
    line: int
    step: int | None = None
    seconds: float | None = None
    dialect: str | None = None  # "orbax-new", "orbax-old", "maxtext", "standard_logger"
    path: str | None = None
    # seconds since the epoch from the record header when it has a full date, else None
    timestamp: float | None = None


class Severity(StrEnum):
    FATAL = "fatal"  # fails the run
    WARNING = "warning"  # shown, never fails a run (benign E-level lines, stuck-thread warnings)


@dataclass(frozen=True, slots=True)
class ErrorHit:
    """A matched error signature.

    ``origin`` is ``builtin`` (default patterns, replaced when the config has ``error_patterns``),
    ``config`` (the config's ``error_patterns``), ``always`` (always-on fatal signatures) or ``benign``.
    """

    name: str
    severity: Severity
    text: str  # the matched record, capped
    line: int
    origin: str


@dataclass(frozen=True, slots=True)
class NonFiniteAbortEvent:
    """`Aborting training due to NaN loss.` / `... Inf loss.`"""

    value: str  # "nan" or "inf"
    line: int


@dataclass(frozen=True, slots=True)
class ExitCodeEvent:
    """`EXIT_CODE=N` (XPK wrapper, or cvs-tui's own launcher trailer)."""

    code: int
    line: int


LogEvent = (
    StepEvent
    | MetricsFileStep
    | TflopsPerStepEvent
    | SystemInfoEvent
    | DevicesEvent
    | ProcessCountEvent
    | ProfilerMarkEvent
    | ParamsEvent
    | MemoryEstimateEvent
    | MemStatsEvent
    | EvalStartEvent
    | EvalEvent
    | CheckpointEvent
    | ErrorHit
    | NonFiniteAbortEvent
    | ExitCodeEvent
)


# ---------------------------------------------------------------------------------------------------------
# Run events (from core.runner and the analysis pipeline). ``run`` is the run key (sweep key, "SMOKE",
# "CKPT-1", "CKPT-2"); ``node`` is the rank.
# ---------------------------------------------------------------------------------------------------------
class StageState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class StageEvent:
    stage: str  # preflight, launch_container, rdma, tokenizer, maxtext_setup, smoke, run:<key>, ...
    state: StageState
    detail: str = ""
    at: float = 0.0  # time.time()


class NodeState(StrEnum):
    WAITING = "waiting"
    CONNECTING = "connecting"
    STARTING = "starting"
    TRAINING = "training"
    STALLED = "stalled"  # follow mode: no progress for a while (shown, never judged; nothing to stop)
    DONE = "done"
    FAILED = "failed"
    HUNG = "hung"
    UNREACHABLE = "unreachable"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class NodeStatusEvent:
    run: str
    node: int
    host: str
    state: NodeState
    detail: str = ""
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class NodeLogEvent:
    """A parsed log event from one node of one run (the stream front-ends consume)."""

    run: str
    node: int
    event: LogEvent


@dataclass(frozen=True, slots=True)
class LogLinesEvent:
    """Raw text lines as they arrived (batched), for log panes. ``first_line`` is the 1-based number."""

    run: str
    node: int
    first_line: int
    lines: tuple[str, ...]


class RunOutcome(StrEnum):
    COMPLETE = "complete"
    FAILED = "failed"
    HUNG = "hung"
    INTERRUPTED = "interrupted"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class RunStartEvent:
    run: str
    total_steps: int
    nodes: tuple[str, ...]
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class RunEndEvent:
    run: str
    outcome: RunOutcome
    reason: str = ""
    root_cause_node: int | None = None
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class StallsEvent:
    """One node's stalls in a judged run (docs/metrics.md, "Stalls and goodput"): the steps, their logged
    seconds and their causes, index for index."""

    run: str
    node: int
    steps: tuple[int, ...]
    seconds: tuple[float, ...]
    causes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class VerdictEvent:
    """One metric verdict of one run, as soon as it is known."""

    run: str
    metric: str
    status: str  # PASS, FAIL, RECORD, N/A
    expected: str
    actual: float | None
    unit: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class SuiteEndEvent:
    passed: bool
    results_path: str | None = None
    report_path: str | None = None
    at: float = 0.0


# ---------------------------------------------------------------------------------------------------------
# Node health events (from core.health): kernel-log findings, per-node health state, GPU telemetry.
# ``node`` is the rank, as in run events.
# ---------------------------------------------------------------------------------------------------------
class HealthState(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    NOT_CHECKED = "not checked"  # the kernel log could not be read: never shown as ok


@dataclass(frozen=True, slots=True)
class HealthFindingEvent:
    """A kernel-log line that matched a health signature, tied to the run/step active at its time."""

    node: int
    host: str
    signature: str
    severity: Severity
    line: str  # the kernel message as logged (one record)
    kernel_time: float  # seconds since boot (the record's monotonic stamp)
    wall_time: float  # seconds since the epoch, mapped from kernel_time
    detail: str = ""  # e.g. "Xid 79 (GPU has fallen off the bus)", "block umc"
    run: str | None = None
    step: int | None = None  # the step in progress on that node, None before its first step


@dataclass(frozen=True, slots=True)
class NodeHealthEvent:
    """A node's health state changed (``reason`` says why it is ``not checked``)."""

    node: int
    host: str
    state: HealthState
    reason: str = ""
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU's telemetry at one instant; None where the tool did not report the value."""

    gpu: int
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None  # junction/hotspot where reported, else edge
    gfx_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    ecc_correctable: int | None = None  # running totals as the tool reports them
    ecc_uncorrectable: int | None = None
    throttled: bool | None = None  # the tool says the GPU is throttled now (thermal, power, VR, ...)
    pcie_width: int | None = None  # the link's current lanes
    pcie_speed_gts: float | None = None  # the link's current speed, GT/s
    throttle_reasons: tuple[str, ...] | None = None  # the active thermal/power reasons (nvidia-smi)
    gfx_clock_max_mhz: float | None = None  # the graphics (SM) clock's maximum
    pcie_width_max: int | None = None  # the most lanes this GPU and slot can train to
    pcie_speed_max_gts: float | None = None  # the fastest speed they can train to, GT/s
    retired_pages: int | None = None  # pages retired for ECC errors (single + double bit)
    remapped_rows: int | None = None  # rows remapped for ECC errors (correctable + uncorrectable)
    repair_pending: bool | None = None  # a row remap or page retirement waits for the next GPU reset
    remap_failed: bool | None = None  # a row remapping has failed on this GPU (ever: NVIDIA's RMA flag)
    unreadable: tuple[str, ...] = ()  # the tool's fields it answered N/A, Not Supported or did not know
    refused: tuple[str, ...] = ()  # those of ``unreadable`` the driver did not know (never asked)


@dataclass(frozen=True, slots=True)
class GpuTelemetryEvent:
    """One sample of every GPU of a node (``tool``: amd-smi, rocm-smi or nvidia-smi)."""

    node: int
    host: str
    tool: str
    samples: tuple[GpuSample, ...]
    at: float = 0.0


HealthEvent = HealthFindingEvent | NodeHealthEvent | GpuTelemetryEvent

# Everything the suite publishes (the bus, events.jsonl, the state reducer); node health included.
RunEvent = (
    StageEvent
    | NodeStatusEvent
    | NodeLogEvent
    | LogLinesEvent
    | RunStartEvent
    | RunEndEvent
    | VerdictEvent
    | StallsEvent
    | SuiteEndEvent
    | HealthFindingEvent
    | NodeHealthEvent
    | GpuTelemetryEvent
)
